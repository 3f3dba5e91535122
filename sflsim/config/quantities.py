"""Pydantic field types for quantities written with units (``"20 Mbps"``).

Each type accepts a number (already SI) or a string with a unit and validates
to a float in the SI base unit, see :mod:`sflsim.units`.
"""

from __future__ import annotations

import math
import re
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


BandwidthBps = Annotated[float, _unit("bandwidth"), AfterValidator(_positive)]
TimeS = Annotated[float, _unit("time"), AfterValidator(_non_negative)]
Bytes = Annotated[float, _unit("bytes"), AfterValidator(_positive)]
FlopsPerS = Annotated[float, _unit("flops"), AfterValidator(_positive)]
PowerW = Annotated[float, _unit("power"), AfterValidator(_non_negative)]
