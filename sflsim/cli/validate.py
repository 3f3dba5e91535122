"""``sflsim validate FILE``: check a scenario without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from sflsim.cli.common import console, user_errors
from sflsim.config import load_scenario
from sflsim.config.load import scenario_errors
from sflsim.shipped import scenario_path


def validate(
    file: Annotated[Path, typer.Argument(
        help="Scenario YAML file, or the name of a shipped scenario (quickstart).")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: a.b=value (repeatable).")] = None,
) -> None:
    """Check a scenario file (schema, units, profile names, end layers, dataset files,
    model vs data, device memory) without running it."""
    from sflsim.runner import build

    with user_errors():
        path = scenario_path(file)
        scenario = load_scenario(path, set_ or [])
        with scenario_errors(path, set_ or []):  # their errors name the file, as the loader's
            build(scenario)  # data, partition, models, memory and algorithm checks; no training
    groups = ", ".join(f"{g.count}x {g.profile}@l{g.end_layer}/{g.link}"
                       for g in scenario.devices.values())
    console.print(f"[green]ok[/] {escape(str(path))}: {scenario.algorithm.name}, {scenario.num_clients} "
                  f"clients ({groups}), {scenario.training.rounds} rounds")
