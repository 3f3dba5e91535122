"""Timing-only rounds of SplitFed V1 and V2 booked as arrays (:class:`BookedReturnRounds`).

In a SplitFed round (:mod:`sflsim.algorithms.splitfed`) each client downloads its
client-side model, runs its forward pass, sends the activations up, waits for the server's
step, receives the activation gradients, runs its backward pass and uploads its model. In
V2 the server's steps are on one server-side model, one job at a time, first come, first
served; in V1 each client has a server-side model of its own, and the jobs share the
server's ``slots``, first come, first served. When every client trains exactly one batch
per round, the only thing clients share is the server's queue, and its jobs arrive in an
order fixed before any of them is served: the round is a chain of sums per client (NumPy
arrays for every client at once) around one first-come-first-served queue, run job by job
on floats: with one slot (V2, or V1 on a server of one slot) the Lindley recursion
``start_k = max(arrival_k, end_{k-1})``, ``end_k = start_k + service_k``; with ``c`` slots
each job in turn takes the slot that frees first, ``start_k = max(arrival_k, earliest
free)`` (a heap of ``c`` free times).

The arithmetic is the client-by-client simulation's, operation for operation
(:meth:`sflsim.engine.Link.transfer`: ``start = max(asked, link free)``, the serialisation
by :func:`~sflsim.engine.link.serialised_s`, the arrival by
:func:`~sflsim.engine.link.arrival_s`; a compute ``t + flops / (FLOP/s / slowdown)``; a
server job from its start), so the times are equal to the last bit. So is the order of the
rows: the runner puts a round's rows in order of their ends, rows that end at the same
instant in the order SimPy processed their events, and that order is known from the arrays:
SimPy fires events of one instant in the order they were scheduled, and every client's
events are scheduled by its previous one, its download by its process started in client
order. So the downloads that end together go in client order, forwards that end together
in the order of their downloads, activations in the order of their forwards, and the
server's queue takes tied arrivals in that order. A server job's end is scheduled when it
starts: jobs that end together go by their starts, then in the queue's order
(:func:`server_order`); the gradients, backward passes and uploads that end together go in
the order of the rows before them. Rows of two kinds that end together, and server jobs
that start and end together one at its arrival and one handed a freed slot, are not
ordered here: :meth:`BookedReturnRounds.book` then books nothing and returns None, and the
round is booked as chains of events (:mod:`~sflsim.execution.booked_chains`), as are the
rounds in which a client trains more than one batch.

Only the FLOPs rule prices the steps here, only links of constant bandwidth that serve one
client, and only a server whose slots are served first come, first served; anything else
leaves every round to the SimPy processes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sflsim.engine.link import Link, arrival_s, serialised_s
from sflsim.execution.booked import link_arrays
from sflsim.execution.booked_chains import book_chains, merged_batches
from sflsim.work import BATCH, SERVER

if TYPE_CHECKING:
    from torch import nn

    from sflsim.engine import Simulation
    from sflsim.execution.booked import BookedClient

#: the rows of a client's round, in the order of their codes (and of the round)
ACTIVITIES = ("download_model", "client_forward", "send_activations", "server_train",
              "send_gradients", "client_backward", "upload_model")


class ReturnRoundBooking:
    """SplitFed's timing-only rounds as arrays, given the algorithm's parts: whether the
    run can be booked (:attr:`arrays`), the prices of a batch, and the round
    (:meth:`book_round`).

    Args:
        ctx: the run context (clients, server, costs, progress).
        protocol: the round protocol (this round's conditions and client status).
        cost_model: the algorithm's costs (cut layers, payloads, server steps).
        global_model: the model split at each client's cut.
        batching: the clients' batches.
        stage_bytes: ``(start, stop) -> bytes`` of the global model's stages.
        shared_server: one server-side model for every client (V2: one job at a time),
            else one per client (V1: as many jobs at once as the server has slots).
        merged: MergeSFL's rounds: the server merges each batch of a cut's clients into
            one step (``shared_server``), and :meth:`book_round` is given each round's
            batch sizes.
    """

    def __init__(self, ctx, protocol, cost_model, global_model: nn.Sequential, batching,
                 stage_bytes: Callable[[int, int], int], shared_server: bool,
                 merged: bool = False):
        self.ctx, self.protocol, self.cost_model = ctx, protocol, cost_model
        self.global_model, self.stage_bytes = global_model, stage_bytes
        clients = ctx.clients
        #: per client, the sizes of its round's batches, in order
        self.sizes = [batching.round_batch_sizes(c) for c in clients]
        self.priced: dict[tuple[int, int], tuple[float, float, int, float, int]] = {}
        self.shared_server = shared_server
        #: jobs the server runs at once: one on V2's shared model, else its slots
        self.slots = 1 if shared_server else ctx.server.resource.capacity
        #: the clients as arrays; None where every round runs as SimPy processes
        self.arrays = BookedReturnRounds(clients, [s[0] if s else 0 for s in self.sizes]) if (
            ctx.server.queue == "fifo"
            and all(type(link) is Link and link.trace is None
                    for c in clients for link in (c.uplink, c.downlink))
            and all(c.device.stage_latency is None
                    and (ctx.operators is None or c.device.operator_costs is None)
                    for c in clients)) else None
        self.merged = merged
        #: every client trains one batch a round: the round as arrays, else as chains
        self.one_batch = all(len(s) == 1 for s in self.sizes) and not merged

    def book_round(self, sizes: list[list[int]] | None = None) -> float | None:
        """This round booked without a process per client (the same times, bytes, FLOPs
        and rows as the algorithm's client processes): as arrays when every client trains
        one batch and no tie stops them, else as chains of events
        (:func:`~sflsim.execution.booked_chains.book_chains`); returns
        when the last upload arrives (s), or None (nothing booked): a link that is shared
        or has a bandwidth trace, a server queue by priority, or a step not priced by the
        FLOPs rule. ``sizes``: per client, this round's batch sizes (samples; default:
        its batches of the run's partition)."""
        if self.arrays is None:
            return None
        sizes = self.sizes if sizes is None else sizes
        ctx, cond, status = self.ctx, self.protocol.conditions, self.protocol.status
        clients, cuts_of = ctx.clients, self.cost_model.cut_layers
        active = np.array([c.client_id not in cond.dropped
                           and status.get(c.client_id, "trained") == "trained" for c in clients])
        slowdown = np.array([cond.slowdowns.get(c.client_id, 1.0) for c in clients]) \
            if cond.slowdowns else np.ones(len(clients))
        cuts = np.array([cuts_of[c.client_id] for c in clients], dtype=np.int64)
        take = np.flatnonzero(active).tolist()
        pairs = {(int(cuts[i]), n) for i in take for n in sizes[i]}
        if self.merged:  # a merged step's rows: every batch of its cut's clients
            pairs |= set(merged_batches([int(cuts[i]) for i in take],
                                        [sizes[i] for i in take]).items())
        for cut, n in pairs - self.priced.keys():
            self.priced[cut, n] = self._prices(cut, n)
        last = None
        if self.one_batch:
            last = self.arrays.book(ctx.sim, ctx.sim.env.now, active, slowdown, cuts,
                                    self.priced, ctx.server.flops_per_s, ctx.on_batch, self.slots)
        if last is None:
            model_bytes = {cut: self.stage_bytes(0, cut) for cut in set(cuts[take].tolist())}
            last = book_chains(self.arrays, ctx.sim, take, [sizes[i] for i in take],
                               cuts[take].tolist(), slowdown[take].tolist(),
                               [model_bytes[cut] for cut in cuts[take].tolist()], self.priced,
                               ctx.server.flops_per_s, ctx.server.resource.capacity,
                               self.shared_server, ctx.on_batch, self.merged)
        for c, s in zip(clients, slowdown.tolist()):  # as the round's processes leave them
            if c.client_id not in cond.dropped:
                c.slowdown = s
        return last

    def _prices(self, cut: int, n: int) -> tuple[float, float, int, float, int]:
        """(forward FLOPs, backward FLOPs, activation bytes, server step FLOPs, client-side
        model bytes) of a batch of ``n`` at cut ``cut``, as a split step counts them."""
        ctx, costs = self.ctx, self.cost_model
        cost = ctx.costs.cost(f"client_body:l{cut}", self.global_model[:cut],
                              ctx.backbone.input_shape)
        h = costs.meta_tensor((n, *cost.output_shape))
        client = next(c for c in ctx.clients if costs.cut_layers[c.client_id] == cut)
        return (cost.forward_flops * n, cost.backward_flops * n,
                costs.payload_bytes(cost.output_shape, n),
                costs.server_step_flops(client, self.global_model[cut:], h, True),
                self.stage_bytes(0, cut))


class BookedReturnRounds:
    """The run's clients as arrays, for booking whole timing-only SplitFed rounds in
    which every client trains one batch (built once per run; see the module docstring).

    Args:
        clients: every client of the run, in id order.
        batch_sizes: per client, the size (samples) of its one batch of a round.
    """

    def __init__(self, clients: list[BookedClient], batch_sizes: list[int]):
        import pandas as pd

        self.clients = clients
        self.ids = np.array([c.client_id for c in clients], dtype=np.int64)
        self.uplinks = [c.uplink for c in clients]
        self.downlinks = [c.downlink for c in clients]
        self.up_bps, self.up_latency_s = link_arrays(self.uplinks)
        self.down_bps, self.down_latency_s = link_arrays(self.downlinks)
        self.sustained_flops = np.array([c.device.sustained_flops.value for c in clients],
                                        dtype=float)
        self.batch = np.array(batch_sizes, dtype=np.int64)
        names = [c.actor for c in clients] + [link.actor for link in self.uplinks] \
            + [link.actor for link in self.downlinks] + ["server"]
        self.actor_dtype = pd.CategoricalDtype(pd.Index(names, dtype=object))
        self.activity_dtype = pd.CategoricalDtype(pd.Index(ACTIVITIES, dtype=object))

    def book(self, sim: Simulation, now_s: float, active: np.ndarray, slowdown: np.ndarray,
             cuts: np.ndarray, priced: dict[tuple[int, int], tuple[float, float, int, float, int]],
             server_flops_per_s: float, on_batch: Callable[..., None], slots: int = 1
             ) -> float | None:
        """Book one round from ``now_s`` (s) for the clients where ``active``.

        Args:
            active: bool, one per client: it takes part.
            slowdown: per client, how many times longer its compute takes.
            cuts: per client, its cut layer this round.
            priced: ``{(cut layer, batch size): (forward FLOPs, backward FLOPs, activation
                bytes, server step FLOPs, client-side model bytes)}`` for every pair of
                the active clients.
            server_flops_per_s: the server's FLOP/s per job.
            slots: jobs the server runs at once (first come, first served).

        Returns:
            When the round's last upload arrives (s; ``now_s`` if no client takes part),
            or None when rows end at the same instant in an order the arrays cannot tell
            (nothing is booked then).
        """
        take = np.flatnonzero(active)
        if not (m := len(take)):
            return now_s
        keys = list(zip(cuts[take].tolist(), self.batch[take].tolist()))
        prices = np.array([priced[k] for k in keys], dtype=float).reshape(m, 5)
        forward, backward, payload, job_flops, model_bytes = prices.T
        rate = self.sustained_flops[take] / slowdown[take]  # Client.flops_per_s
        down_bps, down_lat = self.down_bps[take], self.down_latency_s[take]
        up_bps, up_lat = self.up_bps[take], self.up_latency_s[take]
        # the download of the client-side model, asked at the round's start
        down_free = np.array([self.downlinks[i].free_at_s for i in take.tolist()])
        d_start = np.maximum(now_s, down_free)
        d_done = serialised_s(d_start, model_bytes, down_bps)
        down = arrival_s(now_s, d_done, down_lat)
        fwd_end = down + forward / rate
        up_free = np.array([self.uplinks[i].free_at_s for i in take.tolist()])
        a_start = np.maximum(fwd_end, up_free)
        a_done = serialised_s(a_start, payload, up_bps)
        arrived = arrival_s(fwd_end, a_done, up_lat)
        by_down, by_fwd, served = processing_orders(down, fwd_end, arrived)
        start_s, end_s = served_jobs(arrived, served, job_flops / server_flops_per_s, slots)
        by_server = server_order(arrived, start_s, end_s, served)
        if by_server is None:
            return None  # jobs that end together in an order the arrays do not know
        g_start = np.maximum(end_s, d_done)
        g_done = serialised_s(g_start, payload, down_bps)
        grads = arrival_s(end_s, g_done, down_lat)
        bwd_end = grads + backward / rate
        u_start = np.maximum(bwd_end, a_done)
        u_done = serialised_s(u_start, model_bytes, up_bps)
        upload = arrival_s(bwd_end, u_done, up_lat)

        # the rows, each kind in the order SimPy processes it, then in order of their ends
        layout = [by_down, by_fwd, served, by_server,
                  *chained_orders(by_server, grads, bwd_end, upload)]
        ends = [down, fwd_end, arrived, end_s, grads, bwd_end, upload]
        end = np.concatenate([e[p] for e, p in zip(ends, layout)])
        kind = np.repeat(np.arange(len(ACTIVITIES), dtype=np.int8), m)
        order = rows_in_order(end, kind)
        if order is None:
            return None  # an order of one instant the arrays do not know
        starts = [d_start, down, a_start, start_s, g_start, grads, u_start]
        queue = [d_start - now_s, np.zeros(m), a_start - fwd_end, start_s - arrived,
                 g_start - end_s, np.zeros(m), u_start - bwd_end]
        flops = [np.zeros(m), forward, np.zeros(m), job_flops, np.zeros(m), backward,
                 np.zeros(m)]
        sent = [model_bytes, np.zeros(m), payload, np.zeros(m), payload, np.zeros(m),
                model_bytes]
        n = len(self.clients)
        # actor codes: clients 0..n-1, their uplinks n..2n-1, downlinks 2n..3n-1, server 3n
        actors = [take + 2 * n, take, take + n, np.full(m, 3 * n), take + 2 * n, take, take + n]
        self._record(sim, order, layout, take, end,
                     *(np.concatenate([v[p] for v, p in zip(values, layout)])
                       for values in (starts, queue, flops, sent, actors)), kind)
        for i, down_done, up_done in zip(take.tolist(), g_done.tolist(), u_done.tolist()):
            self.downlinks[i].free_at_s, self.uplinks[i].free_at_s = down_done, up_done
        on_batch(BATCH, float(bwd_end.max()), units=m)
        on_batch(SERVER, float(end_s.max()), units=m)
        return float(upload.max())

    def add_rows(self, sim: Simulation, cols: list[list]) -> None:
        """Rows recorded in order (:func:`~sflsim.execution.booked_chains.book_chains`):
        ``cols`` are the actor codes
        (clients 0..n-1, their uplinks n..2n-1, downlinks 2n..3n-1, the server 3n), the
        activity codes (:data:`ACTIVITIES`), the client places, starts, ends, queue
        times (s), payloads (bytes) and FLOPs."""
        import pandas as pd

        actor, activity, place, start, end, queue, payload, flops = cols
        k = len(end)
        sim.trace.add_columns({
            "round": np.full(k, sim.round, dtype=np.int64),
            "actor": pd.Categorical.from_codes(np.array(actor, dtype=np.int64),
                                               dtype=self.actor_dtype),
            "activity": pd.Categorical.from_codes(np.array(activity, dtype=np.int8),
                                                  dtype=self.activity_dtype),
            "client_id": self.ids[np.array(place, dtype=np.int64)],
            "start_s": np.array(start, dtype=float), "end_s": np.array(end, dtype=float),
            "queue_s": np.array(queue, dtype=float),
            "payload_bytes": np.array(payload, dtype=np.int64),
            "flops": np.array(flops, dtype=float), "cut_off": np.zeros(k, dtype=bool),
        })

    def _record(self, sim: Simulation, order: np.ndarray, layout: list[np.ndarray],
                take: np.ndarray, end: np.ndarray, start: np.ndarray, queue: np.ndarray,
                flops: np.ndarray, payload: np.ndarray, actor: np.ndarray,
                kind: np.ndarray) -> None:
        """The round's rows as one block, in order of their ends (module docstring)."""
        import pandas as pd

        client = np.concatenate([self.ids[take[p]] for p in layout])
        sim.trace.add_columns({
            "round": np.full(len(order), sim.round, dtype=np.int64),
            "actor": pd.Categorical.from_codes(actor[order], dtype=self.actor_dtype),
            "activity": pd.Categorical.from_codes(kind[order], dtype=self.activity_dtype),
            "client_id": client[order], "start_s": start[order], "end_s": end[order],
            "queue_s": queue[order], "payload_bytes": payload[order].astype(np.int64),
            "flops": flops[order], "cut_off": np.zeros(len(order), dtype=bool),
        })


def processing_orders(down: np.ndarray, forward: np.ndarray, arrived: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The order in which SimPy processes the ends of every client's download, forward
    and activations (indices into the arrays, one entry per client in client order; each
    event scheduled by the one before, the downloads by processes started in client
    order): by time, then by the order of the event that scheduled it. The last is the
    order the server's queue takes the jobs in."""
    by_down = np.argsort(down, kind="stable")
    by_forward, served = chained_orders(by_down, forward, arrived)
    return by_down, by_forward, served


def served_jobs(arrived: np.ndarray, served: np.ndarray, duration: np.ndarray, slots: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per client, the start and end (s) of its server job, the jobs taken in the queue's
    order ``served`` (indices) on ``slots`` slots first come, first served, each holding
    its slot for its ``duration`` (s) from its start."""
    begin, finish = _first_come_first_served(arrived[served].tolist(),
                                             duration[served].tolist(), slots)
    start, end = np.empty(len(arrived)), np.empty(len(arrived))
    start[served], end[served] = begin, finish
    return start, end


def chained_orders(first: np.ndarray, *ends: np.ndarray) -> list[np.ndarray]:
    """The orders in which SimPy processes kinds of events each scheduled by its client's
    event of the kind before (the first of them by the events in order ``first``): by
    their ``ends`` (s), ties in the order of the events before."""
    orders = []
    for end in ends:
        first = first[np.argsort(end[first], kind="stable")]
        orders.append(first)
    return orders


def server_order(arrived: np.ndarray, start: np.ndarray, end: np.ndarray,
                 served: np.ndarray) -> np.ndarray | None:
    """The order in which SimPy processes the ends of the server's jobs (indices, as
    ``served``, the queue's order): by end (s), then in the queue's order. A job's end is
    scheduled when it starts, no job starts before one ahead of it in the queue, and jobs
    that start together are started in the queue's order (at their arrivals, processed in
    that order, or handed slots as they free up, to the waiting jobs oldest first). None
    where that order is not known: jobs that start and end together, one at its arrival
    and one handed a slot, or one at its arrival at an instant a job ends (it may have
    been handed that job's slot)."""
    s, e = start[served], end[served]
    order = np.lexsort((np.arange(len(served)), e))  # by end, then in the queue's order
    at_arrival = (s == arrived[served])[order]
    together = (e[order][1:] == e[order][:-1]) & (s[order][1:] == s[order][:-1])
    if together.any():
        grouped = np.zeros(len(order), dtype=bool)
        grouped[1:] |= together
        grouped[:-1] |= together
        if (together & (at_arrival[1:] != at_arrival[:-1])).any() or np.isin(
                s[order][grouped & at_arrival], e).any():
            return None
    return served[order]


def rows_in_order(end: np.ndarray, kind: np.ndarray) -> np.ndarray | None:
    """The order of the rows by their ``end`` (s), rows that end together in the order
    they are given; None if rows of two kinds (codes of :data:`ACTIVITIES`) end together
    (an order of one instant the arrays do not know). Each kind must be given in the
    order SimPy processes it (:func:`processing_orders`, :func:`server_order`, then
    each kind after the server's by the one before)."""
    order = np.argsort(end, kind="stable")
    tied = end[order][1:] == end[order][:-1]
    if tied.any():
        k = kind[order]
        if (tied & (k[1:] != k[:-1])).any():
            return None
    return order


def _first_come_first_served(arrival: list[float], duration: list[float], slots: int = 1
                             ) -> tuple[list[float], list[float]]:
    """A first-come-first-served queue of ``slots`` slots, free at the round's start, over
    jobs in order of arrival: each takes the slot that frees first, starts at
    ``max(arrival, that slot's end of the job before)`` and holds it for its ``duration``
    from its start (the server's busy timeout); with one slot the Lindley recursion.
    Returns the starts and the ends (s)."""
    starts, ends = [], []
    if slots == 1:
        free = -np.inf
        for a, d in zip(arrival, duration):
            start = a if a > free else free
            free = start + d
            starts.append(start)
            ends.append(free)
        return starts, ends
    frees = [-np.inf] * slots  # a heap of the slots' free times
    for a, d in zip(arrival, duration):
        free = frees[0]
        start = a if a > free else free
        end = start + d
        heapq.heapreplace(frees, end)
        starts.append(start)
        ends.append(end)
    return starts, ends
