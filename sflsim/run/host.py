"""The host process's settings while a run works: torch's deterministic algorithms and
Python's cycle collector (less often during a run, off during a round), each restored
after."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def deterministic_torch() -> Iterator[None]:
    """Torch deterministic algorithms (where they exist; others warn) for the block,
    then the previous setting."""
    before, warn = torch.are_deterministic_algorithms_enabled(), \
        torch.is_deterministic_algorithms_warn_only_enabled()
    # cuBLAS is deterministic only with a fixed workspace (read when CUDA starts)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    # deterministic mode also fills every new tensor with NaN (10% of CPU time here);
    # sflsim never reads memory it has not written, so results stay the same without it
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill


@contextlib.contextmanager
def fewer_gc_passes() -> Iterator[None]:
    """Python's cycle collector, less often, for the block (then as before).

    A run allocates millions of short-lived SimPy events while the trace and the
    rows it keeps grow; at the default thresholds (700, 10, 10) the collector scans
    those long-lived objects again and again (40% of a 10,000-device timing-only
    run, ``benchmarks/timing_scale.py``). Unreachable cycles are still collected.
    """
    before = gc.get_threshold()
    gc.set_threshold(50_000, 20, 1_000)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off for the block (a round: SimPy's events and processes
    are freed by reference counting as they finish), then on as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
