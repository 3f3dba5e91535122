"""Quantities with units in strings, parsed once to SI floats.

Scenario and profile files may write ``"20 Mbps"``, ``"35 ms"``, ``"4 GiB"``,
``"16 GFLOPS"`` or ``"6.4 W"``; the loader turns each into a plain float in the
SI base unit of its dimension (bit/s, s, bytes, FLOP/s, W, J). A bare number
(or a string holding only a number) is taken to be already in the base unit.

Bandwidth prefixes are decimal (1 Mbps = 1e6 bit/s, as ISPs and Ookla report);
memory prefixes follow IEC (KiB = 1024 B) and SI (kB = 1000 B) as written.
"""

from __future__ import annotations

import re

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_PATTERN = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z/]*)\s*$")

_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}

#: dimension -> {unit symbol: factor to SI base}
UNITS: dict[str, dict[str, float]] = {
    "bandwidth": {
        **{f"{p}bps": f for p, f in _SI.items()},
        **{f"{p}bit/s": f for p, f in _SI.items()},
        **{f"{p}B/s": 8 * f for p, f in _SI.items()},
    },
    "time": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "h": 3600.0},
    "bytes": {
        "B": 1.0, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
        "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
    },
    "flops": {
        **{f"{p}FLOPS": f for p, f in _SI.items()},
        **{f"{p}FLOP/s": f for p, f in _SI.items()},
    },
    "power": {"W": 1.0, "mW": 1e-3, "kW": 1e3},
    "energy": {"J": 1.0, "mJ": 1e-3, "kJ": 1e3, "Wh": 3600.0},
}

#: what a value of each dimension is called in messages ("cannot read 'x' as a time")
NOUNS = {
    "bandwidth": "a bandwidth", "time": "a time", "bytes": "a size in bytes",
    "flops": "a speed in FLOP/s", "power": "a power", "energy": "an energy",
}

#: what a unit of each dimension is called in messages ("unknown FLOP/s unit 'GFLOP'")
_UNIT_KIND = {"bytes": "size", "flops": "FLOP/s"}


class UnknownUnit(ValueError):
    """A number followed by a unit that is not one of its dimension's (the message lists
    the valid units)."""


BASE_UNIT = {
    "bandwidth": "bit/s", "time": "s", "bytes": "B", "flops": "FLOP/s",
    "power": "W", "energy": "J",
}


def parse_quantity(value: object, dimension: str) -> float:
    """Convert ``value`` (a number or a string such as ``"20 Mbps"``) to SI.

    Args:
        value: a number (already in the base unit) or a string ``"<number> <unit>"``.
        dimension: one of the keys of :data:`UNITS` (``"bandwidth"``, ``"time"``, ...).

    Returns:
        The value as a float in the base unit (bit/s, s, bytes, FLOP/s, W, J).

    Raises:
        ValueError: the string is not a number followed by a unit;
            :class:`UnknownUnit` (a ValueError) for a unit not of this dimension, its
            message listing the valid units.
    """
    units = UNITS[dimension]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        from sflsim.text import as_yaml

        raise ValueError(f"expected {NOUNS[dimension]} such as {_example(dimension)}, "
                         f"got {as_yaml(value)}")
    match = _PATTERN.match(value)
    if match is None:
        raise ValueError(
            f"cannot read {value!r} as {NOUNS[dimension]}: write a number and a unit, "
            f"for example {_example(dimension)}"
        )
    number, unit = float(match.group(1)), match.group(2)
    if not unit:  # "20000000": a bare number in a string is in the base unit, as a number is
        return number
    if unit not in units:
        valid = ", ".join(u for u in units if u)
        # another case ("mbps"), else a unit this one begins ("Mbit" for "Mbit/s")
        same = ([u for u in units if u.lower() == unit.lower()]
                or [u for u in units if u.startswith(unit) and len(u) <= len(unit) + 2])
        hint = f"; did you mean {' or '.join(map(repr, same))}?" if same else ""
        raise UnknownUnit(f"unknown {_UNIT_KIND.get(dimension, dimension)} unit {unit!r} in "
                          f"{value!r}{hint} (valid units: {valid})")
    return number * units[unit]


def _example(dimension: str) -> str:
    return {
        "bandwidth": '"20 Mbps"', "time": '"35 ms"', "bytes": '"4 GiB"',
        "flops": '"16 GFLOPS"', "power": '"6.4 W"', "energy": '"1.5 J"',
    }[dimension]


def number_or_quantity(text: str, dimension: str) -> float:
    """A table cell in the SI unit of ``dimension``: a bare number (``inf`` included) or a
    quantity with its unit (``500 ms``, ``20 Mbit/s``), as trace files take them.

    Raises:
        ValueError: neither (:func:`parse_quantity`'s message says what would be valid).
    """
    try:
        return float(text)
    except ValueError:
        return parse_quantity(text, dimension)
