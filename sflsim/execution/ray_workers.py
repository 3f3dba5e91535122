"""A round's clients trained on Ray actors (``training.parallel_backend: ray``).

The same work as the worker processes of :mod:`sflsim.execution.workers`, on
``training.parallel_clients`` Ray actors (:class:`RayClientWorkers`, the same interface
as :class:`~sflsim.execution.workers.ClientWorkers`), so the clients of one run can
train on the cores of a local Ray or on the nodes of a Ray cluster
(``training.ray_address``). Each actor asks Ray for ``training.ray_cpus_per_actor``
CPUs and ``training.ray_gpus_per_actor`` GPUs, and wraps what a worker process runs,
:class:`~sflsim.execution.worker_process._Worker` (its training step is
:func:`~sflsim.execution.worker_process.whole_model_step`, the serial path's).

The actors are started on the first round that needs them and stopped when the run
ends, however it ends (:func:`~sflsim.execution.workers.close_workers`); a Ray the
pool started itself (none was connected and ``ray_address`` is null or ``local``) is
shut down with them. The model, the training data (a CPU copy), the augmentation, loss
and optimizer settings go to every actor once, through Ray's object store. Once per
round the global model's state dict (and FedProx's anchor) is put there once
(``ray.put``) and every actor loads it; per client an actor is sent what a worker
process is sent (index batches drawn in this process from the client's own generator,
the augmentation generator's state, the learning rate, the proximal weight, modes,
which parameters train, and a start model of its own for FedMut) and answers the
per-batch losses, the generator's final state and the trained state dict. The results
are taken in the serial order, so a run is bit-identical to the processes backend and
to a serial run with one torch thread (one CPU per actor: one torch thread each).

An actor that dies (its node lost, its process killed, out of memory) is replaced by a
new one, which gets the round's model again, and its clients are sent again: a client's
task is sent again up to :data:`RETRIES` time(s) (once), with the same batches and generator state, so a
retry changes nothing in the results. A client whose task fails more often stops the
run with a RuntimeError naming the client and the round; the round loop keeps the
rounds already completed, as when a worker process dies.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from sflsim.errors import ConfigError, SflsimError
from sflsim.execution.ray_cluster import check_ray_address
from sflsim.execution.worker_process import Setup, _Worker
from sflsim.execution.workers import Job, _modes
from sflsim.text import plural

__all__ = ["RETRIES", "RayClientWorkers"]

#: times a client's (or a test batch's) task is sent again after its actor died
RETRIES = 1
#: tasks in flight per actor: one running, the next waiting in the actor's queue
TASKS_PER_ACTOR = 2
#: seconds between checks of the tasks in flight
POLL_S = 0.1
#: seconds the actors get to start (Ray holds an actor whose CPUs or GPUs no node has
#: free until they are; the pool gives up instead)
START_S = 300.0


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        ConfigError: Ray is not installed (says how to install it).
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("training.parallel_backend: 'ray' needs Ray, which is not "
                          "installed: pip install \"sflsim[ray]\"") from None
    return ray


def _placed(data: object, device: str) -> object:
    """``data`` (a :class:`~sflsim.data.split.DatasetSplit`) with its tensors on
    ``device``; anything else as it is."""
    if not dataclasses.is_dataclass(data) or not hasattr(data, "y_train"):
        return data
    moved = {k: v.to(device) for k in ("x_train", "y_train", "x_test", "y_test")
             if isinstance(v := getattr(data, k), torch.Tensor)}
    return dataclasses.replace(data, device=torch.device(device), **moved)


class _Actor:
    """What a Ray actor holds: a :class:`~sflsim.execution.worker_process._Worker` over its
    own copy of the model, the data and the round's base and anchor, trained with
    ``threads`` torch threads on ``device`` (``cuda``: the GPU Ray gave the actor)."""

    def __init__(self, model: nn.Module, data: object, augment: object, loss_fn: Callable,
                 optimizer: object, device: str, threads: int):
        torch.set_num_threads(threads)
        model = model.to(device)
        state = model.state_dict()
        slot = {name: torch.empty_like(t) for name, t in state.items()}
        base = {name: torch.empty_like(t) for name, t in state.items()}
        anchor = [torch.empty_like(p.detach()) for p in model.parameters()]
        setup = Setup(model, _placed(data, device), augment, loss_fn, optimizer, [slot], base,
                      anchor, torch.zeros(1, dtype=torch.int64))
        self.worker, self.device = _Worker(setup, 0), device

    def ready(self) -> int:
        """The actor's process id, once it is built."""
        return os.getpid()

    def set_base(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, t in self.worker.setup.base.items():
                t.copy_(state[name])
        self.worker.evaluation = None

    def set_anchor(self, params: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for mine, theirs in zip(self.worker.setup.anchor, params):
                mine.copy_(theirs)

    def set_test(self, arrays: tuple[np.ndarray, np.ndarray] | None) -> None:
        data = self.worker.setup.data
        self.worker.test = (data.x_test, data.y_test) if arrays is None else \
            tuple(torch.from_numpy(a).to(self.device) for a in arrays)

    def train(self, start: dict[str, torch.Tensor] | None, *task: Any
              ) -> tuple[list[float], bytes | None, dict[str, torch.Tensor]]:
        """One client (:meth:`_Worker.train`'s ``task`` after its source and slot) from the
        base, or from ``start``; returns its losses, generator state and trained state."""
        slot = self.worker.setup.slots[0]
        if start is not None:
            with torch.no_grad():
                for name, t in slot.items():
                    t.copy_(start[name])
        losses, state = self.worker.train((None if start is None else 0, 0, *task))
        return losses, state, {name: t.cpu() for name, t in slot.items()}

    def evaluate(self, evaluation: int, start: int, stop: int) -> int:
        return self.worker.evaluate(evaluation, start, stop)


class RayClientWorkers:
    """``workers`` Ray actors that train clients of ``model``'s architecture on ``data``,
    the interface of :class:`~sflsim.execution.workers.ClientWorkers`.

    Args:
        workers: actors (``training.parallel_clients``).
        model, data, augment, loss_fn, optimizer: what every actor trains with, sent
            once (``data``: a CPU copy; images kept as files must be at the same path on
            every node).
        address: the Ray cluster (``training.ray_address``); None: the Ray this process
            is connected to, else a local one started here.
        cpus_per_actor, gpus_per_actor: what each actor asks Ray for (``gpus_per_actor``
            above 0: it trains on its GPU).
        round_of: the round in progress, for error messages.

    Raises:
        ConfigError: Ray is not installed, cannot be started or reached at ``address``,
            or its nodes have fewer CPUs or GPUs in all than the actors ask for.
        RuntimeError: the actors did not start within :data:`START_S` seconds.
        ValueError: ``workers`` < 1.
    """

    def __init__(self, workers: int, model: nn.Module, data: object, augment: object,
                 loss_fn: Callable, optimizer: object, *, address: str | None = None,
                 cpus_per_actor: float = 1.0, gpus_per_actor: float = 0.0,
                 round_of: Callable[[], int | None] = lambda: None):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.ray = ray = require_ray()
        self.pid, self.closed, self.round_of, self.actors = os.getpid(), False, round_of, []
        self.replaced = 0  # actors that died and were replaced
        self.started = not ray.is_initialized()
        if self.started:
            _start_ray(ray, address)
        try:
            where = ("the local Ray" if self.started and address in (None, "local") else
                     f"the Ray cluster at {address}" if self.started else
                     "the Ray this process is connected to")
            _check_capacity(ray, workers, cpus_per_actor, gpus_per_actor, where)
            device = "cuda" if gpus_per_actor > 0 else "cpu"
            args = [ray.put(x) for x in (copy.deepcopy(model).cpu(), _placed(data, "cpu"))]
            self.args = (*args, augment, loss_fn, optimizer, device,
                         max(1, math.floor(cpus_per_actor)))
            self.actor_class = ray.remote(num_cpus=cpus_per_actor, num_gpus=gpus_per_actor,
                                          max_restarts=0)(_Actor)
            self.data, self.shapes = data, [p.shape for p in model.parameters()]
            self.base: tuple[list[bool], list[bool]] | None = None
            self.shared: dict[str, tuple[str, Any]] = {}  # what every actor loads: refs
            self.test: tuple[torch.Tensor, torch.Tensor] | None = None
            self.evaluations = 0
            self.actors = [self._new_actor(rank) for rank in range(workers)]
            ready, _ = ray.wait([a.ready.remote() for a in self.actors],
                                num_returns=workers, timeout=START_S)
            if len(ready) < workers:
                raise RuntimeError(f"{workers - len(ready)} of {workers} Ray actors did not "
                                   f"start within {START_S:g} s (the cluster's CPUs or GPUs "
                                   f"are busy?)")
            ray.get(ready)
        except BaseException:
            self.close()
            raise

    def _new_actor(self, rank: int) -> Any:
        """A new actor for place ``rank``, sent what every actor has loaded so far."""
        actor = self.actor_class.remote(*self.args)
        for method, ref in self.shared.values():
            getattr(actor, method).remote(ref)
        return actor

    def _share(self, method: str, value: object) -> None:
        """Put ``value`` in Ray's object store once and have every actor ``method`` it."""
        ref = self.ray.put(value)
        self.shared[method] = (method, ref)
        for actor in self.actors:
            getattr(actor, method).remote(ref)

    def set_base(self, model: nn.Module) -> None:
        """:meth:`ClientWorkers.set_base <sflsim.execution.workers.ClientWorkers.set_base>`:
        ``model``'s state dict goes to Ray's object store once and to every actor."""
        self._check_open()
        self._share("set_base", {n: t.detach().cpu() for n, t in model.state_dict().items()})
        self.base = _modes(model)

    def set_anchor(self, anchor: nn.Module) -> None:
        """:meth:`ClientWorkers.set_anchor <sflsim.execution.workers.ClientWorkers.set_anchor>`.

        Raises:
            ValueError: ``anchor``'s parameters do not match the model's in count or shape.
        """
        self._check_open()
        params = [p.detach().cpu() for p in anchor.parameters()]
        if [p.shape for p in params] != self.shapes:
            raise ValueError("the proximal anchor's parameters do not match the model's")
        self._share("set_anchor", params)

    def submit(self, jobs: list[Job], lr: float, mu: float | None, report: Callable[[], None],
               blank: Callable[[], nn.Module] | None = None
               ) -> Callable[[], list[tuple[nn.Module, list[float]]]]:
        """:meth:`ClientWorkers.submit <sflsim.execution.workers.ClientWorkers.submit>` on
        the actors: ``finish()`` runs :meth:`train` (the clients start when it is called)."""
        return lambda: self.train(jobs, lr, mu, report, blank)

    def train(self, jobs: list[Job], lr: float, mu: float | None, report: Callable[[], None],
              blank: Callable[[], nn.Module] | None = None
              ) -> list[tuple[nn.Module, list[float]]]:
        """:meth:`ClientWorkers.train <sflsim.execution.workers.ClientWorkers.train>` on the
        actors: per job, in order, its trained model and per-batch losses, each job's
        generator moved on as in a serial run; ``report()`` is called once per batch
        trained (when its client's task comes back), from this thread. On any exception
        the actors are stopped (:meth:`close`) before it propagates.

        Raises:
            RuntimeError: a client's task failed :data:`RETRIES` + 1 times because its
                actor died (the client and round in the message); a job without
                ``start`` and no :meth:`set_base` or ``blank``.
            Exception: what training a client raised in an actor (Ray's
                ``RayTaskError`` of that type, the actor's traceback in its message).
        """
        self._check_open()
        if any(job.start is None for job in jobs) and (self.base is None or blank is None):
            raise RuntimeError("jobs without start() need set_base() and blank")
        out: list = [None] * len(jobs)
        sent: dict[int, tuple] = {}  # job -> its start model and what its task is sent

        def submit(actor: Any, i: int) -> Any:
            if i not in sent:
                sent[i] = _task(jobs[i], lr, mu, self.base)
            return actor.train.remote(*sent[i][1:])

        def receive(i: int, answer: tuple) -> None:
            losses, state, trained = answer
            module = sent.pop(i)[0]
            module = blank() if module is None else module
            with torch.no_grad():
                for name, t in module.state_dict().items():
                    t.copy_(trained[name])
            if state is not None:
                jobs[i].generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
            out[i] = (module, losses)
            for _ in losses:
                report()

        self._run(len(jobs), submit, receive, lambda i: f"client {jobs[i].client_id}")
        return out

    def evaluate(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                 report: Callable[[], None]) -> int:
        """:meth:`ClientWorkers.evaluate <sflsim.execution.workers.ClientWorkers.evaluate>`
        on the actors: how many test samples ``model`` classifies right, the batches of
        ``batch_size`` spread over the actors (the counts of a serial evaluation with one
        torch thread); ``report()`` once per batch.

        Raises:
            RuntimeError: a test batch's task failed :data:`RETRIES` + 1 times because
                its actor died; the actors have been stopped.
        """
        self._check_open()
        if self.test is None or self.test[0] is not x or self.test[1] is not y:
            own = x is getattr(self.data, "x_test", None) and y is getattr(self.data, "y_test", None)
            self._share("set_test", None if own else (x.numpy(), y.numpy()))
            self.test = (x, y)
        self.set_base(model)
        self.evaluations += 1
        starts = range(0, len(y), batch_size)
        hits = [0] * len(starts)

        def submit(actor: Any, i: int) -> Any:
            return actor.evaluate.remote(self.evaluations, starts[i], starts[i] + batch_size)

        def receive(i: int, count: int) -> None:
            hits[i] = count
            report()

        self._run(len(starts), submit, receive, lambda i: f"test batch {i}")
        return sum(hits)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the client Ray actors have been stopped")

    def _run(self, count: int, submit: Callable[[Any, int], Any],
             receive: Callable[[int, Any], None], name: Callable[[int], str]) -> None:
        """Run tasks ``0..count - 1``, at most :data:`TASKS_PER_ACTOR` in flight per actor:
        ``submit(actor, i)`` sends task ``i`` and returns its object ref, ``receive(i,
        answer)`` takes the answers in the order ``0, 1, ...``. A task whose actor died is
        sent again to the actor that replaces it, up to :data:`RETRIES` times.

        Raises:
            RuntimeError: a task's actor died more than :data:`RETRIES` times.
            Exception: what a task raised in an actor.
        """
        ray = self.ray
        queue, flight = collections.deque(range(count)), {}  # ref -> (task, actor's place)
        done: dict[int, Any] = {}
        deaths: collections.Counter[int] = collections.Counter()
        taken = 0
        try:
            while taken < count:
                load = collections.Counter(rank for _, rank in flight.values())
                for rank in sorted(range(len(self.actors)), key=lambda r: load[r]):
                    while queue and load[rank] < TASKS_PER_ACTOR:
                        i = queue.popleft()
                        flight[submit(self.actors[rank], i)] = (i, rank)
                        load[rank] += 1
                ready, _ = ray.wait(list(flight), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    if ref not in flight:
                        continue  # a task of an actor already replaced
                    i, rank = flight.pop(ref)
                    try:
                        done[i] = ray.get(ref)
                    except ray.exceptions.RayActorError as exc:
                        deaths[i] += 1
                        if deaths[i] > RETRIES:
                            raise self._died(name(i), deaths[i], exc) from exc
                        self._replace(rank, flight, queue)
                        queue.appendleft(i)
                    except ray.exceptions.RayTaskError as exc:
                        raise exc.as_instanceof_cause() from None
                while taken in done:  # in order: the serial order of the results
                    receive(taken, done.pop(taken))
                    taken += 1
        except BaseException:
            self.close()
            raise

    def _replace(self, rank: int, flight: dict, queue: collections.deque) -> None:
        """A new actor in place ``rank``; the tasks in flight on the dead one go back to
        the front of ``queue``, in order."""
        lost = [ref for ref, (_, r) in flight.items() if r == rank]
        queue.extendleft(sorted((flight.pop(ref)[0] for ref in lost), reverse=True))
        self.ray.kill(self.actors[rank], no_restart=True)
        self.actors[rank] = self._new_actor(rank)
        self.replaced += 1

    def _died(self, what: str, times: int, exc: BaseException) -> RuntimeError:
        round_ = self.round_of()
        where = "" if round_ is None else f" in round {round_}"
        first = str(exc).splitlines()[0] if str(exc) else ""
        return RuntimeError(f"the Ray actor training {what}{where} died ({plural(times, 'time')}, "
                            f"{plural(RETRIES, 'retry', 'retries')} allowed): "
                            f"{type(exc).__name__}: {first}")

    def close(self) -> None:
        """Stop the actors (at once: a client in training is abandoned) and shut down the
        Ray this pool started, if it did; idempotent, and a no-op in any process but the
        one that started them."""
        if self.closed or os.getpid() != self.pid:
            return
        self.closed = True
        ray = self.ray
        if ray.is_initialized():
            for actor in self.actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001  (gone already)
                    pass
            if self.started:
                ray.shutdown()
        self.actors = []


def _task(job: Job, lr: float, mu: float | None, base: tuple[list[bool], list[bool]] | None
          ) -> tuple:
    """``(start model or None, *what the actor's train is sent)`` for ``job``."""
    if job.start is None:
        module, start, (modes, trains) = None, None, base
    else:
        module = job.start()
        start = {n: t.detach().cpu() for n, t in module.state_dict().items()}
        modes, trains = _modes(module)
    sizes = [len(b) for b in job.batches]
    flat = torch.cat(job.batches).numpy() if job.batches else np.zeros(0, np.int64)
    state = None if job.generator is None else job.generator.get_state().numpy().tobytes()
    return module, start, flat, sizes, modes, trains, state, lr, mu


def _start_ray(ray: Any, address: str | None) -> None:
    """Connect to the Ray at ``address``, or start a local one (None, ``local``) with this
    machine's cores as its CPUs (each actor is a Python process of its own, with torch and
    a copy of the data: more actors than cores would only share the cores, and at tens of
    actors run out of memory; :func:`_check_capacity` then refuses them).

    Raises:
        ConfigError: Ray cannot be started there, or nothing answers at ``address``
            within :data:`~sflsim.execution.ray_cluster.CONNECT_TIMEOUT_S` seconds (Ray
            itself would retry for minutes).
    """
    import logging

    options: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
    try:
        check_ray_address(address)
    except SflsimError as exc:
        raise ConfigError(f"training.ray_address: {exc}") from None
    try:
        if address in (None, "local"):
            ray.init(address="local", num_cpus=os.cpu_count() or 1, **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"training.ray_address: cannot start or reach Ray at "
                          f"{address or 'local'}: {exc}; valid: null (a local Ray), auto, "
                          f"HOST:PORT of a head node or ray://HOST:10001") from None


def _check_capacity(ray: Any, workers: int, cpus: float, gpus: float, where: str) -> None:
    """Refuse actors that ask for more CPUs or GPUs in all than the alive nodes have (Ray
    would hold them forever).

    Raises:
        ConfigError: naming the fields, the values and what the nodes have.
    """
    total = ray.cluster_resources()
    have_cpus, have_gpus = total.get("CPU", 0.0), total.get("GPU", 0.0)
    for field, each, have in (("ray_cpus_per_actor", cpus, have_cpus),
                              ("ray_gpus_per_actor", gpus, have_gpus)):
        if workers * each > have + 1e-9:
            fits = math.floor(have / each + 1e-9)
            raise ConfigError(
                f"training.parallel_clients: {workers} actors of training.{field}: {each:g} "
                f"need {workers * each:g} {field[4:7].upper()}s, {where} has {have:g}; valid: "
                f"parallel_clients at most {fits} (2 or more), or a smaller {field}")

