"""``sflsim export DIR --csv``: CSV copies of the Parquet tables of a run or of a sweep's runs."""

from __future__ import annotations

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
) -> None:
    """Write CSV copies of the Parquet tables (events, clients) of every results directory
    in DIR, for tools that read only CSV; a copy newer than its table is kept."""
    from sflsim.metrics.export import export_csv
    from sflsim.metrics.results import check_output_folder

    if not csv:
        print_error("name the format to write: --csv (the only one)")
        raise typer.Exit(USER_ERROR)
    with user_errors():
        if to is not None:
            check_output_folder(to, option="--to")
        kept = written = 0
        for copy in export_csv(directory, to):
            if copy.written:
                written += 1
                console.print(f"wrote {escape(str(copy.csv))}", highlight=False)
            else:
                kept += 1
        if not written:
            console.print(f"nothing to write: the CSV {'copy is' if kept == 1 else 'copies are'} "
                          "newer than the tables" if kept else f"nothing to write: no Parquet tables in "
                          f"{escape(str(directory))} (runs written before Parquet have CSV "
                          "tables already)", highlight=False)
