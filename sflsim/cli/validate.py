"""``sflsim validate FILE``: check a scenario without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sflsim.cli.common import console, user_errors
from sflsim.config import load_scenario


def validate(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: a.b=value (repeatable).")] = None,
) -> None:
    """Check a scenario file (schema, units, profile names, end layers, dataset files,
    model vs data) without running it."""
    from sflsim.runner import build_backbone, load_data

    with user_errors():
        scenario = load_scenario(file, set_ or [])
        build_backbone(scenario, load_data(scenario), seed=0)
    groups = ", ".join(f"{g.count}x {g.profile}@l{g.end_layer}/{g.link}"
                       for g in scenario.devices.values())
    console.print(f"[green]ok[/] {file}: {scenario.algorithm.name}, {scenario.num_clients} "
                  f"clients ({groups}), {scenario.training.rounds} rounds")
