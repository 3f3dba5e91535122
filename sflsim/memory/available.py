"""The memory a run may use: a cap from the environment, else the GPU's free memory for a
run on one, else what this host can still give (under a cgroup limit where there is one)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import torch

from sflsim.errors import ConfigError
from sflsim.units import UNITS, parse_quantity

#: Environment variable: a cap, in bytes, on the memory a run may use; overrides
#: what the machine reports (for tests, and for users who want to keep headroom).
LIMIT_ENV = "SFLSIM_MEMORY_LIMIT_BYTES"


def _cgroup_headroom() -> int | None:
    """Bytes left under this process's cgroup v2 memory limit, None without one."""
    try:
        rel = Path("/proc/self/cgroup").read_text().strip().split("\n")[0].split("::", 1)[1]
        base = Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((base / "memory.current").read_text())
    except (OSError, IndexError, ValueError):
        return None


def _own_rss() -> int:
    """Resident bytes of this process now (0 where /proc is missing)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def available_memory_bytes(device: torch.device | None = None) -> int:
    """Bytes this run may use in all: what it holds now plus what the machine can still give.

    ``$SFLSIM_MEMORY_LIMIT_BYTES`` (bytes, or a size with a unit: ``"4 GiB"``), when set, is the
    answer (a cap for tests, or for users who want headroom). Otherwise, on a CUDA
    ``device`` (where a run keeps its models, optimizer states, activations and
    dataset): the GPU's free memory (``torch.cuda.mem_get_info``) plus what torch's
    caching allocator already holds there (``torch.cuda.memory_reserved``). On the
    CPU: this process's resident set plus ``MemAvailable`` of ``/proc/meminfo``
    (bounded by the headroom under a cgroup v2 ``memory.max``); without ``/proc``,
    the physical memory (``os.sysconf``).

    Raises:
        ConfigError: the environment variable is not a positive size.
    """
    cap = os.environ.get(LIMIT_ENV)
    if cap is not None:
        return _memory_limit(cap)
    if device is not None and device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
                headroom = _cgroup_headroom()
                if headroom is not None:
                    free = min(free, headroom)
                return _own_rss() + max(free, 0)
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _memory_limit(cap: str) -> int:
    """``$SFLSIM_MEMORY_LIMIT_BYTES`` in bytes: a whole number (``8000000000``,
    ``8_000_000_000``) or a size with a unit as scenarios write it (``"4 GiB"``,
    ``"500 MB"``; :func:`sflsim.units.parse_quantity`).

    Raises:
        ConfigError: not a size, or less than one byte.
    """
    hint = ""  # a misspelled unit: parse_quantity's "did you mean"
    try:
        value = int(cap.strip().replace("_", ""))
    except ValueError:
        try:
            quantity = parse_quantity(cap, "bytes")
            value = int(quantity) if math.isfinite(quantity) else 0
        except ValueError as exc:
            close = re.search(r"did you mean '[^']+'\?", str(exc))
            value, hint = 0, f" ({close[0]})" if close else ""
    if value <= 0:
        raise ConfigError(f"{LIMIT_ENV}={cap!r}: expected a positive number of bytes, with "
                          f"or without a unit ({', '.join(UNITS['bytes'])}){hint}, e.g. "
                          f"{LIMIT_ENV}=8000000000 or {LIMIT_ENV}='8 GiB'")
    return value
