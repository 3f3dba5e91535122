"""``sflsim check DIR``: check a run's results against the simulator's physics and
bookkeeping (:mod:`sflsim.metrics.check`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from sflsim.cli.common import EXIT_FAILED, console, user_errors


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
    from sflsim.metrics.check import check_run, summary_line

    with user_errors():
        found = check_run(directory)
    for violation in found:
        console.print(escape(str(violation)), highlight=False)
    console.print(escape(summary_line(directory, found)), highlight=False)
    if found:
        raise typer.Exit(EXIT_FAILED)
