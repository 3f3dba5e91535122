"""``sflsim export DIR --csv``: CSV copies of the Parquet tables of a run or of a sweep's runs;
``sflsim export DIR --trace FILE``: a run's event trace as Chrome Trace Event JSON."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from sflsim.cli.common import (
    USER_ERROR,
    console,
    path_option,
    print_error,
    user_errors,
)
from sflsim.errors import SflsimError
from sflsim.text import plural


def export(
    directory: Annotated[Path, typer.Argument(
        help="A results directory of `sflsim run`, or a directory holding some (a sweep "
        "directory: its points).", metavar="DIR", show_default=False)],
    csv: Annotated[bool, typer.Option(
        "--csv", help="Write events.csv and clients.csv from events.parquet and "
        "clients.parquet, as runs wrote them before Parquet.")] = False,
    to: Annotated[Path | None, typer.Option(
        "--to", **path_option("--to"),
        help="Write the copies under this directory, at the same paths relative "
        "to DIR (default: beside the tables).")] = None,
    trace: Annotated[Path | None, typer.Option(
        "--trace", **path_option("--trace", "file"),
        help="Write the run's events as Chrome Trace Event JSON to this file (open it in "
        "Perfetto or chrome://tracing): a track per device, link direction and server "
        "slot, a slice per activity (ts, dur in microseconds of simulated time; FLOPs, "
        "bytes in its args), a marker per round. DIR is one run's results.")] = None,
) -> None:
    """Write CSV copies of the Parquet tables (events, clients) of every results directory
    in DIR, for tools that read only CSV (--csv; a copy newer than its table is kept),
    or a run's event trace as Chrome Trace Event JSON (--trace FILE). A run whose tables
    are missing (it completed rounds but has neither events.parquet nor events.csv, say)
    is an error (exit status 2), after the other runs' copies are written."""
    from sflsim.metrics.export import export_csv, results_dirs
    from sflsim.metrics.results import check_not_held, check_output_folder, hold_folder

    if not csv and trace is None:
        print_error("name the format to write: --csv (CSV copies of the tables) or --trace "
                    "FILE (Chrome Trace Event JSON of the events)")
        raise typer.Exit(USER_ERROR)
    if to is not None and not csv:
        print_error("--to names where the CSV copies go: it applies with --csv only (--trace "
                    "takes the file to write)")
        raise typer.Exit(USER_ERROR)
    if trace is not None:
        with user_errors():
            export_trace(directory, trace)
        if not csv:
            return
    with user_errors():
        if to is not None:
            check_output_folder(to, option="--to")
        runs = results_dirs(directory)
        check_not_held(directory, option="")  # a run or sweep still writing its tables
        lacking = [(run_dir, missing) for run_dir in runs if (missing := missing_tables(run_dir))]
        targets = {run_dir: (run_dir if to is None else to / run_dir.relative_to(directory))
                   for run_dir in runs}
        refuse_writing_tables(runs, targets, to)
        kept = written = 0
        # one run, sweep or export writes a results folder at a time
        with hold_folder(directory if to is None else to, option="" if to is None else "--to"):
            for run_dir in runs:
                if any(run_dir == d for d, _ in lacking):
                    continue
                with hold_folder(run_dir, option="") if to is None and run_dir != directory \
                        else contextlib.nullcontext():
                    for copy in export_csv(run_dir, targets[run_dir]):
                        if copy.written:
                            written += 1
                            console.print(f"wrote {escape(str(copy.csv))}", highlight=False)
                        else:
                            kept += 1
        if lacking:
            run_dir, missing = lacking[0]
            more = (f" ({plural(len(lacking) - 1, 'other run')} too: "
                    f"{', '.join(str(d) for d, _ in lacking[1:4])}"
                    f"{', ...' if len(lacking) > 4 else ''})" if len(lacking) > 1 else "")
            done = "; the copies of the other runs are written" if written or kept else ""
            raise SflsimError(f"{run_dir} has no {' and no '.join(missing)} although it "
                              f"completed rounds: its tables are missing{more}; run it again "
                              f"to have them{done}")
        if not written:
            console.print(f"nothing to write: the CSV {'copy is' if kept == 1 else 'copies are'} "
                          "newer than the tables" if kept else f"nothing to write: no Parquet tables in "
                          f"{escape(str(directory))} (runs written before Parquet have CSV "
                          "tables already)", highlight=False)


def export_trace(run_dir: Path, trace: Path) -> None:
    """Write the Chrome trace of the run in ``run_dir`` to ``trace`` and say what it holds.

    Raises:
        SflsimError: ``run_dir`` is not one run's results (a sweep directory is named as
            such), a run or sweep still writes it, it has no events, or ``trace`` is a
            folder, lies inside a table's folder, is one of the run's own files, or cannot
            be written.
    """
    from sflsim.metrics.chrome_trace import write_chrome_trace
    from sflsim.metrics.results import check_not_held, check_output_file, read_result

    check_not_held(run_dir, option="")  # a run still writing (it may have no summary yet)
    read_result(run_dir)  # "a sweep directory, not one run's results; give one of its points"
    # a folder, a path in a table's folder, a file the run wrote
    check_output_file(trace, option="--trace", example="trace.json")
    written = write_chrome_trace(run_dir, trace)
    console.print(f"wrote {escape(str(written.path))}: {plural(written.slices, 'slice')} on "
                  f"{plural(written.tracks, 'track')}, {plural(written.rounds, 'round marker')}",
                  highlight=False, soft_wrap=True)


def missing_tables(run_dir: Path) -> list[str]:
    """The tables (``events.parquet``, ``clients.parquet``) that the run in ``run_dir``
    should have and lacks in both formats: a run that completed a round writes both
    (its ``summary.json`` counts the rounds, else its ``rounds.csv`` lists them)."""
    from sflsim.metrics.results import RUN_TABLES, read_result_csv, run_table_path
    from sflsim.sweep.execute import read_summary

    summary = read_summary(run_dir) or {}
    done = summary.get("rounds_completed")
    if not isinstance(done, int):
        try:
            done = int((read_result_csv(run_dir / "rounds.csv", usecols=["round"])["round"]
                        >= 1).sum())
        except Exception:  # noqa: BLE001  (no readable rounds.csv: nothing says rounds ran)
            done = 0
    if done < 1:
        return []
    return [f"{name}.parquet" for name in RUN_TABLES if run_table_path(run_dir, name) is None]


def refuse_writing_tables(runs: list[Path], targets: dict[Path, Path], to: Path | None) -> None:
    """Refuse copies that would land where they damage a run's tables: inside a table's
    folder of Parquet files (every file there is read as part of the table), or over
    the ``events.csv`` or ``clients.csv`` that is the table itself of a run written
    before Parquet (``--to`` another run's folder).

    Raises:
        SflsimError: naming the folder or file and the way on.
    """
    from sflsim.metrics.export import MARKERS
    from sflsim.metrics.results import RUN_TABLES

    tables = [os.path.realpath(run_dir / f"{name}.parquet") for run_dir in runs
              for name in RUN_TABLES if (run_dir / f"{name}.parquet").is_dir()]
    for run_dir, out in targets.items():
        where = os.path.realpath(out)
        for table in tables:
            if where == table or where.startswith(table + os.sep):
                raise SflsimError(f"--to {to}: the copies of {run_dir} would go into the table "
                                  f"folder {table}, every file of which is read as part of the "
                                  f"table; choose a folder outside the tables")
        if to is None or not any((out / marker).exists() for marker in MARKERS):
            continue
        for name in RUN_TABLES:
            if (out / f"{name}.csv").is_file() and not (out / f"{name}.parquet").exists():
                raise SflsimError(f"--to {to}: the copy of {run_dir}'s {name} table would "
                                  f"write over {out / f'{name}.csv'}, the {name} table of the "
                                  f"run in {out} (written before Parquet); choose another --to")

