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
import os
import signal
import socket
import tempfile
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sflsim.errors import SflsimError
from sflsim.text import plural
from sflsim.threads import ThreadChoice, choose_threads, torch_threads

#: Seconds to wait, after Ctrl-C, for running points to stop and report.
GRACE_S = 10.0
#: Seconds a Ray cluster address gets to accept a connection before the sweep gives up
#: (Ray itself would retry for minutes).
CONNECT_TIMEOUT_S = 5.0
#: The Ray addresses ``--address`` takes.
RAY_ADDRESSES = ("auto (the cluster this machine is part of), HOST:PORT of the head node "
                 "(as 'ray start --head' prints it, e.g. 10.0.0.1:6379), ray://HOST:10001, "
                 "or local")


@dataclass(frozen=True)
class PointJob:
    """What a worker needs to run one point: the resolved scenario as plain data."""

    point_id: str
    #: ``Scenario.model_dump(mode="json")`` of the point.
    scenario_data: dict[str, Any]
    run_dir: Path


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
              threads: int | None = None) -> PointOutcome:
    """Run one point with :func:`sflsim.runner.run_scenario`; never raises for a bad point.

    Args:
        point_id: the point's id (``p000``).
        scenario_data: the point's resolved scenario (``model_dump(mode="json")``).
        run_dir: results directory; None: a temporary folder whose files are returned
            in :attr:`PointOutcome.files`.
        threads: torch intra-op threads for this run (None: leave as is).
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
            from sflsim.config.schema import Scenario
            from sflsim.runner import run_scenario

            # a point stopped part-way continues from its checkpoint; any other
            # leftovers of an earlier attempt are replaced
            with torch_threads(threads) if threads is not None else contextlib.nullcontext():
                result = run_scenario(Scenario.model_validate(scenario_data), out,
                                      resume=resumable(out / CHECKPOINT, scenario_data),
                                      overwrite=True)
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
        outcome = run_point(job.point_id, job.scenario_data, str(job.run_dir), threads)
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
        pool.submit(run_point, job.point_id, job.scenario_data, str(job.run_dir)): job
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


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        SflsimError: Ray is not installed (says how to install it).
    """
    try:
        import ray
    except ImportError:
        raise SflsimError("the ray executor needs Ray: pip install 'sflsim[ray]'") from None
    return ray


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
        refs = {task.remote(job.point_id, job.scenario_data, None, threads): job for job in jobs}
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


def ray_unreachable(address: str, detail: str) -> SflsimError:
    """The error of a Ray that cannot be started or reached at ``address``."""
    return SflsimError(f"cannot start or reach Ray at {address}: {detail}")


def _host_port(address: str) -> tuple[str, str] | None:
    """``(host, port)`` of ``HOST:PORT`` or ``ray://HOST:PORT`` (IPv6 in brackets), else
    None (``auto``, ``local``, anything else: Ray reads it)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or "/" in host or not port.isdigit():
        return None
    return host, port


def check_ray_address(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse a Ray cluster address (``HOST:PORT``, ``ray://HOST:PORT``) whose host name
    does not resolve or where nothing accepts a connection within ``timeout_s`` seconds,
    before Ray would retry for minutes. ``auto``, ``local`` and None: nothing to check.

    Raises:
        SflsimError: ``cannot start or reach Ray at ADDRESS: ...``, saying why and which
            addresses are valid.
    """
    target = _host_port(address) if address and address not in ("auto", "local") else None
    if target is None:
        return
    host, port = target
    if not 1 <= int(port) <= 65535:
        detail = f"port {port} is not a TCP port (1 to 65535)"
    else:
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
                # with TLS (RAY_USE_TLS) the GCS wants a TLS greeting first: Ray decides
                answer = None if _truthy(os.environ.get("RAY_USE_TLS")) else _http2_answer(conn)
            if answer is None or answer[3:4] == b"\x04":  # silence: Ray decides
                return
            said = f"answered {answer[:16]!r}" if answer else "closed the connection"
            detail = (f"{host}:{port} accepts connections but is not Ray's GCS (a gRPC server "
                      f"answers with an HTTP/2 SETTINGS frame; it {said}); the dashboard port, "
                      f"8265, is not the cluster's address: the head's GCS port is 6379 unless "
                      f"'ray start --head --port' said otherwise")
        except socket.gaierror:
            detail = f"the host name {host!r} does not resolve"
        except TimeoutError:
            detail = f"{host}:{port} did not answer within {timeout_s:g} s"
        except OSError as exc:
            detail = f"nothing accepts connections at {host}:{port} ({exc.strerror or exc})"
    raise ray_unreachable(address, f"{detail}; is the cluster up ('ray status' on its head "
                                   f"node)? --address takes {RAY_ADDRESSES}")


#: The client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 §3.4):
#: a gRPC server such as Ray's GCS answers with a SETTINGS frame (type 0x04, byte 3).
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _http2_answer(conn: socket.socket) -> bytes | None:
    """The first bytes a server sends back to an HTTP/2 client's greeting on ``conn``
    (its timeout applies), ``b""`` if it closed, or None if it said nothing in time."""
    try:
        conn.sendall(_HTTP2_HELLO)
        return conn.recv(64)
    except TimeoutError:
        return None
    except OSError:
        return b""


def _node_text(resources: dict[str, float]) -> str:
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    return f"{plural(cpus, 'CPU', spec='g')}, {plural(gpus, 'GPU', spec='g')}"


def check_ray_resources(ray: Any, where: str, cpus_per_point: float, gpus_per_point: float,
                        local: bool = False) -> None:
    """Refuse a sweep whose points ask for more CPUs or GPUs than any alive node of the
    Ray cluster has (Ray would hold such tasks forever); what a node has comes from
    ``ray.nodes()``.

    Args:
        ray: the ``ray`` module, initialised.
        where: the cluster in the message (``the Ray cluster at head:6379``).
        cpus_per_point, gpus_per_point: what each point's task asks for.
        local: a local Ray that this sweep started (its CPUs come from ``--workers``).

    Raises:
        SflsimError: naming the option, the value and what the nodes have.
    """
    try:
        nodes = [dict(n.get("Resources") or {}) for n in ray.nodes()
                 if n.get("Alive", n.get("alive", True))]
    except Exception:  # noqa: BLE001  (a Ray without node information: Ray decides)
        return
    eps = 1e-9

    def fits(node: dict[str, float]) -> bool:
        return (node.get("CPU", 0.0) + eps >= cpus_per_point
                and node.get("GPU", 0.0) + eps >= gpus_per_point)

    if any(fits(node) for node in nodes):
        return
    if not nodes:
        raise SflsimError(f"{where} has no node that is alive; start one ('ray start') or "
                          f"choose another --address")
    kinds: dict[str, int] = {}
    for node in nodes:
        kinds[_node_text(node)] = kinds.get(_node_text(node), 0) + 1
    have = "; ".join(text if n == 1 else f"{n} x {text}" for text, n in kinds.items())
    have = f"{plural(len(nodes), 'node')}: {have}"
    most_cpus = max(node.get("CPU", 0.0) for node in nodes)
    most_gpus = max(node.get("GPU", 0.0) for node in nodes)
    gpus, cpus = f"--gpus-per-point {gpus_per_point:g}", f"--cpus-per-point {cpus_per_point:g}"
    if gpus_per_point > most_gpus + eps and most_gpus == 0:
        message = (f"{gpus}: no node of {where} has a GPU ({have}); valid: --gpus-per-point 0 "
                   f"(the default) with --set training.device=cpu, or a cluster with GPU nodes")
    elif gpus_per_point > most_gpus + eps:
        message = (f"{gpus}: no node of {where} has {plural(gpus_per_point, 'GPU', spec='g')} "
                   f"({have}); valid: at most {most_gpus:g}")
    elif cpus_per_point > most_cpus + eps:
        more = " (a local Ray has --workers CPUs when --workers is above 1, else every core)" if local else ""
        message = (f"{cpus}: no node of {where} has {plural(cpus_per_point, 'CPU', spec='g')} "
                   f"({have}); valid: at most {most_cpus:g}{more}")
    else:
        best = max((node.get("CPU", 0.0) for node in nodes
                    if node.get("GPU", 0.0) + eps >= gpus_per_point), default=0.0)
        message = (f"{cpus} with {gpus}: no node of {where} has both ({have}); valid: "
                   f"--cpus-per-point at most {best:g} with {gpus}")
    raise SflsimError(f"{message}; no point was run")


def _ray_outcome(ray: Any, ref: Any, job: PointJob) -> PointOutcome:
    try:
        return ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return PointOutcome(job.point_id, "cancelled")
    except Exception as exc:  # noqa: BLE001  (worker died, sflsim missing on a node, ...)
        return PointOutcome(job.point_id, "failed", error=describe_error(exc),
                            traceback="".join(traceback.format_exception(exc)))
