"""``sflsim compare DIR...``: one table of accuracy, time-to-accuracy, time, bytes, FLOPs, energy."""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from sflsim.cli.common import console, err_console, user_errors
from sflsim.text import plural

if TYPE_CHECKING:
    import pandas as pd


class TableFormat(str, Enum):
    table = "table"
    csv = "csv"
    markdown = "markdown"
    latex = "latex"


def compare(
    dirs: Annotated[list[Path], typer.Argument(
        help="Results directories of `sflsim run`, or sweep directories (their completed points).",
        show_default=False)],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the table here: as --format says, CSV by default "
        "(the table is printed too).")] = None,
    target: Annotated[float, typer.Option(
        help="Target accuracy for time-to-accuracy, a fraction (0.7 = 70%).")] = 0.7,
    fmt: Annotated[TableFormat, typer.Option(
        "--format", help="table: print it (and -o writes CSV); csv: the numbers, with "
        "mean, std, n and 95% interval columns over seeds; markdown, latex: for a paper, "
        "units in the headers, mean ± std cells. Written to -o, else printed.",
        case_sensitive=False)] = TableFormat.table,
    each_run: Annotated[bool, typer.Option(
        "--each-run", help="One row per run: the seeds of a configuration are not "
        "aggregated.")] = False,
) -> None:
    """Compare runs: final accuracy, simulated time to reach --target accuracy, total simulated
    time, bytes up + down, client and server FLOPs and client energy, one row per run. The
    seeds of a configuration (the points of a sweep with seeds) are one row: mean ± std
    over them (sample std), their count and, in CSV, the 95% t interval of the mean."""
    # pandas is imported only when comparing
    from sflsim.metrics.compare import aggregate_runs, compare_runs
    from sflsim.metrics.paper_table import render
    from sflsim.metrics.results import check_output_file, write_text

    with user_errors():
        if output is not None:
            check_output_file(output)
        dirs, notes = distinct_runs(dirs)
        for note in notes:
            err_console.print(f"note: {escape(note)}", highlight=False)
        table = compare_runs(dirs, target)
        if not each_run and table["config"].duplicated().any():  # several seeds of one
            table = aggregate_runs(table)
        if fmt is TableFormat.table:
            shown = rich_table(table, target)
            # never squeeze columns away on a narrow terminal: long lines wrap, nothing is lost
            width = Measurement.get(console, console.options.update_width(1000), shown).maximum
            Console(width=max(console.width, width), emoji=False).print(shown)
        text = render(table, "csv" if fmt is TableFormat.table else fmt.value, target)
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            write_text(output, text)
            console.print(f"wrote {output}", highlight=False)
        elif fmt is not TableFormat.table:
            typer.echo(text, nl=False)


def distinct_runs(dirs: list[Path]) -> tuple[list[Path], list[str]]:
    """``dirs`` with each run once, and a note for each one left out: a folder given
    twice (the same folder however written: ``runs/a``, ``runs/a/``, ``./runs/a``), a
    run that is also a completed point of a sweep folder given (the sweep lists it), or
    the points of a sweep that did not complete (pending, failed, interrupted)."""
    from sflsim.errors import SflsimError
    from sflsim.metrics.compare import completed_points, is_sweep_dir, read_sweep

    first: dict[Path, Path] = {}
    kept: list[Path] = []
    notes: list[str] = []
    for folder in dirs:
        key = Path(folder).resolve()
        if key in first:
            same = "" if str(first[key]) == str(folder) else f" (as {first[key]})"
            notes.append(f"{folder} is given twice{same}; it is listed once")
            continue
        first[key] = folder
        kept.append(folder)
    points: dict[Path, Path] = {}  # a sweep's completed point -> the sweep folder
    for folder in kept:
        if is_sweep_dir(folder):
            try:
                table = read_sweep(folder)
            except SflsimError:
                continue  # compare_runs says what is wrong with it
            done = completed_points(table)
            for path in done["path"]:
                points.setdefault(Path(path).resolve(), folder)
            left = table["status"][table["status"] != "completed"].value_counts()
            if len(left) and len(done):
                out = ", ".join(f"{n} {status}" + (" (not run yet)" if status == "pending" else "")
                                for status, n in sorted(left.items()))
                notes.append(f"sweep {folder}: the table has its "
                             f"{plural(len(done), 'completed point')}; left out: {out}")
    out = []
    for folder in kept:
        sweep = points.get(Path(folder).resolve())
        if sweep is not None and not is_sweep_dir(folder):
            notes.append(f"{folder} is a point of the sweep {sweep}, also given; it is listed "
                         f"once, with the sweep")
            continue
        out.append(folder)
    return out, notes


def rich_table(table: pd.DataFrame, target: float) -> Table:
    """The comparison as a rich table; a target never reached shows as "never", and "n/a"
    where a run has no accuracy (timing-only). An aggregated table (one row per
    configuration, :func:`~sflsim.metrics.compare.aggregate_runs`) shows ``mean ± std``
    cells (:func:`~sflsim.metrics.paper_table.display_table`)."""
    if "n" in table.columns:
        return _aggregated_table(table, target)
    shown = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    headers = ["run", "algorithm", "accuracy\n(%)", f"time to\n{100 * target:g}% (s)",
               "sim. time\n(s)", "up+down\n(MB)", "client\nGFLOP", "server\nGFLOP",
               "client\nenergy (J)"]
    for i, header in enumerate(headers):
        if i < 2:
            shown.add_column(header, no_wrap=True)
        else:
            shown.add_column(header, justify="right", no_wrap=True)
    for _, row in table.iterrows():
        run = row["run"] if row["status"] in ("completed", "") else f"{row['run']} ({row['status']})"
        tta = ("n/a" if math.isnan(row["final_accuracy_pct"])  # no accuracy: timing-only
               else "never" if math.isnan(row["time_to_target_s"]) else _fmt(row["time_to_target_s"]))
        shown.add_row(escape(run), escape(str(row["algorithm"])), _fmt(row["final_accuracy_pct"], 2), tta,
                      _fmt(row["sim_time_s"]), _fmt(row["bytes_mb"]), _fmt(row["client_gflop"]),
                      _fmt(row["server_gflop"]), _fmt(row["client_energy_j"]))
    return shown


def _aggregated_table(table: pd.DataFrame, target: float) -> Table:
    """One row per configuration: its seeds and ``mean ± std`` of each number."""
    from sflsim.metrics.paper_table import display_table

    frame = display_table(table, target)
    shown = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for i, header in enumerate(frame.columns):
        shown.add_column(escape(header).replace(" (", "\n("), no_wrap=True,
                         justify="left" if i < 2 else "right")
    for row in frame.itertuples(index=False):
        shown.add_row(*(escape(str(c)) for c in row))
    return shown


def _fmt(value: float, decimals: int | None = None) -> str:
    """A number for reading: fixed decimals, thousands separators, "n/a" for missing (as
    ``sflsim run`` and ``sflsim sweep`` write it)."""
    if value is None or math.isnan(value):
        return "n/a"
    if decimals is not None:
        return f"{value:.{decimals}f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"
