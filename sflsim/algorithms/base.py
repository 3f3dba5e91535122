"""What every algorithm shares: clients, the round loop's hooks, training steps with costs.

An algorithm fills in :meth:`Algorithm.train_round` (a SimPy process for one
round), optionally :meth:`Algorithm.end_round` (aggregation) and
:meth:`Algorithm.server_model_for` (for evaluation). The runner
(:mod:`sflsim.runner`) owns the loop over rounds. Each is registered under its name with
:func:`register_algorithm`, and its configuration (the scenario's ``algorithm``
mapping) with :func:`sflsim.config.algorithms.register_algorithm_config`; an algorithm
of one's own registers the same way, in a module the scenario names in
``algorithm.module`` (:mod:`sflsim.config.user_algorithms`).

The main invariant: every real torch step is paired with its
simulated cost in one place, :meth:`Algorithm.client_step` and
:meth:`Algorithm.server_step`, and runs at the simulated instant its work
completes.

Batches: each local epoch a client shuffles its sample indices with its own
generator and cuts them into batches of ``batch_size``; the last, shorter batch
is kept. A client with fewer samples than the batch size therefore trains on
one short batch per epoch (the partitioner guarantees at least one sample).

Timing-only runs (``training.timing_only``) go through the same processes:
:meth:`Algorithm.client_step` and :meth:`Algorithm.server_step` then simulate the
work and run no torch step, and the activations passed on are shapes on torch's
``meta`` device (:meth:`Algorithm.meta_tensor`).

How torch work runs on the host (several clients on threads, measurements without
side effects) is :mod:`sflsim.algorithms.host`.
"""

from __future__ import annotations

import collections
import inspect
import math
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import simpy
import torch
from torch import nn

from sflsim.algorithms.host import accuracy
from sflsim.config.schema import WIRE_BYTES, OptimizerConfig, Scenario
from sflsim.data.split import DatasetSplit
from sflsim.engine import FifoQueue, FifoResource, Link, Process, Server, Simulation, cut_off_at
from sflsim.errors import DivergenceError
from sflsim.hardware.latency import stage_time_s
from sflsim.hardware.profiles import DeviceProfile
from sflsim.models import StagedBackbone
from sflsim.models.cost import CostTable, PieceCost
from sflsim.registry import registrar
from sflsim.work import BATCH, SERVER, TEST, ignore_work

#: the ``client_id`` of work the server does on raw samples (Centralized)
SERVER_ID = -1

ALGORITHMS: dict[str, type[Algorithm]] = {}


#: the hooks every algorithm has (:class:`Algorithm`) and the arguments the runner passes
HOOKS = {"train_round": ("round_",), "end_round": ("round_",),
         "server_model_for": ("client",), "exit_models": ("client",)}


def _check_algorithm(name: str, entry: object) -> None:
    """What ``@register_algorithm(name)`` refuses: not an :class:`Algorithm` subclass; no
    :meth:`~Algorithm.train_round` or :meth:`~Algorithm.server_model_for` of its own or
    inherited from an algorithm; a hook that does not take the runner's arguments."""
    where = f"@register_algorithm({name!r})"
    if not (isinstance(entry, type) and issubclass(entry, Algorithm)):
        raise TypeError(f"{where}: {getattr(entry, '__qualname__', entry)!r} is not a subclass "
                        f"of sflsim.algorithms.Algorithm; derive it from Algorithm, or from a "
                        f"built-in algorithm such as FedAvg")
    missing = [h for h in ("train_round", "server_model_for")
               if getattr(entry, h) is getattr(Algorithm, h)]
    if missing:
        raise TypeError(f"{where}: {entry.__qualname__} does not implement "
                        f"{' or '.join(f'{h}({HOOKS[h][0]})' for h in missing)}; every algorithm "
                        f"needs train_round (the SimPy process of one round) and "
                        f"server_model_for (the server-side model that evaluates a client)")
    for hook, args in HOOKS.items():
        method = getattr(entry, hook)
        if method is getattr(Algorithm, hook):
            continue
        try:
            inspect.signature(method).bind(*(None,) * (1 + len(args)))
        except TypeError:
            raise TypeError(f"{where}: {entry.__qualname__}.{hook}{inspect.signature(method)} "
                            f"must take (self, {', '.join(args)}): the runner calls "
                            f"{hook}({', '.join(args)})") from None
        except ValueError:  # no signature to read (a builtin): nothing to check
            continue


#: ``@register_algorithm(name)``: register an :class:`Algorithm` subclass under ``name``
#: (its configuration class names it too: ``name: Literal[name]``); a name already
#: registered raises :class:`~sflsim.registry.DuplicateNameError`, a class that is not
#: an algorithm (no subclass, a missing hook, a hook with other arguments) a TypeError.
register_algorithm = registrar(ALGORITHMS, "algorithm", _check_algorithm)


@dataclass
class Client:
    """One simulated device with its data, client-side model and exit head.

    Attributes:
        client_id: 0-based id; ties in simulated time break by it.
        group: the scenario's device-group name.
        end_layer: cut layer; the client-side model holds stages 1..end_layer.
        device: hardware profile (throughput in FLOP/s, power in W).
        uplink, downlink: the device's link, one :class:`Link` per direction.
        indices: indices of the client's training samples, shape ``(n,)``.
        model: client-side model ``(B, C, H, W) -> activations``.
        exit_head: ``activations -> (B, classes)`` logits.
        optimizer: optimizer of ``model`` and ``exit_head``.
        generator: the client's batch-shuffling generator.
        domain: the domain of its samples (DomainNet), None for other datasets.
    """

    client_id: int
    group: str
    end_layer: int
    device: DeviceProfile
    uplink: Link
    downlink: Link
    indices: np.ndarray
    model: nn.Sequential
    exit_head: nn.Module
    #: None in timing-only runs (nothing trains; the models are shared per end layer)
    optimizer: torch.optim.Optimizer | None
    generator: torch.Generator
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    #: this round's straggler factor (``conditions.straggler_sigma``): compute takes
    #: ``slowdown`` times longer; 1.0 outside the round's client processes
    slowdown: float = 1.0
    domain: str | None = None

    @property
    def actor(self) -> str:
        return f"client{self.client_id}"

    @property
    def flops_per_s(self) -> float:
        """Sustained throughput this round: the profile's, divided by the slowdown."""
        return self.device.sustained_flops.value / self.slowdown


@dataclass
class RunContext:
    """Everything an algorithm needs, built once by the runner."""

    scenario: Scenario
    data: DatasetSplit
    backbone: StagedBackbone
    sim: Simulation
    server: Server
    clients: list[Client]
    costs: CostTable = field(default_factory=CostTable)
    #: independent child seeds by use, each from its stream's seed (sflsim.runner.child_seeds)
    seeds: dict[str, int] = field(default_factory=dict)
    #: ``on_batch(kind, at_s)``: one unit of host work done, of ``kind`` (:mod:`sflsim.work`:
    #: a training batch by default, a server step, a test batch; None: only the simulated
    #: clock), its work complete at simulated time ``at_s`` (s; default now): the progress
    #: display's count and time estimate
    on_batch: Callable[..., None] = ignore_work
    #: ``training.timing_only``: simulate the same processes, run no torch step
    timing_only: bool = False


def augment_generator(seed: int, client_id: int) -> torch.Generator:
    """The augmentation generator of ``client_id`` (:data:`SERVER_ID` for the server):
    seeded with child ``client_id + 1`` of ``SeedSequence(seed)``, ``seed`` being the
    run's ``augment`` child seed of the training stream (:func:`sflsim.runner.child_seeds`)."""
    state = np.random.SeedSequence(seed, spawn_key=(client_id + 1,)).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


def make_optimizer(params: Iterator[nn.Parameter] | list, cfg: OptimizerConfig,
                   lr: float) -> torch.optim.Optimizer:
    """Adam or SGD as configured, at learning rate ``lr``."""
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def make_scheduler(optimizer: torch.optim.Optimizer, scenario: Scenario
                   ) -> torch.optim.lr_scheduler.LRScheduler | None:
    """Cosine annealing over the run's rounds (stepped once per round), or none."""
    sched = scenario.training.schedule
    if sched.name == "constant":
        return None
    return torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=scenario.training.rounds, eta_min=sched.min_lr
    )


class Algorithm:
    """Base class: per-round SimPy processes that call the engine for time and torch for learning."""

    #: Whether the algorithm trains each client's own client-side model and exit head
    #: (:attr:`Client.model`, :attr:`Client.exit_head`, :attr:`Client.optimizer`).
    #: False (algorithms whose models live elsewhere, e.g. one global model): the runner
    #: builds one untrained pair per end layer, shared by the clients of that end
    #: layer, and no optimizers, so that a run of 1,000 clients does not build 1,000
    #: models it never trains.
    client_models: ClassVar[bool] = True

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.sim = ctx.sim
        self.scenario = ctx.scenario
        self.loss_fn = nn.CrossEntropyLoss()
        self.wire_bytes = WIRE_BYTES[ctx.scenario.wire_dtype]
        #: (round, client_id, sim_time_s) of every server-side torch step, in order.
        self.server_steps: list[tuple[int, int, float]] = []
        #: (where, client_id, mean training loss of the batch, batch size), where is
        #: "client" (exit-head loss) or "server"; the runner summarises it per round.
        self.losses: list[tuple[str, int, float, int]] = []
        self.schedulers = [c.scheduler for c in ctx.clients if c.scheduler is not None]
        #: rounds over which a cosine learning-rate schedule decays: the run's rounds when
        #: it started (a run resumed with more rounds then stays at min_lr)
        self.lr_horizon_rounds = ctx.scenario.training.rounds
        #: cut layer of each client in the current round (adaptive-split algorithms update it)
        self.cuts: dict[int, int] = {c.client_id: c.end_layer for c in ctx.clients}
        #: this round's conditions (set by the runner before :meth:`run_round`):
        #: clients that sit the round out, and each client's compute slowdown
        self.dropped: set[int] = set()
        self.slowdowns: dict[int, float] = {}
        #: clients that sit the round out because they were not sampled or are offline
        #: (``{client_id: "not_sampled" | "offline"}``, also in :attr:`dropped`;
        #: :func:`sflsim.runner.round_participants`)
        self.absent: dict[int, str] = {}
        #: participants that go offline during the round: ``{client_id: time (s)}``
        self.offline_at: dict[int, float] = {}
        #: over-commitment (``training.over_commit``): clients kept, the first to finish
        #: their round's work (None: every participant)
        self.keep_first: int | None = None
        self._finished: set[int] = set()
        #: per client this round: "trained", "dropped", "late" (cut off by the deadline),
        #: "offline" (went offline, or was offline at the start), "not_sampled" or
        #: "over_committed" (stopped once :attr:`keep_first` others had finished)
        self.status: dict[int, str] = {}
        self._round_procs: list[tuple[int, simpy.Process]] = []
        #: the processes that wait for this round's availability and over-commitment
        #: cut-offs (:meth:`_cut_off`); stopped when the round ends first
        self._cutters: list[simpy.Process] = []
        self._deadline_s: float | None = None
        #: per end layer: client-side step cost, activation shape (looked up per batch)
        self._client_costs: dict[int, PieceCost] = {}
        self._activation_shapes: dict[int, tuple[int, ...]] = {}
        self._timing_batches: dict[int, tuple[range, ...]] = {}
        #: (cut layer, activation shape, input gradient?) -> server-side step cost
        self._server_costs: dict[tuple, PieceCost] = {}
        self._meta: dict[tuple[int, ...], torch.Tensor] = {}
        #: client id -> (activations, loss) of client steps already trained this round,
        #: in batch order; :meth:`client_step` takes them instead of training
        self.ready_steps: dict[int, collections.deque] = {}
        #: client id (:data:`SERVER_ID` for the server's own steps) -> the generator of its
        #: training batches' augmentation (:meth:`train_batch`), with ``dataset.augment``
        #: only; apart from the batch-order generators, and saved in checkpoints with the
        #: algorithm, so resumed and parallel runs draw the same crops and flips
        self.augment_generators: dict[int, torch.Generator] = {}
        aug = ctx.scenario.dataset.augment
        if aug is not None and aug.active and not ctx.timing_only:
            self.augment_generators = {
                cid: augment_generator(ctx.seeds["augment"], cid)
                for cid in (SERVER_ID, *(c.client_id for c in ctx.clients))}

    # ----- hooks -----------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        """The SimPy process of one round; returns when the round's work is done."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement train_round")

    def end_round(self, round_: int) -> None:
        """Work after the round's process (aggregation); default none."""

    def server_model_for(self, client: Client) -> nn.Module:
        """The server-side model that serves ``client``'s activations."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement "
                                  f"server_model_for")

    def exit_models(self, client: Client) -> tuple[nn.Module, nn.Module, nn.Module] | None:
        """(client-side model, exit head, server-side model) for early-exit inference
        (Hetero-SplitEE Alg. 3), or None when the algorithm trains no exit heads."""
        return None

    def activated_params(self, client_id: int) -> int:
        """Client-side parameters the client trains this round (FedSGA Table 5's
        "activated parameters"); here the client-side model and exit head."""
        c = self.ctx.clients[client_id]
        return _param_count(c.model) + _param_count(c.exit_head)

    def activated_params_by_client(self) -> dict[int, int]:
        """:meth:`activated_params` of every client, ``{client_id: parameters}`` (the
        default one counted once per distinct client-side model and exit head)."""
        if type(self).activated_params is not Algorithm.activated_params:
            return {c.client_id: self.activated_params(c.client_id) for c in self.ctx.clients}
        counts: dict[tuple[int, int], int] = {}
        out = {}
        for c in self.ctx.clients:
            key = (id(c.model), id(c.exit_head))
            count = counts.get(key)
            if count is None:
                count = counts[key] = self.activated_params(c.client_id)
            out[c.client_id] = count
        return out

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """Extra clients-table columns of ``round_`` per client id (an algorithm's own
        per-client quantities, e.g. FedSGA's sufficiency estimates); default none. Every
        round must give the same column names."""
        return {}

    def batches_per_round(self) -> int:
        """Training batches in one round (for progress bars)."""
        bs = self.scenario.training.batch_size
        n = sum(math.ceil(len(c.indices) / bs) for c in self.ctx.clients)
        return n * self.scenario.training.local_epochs

    def work_per_round(self) -> dict[str, float]:
        """Units of host work one round is expected to make with every client taking
        part, by kind (:mod:`sflsim.work`), for the progress display's time estimate:
        here the training batches (:meth:`batches_per_round`) and one server step per
        batch (split learning). Only an estimate for the first round: later ones are
        expected to repeat the last round's counts."""
        batches = self.batches_per_round()
        return {BATCH: batches, SERVER: batches}

    # ----- shared pieces ----------------------------------------------------------
    def batches(self, client: Client) -> Iterator[torch.Tensor]:
        """Index batches of one local epoch (short last batch kept); in timing-only runs,
        only their sizes matter (no generator draws; the indices are a range)."""
        if self.ctx.timing_only:  # ranges, the same every epoch: only len() is used
            ranges = self._timing_batches.get(client.client_id)
            if ranges is None:
                n, bs = len(client.indices), self.scenario.training.batch_size
                ranges = self._timing_batches[client.client_id] = tuple(
                    range(i, min(i + bs, n)) for i in range(0, n, bs))
            return iter(ranges)  # type: ignore[arg-type]
        return self._shuffled_batches(client)

    def round_batches(self, client: Client) -> Iterator[torch.Tensor]:
        """The client's index batches of a round, every local epoch in turn; each epoch's
        order is drawn when its first batch is asked for."""
        return (idx for _ in range(self.scenario.training.local_epochs)
                for idx in self.batches(client))

    def _shuffled_batches(self, client: Client) -> Iterator[torch.Tensor]:
        # a generator: the epoch's permutation is drawn when its first batch is asked for
        order = torch.randperm(len(client.indices), generator=client.generator)
        idx = torch.as_tensor(client.indices)[order]
        yield from torch.split(idx, self.scenario.training.batch_size)

    def client_cost(self, client: Client) -> PieceCost:
        """Per-sample cost of the client-side model plus exit head (forward + backward)."""
        cost = self._client_costs.get(client.end_layer)
        if cost is None:
            cost = self._client_costs[client.end_layer] = self.ctx.costs.cost(
                f"client:l{client.end_layer}", nn.Sequential(client.model, client.exit_head),
                self.ctx.backbone.input_shape)
        return cost

    def activation_shape(self, client: Client) -> tuple[int, ...]:
        """Per-sample shape of the client-side model's output (cached per end layer)."""
        shape = self._activation_shapes.get(client.end_layer)
        if shape is None:
            shape = self._activation_shapes[client.end_layer] = self.ctx.costs.cost(
                f"client_body:l{client.end_layer}", client.model, self.ctx.backbone.input_shape,
                backward=False).output_shape
        return shape

    def meta_tensor(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A float32 tensor of ``shape`` on torch's ``meta`` device (a shape, no memory),
        one per shape: what timing-only runs pass where a trained run passes activations
        or their gradients (only ``len`` and ``.shape`` are read)."""
        t = self._meta.get(shape)
        if t is None:
            t = self._meta[shape] = torch.empty(shape, device="meta")
        return t

    def payload_bytes(self, shape: tuple[int, ...], batch: int) -> int:
        """Bytes of ``batch`` activations of per-sample ``shape`` in the wire dtype."""
        return math.prod(shape) * batch * self.wire_bytes

    def compute_seconds(self, client: Client, end_layer: int, batch: int,
                        directions: tuple[str, ...]) -> float | None:
        """Seconds of stages ``1..end_layer`` on ``client``'s device from its measured
        per-stage latency table (:mod:`sflsim.hardware.latency`), summed over
        ``directions`` ("forward", "backward", "update" = optimizer, "exit_head" = the
        exit head after ``end_layer``) and scaled by the client's slowdown; ``None``
        when the profile has no table for this model, width and input (the caller then
        uses the FLOPs rule)."""
        if not client.device.stage_latency:
            return None
        m = self.scenario.model
        total = 0.0
        for direction in directions:
            stages = [end_layer] if direction == "exit_head" else range(1, end_layer + 1)
            t = stage_time_s(client.device, m.name, m.width, self.ctx.backbone.input_shape,
                             stages, batch, direction)  # type: ignore[arg-type]
            if t is None:
                return None
            total += t
        return total * getattr(client, "slowdown", 1.0)

    def client_step(self, client: Client, idx: torch.Tensor
                    ) -> Generator[simpy.Event, object, torch.Tensor]:
        """Simulate and run one client-side step on the local (exit-head) loss.

        The device is busy for the step's FLOPs over its sustained FLOP/s; then
        the real step runs. Use as ``h = yield from self.client_step(...)``.

        Returns:
            The detached activations ``(B, C, H, W)`` to send to the server (a "meta"
            tensor, shape only, in timing-only runs).
        """
        flops, seconds = self.client_step_cost(client, len(idx))
        yield from self.sim.busy(client.actor, "client_train", client.client_id, flops, seconds)
        return self.client_torch_step(client, idx)

    def client_step_cost(self, client: Client, batch: int) -> tuple[float, float]:
        """(FLOPs, seconds) of one client-side step of ``batch`` samples on the local
        (exit-head) loss: the per-stage latency table's time when the profile has one,
        else FLOPs over the device's sustained FLOP/s this round."""
        flops = self.client_cost(client).train_flops(batch)
        seconds = self.compute_seconds(client, client.end_layer, batch,
                                       ("forward", "backward", "update", "exit_head"))
        return flops, flops / client.flops_per_s if seconds is None else seconds

    def client_torch_step(self, client: Client, idx: torch.Tensor,
                          done_s: float | None = None) -> torch.Tensor:
        """The torch part of :meth:`client_step` (its step trained ahead, if it was), once
        the step's time is simulated; returns the detached activations ``(B, ...)``.
        ``done_s``: the simulated instant (s) the step completes, when the round is booked
        ahead of the clock (default: now), for the progress display."""
        n = len(idx)
        if self.ctx.timing_only:
            self.ctx.on_batch(BATCH, done_s)
            return self.meta_tensor((n, *self.activation_shape(client)))
        ready = self.ready_steps.get(client.client_id)
        if ready:  # trained ahead (see train_ahead), and counted for progress then
            h, loss = ready.popleft()
            self.record_loss("client", client.client_id, loss, n)
            self.ctx.on_batch(None, done_s)  # the simulated clock only
            return h
        h, loss = self.local_step(client, idx)
        self.record_loss("client", client.client_id, loss, n)
        self.ctx.on_batch(BATCH, done_s)
        return h

    def train_batch(self, idx: torch.Tensor, client_id: int | None, *,
                    generator: torch.Generator | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The training samples ``idx`` as ``client_id`` trains on them.

        Every algorithm reads training data through here, so what a training batch is
        (normalisation, augmentation) is decided in one place. With
        ``dataset.augment`` a training step's images are augmented
        (:mod:`sflsim.data.augment`) with draws from ``client_id``'s own generator in
        :attr:`augment_generators`; a measurement (``client_id`` None) never is.

        Args:
            idx: int64 ``(B,)`` indices into the training set.
            client_id: whose training step this is (:data:`SERVER_ID` for the server);
                ``None`` for a measurement that trains nothing.
            generator: draw the augmentation from this generator instead of
                ``client_id``'s (training done for an evaluation, e.g. FedBABU's
                fine-tuning, must not move the training draws).

        Returns:
            images float32 ``(B, C, H, W)``, normalised per channel, on the run's device;
            labels int64 ``(B,)``.
        """
        data = self.ctx.data
        if client_id is None or client_id not in self.augment_generators:
            generator = None  # a measurement, or no augmentation
        elif generator is None:
            generator = self.augment_generators[client_id]
        if generator is None:
            return data.train_images(idx), data.y_train[idx]
        aug = self.scenario.dataset.augment
        return data.train_images(idx, crop_padding=aug.random_crop_padding,
                                 horizontal_flip=aug.horizontal_flip,
                                 generator=generator), data.y_train[idx]

    def local_step(self, client: Client, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The torch part of :meth:`client_step`: forward, exit-head cross-entropy,
        backward, update. Returns (detached activations ``(B, ...)``, loss ``()``)."""
        x, y = self.train_batch(idx, client.client_id)
        h = client.model(x)
        loss = self.loss_fn(client.exit_head(h), y)
        client.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        client.optimizer.step()
        client.optimizer.zero_grad(set_to_none=True)  # 100 clients' gradients would stay otherwise
        return h.detach(), loss.detach()

    def server_step(self, client: Client, model: nn.Module, optimizer: torch.optim.Optimizer,
                    h: torch.Tensor, y: torch.Tensor, lock: FifoResource | FifoQueue,
                    activity: str = "server_train", *, input_grad: bool = False,
                    objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                    ) -> Generator[simpy.Event, object, torch.Tensor | None]:
        """Queue for ``model`` and a server slot, simulate, then run one server step.

        Args:
            h: activations ``(B, ...)`` as received.
            y: labels ``(B,)``.
            lock: the model's own resource; one step at a time per model, FIFO. A
                :class:`~sflsim.engine.FifoQueue` when the model's steps are the server's
                only work (no slot is taken; the start is computed, the same times).
            input_grad: also compute (and pay for) the gradient w.r.t. ``h``.
            objective: ``(h, y) -> loss`` to minimise instead of cross-entropy of
                ``model(h)``; it must run ``model`` on ``h`` (its cost is what is paid).

        Returns:
            The activation gradients ``(B, ...)`` when ``input_grad``, else None.
        """
        flops = self.server_step_flops(client, model, h, input_grad)
        server = self.ctx.server
        if isinstance(lock, FifoQueue):
            yield from server.run_queued(activity, client.client_id, flops, lock)
        else:
            arrived = self.sim.now_s
            with lock.request() as model_req:
                yield model_req
                with server.request(client.client_id) as slot:
                    yield slot
                    yield from server.run(activity, client.client_id, flops, arrived)
        return self.server_torch_step(client, model, optimizer, h, y, input_grad=input_grad,
                                      objective=objective)

    def server_step_flops(self, client: Client, model: nn.Module, h: torch.Tensor,
                          input_grad: bool = False) -> float:
        """FLOPs of one server-side step of ``model`` on activations ``h`` ``(B, ...)``
        (with the gradient w.r.t. ``h`` when ``input_grad``)."""
        key = (self.cut_of(client), h.shape[1:], input_grad)
        cost = self._server_costs.get(key)
        if cost is None:
            cost = self._server_costs[key] = self.ctx.costs.cost(
                f"server:l{key[0]}", model, tuple(key[1]), input_requires_grad=input_grad)
        return cost.train_flops(len(h))

    def server_torch_step(self, client: Client, model: nn.Module,
                          optimizer: torch.optim.Optimizer, h: torch.Tensor, y: torch.Tensor, *,
                          input_grad: bool = False,
                          objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                          | None = None, done_s: float | None = None) -> torch.Tensor | None:
        """The torch part of :meth:`server_step`, once the step's time is simulated;
        ``done_s`` as in :meth:`client_torch_step`."""
        if self.ctx.timing_only:
            self.ctx.on_batch(SERVER, done_s)
            return self.meta_tensor(tuple(h.shape)) if input_grad else None
        h = h.detach().requires_grad_(input_grad)
        loss = objective(h, y) if objective else self.loss_fn(model(h), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        self.record_loss("server", client.client_id, loss, len(h))
        self.server_steps.append((self.sim.round, client.client_id, self.sim.now_s))
        self.ctx.on_batch(SERVER, done_s)
        return h.grad if input_grad else None

    def record_loss(self, where: str, client_id: int, loss: torch.Tensor, batch: int) -> None:
        """Append a step's mean loss to :attr:`losses`.

        Raises:
            DivergenceError: the loss is NaN or infinite (names the algorithm, the
                round and the client; the runner keeps the completed rounds).
        """
        value = loss.item()
        if not math.isfinite(value):
            name = self.scenario.algorithm.name
            raise DivergenceError(
                f"{name} diverged in round {self.sim.round}: the {where}-side loss of client "
                f"{client_id} is {value}; lower training.optimizer.lr (now "
                f"{self.scenario.training.optimizer.lr:g})",
                algorithm=name, round=self.sim.round, client_id=client_id)
        self.losses.append((where, client_id, value, batch))

    def check_parameters(self) -> None:
        """Raise :class:`DivergenceError` if a parameter of a model used for evaluation
        (every client's client-side model, exit head and server-side model) is NaN or
        infinite. A module that several clients share (FedAvg's global model, the
        shared untrained client-side models of :attr:`client_models` False) is checked
        once, for the first client that uses it."""
        name = self.scenario.algorithm.name
        seen: dict[int, nn.Module] = {}  # held, so that no id is reused meanwhile
        for c in self.ctx.clients:
            for what, module in (("client-side model", c.model), ("exit head", c.exit_head),
                                 ("server-side model", self.server_model_for(c))):
                if id(module) in seen:
                    continue
                seen[id(module)] = module
                if not all(torch.isfinite(p).all() for p in module.parameters()):
                    raise DivergenceError(
                        f"{name} diverged in round {self.sim.round}: the {what} of client "
                        f"{c.client_id} has NaN or infinite parameters; lower "
                        f"training.optimizer.lr (now {self.scenario.training.optimizer.lr:g})",
                        algorithm=name, round=self.sim.round, client_id=c.client_id)

    def cut_of(self, client: Client) -> int:
        """The client's cut layer this round (static algorithms: its group's end layer)."""
        return self.cuts.get(client.client_id, client.end_layer)

    def step_schedulers(self) -> None:
        """Step every learning-rate schedule once: schedules follow rounds, so a client
        that sat the round out (or a resumed optimizer) steps too, which torch would
        otherwise warn about. A cosine schedule that has reached its horizon (a run
        resumed with more rounds than it started with) stays at ``min_lr``: torch's
        cosine would climb back up."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step",
                                    category=UserWarning)
            for sched in self.schedulers:
                if sched.last_epoch < getattr(sched, "T_max", math.inf):
                    sched.step()

    def schedule_horizon_rounds(self) -> int | None:
        """:attr:`lr_horizon_rounds` with a cosine schedule, None with a constant rate."""
        cosine = self.scenario.training.schedule.name == "cosine"
        return self.lr_horizon_rounds if cosine else None

    # ----- evaluation -------------------------------------------------------------
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Test accuracy of every client: ``{client_id: (server_acc, client_acc)}`` in [0, 1].

        Args:
            x: uint8 test images ``(N, C, H, W)`` (e.g. of
                :meth:`~sflsim.data.DatasetSplit.test_subset`), normalised a batch at a
                time by :meth:`~sflsim.data.DatasetSplit.batches`; y: labels ``(N,)``.
        """
        return {
            c.client_id: accuracy(c.model, c.exit_head, self.server_model_for(c),
                                  self.test_batches(x, y, batch_size))
            for c in self.ctx.clients
        }

    def test_batches(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                     ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`~sflsim.data.DatasetSplit.batches` of the test images ``x`` (uint8
        ``(N, C, H, W)``) and labels ``y`` ``(N,)``, each reported to the progress display
        as a test batch once the caller has used it (asks for the next one); any thread."""
        for batch in self.ctx.data.batches(x, y, batch_size):
            yield batch
            self.ctx.on_batch(TEST)

    def run_clients(self, body: Callable[[Client], Process]) -> Process:
        """Start ``body(client)`` for every client that did not drop out this round
        (in id order, at its slowdown) and wait for all.

        A body cut off by the round deadline ends there (see :meth:`run_round`).
        """
        procs = []
        for c in self.ctx.clients:
            if c.client_id in self.dropped:
                continue
            c.slowdown = self.slowdowns.get(c.client_id, 1.0)
            work = body(c) if self.keep_first is None else self._kept(c.client_id, body(c))
            procs.append(self.spawn(c, work))
        yield self.sim.env.all_of(procs)

    def _kept(self, client_id: int, work: Process) -> Process:
        """``work``, then, if ``client_id`` is the :attr:`keep_first`-th client to finish,
        stop every other client's work of the round at that instant (over-commitment;
        a client that finishes at the same instant is kept too: :meth:`_cut_off`)."""
        yield from work
        finished = self._finished
        finished.add(client_id)
        if len(finished) == self.keep_first:
            self._start_cut_off(self.sim.now_s, OVER_COMMITTED,
                                lambda owner: owner not in finished and owner != SERVER_ID)

    def _start_cut_off(self, at_s: float, cause: str, stops: Callable[[int], bool]) -> None:
        """Start :meth:`_cut_off` as a process of this round (stopped if the round ends
        first)."""
        self._cutters.append(self.sim.env.process(self._cut_off(at_s, cause, stops)))

    def _cut_off(self, at_s: float, cause: str, stops: Callable[[int], bool]) -> Process:
        """At ``at_s`` (s), interrupt with ``cause`` every process of this round still
        running whose owner (a client id, :data:`SERVER_ID`) ``stops``.

        Every cut-off of the round protocol (the deadline in :meth:`run_round`, a client
        going offline, over-commitment) waits for :func:`~sflsim.engine.cut_off_at`, the
        one rule for the instant: work that ends at ``at_s`` or before counts, work that
        ends after it is cut off."""
        procs = self._round_procs  # this round's (a new list each round)
        try:
            yield cut_off_at(self.sim.env, at_s)
        except simpy.Interrupt:  # the round ended first
            return
        for owner, proc in procs:
            if stops(owner) and proc.is_alive:
                proc.interrupt(cause)

    @property
    def interruptible(self) -> bool:
        """Whether something may cut this round's work short: a round deadline, a
        participant going offline, or over-commitment (then work is simulated step by
        step, never planned or trained ahead)."""
        return self._deadline_s is not None or bool(self.offline_at) or (
            self.keep_first is not None)

    def spawn(self, client: Client, work: Process) -> simpy.Process:
        """Start ``work`` done for ``client`` as a process of this round; at the round
        deadline (or when the client goes offline) it is interrupted, its unfinished
        work discarded and the client marked late (offline)."""
        if not self.interruptible:  # nothing will interrupt it
            return self.sim.env.process(work)
        proc = self.sim.env.process(self._until_deadline(client.client_id, work))
        self._round_procs.append((client.client_id, proc))
        return proc

    def spawn_server(self, work: Process) -> simpy.Process:
        """Start ``work`` the server does on its own as a process of this round (e.g.
        further steps on activations already received); at the round deadline it is
        interrupted and its unfinished work discarded, and no client is marked late."""
        if not self.interruptible:
            return self.sim.env.process(work)
        proc = self.sim.env.process(_until_interrupted(work))
        self._round_procs.append((SERVER_ID, proc))
        return proc

    def _round_until_deadline(self, round_: int) -> Process:
        try:
            yield from self.train_round(round_)
        except simpy.Interrupt:
            pass

    def _until_deadline(self, client_id: int, work: Process) -> Process:
        try:
            yield from work
        except simpy.Interrupt as stop:
            self.status[client_id] = {OFFLINE: "offline", OVER_COMMITTED: "over_committed"}.get(
                stop.cause, "late")

    def _take_offline(self) -> None:
        """Cut each participant off when it goes offline (:attr:`offline_at`): one
        :meth:`_cut_off` per instant, for the clients that go offline then."""
        for t in sorted(set(self.offline_at.values())):
            self._start_cut_off(t, OFFLINE, lambda owner, t=t: self.offline_at.get(owner) == t)

    def run_round(self, round_: int, deadline_s: float | None = None, *,
                  start_s: float | None = None) -> Process:
        """:meth:`train_round` under the round's conditions; returns when it is done or,
        with ``deadline_s``, at ``start_s + deadline_s``, whichever comes first.

        Args:
            deadline_s: the round deadline (s), measured from ``start_s``; None: none.
            start_s: the round's start (s of simulated time), from which the deadline
                counts; the runner passes the instant before it waits for a client to
                come online (:func:`sflsim.runner.wait_for_clients`), so the wait is
                part of the deadline. None: now.

        Raises:
            ValueError: ``start_s + deadline_s`` is before now (the runner never waits
                past the deadline).

        At the deadline every process still running for a client (started by
        :meth:`run_clients` or :meth:`spawn`) is interrupted: work in progress is
        recorded up to the cut as ``cut_off``, nothing after it runs, and the client is
        "late". Then the round process itself is interrupted, so work it does on its
        own (e.g. the centralized baseline's server steps) stops too. Work that ends
        exactly at the deadline counts (:func:`~sflsim.engine.cut_off_at`, the rule of
        every cut-off of the round, also a client going offline and over-commitment).
        """
        env = self.sim.env
        self._deadline_s = deadline_s
        self.status = {c.client_id: self.absent.get(c.client_id) or (
                           "dropped" if c.client_id in self.dropped else "trained")
                       for c in self.ctx.clients}
        self._round_procs, self._finished, self._cutters = [], set(), []
        try:
            deadline = None if deadline_s is None else cut_off_at(
                env, (env.now if start_s is None else start_s) + deadline_s)
            self._take_offline()
            proc = env.process(self._round_until_deadline(round_))
            if deadline is None:
                yield proc
                return
            yield proc | deadline
            if not proc.is_alive:
                return
            for _cid, p in self._round_procs:
                if p.is_alive:
                    p.interrupt("round deadline")
            proc.interrupt("round deadline")
            yield env.timeout(0)  # let the interrupted processes unwind at the deadline
        finally:
            for cutter in self._cutters:  # the round ended first
                if cutter.is_alive:
                    cutter.interrupt("round over")
            for c in self.ctx.clients:
                c.slowdown = 1.0
            self._round_procs, self._cutters = [], []


#: the cause of the interrupt that stops a client going offline mid-round
OFFLINE = "offline"
#: the cause of the interrupt that stops a client once enough others finished
#: (``training.over_commit``)
OVER_COMMITTED = "over_committed"


def _until_interrupted(work: Process) -> Process:
    """``work``, ending quietly when interrupted (the round deadline)."""
    try:
        yield from work
    except simpy.Interrupt:
        pass


_PARAM_COUNTS: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


def _param_count(module: nn.Module) -> int:
    """Parameters of ``module`` (cached: architectures do not change during a run)."""
    count = _PARAM_COUNTS.get(module)
    if count is None:
        count = _PARAM_COUNTS[module] = sum(p.numel() for p in module.parameters())
    return count
