"""Pydantic field types for quantities written with units (``"20 Mbps"``).

Each type accepts a number (already SI) or a string with a unit and validates
to a float in the SI base unit, see :mod:`sflsim.units`.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, ConfigDict

from sflsim.units import parse_quantity

#: Configuration shared by every schema model: immutable, unknown keys refused.
FROZEN = ConfigDict(frozen=True, extra="forbid", validate_default=True)


_NOT_FINITE = re.compile(r"^\s*[-+]?(nan|inf|infinity)\b", re.IGNORECASE)


def _finite_quantity(value: object, dimension: str) -> float:
    """Parse ``value`` and refuse NaN and infinities (``.nan``, ``"inf W"``, ``"1e999 bps"``)."""
    if isinstance(value, str) and _NOT_FINITE.match(value):
        raise ValueError(f"must be a finite number, got {value.strip()!r}")
    number = parse_quantity(value, dimension)
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {value!r}")
    return number


def _unit(dimension: str) -> BeforeValidator:
    return BeforeValidator(lambda v: _finite_quantity(v, dimension))


def _positive(v: float) -> float:
    if not v > 0:
        raise ValueError(f"must be greater than 0, got {v:g}")
    return v


def _non_negative(v: float) -> float:
    if v < 0:
        raise ValueError(f"must be 0 or more, got {v:g}")
    return v


def _at_least_1bps(v: float) -> float:
    _positive(v)
    if v < 1:
        raise ValueError(f"must be at least 1 bit/s, got {v:g} bit/s")
    return v


#: longest time any field may give (s): about 31 years; more is a typo, not a setting
MAX_TIME_S = 1e9


def _time_at_most(v: float) -> float:
    if v > MAX_TIME_S:
        raise ValueError(f"must be at most {MAX_TIME_S:g} s (about 31 years), got {v:g} s")
    return v


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

BandwidthBps = Annotated[float, _unit("bandwidth"), AfterValidator(_at_least_1bps)]
TimeS = Annotated[float, _unit("time"), AfterValidator(_non_negative), AfterValidator(_time_at_most)]
PositiveTimeS = Annotated[float, _unit("time"), AfterValidator(_positive),
                          AfterValidator(_time_at_most)]
Bytes = Annotated[float, _unit("bytes"), AfterValidator(_positive)]
FlopsPerS = Annotated[float, _unit("flops"), AfterValidator(_positive)]
PowerW = Annotated[float, _unit("power"), AfterValidator(_non_negative)]
