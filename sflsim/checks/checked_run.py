"""One run under check: its tables as arrays, its rounds' spans and the violations found.

:class:`Run` is what every check of :mod:`sflsim.checks` reads and adds to.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from sflsim.checks.report import Violation
from sflsim.checks.run_files import Tables

#: kinds of actor (:attr:`Run.kind`)
SERVER, UPLINK, DOWNLINK, COMPUTE, BACKHAUL_UP, BACKHAUL_DOWN, OTHER = 0, 1, 2, 3, 4, 5, -1


def actor_kind(actor: str) -> tuple[int, int]:
    """(kind, owner client) of a trace actor; the owner is -1 but for a device's own
    compute and radio (``client3``, ``client3:uplink``, ``client3:downlink``)."""
    if actor == "server":
        return SERVER, -1
    if actor.startswith("client"):
        head, _, tail = actor[6:].partition(":")
        if head.isdigit():
            kind = {"": COMPUTE, "uplink": UPLINK, "downlink": DOWNLINK}.get(tail, OTHER)
            return kind, int(head) if kind != OTHER else -1
    if actor.startswith("ap:") and actor.endswith(":backhaul_up"):
        return BACKHAUL_UP, -1
    if actor.startswith("ap:") and actor.endswith(":backhaul_down"):
        return BACKHAUL_DOWN, -1
    return OTHER, -1


class Run:
    """A run's tables as the checks read them, and the violations found so far.

    Events are in the order of the table; their columns are arrays (``start``,
    ``end``, ``queue``, ``payload``, ``flops`` as floats, NaN where the file lacks the
    column; ``cut`` as bools), with each actor's kind and owner (:func:`actor_kind`).
    """

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.scenario, self.hw, self.names = tables.scenario, tables.hardware, tables.names
        self.rounds, self.clients, self.events = tables.rounds, tables.clients, tables.events
        self.n = len(self.hw.devices)
        self.found: list[Violation] = []
        ev = self.events

        def col(name: str) -> np.ndarray:
            return ev[name].to_numpy(dtype=float) if name in ev else np.full(len(ev), np.nan)

        self.rnd = ev["round"].to_numpy(dtype=np.int64)
        self.cid = ev["client_id"].to_numpy(dtype=np.int64)
        self.start, self.end, self.queue = col("start_s"), col("end_s"), col("queue_s")
        self.payload, self.flops = col("payload_bytes"), col("flops")
        self.cut = ev["cut_off"].to_numpy(dtype=bool) if "cut_off" in ev \
            else np.zeros(len(ev), bool)
        self.actor = ev["actor"].astype(str).to_numpy()
        self.activity = ev["activity"].astype(str).to_numpy()
        kinds = {a: actor_kind(a) for a in set(self.actor.tolist())}
        self.kind = np.array([kinds[a][0] for a in self.actor], dtype=np.int64)
        self.owner = np.array([kinds[a][1] for a in self.actor], dtype=np.int64)
        #: each round's (start, end) of simulated time (s), from rounds.csv
        self.bounds: dict[int, tuple[float, float]] = {}
        #: rounds whose window rounds.csv gives two ways (round_time_s is not the step
        #: of sim_time_s): what is checked against their window is blamed on that
        self.unsure: set[int] = set()
        #: rounds with a part missing (rounds.csv's row, the events), and that part: the
        #: cause of every violation in the round (:meth:`blame_rounds`)
        self.missing: dict[int, str] = {}
        with np.errstate(invalid="ignore"):
            self.scale = np.maximum(np.abs(self.start), np.abs(self.end))
        self.scale = np.where(np.isfinite(self.scale), self.scale, 0.0)
        self.status = _per_client(self.clients, "status", str)
        self.slowdown = _per_client(self.clients, "slowdown", float)
        self.cut_layer = _per_client(self.clients, "cut_layer", float)
        #: per cut-off transfer on a shared hop, when its last bit left as the replay of
        #: the hop's fair shares has it (:mod:`sflsim.checks.transfers`)
        self.last_bit: dict[int, float] = {}

    def add(self, table: str, round_: int | None, who: str, message: str,
            cause: str = "") -> None:
        """Record a violation in ``table`` (a key of :attr:`names`, or a file name)."""
        self.found.append(Violation(self.names.get(table, table), round_, who, message, cause))

    def blame_rounds(self) -> None:
        """Name the one damaged part as the cause of every violation in a round that lacks
        a part (:attr:`missing`) or whose window ``rounds.csv`` gives two ways
        (:attr:`unsure`: one edited ``sim_time_s`` moves the window every event, deadline
        and idle time of two rounds is checked against)."""
        causes = dict(self.missing)
        if self.unsure:
            rounds = sorted(self.unsure)
            unsure = (f"{self.names['rounds']}'s sim_time_s or round_time_s of "
                      f"{'round' if len(rounds) == 1 else 'rounds'} "
                      f"{', '.join(map(str, rounds))}, which disagree")
            causes.update(dict.fromkeys(rounds, unsure))
        if causes:
            self.found = [replace(v, cause=causes[v.round]) if v.round in causes else v
                          for v in self.found]

    def clients_per_end_layer(self) -> dict[int, int]:
        """``{end layer: clients of the scenario ending there}``, in ascending layer."""
        from collections import Counter

        return dict(sorted(Counter(d.end_layer for d in self.hw.devices).items()))

    def device(self, cid: int):
        return self.hw.devices[cid] if 0 <= cid < self.n else None

    def round_mask(self, r: int) -> np.ndarray:
        return self.rnd == r


def _per_client(clients: pd.DataFrame, column: str, kind: type) -> dict[tuple[int, int], object]:
    """``{(round, client_id): value}`` of a clients-table column ({} without it)."""
    if column not in clients or not len(clients):
        return {}
    values = clients[column].tolist()
    return {(int(r), int(c)): (kind(v) if v == v else v) for r, c, v in
            zip(clients["round"].tolist(), clients["client_id"].tolist(), values)}


def radio_until(run: Run, mask: np.ndarray, rule: str, shared_cut: str) -> np.ndarray:
    """Per event of ``mask`` (transfers under a device's radio actor), when its radio
    stops drawing for it (s): ``rule`` ``"transfer"``: its end; ``"serialisation"``: its
    last bit sent, the end minus the hop's latency, or for a transfer cut off on the
    device's own link when its recorded bytes were sent (or the cut, if earlier), on a
    shared hop ``shared_cut``: ``"cut"`` the cut, ``"least"`` the least time its bytes
    could take at the hop's highest rate, ``"replayed"`` when its last bit left in the
    replay of the hop (:attr:`Run.last_bit`; else the cut). Never before the start."""
    idx = np.flatnonzero(mask)
    start, end = run.start[idx], run.end[idx]
    if rule == "transfer" or not len(idx):
        return end.copy()
    hops = pd.Series(run.actor[idx]).map(run.hw.hops).tolist()
    latency = np.array([h.latency_s if h is not None else 0.0 for h in hops])
    until = np.where(run.cut[idx], end, end - latency)
    for k in np.flatnonzero(run.cut[idx]):  # few: the work in progress at a cut-off
        hop, i = hops[k], idx[k]
        if hop is None:
            continue
        if hop.shared is None:
            until[k] = min(end[k], hop.own.finish(start[k], 8.0 * run.payload[i]))
        elif shared_cut == "least":
            until[k] = min(end[k], start[k] + 8.0 * run.payload[i] / hop.top)
        elif shared_cut == "replayed":
            until[k] = min(end[k], run.last_bit.get(int(i), end[k]))
    return np.maximum(until, start)


def groups(*keys: np.ndarray) -> list[np.ndarray]:
    """The indices of the rows of each distinct combination of ``keys`` (arrays of one
    length), in key order, rows in their order within each."""
    if not len(keys[0]):
        return []
    order = np.lexsort(keys[::-1])
    cut = np.zeros(len(order), bool)
    for key in keys:
        k = key[order]
        cut[1:] |= k[1:] != k[:-1]
    return np.split(order, np.flatnonzero(cut))
