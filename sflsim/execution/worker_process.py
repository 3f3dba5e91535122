"""What a client worker process runs (``training.parallel_backend: processes``): its
loop, one client's local training, one test batch's evaluation, and the step both sides
share (:func:`whole_model_step`). The main process's side, the pool, is
:mod:`sflsim.execution.workers`.

A worker receives tasks over its pipe, in order:

- ``("train", i, source, slot, flat, sizes, modes, trains, state, lr, mu)``: client job
  ``i``, answered ``("done", i, losses, generator_state)``;
- ``("test", images, labels)``: the test set (NumPy arrays) that later ``"eval"``
  tasks read, or ``("test",)``: the data's own test split, forked with it; no answer;
- ``("eval", i, evaluation, start, stop)``: the number of correct predictions of the
  base slot's model on test samples ``start:stop``, answered ``("done", i, hits)``;
- ``None``: stop.

A task that raises is answered ``("error", i, exception, traceback_text)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from sflsim.data.augment import training_samples
from sflsim.execution.local_steps import (
    correct_predictions,
    make_optimizer,
    proximal_term,
    whole_model_step,
)


@dataclass
class Setup:
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


@dataclass
class _Worker:
    """A worker's own state between tasks: the model's entries, modules and parameters
    (listed once), the optimizer of the last client and which parameters it trains, the
    test set and which evaluation's model is loaded."""

    setup: Setup
    rank: int
    entries: list = field(init=False)
    modules: list[nn.Module] = field(init=False)
    params: list[nn.Parameter] = field(init=False)
    generator: torch.Generator = field(default_factory=torch.Generator)
    optimizer: tuple[tuple[bool, ...], torch.optim.Optimizer] | None = None
    test: tuple[torch.Tensor, torch.Tensor] | None = None
    evaluation: int | None = None  # the evaluation whose model is loaded

    def __post_init__(self):
        model = self.setup.model
        self.entries = list(model.state_dict().items())
        self.modules, self.params = list(model.modules()), list(model.parameters())

    def load(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, t in self.entries:
                t.copy_(state[name])

    def round_optimizer(self, trains: list[bool], lr: float) -> torch.optim.Optimizer:
        """An optimizer over the parameters that train, at ``lr``, with no state: the last
        client's, its state dropped, when the same parameters train (what a new one
        would be), else a new one."""
        key = tuple(trains)
        if self.optimizer is not None and self.optimizer[0] == key:
            optimizer = self.optimizer[1]
            optimizer.state.clear()
            for group in optimizer.param_groups:
                group["lr"] = lr
            return optimizer
        optimizer = make_optimizer([p for p in self.params if p.requires_grad],
                                   self.setup.optimizer, lr)
        self.optimizer = (key, optimizer)
        return optimizer

    def train(self, task: tuple) -> tuple[list[float], bytes | None]:
        """One client: load its slot, train its batches, write the slot back; returns the
        per-batch losses and the augmentation generator's final state (None: none)."""
        source, slot, flat, sizes, modes, trains, state, lr, mu = task
        setup = self.setup
        self.load(setup.base if source is None else setup.slots[source])
        self.evaluation = None
        for module, mode in zip(self.modules, modes):
            module.training = mode
        for p, on in zip(self.params, trains):
            p.requires_grad_(on)
            p.grad = None
        optimizer = self.round_optimizer(trains, lr)
        gen = None
        if state is not None:
            gen = self.generator
            gen.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        penalty = (lambda local: None) if mu is None else \
            (lambda local: proximal_term(local, mu, setup.anchor))
        losses = []
        for idx in torch.tensor(flat).split(sizes):  # (a copy: Ray's arrays are read-only)
            x, y = training_samples(setup.data, setup.augment, idx, gen)
            losses.append(whole_model_step(setup.model, optimizer, x, y, setup.loss_fn,
                                           penalty).item())
            setup.progress[self.rank] += 1
        with torch.no_grad():
            views = setup.slots[slot]
            for name, t in self.entries:
                views[name].copy_(t)
        return losses, None if gen is None else gen.get_state().numpy().tobytes()

    def evaluate(self, evaluation: int, start: int, stop: int) -> int:
        """:func:`correct_predictions` of the base slot's model (loaded once per
        ``evaluation``) in eval mode on test samples ``start:stop``."""
        if self.test is None:
            raise RuntimeError("an evaluation task came before the test set")
        if self.evaluation != evaluation:
            self.load(self.setup.base)
            for module in self.modules:
                module.training = False
            self.evaluation = evaluation
        return correct_predictions(self.setup.model, self.setup.data, *self.test, start, stop)


def serve(setup: Setup, conn, rank: int, parent: int) -> None:
    """A worker's loop: run each task sent until told to stop (None), the pipe closes or
    the parent process is gone."""
    _leave_parent_signals(parent)
    with contextlib.suppress(OSError, AttributeError):  # PR_SET_NAME: what top and pgrep show
        ctypes.CDLL(None, use_errno=True).prctl(15, f"sflsim-worker-{rank}".encode()[:15])
    torch.set_num_threads(1)
    worker = _Worker(setup, rank)
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
        kind, *rest = task
        if kind == "test":  # arrays, or none: the data's own test split
            worker.test = tuple(torch.from_numpy(a) for a in rest) if rest else \
                (setup.data.x_test, setup.data.y_test)
            continue
        try:
            answer = ("done", rest[0], *worker.train(rest[1:])) if kind == "train" else \
                ("done", rest[0], worker.evaluate(*rest[1:]))
        except Exception as exc:  # sent to the main process, which raises it
            answer = ("error", rest[0], _picklable(exc), traceback.format_exc())
        conn.send(answer)


def _leave_parent_signals(parent: int) -> None:
    """In a worker: Ctrl-C is the main process's to handle (it stops the workers), SIGTERM
    ends the worker, the parent's signal wake-up socket is not written to, the worker runs
    in a session of its own (the terminal's signals go to the main process only), and it
    dies with its parent (Linux: the parent-death signal)."""
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setsid()  # a session of its own, as torchrun's workers (see sflsim.execution.workers)
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
