"""``sflsim check DIR``: check a run's results against the simulator's physics and
bookkeeping (:mod:`sflsim.check`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from sflsim.cli.common import EXIT_FAILED, console, user_errors
from sflsim.errors import SflsimError

#: rounds.csv columns the check cannot do without
_ROUNDS_NEEDED = ("round", "sim_time_s", "round_time_s")
#: clients-table columns the check reads
_CLIENTS_NEEDED = ("round", "client_id", "status", "compute_s", "uplink_s", "downlink_s",
                   "idle_s", "client_flops", "bytes_up", "bytes_down", "energy_j",
                   "compute_energy_j", "radio_energy_j", "idle_energy_j")


def _readable(run_dir: Path) -> None:
    """Raise :class:`SflsimError`, naming the file, when ``run_dir`` is a run that has not
    finished a round yet, or one of its files is empty, cut short, lacks a column the check
    needs or holds text where numbers belong (the check's own messages are for results
    that read as sflsim writes them)."""
    import json

    import pandas as pd

    from sflsim.metrics import results

    summary_path, rounds_path = run_dir / "summary.json", run_dir / "rounds.csv"
    if (run_dir / "scenario.yaml").is_file() and not summary_path.exists() \
            and not rounds_path.exists():
        raise SflsimError(f"{run_dir} holds no finished round yet (scenario.yaml, but no "
                          f"rounds.csv or summary.json): a run still starting, or one stopped "
                          f"before its first round ended; check it once a round has ended")
    if not (summary_path.is_file() and rounds_path.is_file()):
        return  # check_run says what is missing
    try:
        summary = json.loads(summary_path.read_text())
    except ValueError as exc:
        where = f" ({exc.msg}, line {exc.lineno} column {exc.colno})" if isinstance(
            exc, json.JSONDecodeError) else ""
        raise SflsimError(f"{summary_path} cannot be read as JSON{where}: the file is "
                          f"damaged or cut short") from None
    if not isinstance(summary, dict):
        raise SflsimError(f"{summary_path} holds {type(summary).__name__}, not the JSON "
                          f"object sflsim writes: the file is damaged")
    try:
        rounds = results.read_result_csv(rounds_path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise SflsimError(f"{rounds_path} cannot be read as CSV ({str(exc).strip()}): the "
                          f"file is empty, damaged or cut short") from None
    missing = [c for c in _ROUNDS_NEEDED if c not in rounds.columns]
    if missing:
        raise SflsimError(f"{rounds_path} has no column {', '.join(missing)}: its header "
                          f"was edited or cut")
    for column in rounds.columns:
        if column in results.TEXT_COLUMNS or pd.api.types.is_numeric_dtype(rounds[column]):
            continue
        cells = rounds[column]
        bad = cells.notna() & pd.to_numeric(cells, errors="coerce").isna()
        if bad.any():
            i = bad.to_numpy().nonzero()[0][0]
            raise SflsimError(f"{rounds_path}: row {i + 2} (round {rounds['round'].iloc[i]}): "
                              f"{column} is {cells.iloc[i]!r}, not a number: the file was "
                              f"edited or is damaged")
    for table in ("clients", "events"):
        path = results.run_table_path(run_dir, table)
        if path is not None and path.is_dir() and not any(path.glob("*.parquet")):
            raise SflsimError(f"{path} holds no Parquet file: the table's files were deleted "
                              f"or never written; the check needs them")
    if results.run_table_path(run_dir, "clients") is not None:
        have = set(results.run_table_columns(run_dir, "clients"))
        missing = [c for c in _CLIENTS_NEEDED if c not in have]
        if missing:
            raise SflsimError(f"{results.run_table_path(run_dir, 'clients')} has no column "
                              f"{', '.join(missing)}: the table is damaged or not sflsim's")


def check(
    directory: Annotated[Path, typer.Argument(
        help="A results directory of `sflsim run` (it holds rounds.csv, summary.json, "
        "scenario.yaml and the clients and events tables).", metavar="DIR",
        show_default=False)],
) -> None:
    """Check a run's results against the simulator's own physics and bookkeeping.

    Per device and round: energy at most peak power x round time, and each part (compute,
    radio, idle) within its own power x round time; nothing of capacity one (a device's
    compute, one direction of its radio, a server slot beyond server.slots) runs two
    activities at once; a transfer lasts at least its bits over the highest rate its link
    could give; the clients table agrees with the events, rounds.csv with the clients
    table and the server events, summary.json with rounds.csv; simulated time only moves
    forward and every event lies inside its round. Floats compare within a relative
    tolerance of 1e-9 plus 1e-9 (s, J, FLOPs or bytes).

    Prints one line per violation (file, round, device or actor, the numbers) and exits
    with status 1 if there is any, else prints one "ok" line and exits with 0."""
    from sflsim.check import check_run, summary_line

    with user_errors():
        _readable(directory)
        try:
            found = check_run(directory)
        except (ValueError, KeyError, TypeError) as exc:  # a file edited or cut by hand
            raise SflsimError(f"{directory}: a results file cannot be read as sflsim writes "
                              f"it ({type(exc).__name__}: {exc}); it may have been edited or "
                              f"cut short") from None
    for violation in found:
        console.print(escape(str(violation)), highlight=False)
    console.print(escape(summary_line(directory, found)), highlight=False)
    if found:
        raise typer.Exit(EXIT_FAILED)
