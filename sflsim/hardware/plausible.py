"""Hardware numbers far outside every shipped profile of their kind, warned about.

A device profile with ``sustained_flops: 1e15`` (a petaFLOP/s "IoT" board) or a fleet
row with ``flops_per_s: 1e15`` is valid input but surely not what was meant: a unit slip
or a number of another kind of machine. The shipped library (``device_profiles/``)
spans a Raspberry Pi 3B+ to a Jetson AGX Orin for devices and a CPU server to an H100
for servers, and the range of each numeric field over it, devices and servers apart
(:func:`shipped_ranges`), is what a number is compared with: one more than
:data:`MARGIN` times below the lowest or above the highest is warned about
(:func:`range_warning`), naming the field, the value and the shipped range. The margin
leaves room for real hardware the library lacks (a microcontroller-class board, a
laptop GPU) and catches a slip of a unit prefix (1000x).

Fields compared: compute (``sustained_flops``; a device's ``operator_costs`` rates),
memory (``memory_bytes``; ``operator_costs.memory_bandwidth_bps``), powers (active,
idle, radio transmit and receive) and the fixed costs of the cost model by operation
(``operator_costs.per_operator_s``, ``per_batch_s``); a fleet row's ``flops_per_s``,
``memory_bytes`` and powers against the devices' (a power of 0 W, "no energy counted",
is a choice, not a slip). Warnings, never errors: a user may model hardware of their own.
A bare number whose unit was surely forgotten gets its own warning instead, with the
unit probably meant (:func:`sflsim.inputs.quantities.bare_number_warning`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from sflsim.errors import ConfigError
from sflsim.hardware import profiles
from sflsim.inputs.messages import quantity_leaves
from sflsim.inputs.quantities import bare_number_warning
from sflsim.inputs.yaml_files import read_yaml_mapping
from sflsim.units import UNITS, parse_quantity

#: a number more than this factor below the lowest, or above the highest, shipped value
#: of its field (same kind of profile) is warned about
MARGIN = 10.0
#: the kinds compared (links have their own bounds, on bare numbers)
KINDS = ("devices", "servers")
#: units a value is shown in, smallest first (each one a unit a file may write)
SHOWN_UNITS = {
    "flops": ("FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s"),
    "bytes": ("B", "KiB", "MiB", "GiB", "TiB"),
    "power": ("mW", "W", "kW"),
    "time": ("us", "ms", "s"),
    "bandwidth": ("B/s", "kB/s", "MB/s", "GB/s", "TB/s"),  # memory bandwidth: bytes per s
}
#: a fleet column -> the device profile field it stands for
FLEET_FIELDS = {"flops_per_s": "sustained_flops", "memory_bytes": "memory_bytes",
                "active_power_w": "active_power_w", "idle_power_w": "idle_power_w",
                "radio_tx_power_w": "radio_tx_power_w", "radio_rx_power_w": "radio_rx_power_w"}


def sourced_numbers(profile: BaseModel, prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(field, SI value)`` of every sourced number of a profile, ``operator_costs``'
    as ``operator_costs.conv_flops``."""
    for field, value in vars(profile).items():
        if isinstance(value, profiles._Sourced):
            yield f"{prefix}{field}", float(value.value)  # type: ignore[attr-defined]
        elif isinstance(value, profiles.OperatorCosts):
            yield from sourced_numbers(value, f"{prefix}{field}.")


@functools.cache
def shipped_ranges(kind: str) -> dict[str, tuple[float, float]]:
    """``{field: (lowest, highest)}`` (SI) over the shipped profiles of ``kind``
    (``devices`` or ``servers``), read from the shipped library only (a folder of
    ``$SFLSIM_PROFILE_PATH`` changes nothing); a file that does not validate is left out."""
    model = profiles._MODELS[kind]
    seen: dict[str, list[float]] = {}
    for path in sorted((profiles.SHIPPED_PROFILES / kind).glob("*.yaml")):
        try:
            profile = model.model_validate({"name": path.stem,
                                            **read_yaml_mapping(path, what="profile")})
        except (ConfigError, ValidationError):
            continue
        for field, value in sourced_numbers(profile):
            seen.setdefault(field, []).append(value)
    return {field: (min(values), max(values)) for field, values in seen.items()}


def show(value: float, dimension: str) -> str:
    """``value`` (SI) in the largest unit of :data:`SHOWN_UNITS` it reaches, 3
    significant digits (whole numbers past 1000): ``1e15`` FLOP/s is ``1,000 TFLOP/s``."""
    units = SHOWN_UNITS[dimension]
    factors = UNITS[dimension]
    chosen = units[0]
    for unit in units:
        if abs(value) >= factors[unit]:
            chosen = unit
    number = value / factors[chosen]
    return f"{number:,.0f} {chosen}" if abs(number) >= 1000 else f"{number:.3g} {chosen}"


def _dimension(field: str) -> str:
    leaf = field.rsplit(".", 1)[-1]
    if leaf.endswith("_flops"):
        return "flops"
    if leaf.endswith("_bps"):
        return "bandwidth"
    if leaf.endswith("_w"):
        return "power"
    if leaf.endswith("_s"):
        return "time"
    return "bytes"


def outside(kind: str, field: str, value: float) -> str | None:
    """``"below"`` or ``"above"`` when ``value`` (SI) of ``field`` lies more than
    :data:`MARGIN` times outside the shipped range of ``kind``, else None (in range, a
    field the shipped profiles do not have, or not finite)."""
    found = shipped_ranges(kind).get(field)
    if found is None or not math.isfinite(value):
        return None
    low, high = found
    if value < low / MARGIN:
        return "below"
    if value > high * MARGIN:
        return "above"
    return None


def range_text(kind: str, field: str) -> str:
    """``the shipped devices' sustained_flops (4 GFLOP/s to 2.1 TFLOP/s)``."""
    low, high = shipped_ranges(kind)[field]
    dimension = _dimension(field)
    return f"the shipped {kind}' {field} ({show(low, dimension)} to {show(high, dimension)})"


def range_warning(kind: str, field: str, value: float, where: str) -> str | None:
    """The warning for ``value`` (SI) given to ``field`` of a profile of ``kind``, led by
    ``where`` (``profile x.yaml: sustained_flops.value``), when it lies more than
    :data:`MARGIN` times outside the shipped range (:func:`outside`); else None.

    ``profile board.yaml: sustained_flops.value: 1000 TFLOP/s is more than 10x above the
    shipped devices' sustained_flops (4 GFLOP/s to 2.1 TFLOP/s); check the number and its
    unit``
    """
    side = outside(kind, field, value)
    if side is None:
        return None
    return (f"{where}: {show(value, _dimension(field))} is more than {MARGIN:g}x {side} "
            f"{range_text(kind, field)}; check the number and its unit")


def far_outside(column: str, values: np.ndarray) -> np.ndarray:
    """Which cells of a fleet column (SI, NaN where empty) lie more than :data:`MARGIN`
    times outside the shipped devices' range of the field it stands for
    (:data:`FLEET_FIELDS`); none for another column, and never a power of 0 W (no
    energy counted: a choice)."""
    field = FLEET_FIELDS.get(column)
    found = shipped_ranges("devices").get(field) if field is not None else None
    if found is None:
        return np.zeros(len(values), dtype=bool)
    low, high = found
    with np.errstate(invalid="ignore"):
        far = (values < low / MARGIN) | (values > high * MARGIN)
    if column.endswith("_power_w"):
        far &= values != 0
    return far & np.isfinite(values)


def profile_warnings(kind: str, data: Any, model: type[BaseModel], where: str) -> list[str]:
    """A warning for each number of a profile file (``data``, as read) of ``kind`` far
    outside the shipped range of its field (:func:`range_warning`), led by ``where``
    (``profile <file>: ``); a bare number that gets the warning on units
    (:func:`~sflsim.inputs.quantities.bare_number_warning`) gets only that one."""
    if kind not in KINDS:
        return []
    out = []
    for path, dimension, value in quantity_leaves(data, model):
        field = ".".join(p for p in path if p != "value")
        shown = ".".join(path)
        leaf = next((k for k in reversed(path) if k != "value"), path[-1])
        if bare_number_warning(shown, leaf, dimension, value) is not None:
            continue
        try:
            number = parse_quantity(value, dimension)
        except ValueError:  # the profile's own error says what is wrong
            continue
        message = range_warning(kind, field, number, f"{where}{shown}")
        if message is not None:
            out.append(message)
    return out
