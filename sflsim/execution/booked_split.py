"""Timing-only rounds of split learning with one server queue, booked as arrays
(:class:`BookedSplitRounds`).

In a timing-only round of Hetero-SplitEE's Sequential strategy nothing is shared before the
server: each client trains its batches one after the other on its own device and sends
each batch's activations on its own uplink; the server serves every batch's job on one
first-come-first-served queue of one slot (its one server-side model,
:class:`~sflsim.engine.FifoQueue`). The devices and links need no SimPy process per
client: their times are sums and maxima, computed here for every client at once as NumPy
arrays, with exactly the arithmetic of :meth:`sflsim.engine.Link.book` and of the
client-by-client booking (:meth:`sflsim.algorithms.hetero_splitee.HeteroSplitEESequential`'s
booked round: the same float operations in the same order, the same times to the last
bit). The queue is the Lindley recursion ``start_k = max(arrival_k, end_{k-1})``,
``end_k = start_k + service_k`` over the jobs in order of arrival (ties in the order they
were sent, as SimPy fires them), run job by job on floats, as
:meth:`~sflsim.engine.FifoQueue.book` does. The round's rows join the trace as one block
of columns (:meth:`sflsim.engine.Trace.add_columns`), in the order the client-by-client
booking records them: each client's steps and sends, then the server's jobs.

The Averaging strategy and the Distributed baseline give each client a server-side model
of its own, on the server's ``slots``: in the client-by-client booking each batch's job is a
SimPy process that waits for its activations, then for its client's model (a
:class:`~sflsim.engine.FifoResource` of one slot: the client's batches one at a time, in
order), then for a server slot (first come, first served), and holds both for its job.
:func:`slot_jobs` runs that queue job by job on floats, with the events SimPy would
schedule and in SimPy's order (by time, then by the order they were scheduled), so the
starts, the ends and the order in which the jobs end (their rows' order) are SimPy's. When
each client sends one batch a round, no job waits for its model and the queue is SplitFed
V1's, booked faster by :mod:`~sflsim.execution.booked_return`'s functions.

Only the FLOPs rule prices the steps here (no measured latency table, no cost model by
operation), and only links of constant bandwidth; anything else leaves the round to the
client-by-client booking.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sflsim.engine.link import arrival_s, serialised_s
from sflsim.execution.booked import link_arrays
from sflsim.execution.booked_return import served_jobs, server_order
from sflsim.work import BATCH, SERVER

if TYPE_CHECKING:
    from sflsim.engine import Simulation
    from sflsim.execution.booked import BookedClient

#: the activities of a booked split round, in the order of their codes
ACTIVITIES = ("client_train", "send_activations", "server_train")


class BookedSplitRounds:
    """The run's clients as arrays, for booking whole timing-only split rounds (built once
    per run, :mod:`module docstring <sflsim.execution.booked_split>`).

    Args:
        clients: every client of the run, in id order.
        batch_sizes: per client, the sizes (samples) of its round's batches in order.
        end_layers: per client, its cut layer (what prices its steps and the server's).
    """

    def __init__(self, clients: list[BookedClient], batch_sizes: list[list[int]],
                 end_layers: list[int]):
        import pandas as pd

        self.clients = clients
        self.ids = np.array([c.client_id for c in clients], dtype=np.int64)
        self.place = {c.client_id: i for i, c in enumerate(clients)}
        self.uplinks = [c.uplink for c in clients]
        self.up_bps, self.up_latency_s = link_arrays(self.uplinks)
        self.sustained_flops = np.array([c.device.sustained_flops.value for c in clients],
                                        dtype=float)
        self.end_layers = np.array(end_layers, dtype=np.int64)
        names = [c.actor for c in clients] + [link.actor for link in self.uplinks] + ["server"]
        self.actor_dtype = pd.CategoricalDtype(pd.Index(names, dtype=object))
        self.activity_dtype = pd.CategoricalDtype(pd.Index(ACTIVITIES, dtype=object))
        self.n_batches = np.array([len(s) for s in batch_sizes], dtype=np.int64)
        #: the batches of every client, flat in client order, and each one's client place
        self.sizes = np.array([n for s in batch_sizes for n in s], dtype=np.int64)
        self.owner = np.repeat(np.arange(len(clients)), self.n_batches)
        #: each batch's place among its client's batches
        self.position = np.arange(len(self.sizes)) - np.repeat(
            np.cumsum(self.n_batches) - self.n_batches, self.n_batches)
        #: every (cut layer, batch size) of the clients' rounds: what to price
        self.keys = set(zip(self.end_layers[self.owner].tolist(), self.sizes.tolist()))
        #: per batch: (client step FLOPs, activation bytes, server job FLOPs), looked up
        #: once in the prices the first round is given (they do not change during a run)
        self._costs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def book(self, sim: Simulation, now_s: float, active: np.ndarray, slowdown: np.ndarray,
             priced: dict[tuple[int, int], tuple[float, int, float]],
             queue_free_s: float, server_flops_per_s: float,
             on_batch: Callable[..., None], slots: int | None = None) -> tuple[float, float]:
        """Book one round from ``now_s`` (s) for the clients where ``active``.

        Args:
            active: bool, one per client: it takes part.
            slowdown: per client, how many times longer its compute takes.
            priced: ``{(cut layer, batch size): (client step FLOPs, activation bytes,
                server job FLOPs)}`` for every key of :attr:`keys`.
            queue_free_s: when the server queue is free (s).
            server_flops_per_s: the server's FLOP/s per job.
            slots: None: the jobs queue for one shared server-side model (Sequential's
                :class:`~sflsim.engine.FifoQueue`); else each client has a model of its
                own and the jobs share the server's ``slots``, free at ``now_s``, first
                come, first served (Averaging, Distributed: :func:`slot_jobs`).

        Returns:
            (when the last server job ends, when the queue is free after it) (s; ``now_s``
            and ``queue_free_s`` if no job).
        """
        if self._costs is None:
            keys = list(zip(self.end_layers[self.owner].tolist(), self.sizes.tolist()))
            self._costs = (np.array([priced[k][0] for k in keys], dtype=float),
                           np.array([priced[k][1] for k in keys], dtype=np.int64),
                           np.array([priced[k][2] for k in keys], dtype=float))
        take = active[self.owner]
        owner, position = self.owner[take], self.position[take]
        flops, payload, job_flops = (c[take] for c in self._costs)
        # the steps one after the other from now: t_j = t_{j-1} + flops_j / rate
        seconds = flops / (self.sustained_flops / slowdown)[owner]
        ends = _client_cumsum(now_s, seconds, position)
        starts = np.where(position == 0, now_s, np.roll(ends, 1))
        # each batch's send on its client's uplink (Link.book), in batch order
        sent_start, sent_arrived, link_free = self._send(owner, position, ends, payload)
        # the server: in order of arrival, ties in the order sent
        arrival = now_s + (sent_arrived - now_s)  # as a timeout of that delay from now
        order = np.argsort(arrival, kind="stable")
        durations = job_flops / server_flops_per_s
        if slots is None:  # the one shared model's queue
            job_start, job_end, free = _lindley(arrival[order].tolist(),
                                                durations[order].tolist(), queue_free_s)
        else:  # a model per client on the server's slots, in the order the jobs end
            job_start, job_end, order = self._slot_jobs(arrival, durations, owner, order, slots)
            free = queue_free_s
        for i, done in link_free.items():
            self.uplinks[i].free_at_s = done
        self._record(sim, owner, starts, ends, flops, sent_start, sent_arrived, payload,
                     order, arrival[order], job_start, job_end, job_flops[order])
        if not len(owner):
            return now_s, free
        last = float(max(job_end))  # the round's batches at once, done by the last one's end
        on_batch(BATCH, float(ends.max()), units=len(owner))
        on_batch(SERVER, last, units=len(owner))
        return last, free

    @staticmethod
    def _slot_jobs(arrival: np.ndarray, duration: np.ndarray, owner: np.ndarray,
                   order: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`slot_jobs`; where each client sends one batch (no job waits for its
        model) SplitFed V1's queue, five times faster, gives the same
        (:func:`~sflsim.execution.booked_return.served_jobs` on the jobs in ``order`` of
        arrival, :func:`~sflsim.execution.booked_return.server_order` for the order they
        end in), unless jobs end together in an order it does not know."""
        if len(np.unique(owner)) == len(owner):
            start, end = served_jobs(arrival, order, duration, slots)
            ended = server_order(arrival, start, end, order)
            if ended is not None:
                return start[ended], end[ended], ended
        start, end, ended = slot_jobs(arrival.tolist(), duration.tolist(), owner.tolist(),
                                      slots)
        return np.asarray(start), np.asarray(end), ended

    def _send(self, owner: np.ndarray, position: np.ndarray, ends: np.ndarray,
              payload: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[int, float]]:
        """Each batch's activations on its client's uplink, asked when its step ends:
        start ``max(asked, link free)``, serialisation, then the latency; batch ``j``
        waits for batch ``j - 1``'s serialisation. Returns the starts, the arrivals and
        ``{client place: when its link is free after them}`` (to be set once the round
        is booked)."""
        start, arrived = np.empty(len(owner)), np.empty(len(owner))
        free = np.array([self.uplinks[i].free_at_s for i in np.unique(owner).tolist()])
        clients = np.unique(owner)
        slot = np.searchsorted(clients, owner)  # the batch's client among those taking part
        for j in range(int(position.max()) + 1 if len(position) else 0):
            at = np.flatnonzero(position == j)
            c, asked = owner[at], ends[at]
            s = np.maximum(asked, free[slot[at]])
            done = serialised_s(s, payload[at], self.up_bps[c])
            start[at], arrived[at] = s, arrival_s(asked, done, self.up_latency_s[c])
            free[slot[at]] = done
        return start, arrived, dict(zip(clients.tolist(), free.tolist()))

    def _record(self, sim: Simulation, owner: np.ndarray, starts: np.ndarray,
                ends: np.ndarray, flops: np.ndarray, sent_start: np.ndarray,
                sent_arrived: np.ndarray, payload: np.ndarray, order: np.ndarray,
                arrival: np.ndarray, job_start: list[float], job_end: list[float],
                job_flops: np.ndarray) -> None:
        """The round's rows as one block: per client, each batch's step then its send (in
        client, then batch order), then the server's jobs in the order served."""
        import pandas as pd

        n, clients = len(owner), len(self.clients)
        rows = 3 * n
        col = {name: np.zeros(rows) for name in ("start_s", "end_s", "queue_s", "flops")}
        payload_col = np.zeros(rows, dtype=np.int64)
        steps, sends, jobs = np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2), 2 * n + np.arange(n)
        col["start_s"][steps], col["end_s"][steps], col["flops"][steps] = starts, ends, flops
        col["start_s"][sends], col["end_s"][sends] = sent_start, sent_arrived
        col["queue_s"][sends], payload_col[sends] = sent_start - ends, payload
        col["start_s"][jobs], col["end_s"][jobs] = job_start, job_end
        col["queue_s"][jobs], col["flops"][jobs] = np.asarray(job_start) - arrival, job_flops
        actor = np.empty(rows, dtype=np.int64)
        actor[steps], actor[sends], actor[jobs] = owner, owner + clients, 2 * clients
        activity = np.empty(rows, dtype=np.int8)
        activity[steps], activity[sends], activity[jobs] = 0, 1, 2
        client = np.empty(rows, dtype=np.int64)
        client[steps] = client[sends] = self.ids[owner]
        client[jobs] = self.ids[owner[order]]
        sim.trace.add_columns({
            "round": np.full(rows, sim.round, dtype=np.int64),
            "actor": pd.Categorical.from_codes(actor, dtype=self.actor_dtype),
            "activity": pd.Categorical.from_codes(activity, dtype=self.activity_dtype),
            "client_id": client, **col, "payload_bytes": payload_col,
            "cut_off": np.zeros(rows, dtype=bool),
        })


def _client_cumsum(now_s: float, seconds: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Each batch's end when every client's batches run one after the other from
    ``now_s``: ``t_j = t_{j-1} + seconds_j``, added left to right as the loop adds."""
    ends = np.empty(len(seconds))
    previous = np.full(len(seconds), now_s)
    for j in range(int(position.max()) + 1 if len(position) else 0):
        at = np.flatnonzero(position == j)
        ends[at] = previous[at] + seconds[at]
        nxt = at + 1
        nxt = nxt[nxt < len(seconds)]
        nxt = nxt[position[nxt] == j + 1]  # the same client's next batch
        previous[nxt] = ends[nxt - 1]
    return ends


def _lindley(arrival: list[float], duration: list[float], free_s: float
             ) -> tuple[list[float], list[float], float]:
    """One FIFO queue of one slot over jobs in order of arrival: each starts at
    ``max(arrival, free)`` and frees the queue ``duration`` later; its end is read as a
    timeout from its arrival ends (:meth:`sflsim.engine.FifoQueue.book`). Returns the
    starts, the ends and the queue's free time (s)."""
    starts, ends = [], []
    for a, d in zip(arrival, duration):
        start = a if a > free_s else free_s
        free_s = start + d
        starts.append(start)
        ends.append(a + (free_s - a))
    return starts, ends, free_s


#: :func:`slot_jobs`'s events: activations arrive, a client's model is handed on, a server
#: slot is handed on, a job ends
_ARRIVE, _MODEL, _SLOT, _END = range(4)


def slot_jobs(arrival: list[float], duration: list[float], owner: list[int], slots: int
              ) -> tuple[list[float], list[float], np.ndarray]:
    """Server jobs, each on its client's own model and one of ``slots`` server slots, as
    the client-by-client booking's SimPy processes run them (module docstring).

    Job ``k`` (in the order the processes were made: client by client, each client's
    batches in order) waits until ``arrival[k]`` (s), then for its client's model
    ``owner[k]`` (one job at a time, first come, first served), then for a slot (first
    come, first served), and holds both for ``duration[k]`` (s) from its start. Events
    are taken in SimPy's order: by time, then in the order they were scheduled (the
    arrivals, scheduled when the round began, in job order; each job's end when it
    starts). A job that ends hands its slot to the first job waiting for one, then its
    model to its client's next job, each by an event of that instant; a job handed the
    model then asks for a slot. :class:`~sflsim.engine.FifoResource` takes a free slot
    at once (no event) and queues a request behind any job already waiting.

    Returns:
        (start, end) of each job, in the order the jobs end (s), and that order (job
        indices): the order SimPy records their rows in.
    """
    n = len(arrival)
    # the arrivals in order (by time, ties in job order: they were scheduled first, so
    # they come before any other event of their instant); the other events on a heap
    arrivals = sorted(range(n), key=arrival.__getitem__)
    heap: list[tuple[float, int, int, int]] = []
    scheduled = n  # events scheduled so far: SimPy's tie-break among one instant's
    free, waiting = slots, deque()  # free slots; jobs waiting for one
    held: set[int] = set()  # clients whose model a job holds
    next_jobs: dict[int, deque] = {}  # per client, its jobs waiting for its model
    starts, ends, done = [], [], []
    began = [0.0] * n
    i = 0
    while i < n or heap:
        if i < n and (not heap or arrival[arrivals[i]] <= heap[0][0]):
            k = arrivals[i]
            t, kind = arrival[k], _ARRIVE
            i += 1
        else:
            t, _, kind, k = heapq.heappop(heap)
        if kind == _ARRIVE:
            c = owner[k]
            if c in held:
                next_jobs.setdefault(c, deque()).append(k)
                continue
            held.add(c)
            kind = _MODEL
        if kind == _MODEL:  # the model is held: ask for a slot (none is free while a job waits)
            if not free:
                waiting.append(k)
                continue
            free -= 1
            kind = _SLOT
        if kind == _SLOT:  # the slot is held: the job starts
            began[k] = t
            heapq.heappush(heap, (t + duration[k], scheduled, _END, k))
            scheduled += 1
            continue
        starts.append(began[k])  # _END: its row, then the slot and the model handed on
        ends.append(t)
        done.append(k)
        if waiting:
            heapq.heappush(heap, (t, scheduled, _SLOT, waiting.popleft()))
            scheduled += 1
        else:
            free += 1
        queue = next_jobs.get(owner[k])
        if queue:
            heapq.heappush(heap, (t, scheduled, _MODEL, queue.popleft()))
            scheduled += 1
        else:
            held.discard(owner[k])
    return starts, ends, np.array(done, dtype=np.int64)
