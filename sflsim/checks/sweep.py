"""``sflsim check`` of a sweep: every point checked, one line each, and a total.

A sweep folder holds ``sweep.csv`` and ``points/``; each point's run is checked as a
run of its own (:func:`sflsim.checks.check_run`). A point that did not run (failed,
or not yet) is listed as unchecked and fails the sweep's check, as does a point with a
violation, a file that cannot be read, no row in ``sweep.csv``, or a completed row whose
final numbers are not its run's ``summary.json``. The points not run yet (``pending``)
share one line; the other points get a line each, the first :data:`MAX_LINES`, then a
count.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sflsim.errors import SflsimError
from sflsim.text import plural

#: lines of points shown, then a count of the rest (as a run's check caps its violations)
MAX_LINES = 20


def is_sweep(folder: Path) -> bool:
    """Whether ``folder`` is a sweep's results folder (``sweep.csv`` or ``points/``,
    and no run of its own)."""
    return folder.is_dir() and not (folder / "scenario.yaml").is_file() and (
        (folder / "sweep.csv").is_file() or (folder / "points").is_dir())


def _points(folder: Path) -> list[tuple[str, Path | None, str, dict | None]]:
    """(point, its results folder or None, why it has none, its ``sweep.csv`` row or None)
    for every point of the sweep: the rows of ``sweep.csv`` and any other folder of
    ``points/``."""
    from sflsim.metrics.results import read_result_csv

    out: dict[str, tuple[Path | None, str, dict | None]] = {}
    try:
        table = read_result_csv(folder / "sweep.csv")
    except (OSError, ValueError, pd.errors.EmptyDataError, SflsimError):
        table = pd.DataFrame()
    for row in table.to_dict("records"):
        point = str(row.get("point", "?"))
        run_dir = row.get("run_dir")
        path = folder / str(run_dir) if isinstance(run_dir, str) and run_dir else \
            folder / "points" / point
        status = str(row.get("status", ""))
        gone = "missing: its folder is gone" if status == "completed" else "not run"
        why = "" if path.is_dir() else f"{gone} (sweep.csv: status {status or 'unknown'}" + (
            f": {str(row.get('error'))[:120]}" if isinstance(row.get("error"), str) else "") + ")"
        out[point] = (path if path.is_dir() else None, why, row)
    for path in sorted((folder / "points").glob("*")):
        if path.is_dir() and path.name not in out:
            out[path.name] = (path, "", None)
    return [(p, path, why, row) for p, (path, why, row) in sorted(out.items())]


def _row_disagrees(point: str, row: dict | None, summary: dict | None) -> str | None:
    """What in the point's ``sweep.csv`` row disagrees with its run's ``summary.json``
    (no row; a completed row's final number other than the run's), or None."""
    from sflsim.checks.report import close, g
    from sflsim.sweep.run import SUMMARY_COLUMNS

    if row is None:
        return (f"{point}: error: sweep.csv has no row for it (a row was deleted, or the "
                f"point is left from an earlier sweep.yaml)")
    if summary is None or row.get("status") != "completed":
        return None
    wrong = []
    for name in (c for c in SUMMARY_COLUMNS if c in row):
        have, want = row[name], summary.get(name)
        try:
            have = float("nan") if have is None or have == "" else float(have)
            want = float("nan") if want is None else float(want)
        except (TypeError, ValueError):
            wrong.append(f"{name} {have!r} is not a number")
            continue
        if np.isnan(have) != np.isnan(want) or not close(have, want):
            wrong.append(f"{name} {g(have)}, but summary.json gives {g(want)}")
    if not wrong:
        return None
    return f"{point}: error: sweep.csv's row disagrees with its run: " + "; ".join(wrong)


def check_sweep(folder: Path) -> tuple[list[str], bool]:
    """One line per point of the sweep in ``folder`` and a total; and whether every
    point passed.

    Raises:
        SflsimError: the folder lists no point.
    """
    from sflsim.checks import read_run, run_tables
    from sflsim.checks.report import report_lines

    points = _points(folder)
    if not points:
        raise SflsimError(f"{folder} is a sweep folder without points (sweep.csv lists none "
                          f"and points/ is empty): nothing to check")
    lines, oks, passed, pending = [], [], 0, []  # lines: the points with a problem
    for point, path, why, row in points:
        status = "" if row is None else str(row.get("status", ""))
        if status == "pending" and (path is None or not (path / "summary.json").is_file()):
            pending.append(point)  # not run yet: one line for them all, below
            continue
        if path is None:
            lines.append(f"{point}: {why}")
            continue
        try:
            tables = read_run(path)
            found = run_tables(tables)
        except SflsimError as exc:
            lines.append(f"{point}: error: {exc}")
            continue
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            lines.append(f"{point}: error: a results file of {path} cannot be read as sflsim "
                         f"writes it ({type(exc).__name__}: {exc})")
            continue
        done = int((tables.rounds["round"] >= 1).sum())
        so_far = " (in progress)" if tables.in_progress else ""
        if tables.in_progress and status == "completed":  # sweep.csv says it finished
            lines.append(f"{point}: error: sweep.csv says completed, but its summary.json "
                         f"is missing or says it is still running; {plural(done, 'round')} checked")
            continue
        disagrees = _row_disagrees(point, row, tables.summary)
        if disagrees and not found:
            lines.append(disagrees)
            continue
        if not found:
            passed += 1
            oks.append(f"{point}: ok, {plural(done, 'round')}{so_far}")
            continue
        first = report_lines(found, 1)
        cause = [line for line in first if line.startswith("likely cause")]
        lines.append(f"{point}: {plural(len(found), 'violation')} in {plural(done, 'round')}"
                     f"{so_far}; first: "
                     f"{first[0]}" + (f"; {cause[0]}" if cause else ""))
    if len(lines) > MAX_LINES:
        lines[MAX_LINES:] = [f"... and {plural(len(lines) - MAX_LINES, 'more point', spec=',')} "
                             f"with a problem not shown"]
    if len(lines) + len(oks) <= MAX_LINES:
        lines = sorted(oks + lines)  # in point order (ids of one width)
    elif oks:
        lines.insert(0, f"{plural(len(oks), 'point', spec=',')} ok ({_span(oks)})")
    if pending:
        lines.append(f"{plural(len(pending), 'point', spec=',')} not run yet ({_span(pending)}; "
                     f"sweep.csv: status "
                     f"pending), not checked: `sflsim sweep {folder / 'sweep.yaml'} -o {folder}` "
                     f"runs them and keeps the finished points")
    keep = "keeps" if passed == 1 else "keep"
    lines.append(f"{passed:,} of {plural(len(points), 'point', spec=',')} of {folder} {keep} the "
                 f"simulator's physics and bookkeeping")
    return lines, passed == len(points)


def _span(points: list[str]) -> str:
    """``p000, p001, p002 ... p099``: the first three of ``points`` and the last."""
    names = [p.split(":")[0] for p in points]
    return ", ".join(names[:3]) + (f" ... {names[-1]}" if len(names) > 3 else "")

