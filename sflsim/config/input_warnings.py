"""Warnings about input that is valid but probably not what was meant.

:func:`warn` keeps each warning for the innermost :func:`input_warnings` block (the
command line prints them once each), else says it on standard error;
:func:`bare_number_warnings` finds the unit fields given a bare number far outside what
any shipped profile has.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from typing import Any

from sflsim.config.schema import Scenario
from sflsim.inputs.messages import quantity_leaves
from sflsim.inputs.quantities import bare_number_warning

#: the warnings of the innermost :func:`input_warnings` block (None: outside every block)
_WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "sflsim_input_warnings", default=None)


def warn(message: str) -> None:
    """Warn about input that is valid but probably not what was meant: kept by the
    innermost :func:`input_warnings` block (once each), else said on standard error."""
    found = _WARNINGS.get()
    if found is None:
        print(f"warning: {message}", file=sys.stderr)
    elif message not in found:
        found.append(message)


@contextlib.contextmanager
def input_warnings(show: Callable[[str], None] | None = None) -> Iterator[list[str]]:
    """Collect the :func:`warn` warnings of the block, each once (a sweep validates the
    same base for every point); on leaving the block, errors included, pass each to
    ``show`` (the command line prints them) or, without ``show``, on to the enclosing
    block (or standard error)."""
    found: list[str] = []
    token = _WARNINGS.set(found)
    try:
        yield found
    finally:
        _WARNINGS.reset(token)
        for message in found:
            (show or warn)(message)


def bare_number_warnings(data: Any, model: Any = Scenario, where: str = "") -> list[str]:
    """A warning for each unit field of ``data`` (a mapping as read, before validation)
    given a bare number far outside what any shipped profile has
    (:func:`~sflsim.inputs.quantities.bare_number_warning`): ``uplink_bps: 5`` is 5 bit/s,
    ``latency_s: 35`` is 35 s. ``where`` leads each (``profile x.yaml: ``)."""
    out = []
    for path, dimension, value in quantity_leaves(data, model):
        field = next((k for k in reversed(path) if k != "value"), path[-1])
        message = bare_number_warning(".".join(path), field, dimension, value)
        if message is not None:
            out.append(f"{where}{message}")
    return out
