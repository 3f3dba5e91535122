"""Running sweep points: in this process, on a local process pool, or as Ray tasks.

Every executor calls :func:`run_point` once per point and hands each
:class:`PointOutcome` to ``on_done`` as soon as it arrives, so the sweep table
is up to date after every point. A point that raises is an outcome with status
``failed`` and its error; the others go on. On Ctrl-C an executor stops
starting points, reports the points that were running as ``interrupted`` and
re-raises :class:`KeyboardInterrupt`.

- ``serial``: one point after another in this process (``--workers 1``; simplest
  to debug).
- ``process``: ``concurrent.futures.ProcessPoolExecutor`` with the ``spawn``
  start method (safe with torch). Workers ignore SIGINT except while they run a point.
- ``ray``: one ``@ray.remote`` task per point (one CPU each and no GPU unless asked:
  ``--cpus-per-point``, ``--gpus-per-point``; a torch thread per CPU) on
  the cluster at ``address`` or on a local Ray. A task runs in a temporary folder
  and returns every file its run wrote there (the Parquet tables' folders included:
  :func:`result_files`), which are written here, so the nodes need no shared file
  system; every node needs sflsim installed. An address where nothing
  answers, and points that ask for more CPUs or GPUs than any node has, are refused
  before any task is submitted (Ray would wait for them forever).

Locally every point runs with :func:`point_threads` torch threads: ``OMP_NUM_THREADS``
if set, else the usable cores divided by ``--workers`` (:mod:`sflsim.threads`). The
number depends only on the command and the machine, not on how many points are left,
so a resumed sweep runs its points as the uninterrupted one would have.
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sflsim.errors import SflsimError
from sflsim.execution.ray_cluster import (
    CONNECT_TIMEOUT_S,
    check_ray_address,
    check_ray_resources,
    ray_unreachable,
    require_ray,
)
from sflsim.threads import ThreadChoice, choose_threads, torch_threads

__all__ = [
    "CONNECT_TIMEOUT_S", "GRACE_S", "OnDone", "PointJob", "PointOutcome", "check_ray_address",
    "describe_error", "point_threads", "read_summary", "require_ray", "result_files", "run_point",
    "run_processes", "run_ray", "run_serial", "write_result_files",
]

#: Seconds to wait, after Ctrl-C, for running points to stop and report.
GRACE_S = 10.0


@dataclass(frozen=True)
class PointJob:
    """What a worker needs to run one point: the resolved scenario as plain data."""

    point_id: str
    #: ``Scenario.model_dump(mode="json")`` of the point.
    scenario_data: dict[str, Any]
    run_dir: Path
    #: the point's input warnings (:attr:`sflsim.sweep.spec.SweepPoint.warnings`)
    warnings: tuple[str, ...] = ()


@dataclass
class PointOutcome:
    """How one point ended: ``completed``, ``failed`` (with the error) or ``interrupted``."""

    point_id: str
    status: str
    error: str = ""
    #: The run's ``summary.json`` (completed, or interrupted after some rounds).
    summary: dict | None = None
    traceback: str = ""
    #: Result file path (relative to the run's folder, ``/``-separated; the tables'
    #: ``events.parquet/round-000001.parquet`` included) -> content, from a worker
    #: without the sweep's file system (Ray): :func:`result_files`.
    files: dict[str, bytes] = field(default_factory=dict)


OnDone = Callable[[PointOutcome], None]

_IN_POOL = False  # set in process-pool workers by _init_worker
_CATCH_SIGINT = False  # a pool worker takes Ctrl-C while it runs a point (unless ignored)
_STOPPING = False  # a pool worker saw Ctrl-C: start no further point


def run_point(point_id: str, scenario_data: dict[str, Any], run_dir: str | None,
              threads: int | None = None, warnings: tuple[str, ...] = ()) -> PointOutcome:
    """Run one point with :func:`sflsim.runner.run_scenario`; never raises for a bad point.

    Args:
        point_id: the point's id (``p000``).
        scenario_data: the point's resolved scenario (``model_dump(mode="json")``).
        run_dir: results directory; None: a temporary folder whose files are returned
            in :attr:`PointOutcome.files`.
        threads: torch intra-op threads for this run (None: leave as is).
        warnings: the point's input warnings, kept in its ``summary.json`` and
            ``manifest.json`` as ``sflsim run`` keeps a scenario's.
    """
    global _STOPPING
    if _IN_POOL and _STOPPING:
        return PointOutcome(point_id, "cancelled")
    with contextlib.ExitStack() as stack:
        out = (Path(run_dir) if run_dir is not None else
               Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"sflsim-{point_id}-"))))
        try:
            if _CATCH_SIGINT:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            from sflsim.checkpoint import CHECKPOINT, resumable
            from sflsim.config.scenario import Scenario
            from sflsim.runner import run_scenario

            # a point stopped part-way continues from its checkpoint; any other
            # leftovers of an earlier attempt are replaced
            with torch_threads(threads) if threads is not None else contextlib.nullcontext():
                result = run_scenario(Scenario.model_validate(scenario_data), out,
                                      resume=resumable(out / CHECKPOINT, scenario_data),
                                      overwrite=True, warnings=list(warnings))
            outcome = PointOutcome(point_id, "completed", summary=result.summary)
        except KeyboardInterrupt:
            _STOPPING = _IN_POOL
            outcome = PointOutcome(point_id, "interrupted", error="interrupted",
                                   summary=read_summary(out))
        except Exception as exc:  # noqa: BLE001  (a failing point must not stop the sweep)
            outcome = PointOutcome(point_id, "failed", error=describe_error(exc),
                                   traceback=traceback.format_exc())
        finally:
            if _CATCH_SIGINT:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        if run_dir is None:
            outcome.files = result_files(out)
    return outcome


def result_files(folder: Path) -> dict[str, bytes]:
    """Every file a run wrote in ``folder``, in its subfolders too (the clients and
    events tables are folders of Parquet files), by path relative to ``folder``
    (``/``-separated, ``events.parquet/round-000001.parquet``), with its bytes; hidden
    files (temporary files, the folder's lock) are left out."""
    return {f.relative_to(folder).as_posix(): f.read_bytes() for f in sorted(folder.rglob("*"))
            if f.is_file() and not any(part.startswith(".")
                                       for part in f.relative_to(folder).parts)}


def write_result_files(run_dir: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (:func:`result_files` of a point run elsewhere) into ``run_dir``,
    each atomically, after removing the result files an earlier attempt left there
    (:func:`sflsim.metrics.results.clear_results`), so that no table keeps rounds of
    another attempt.

    Raises:
        SflsimError: a name that is absolute or leads out of ``run_dir``.
    """
    from sflsim.metrics.results import atomic_write, clear_results

    if not files:
        return
    clear_results(run_dir)
    for name, content in files.items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise SflsimError(f"a point's result file {name!r} leads out of {run_dir}")
        path = run_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp, c=content: tmp.write_bytes(c))


def describe_error(exc: BaseException) -> str:
    """One line for the sweep table: a user error's message, else ``Type: message``."""
    text = str(exc) if isinstance(exc, SflsimError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def read_summary(run_dir: Path) -> dict | None:
    """``run_dir/summary.json`` if it exists and parses, else None."""
    import json

    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------ executors


def point_threads(workers: int, executor: str = "process",
                  cpus_per_point: float = 1.0) -> ThreadChoice:
    """Torch threads of each point of a sweep run with ``--workers workers``: with Ray one
    per CPU a task asks for (``cpus_per_point`` rounded down, at least one); locally
    ``OMP_NUM_THREADS`` if set, else the usable cores divided by ``workers``."""
    if executor == "ray":
        threads = max(1, int(cpus_per_point))
        reason = (f"one per CPU a point's Ray task asks for: --cpus-per-point {cpus_per_point:g}"
                  if threads == cpus_per_point else
                  f"--cpus-per-point {cpus_per_point:g} rounded down, at least one")
        return ThreadChoice(threads, reason, explicit=cpus_per_point != 1.0)
    return choose_threads(workers=workers)


def run_serial(jobs: Iterable[PointJob], on_done: OnDone, threads: int | None = None) -> None:
    """Run the points one after another in this process, with ``threads`` torch threads
    (None: :func:`point_threads` of one worker)."""
    threads = point_threads(1).threads if threads is None else threads
    for job in jobs:
        outcome = run_point(job.point_id, job.scenario_data, str(job.run_dir), threads,
                            job.warnings)
        on_done(outcome)
        if outcome.status == "interrupted":
            raise KeyboardInterrupt


def _init_worker(threads: int) -> None:
    global _IN_POOL, _CATCH_SIGINT
    _IN_POOL = True
    _CATCH_SIGINT = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches a worker only in run_point
    import torch

    torch.set_num_threads(threads)


def run_processes(jobs: Iterable[PointJob], on_done: OnDone, workers: int,
                  threads: int | None = None) -> None:
    """Run the points on ``workers`` local processes (spawned), ``threads`` torch threads
    each (None: :func:`point_threads` of ``workers``)."""
    import multiprocessing

    threads = point_threads(workers).threads if threads is None else threads
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(threads,))
    futures: dict[Future, PointJob] = {
        pool.submit(run_point, job.point_id, job.scenario_data, str(job.run_dir), None,
                    job.warnings): job
        for job in jobs}
    pending, reported = set(futures), set()
    try:
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                reported.add(fut)
                _report(on_done, _pool_outcome(fut, futures[fut]))
    except KeyboardInterrupt:
        pending = set(futures) - reported
        for fut in pending:
            fut.cancel()
        running = {f for f in pending if not f.cancelled()}
        try:
            done, stuck = wait(running, timeout=GRACE_S)
        except KeyboardInterrupt:
            done, stuck = set(), running
        for fut in done:
            _report(on_done, _pool_outcome(fut, futures[fut]))
        for fut in stuck:
            on_done(PointOutcome(futures[fut].point_id, "interrupted", error="interrupted"))
        _terminate(pool)
        raise
    finally:
        pool.shutdown(wait=not pending, cancel_futures=True)


def _report(on_done: OnDone, outcome: PointOutcome) -> None:
    """Hand on a point that ran; one that a stopping worker never started is not reported."""
    if outcome.status != "cancelled":
        on_done(outcome)


def _pool_outcome(fut: Future, job: PointJob) -> PointOutcome:
    try:
        return fut.result()
    except Exception as exc:  # noqa: BLE001  (a worker process died, or pickling failed)
        return PointOutcome(job.point_id, "failed", error=describe_error(exc),
                            traceback="".join(traceback.format_exception(exc)))


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's worker processes now (Python 3.14 has ``terminate_workers``)."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:  # pragma: no cover
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()


def run_ray(jobs: Iterable[PointJob], on_done: OnDone, address: str | None = None,
            workers: int | None = None, *, cpus_per_point: float = 1.0,
            gpus_per_point: float = 0.0) -> None:
    """Run each point as a Ray task on the cluster at ``address`` (None or ``"local"``:
    start a local Ray with ``workers`` CPUs, default all), or on an already
    initialised Ray. Each task asks Ray for ``cpus_per_point`` CPUs and
    ``gpus_per_point`` GPUs (fractions allowed: 0.25 puts four points on one GPU; Ray
    sets each task's ``CUDA_VISIBLE_DEVICES``), and runs with one torch thread per CPU
    asked (at least one).

    Raises:
        SflsimError: Ray is not installed, the cluster cannot be reached
            (:func:`check_ray_address`), or no node of it can run a point
            (:func:`check_ray_resources`); then no point was submitted.
    """
    ray = require_ray()
    import logging

    started = not ray.is_initialized()
    remote = bool(address) and address != "local"
    if started:
        if remote:
            check_ray_address(address)
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.WARNING}
        try:
            if remote:
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=workers, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ray_unreachable(address or "local", str(exc)) from None
    try:
        where = (f"the Ray cluster at {address}" if started and remote else
                 "the local Ray" if started else "the Ray this process is connected to")
        check_ray_resources(ray, where, cpus_per_point, gpus_per_point,
                            local=started and not remote)
        task = ray.remote(num_cpus=cpus_per_point, num_gpus=gpus_per_point,
                          max_retries=0)(run_point)
        threads = point_threads(1, "ray", cpus_per_point).threads
        refs = {task.remote(job.point_id, job.scenario_data, None, threads, job.warnings): job
                for job in jobs}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    on_done(_ray_outcome(ray, ref, refs[ref]))
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)  # a running task gets KeyboardInterrupt and reports
            try:
                done, stuck = ray.wait(pending, num_returns=len(pending), timeout=GRACE_S)
            except KeyboardInterrupt:
                done, stuck = [], pending
            for ref in done:
                _report(on_done, _ray_outcome(ray, ref, refs[ref]))
            for ref in stuck:
                ray.cancel(ref, force=True)
                on_done(PointOutcome(refs[ref].point_id, "interrupted", error="interrupted"))
            raise
    finally:
        if started:
            ray.shutdown()


def _ray_outcome(ray: Any, ref: Any, job: PointJob) -> PointOutcome:
    try:
        return ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return PointOutcome(job.point_id, "cancelled")
    except Exception as exc:  # noqa: BLE001  (worker died, sflsim missing on a node, ...)
        return PointOutcome(job.point_id, "failed", error=describe_error(exc),
                            traceback="".join(traceback.format_exception(exc)))
