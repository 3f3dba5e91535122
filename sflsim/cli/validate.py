"""``sflsim validate FILE``: check a scenario without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from sflsim.cli.common import console, user_errors
from sflsim.config import load_scenario
from sflsim.config.load import scenario_errors
from sflsim.data.presence import check_dataset_files, dataset_files_missing
from sflsim.shipped import scenario_path
from sflsim.text import plural


def validate(
    file: Annotated[Path, typer.Argument(
        help="Scenario YAML file, or the name of a shipped scenario (quickstart).")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: a.b=value (repeatable).")] = None,
) -> None:
    """Check a scenario file (schema, units, profile names, end layers, dataset files,
    model vs data, device memory) without running it.

    A scenario the loader refuses is reported before torch is imported (a second, not the
    seconds torch takes); the checks against the built models and data need torch."""
    with user_errors():
        path = scenario_path(file)
        scenario = load_scenario(path, set_ or [])
        with scenario_errors(path, set_ or []):  # a missing dataset, told before torch loads
            check_dataset_files(scenario)
        fetch = scenario.dataset.download and dataset_files_missing(scenario)
        if not fetch:
            from sflsim.runner import build  # torch: only for a scenario that loads

            with scenario_errors(path, set_ or []):  # their errors name the file, as the loader's
                build(scenario)  # data, partition, models, memory and algorithm checks
    groups = ", ".join(f"{g.count}x {g.profile}@l{g.end_layer}/{g.link}"
                       for g in scenario.devices.values())
    console.print(f"[green]ok[/] {escape(str(path))}: {scenario.algorithm.name}, "
                  f"{plural(scenario.num_clients, 'client')} ({groups}), "
                  f"{plural(scenario.training.rounds, 'round')}")
    if fetch:
        console.print(f"note: {escape(scenario.dataset.name)} is not downloaded yet "
                      f"(dataset.download: true): validate never downloads; `sflsim run` "
                      f"fetches it into {escape(str(scenario.dataset.data_root or 'data'))}, "
                      f"and the checks against the data and the built model (memory, "
                      f"clients per sample) run then", highlight=False)
