"""``sflsim validate FILE``: check a scenario without running it; ``--algorithms`` lists the
algorithms a scenario can name and where each comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sflsim.cli.common import console, print_table, print_warning, refuse_warnings, user_errors
from sflsim.config import load_scenario
from sflsim.config.algorithms import CAPABILITIES, is_builtin
from sflsim.config.load import input_warnings, scenario_errors
from sflsim.data.presence import check_dataset_files, dataset_files_missing
from sflsim.errors import ConfigError
from sflsim.shipped import scenario_path
from sflsim.text import plural


def validate(
    file: Annotated[Path | None, typer.Argument(
        help="Scenario YAML file, or the name of a shipped scenario (quickstart).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: a.b=value (repeatable).")] = None,
    algorithms: Annotated[bool, typer.Option(
        "--algorithms", help="List the algorithms a scenario can name: built in, from "
        "entry points, and those the scenario's algorithm.module registers.")] = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse input warnings as errors (a bare number far outside real "
        "hardware, such as uplink_bps: 10): one line each, exit status 2, as `sflsim run "
        "--strict` would.")] = False,
) -> None:
    """Check a scenario file (schema, units, profile names, end layers, dataset files,
    model vs data, device memory) without running it.

    A scenario the loader refuses is reported before torch is imported (a second, not the
    seconds torch takes); the checks against the built models and data need torch."""
    with user_errors():
        if file is None:
            if not algorithms:
                raise ConfigError("give a scenario FILE to check, or --algorithms to list the "
                                  "algorithms")
            print_algorithms()
            return
        path = scenario_path(file)
        with input_warnings((lambda _: None) if strict else print_warning) as said:
            scenario = load_scenario(path, set_ or [])
        if strict:
            refuse_warnings(said)
        with scenario_errors(path, set_ or []):  # a missing dataset, told before torch loads
            check_dataset_files(scenario)
        fetch = scenario.dataset.download and dataset_files_missing(scenario)
        if not fetch:
            from sflsim.runner import build  # torch: only for a scenario that loads

            with scenario_errors(path, set_ or []), input_warnings(  # as the loader's
                    (lambda _: None) if strict else print_warning) as built:
                build(scenario)  # data, partition, models, memory and algorithm checks
            if strict:
                refuse_warnings(built)
    groups = ", ".join(f"{g.count}x {g.profile}@l{g.end_layer}/{g.link}"
                       for g in scenario.devices.values()) or f"fleet {scenario.fleet}"
    name = scenario.algorithm.name
    if not is_builtin(name):
        from sflsim.config.user_algorithms import source_of

        name = f"{name} ({source_of(name)})"
    n = scenario.num_clients
    k = scenario.training.participants(n)
    per_round = f", {k} of {n} clients per round" if k < n else ""
    console.print(f"[green]ok[/] {escape(str(path))}: {escape(name)}, "
                  f"{plural(n, 'client')} ({groups}){per_round}, "
                  f"{plural(scenario.training.rounds, 'round')}")
    if fetch:
        console.print(f"note: {escape(scenario.dataset.name)} is not downloaded yet "
                      f"(dataset.download: true): validate never downloads; `sflsim run` "
                      f"fetches it into {escape(str(scenario.dataset.data_root or 'data'))}, "
                      f"and the checks against the data and the built model (memory, "
                      f"clients per sample) run then", highlight=False)
    if algorithms:
        print_algorithms()


def print_algorithms() -> None:
    """The table of :func:`~sflsim.config.user_algorithms.available_algorithms`: name,
    where it comes from, what it supports (and why an entry point failed to load)."""
    from sflsim.config.user_algorithms import available_algorithms

    rows = available_algorithms()
    table = Table(title=f"algorithms ({len(rows)})", title_justify="left")
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("from")
    table.add_column("supports")
    for row in rows:
        supports = ", ".join(c for c in CAPABILITIES if c in row.capabilities) or "-"
        table.add_row(escape(row.name), escape(row.source),
                      escape(f"fails to load: {row.problem}") if row.problem else supports)
    print_table(table)
    console.print("supports:", highlight=False)
    for capability, meaning in CAPABILITIES.items():
        console.print(f"  {capability}: {meaning}", highlight=False, markup=False)
