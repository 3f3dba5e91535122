"""A round's clients trained in worker processes (``training.parallel_backend: processes``).

FedAvg's family trains a round's clients apart from the simulated round: on host threads
before it (:meth:`sflsim.algorithms.fedavg.FedAvg.train_ahead`), where they contend for
the interpreter and its locks, or here, while it is simulated
(:meth:`~sflsim.algorithms.fedavg.FedAvg.start_in_workers`, :meth:`ClientWorkers.submit`):
each of ``training.parallel_clients`` worker processes trains one client at a time with
one torch thread, so they scale with the cores.

The pool (:class:`ClientWorkers`) is forked from the run's process on the first round
that needs it (:func:`client_workers`) and lives until the run ends
(:func:`close_workers`, called by the round loop however it ends), an error, a
KeyboardInterrupt, or the end of the process; a worker whose parent dies is killed with
it (Linux's parent-death signal, and a check of the parent every second).

Each worker runs in a session of its own (``setsid``), as the workers ``torchrun``
starts do (pfl-research's simulations among them): the terminal's Ctrl-C reaches the
main process only, which stops the workers, and where the kernel shares CPU time between
sessions first (``/proc/sys/kernel/sched_autogroup_enabled``, most desktop and many
server Linux kernels) a busy machine gives each worker a session's share; in the run's
own session the workers would split one share with the main process, and on a machine
other sessions keep busy they were slower than one serial process
(``benchmarks/README.md``, ``peers.py``).
Forking copies what the workers read: the model's architecture and memory layout, the
training data, the loss and the optimizer's configuration; nothing is rebuilt.

Once per round the main process writes the global model (parameters and buffers) into a
shared-memory base slot (``tensor.share_memory_()``, mapped by every worker), and
FedProx's anchor into another. Per client it sends its index batches, drawn from the
client's own generator exactly as a serial run draws them, the state of its augmentation
generator, the learning rate, the proximal weight, each module's training mode and which
parameters train; a client that starts from a model of its own (FedMut's mutation:
:meth:`~sflsim.algorithms.fedavg.FedAvg.local_model` overridden) has it written into one
of the pool's client slots, where every worker writes its trained state back. The
worker returns the per-batch losses and the generator's final state, and the main
process records exactly what a serial run records. Each
client's update depends only on what is sent, so the result is bit-identical to a serial
run with one torch thread, in whatever order the workers finish; the averaging order
stays the serial one. The step itself is :func:`whole_model_step`, which the serial
path runs too. A worker keeps its last client's optimizer for the next one that trains
the same parameters, its state dropped and its learning rate set: what a new one would
be, without building it.

Once the rounds have forked the workers, evaluations run there too
(:meth:`ClientWorkers.evaluate`): the global model goes into the base slot, the test set
to each worker once, and the test batches are spread over the workers, one batch per
task. Tasks go to the workers in turn, up to :data:`SLOTS_PER_WORKER` each. What runs
inside a worker is :mod:`sflsim.execution.worker_process`.
"""

from __future__ import annotations

import collections
import copy
import multiprocessing
import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np
import torch
from torch import nn

from sflsim.errors import ConfigError
from sflsim.execution.worker_process import Setup, serve
from sflsim.models.module_state import state_tensors

__all__ = ["ClientWorkers", "Job", "client_workers", "close_workers",
           "running_workers"]

#: clients in flight per worker: one training, the others waiting in its pipe, so a
#: worker seldom waits for the main process between clients (2: a median 3 ms between
#: clients on the loaded 2-core machine, 4: under 1 ms)
SLOTS_PER_WORKER = 4
#: seconds between progress reports while the workers train
POLL_S = 0.1
_ALIGN = 64  # bytes: where each tensor starts in a slot


@dataclass(frozen=True)
class Job:
    """One client's local training for :meth:`ClientWorkers.train`: its id, its index
    batches (int64 ``(B,)`` each), its augmentation generator (None: no augmentation),
    whose state moves on as the worker draws from it, and ``start()`` making the model it
    starts from, which then receives the trained state; None: it starts from the round's
    base model (:meth:`ClientWorkers.set_base`), and the trained state goes into a
    module of ``train``'s ``blank()``."""

    client_id: int
    batches: list[torch.Tensor]
    generator: torch.Generator | None
    start: Callable[[], nn.Module] | None = None


class _Layout:
    """Where each state-dict entry of a model lies in a slot: one shared byte buffer,
    each entry at a 64-byte boundary with the model's own strides."""

    def __init__(self, model: nn.Module):
        self.entries: list[tuple[str, torch.dtype, torch.Size, tuple[int, ...], int]] = []
        offset = 0
        for name, t in model.state_dict().items():
            stride = torch.empty_like(t).stride()  # its own when dense, else a dense one
            offset = -(-offset // _ALIGN) * _ALIGN
            self.entries.append((name, t.dtype, t.shape, stride, offset))
            offset += t.numel() * t.element_size()
        self.nbytes = offset
        self.params = [name for name, _ in model.named_parameters()]

    def shared(self) -> dict[str, torch.Tensor]:
        """A new slot in shared memory: state-dict name -> tensor."""
        buf = torch.zeros(max(self.nbytes, 1), dtype=torch.uint8).share_memory_()
        return {name: buf[off:off + shape.numel() * dtype.itemsize].view(dtype)
                .as_strided(shape, stride) for name, dtype, shape, stride, off in self.entries}


@dataclass
class _Tasks:
    """Tasks on the workers (:meth:`ClientWorkers._start`): those not sent yet, those in
    flight per worker, how to send one and take its answer, the progress callback and the
    batches reported so far."""

    queue: collections.deque[int]
    busy: list[set[int]]
    send: Callable[[int, int], None]
    receive: Callable[..., None]
    report: Callable[[], None]
    seen: int


class _RemoteTraceback(Exception):
    """A worker's traceback, chained to the exception it raised."""

    def __str__(self) -> str:
        return self.args[0]


class ClientWorkers:
    """``workers`` forked worker processes that train clients of ``model``'s
    architecture on ``data`` (:func:`whole_model_step`, one torch thread each).

    Raises:
        ConfigError: not on Linux (the workers are forked; on macOS forking a process
            that has run torch is unsafe, Windows cannot fork).
        ValueError: ``workers`` < 1.
    """

    def __init__(self, workers: int, model: nn.Module, data: object, augment: object,
                 loss_fn: Callable, optimizer: object):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
            raise ConfigError(f"training.parallel_backend: 'processes' forks worker processes, "
                              f"which sflsim does only on Linux (this is {sys.platform}); "
                              f"valid here: threads")
        self.layout = _Layout(model)
        slots = [self.layout.shared() for _ in range(SLOTS_PER_WORKER * workers)]
        self.base_slot = self.layout.shared()
        anchor = self.layout.shared()
        self.anchor = [anchor[name] for name in self.layout.params]
        self.progress = torch.zeros(workers, dtype=torch.int64).share_memory_()
        self.slots, self.pid, self.closed, self.data = slots, os.getpid(), False, data
        self.slot_tensors = [list(slot.values()) for slot in slots]  # state-dict order
        self.pending: _Tasks | None = None  # tasks started and not finished
        self.test: tuple[torch.Tensor, torch.Tensor] | None = None  # what the workers hold
        self.evaluations = 0
        self.base: tuple[list[bool], list[bool]] | None = None  # its modes, what trains
        setup = Setup(copy.deepcopy(model), data, augment, loss_fn, optimizer, slots,
                       self.base_slot, self.anchor, self.progress)
        fork = multiprocessing.get_context("fork")
        self.conns, self.procs = [], []
        try:
            for rank in range(workers):
                ours, theirs = fork.Pipe()
                proc = fork.Process(target=serve, args=(setup, theirs, rank, self.pid),
                                    name=f"sflsim-client-worker-{rank}", daemon=True)
                proc.start()
                theirs.close()
                self.conns.append(ours)
                self.procs.append(proc)
        except BaseException:
            self.close()
            raise

    def set_base(self, model: nn.Module) -> None:
        """Copy ``model``'s state (parameters and buffers), each module's training mode and
        which parameters require grad, for the jobs without ``start`` to start from."""
        with torch.no_grad():
            for view, t in zip(self.base_slot.values(), state_tensors(model)):
                view.copy_(t)
        self.base = _modes(model)

    def set_anchor(self, anchor: nn.Module) -> None:
        """Copy the parameters of ``anchor`` (FedProx: the round's global model) where the
        workers' :func:`proximal_term` reads them.

        Raises:
            ValueError: ``anchor``'s parameters do not match the model's in count or shape.
        """
        params = list(anchor.parameters())
        if [p.shape for p in params] != [a.shape for a in self.anchor]:
            raise ValueError("the proximal anchor's parameters do not match the model's")
        with torch.no_grad():
            for mine, theirs in zip(self.anchor, params):
                mine.copy_(theirs)

    def train(self, jobs: list[Job], lr: float, mu: float | None, report: Callable[[], None],
              blank: Callable[[], nn.Module] | None = None
              ) -> list[tuple[nn.Module, list[float]]]:
        """Train ``jobs`` in the workers and wait for them: :meth:`submit`, then what it
        returns called."""
        return self.submit(jobs, lr, mu, report, blank)()

    def submit(self, jobs: list[Job], lr: float, mu: float | None, report: Callable[[], None],
               blank: Callable[[], nn.Module] | None = None
               ) -> Callable[[], list[tuple[nn.Module, list[float]]]]:
        """Start training ``jobs`` in the workers at learning rate ``lr``
        (``training.optimizer``'s kind), adding :func:`proximal_term` with weight ``mu``
        and the anchor of :meth:`set_anchor` unless ``mu`` is None: the first
        :data:`SLOTS_PER_WORKER` jobs of each worker are sent now, and the caller may do
        other work (simulate the round) while they train. Returns ``finish()``, which sends
        the others as the workers free up and returns per job, in order, its trained model
        (the one ``start()`` made, else one of ``blank()``, a model of the architecture
        whose values are overwritten) and per-batch losses; each job's generator has
        moved on as in a serial run; ``report()`` is called once per batch trained, from
        this thread, while ``finish()`` runs. On any exception, KeyboardInterrupt
        included, the workers are stopped (:meth:`close`) before it propagates.

        Raises:
            RuntimeError: a worker process died (its exit code in the message); a job
                without ``start`` and no :meth:`set_base` or ``blank``; an earlier
                submission not finished.
            Exception: what training a client raised in a worker (its traceback chained).
        """
        self._check_open()
        if any(job.start is None for job in jobs) and (self.base is None or blank is None):
            raise RuntimeError("jobs without start() need set_base() and blank")
        out: list = [None] * len(jobs)
        free = list(range(len(self.slots)))
        held: dict[int, tuple[int, nn.Module | None]] = {}  # job -> its slot, its model

        def send(rank: int, i: int) -> None:
            held[i] = self._send(rank, i, free.pop(), jobs[i], lr, mu)

        def receive(i: int, losses: list[float], state: bytes | None) -> None:
            slot, module = held.pop(i)
            module = blank() if module is None else module
            with torch.no_grad():
                for t, view in zip(state_tensors(module), self.slot_tensors[slot]):
                    t.copy_(view)
            free.append(slot)
            if state is not None:
                jobs[i].generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
            out[i] = (module, losses)

        tasks = self._start(len(jobs), send, receive, report)

        def finish() -> list[tuple[nn.Module, list[float]]]:
            self._finish(tasks)
            return out
        return finish

    def evaluate(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                 report: Callable[[], None]) -> int:
        """How many of the test samples, uint8 images ``x`` ``(N, C, H, W)`` and labels
        ``y`` ``(N,)``, ``model`` (of the workers' architecture) classifies right, its
        batches of ``batch_size`` spread over the workers
        (:func:`~sflsim.execution.worker_process.correct_predictions` in eval mode, one
        torch thread each: the counts of a serial evaluation with one torch thread).
        ``x`` and ``y`` go to every worker the first time, as NumPy arrays, unless they
        are the data's own test split, which the workers hold already; ``report()``
        is called once per batch evaluated. Uses the base slot: not while clients train.

        Raises:
            RuntimeError: a worker process died; the workers have been stopped.
        """
        self._check_open()
        if self.test is None or self.test[0] is not x or self.test[1] is not y:
            own = x is getattr(self.data, "x_test", None) and y is getattr(self.data, "y_test", None)
            for conn in self.conns:  # the data's own test split: the copy forked with it
                conn.send(("test",) if own else ("test", x.numpy(), y.numpy()))
            self.test = (x, y)
        self.set_base(model)
        self.evaluations += 1
        starts = range(0, len(y), batch_size)
        hits = [0] * len(starts)

        def send(rank: int, i: int) -> None:
            self.conns[rank].send(("eval", i, self.evaluations, starts[i], starts[i] + batch_size))

        def receive(i: int, count: int) -> None:
            hits[i] = count
            report()

        self._finish(self._start(len(starts), send, receive, lambda: None))
        return sum(hits)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the client worker processes have been stopped")

    def _start(self, count: int, send: Callable[[int, int], None],
               receive: Callable[..., None], report: Callable[[], None]) -> _Tasks:
        """Tasks ``0..count - 1``, the first sent (at most :data:`SLOTS_PER_WORKER` in
        flight per worker): ``send(rank, i)`` sends task ``i`` to worker ``rank``,
        ``receive(i, *answer)`` takes its answer; ``report()`` once per training batch a
        worker finishes. :meth:`_finish` runs the rest. On any exception the workers are
        stopped (:meth:`close`) before it propagates.

        Raises:
            RuntimeError: the tasks of an earlier call are not finished.
        """
        if self.pending is not None:
            self.close()
            raise RuntimeError("the client worker processes were given new tasks before "
                               "the last ones finished")
        tasks = _Tasks(collections.deque(range(count)), [set() for _ in self.conns],
                       send, receive, report, int(self.progress.sum()))
        self.pending = tasks
        try:
            self._fill(tasks)
        except BaseException:
            self.close()
            raise
        return tasks

    def _fill(self, tasks: _Tasks) -> None:
        """Send queued tasks while a worker has room, one each in turn (the work is spread)."""
        queue, busy = tasks.queue, tasks.busy
        while queue and (free := [r for r, t in enumerate(busy) if len(t) < SLOTS_PER_WORKER]):
            for rank in free[:len(queue)]:
                i = queue.popleft()
                tasks.send(rank, i)
                busy[rank].add(i)

    def _finish(self, tasks: _Tasks) -> None:
        """Run ``tasks`` (from :meth:`_start`) to their end.

        Raises:
            RuntimeError: a worker process died (its exit code in the message).
            Exception: what a task raised in a worker (its traceback chained).
        """
        sentinels = {p.sentinel: p for p in self.procs}
        try:
            while tasks.queue or any(tasks.busy):
                self._fill(tasks)
                ready = wait([*self.conns, *sentinels], timeout=POLL_S)
                tasks.seen = self._report(tasks.seen, tasks.report)
                for conn in ready:
                    if conn in sentinels:
                        raise RuntimeError(f"client worker process {sentinels[conn].name} died "
                                           f"(exit code {sentinels[conn].exitcode})")
                    kind, i, *answer = conn.recv()
                    tasks.busy[self.conns.index(conn)].discard(i)
                    if kind == "error":
                        exc, text = answer
                        raise exc from _RemoteTraceback(text)
                    tasks.receive(i, *answer)
            self._report(tasks.seen, tasks.report)
            self.pending = None
        except BaseException:
            self.close()
            raise

    def _send(self, rank: int, i: int, slot: int, job: Job, lr: float, mu: float | None
              ) -> tuple[int, nn.Module | None]:
        """Send job ``i`` to worker ``rank``, its starting state written into ``slot``
        unless it starts from the base; returns the slot and the model made by ``start``
        (None: from the base)."""
        if job.start is None:
            module, source, (modes, trains) = None, None, self.base
        else:
            module, source = job.start(), slot
            modes, trains = _modes(module)
            with torch.no_grad():
                for view, t in zip(self.slot_tensors[slot], state_tensors(module)):
                    view.copy_(t)
        sizes = [len(b) for b in job.batches]
        flat = torch.cat(job.batches).numpy() if job.batches else np.zeros(0, np.int64)
        state = None if job.generator is None else job.generator.get_state().numpy().tobytes()
        self.conns[rank].send(("train", i, source, slot, flat, sizes, modes, trains, state, lr, mu))
        return slot, module

    def _report(self, seen: int, report: Callable[[], None]) -> int:
        done = int(self.progress.sum())
        for _ in range(done - seen):
            report()
        return done

    def close(self) -> None:
        """Stop the workers (at once: a client in training is abandoned) and wait for
        them; idempotent, and a no-op in any process but the one that started them."""
        if self.closed or os.getpid() != self.pid:
            return
        self.closed = True
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()


# ----- the pool of a run --------------------------------------------------------------

_POOLS: weakref.WeakKeyDictionary[object, ClientWorkers] = weakref.WeakKeyDictionary()


def client_workers(owner: object, make: Callable[[], ClientWorkers]) -> ClientWorkers:
    """``owner``'s pool (an algorithm's, for its run), made by ``make()`` the first time
    (or after :func:`close_workers`); stopped when ``owner`` is garbage-collected or the
    process exits, if not before. Kept apart from ``owner``, which checkpoints pickle."""
    pool = _POOLS.get(owner)
    if pool is None or pool.closed:
        pool = _POOLS[owner] = make()
        weakref.finalize(owner, pool.close)
    return pool


def running_workers(owner: object) -> ClientWorkers | None:
    """``owner``'s pool if it has one that has not been stopped, else None."""
    pool = _POOLS.get(owner)
    return None if pool is None or pool.closed else pool


def close_workers(owner: object) -> None:
    """Stop ``owner``'s worker processes, if it has any (the round loop calls it when a run
    ends, however it ends)."""
    pool = _POOLS.pop(owner, None)
    if pool is not None:
        pool.close()


def _modes(model: nn.Module) -> tuple[list[bool], list[bool]]:
    """Each module's training mode and each parameter's ``requires_grad``, in order."""
    return [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()]
