"""SplitFed's timing-only rounds of any number of batches per client, booked as chains of
events (:func:`book_chains`).

A SplitFed client's round (:mod:`sflsim.algorithms.splitfed`) is a chain: its download,
then per batch its forward, activations, server step, activation gradients and backward,
then its upload, each step asked when the one before ends. Where every client trains one
batch the round is NumPy arrays (:mod:`sflsim.execution.booked_return`); with several, a
client's next batch waits for its gradients, so arrivals at the server interleave with
its service. This module runs the round as a loop over the events SimPy would schedule,
without a process or a generator per client, taken in SimPy's order: by time, then in the
order they were scheduled (the downloads in client order when the round begins, each
client's next event when the one before is processed). A server step waits for its model
(V2's one shared model, first come, first served; V1's own model is always free) and then
for a slot (first come, first served, :class:`~sflsim.engine.FifoResource`); when it ends it
hands the slot, then the model, to the first job waiting for each, by an event of that
instant, and its client asks for the gradients' transfer after them. The arithmetic is
:meth:`sflsim.engine.Link.transfer`'s, the compute's and the server's, and the rows are
recorded as each event is processed, as SimPy records them: the same times, bytes, FLOPs
and rows in the same order. MergeSFL's rounds (:mod:`sflsim.algorithms.mergesfl`) are the
same chains with its merge between the activations and the server step
(:class:`_MergedChains`).
"""

from __future__ import annotations

import collections
import heapq
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sflsim.engine.link import arrival_s, serialised_s
from sflsim.work import BATCH, SERVER

if TYPE_CHECKING:
    import numpy as np

    from sflsim.engine import Link, Simulation


class ClientArrays(Protocol):
    """The run's clients as :class:`~sflsim.execution.booked_return.BookedReturnRounds`
    holds them: what :func:`book_chains` reads, and where it records its rows."""

    clients: list
    uplinks: list[Link]
    downlinks: list[Link]
    sustained_flops: np.ndarray

    def add_rows(self, sim: Simulation, cols: list[list]) -> None: ...

#: a client's event in flight: a transfer, a compute or a server step ends, or the server's
#: model or a slot is handed to it
_DOWN, _FORWARD, _SEND, _JOB, _GRADIENTS, _BACKWARD, _UP, _MODEL, _SLOT = range(9)
_WAKE = 9  # MergeSFL: the clients waiting at a merge are answered (:class:`_MergedChains`)


def book_chains(rows: ClientArrays, sim: Simulation, take: list[int],
                sizes: list[list[int]], cuts: list[int], slowdown: list[float],
                model_bytes: list[int],
                priced: dict[tuple[int, int], tuple[float, float, int, float, int]],
                server_flops_per_s: float, slots: int, shared_server: bool,
                on_batch: Callable[..., None], merged: bool = False) -> float:
    """Book a SplitFed round from now as its client processes run it (module docstring),
    or, ``merged``, a MergeSFL round (:class:`_MergedChains`).

    Args:
        rows: the run's clients (links, ids, FLOP/s, the trace's categories).
        take: the places of the clients taking part, in client order.
        sizes, cuts, slowdown, model_bytes: per client taking part, its batch sizes, cut
            layer, slowdown and client-side model's bytes.
        priced: ``{(cut layer, batch size): (forward FLOPs, backward FLOPs, activation
            bytes, server step FLOPs, client-side model bytes)}`` for every pair used.
        server_flops_per_s: the server's FLOP/s per job.
        slots: the server's slots; shared_server: V2 (one server-side model).
        merged: MergeSFL: the clients of a cut wait for each other's activations and
            the last to arrive runs one server step on them all, on the one
            server-side model (``shared_server``); ``priced`` then also holds each cut's
            merged batch, ``(cut layer, the sum of its clients' batch sizes)``.

    Returns:
        When the last upload arrives (s; now if no client takes part). Moves the links'
        free times and adds the round's rows to the trace.
    """
    chains = (_MergedChains if merged else _Chains)(
        rows, sim.env.now, take, sizes, cuts, slowdown, model_bytes, priced,
        server_flops_per_s, slots, shared_server)
    last = chains.run()
    rows.add_rows(sim, chains.cols)
    if batches := sum(len(s) for s in sizes):  # progress: the round's batches at once
        on_batch(BATCH, last, units=batches)
        on_batch(SERVER, last, units=chains.jobs)
    return last


def merged_batches(cuts: list[int], sizes: list[list[int]]) -> dict[int, int]:
    """MergeSFL: per cut layer, the rows of its merged batch, the first batch size of each
    client at that cut (``cuts`` and ``sizes`` per client; a client's batches are all one
    size), for cuts whose clients train at least one batch."""
    totals: collections.Counter = collections.Counter()
    for cut, batches in zip(cuts, sizes):
        if batches:
            totals[cut] += batches[0]
    return dict(totals)


class _Chains:
    """The state of :func:`book_chains`'s loop: per client taking part (its place ``p``),
    its event in flight, its batch, and that event's start and ask; the server's free
    slots and V2's model, with the jobs waiting for each; the rows so far."""

    def __init__(self, rows: ClientArrays, now: float, take: list[int],
                 sizes: list[list[int]], cuts: list[int], slowdown: list[float],
                 model_bytes: list[int], priced: dict, server_flops_per_s: float,
                 slots: int, shared_server: bool):
        m, self.n = len(take), len(rows.clients)
        self.now, self.take, self.sizes, self.cuts = now, take, sizes, cuts
        self.model_bytes, self.priced = model_bytes, priced
        self.server_flops_per_s, self.shared_server = server_flops_per_s, shared_server
        self.ups = [rows.uplinks[i] for i in take]
        self.downs = [rows.downlinks[i] for i in take]
        self.rates = [float(rows.sustained_flops[i]) / s for i, s in zip(take, slowdown)]
        self.heap: list[tuple[float, int, int]] = []
        self.scheduled = 0  # events scheduled so far: SimPy's tie-break among one instant's
        self.kind, self.batch = [_DOWN] * m, [0] * m
        self.began, self.asked = [0.0] * m, [0.0] * m
        self.free, self.waiting = slots, deque()  # free slots; jobs waiting for one
        self.model_held, self.model_queue = False, deque()  # V2's model; jobs waiting for it
        #: actor codes, activity codes, client places, starts, ends, queues, bytes, FLOPs
        self.cols: list[list] = [[] for _ in range(8)]
        self.last = now
        self.jobs = 0  # server steps run

    def run(self) -> float:
        """Every event of the round in SimPy's order; returns when the last upload arrives."""
        for p in range(len(self.take)):  # the clients' processes start in client order
            self._transfer(self.now, p, self.downs[p], self.model_bytes[p], _DOWN)
        handlers = self._handlers()
        heap, kind = self.heap, self.kind
        while heap:
            t, _, p = heapq.heappop(heap)
            handlers[kind[p]](t, p)
        return self.last

    def _handlers(self) -> tuple[Callable[[float, int], None], ...]:
        """What each kind of event does when processed, by its code."""
        return (self._downloaded, self._forwarded, self._sent, self._served, self._gradients,
                self._backward, self._uploaded, self._ask_slot, self._start_job)

    # ----- the steps -------------------------------------------------------------------
    def _price(self, p: int) -> tuple[float, float, int, float, int]:
        return self.priced[self.cuts[p], self.sizes[p][self.batch[p]]]

    def _row(self, actor: int, activity: int, p: int, end: float, queue: float,
             payload: int, flops: float) -> None:
        for col, value in zip(self.cols, (actor, activity, self.take[p], self.began[p], end,
                                          queue, payload, flops)):
            col.append(value)

    def _push(self, at: float, p: int, what: int) -> None:
        self.kind[p] = what
        heapq.heappush(self.heap, (at, self.scheduled, p))
        self.scheduled += 1

    def _transfer(self, t: float, p: int, link: Link, payload: int, what: int) -> None:
        start = link.free_at_s if link.free_at_s > t else t  # Link.transfer asked at t
        done = link.free_at_s = serialised_s(start, payload, link.bandwidth_bps)
        self.began[p], self.asked[p] = start, t
        self._push(arrival_s(t, done, link.latency_s), p, what)

    def _compute(self, t: float, p: int, flops: float, what: int) -> None:
        self.began[p] = t
        self._push(t + flops / self.rates[p], p, what)

    def _ask_slot(self, t: float, p: int) -> None:
        if self.free:
            self.free -= 1
            self._start_job(t, p)
        else:
            self.waiting.append(p)

    def _start_job(self, t: float, p: int) -> None:
        self.began[p] = t
        self._push(t + self._job_flops(p) / self.server_flops_per_s, p, _JOB)

    def _job_flops(self, p: int) -> float:
        """FLOPs of the server step ``p`` runs: that of its batch."""
        return self._price(p)[3]

    # ----- what each event does when SimPy processes it --------------------------------
    def _downloaded(self, t: float, p: int) -> None:
        self._row(2 * self.n + self.take[p], 0, p, t, self.began[p] - self.asked[p],
                  self.model_bytes[p], 0.0)
        self._next_batch(t, p)

    def _next_batch(self, t: float, p: int) -> None:
        if self.batch[p] < len(self.sizes[p]):
            self._compute(t, p, self._price(p)[0], _FORWARD)
        else:
            self._transfer(t, p, self.ups[p], self.model_bytes[p], _UP)

    def _forwarded(self, t: float, p: int) -> None:
        self._row(self.take[p], 1, p, t, 0.0, 0, self._price(p)[0])
        self._transfer(t, p, self.ups[p], int(self._price(p)[2]), _SEND)

    def _sent(self, t: float, p: int) -> None:
        self._row(self.n + self.take[p], 2, p, t, self.began[p] - self.asked[p],
                  int(self._price(p)[2]), 0.0)
        self._arrive(t, p)

    def _arrive(self, t: float, p: int) -> None:
        """The server step of ``p`` asked at ``t``: it waits for the model, then a slot."""
        self.asked[p] = t
        if self.shared_server and self.model_held:
            self.model_queue.append(p)
        else:
            self.model_held = self.shared_server
            self._ask_slot(t, p)

    def _served(self, t: float, p: int) -> None:
        self._row(3 * self.n, 3, p, t, self.began[p] - self.asked[p], 0, self._job_flops(p))
        self.jobs += 1
        if self.waiting:  # the slot, then the model, to the first job waiting for each
            self._push(t, self.waiting.popleft(), _SLOT)
        else:
            self.free += 1
        if self.model_queue:
            self._push(t, self.model_queue.popleft(), _MODEL)
        else:
            self.model_held = False
        self._after_job(t, p)

    def _after_job(self, t: float, p: int) -> None:
        """Once the slot and the model are handed on: ``p`` asks for its gradients."""
        self._transfer(t, p, self.downs[p], int(self._price(p)[2]), _GRADIENTS)

    def _gradients(self, t: float, p: int) -> None:
        self._row(2 * self.n + self.take[p], 4, p, t, self.began[p] - self.asked[p],
                  int(self._price(p)[2]), 0.0)
        self._compute(t, p, self._price(p)[1], _BACKWARD)

    def _backward(self, t: float, p: int) -> None:
        self._row(self.take[p], 5, p, t, 0.0, 0, self._price(p)[1])
        self.batch[p] += 1
        self._next_batch(t, p)

    def _uploaded(self, t: float, p: int) -> None:
        self._row(self.n + self.take[p], 6, p, t, self.began[p] - self.asked[p],
                  self.model_bytes[p], 0.0)
        self.last = t if t > self.last else self.last


class _MergedChains(_Chains):
    """:func:`book_chains`'s loop for MergeSFL (:mod:`sflsim.algorithms.mergesfl`, every
    client of a round the same number of batches, none leaving it): a client's
    activations wait at its cut's merge of that batch until every client of the cut has
    sent its own; the last to arrive runs the merged step (its server step, of the
    FLOPs of the cut's rows together, recorded under its id) for the model, then a slot.
    When the step ends, the slot and the model are handed on, one event of that instant
    wakes the clients that waited, and the runner asks for its gradients' transfer; the
    woken clients ask for theirs when that event is processed, in the order they
    arrived."""

    def __init__(self, *args):
        super().__init__(*args)
        #: per cut, the clients taking part, and the places waiting at its current merge
        self.members = collections.Counter(self.cuts)
        self.merging: dict[int, list[int]] = {cut: [] for cut in self.members}
        #: per runner's place, the places its merged step answers; per wake event (its
        #: place past the clients'), the places it wakes
        self.answers: dict[int, list[int]] = {}
        self.wakes: list[list[int]] = []
        self.merged_flops = {cut: self.priced[cut, n][3]
                             for cut, n in merged_batches(self.cuts, self.sizes).items()}

    def _handlers(self) -> tuple[Callable[[float, int], None], ...]:
        return (*super()._handlers(), self._woken)

    def _job_flops(self, p: int) -> float:
        return self.merged_flops[self.cuts[p]]

    def _arrive(self, t: float, p: int) -> None:
        merging = self.merging[self.cuts[p]]
        if len(merging) + 1 < self.members[self.cuts[p]]:
            merging.append(p)  # the others of its cut have not all sent
            return
        self.answers[p], self.merging[self.cuts[p]] = merging, []
        super()._arrive(t, p)

    def _after_job(self, t: float, p: int) -> None:
        if woken := self.answers.pop(p):
            self.kind.append(_WAKE)
            self.wakes.append(woken)
            self._push(t, len(self.kind) - 1, _WAKE)
        super()._after_job(t, p)

    def _woken(self, t: float, w: int) -> None:
        woken, self.wakes[w - len(self.take)] = self.wakes[w - len(self.take)], []
        for p in woken:
            self._transfer(t, p, self.downs[p], int(self._price(p)[2]), _GRADIENTS)
