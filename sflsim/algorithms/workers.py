"""A round's clients trained in worker processes (``training.parallel_backend: processes``).

FedAvg's family trains a round's clients ahead of the simulated round
(:meth:`sflsim.algorithms.fedavg.FedAvg.train_ahead`). On host threads those clients
contend for the interpreter and its locks; here each of ``training.parallel_clients``
worker processes trains one client at a time with one torch thread, so they scale with
the cores.

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
path runs too.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np
import torch
from torch import nn

from sflsim.algorithms.context import make_optimizer
from sflsim.algorithms.steps import training_samples
from sflsim.errors import ConfigError

#: clients in flight per worker: one training, the others waiting in its pipe, so a
#: worker seldom waits for the main process between clients (2: a median 3 ms between
#: clients on the loaded 2-core machine, 4: under 1 ms)
SLOTS_PER_WORKER = 4
#: seconds between progress reports while the workers train
POLL_S = 0.1
_ALIGN = 64  # bytes: where each tensor starts in a slot


def proximal_term(local: nn.Module, mu: float, anchor: Iterable[torch.Tensor]) -> torch.Tensor:
    """``(mu / 2) * sum ||w - w^a||^2`` over the parameters ``w`` of ``local`` and the
    tensors ``anchor`` (the anchor model's parameters, in the same order, detached): a 0-d
    tensor. FedProx's term (:meth:`~sflsim.algorithms.fedavg.GlobalModelAlgorithm.penalty`)."""
    squares = [(w - a.detach()).pow(2).sum() for w, a in zip(local.parameters(), anchor)]
    return mu / 2 * torch.stack(squares).sum()


def whole_model_step(local: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                     y: torch.Tensor, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                     penalty: Callable[[nn.Module], torch.Tensor | None]) -> torch.Tensor:
    """One SGD step of ``local`` on images ``x`` ``(B, C, H, W)`` and labels ``y`` ``(B,)``:
    ``loss_fn`` plus ``penalty(local)`` when not None; returns the detached loss (0-d,
    the penalty left out). Serial, threaded and worker-process training all run it."""
    loss = loss_fn(local(x), y)
    extra = penalty(local)
    optimizer.zero_grad(set_to_none=True)
    (loss if extra is None else loss + extra).backward()
    optimizer.step()
    return loss.detach()


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
class _Setup:
    """What a worker reads, copied into it by the fork."""

    model: nn.Module
    data: object
    augment: object
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    optimizer: object
    slots: list[dict[str, torch.Tensor]]  # a client's start and trained state
    base: dict[str, torch.Tensor]  # the round's base model
    anchor: list[torch.Tensor]
    progress: torch.Tensor  # int64 (workers,): batches done by each worker


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
        self.slots, self.pid, self.closed = slots, os.getpid(), False
        self.base: tuple[list[bool], list[bool]] | None = None  # its modes, what trains
        setup = _Setup(copy.deepcopy(model), data, augment, loss_fn, optimizer, slots,
                       self.base_slot, self.anchor, self.progress)
        fork = multiprocessing.get_context("fork")
        self.conns, self.procs = [], []
        try:
            for rank in range(workers):
                ours, theirs = fork.Pipe()
                proc = fork.Process(target=_serve, args=(setup, theirs, rank, self.pid),
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
            views = self.base_slot
            for name, t in model.state_dict().items():
                views[name].copy_(t)
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
        """Train ``jobs`` in the workers at learning rate ``lr`` (``training.optimizer``'s
        kind), adding :func:`proximal_term` with weight ``mu`` and the anchor of
        :meth:`set_anchor` unless ``mu`` is None; ``report()`` is called once per batch
        trained, from this thread. Returns per job, in order, its trained model (the one
        ``start()`` made, else one of ``blank()``, a model of the architecture whose
        values are overwritten) and per-batch losses; each job's generator has moved on
        as in a serial run. On any exception, KeyboardInterrupt included, the workers are
        stopped (:meth:`close`) before it propagates.

        Raises:
            RuntimeError: a worker process died (its exit code in the message); a job
                without ``start`` and no :meth:`set_base` or ``blank``.
            Exception: what training a client raised in a worker (its traceback chained).
        """
        if self.closed:
            raise RuntimeError("the client worker processes have been stopped")
        if any(job.start is None for job in jobs) and (self.base is None or blank is None):
            raise RuntimeError("jobs without start() need set_base() and blank")
        out: list = [None] * len(jobs)
        queue, free = collections.deque(range(len(jobs))), list(range(len(self.slots)))
        busy: list[dict[int, tuple[int, nn.Module | None]]] = [{} for _ in self.conns]
        sentinels = {p.sentinel: p for p in self.procs}
        seen = int(self.progress.sum())
        try:
            while queue or any(busy):
                for rank in range(len(self.conns)):
                    while queue and len(busy[rank]) < SLOTS_PER_WORKER:
                        i = queue.popleft()
                        busy[rank][i] = self._send(rank, i, free.pop(), jobs[i], lr, mu)
                ready = wait([*self.conns, *sentinels], timeout=POLL_S)
                seen = self._report(seen, report)
                for conn in ready:
                    if conn in sentinels:
                        raise RuntimeError(f"client worker process {sentinels[conn].name} died "
                                           f"(exit code {sentinels[conn].exitcode})")
                    rank = self.conns.index(conn)
                    i, slot, module, losses = self._receive(conn, busy[rank], jobs, blank)
                    free.append(slot)
                    out[i] = (module, losses)
            self._report(seen, report)
        except BaseException:
            self.close()
            raise
        return out

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
                views = self.slots[slot]
                for name, t in module.state_dict().items():
                    views[name].copy_(t)
        sizes = [len(b) for b in job.batches]
        flat = torch.cat(job.batches).numpy() if job.batches else np.zeros(0, np.int64)
        state = None if job.generator is None else job.generator.get_state().numpy().tobytes()
        self.conns[rank].send((i, source, slot, flat, sizes, modes, trains, state, lr, mu))
        return slot, module

    def _receive(self, conn, busy: dict[int, tuple[int, nn.Module | None]], jobs: list[Job],
                 blank: Callable[[], nn.Module] | None) -> tuple[int, int, nn.Module, list[float]]:
        """A worker's answer: the trained state copied from its slot into the job's model,
        the generator's state set; returns (the job's index, its slot, now free, the
        model, the losses).

        Raises:
            Exception: what the worker raised, its traceback chained.
        """
        kind, i, *rest = conn.recv()
        slot, module = busy.pop(i)
        if kind == "error":
            exc, text = rest
            raise exc from _RemoteTraceback(text)
        losses, state = rest
        module = blank() if module is None else module
        with torch.no_grad():
            views = self.slots[slot]
            for name, t in module.state_dict().items():
                t.copy_(views[name])
        if state is not None:
            jobs[i].generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        return i, slot, module, losses

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


def close_workers(owner: object) -> None:
    """Stop ``owner``'s worker processes, if it has any (the round loop calls it when a run
    ends, however it ends)."""
    pool = _POOLS.pop(owner, None)
    if pool is not None:
        pool.close()


# ----- in a worker ----------------------------------------------------------------------

def _serve(setup: _Setup, conn, rank: int, parent: int) -> None:
    """A worker's loop: train each client sent until told to stop (None), the pipe
    closes or the parent process is gone."""
    _leave_parent_signals(parent)
    torch.set_num_threads(1)
    entries = list(setup.model.state_dict().items())
    generator = torch.Generator()
    while True:
        try:
            if not conn.poll(1.0):
                if os.getppid() != parent:
                    return
                continue
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            answer = ("done", task[0], *_train(setup, entries, task, rank, generator))
        except Exception as exc:  # sent to the main process, which raises it
            answer = ("error", task[0], _picklable(exc), traceback.format_exc())
        conn.send(answer)


def _train(setup: _Setup, entries: list, task: tuple, rank: int,
           generator: torch.Generator) -> tuple[list[float], bytes | None]:
    """One client: load its slot, train its batches, write the slot back; returns the
    per-batch losses and the augmentation generator's final state (None: none)."""
    _, source, slot, flat, sizes, modes, trains, state, lr, mu = task
    views = setup.slots[slot]
    model, start = setup.model, setup.base if source is None else setup.slots[source]
    with torch.no_grad():
        for name, t in entries:
            t.copy_(start[name])
    for module, mode in zip(model.modules(), modes):
        module.training = mode
    params = list(model.parameters())
    for p, on in zip(params, trains):
        p.requires_grad_(on)
        p.grad = None
    optimizer = make_optimizer([p for p in params if p.requires_grad], setup.optimizer, lr)
    if state is not None:
        generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
    gen = generator if state is not None else None
    penalty = (lambda local: None) if mu is None else \
        (lambda local: proximal_term(local, mu, setup.anchor))
    losses = []
    for idx in torch.from_numpy(flat).split(sizes):
        x, y = training_samples(setup.data, setup.augment, idx, gen)
        losses.append(whole_model_step(model, optimizer, x, y, setup.loss_fn, penalty).item())
        setup.progress[rank] += 1
    with torch.no_grad():
        for name, t in entries:
            views[name].copy_(t)
    return losses, None if gen is None else gen.get_state().numpy().tobytes()


def _modes(model: nn.Module) -> tuple[list[bool], list[bool]]:
    """Each module's training mode and each parameter's ``requires_grad``, in order."""
    return [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()]


def _leave_parent_signals(parent: int) -> None:
    """In a worker: Ctrl-C is the main process's to handle (it stops the workers), SIGTERM
    ends the worker, the parent's signal wake-up socket is not written to, the worker runs
    in a session of its own (the terminal's signals go to the main process only), and it
    dies with its parent (Linux: the parent-death signal)."""
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setsid()  # a session of its own, as torchrun's workers (see the module docstring)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__qualname__}: {exc}")
