"""Pydantic field types for quantities written with units (``"20 Mbps"``).

Each type accepts a number (already SI) or a string with a unit and validates
to a float in the SI base unit, see :mod:`sflsim.units`. Each carries a :class:`Unit`
marker, so that the loader can find the bare numbers a file gives such fields and
warn about those far outside what real hardware has (:func:`bare_number_warning`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict

from sflsim.units import BASE_UNIT, UNITS, parse_quantity

#: Configuration shared by every schema model: immutable, unknown keys refused.
FROZEN = ConfigDict(frozen=True, extra="forbid", validate_default=True)


_NOT_FINITE = re.compile(r"^\s*[-+]?(nan|inf|infinity)\b", re.IGNORECASE)


class FlagText(str):
    """``true`` or ``false`` given to a number field, passed on as text so that the field
    refuses it; error messages show it as YAML wrote it (``true``, not ``'true'``)."""


#: how a validator says a value is outside its field's range: ``out of range; valid: ...``;
#: :func:`sflsim.inputs.messages.describe_error` leads it with the field and the value as
#: written (``conditions.round_deadline_s: -1 is out of range; valid: ...``)
OUT_OF_RANGE = "out of range; valid: "


def out_of_range(valid: str) -> ValueError:
    """The error of a validator refusing a value outside ``valid`` (see :data:`OUT_OF_RANGE`)."""
    return ValueError(f"{OUT_OF_RANGE}{valid}")


#: longest time any field may give (s): about 31 years; more is a typo, not a setting
MAX_TIME_S = 1e9


def _quantity(dimension: str, valid: str, within: Callable[[float], bool]) -> BeforeValidator:
    """Read a number or a text with a unit of ``dimension`` in SI, refusing NaN, the
    infinities (``.nan``, ``"inf W"``, ``"1e999 bps"``) and values ``within`` refuses as
    out of range (``valid`` says what is valid)."""

    def check(value: object) -> float:
        if isinstance(value, FlagText):  # true/false: parse_quantity names it as YAML wrote it
            value = value == "true"
        if isinstance(value, str) and _NOT_FINITE.match(value):
            raise out_of_range(f"a finite number, {valid}")
        number = parse_quantity(value, dimension)
        if not math.isfinite(number):
            raise out_of_range(f"a finite number, {valid}")
        if not within(number):
            raise out_of_range(valid)
        return number

    return BeforeValidator(check)


def whole_number(value: object) -> object:
    """An integral number written as a float (``1e3``, ``1000.0``) as the ``int`` it is.

    PyYAML (YAML 1.1) reads ``1e3`` as the text ``'1e3'``, and ``--set training.rounds=1e3``
    the same; pydantic's ``int`` takes neither. Text and floats whose value is a whole
    number become that ``int``; anything else (``1.5``, ``'many'``, ``true``, exponents
    past 10^40) is returned unchanged for the field to refuse.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            number = Decimal(value)
        except InvalidOperation:
            return value
        if number.is_finite() and number.adjusted() <= 40 and number == number.to_integral_value():
            return int(number)
    return value


#: An integer field that also takes integral floats (``1e3``); see :func:`whole_number`.
WholeNumber = Annotated[int, BeforeValidator(whole_number)]

@dataclass(frozen=True)
class Unit:
    """Marks a field type as a quantity of ``dimension`` (a key of
    :data:`sflsim.units.UNITS`); pydantic ignores it, :func:`bare_number_warning` reads it."""

    dimension: str


_YEARS = f"at most {MAX_TIME_S:,.0f} s (about 31 years)"
BandwidthBps = Annotated[float, Unit("bandwidth"),
                         _quantity("bandwidth", "at least 1 bit/s", lambda v: v >= 1)]
TimeS = Annotated[float, Unit("time"),
                  _quantity("time", f"at least 0 s and {_YEARS}", lambda v: 0 <= v <= MAX_TIME_S)]
PositiveTimeS = Annotated[float, Unit("time"), _quantity(
    "time", f"greater than 0 s and {_YEARS}", lambda v: 0 < v <= MAX_TIME_S)]
Bytes = Annotated[float, Unit("bytes"), _quantity("bytes", "greater than 0 bytes", lambda v: v > 0)]
FlopsPerS = Annotated[float, Unit("flops"),
                      _quantity("flops", "greater than 0 FLOP/s", lambda v: v > 0)]
PowerW = Annotated[float, Unit("power"), _quantity("power", "at least 0 W", lambda v: v >= 0)]


# ------------------------------------------------- bare numbers far from real hardware


@dataclass(frozen=True)
class Plausible:
    """Where a bare number (no unit: read in the SI base unit) of one kind of field is so
    far from every shipped profile that another unit was surely meant."""

    dimension: str
    #: only fields whose name ends so (``latency_s``); None: every field of the dimension
    field_suffix: str | None
    #: a bare number below ``low`` or above ``high`` (SI base unit) is warned about
    low: float | None
    high: float | None
    #: the bound as the warning says it ("under 1 kbit/s")
    bound: str
    #: the lowest and highest value of the shipped profiles (SI base unit)
    shipped: tuple[float, float]
    #: the same range as the warning says it
    shipped_text: str
    #: units the number was probably written in: the first that puts it within the
    #: shipped range, else the first
    meant: tuple[str, ...]


#: The bounds (see README, "Scenario files"), each beyond every shipped profile in
#: device_profiles/ (``tests/test_silent_input.py`` checks that they stay so, and that
#: the ``shipped`` ranges are those of the profiles):
#: bandwidths 20 kbit/s (NB-IoT) to 941 Mbit/s (Ethernet); one-way latencies 0.2 ms
#: (Ethernet) to 837 ms (NB-IoT); sustained 4 GFLOP/s (Raspberry Pi 3B+) to 25 TFLOP/s
#: (H100); memory 1 GiB (Raspberry Pi 3B+) to 512 GiB (CPU server); power 0.26 W (the
#: Jetson Nano's radio receiving) to 700 W (H100). So a bandwidth under 1 kbit/s is 20x below NB-IoT, a
#: latency over 5 s 6x above it, FLOP/s under 1 MFLOP/s 4000x below a Raspberry Pi 3B+,
#: memory under 1 MiB 1024x below it; a power over 1 kW is above any single accelerator
#: (a bare 6400 meant as mW is 6.4 kW). Round budgets and deadlines get no bound: any
#: span of seconds is a setting.
PLAUSIBLE: tuple[Plausible, ...] = (
    Plausible("bandwidth", None, 1e3, None, "under 1 kbit/s", (2e4, 9.41e8),
              "shipped links: 20 kbit/s to 941 Mbit/s", ("Mbit/s", "kbit/s")),
    Plausible("time", "latency_s", None, 5.0, "over 5 s", (2e-4, 0.837),
              "shipped links: 0.2 ms to 837 ms", ("ms", "us")),
    Plausible("flops", None, 1e6, None, "under 1 MFLOP/s", (4e9, 2.5e13),
              "shipped devices and servers: 4 GFLOP/s to 25 TFLOP/s", ("GFLOPS", "TFLOPS")),
    Plausible("bytes", None, 2.0**20, None, "under 1 MiB", (2.0**30, 2.0**39),
              "shipped devices and servers: 1 GiB to 512 GiB", ("GiB", "MiB")),
    Plausible("power", None, None, 1e3, "over 1 kW", (0.26, 700.0),
              "shipped devices and servers: 0.26 W to 700 W", ("mW",)),
)

_BARE = re.compile(r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*$")


def bare_number(value: object) -> float | None:
    """``value`` as a number if it was written without a unit (``5``, ``2.5``, ``"5"``);
    None for a string with a unit, a flag or anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and _BARE.match(value):
        return float(value)
    return None


def bare_number_warning(path: str, field: str, dimension: str, value: object) -> str | None:
    """A warning when ``value``, given to the field at ``path`` (its own name ``field``,
    e.g. ``latency_s``) as a bare number, is far outside what any shipped profile has
    (:data:`PLAUSIBLE`), naming the value as read, with its unit, and the unit probably
    meant; None for a value with a unit, or a plausible one.

    ``devices.lte.link_override.uplink_bps: 5 is read as 5 bit/s, under 1 kbit/s
    (shipped links: 20 kbit/s to 941 Mbit/s); did you mean "5 Mbit/s"?``
    """
    number = bare_number(value)
    if number is None or not math.isfinite(number):
        return None
    for rule in PLAUSIBLE:
        if rule.dimension != dimension or (
                rule.field_suffix is not None and not field.endswith(rule.field_suffix)):
            continue
        if (rule.low is not None and number < rule.low) or (
                rule.high is not None and number > rule.high):
            written = value.strip() if isinstance(value, str) else (
                str(value) if isinstance(value, int) else f"{value:g}")
            lo, hi = rule.shipped
            meant = next((u for u in rule.meant if lo <= number * UNITS[dimension][u] <= hi),
                         rule.meant[0])
            return (f"{path}: {written} is read as {written} {BASE_UNIT[dimension]}, "
                    f"{rule.bound} ({rule.shipped_text}); did you mean \"{written} {meant}\"?")
    return None
