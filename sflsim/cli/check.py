"""``sflsim check DIR``: check a run's results, or every point of a sweep, against the
simulator's physics and bookkeeping (:mod:`sflsim.checks`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from sflsim.cli.common import EXIT_FAILED, console, user_errors
from sflsim.errors import SflsimError


def _say(line: str) -> None:
    console.print(escape(line), highlight=False, soft_wrap=True)


def check(
    directory: Annotated[Path, typer.Argument(
        help="A results directory of `sflsim run` (it holds rounds.csv, summary.json, "
        "scenario.yaml and the clients and events tables), or a sweep's folder (sweep.csv, "
        "points/): every point is checked.", metavar="DIR", show_default=False)],
) -> None:
    """Check a run's results against the simulator's own physics and bookkeeping.

    Every number is worked out again from the scenario, the profiles the run kept and
    the event times: each compute and server job's time from its FLOPs and the
    device's rate and slowdown (or its stage_latency table, or the cost model by
    operation); each transfer's from its bytes and its hop's rate (a shared hop's fair
    shares replayed); no server job, send or backward pass before its data arrives,
    no download before the aggregation; every wait for a busy resource, and the queue
    columns their sums; cut-off work at a deadline or an offline instant and only
    then; each client's times and energy (power x time per state) from its events;
    capacity one, server slots, time moving forward; every column present and a
    number; the tables' sums and the summary. Floats compare within 1e-9 relative,
    plus 1e-12 of the magnitude of the simulated times behind them, plus 1e-9.

    Prints at most 20 violations (file, round, device or actor, the numbers), how many
    more there are, the likely cause when one input explains most, and a verdict; exit
    status 1 on a violation, 0 if none. A run in progress is checked for its finished
    rounds, and says so. A sweep's folder gets one line per point and a total."""
    from sflsim.checks import read_run, report_lines, run_tables, verdict
    from sflsim.checks.sweep import check_sweep, is_sweep

    with user_errors():
        if is_sweep(directory):
            lines, ok = check_sweep(directory)
            for line in lines:
                _say(line)
            if not ok:
                raise typer.Exit(EXIT_FAILED)
            return
        if directory.is_dir() and not any((directory / name).exists() for name in (
                "scenario.yaml", "sweep.yaml")) and directory.parent.name != "points":
            raise SflsimError(f"{directory} is neither a run's results folder (scenario.yaml, "
                              f"rounds.csv, summary.json: `sflsim run SCENARIO -o "
                              f"{directory}`) nor a sweep's (sweep.csv, points/: `sflsim "
                              f"sweep SWEEP.yaml -o {directory}`): nothing to check")
        try:
            tables = read_run(directory)
            found = run_tables(tables)
        except (ValueError, KeyError, TypeError, IndexError) as exc:  # edited by hand
            raise SflsimError(f"{directory}: a results file cannot be read as sflsim writes "
                              f"it ({type(exc).__name__}: {exc}); it may have been edited or "
                              f"cut short") from None
    for line in report_lines(found):
        _say(line)
    _say(verdict(tables, directory, found))
    if found:
        raise typer.Exit(EXIT_FAILED)
