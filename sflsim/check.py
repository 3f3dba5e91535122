"""Check a run's results against the simulator's physics and bookkeeping.

The checks live in :mod:`sflsim.checks`; this module keeps their public names where
they have always been (``from sflsim.check import check_run``).
"""

from __future__ import annotations

from sflsim.checks import (
    ABS_TOL,
    CHECK_ENV,
    MAX_LINES,
    REL_TOL,
    TIME_RTOL,
    ResultCheckError,
    Violation,
    check_if_asked,
    check_result,
    check_run,
    check_tables,
    likely_cause,
    report_lines,
    summary_line,
)

__all__ = ["ABS_TOL", "CHECK_ENV", "MAX_LINES", "REL_TOL", "TIME_RTOL", "ResultCheckError",
           "Violation", "check_if_asked", "check_result", "check_run", "check_tables",
           "likely_cause", "report_lines", "summary_line"]
