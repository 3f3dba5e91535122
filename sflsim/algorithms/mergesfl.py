"""MergeSFL: split federated learning with feature merging and batch size regulation.

Paper: Liao, Xu, Xu, Wang, Yao, Qiao, "MergeSFL: Split Federated Learning with
Feature Merging and Batch Size Regulation", ICDE 2024, pp. 2054-2067; preprint
arXiv 2311.13348 (https://arxiv.org/abs/2311.13348). Its full text was not at hand
here, only its abstract and a summary of its modules (https://www.sciencestack.ai/
paper/2311.13348): workers train bottom models; a parameter server (PS) merges
the features of several workers into one mixed sequence, trains the top model on
it and dispatches each worker its part of the gradients; workers get diverse
batch sizes by their capability so that they wait less; bottom models are
aggregated adaptively. No code of the authors could be found. What follows is
this module's reading; where the paper's exact equations are not known, the
choice is written down.

An iteration (``I`` per round, every client the same number):

1. **Batch size regulation.** Client ``i`` trains on ``d_i`` samples per
   iteration, ``d_i`` proportional to its speed ``1 / t_i``, where ``t_i`` is its
   estimated time per sample at its cut this round: client-side forward and
   backward (the profile's latency table if it has one, else FLOPs over
   sustained FLOP/s) plus sending that sample's activations up and receiving its
   activation gradients down (bytes over bandwidth). So every client's step
   takes about the same time and nobody waits long at the merge. The ``d_i`` add
   up to ``total_batch_size`` (default ``batch_size`` times the clients taking
   part, so the mean per-client batch is SplitFed's) by largest-remainder
   rounding, at least one sample each (:func:`regulate_batch_sizes`).
2. Each client runs stages ``1..k`` on its ``d_i`` samples and sends the
   activations up (:meth:`SplitFed.split_step`, timed as SplitFed).
3. **Feature merging.** The server waits until every client of the iteration
   (with the same cut, see below) has sent its activations, concatenates them in
   client-id order with their labels (:meth:`MergeSFL.merge`), runs one forward
   and backward of the top model (the server-side part of the one global model)
   on the merged batch, updates it, and splits the activation gradients back by
   rows; each client receives its own rows.
4. Each client backpropagates its rows and updates its bottom model.

``I`` defaults to ``ceil(local_epochs * samples of the clients taking part /
total_batch_size)``: a round trains on as many samples as a SplitFed round. Each
client walks through its data in a shuffled order (its own generator),
reshuffled when used up, so a fast client with little data sees it several
times a round and a slow client with much data part of it; the walk continues
across rounds. A batch larger than the client's data holds samples twice.

**Aggregation** (round end): SplitFed's layer-wise FedAvg, with each client's
bottom model weighted by the samples it trained this round (``d_i * I``,
proportional to its batch size: the paper's "adaptive bottom-model
aggregation", read as weights proportional to batch sizes); the top model is
the shared server-side part, trained directly.

Deviations from the paper:

* Worker selection: the paper's control module selects the workers of each
  round (a genetic algorithm minimising the KL divergence between the merged
  label distribution and the global one, under a bandwidth budget). Here every
  client takes part in every round, as in all sflsim algorithms and in FedSGA's
  setup (§4.1.3: "All clients participate in each communication round");
  clients dropped by ``conditions`` sit the round out.
* Worker states: the paper's PS estimates each worker's computing and
  communication state from measurements; here the speeds come from the device
  and link profiles (a round's straggler slowdown from ``conditions`` is not
  anticipated), leaving out link latency and shared access points, and the
  batch sizes are not further tuned towards an IID-like merged label mix.
* Cut layers may differ between clients (the split policy); activations of
  different cuts cannot be concatenated, so each iteration merges the clients
  that share a cut, and each merged batch trains the shared server-side model
  (one lock, in order of simulated arrival, as SplitFed V2). With one cut for
  everyone (the paper's setting) there is one merged batch per iteration.
* The merged server step is recorded in the trace under the id of the client
  whose activations completed the batch (its ``queue_s`` is the wait for a
  server slot once the batch was complete); each client's server loss is the
  mean loss of its own rows. The time a client waits for the others' features
  counts as its idle time.
* A client that leaves mid-round (it goes offline, ``conditions.availability``;
  over-commitment stops it, ``training.over_commit``; the round deadline cuts it
  off) is left out of its cut's merged batches from then on, as the other
  algorithms leave out an absent client: the server stops waiting for it, merges
  what the others sent, and activations it sent to a batch whose step had not
  begun are dropped (:meth:`MergeSFL.leave`). When its leaving completes a batch,
  the first of the waiting clients to resume runs the merged step (and it is
  recorded under that client's id); when the client was running the merged step
  itself, the server job is cut off there and the step runs again, without its
  rows, for the others. Clients that drop out or are offline at the round's start
  take no part in it (:meth:`MergeSFL.plan_round`).
* Learning rates: the configured optimizer and rate on both sides, whatever the
  batch size; client-side optimizers are created per round, the top model's
  persists (as SplitFed V2 here).

Timing-only rounds are booked as chains of events, without a process per client, with the
same timeline (:func:`~sflsim.execution.booked_chains.book_chains`), when nothing can cut
them short (no round deadline, availability or over-commitment), the server's queue is
``fifo``, each client's links are its own with constant bandwidth, and steps are priced by
the FLOPs rule; otherwise they run as SimPy processes (``docs/how-to/timing-only.md``).

``training.parallel_clients`` above 1 is refused: a client's steps wait for the
merged server step, so they cannot be trained ahead of the simulated round.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import numpy as np
import simpy
import torch
import torch.nn.functional as F
from torch import nn

from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.splitfed import SplitFed
from sflsim.engine import FifoResource, Process, wait_until
from sflsim.errors import ConfigError
from sflsim.execution.booked_return import ReturnRoundBooking
from sflsim.models.cost import PieceCost
from sflsim.work import BATCH, SERVER


def regulate_batch_sizes(speeds: dict[int, float], total: int) -> dict[int, int]:
    """Split ``total`` samples per iteration over clients in proportion to their speeds.

    Args:
        speeds: ``{client_id: speed}``, any positive unit (samples per second).
        total: samples of one merged iteration, at least one per client.

    Returns:
        ``{client_id: batch size}`` summing to ``total``: each the floor of its exact
        share ``total * speed / sum(speeds)``, then one more for the largest
        remainders (ties to the lower id), at least 1 (a client whose share is below
        1 gets 1, taken from the clients whose share is least fractional).

    Raises:
        ValueError: ``total`` is smaller than the number of clients, or a speed is not
            positive.
    """
    ids = sorted(speeds)
    if total < len(ids):
        raise ValueError(f"{total} samples cannot give {len(ids)} clients one each")
    s = np.array([speeds[i] for i in ids], dtype=float)
    if (s <= 0).any() or not np.isfinite(s).all():
        raise ValueError(f"speeds must be positive and finite, got {speeds}")
    share = total * s / s.sum()
    sizes = np.maximum(np.floor(share).astype(np.int64), 1)
    left = total - int(sizes.sum())
    # one sample at a time: to the largest remainder share - size (ties to the lower
    # id), or, over the total, from the smallest of a client above 1; heaps of (key, id)
    step, keys = (1, -(share - sizes)) if left > 0 else (-1, share - sizes)
    heap = [(k, i) for i, k in enumerate(keys.tolist()) if step > 0 or sizes[i] > 1]
    heapq.heapify(heap)
    while left != 0:
        _, i = heapq.heappop(heap)
        sizes[i] += step
        left -= step
        if step > 0 or sizes[i] > 1:
            rest = float(share[i] - sizes[i])
            heapq.heappush(heap, (-rest if step > 0 else rest, i))
    return {cid: int(n) for cid, n in zip(ids, sizes)}


@dataclass
class _MergeSlot:
    """The activations of one iteration of one cut group, as they arrive.

    ``changed`` is triggered (and replaced) when the merged step is done (``grads`` set)
    or a client of the group leaves (the batch may then be complete, or its step need
    another client to run it); the waiting clients look again each time."""

    changed: simpy.Event
    parts: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    #: the client whose process runs the merged step (None: not begun, or cut off)
    runner: int | None = None
    #: every part's rows of the activation gradients, once the merged step is done
    grads: dict[int, torch.Tensor] | None = None


@register_algorithm("mergesfl")
class MergeSFL(SplitFed):
    """MergeSFL: merged server batches, batch sizes by device speed (module docstring)."""

    shared_server = True  # one top model at the server

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.cfg = ctx.scenario.algorithm
        n = ctx.scenario.training.drawn(len(ctx.clients))  # the most taking part in a round
        if self.cfg.total_batch_size is not None and self.cfg.total_batch_size < n:
            raise ConfigError(f"algorithm.total_batch_size: {self.cfg.total_batch_size} samples "
                              f"per iteration cannot give {n} clients taking part one each; "
                              f"valid: at least {n}")
        #: this round's samples per iteration of every client taking part
        self.batch_sizes: dict[int, int] = {}
        #: this round's iterations (every client the same)
        self.iterations = 0
        #: this round's clients by cut layer
        self.groups: dict[int, list[int]] = {}
        self._streams: dict[int, torch.Tensor] = {}
        self._slots: dict[tuple[int, int], _MergeSlot] = {}
        self._iteration: dict[int, int] = {}
        #: this round's clients still taking part, by cut layer: each merged batch of the
        #: cut waits for their activations (a client that leaves is taken out, :meth:`leave`)
        self._members: dict[int, set[int]] = {}
        self._body_costs: dict[int, PieceCost] = {}

    # ----- planning ---------------------------------------------------------------------
    def sample_time_s(self, client: Client, cut: int) -> float:
        """Estimated seconds per sample of one split step of ``client`` at ``cut``
        (module docstring, step 1)."""
        if (cost := self._body_costs.get(cut)) is None:  # a cut's costs, once per run
            cost = self._body_costs[cut] = self.ctx.costs.cost(
                f"client_body:l{cut}", self.global_model[:cut], self.ctx.backbone.input_shape)
        batch = self.scenario.training.batch_size
        seconds = self.cost_model.compute_seconds(client, cut, batch, ("forward", "backward", "update"))
        compute = (seconds / batch if seconds is not None
                   else cost.train_flops(1) / client.device.sustained_flops.value)
        bits = 8 * self.cost_model.payload_bytes(cost.output_shape, 1)
        return compute + bits / client.uplink.bandwidth_bps + bits / client.downlink.bandwidth_bps

    def plan_round(self) -> None:
        """Batch sizes, iterations and cut groups of this round's clients."""
        active = self.protocol.active_clients()
        self.batch_sizes, self.groups, self.iterations = {}, {}, 0
        if not active:
            return
        training = self.scenario.training
        total = self.cfg.total_batch_size or training.batch_size * len(active)
        speeds = {c.client_id: (1.0 / self.sample_time_s(c, self.cost_model.cut_layers[c.client_id])
                                if self.cfg.regulate_batch_sizes else 1.0) for c in active}
        self.batch_sizes = regulate_batch_sizes(speeds, total)
        samples = sum(len(c.indices) for c in active) * training.local_epochs
        self.iterations = self.cfg.local_iterations or math.ceil(samples / total)
        for c in active:
            self.groups.setdefault(self.cost_model.cut_layers[c.client_id], []).append(c.client_id)

    def batches_per_round(self) -> int:
        n = len(self.ctx.clients)
        total = self.cfg.total_batch_size or self.scenario.training.batch_size * n
        samples = sum(len(c.indices) for c in self.ctx.clients) * self.scenario.training.local_epochs
        return (self.cfg.local_iterations or math.ceil(samples / total)) * n

    def work_per_round(self) -> dict[str, float]:
        """Every client's batch of each iteration, and one merged server step per
        iteration and cut layer."""
        batches = self.batches_per_round()
        cuts = len(set(self.cost_model.cut_layers.values())) or 1
        return {BATCH: batches, SERVER: batches // max(len(self.ctx.clients), 1) * cuts}

    def next_batch(self, client: Client, size: int) -> torch.Tensor:
        """The client's next ``size`` sample indices ``(size,)`` (module docstring); in
        timing-only runs a range of that length (only the size is read, no order is
        drawn)."""
        if self.ctx.timing_only:
            return range(size)  # type: ignore[return-value]
        parts, need = [], size
        while need:
            stream = self._streams.get(client.client_id)
            if stream is None or not len(stream):
                order = torch.randperm(len(client.indices), generator=client.generator)
                stream = torch.as_tensor(client.indices)[order]
            parts.append(stream[:need])
            self._streams[client.client_id] = stream[need:]
            need -= len(parts[-1])
        return torch.cat(parts)

    # ----- one round --------------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        self.cost_model.cut_layers = self.policy.choose(round_)
        self.client_copies: dict[int, nn.Sequential] = {}
        self.server_copies: dict[int, nn.Sequential] = {}
        for group in self.server_optimizer.param_groups:
            group["lr"] = self.lr_for_round(round_)
        self.plan_round()
        self._slots, self._iteration = {}, {}
        self._members = {cut: set(ids) for cut, ids in self.groups.items()}
        if self.ctx.execution.array_booking and not self.protocol.interruptible:
            if not hasattr(self, "_booking"):  # timing-only rounds as chains of events
                self._booking = ReturnRoundBooking(self.ctx, self.protocol, self.cost_model,
                                                   self.global_model, self.batching,
                                                   self.stage_bytes, shared_server=True,
                                                   merged=True)
            last = self._booking.book_round([[self.batch_sizes[c.client_id]] * self.iterations
                                             if c.client_id in self.batch_sizes else []
                                             for c in self.ctx.clients])
            if last is not None:
                yield from wait_until(self.sim.env, last)
                return
        yield from self.protocol.run_clients(lambda c: self.train_client(c, round_))

    def train_client(self, client: Client, round_: int) -> Process:
        """Download, :attr:`iterations` split steps with merged server steps, upload. A
        client cut off anywhere in it (an interrupt: going offline, over-commitment, the
        round deadline) leaves its cut's merged batches (:meth:`leave`)."""
        cid, timing = client.client_id, self.ctx.timing_only
        cut = self.cost_model.cut_layers[cid]
        try:
            body = self.global_model[:cut] if timing else copy.deepcopy(self.global_model[:cut])
            yield from client.downlink.transfer("download_model", cid, self.stage_bytes(0, cut))
            optimizer = None if timing else self.round_optimizer(body.parameters(), round_)
            cost = self.ctx.costs.cost(f"client_body:l{cut}", body, self.ctx.backbone.input_shape)
            for _ in range(self.iterations):
                idx = self.next_batch(client, self.batch_sizes[cid])
                yield from self.split_step(client, idx, body, optimizer, cost,
                                           self.global_model[cut:], self.server_optimizer,
                                           self.server_lock)
            yield from client.uplink.transfer("upload_model", cid, self.stage_bytes(0, cut))
        except simpy.Interrupt:
            self.leave(cid)
            raise
        if not timing:
            self.client_copies[cid] = body

    def leave(self, client_id: int) -> None:
        """``client_id`` takes no further part in its cut's merged batches this round (it
        was cut off: :meth:`train_client`): no batch waits for it any more; its
        activations are taken out of every batch whose merged step has not begun or was
        cut off with it (it was running it); and the clients waiting at each such batch
        look again: the batch may now be complete (module docstring)."""
        cut = self.cost_model.cut_layers[client_id]
        members = self._members.get(cut)
        if members is None or client_id not in members:
            return
        members.discard(client_id)
        for (slot_cut, _k), slot in list(self._slots.items()):
            if slot_cut != cut or slot.grads is not None:
                continue
            if slot.runner is None or slot.runner == client_id:
                slot.parts.pop(client_id, None)
                slot.runner = None
            self._changed(slot)

    def _changed(self, slot: _MergeSlot) -> None:
        """Wake the clients waiting at ``slot``; later waits wait for its next change."""
        event, slot.changed = slot.changed, self.sim.env.event()
        event.succeed()

    @staticmethod
    def merge(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Feature merging: the clients' activations ``(d_i, ...)`` and labels ``(d_i,)``,
        in the order given, concatenated into ``(sum d_i, ...)`` and ``(sum d_i,)``."""
        return torch.cat([h for h, _ in parts]), torch.cat([y for _, y in parts])

    def serve(self, client: Client, server: nn.Module, server_optimizer: torch.optim.Optimizer,
              h: torch.Tensor, y: torch.Tensor, lock: FifoResource, *,
              objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
              ) -> Generator[simpy.Event, object, torch.Tensor | None]:
        """Wait for the iteration's other clients of the same cut that still take part
        (:meth:`leave`); the last to arrive runs the merged server step (when a client's
        leaving completes the batch, the first waiting client to look again does); every
        client gets its rows of the gradients."""
        cid, cut = client.client_id, self.cost_model.cut_layers[client.client_id]
        k = self._iteration[cid] = self._iteration.get(cid, -1) + 1
        slot = self._slots.get((cut, k))
        if slot is None:
            slot = self._slots[(cut, k)] = _MergeSlot(self.sim.env.event())
        slot.parts[cid] = (h, y)
        while slot.grads is None and (slot.runner is not None
                                      or not self._members[cut] <= slot.parts.keys()):
            yield slot.changed
        if slot.grads is not None:
            return slot.grads[cid]
        slot.runner = cid
        grads = yield from self.merged_step(client, server, server_optimizer, slot, lock)
        del self._slots[(cut, k)]
        slot.grads = grads
        self._changed(slot)
        return grads[cid]

    def merged_step(self, client: Client, server: nn.Module,
                    server_optimizer: torch.optim.Optimizer, slot: _MergeSlot,
                    lock: FifoResource) -> Generator[simpy.Event, object, dict[int, torch.Tensor]]:
        """The merged server step on ``slot``'s activations, run by ``client``'s process
        (recorded under its id); returns ``{client_id: its rows of the activation
        gradients}``."""
        h = next(iter(slot.parts.values()))[0]
        ids = sorted(slot.parts)
        sizes = [len(slot.parts[i][0]) for i in ids]
        if self.ctx.timing_only:  # shapes: the merged batch's rows, no labels
            h_all, y_all = self.cost_model.meta_tensor((sum(sizes), *h.shape[1:])), None
        else:
            h_all, y_all = self.merge([slot.parts[i] for i in ids])
        per_sample: list[torch.Tensor] = []

        def merged_loss(hh: torch.Tensor, yy: torch.Tensor) -> torch.Tensor:
            loss = F.cross_entropy(server(hh), yy, reduction="none")  # (sum d_i,)
            per_sample.append(loss.detach())
            return loss.mean()

        grad = yield from self.steps.server_step(client, server, server_optimizer, h_all, y_all, lock,
                                           input_grad=True, objective=merged_loss)
        if not self.ctx.timing_only:
            # the step recorded the merged loss under the client: one entry per client instead
            rows = torch.split(per_sample[0], sizes)
            self.steps.losses[-1:] = [("server", i, float(r.mean()), len(r)) for i, r in zip(ids, rows)]
        return dict(zip(ids, torch.split(grad, sizes)))

    # ----- round end --------------------------------------------------------------------
    def aggregation_weight(self, client_id: int) -> float:
        """Samples the client trained this round (``d_i * I``)."""
        return self.batch_sizes.get(client_id, 0) * self.iterations

    def end_round(self, round_: int) -> None:
        super().end_round(round_)
        self._slots, self._members = {}, {}  # merges a round deadline left incomplete
