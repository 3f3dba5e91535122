"""Violations, the tolerance of every comparison and the capped report of them.

Numbers compare within a tolerance made of three parts: :data:`REL_TOL` of the larger
of the two numbers, :data:`TIME_RTOL` of the magnitude of the simulated times they were
computed from (a duration ``end_s - start_s`` of two instants near 1e8 s carries a
float error of about 1e-8 s, which no tolerance of the duration itself covers), and
:data:`ABS_TOL`. Counts compare exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from sflsim.text import plural

#: relative tolerance of every comparison of floats, of the larger of the two
REL_TOL = 1e-9
#: tolerance per second of the simulated instants a number was computed from (s/s)
TIME_RTOL = 1e-12
#: absolute tolerance (in the compared column's unit: s, J, FLOPs, bytes)
ABS_TOL = 1e-9
#: violations printed before the rest are counted (``sflsim check``)
MAX_LINES = 20
#: share of the violations one input must explain to be named the likely cause
CAUSE_SHARE = 0.5


@dataclass(frozen=True)
class Violation:
    """One broken rule: the file, the round (None: the run as a whole), the device,
    actor or column concerned, and what is wrong with the numbers. ``cause`` names the
    input the numbers come from (a device profile, a link, a column), so that a report
    of many can name the one behind most (:func:`likely_cause`)."""

    file: str
    round: int | None
    who: str
    message: str
    cause: str = field(default="", compare=False)

    def __str__(self) -> str:
        where = [self.file] + ([f"round {self.round}"] if self.round is not None else [])
        where += [self.who] if self.who else []
        return f"{': '.join(where)}: {self.message}"


class ResultCheckError(AssertionError):
    """A finished run broke the simulator's physics or bookkeeping (a defect, not the
    user's input); the message lists the violations (:func:`report_lines`)."""


def slack(a: object, b: object, scale: object = 0.0) -> np.ndarray:
    """The tolerance of comparing ``a`` with ``b``: :data:`REL_TOL` of the larger,
    :data:`TIME_RTOL` of ``scale`` (the magnitude, in the compared unit, of what the
    numbers were computed from: for times, the simulated instants) and :data:`ABS_TOL`."""
    a, b = np.abs(np.asarray(a, dtype=float)), np.abs(np.asarray(b, dtype=float))
    return REL_TOL * np.maximum(a, b) + TIME_RTOL * np.abs(np.asarray(scale, dtype=float)) \
        + ABS_TOL


def close(a: object, b: object, scale: object = 0.0) -> np.ndarray:
    """Whether ``a`` and ``b`` agree within :func:`slack`; NaN on either side is not
    compared here (True): a column holding NaN is a violation of its own."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(invalid="ignore"):
        return ~(np.abs(a - b) > slack(a, b, scale))


def at_most(a: object, b: object, scale: object = 0.0) -> np.ndarray:
    """Whether ``a <= b`` within :func:`slack` (NaN: True, as :func:`close`)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(invalid="ignore"):
        return ~(a > b + slack(a, b, scale))


def g(x: float) -> str:
    """A number as the messages print it (10 significant digits)."""
    return f"{float(x):.10g}"


def likely_cause(found: list[Violation]) -> tuple[str, int] | None:
    """The input behind most of ``found`` (its ``cause``) and how many it explains, when
    one explains at least :data:`CAUSE_SHARE` of them and more than one; else None."""
    counts = Counter(v.cause for v in found if v.cause)
    if not counts:
        return None
    cause, n = counts.most_common(1)[0]
    return (cause, n) if n >= 2 and n >= CAUSE_SHARE * len(found) else None


def report_lines(found: Iterable[Violation], limit: int = MAX_LINES) -> list[str]:
    """At most ``limit`` violations, one per line, then how many more there are and the
    likely cause (:func:`likely_cause`), if one input explains most."""
    found = list(found)
    lines = [str(v) for v in found[:limit]]
    if len(found) > limit:
        lines.append(f"... and {plural(len(found) - limit, 'more violation')} not shown")
    cause = likely_cause(found)
    if cause is not None:
        lines.append(f"likely cause: {cause[0]} ({cause[1]} of the {len(found)} violations)")
    return lines
