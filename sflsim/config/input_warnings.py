"""Warnings about input that is valid but probably not what was meant.

:func:`warn` keeps each warning for the innermost :func:`input_warnings` block (the
command line prints them once each), else says it on standard error;
:func:`bare_number_warnings` finds the unit fields given a bare number far outside what
any shipped profile has. A run keeps its warnings (:func:`run_warnings`: those said when
its scenario was loaded and those of its build) for ``summary.json`` and
``manifest.json``, or, strict (``sflsim run --strict``), refuses them as errors.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.inputs.messages import quantity_leaves
from sflsim.inputs.quantities import bare_number_warning

#: the warnings of the innermost :func:`input_warnings` block (None: outside every block)
_WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "sflsim_input_warnings", default=None)


class _RunWarnings(NamedTuple):
    """The input warnings of the run in progress (:func:`run_warnings`)."""

    found: list[str]
    strict: bool


#: the run in progress (None: no run)
_RUN: contextvars.ContextVar[_RunWarnings | None] = contextvars.ContextVar(
    "sflsim_run_warnings", default=None)

#: what a warning refused as an error says after it (``sflsim run --strict``)
STRICT_NOTE = "(an input warning, refused as an error by --strict)"


def warn(message: str) -> None:
    """Warn about input that is valid but probably not what was meant: kept by the
    innermost :func:`input_warnings` block (once each); else, in a run
    (:func:`run_warnings`), kept for its results and said on standard error (once: a
    warning said when its scenario was loaded is not said again), or, in a strict run,
    raised; else said on standard error.

    Raises:
        ConfigError: in a strict run, outside every :func:`input_warnings` block: the
            warning, followed by :data:`STRICT_NOTE`.
    """
    found = _WARNINGS.get()
    if found is not None:
        if message not in found:
            found.append(message)
        return
    run = _RUN.get()
    if run is not None:
        if run.strict:
            raise ConfigError(f"{message} {STRICT_NOTE}")
        if message in run.found:
            return
        run.found.append(message)
    print(f"warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def run_warnings(given: Iterable[str] = (), strict: bool = False) -> Iterator[list[str]]:
    """Keep the input warnings of a run (:func:`kept_warnings` reads them, for its
    ``summary.json`` and ``manifest.json``): ``given``, those said when its scenario was
    loaded (collected by an :func:`input_warnings` block around the loading), then every
    :func:`warn` of the block outside an :func:`input_warnings` block (building the run),
    each once.

    Args:
        given: the warnings of the scenario, its profiles and its fleet, as said.
        strict: refuse every warning as an error (``sflsim run --strict``).

    Raises:
        ConfigError: ``strict`` and a warning given or warned in the block: the first,
            followed by :data:`STRICT_NOTE` (the command line refuses those of the
            loading itself, one line each, before anything runs).
    """
    found = list(dict.fromkeys(given))
    if strict and found:
        more = f"; and {len(found) - 1} more" if len(found) > 1 else ""
        raise ConfigError(f"{found[0]} {STRICT_NOTE}{more}")
    token = _RUN.set(_RunWarnings(found, strict))
    try:
        yield found
    finally:
        _RUN.reset(token)


def kept_warnings() -> list[str]:
    """The input warnings of the run in progress (:func:`run_warnings`), in the order
    said; empty outside a run."""
    run = _RUN.get()
    return list(run.found) if run is not None else []


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
