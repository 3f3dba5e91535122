"""``sflsim check`` of a sweep: every point checked, one line each, and a total.

A sweep folder holds ``sweep.csv`` and ``points/``; each point's run is checked as a
run of its own (:func:`sflsim.checks.check_run`). A point that did not run (failed,
or not yet) is listed as unchecked and fails the sweep's check, as does a point with a
violation, a file that cannot be read, no row in ``sweep.csv``, or a row whose status,
algorithm, name, seed or final numbers are not its run's ``summary.json``, or whose axis
values its run's scenario contradicts; so does a
``sweep.csv`` that is missing, lacks a column (an axis of its ``sweep.yaml``, and
``config`` and ``seed`` where that has ``seeds``), lists a point twice or has a ``config``
whose points differ in more than their seed. The points not run
yet (``pending``) share one line and do not fail the check; the other points get a line
each, the first :data:`MAX_LINES`, then a count.
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


def _points(folder: Path) -> tuple[list[tuple[str, Path | None, str, dict | None]], list[str],
                                   bool]:
    """(point, its results folder or None, why it has none, its ``sweep.csv`` row or None)
    for every point of the sweep: the rows of ``sweep.csv`` and any other folder of
    ``points/``; what is wrong with ``sweep.csv`` as a whole (missing, unreadable, a
    column missing, a point with several rows); and whether ``sweep.csv`` was read (if
    not, a point without a row is not a problem of its own)."""
    from sflsim.metrics.columns import SWEEP_LEAD_COLUMNS, SWEEP_SUMMARY_COLUMNS
    from sflsim.metrics.results import read_result_csv

    problems: list[str] = []
    read = False
    try:
        table = read_result_csv(folder / "sweep.csv")
        read = True
    except FileNotFoundError:
        table = pd.DataFrame()
        problems.append(f"sweep.csv: missing; `sflsim sweep {folder / 'sweep.yaml'} -o {folder}` "
                        f"writes it again from the finished points")
    except (OSError, ValueError, pd.errors.EmptyDataError, SflsimError) as exc:
        table = pd.DataFrame()
        problems.append(f"sweep.csv: cannot be read ({exc})")
    if read and "point" not in table.columns:  # another table written over it
        has = ", ".join(map(str, table.columns[:6])) + (" ..." if len(table.columns) > 6 else "")
        problems.append(f"sweep.csv: not a sweep table (no column point; it has {has}): it "
                        f"was replaced or edited; `sflsim sweep {folder / 'sweep.yaml'} -o "
                        f"{folder}` writes it again from the finished points")
        table, read = pd.DataFrame(), False
    if len(table.columns):
        missing = [c for c in (*SWEEP_LEAD_COLUMNS, "algorithm", *SWEEP_SUMMARY_COLUMNS) if c not in table]
        if missing:
            problems.append(f"sweep.csv: no column {', '.join(missing)}, which sflsim writes in "
                            f"every sweep table")
        problems += _against_spec(folder, table)
        if "point" in table:
            twice = table["point"][table["point"].duplicated()].astype(str).unique().tolist()
            if twice:
                problems.append(f"sweep.csv: {plural(len(twice), 'point')} with several rows "
                                f"({_span(twice)})")
    out: dict[str, tuple[Path | None, str, dict | None]] = {}
    for row in table.to_dict("records"):
        point = str(row.get("point", "?"))
        run_dir = row.get("run_dir")
        path = folder / str(run_dir) if isinstance(run_dir, str) and run_dir else \
            folder / "points" / point
        status = str(row.get("status", ""))
        gone = "missing: its folder is gone" if status == "completed" else "not run"
        # a point that failed before its run began keeps only its error.txt
        ran = path.is_dir() and (status == "completed" or (path / "scenario.yaml").is_file())
        why = "" if ran else f"{gone} (sweep.csv: status {status or 'unknown'}" + (
            f": {str(row.get('error'))[:120]}" if isinstance(row.get("error"), str) else "") + ")"
        out[point] = (path if ran else None, why, row)
    for path in sorted((folder / "points").glob("*")):
        if path.is_dir() and path.name not in out:
            out[path.name] = (path, "", None)
    return [(p, path, why, row) for p, (path, why, row) in sorted(out.items())], problems, read


def _against_spec(folder: Path, table: pd.DataFrame) -> list[str]:
    """What in ``sweep.csv`` contradicts the ``sweep.yaml`` beside it (as ``sflsim sweep``
    keeps it): a column of an axis missing, ``config`` and ``seed`` missing where it has
    ``seeds``; points of one ``config`` with other axis values or one seed twice."""
    import yaml

    from sflsim.metrics.columns import SWEEP_CONFIG_COLUMN, sweep_axis_column

    try:
        spec = yaml.safe_load((folder / "sweep.yaml").read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []  # a sweep.yaml is the run's record, not needed to check the points
    if not isinstance(spec, dict):
        return []
    axes = [sweep_axis_column(str(a)) for a in spec.get("axes") or {}]
    seeded = bool(spec.get("seeds"))
    need = [*axes, *([SWEEP_CONFIG_COLUMN, "seed"] if seeded else [])]
    missing = [c for c in need if c not in table]
    if missing:
        return [f"sweep.csv: no column {', '.join(missing)}, though sweep.yaml "
                f"{'sweeps it' if len(missing) == 1 else 'sweeps them'}"
                + (" (its axes, and config and seed for its seeds)" if seeded else "")]
    if not seeded:
        return []
    wrong = []
    for config, rows in table.groupby(SWEEP_CONFIG_COLUMN, sort=True):
        differ = [a for a in axes if a != "seed" and rows[a].astype(str).nunique() > 1]
        twice = rows["seed"][rows["seed"].duplicated()].astype(str).unique().tolist()
        what = [*([f"with other {', '.join(differ)}"] if differ else []),
                *([f"with seed {', '.join(twice)} twice"] if twice else [])]
        if what:
            points = _span(rows["point"].astype(str).tolist())
            wrong.append(f"sweep.csv: config {config} has points ({points}) {'; '.join(what)}: "
                         f"one configuration's points differ only in their seed")
    return wrong


def _cell(value: object) -> float:
    """A number of a row or a summary: NaN for an empty cell or null."""
    return float("nan") if value is None or value == "" else float(value)


def _row_disagrees(row: dict, summary: dict | None) -> list[str]:
    """What in a point's ``sweep.csv`` row disagrees with its run's ``summary.json``: the
    status, algorithm, name or seed; a completed row's final number."""
    from sflsim.checks.report import close, g
    from sflsim.metrics.columns import SWEEP_SUMMARY_COLUMNS

    if summary is None:
        return []
    wrong = []
    status, ran = str(row.get("status", "")), str(summary.get("status", ""))
    if (status == "completed") != (ran == "completed"):
        wrong.append(f"status {status}, but summary.json says {ran}")
    for name in ("algorithm", "name", "seed"):
        if name in row and name in summary and str(row[name]) != str(summary[name]):
            wrong.append(f"{name} {row[name]}, but summary.json gives {summary[name]}")
    for name in (c for c in SWEEP_SUMMARY_COLUMNS if c in row and status == "completed"):
        try:
            have, want = _cell(row[name]), _cell(summary.get(name))
        except (TypeError, ValueError):
            wrong.append(f"{name} {row[name]!r} is not a number")
            continue
        same = (np.isnan(have) and np.isnan(want)) or (
            have == want if not (np.isfinite(have) and np.isfinite(want)) else close(have, want))
        if not same:
            shown = "null (nothing measured)" if np.isnan(want) else g(want)
            wrong.append(f"{name} {g(have)}, but summary.json gives {shown}")
    return wrong


def _axes_disagree(row: dict, scenario: object) -> list[str]:
    """The axis cells of a point's ``sweep.csv`` row that its run's scenario contradicts:
    a number or a text cell where the scenario holds another number or text at that
    dotted path (cells of other forms, a mapping as JSON, a quantity with its unit, are
    not compared: the run stores them resolved)."""
    from sflsim.checks.report import close
    from sflsim.metrics.columns import SWEEP_LEAD_COLUMNS, SWEEP_SUMMARY_COLUMNS

    fixed = {*SWEEP_LEAD_COLUMNS, *SWEEP_SUMMARY_COLUMNS, "algorithm", "config",
             "algorithm_config"}
    data = scenario.model_dump(mode="json") if hasattr(scenario, "model_dump") else {}
    wrong = []
    for column in (c for c in row if c not in fixed):
        cell, value = row[column], data
        for key in str(column).split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if cell is None or cell == "" or cell == "null" or value is None \
                or isinstance(value, (dict, list)):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            same = str(cell).lower() == str(value).lower() or not isinstance(cell, str)
        else:
            try:
                same = bool(close(float(cell), float(value)))
            except (TypeError, ValueError):
                continue  # a quantity with its unit ("500 ms"): stored resolved
        if not same:
            wrong.append(f"{column} {cell}, but its scenario.yaml gives {value}")
    return wrong


def _check_point(point: str, path: Path | None, why: str, row: dict | None,
                 has_table: bool) -> tuple[str, bool]:
    """The line of one point that has run (or should have), and whether it passed."""
    from sflsim.checks import read_run, run_tables
    from sflsim.checks.report import report_lines

    if path is None:
        return f"{point}: {why}", False
    try:
        tables = read_run(path)
        found = run_tables(tables)
    except SflsimError as exc:
        return f"{point}: error: {exc}", False
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return (f"{point}: error: a results file of {path} cannot be read as sflsim writes it "
                f"({type(exc).__name__}: {exc})"), False
    done = int((tables.rounds["round"] >= 1).sum())
    so_far = (" (stopped before it ended: no process is writing it)" if tables.stopped
              else " (in progress)" if tables.in_progress else "")
    status = "" if row is None else str(row.get("status", ""))
    if tables.in_progress and status == "completed":  # sweep.csv says it finished
        return (f"{point}: error: sweep.csv says completed, but its summary.json is missing or "
                f"says it is still running; {plural(done, 'round')} checked"), False
    if found:
        first = report_lines(found, 1)
        cause = [line for line in first if line.startswith("likely cause")]
        return (f"{point}: {plural(len(found), 'violation')} in {plural(done, 'round')}{so_far}; "
                f"first: {first[0]}" + (f"; {cause[0]}" if cause else "")), False
    if row is None and has_table:
        return (f"{point}: error: sweep.csv has no row for it (a row was deleted, or the "
                f"point is left from an earlier sweep.yaml)"), False
    wrong = [] if row is None else [*_row_disagrees(row, tables.summary),
                                    *_axes_disagree(row, tables.scenario)]
    if wrong:
        return f"{point}: error: sweep.csv's row disagrees with its run: {'; '.join(wrong)}", \
            False
    return f"{point}: ok, {plural(done, 'round')}{so_far}", True


def check_sweep(folder: Path) -> tuple[list[str], bool]:
    """One line per point of the sweep in ``folder`` and a total; and whether every point
    that has run passed and ``sweep.csv`` is sound (points not run yet are listed, and do
    not fail the check: as for a run in progress, what is complete is checked).

    Raises:
        SflsimError: the folder lists no point.
    """
    points, problems, has_table = _points(folder)
    if not points:
        raise SflsimError(f"{folder} is a sweep folder without points (sweep.csv lists none "
                          f"and points/ is empty): nothing to check")
    lines, oks, pending = [], [], []  # lines: the points with a problem
    for point, path, why, row in points:
        status = "" if row is None else str(row.get("status", ""))
        if status == "pending" and (path is None or not (path / "summary.json").is_file()):
            pending.append(point)  # not run yet: one line for them all, below
            continue
        line, ok = _check_point(point, path, why, row, has_table)
        (oks if ok else lines).append(line)
    if len(lines) > MAX_LINES:
        lines[MAX_LINES:] = [f"... and {plural(len(lines) - MAX_LINES, 'more point', spec=',')} "
                             f"with a problem not shown"]
    if len(lines) + len(oks) <= MAX_LINES:
        lines = sorted(oks + lines)  # in point order (ids of one width)
    elif oks:
        lines.insert(0, f"{plural(len(oks), 'point', spec=',')} ok ({_span(oks)})")
    if pending:
        lines.append(f"{plural(len(pending), 'point', spec=',')} not run yet ({_span(pending)}; "
                     f"sweep.csv: status pending), not checked: "
                     f"`sflsim sweep {folder / 'sweep.yaml'} -o {folder}` runs them and keeps "
                     f"the finished points")
    ran = len(points) - len(pending)
    keep = "keeps" if len(oks) == 1 else "keep"
    lines = problems + lines
    but = f", but {plural(len(problems), 'problem')} with sweep.csv" if problems else ""
    lines.append(f"{len(oks):,} of {plural(ran, 'point', spec=',')}"
                 f"{' run so far' if pending else ''} of {folder} {keep} the simulator's physics "
                 f"and bookkeeping{but}")
    return lines, len(oks) == ran and not problems


def _span(points: list[str]) -> str:
    """``p000, p001, p002 ... p099``: the first three of ``points`` and the last."""
    names = [p.split(":")[0] for p in points]
    return ", ".join(names[:3]) + (f" ... {names[-1]}" if len(names) > 3 else "")

