"""Pydantic field types for quantities written with units (``"20 Mbps"``), as the
scenario schema imports them; they live in :mod:`sflsim.inputs.quantities`, which
profiles and fleet files share."""

from sflsim.inputs.quantities import (
    FROZEN,
    MAX_TIME_S,
    PLAUSIBLE,
    BandwidthBps,
    Bytes,
    FlopsPerS,
    Plausible,
    PositiveTimeS,
    PowerW,
    TimeS,
    Unit,
    WholeNumber,
    bare_number,
    bare_number_warning,
    whole_number,
)

__all__ = ["FROZEN", "MAX_TIME_S", "PLAUSIBLE", "BandwidthBps", "Bytes", "FlopsPerS",
           "Plausible", "PositiveTimeS", "PowerW", "TimeS", "Unit", "WholeNumber",
           "bare_number", "bare_number_warning", "whole_number"]
