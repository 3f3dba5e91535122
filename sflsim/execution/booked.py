"""Timing-only rounds of the FedAvg family booked as arrays (:class:`BookedRounds`).

In a timing-only round of a FedAvg-family method nothing is shared before the server:
each client downloads the model on its own downlink, trains on its own device and
uploads on its own uplink. Those times are sums and maxima that need no SimPy process
per client (:meth:`sflsim.algorithms.fedavg.FedAvg.book_round`), and here they are
computed for every client at once, as NumPy arrays, with exactly the arithmetic of
:meth:`sflsim.engine.Link.book` and of :meth:`FedAvg.book_round`'s loop (the same float
operations in the same order: the same times to the last bit), and the round's trace
rows are added as one block of columns (:meth:`sflsim.engine.Trace.add_columns`).

Only links of constant bandwidth are booked here; a link with a bandwidth trace, or
anything else, leaves the round to :meth:`FedAvg.book_round`'s loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from sflsim.engine import Link
from sflsim.engine.link import arrival_s, serialised_s
from sflsim.work import BATCH

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sized

    from sflsim.engine import Simulation
    from sflsim.models.cost import PieceCost


class BookedClient(Protocol):
    """What booking reads of a simulated client
    (:class:`sflsim.algorithms.context.Client` is one)."""

    client_id: int
    actor: str
    uplink: Link
    downlink: Link
    flops_per_s: float
    slowdown: float


#: the activities of a booked round, in the order of their codes
ACTIVITIES = ("download_model", "client_train", "upload_model")


def book_one_by_one(sim: Simulation, clients: Iterable[BookedClient], dropped: Iterable[int],
                    slowdowns: Mapping[int, float],
                    batches_of: Callable[[BookedClient], Iterable[Sized]],
                    on_batch: Callable, now_s: float, cost: PieceCost, down_bytes: int,
                    up_bytes: int) -> float:
    """Book a FedAvg-family round of ``clients`` but the ``dropped``, each at its slowdown
    (``slowdowns``, else 1) on its batches (``batches_of``), reporting each batch to
    ``on_batch``, from ``now_s`` (s) client after client (links with a
    bandwidth trace, which :class:`BookedRounds` does not book): each client's download,
    local steps (``cost`` per sample) and upload one after the other on its own links
    and device (:meth:`~sflsim.engine.Link.book`, :meth:`Simulation.record`). Returns
    when the last upload arrives (s; ``now_s`` if none)."""
    record = sim.record
    flops_of: dict[int, float] = {}  # batch size -> FLOPs of a step
    last = now_s
    for c in clients:
        if c.client_id in dropped:
            continue
        c.slowdown = slowdowns.get(c.client_id, 1.0)
        cid, actor, rate = c.client_id, c.actor, c.flops_per_s
        t = c.downlink.book("download_model", cid, down_bytes, now_s)
        for idx in batches_of(c):
            n = len(idx)
            flops = flops_of.get(n)
            if flops is None:
                flops = flops_of[n] = cost.train_flops(n)
            end = t + flops / rate  # as a timeout of that delay from t ends
            record(actor, "client_train", cid, t, end, flops=flops)
            on_batch(BATCH, end)  # the simulated instant the batch is done
            t = end
        last = max(last, c.uplink.book("upload_model", cid, up_bytes, t))
    return last


def link_arrays(links: list[Link]) -> tuple[np.ndarray, np.ndarray]:
    """Each link's bandwidth (bit/s) and latency (s) as arrays, in the order given (what
    the array bookings time transfers with)."""
    return (np.array([link.bandwidth_bps for link in links], dtype=float),
            np.array([link.latency_s for link in links], dtype=float))


def bookable(clients: list[BookedClient]) -> bool:
    """Whether every client's links are plain :class:`~sflsim.engine.Link`\\ s of constant
    bandwidth (no trace), so :class:`BookedRounds` can book them."""
    return all(type(link) is Link and link.trace is None
               for c in clients for link in (c.uplink, c.downlink))


class BookedRounds:
    """The run's clients as arrays, for booking whole rounds (built once per run).

    Args:
        clients: the run's clients (their links :func:`bookable`).
        batch_sizes: per client, the sizes of its batches in one round (samples),
            every local epoch in turn.
    """

    def __init__(self, clients: list[BookedClient], batch_sizes: list[list[int]]):
        import pandas as pd

        self.clients = clients
        self.ids = np.array([c.client_id for c in clients], dtype=np.int64)
        #: client id -> its place in ``clients``
        self.place = {c.client_id: i for i, c in enumerate(clients)}
        #: the clients whose slowdown is not 1.0
        self.slowed = {c.client_id for c in clients if c.slowdown != 1.0}
        self.downlinks = [c.downlink for c in clients]
        self.uplinks = [c.uplink for c in clients]
        self.down_bps, self.down_latency_s = link_arrays(self.downlinks)
        self.up_bps, self.up_latency_s = link_arrays(self.uplinks)
        self.sustained_flops = np.array([c.device.sustained_flops.value for c in clients],
                                        dtype=float)
        #: actor names: the clients' devices, then their downlinks, then their uplinks
        names = ([c.actor for c in clients] + [link.actor for link in self.downlinks]
                 + [link.actor for link in self.uplinks])
        # (categories of Python strings: read back one by one faster than Arrow strings)
        self.actor_dtype = pd.CategoricalDtype(pd.Index(names, dtype=object))
        self.activity_dtype = pd.CategoricalDtype(pd.Index(ACTIVITIES, dtype=object))
        self.n_batches = np.array([len(sizes) for sizes in batch_sizes], dtype=np.int64)
        #: the clients by number of batches: ``{k: (their places, their batch sizes as a
        #: (clients, k) array)}`` (dense per group: as many entries as batches in all)
        self.by_batches: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for k in np.unique(self.n_batches).tolist():
            places = np.flatnonzero(self.n_batches == k)
            self.by_batches[k] = (places, np.array([batch_sizes[i] for i in places.tolist()],
                                                   dtype=np.int64).reshape(len(places), k))

    def batch_sizes(self) -> set[int]:
        """Every batch size (samples) of the clients' rounds."""
        return {int(n) for _, sizes in self.by_batches.values() for n in np.unique(sizes)}

    def conditions(self, dropped: set[int], slowdowns: dict[int, float]
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The round's conditions as arrays, one entry per client: whether it takes part
        (not in ``dropped``), and its slowdown (``slowdowns``, else 1.0), which is also
        set on each client taking part (:attr:`Client.slowdown`) as the loop over clients
        sets it; only the clients slowed now or last time are visited."""
        clients, place = self.clients, self.place
        active = np.ones(len(clients), dtype=bool)
        active[[place[cid] for cid in dropped if cid in place]] = False
        slowdown = np.ones(len(clients))
        for cid in {*slowdowns, *self.slowed}:
            i = place[cid]
            if active[i]:
                clients[i].slowdown = slowdowns.get(cid, 1.0)
            slowdown[i] = clients[i].slowdown
        self.slowed = {c.client_id for cid in {*slowdowns, *self.slowed}
                       for c in [clients[place[cid]]] if c.slowdown != 1.0}
        return active, slowdown

    def book(self, sim: object, now_s: float, active: np.ndarray, slowdown: np.ndarray,
             flops_of: dict[int, float], down_bytes: int, up_bytes: int,
             on_batch: object) -> float:
        """Book one round from ``now_s`` (s) for the clients where ``active`` (bool, one
        per client): download, every batch, upload; record the rows on ``sim``'s trace
        and move the links' :attr:`~sflsim.engine.Link.free_at_s`. ``slowdown``: per
        client, how many times longer its compute takes; ``flops_of``: FLOPs of one step
        by batch size. Returns when the last upload arrives (s; ``now_s`` if none)."""
        idx = np.flatnonzero(active)
        k = self.n_batches[idx]
        # download (Link.book): serialise from max(asked, free), then the latency
        down_free = np.fromiter((self.downlinks[i].free_at_s for i in idx.tolist()), float,
                                len(idx))
        d_start = np.maximum(now_s, down_free)
        d_done = serialised_s(d_start, down_bytes, self.down_bps[idx])
        d_arrived = arrival_s(now_s, d_done, self.down_latency_s[idx])
        # the batches one after the other: t_j = t_{j-1} + flops_j / rate
        rate = self.sustained_flops / slowdown
        at = np.full(len(active), -1)
        at[idx] = np.arange(len(idx))  # a client's place among those taking part
        steps, t_last = [], np.empty(len(idx))
        for places, sizes in self.by_batches.values():
            places, sizes = places[active[places]], sizes[active[places]]
            flops = np.zeros(sizes.shape)
            for size, value in flops_of.items():
                flops[sizes == size] = value
            ends = np.empty((len(places), sizes.shape[1] + 1))
            ends[:, 0] = d_arrived[at[places]]
            ends[:, 1:] = flops / rate[places][:, None]
            ends = np.cumsum(ends, axis=1)  # left to right, as the loop adds
            t_last[at[places]] = ends[:, -1]
            steps.append((at[places], ends, flops))
        # upload, asked when the last batch is done
        up_free = np.fromiter((self.uplinks[i].free_at_s for i in idx.tolist()), float,
                              len(idx))
        u_start = np.maximum(t_last, up_free)
        u_done = serialised_s(u_start, up_bytes, self.up_bps[idx])
        u_arrived = arrival_s(t_last, u_done, self.up_latency_s[idx])
        for i, down, up in zip(idx.tolist(), d_done.tolist(), u_done.tolist()):
            self.downlinks[i].free_at_s = down
            self.uplinks[i].free_at_s = up
        self._record(sim, now_s, idx, k, steps, (d_start, d_arrived),
                     (u_start, u_arrived, t_last), down_bytes, up_bytes)
        if len(idx):  # the round's batches at once, done by the last one's end
            on_batch(BATCH, float(t_last.max()), units=int(k.sum()))
        return max(now_s, max(u_arrived.tolist(), default=now_s))

    def _record(self, sim: object, now_s: float, idx: np.ndarray, k: np.ndarray,
                steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]], down: tuple,
                up: tuple, down_bytes: int, up_bytes: int) -> None:
        """The round's rows, client after client (download, batches, upload), as one
        block of the trace; ``steps``: per group of clients with as many batches, their
        places among those taking part, their ends (s, the download's arrival first)
        and each batch's FLOPs."""
        import pandas as pd

        n, clients = len(idx), len(self.clients)
        per = k + 2
        first = np.cumsum(per) - per  # each client's download row
        rows = int(per.sum())
        start, end, queue, op = np.empty(rows), np.empty(rows), np.zeros(rows), np.zeros(rows)
        payload = np.zeros(rows, dtype=np.int64)
        activity = np.ones(rows, dtype=np.int8)
        owner = np.repeat(np.arange(n), per)  # the row's client, as a place in idx
        actor = idx[owner]
        down_rows, up_rows = first, first + per - 1
        (d_start, d_arrived), (u_start, u_arrived, t_last) = down, up
        start[down_rows], end[down_rows] = d_start, d_arrived
        queue[down_rows], payload[down_rows] = d_start - now_s, down_bytes
        start[up_rows], end[up_rows] = u_start, u_arrived
        queue[up_rows], payload[up_rows] = u_start - t_last, up_bytes
        for places, ends, flops in steps:
            batch_rows = first[places][:, None] + 1 + np.arange(flops.shape[1])
            start[batch_rows], end[batch_rows] = ends[:, :-1], ends[:, 1:]
            op[batch_rows] = flops
        activity[down_rows], activity[up_rows] = 0, 2
        actor[down_rows] += clients
        actor[up_rows] += 2 * clients
        sim.trace.add_columns({
            "round": np.full(rows, sim.round, dtype=np.int64),
            "actor": pd.Categorical.from_codes(actor, dtype=self.actor_dtype),
            "activity": pd.Categorical.from_codes(activity, dtype=self.activity_dtype),
            "client_id": self.ids[idx][owner],
            "start_s": start, "end_s": end, "queue_s": queue,
            "payload_bytes": payload, "flops": op,
            "cut_off": np.zeros(rows, dtype=bool),
        })
