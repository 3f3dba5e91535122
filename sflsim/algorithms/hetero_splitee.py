"""Hetero-SplitEE: split learning with early exits for heterogeneous IoT devices.

Paper: "Split Learning of Neural Networks with Early Exits for Heterogeneous IoT
Devices", arXiv 2512.09313, §III-B, Alg. 1-2.

Every client trains stages ``1..l_i`` plus its exit head on the local loss and
streams the detached activations to the server; no gradient returns to the
client. The server trains the rest of the network on those activations:

* **Sequential** (Alg. 1): one shared server-side model. Activations are served
  one batch at a time in order of simulated arrival (FIFO), and that is the order
  of the real server updates. Server learning rate = lr / ``server_lr_divisor``
  (the paper divides by 12.0 for 12 clients; default: the number of clients).
* **Averaging** (Alg. 2): one server-side model per client, trained in parallel
  up to the server's slots; at round end, cross-layer aggregation (eq. 1)
  averages every layer ``l`` over ``C_l = {i | l_i < l}``.
* **Distributed** baseline (§IV-A4): Averaging without any aggregation.

Deviations from the paper: Alg. 1-2 loop ``for e = 1..E`` over single sampled
mini-batches; here a local epoch is one pass over the client's shuffled data.
Each server model keeps its own Adam state. The shared model's stages cover the
layers after the shallowest end layer; a client at end layer ``l`` enters it at
stage ``l + 1``.

**BatchNorm running statistics of the server-side layers** (``bn_statistics``), a
reading the paper leaves open: it never mentions them, and they decide the server
accuracy of both strategies at sflsim's scale (``analysis/REPRODUCTION.md`` reports
every target under each value). The server layers that clients of several end layers
share see activations of different depths and client-side prefixes; BatchNorm's
running mean and variance (buffers, not parameters: nothing trains them) then mix
those distributions, and evaluation normalises each client's activations with the
mixture. Values, for both strategies:

* ``shared``: one set of statistics per server layer. Sequential: the one shared
  server-side model's own, fed in order of arrival by every client (the default:
  Alg. 1 trains "a shared server model", which has one set). Averaging: the
  statistics are averaged over ``C_l`` with the parameters, as FedAvg's
  state-dict averaging does.
* ``per_depth``: one set per entry depth (end layer): Sequential keeps a copy of
  the statistics per end layer and swaps it in for that end layer's steps and
  evaluation; Averaging averages statistics only over the clients of ``C_l`` at the
  same end layer.
* ``per_client``: one set per client: Sequential keeps a copy per client;
  Averaging averages parameters only and each client's server-side model keeps its
  own statistics (the default: eq. 1 averages "the parameters of layer l", and
  running statistics are not parameters).

Parameters (weights, and BatchNorm's affine weight and bias) are shared or
averaged as the strategy says under every value; only the running statistics
differ. Integer counters (``num_batches_tracked``) are averaged and rounded.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable

import numpy as np
import simpy
import torch
from torch import nn

from sflsim.algorithms.aggregation import average_into
from sflsim.algorithms.base import Algorithm, Client, RunContext, register_algorithm
from sflsim.algorithms.bn_statistics import BatchNormStatistics, statistics_view
from sflsim.algorithms.context import make_scheduler
from sflsim.algorithms.costs import CLIENT_STEP
from sflsim.engine import FifoQueue, FifoResource, Link, Process, wait_until
from sflsim.execution.booked_split import BookedSplitRounds
from sflsim.execution.host_threads import run_ahead, step_batched
from sflsim.execution.local_steps import make_optimizer


class _HierarchicalTraining(Algorithm):
    """Client-side local-loss training plus server training on streamed activations."""

    #: whether every client's uplink is its own (no access point shared); worked out once
    _own_uplinks: bool | None = None

    def server_for(self, client: Client
                   ) -> tuple[nn.Module, torch.optim.Optimizer, FifoResource | FifoQueue]:
        """(server-side model, its optimizer, its lock) serving ``client``."""
        raise NotImplementedError

    def server_model_for(self, client: Client) -> nn.Module:
        return self.server_for(client)[0]

    def exit_models(self, client: Client) -> tuple[nn.Module, nn.Module, nn.Module]:
        return client.model, client.exit_head, self.server_model_for(client)

    def train_round(self, round_: int) -> Process:
        ahead = self.ctx.execution.ahead is not None and not self.protocol.interruptible
        plans = self.train_ahead() if ahead else {}
        if self._own_uplinks is None:  # the links do not change during a run
            self._own_uplinks = all(type(c.uplink) is Link for c in self.ctx.clients)
        if not self.protocol.interruptible and self._own_uplinks:
            yield from self._train_round_booked(plans)
            return
        jobs: list[simpy.Process] = []

        def train_client(client: Client) -> Process:
            shape = self.cost_model.activation_shape(client)
            batches = iter(plans.get(client.client_id) or self.batching.round_batches(client))
            idx = next(batches, None)
            while idx is not None:
                h = yield from self.steps.client_step(client, idx)
                y = None if self.ctx.timing_only else self.ctx.data.y_train[idx]
                send = self.send_activations(client, h, y, self.cost_model.payload_bytes(shape, len(idx)))
                idx = next(batches, None)  # (a new epoch draws its order here, as before)
                if idx is None:  # the last batch: this process sends it, one process fewer
                    yield from send
                else:  # a round process of its own: the deadline cuts it off
                    jobs.append(self.protocol.spawn(client, send))

        yield from self.protocol.run_clients(train_client)
        yield self.sim.env.all_of(jobs)  # the round ends when the server has served everything

    def _train_round_booked(self, plans: dict[int, list[torch.Tensor]]) -> Process:
        """:meth:`train_round` when nothing can interrupt the round (no deadline) and
        each client's uplink is its own: the same times, bytes and FLOPs, computed
        rather than simulated step by step.

        A client's compute and uplink serve only it, so each step's compute (one after
        the other on the device) and each transfer (first come, first served on the
        link, :meth:`~sflsim.engine.Link.book`) are booked from the round's start,
        in batch order. Only the server is shared: each batch's server job is started
        when its activations arrive, in simulated-time order, as in :meth:`train_round`.
        A one-slot queue (Sequential's one server-side model, :class:`FifoQueue`) needs
        no event at all: its jobs are booked in order of arrival (ties in the order
        sent, as SimPy would fire their arrivals) and trained in that order, so the
        shared model sees the same steps in the same order as step by step, and one
        timeout ends the round with the last job. The trace's rows of the round are put
        in order of completion when it ends (:meth:`sflsim.engine.Trace.sort_from`).
        """
        env, sim = self.sim.env, self.sim
        timing_only = self.ctx.timing_only
        now = env.now
        if self.ctx.execution.array_booking and self._arrays() is not None:
            yield from wait_until(env, self._book_arrays())  # the last booked job ends
            return
        queued: list[tuple] = []  # server jobs of the one-slot queue, as they arrive
        jobs: list[simpy.Process] = []
        # per (end layer, batch, slowdown, device): (FLOPs, seconds, payload bytes)
        step_costs: dict[tuple, tuple[float, float, int]] = {}
        server_flops: dict[tuple, float] = {}  # (end layer, batch)
        cond = self.protocol.conditions
        record, slowdowns, dropped = sim.record, cond.slowdowns, cond.dropped
        for c in self.ctx.clients:
            if c.client_id in dropped:
                continue
            c.slowdown = slowdowns.get(c.client_id, 1.0)
            model, optimizer, lock = self.server_for(c)
            one_slot = isinstance(lock, FifoQueue)
            actor, book, cid, end_layer = c.actor, c.uplink.book, c.client_id, c.end_layer
            t = now
            for idx in plans.get(cid) or self.batching.round_batches(c):
                n = len(idx)
                key = (end_layer, n, c.slowdown, id(c.device))
                cost = step_costs.get(key)
                if cost is None:
                    costs = self.cost_model
                    cost = step_costs[key] = (*costs.client_step_cost(c, n),
                                              costs.payload_bytes(costs.activation_shape(c), n))
                flops, seconds, payload = cost
                end = t + seconds
                record(actor, "client_train", cid, t, end, flops=flops)
                h = self.steps.client_torch_step(c, idx, end)  # the clock stays: the step's end
                y = None if timing_only else self.ctx.data.y_train[idx]
                arrived = book("send_activations", cid, payload, end)
                t = end
                if one_slot:
                    job_flops = server_flops.get((end_layer, n))
                    if job_flops is None:
                        job_flops = server_flops[end_layer, n] = self.cost_model.server_step_flops(
                            c, model, h)
                    # the instant a timeout of that delay from now would fire
                    queued.append((now + (arrived - now), c, model, optimizer, h, y, lock,
                                   job_flops))
                else:
                    jobs.append(env.process(self._serve_at(arrived, c, h, y)))
        if queued:  # in order of arrival; ties in the order sent, as SimPy fires them
            queued.sort(key=_arrival_s)
            end = now
            for arrived, c, model, optimizer, h, y, lock, flops in queued:
                end = self._serve_booked(c, model, optimizer, h, y, lock, flops, arrived)
            yield from wait_until(env, end)  # the last booked job ends
        if jobs:
            yield env.all_of(jobs)

    def _arrays(self) -> BookedSplitRounds | None:
        """The clients as arrays for :meth:`_book_arrays`
        (:class:`~sflsim.execution.booked_split.BookedSplitRounds`), made on first use;
        None where the round must be booked client by client: a link with a bandwidth
        trace, a step not priced by the FLOPs rule (a measured latency table, the cost
        model by operation), or a server model that is neither the one shared model's
        queue (Sequential) nor a client's own on server slots served first come, first
        served (Averaging, Distributed)."""
        if not hasattr(self, "_booked_split"):
            clients = self.ctx.clients
            self._booked_split, self._priced = None, {}
            sizes = [self.batching.round_batch_sizes(c) for c in clients]
            locks = [self.server_for(c)[2] for c in clients]
            #: None: Sequential's one queue; the server's slots (Averaging); 0: neither
            self._slots = None if all(isinstance(lock, FifoQueue) for lock in locks) else (
                self.ctx.server.resource.capacity if self.ctx.server.queue == "fifo"
                and all(isinstance(lock, FifoResource) for lock in locks) else 0)
            if (self._slots != 0
                    and all(type(c.uplink) is Link and c.uplink.trace is None for c in clients)):
                arrays = BookedSplitRounds(clients, sizes, [c.end_layer for c in clients])
                first = {}
                for c in clients:
                    first.setdefault((id(c.device), c.end_layer), c)
                if all(self.cost_model.compute_seconds(c, c.end_layer, n, CLIENT_STEP) is None
                       for c in first.values() for n in {n for _, n in arrays.keys}):
                    self._booked_split = arrays
        return self._booked_split

    def _book_arrays(self) -> float:
        """:meth:`_train_round_booked` of a timing-only round as arrays
        (:class:`~sflsim.execution.booked_split.BookedSplitRounds`): the same times, bytes
        and FLOPs, and the same trace rows in the same order. Returns when the last server
        job ends (s)."""
        env, arrays, costs = self.sim.env, self._booked_split, self.cost_model
        cond, now = self.protocol.conditions, env.now
        clients = self.ctx.clients
        active = (np.array([c.client_id not in cond.dropped for c in clients]) if cond.dropped
                  else np.ones(len(clients), dtype=bool))
        slowdown = (np.array([cond.slowdowns.get(c.client_id, 1.0) for c in clients])
                    if cond.slowdowns else np.ones(len(clients)))
        by_layer = {c.end_layer: c for c in self.ctx.clients}
        for key in arrays.keys - self._priced.keys():
            layer, n = key
            c = by_layer[layer]
            flops, _ = costs.client_step_cost(c, n)
            h = costs.meta_tensor((n, *costs.activation_shape(c)))
            self._priced[key] = (flops, costs.payload_bytes(costs.activation_shape(c), n),
                                 costs.server_step_flops(c, self.server_for(c)[0], h))
        lock = self.server_for(self.ctx.clients[0])[2]
        end, free = arrays.book(self.sim, now, active, slowdown, self._priced,
                                getattr(lock, "free_at_s", now), self.ctx.server.flops_per_s,
                                self.ctx.on_batch, self._slots)
        if self._slots is None:
            lock.free_at_s = free
        return end

    def _serve_booked(self, client: Client, model: nn.Module, optimizer: torch.optim.Optimizer,
                      h: torch.Tensor, y: torch.Tensor, lock: FifoQueue, flops: float,
                      arrived_s: float) -> float:
        """Book ``client``'s job of ``flops`` on the one-slot queue at the arrival of its
        activations, record it and train it (see :meth:`_train_round_booked`); returns
        the simulated time the job ends (s)."""
        start, end = lock.book(flops / self.ctx.server.flops_per_s, arrived_s)
        self.sim.record("server", "server_train", client.client_id, start, end,
                        start - arrived_s, flops=flops)
        self.steps.server_torch_step(client, model, optimizer, h, y, done_s=end)
        if not self.ctx.timing_only:
            optimizer.zero_grad(set_to_none=True)
        return end

    def _serve_at(self, arrived_s: float, client: Client, h: torch.Tensor,
                  y: torch.Tensor) -> Process:
        """Wait for ``client``'s activations to arrive, then its server step."""
        yield self.sim.env.timeout(arrived_s - self.sim.env.now)
        yield from self.serve(client, h, y)

    def train_ahead(self) -> dict[int, list[torch.Tensor]]:
        """Train this round's client-side steps before the round is simulated:
        ``training.fuse_clients`` trains clients that share a cut layer (and optimizer
        step count) together in one fused step per batch
        (:class:`sflsim.models.fused.FusedClients`); ``training.parallel_clients``
        trains several clients (or fused groups) at once on host threads
        (:func:`~sflsim.execution.host_threads.run_ahead`).

        Exact (fused: to float rounding) because a Hetero-SplitEE client-side update
        depends only on the client's own batches and exit-head loss, never on the
        server or on simulated time; each client's batches are drawn from its own
        generator in the same order as step by step. The results wait in
        :attr:`ready_steps`; :meth:`client_step` hands them out at the simulated
        instants. Clients whose batch ``j`` differs in size from the others' train
        that step alone.

        Returns:
            ``{client_id: [index batch, ...]}``: every active client's batches of the
            round (all local epochs), to be simulated in that order.
        """
        active = self.protocol.active_clients()
        plans = {c.client_id: list(self.batching.round_batches(c)) for c in active}
        self.steps.ready_steps = {c.client_id: collections.deque() for c in active}
        groups: dict[tuple, list[Client]] = collections.defaultdict(list)
        for c in active:
            if self.ctx.execution.ahead == "fused":
                state = next(iter(c.optimizer.state.values()), {})  # fusable: the same history
                groups[(c.end_layer, bool(state), float(state.get("step", 0)))].append(c)
            else:
                groups[(c.client_id,)].append(c)
        # progress counts a step as it trains here (its host time); the simulation reports
        # only its simulated instant when it reaches it (client_torch_step)
        run_ahead([lambda step_done, members=members: self._train_group(members, plans, step_done)
                   for members in groups.values()], self.ctx.execution.threads,
                  self.ctx.on_batch)
        return plans

    def _train_group(self, members: list[Client], plans: dict[int, list[torch.Tensor]],
                     step_done: Callable[[], None]) -> None:
        """Every step of ``members`` (one client, or clients that may be fused) into
        :attr:`ready_steps`, calling ``step_done()`` once per client step."""
        from sflsim.models.fused import FusedClients

        by_id = {c.client_id: c for c in members}

        def record(cid: int, h: torch.Tensor, loss: torch.Tensor) -> None:
            self.steps.ready_steps[cid].append((h, loss))
            step_done()

        step_batched({cid: plans[cid] for cid in by_id},
                     lambda ids: FusedClients([by_id[i].model for i in ids],
                                              [by_id[i].exit_head for i in ids],
                                              [by_id[i].optimizer for i in ids], channels_last=True),
                     self.steps.train_batch, record,
                     alone=lambda cid, idx: self.steps.local_step(by_id[cid], idx))

    def send_activations(self, client: Client, h: torch.Tensor, y: torch.Tensor,
                         payload_bytes: int) -> Process:
        """Uplink the activations, then queue them at the server and train on them."""
        yield from client.uplink.transfer("send_activations", client.client_id, payload_bytes)
        yield from self.serve(client, h, y)

    def serve(self, client: Client, h: torch.Tensor, y: torch.Tensor) -> Process:
        """Queue ``client``'s activations at the server and train on them."""
        model, optimizer, lock = self.server_for(client)
        yield from self.steps.server_step(client, model, optimizer, h, y, lock)
        if not self.ctx.timing_only:
            optimizer.zero_grad(set_to_none=True)  # per-client copies: free what is not needed


def _arrival_s(job: tuple) -> float:
    return job[0]


@register_algorithm("hetero_splitee_sequential")
class HeteroSplitEESequential(_HierarchicalTraining):
    """Alg. 1: one shared server-side model, activations served in arrival order."""

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        backbone, cfg = ctx.backbone, ctx.scenario
        self.first_stage = min(c.end_layer for c in ctx.clients)  # shared stages start after it
        self.stages = nn.ModuleList(copy.deepcopy(list(backbone.stages[self.first_stage:])))
        self.head = copy.deepcopy(backbone.head)
        # one step per client batch: lr over the clients that train each round
        divisor = cfg.algorithm.server_lr_divisor or float(
            cfg.training.participants(cfg.num_clients))
        params = [*self.stages.parameters(), *self.head.parameters()]
        self.server_optimizer = make_optimizer(params, cfg.training.optimizer,
                                               cfg.training.optimizer.lr / divisor)
        scheduler = make_scheduler(self.server_optimizer, cfg)
        if scheduler is not None:
            self.steps.schedulers.append(scheduler)
        # the shared model's steps, one at a time, are the only server work: they
        # queue for the model alone (FifoQueue), not for it and then a server slot
        self.lock = FifoQueue(self.sim.env)
        # a view per end layer (per client, with per-client statistics): stages l+1..L
        # of the one shared model, then the head
        mode = cfg.algorithm.bn_statistics
        if mode == "shared" or ctx.timing_only:
            self.statistics = None
            key_of = {c.client_id: c.end_layer for c in ctx.clients}
        else:
            key_of = {c.client_id: c.end_layer if mode == "per_depth" else c.client_id
                      for c in ctx.clients}
            self.statistics = BatchNormStatistics(nn.Sequential(*self.stages, self.head),
                                                  sorted(set(key_of.values())))
        end_of = {key_of[c.client_id]: c.end_layer for c in ctx.clients}
        views = {key: self._view(end_of[key], key) for key in sorted(end_of)}
        #: client id -> the view of the shared model that serves it
        self.views = {cid: views[key] for cid, key in key_of.items()}

    def _view(self, end_layer: int, key: int) -> nn.Sequential:
        modules = [*self.stages[end_layer - self.first_stage:], self.head]
        if self.statistics is None:
            return nn.Sequential(*modules)
        return statistics_view(modules, self.statistics, key)

    def server_for(self, client: Client) -> tuple[nn.Module, torch.optim.Optimizer, FifoQueue]:
        return self.views[client.client_id], self.server_optimizer, self.lock


@register_algorithm("hetero_splitee_averaging")
class HeteroSplitEEAveraging(_HierarchicalTraining):
    """Alg. 2: per-client server-side models, cross-layer aggregation each round."""

    aggregate = True

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        cfg = ctx.scenario
        self.server_models: dict[int, nn.Sequential] = {}
        self.server_optimizers: dict[int, torch.optim.Optimizer] = {}
        self.locks: dict[int, FifoResource] = {}
        shared: dict[int, nn.Sequential] = {}  # timing only: one model per end layer
        for c in ctx.clients:
            self.locks[c.client_id] = FifoResource(self.sim.env)
            if ctx.timing_only:
                if c.end_layer not in shared:
                    shared[c.end_layer] = ctx.backbone.server_model(c.end_layer)
                self.server_models[c.client_id] = shared[c.end_layer]
                self.server_optimizers[c.client_id] = None  # type: ignore[assignment]
                continue
            model = ctx.backbone.server_model(c.end_layer)  # same initial weights for all
            opt = make_optimizer(model.parameters(), cfg.training.optimizer,
                                 cfg.training.optimizer.lr)
            scheduler = make_scheduler(opt, cfg)
            if scheduler is not None:
                self.steps.schedulers.append(scheduler)
            self.server_models[c.client_id] = model
            self.server_optimizers[c.client_id] = opt

    def server_for(self, client: Client) -> tuple[nn.Module, torch.optim.Optimizer, FifoResource]:
        cid = client.client_id
        return self.server_models[cid], self.server_optimizers[cid], self.locks[cid]

    def end_round(self, round_: int) -> None:
        """Cross-layer aggregation over the clients that trained this round (not dropped,
        not late); the others keep their server models as they are. None in a timing-only
        run: its server-side models, one per end layer, are never trained."""
        if self.aggregate and not self.ctx.timing_only:
            trained = [c for c in self.ctx.clients
                       if self.protocol.status.get(c.client_id, "trained") == "trained"]
            by_samples = getattr(self.scenario.algorithm, "weighting", "uniform") == "samples"
            cross_layer_aggregate(
                [(c.end_layer, self.server_models[c.client_id]) for c in trained],
                self.ctx.backbone.num_stages,
                [float(len(c.indices)) for c in trained] if by_samples else None,
                statistics=self.scenario.algorithm.bn_statistics,
            )


@register_algorithm("distributed")
class Distributed(HeteroSplitEEAveraging):
    """Distributed baseline (§IV-A4): no server-side information is shared."""

    aggregate = False


def cross_layer_aggregate(server_models: list[tuple[int, nn.Sequential]], num_stages: int,
                          weights: list[float] | None = None, *,
                          statistics: str = "shared") -> dict[int, list[int]]:
    """Average each layer over the server-side models that hold it (paper eq. 1).

    Args:
        server_models: ``(end_layer l_i, server model)`` per client; the model's
            child ``k`` is stage ``l_i + 1 + k`` and its last child the output layer.
        num_stages: ``L``, the number of stages of the full network.
        weights: one weight per entry of ``server_models`` (``weighting: samples``:
            its client's training samples), renormalised within each C_l; None is
            the paper's unweighted mean (eq. 1).
        statistics: the BatchNorm running statistics (buffers) of each layer:
            ``shared`` averaged over C_l with the parameters, ``per_depth`` averaged
            over the members of C_l at the same end layer, ``per_client`` not averaged
            (each model keeps its own).

    Returns:
        ``{layer: [positions in server_models that were averaged]}`` for layers
        ``2..L`` and ``L + 1`` (the output layer), i.e. ``C_l = {i | l_i < l}``.
    """
    members: dict[int, list[int]] = {}
    for layer in range(2, num_stages + 2):
        group = [i for i, (end, _) in enumerate(server_models) if end < layer]
        if group:
            members[layer] = group
            modules = [server_models[i][1][layer - server_models[i][0] - 1] for i in group]
            w = [1.0] * len(group) if weights is None else [weights[i] for i in group]  # eq. 1
            if statistics == "shared":
                average_into(modules, w)
                continue
            average_into(modules, w, keys=[n for n, _ in modules[0].named_parameters()])
            buffers = [n for n, _ in modules[0].named_buffers()]
            if statistics == "per_depth" and buffers:
                for end in sorted({server_models[i][0] for i in group}):
                    at = [k for k, i in enumerate(group) if server_models[i][0] == end]
                    average_into([modules[k] for k in at], [w[k] for k in at], keys=buffers)
    return members
