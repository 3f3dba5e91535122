"""``sflsim profiles list`` and ``sflsim profiles show NAME``: the hardware profile library."""

from __future__ import annotations

import shutil
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from sflsim.cli.common import console, err_console, print_table, user_errors
from sflsim.config.load import profile_warnings, with_name_hint
from sflsim.errors import ConfigError
from sflsim.hardware.profiles import (
    KINDS,
    OperatorCosts,
    _Sourced,
    available,
    load_profile,
    searched_first,
)
from sflsim.inputs.messages import closest_name
from sflsim.text import plural


class Kind(str, Enum):
    devices = "devices"
    links = "links"
    servers = "servers"


#: field -> (column title, divisor to the display unit, display unit)
DISPLAY: dict[str, tuple[str, float, str]] = {
    "sustained_flops": ("sustained", 1e9, "GFLOP/s"),
    "memory_bytes": ("memory", 2.0**30, "GiB"),
    "active_power_w": ("active", 1.0, "W"),
    "idle_power_w": ("idle", 1.0, "W"),
    "radio_tx_power_w": ("radio tx", 1.0, "W"),
    "radio_rx_power_w": ("radio rx", 1.0, "W"),
    "uplink_bps": ("uplink", 1e6, "Mbit/s"),
    "downlink_bps": ("downlink", 1e6, "Mbit/s"),
    "latency_s": ("latency (one-way)", 1e-3, "ms"),
    # operator_costs (the cost model by operation); the bandwidth is held in bit/s and
    # written, and shown, in bytes per second
    "conv_flops": ("conv", 1e9, "GFLOP/s"),
    "grouped_conv_flops": ("grouped conv", 1e9, "GFLOP/s"),
    "matmul_flops": ("matmul", 1e9, "GFLOP/s"),
    "elementwise_flops": ("elementwise", 1e9, "GFLOP/s"),
    "memory_bandwidth_bps": ("memory bandwidth", 8e9, "GB/s"),
    "per_operator_s": ("per operator", 1e-6, "us"),
    "per_batch_s": ("per batch", 1e-3, "ms"),
    "pointwise_per_sample_below_batch": ("1x1 convs per sample below batch", 1, ""),
}
#: one-letter basis markers used in the list tables
MARK = {"measured": "m", "nominal": "n", "derived": "d", "fitted": "f"}
#: a source that starts with this marks the number as an assumption (a guess, an efficiency
#: factor applied to a peak, a proxy from another device), whatever its basis
ASSUMED = "Assumed."
#: the legend printed under ``sflsim profiles list``
LEGEND = ("basis: m = measured, n = nominal (datasheet or assumed), d = derived, f = fitted; "
          "* = assumed (source starts with 'Assumed.'); details: sflsim profiles show NAME")

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="List and inspect hardware profiles "
                  "(devices, links, servers) with units, basis and sources.")


def _number(x: float) -> str:
    """A number with 3-4 significant digits, no exponent for everyday sizes."""
    if 1e3 <= abs(x) < 1e9:
        return f"{x:,.0f}"
    if x == 0 or 1e-3 <= abs(x) < 1e3:
        return f"{x:.4g}"
    return f"{x:.3g}"


def _human(field: str, value: float) -> str:
    _, scale, unit = DISPLAY[field]
    return f"{_number(value / scale)} {unit}".rstrip()


def _sourced_fields(profile: BaseModel) -> dict[str, _Sourced]:
    return {k: v for k, v in vars(profile).items() if isinstance(v, _Sourced)}


def is_assumed(sourced: _Sourced) -> bool:
    """Whether the number is an assumption: its source starts with ``Assumed.``."""
    return sourced.source.strip().startswith(ASSUMED)


def _mark(sourced: _Sourced) -> str:
    """The basis marker of a list cell: ``n``, ``d*`` (derived from an assumption), ..."""
    return MARK[sourced.basis] + ("*" if is_assumed(sourced) else "")


def _basis(sourced: _Sourced) -> str:
    """The basis column of ``show``: ``nominal``, ``derived, assumed``, ..."""
    return sourced.basis + (", assumed" if is_assumed(sourced) else "")


def cost_model(profile: BaseModel) -> str:
    """What ``hardware.cost_model: operators`` uses for a device: ``operators (fitted)``
    when its profile has ``operator_costs`` (with the bases of its numbers), else
    ``FLOPs only`` (the FLOPs rule, ``sustained_flops``, under both readings)."""
    costs = getattr(profile, "operator_costs", None)
    if costs is None:
        return "FLOPs only"
    bases = sorted({s.basis for s in _sourced_fields(costs).values()})
    return f"operators ({', '.join(bases)})"


def _kind_table(kind: str) -> Table:
    names = available(kind)
    profiles = [load_profile(kind, n) for n in names]
    fields = list(_sourced_fields(profiles[0])) if profiles else []
    table = Table(title=f"{kind} ({len(names)})", title_justify="left")
    table.add_column("name", style="bold", no_wrap=True)
    for field in fields:
        title, _, unit = DISPLAY[field]
        table.add_column(escape(f"{title}\n[{unit}]"), justify="right", no_wrap=True)
    if kind == "servers":
        table.add_column("slots", justify="right")
    if kind == "devices":
        table.add_column("cost model", no_wrap=True)
    for name, profile in zip(names, profiles, strict=True):
        sourced = _sourced_fields(profile)
        cells = [f"{_number(sourced[f].value / DISPLAY[f][1])} {_mark(sourced[f])}"
                 for f in fields]
        if kind == "servers":
            cells.append(str(profile.slots))  # type: ignore[attr-defined]
        if kind == "devices":
            cells.append(cost_model(profile))
        table.add_row(name, *cells)
    return table


@app.command("list")
def list_profiles(
    kind: Annotated[Kind | None, typer.Option(
        "--kind", "-k", help="Only this kind of profile.")] = None,
) -> None:
    """One table per kind, one row per profile, key numbers in human units.

    After each number: m = measured, n = nominal (datasheet or assumption), d = derived,
    f = fitted; * = an assumption (its source starts with "Assumed."). Devices also say
    which cost model they have under hardware.cost_model: operators: "operators (fitted)"
    (the profile has operator_costs) or "FLOPs only" (sustained_flops).
    """
    with user_errors():
        tables = [_kind_table(k) for k in ([kind.value] if kind else KINDS)]
    for table in tables:
        print_table(table)
    console.print(LEGEND, highlight=False)


def _resolve(name: str, kind: Kind | None) -> str:
    """The kind holding profile ``name``; a ConfigError with a suggestion when none or
    ambiguous (the closest name, case aside: ``RPi4`` -> ``rpi4``)."""
    if kind is not None:
        if name not in available(kind.value):
            try:
                load_profile(kind.value, name)
            except ConfigError as exc:
                message = with_name_hint(str(exc), kind.value, name)
                other = [(k, n) for k in KINDS if k != kind.value for n in available(k)
                         if n.lower() == name.lower()]
                also = (f"; {other[0][1]!r} is a profile of --kind {other[0][0]}"
                        if other and "Did you mean" not in message else "")
                raise ConfigError(f"{message}{also}") from None
        return kind.value
    kinds = [k for k in KINDS if name in available(k)]
    if len(kinds) == 1:
        return kinds[0]
    if len(kinds) > 1:
        raise ConfigError(f"profile {name!r} exists as {' and '.join(kinds)}; "
                          f"choose one with --kind {kinds[0]}")
    everything = sorted({n for k in KINDS for n in available(k)})
    close = closest_name(name, everything)
    case = " (profile names are case-sensitive)" if close and close.lower() == name.lower() else ""
    hint = f" Did you mean {close!r}{case}?" if close else ""
    raise ConfigError(f"unknown profile {name!r}.{hint} Valid: {', '.join(everything)} "
                      "(see sflsim profiles list)")


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="Profile name, e.g. rpi4, wifi, a100, or a "
                                        "profile YAML file (e.g. what sflsim calibrate "
                                        "wrote).")],
    kind: Annotated[Kind | None, typer.Option(
        "--kind", "-k", help="Kind of profile; needed only if NAME exists in several, or for "
        "a file outside a devices/, links/ or servers/ folder (default: devices).")] = None,
) -> None:
    """Every field of one profile: value, unit, basis, source and note; for a device, its
    cost model by operation (operator_costs, the rows it was fitted on and its error on
    models left out of the fit) or that it has none (FLOPs only)."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):  # a file: shown as if its folder were searched first
        with user_errors():
            if not path.is_file():
                raise ConfigError(f"{name}: no such profile file")
        found = kind.value if kind is not None else (
            path.parent.name if path.parent.name in KINDS else "devices")
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / found).mkdir()
            shutil.copyfile(path, Path(tmp) / found / path.name)
            with searched_first(Path(tmp)):
                show(path.stem, Kind(found))
        return
    with user_errors():
        found = _resolve(name, kind)
        profile = load_profile(found, name)
    for message in profile_warnings(found, name):  # bare numbers far from real hardware
        err_console.print(f"warning: {escape(message)}", highlight=False)
    console.print(f"[bold]{name}[/] ({found[:-1]})", highlight=False)
    console.print(escape(profile.description.strip()), highlight=False)  # type: ignore[attr-defined]
    table = _fields_table(_sourced_fields(profile))
    if found == "servers":
        table.add_row("slots", str(profile.slots), "", "concurrent training jobs, "  # type: ignore[attr-defined]
                      "each at sustained_flops")
    print_table(table)
    if found == "devices":
        _show_cost_model(profile)


def _fields_table(fields: dict[str, _Sourced]) -> Table:
    """One row per sourced number: field, value in human units, basis, source and note."""
    table = Table(show_lines=True, expand=True)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("basis", no_wrap=True)
    table.add_column("source / note", overflow="fold", ratio=1)
    for field, sourced in fields.items():
        text = escape(sourced.source.strip())
        if sourced.note:
            text += f"\n[italic]note:[/] {escape(sourced.note.strip())}"
        table.add_row(field, _human(field, sourced.value), _basis(sourced), text)
    return table


def _show_cost_model(profile: BaseModel) -> None:
    """A device's cost model under ``hardware.cost_model: operators``: its operator_costs
    (each parameter, then ``fitted_on`` and ``held_out_error``), or FLOPs only."""
    costs: OperatorCosts | None = getattr(profile, "operator_costs", None)
    if costs is None:
        console.print("cost model: FLOPs only (no operator_costs): under hardware.cost_model: "
                      "operators this device keeps the FLOPs rule (sustained_flops).",
                      highlight=False)
        return
    console.print(f"cost model: {cost_model(profile)}: operator_costs, used under "
                  "hardware.cost_model: operators (FLOP/s per operator class, memory "
                  "bandwidth, fixed seconds per operator and per batch)", highlight=False)
    table = _fields_table(_sourced_fields(costs))
    rows = costs.fitted_on
    table.add_row("fitted_on", plural(len(rows), "row"), "",
                  escape("\n".join(rows)) if rows else "none listed")
    errors = costs.held_out_error
    text = "\n".join(f"{escape(label)}: {error:+.1%}" for label, error in errors.items())
    table.add_row("held_out_error", plural(len(errors), "row"), "",
                  (text + "\n[italic]note:[/] (predicted - measured) / measured of each row "
                   "with its model left out of the fit") if errors
                  else "none recorded (no model was left out of the fit)")
    print_table(table)
