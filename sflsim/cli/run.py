"""``sflsim run FILE -o DIR``: simulate a scenario, show progress, write results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sflsim.cli.common import console, err_console, user_errors
from sflsim.config import load_scenario


class RichProgress:
    """Draws the runner's progress: one bar over all training batches, a line per round."""

    def __init__(self) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True)
        self.task = None
        self.rounds = 0

    def start(self, total_batches: int, rounds: int) -> None:
        self.rounds = rounds
        self.task = self.bar.add_task(f"round 1/{rounds}", total=total_batches)

    def advance(self) -> None:
        self.bar.advance(self.task)

    def round_done(self, row: dict) -> None:
        r = row["round"]
        acc = row["server_accuracy"]
        shown = "not evaluated" if math.isnan(acc) else (
            f"server acc {acc:.3f}  client acc {row['client_accuracy']:.3f}")
        self.bar.console.print(
            f"round {r}/{self.rounds}  sim {row['sim_time_s']:.1f} s  "
            f"wall {row['wall_time_s']:.0f} s  {shown}"
        )
        self.bar.update(self.task, description=f"round {min(r + 1, self.rounds)}/{self.rounds}")


def run(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Results directory (default: runs/<scenario name>).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: a.b=value (repeatable).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Simulate a scenario and train its models; write rounds.csv, clients.csv, events.csv,
    summary.json and the resolved scenario.yaml to the output directory."""
    from sflsim.runner import run_scenario  # torch is imported only when running

    with user_errors():
        scenario = load_scenario(file, set_ or [])
        out = output or Path("runs") / scenario.name
        console.print(f"running {escape(scenario.name)}: {scenario.algorithm.name}, "
                      f"{scenario.num_clients} clients, {scenario.training.rounds} rounds "
                      f"-> {escape(str(out))}")
        progress = None if quiet else RichProgress()
        try:
            if progress is None:
                result = run_scenario(scenario, out)
            else:
                with progress.bar:
                    result = run_scenario(scenario, out, progress=progress)
        except KeyboardInterrupt:
            err_console.print(f"interrupted: the completed rounds are kept in {escape(str(out))}")
            raise typer.Exit(130) from None
    console.print(summary_table(result.summary))
    console.print(f"results in {escape(str(out))}/ (rounds.csv, clients.csv, events.csv, summary.json"
                  + (", early_exit.csv" if result.early_exit is not None else "") + ")")


def summary_table(summary: dict) -> Table:
    """A short table of the run's final numbers."""
    table = Table(title=f"{escape(summary['name'])} ({summary['algorithm']})", show_header=False)
    by_layer = summary["final_accuracy_by_end_layer"]
    for key in sorted(k for k in by_layer if k.startswith("server_accuracy_l")):
        layer = key.rsplit("_l", 1)[1]
        table.add_row(f"end layer {layer} accuracy (server / client)",
                      f"{by_layer[key]:.4f} / {by_layer[f'client_accuracy_l{layer}']:.4f}")
    table.add_row("final accuracy (server / client)",
                  f"{summary['final_server_accuracy']:.4f} / {summary['final_client_accuracy']:.4f}")
    table.add_row("simulated time", f"{summary['sim_time_s']:.2f} s")
    table.add_row("wall time", f"{summary['wall_time_s']:.1f} s")
    table.add_row("bytes up / down", f"{summary['bytes_up']:.3e} / {summary['bytes_down']:.3e}")
    table.add_row("FLOPs client / server",
                  f"{summary['client_flops']:.3e} / {summary['server_flops']:.3e}")
    table.add_row("client energy", f"{summary['client_energy_j']:.1f} J")
    return table
