"""SplitFed V1 and V2: split learning with client-side federated averaging.

Paper: Thapa, Chamikara, Camtepe, Sun, "SplitFed: When Federated Learning Meets
Split Learning", AAAI 2022 (Alg. 1 for V1; V2 as described in §"Variants").

Per batch, a client runs stages ``1..k`` (its cut layer ``k`` this round),
sends the activations up, the server runs the rest and returns the activation
gradients, and the client waits for them before its backward pass and update.
Each round starts with every client downloading the client-side part of the
global model and ends with it uploading its trained copy.

* **V1**: the server keeps one server-side copy per client, trained in parallel
  (up to its slots), averaged at round end.
* **V2**: the server keeps one server-side model, trained one batch at a time in
  order of simulated arrival.

Aggregation (round end): every layer of the global model becomes the
sample-weighted average (FedAvg) of every copy that trained it this round:
client copies of clients with cut ``>= l``, plus (V1) the server copies of
clients with cut ``< l`` or (V2) the one server model, weighted by the samples
of the clients it served at that layer.

Deviations from the paper: cut layers may differ between clients and rounds
(chosen by a split policy, :mod:`sflsim.algorithms.split_policy`); the layer-wise
aggregation above reduces to SplitFed's when all clients share one cut. The
client optimizer is created anew each round (as in FedAvg); V2's server
optimizer persists across rounds, V1's per-client server optimizers are created
per round.

Variants build on two hooks: :meth:`SplitFed.serve`, the server's part of a step
(MergeSFL merges clients' activations, MU-SplitFed adds server steps), and
:meth:`SplitFed.aggregation_weight`, a client's weight in the average.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Generator

import numpy as np
import simpy
import torch
from torch import nn

from sflsim.algorithms.aggregation import weighted_average
from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.global_model import GlobalModelAlgorithm, model_bytes
from sflsim.algorithms.split_policy import (
    RandomSplit,
    ResourceSplit,
    SplitPolicy,
    StaticSplit,
    estimate_round_time_s,
)
from sflsim.engine import FifoResource, Process, wait_until
from sflsim.execution.booked_return import ReturnRoundBooking
from sflsim.execution.host_threads import step_batched
from sflsim.models.cost import PieceCost
from sflsim.work import BATCH, SERVER


class SplitFed(GlobalModelAlgorithm):
    """Shared machinery of V1 and V2; subclasses say whether the server model is shared."""

    shared_server = False
    #: whether the server trains the backbone stages after each client's cut
    server_trains_backbone = True

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        name, candidates, budget_s = self.split_config()
        self.candidates = sorted(candidates or range(1, ctx.backbone.num_stages))
        self.policy = self.make_policy(name, budget_s,
                                       np.random.default_rng(ctx.seeds.get("split", 0)))
        if self.shared_server:
            self.server_optimizer = self.round_optimizer(self.global_model.parameters(), 1)
            self.server_lock = FifoResource(self.sim.env)

    def split_config(self) -> tuple[str, list[int] | None, float | None]:
        """(policy name, candidate cuts or None for all, round budget in s) from the scenario."""
        split = self.scenario.algorithm.split
        return split.name, split.candidates, split.round_budget_s

    def make_policy(self, name: str, budget_s: float | None, rng: np.random.Generator
                    ) -> SplitPolicy | None:
        clients = self.ctx.clients
        if name == "random":
            return RandomSplit(self.candidates, clients, rng)
        if name == "resource":
            return ResourceSplit(self.candidates, clients, budget_s, self.round_time_s)
        if name == "static":
            return StaticSplit(self.candidates, clients)
        return None

    def round_time_s(self, client: Client, cut: int) -> float:
        body = self.global_model[:cut]
        shape = self.ctx.costs.cost(f"client_body:l{cut}", body, self.ctx.backbone.input_shape,
                                    backward=False).output_shape
        return estimate_round_time_s(
            client, cut, body=body, costs=self.ctx.costs, input_shape=self.ctx.backbone.input_shape,
            batch_size=self.scenario.training.batch_size,
            local_epochs=self.scenario.training.local_epochs,
            activation_bytes_per_sample=self.cost_model.payload_bytes(shape, 1),
            model_bytes=model_bytes(body),
        )

    def work_per_round(self) -> dict[str, float]:
        """A split step per training batch: the client's part and a server step."""
        batches = self.batches_per_round()
        return {BATCH: batches, SERVER: batches}

    # ----- one round ------------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        self.cost_model.cut_layers = self.policy.choose(round_)
        self.client_copies: dict[int, nn.Sequential] = {}
        self.server_copies: dict[int, nn.Sequential] = {}
        if self.shared_server:
            for group in self.server_optimizer.param_groups:
                group["lr"] = self.lr_for_round(round_)
        #: clients trained ahead (:meth:`train_fused`): {client_id: server losses, in order}
        self.ready_losses: dict[int, collections.deque[torch.Tensor]] = {}
        if (self.ctx.execution.ahead == "fused" and not self.shared_server
                and not self.protocol.interruptible):
            self.train_fused(round_)
        if self.ctx.execution.array_booking and not self.protocol.interruptible:
            if not hasattr(self, "_booking"):  # timing-only rounds as arrays, if they can be
                self._booking = ReturnRoundBooking(self.ctx, self.protocol, self.cost_model,
                                                   self.global_model, self.batching,
                                                   self.stage_bytes, self.shared_server)
            last = self._booking.book_round()
            if last is not None:
                yield from wait_until(self.sim.env, last)
                return
        yield from self.protocol.run_clients(lambda c: self.train_client(c, round_))

    def train_fused(self, round_: int) -> None:
        """``training.fuse_clients`` (SplitFed V1): train every active client's round
        before it is simulated, the clients at one cut batched step by step
        (:class:`sflsim.models.fused.FusedClients`: the client-side copy as the "model",
        the client's server-side copy as the "head").

        A V1 split step is one step of the whole model: the client forwards its stages,
        the server its copy of the rest and the loss, the activation gradients flow
        back, and both sides step optimizers of the same settings; nothing depends on
        another client or on simulated time, and activations cross the wire at full
        precision. So training client and server copy as one network, with one
        optimizer over both (updates are element-wise), is the same step up to float
        rounding (grouped vs. plain convolutions). Clients whose batch ``j`` differs in
        size from the others' at their cut train that step alone. The copies go to
        :attr:`client_copies` and :attr:`server_copies`, the server losses to
        :attr:`ready_losses`, handed out as the simulated steps reach them.
        """
        from sflsim.models.fused import FusedClients

        active = self.protocol.active_clients()
        plans = {c.client_id: [idx for _ in range(self.scenario.training.local_epochs)
                               for idx in self.batching.batches(c)] for c in active}
        bodies, servers, optimizers = {}, {}, {}
        for c in active:
            cut = self.cost_model.cut_layers[c.client_id]
            bodies[c.client_id] = copy.deepcopy(self.global_model[:cut])
            servers[c.client_id] = copy.deepcopy(self.global_model[cut:])
            optimizers[c.client_id] = self.round_optimizer(
                [*bodies[c.client_id].parameters(), *servers[c.client_id].parameters()], round_)
        self.ready_losses = {cid: collections.deque() for cid in plans}
        self.planned_batches = plans
        by_cut: dict[int, list[int]] = {}
        for cid in plans:
            by_cut.setdefault(self.cost_model.cut_layers[cid], []).append(cid)

        def record(cid: int, _: torch.Tensor | None, loss: torch.Tensor) -> None:
            self.ready_losses[cid].append(loss)
            self.ctx.on_batch(BATCH)  # progress counts the step as it trains: both sides
            self.ctx.on_batch(SERVER)

        for members in by_cut.values():  # one architecture per cut
            step_batched({cid: plans[cid] for cid in members},
                         lambda ids: FusedClients([bodies[i] for i in ids],
                                                  [servers[i] for i in ids],
                                                  [optimizers[i] for i in ids]),
                         self.steps.train_batch, record)
        self.ready_copies = {cid: (bodies[cid], servers[cid]) for cid in plans}

    def client_optimizer(self, params, round_: int) -> torch.optim.Optimizer:
        """The optimizer of a client-side copy in ``round_``: the run's, at its rate."""
        return self.round_optimizer(params, round_)

    def train_client(self, client: Client, round_: int) -> Process:
        """Download, ``local_epochs`` of split steps, upload. Timing-only runs copy no
        model: the client and server sides are views of the global model (for costs and
        bytes), no optimizer is made and no copy is kept."""
        cid, timing = client.client_id, self.ctx.timing_only
        cut = self.cost_model.cut_layers[cid]
        if cid in self.ready_losses:  # trained ahead: only the times are simulated
            yield from self.replay_client(client)
            return
        body = self.global_model[:cut] if timing else copy.deepcopy(self.global_model[:cut])
        yield from client.downlink.transfer("download_model", cid, self.stage_bytes(0, cut))
        optimizer = None if timing else self.client_optimizer(body.parameters(), round_)
        if self.shared_server:
            server, server_opt, lock = self.global_model[cut:], self.server_optimizer, self.server_lock
        elif timing:
            server, server_opt, lock = self.global_model[cut:], None, FifoResource(self.sim.env)
        else:
            server = copy.deepcopy(self.global_model[cut:])
            server_opt = self.round_optimizer(server.parameters(), round_)
            lock = FifoResource(self.sim.env)
            self.server_copies[cid] = server
        cost = self.ctx.costs.cost(f"client_body:l{cut}", body, self.ctx.backbone.input_shape)
        for _epoch in range(self.scenario.training.local_epochs):
            for idx in self.batching.batches(client):
                yield from self.split_step(client, idx, body, optimizer, cost, server, server_opt,
                                           lock)
        yield from client.uplink.transfer("upload_model", cid, self.stage_bytes(0, cut))
        if not timing:
            self.client_copies[cid] = body

    def replay_client(self, client: Client) -> Process:
        """:meth:`train_client` of a client trained ahead (:meth:`train_fused`): the same
        transfers, computes and server jobs at the same simulated instants, with the
        server losses recorded as each step is reached and no torch step."""
        cid, cut = client.client_id, self.cost_model.cut_layers[client.client_id]
        body, server = self.ready_copies[cid]
        yield from client.downlink.transfer("download_model", cid, self.stage_bytes(0, cut))
        lock = FifoResource(self.sim.env)
        self.server_copies[cid] = server
        cost = self.ctx.costs.cost(f"client_body:l{cut}", body, self.ctx.backbone.input_shape)
        for idx in self.planned_batches[cid]:
            n = len(idx)
            yield from self.sim.compute(client.actor, "client_forward", cid,
                                        cost.forward_flops * n, client.flops_per_s,
                                        seconds=self.cost_model.compute_seconds(client, cut, n, ("forward",)))
            h = self.cost_model.meta_tensor((n, *cost.output_shape))
            payload = self.cost_model.payload_bytes(cost.output_shape, n)
            yield from client.uplink.transfer("send_activations", cid, payload)
            yield from self.server_step_timed(client, server, h, lock)
            self.steps.record_loss("server", cid, self.ready_losses[cid].popleft(), n)
            self.steps.server_steps.append((self.sim.round, cid, self.sim.now_s))
            yield from client.downlink.transfer("send_gradients", cid, payload)
            yield from self.sim.compute(
                client.actor, "client_backward", cid, cost.backward_flops * n,
                client.flops_per_s,
                seconds=self.cost_model.compute_seconds(client, cut, n, ("backward", "update")))
            self.ctx.on_batch(None)  # trained and counted ahead: the simulated clock only
        yield from client.uplink.transfer("upload_model", cid, self.stage_bytes(0, cut))
        self.client_copies[cid] = body

    def server_step_timed(self, client: Client, server: nn.Module, h: torch.Tensor,
                          lock: FifoResource) -> Process:
        """The simulated part of :meth:`server_step` (queue, slot, FLOPs with the
        activation gradients), without its torch step."""
        flops = self.cost_model.server_step_flops(client, server, h, True)
        yield from self.steps.run_on_server("server_train", client.client_id, flops, lock)

    def split_step(self, client: Client, idx: torch.Tensor, body: nn.Module,
                   optimizer: torch.optim.Optimizer, cost: PieceCost, server: nn.Module,
                   server_optimizer: torch.optim.Optimizer, lock: FifoResource, *,
                   objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                   after_server: Callable[[], None] | None = None) -> Process:
        """One split-learning step: client forward, activations up, server step, activation
        gradients down, client backward and update; each torch step when its simulated
        work completes. ``after_server`` runs right after the server's update. In
        timing-only runs the activations are a shape (``cost.output_shape`` per sample,
        on torch's meta device) and no torch step runs."""
        cid, n, timing = client.client_id, len(idx), self.ctx.timing_only
        cut = self.cost_model.cut_layers[cid]
        yield from self.sim.compute(client.actor, "client_forward", cid, cost.forward_flops * n,
                                    client.flops_per_s,
                                    seconds=self.cost_model.compute_seconds(client, cut, n, ("forward",)))
        if timing:
            h, y = self.cost_model.meta_tensor((n, *cost.output_shape)), None
        else:
            x, y = self.steps.train_batch(idx, cid)
            h = body(x)  # (B, ...) activations
        payload = self.cost_model.payload_bytes(tuple(h.shape[1:]), n)
        yield from client.uplink.transfer("send_activations", cid, payload)
        grad = yield from self.serve(client, server, server_optimizer,
                                     h if timing else h.detach(), y, lock, objective=objective)
        if after_server is not None:
            after_server()
        yield from client.downlink.transfer("send_gradients", cid, payload)
        yield from self.sim.compute(client.actor, "client_backward", cid, cost.backward_flops * n,
                                    client.flops_per_s,
                                    seconds=self.cost_model.compute_seconds(
                                        client, cut, n, ("backward", "update")))
        if not timing:
            optimizer.zero_grad(set_to_none=True)
            h.backward(grad)
            optimizer.step()
        self.ctx.on_batch()

    def serve(self, client: Client, server: nn.Module, server_optimizer: torch.optim.Optimizer,
              h: torch.Tensor, y: torch.Tensor, lock: FifoResource, *,
              objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
              ) -> Generator[simpy.Event, object, torch.Tensor | None]:
        """The server's part of :meth:`split_step` (a hook): one server step on the
        received activations ``h`` ``(B, ...)`` and labels ``y`` ``(B,)``; returns the
        activation gradients ``(B, ...)`` to send back."""
        return (yield from self.steps.server_step(client, server, server_optimizer, h, y, lock,
                                            input_grad=True, objective=objective))

    def leave_out(self, client_id: int) -> None:
        """Over-commitment keeps ``client_id`` out: its copies are not averaged (steps its
        batches made on a shared server model stay, as a late client's)."""
        for copies in (getattr(self, "client_copies", {}), getattr(self, "server_copies", {})):
            copies.pop(client_id, None)  # (none before a round)

    def aggregation_weight(self, client_id: int) -> float:
        """Weight of a client's copies in the round-end average (a hook): its samples."""
        return len(self.ctx.clients[client_id].indices)

    @torch.no_grad()
    def end_round(self, round_: int) -> None:
        """Layer-wise FedAvg of every copy that trained each layer (module docstring).

        Only clients whose upload arrived count (dropped and late clients are left
        out, their server copies too); steps a late client's batches already made on
        the shared V2 server model stay in it."""
        samples = {c.client_id: self.aggregation_weight(c.client_id) for c in self.ctx.clients}
        cuts = {cid: cut for cid, cut in self.cost_model.cut_layers.items() if cid in self.client_copies}
        for layer, target in enumerate(self.global_model):  # layer index 0-based; head last
            states, weights = [], []
            for cid, cut in cuts.items():
                if layer < cut:
                    states.append(self.client_copies[cid][layer].state_dict())
                    weights.append(samples[cid])
                elif self.server_trains_backbone and not self.shared_server:
                    states.append(self.server_copies[cid][layer - cut].state_dict())
                    weights.append(samples[cid])
            served = sum(samples[cid] for cid, cut in cuts.items() if layer >= cut)
            if self.shared_server and self.server_trains_backbone and served:
                states.append(target.state_dict())
                weights.append(served)
            if states:
                mean = weighted_average(states, weights)
                for name, tensor in target.state_dict().items():
                    tensor.copy_(mean[name])
        self.client_copies, self.server_copies = {}, {}


@register_algorithm("splitfed_v1")
class SplitFedV1(SplitFed):
    """SplitFed V1: one server-side copy per client, averaged each round."""

    shared_server = False


@register_algorithm("splitfed_v2")
class SplitFedV2(SplitFed):
    """SplitFed V2: one server-side model trained in order of simulated arrival."""

    shared_server = True
