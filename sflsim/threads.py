"""How many torch threads a run uses: the cores this process may use, shared among workers.

Torch's intra-op threads busy-wait for each other between operations. When more of
them are runnable than there are cores (three runs side by side on two cores, each
with two threads) they spin against each other, and a round can take many times
longer than the same three runs one after another. The default therefore comes from
the cores this process may actually use (:func:`choose_threads`):

1. ``--threads N``, if given;
2. else ``OMP_NUM_THREADS``, if it is set to a positive integer (its first entry,
   as OpenMP reads a list);
3. else the usable cores (:func:`usable_cores`): the CPUs of the process's affinity
   mask (``taskset``, ``os.sched_getaffinity``), fewer where a cgroup CPU quota
   (a container's ``--cpus``) allows fewer, divided among the ``workers`` processes
   of a sweep (at least 1 each).

The default does not follow the momentary load of other processes: torch's results
depend on the thread count in the last bits (the reductions are split differently),
so the same command on the same machine would give different numbers depending on
what else runs. Instead :func:`others_busy_cores` measures the load while sflsim
starts, and :func:`busy_note` says when it competes with the chosen threads and what
to pass instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sflsim.errors import SflsimError
from sflsim.text import plural

#: the most torch threads a run may ask for, the bound of ``training.parallel_clients``
#: too (each of its clients is a host thread): far above any core count, below where
#: the system refuses to start more threads
MAX_THREADS = 1024

#: cgroup v2 and v1 CPU quota files (``max 100000`` / quota and period in microseconds)
CGROUP_V2_MAX = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def affinity_cpus() -> set[int] | None:
    """CPUs this process may run on, or None where the platform cannot say (macOS, Windows)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return None


def cgroup_cpu_quota(v2: Path = CGROUP_V2_MAX, v1: tuple[Path, Path] = CGROUP_V1) -> float | None:
    """CPUs' worth of time a cgroup quota allows this process (``1.5``), or None for no quota."""
    try:
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us, period_us = (int(p.read_text()) for p in v1)
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """CPU cores this process may use: its affinity mask, capped by a cgroup quota (>= 1)."""
    cpus = affinity_cpus()
    cores = len(cpus) if cpus else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


@dataclass(frozen=True)
class ThreadChoice:
    """The torch intra-op threads of a run (or of each sweep point) and why."""

    threads: int
    #: where the number comes from: "--threads 2", "OMP_NUM_THREADS=1", "2 usable cores / 3 workers"
    reason: str
    #: whether the user chose it (``--threads``, ``OMP_NUM_THREADS``) rather than the default rule
    explicit: bool

    def describe(self, per: str = "") -> str:
        """``torch threads: 1 (OMP_NUM_THREADS=1)``; ``per``: e.g. ``"point"``."""
        return f"torch threads: {self.threads}{f' per {per}' if per else ''} ({self.reason})"


def omp_num_threads(env: Mapping[str, str] | None = None) -> int | None:
    """``OMP_NUM_THREADS`` as a positive integer (first entry of a list), or None when unset
    or not a positive integer (OpenMP ignores such a value too)."""
    value = (os.environ if env is None else env).get("OMP_NUM_THREADS", "").strip()
    try:
        n = int(value.split(",")[0])
    except ValueError:
        return None
    return n if n >= 1 else None


def choose_threads(requested: int | None = None, workers: int = 1,
                   env: Mapping[str, str] | None = None) -> ThreadChoice:
    """The torch threads of one run or sweep point (rules in the module docstring).

    Args:
        requested: ``--threads`` (None: not given).
        workers: processes running at once on this machine's cores (a sweep's ``--workers``).
        env: the environment (default ``os.environ``).

    Raises:
        SflsimError: ``--threads`` or ``OMP_NUM_THREADS`` outside 1 to :data:`MAX_THREADS`.
    """
    if requested is not None:
        if not 1 <= requested <= MAX_THREADS:
            raise SflsimError(f"--threads {requested} is out of range; valid: 1 to {MAX_THREADS}")
        return ThreadChoice(requested, f"--threads {requested}", explicit=True)
    omp = omp_num_threads(env)
    if omp is not None:
        if omp > MAX_THREADS:
            raise SflsimError(f"OMP_NUM_THREADS={omp} is out of range for torch's threads; "
                              f"valid: 1 to {MAX_THREADS}")
        return ThreadChoice(omp, f"OMP_NUM_THREADS={omp}", explicit=True)
    cores = usable_cores()
    threads = max(1, cores // workers)
    share = f" / {workers} workers" if workers > 1 else ""
    return ThreadChoice(threads, f"{plural(cores, 'usable core')}{share}", explicit=False)


@contextlib.contextmanager
def omp_num_threads_set(threads: int | None) -> Iterator[None]:
    """``OMP_NUM_THREADS`` is ``threads`` in the block (None: left as it is), the previous
    value (or none) after it: how ``sflsim sweep --threads N`` reaches the points, whose
    threads follow :func:`choose_threads` (in this process and in the worker processes,
    which inherit the environment)."""
    if threads is None:
        yield
        return
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Torch runs ``threads`` intra-op threads in the block; the previous count after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -------------------------------------------------------------- load of other processes


@dataclass(frozen=True)
class CpuSample:
    """A reading of the usable CPUs' busy time and this process's own CPU time."""

    wall_s: float
    #: busy and total jiffies summed over the usable CPUs (from ``/proc/stat``)
    busy_ticks: int
    total_ticks: int
    #: CPU time of this process (all threads), seconds
    own_s: float


def cpu_sample(stat: Path = Path("/proc/stat")) -> CpuSample | None:
    """Read the usable CPUs' counters now; None where ``/proc/stat`` is not available."""
    cpus = affinity_cpus()
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *fields = line.split() or [""]
        if not name[3:].isdigit() or not name.startswith("cpu") or (
                cpus is not None and int(name[3:]) not in cpus):
            continue
        # user nice system idle iowait irq softirq steal (guest time is counted in user)
        ticks = [int(f) for f in fields[:8]]
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    if total == 0:
        return None
    own = os.times()
    return CpuSample(time.monotonic(), busy, total, own.user + own.system)


def others_busy_cores(before: CpuSample | None, after: CpuSample | None,
                      min_window_s: float = 0.5) -> float | None:
    """Cores' worth of the usable CPUs that other processes kept busy between two samples.

    None without samples or when they are less than ``min_window_s`` apart (too short to say).
    """
    if before is None or after is None or after.wall_s - before.wall_s < min_window_s:
        return None
    window_s = after.wall_s - before.wall_s
    busy = (after.busy_ticks - before.busy_ticks) / os.sysconf("SC_CLK_TCK") / window_s
    own = (after.own_s - before.own_s) / window_s
    return max(0.0, busy - own)


def busy_note(choice: ThreadChoice, busy_cores: float | None, cores: int | None = None,
              workers: int = 1) -> str | None:
    """A note when other work left fewer idle cores than the default thread count, else None.

    Args:
        choice: the run's threads, or each sweep point's (an explicit choice gets no note).
        busy_cores: from :func:`others_busy_cores`.
        cores: usable cores (default :func:`usable_cores`).
        workers: points of a sweep run at once (``--workers``), each with ``choice.threads``.
    """
    if choice.explicit or busy_cores is None:
        return None
    cores = usable_cores() if cores is None else cores
    idle = cores - busy_cores
    if idle >= choice.threads * workers - 0.5:
        return None
    fit = max(1, math.floor((idle + 0.5) / workers))
    if fit >= choice.threads:
        return None
    each = " each" if workers > 1 else ""
    at_once = f"{workers} points at once with " if workers > 1 else ""
    return (f"other processes kept about {busy_cores:.1f} of the {plural(cores, 'usable core')} "
            f"busy while sflsim started; {at_once}{plural(choice.threads, 'torch thread')}{each} "
            f"will compete with them, which can make rounds many times slower. --threads {fit} "
            f"(or OMP_NUM_THREADS={fit}) avoids that. The default does not follow the load "
            f"because the thread count changes results in the last bits.")


def measured_busy_cores(started: CpuSample | None, min_window_s: float = 0.5) -> float | None:
    """:func:`others_busy_cores` from ``started`` until now, waiting for the rest of
    ``min_window_s`` if less has passed (a sweep loads in less time than a run, which
    imports torch meanwhile); None without a sample."""
    if started is None:
        return None
    left = min_window_s - (time.monotonic() - started.wall_s)
    if left > 0:
        time.sleep(left)
    return others_busy_cores(started, cpu_sample(), min_window_s)
