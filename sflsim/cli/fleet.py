"""``sflsim fleet from-fedscale``: FedScale's device traces as a fleet file (:mod:`sflsim.fedscale`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from sflsim.cli.common import console, user_errors

if TYPE_CHECKING:
    import pandas as pd

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Make fleet files (one row per device) from field traces.")


@app.command("from-fedscale")
def from_fedscale(
    capacity: Annotated[Path, typer.Option(
        "--capacity", metavar="<path>",
        help="FedScale's pickled capacity trace {client: {computation: ms/sample, "
             "communication: kbit/s}}.")],
    behaviour: Annotated[Path, typer.Option(
        "--behaviour", metavar="<path>",
        help="FedScale's pickled behaviour trace {client: {active, inactive, finish_time, "
             "...}}.")],
    output: Annotated[Path, typer.Option(
        "-o", "--output", metavar="<path>",
        help="Fleet CSV to write; the availability trace goes beside it as "
             "<stem>_availability.csv.")],
    clients: Annotated[int | None, typer.Option(
        "--clients", metavar="<int>", help="Keep this many clients, drawn with --seed "
        "(default: every client in both traces).")] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="<int>",
                                      help="Seed of the --clients draw.")] = 0,
    horizon: Annotated[str | None, typer.Option(
        "--horizon", metavar="<time>", help="Simulated time the availability trace covers, "
        "e.g. \"48 h\" (default: the longest finish_time, each trace once); no client is "
        "online after it.")] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", metavar="<name>", help="Device profile whose memory and powers every "
        "row takes (default: none: no memory limit, 0 W).")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an existing fleet file and availability trace (never "
        "the traces read).")] = False,
) -> None:
    """Convert FedScale's capacity and behaviour traces into a fleet CSV and an
    availability trace (ms per inference sample x 3 -> train_s_per_sample; kbit/s x 1024
    -> bit/s both ways)."""
    from sflsim import fedscale

    with user_errors():
        horizon_s = _horizon_seconds(horizon)
        if profile is not None:
            _check_profile(profile)
        trace = fedscale.availability_path(output)
        parquet = _check_outputs(output, trace, capacity, behaviour, overwrite)
        cap = fedscale.load_trace(capacity, "capacity")
        beh = fedscale.load_trace(behaviour, "behaviour")
        fleet, avail = fedscale.convert(cap, beh, clients=clients, seed=seed,
                                        horizon_s=horizon_s, profile=profile)
        _write(output, trace, fleet, avail, parquet)


def _horizon_seconds(horizon: str | None) -> float | None:
    """``--horizon`` in seconds (None: not given); ConfigError unless a time above 0."""
    from sflsim.errors import ConfigError
    from sflsim.units import parse_quantity

    horizon_s = None
    if horizon is not None:
        try:
            horizon_s = parse_quantity(horizon, "time")
        except ValueError as exc:
            raise ConfigError(f"--horizon: {exc}") from None
        if not 0 < horizon_s < float("inf"):
            raise ConfigError(f"--horizon: {horizon!r}; valid: a time above 0, e.g. \"48 h\"")
    return horizon_s


def _check_profile(profile: str) -> None:
    """Refuse a ``--profile`` that names no device profile."""
    from sflsim.errors import ConfigError
    from sflsim.hardware import profiles

    try:
        profiles.device_profile(profile)
    except ConfigError as exc:
        raise ConfigError(f"--profile: {exc}") from None


def _check_outputs(output: Path, trace: Path, capacity: Path, behaviour: Path,
                   overwrite: bool) -> bool:
    """Refuse to write over a trace read, a fleet file of another format than .csv or
    .parquet, and existing files without ``--overwrite``; whether the fleet is Parquet."""
    from sflsim.errors import ConfigError
    from sflsim.metrics.output import refuse_results_file

    for written in (output, trace):
        refuse_results_file(written, "-o", "fleet.csv")  # a run's or sweep's own files
        for read, option in ((capacity, "--capacity"), (behaviour, "--behaviour")):
            if written.resolve() == read.resolve() or (
                    written.exists() and read.exists() and written.samefile(read)):
                raise ConfigError(f"-o {output}: it would write over {option} {read}, a "
                                  f"file it reads; choose another -o")
    parquet = output.suffix.lower() in (".parquet", ".pq")
    if not parquet and output.suffix.lower() != ".csv":
        raise ConfigError(f"-o {output}: a fleet file is .csv or .parquet; got "
                          f"{output.suffix or 'no extension'!r}")
    for written in (output, trace):
        if written.exists() and not overwrite:
            raise ConfigError(f"-o {output}: {written} exists; choose another -o, or "
                              f"replace it with --overwrite")
    return parquet


def _write(output: Path, trace: Path, fleet: pd.DataFrame, avail: pd.DataFrame,
           parquet: bool) -> None:
    """Write the fleet file and the availability trace beside it, and say how to use them."""
    from sflsim.metrics.results import atomic_write
    from sflsim.text import plural

    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(output, (lambda tmp: fleet.to_parquet(tmp, index=False)) if parquet
                 else (lambda tmp: fleet.to_csv(tmp, index=False)))
    atomic_write(trace, lambda tmp: avail.to_csv(tmp, index=False))
    end = avail["online_until_s"].max() if len(avail) else 0.0
    console.print(f"wrote {escape(str(output))} ({plural(len(fleet), 'device')}) and "
                  f"{escape(str(trace))} ({plural(len(avail), 'online interval')}, up to "
                  f"{end:g} s); "
                  f"use them as fleet: {escape(str(output))} and conditions.availability: "
                  f"{escape(str(trace))}")
