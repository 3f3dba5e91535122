"""The clients of a run as the records read them, gathered once (:class:`ClientTable`).

Ids, groups, profiles, domains, end layers, samples, each device's powers (W), the
hops of its links as the energy and the checks see them (:class:`LinkHop`), and the
kind and owner of every trace actor (:func:`actor_kind`), kept as arrays for the
per-round columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sflsim.engine import Link


class LinkHop(NamedTuple):
    """One hop of a link as the energy and checks see it, recorded under ``actor``.

    Attributes:
        actor: the trace actor of its transfers (``client3:uplink``,
            ``ap:ap1:backhaul_up``).
        latency_s: one-way propagation latency after the last bit (s).
        shared: the hop's capacity is shared by the transfers in flight
            (:class:`~sflsim.network.shared.SharedLink`): a transfer's rate is not
            recorded.
        bandwidth_bps: the rate of a transfer sent alone (bit/s); NaN when it varies
            (a bandwidth trace, a shared hop).
        trace: the bandwidth trace of an unshared hop, else None.
        max_bps: the highest rate the hop can give one transfer (bit/s): its
            bandwidth, a trace's highest step, on a shared hop the lower of the
            capacity's and the sender's highest.
    """

    actor: str
    latency_s: float
    shared: bool
    bandwidth_bps: float
    trace: object | None
    max_bps: float


def _highest_bps(rate: object, fallback: float) -> float:
    """The highest value of a bandwidth trace (``bandwidth_bps`` steps), else ``fallback``."""
    steps = getattr(rate, "bandwidth_bps", None)
    return float(max(steps)) if isinstance(steps, (tuple, list)) and steps else float(fallback)


def link_hops(link: object) -> list[LinkHop]:
    """The hops of a client's link in one direction: a :class:`~sflsim.engine.Link`
    (one hop) or a :class:`~sflsim.network.topology.Path` (each of its hops); [] for
    anything else."""
    hops = getattr(link, "hops", None)
    if hops is None:
        return [_hop(link, None, None)] if hasattr(link, "latency_s") else []
    return [_hop(h.link, h.max_bps, h.actor) for h in hops]


def _hop(link: object, cap: object | None, actor: str | None) -> LinkHop:
    actor = actor or link.actor
    latency = float(link.latency_s)
    capacity = getattr(link, "capacity", None)
    if capacity is not None:  # a SharedLink: processor sharing, capped by the sender's rate
        top = _highest_bps(capacity, link.bandwidth_bps)
        if cap is not None:
            top = min(top, _highest_bps(cap, getattr(cap, "mean_bps", lambda: math.inf)()))
        return LinkHop(actor, latency, True, math.nan, None, top)
    trace = getattr(link, "trace", None)
    if trace is not None:
        return LinkHop(actor, latency, False, math.nan, trace,
                       _highest_bps(trace, link.bandwidth_bps))
    bw = float(link.bandwidth_bps)
    return LinkHop(actor, latency, False, bw, None, bw)


class ClientTable:
    """What the clients table says of each client every round, gathered once: ids, groups,
    profiles, domains, end layers, samples, each device's powers (W), the hops of its
    links (:func:`link_hops`) and the energy rules (:class:`~sflsim.config.schema.EnergyConfig`;
    None: the defaults)."""

    def __init__(self, clients: list, energy: object | None = None) -> None:
        self.ids = [c.client_id for c in clients]
        self.n = max(self.ids, default=-1) + 1
        self.group = [c.group for c in clients]
        self.profile = [c.device.name for c in clients]
        self.domain = [getattr(c, "domain", None) or "" for c in clients]
        self.end_layer = [c.end_layer for c in clients]
        self.samples = [len(c.indices) for c in clients]
        self.radio_on = getattr(energy, "radio_on", "serialisation")
        self.idle_draw = getattr(energy, "idle_draw", "participants")
        #: every hop of the clients' links by actor (:func:`link_hops`)
        self.hops: dict[str, LinkHop] = {}
        for c in clients:
            for link in (getattr(c, "uplink", None), getattr(c, "downlink", None)):
                if type(link) is Link and link.trace is None:  # most links: no lookups
                    bps = float(link.bandwidth_bps)
                    self.hops[link.actor] = LinkHop(link.actor, float(link.latency_s), False,
                                                    bps, None, bps)
                    continue
                for hop in link_hops(link):
                    self.hops[hop.actor] = hop
        #: every actor met so far -> its place in :attr:`actor_kinds`, and its
        #: :func:`actor_kind` there (also as two arrays: kinds, owners)
        self.actor_code: dict[str, int] = {}
        #: per categorical type of actor names met (by ``id``): (the type, its
        #: categories' codes), kept so a block's names are looked up once
        self.category_codes: dict[int, tuple[object, np.ndarray]] = {}
        self.actor_kinds: list[tuple[int, int]] = []
        self.kind_arrays: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64),) * 2
        #: per actor code: its hop (None: not a known link hop), and as arrays its
        #: latency (s, 0 if unknown), whether shared, and constant bandwidth (NaN if none)
        self.actor_hops: list[LinkHop | None] = []
        self.hop_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] = (
            np.zeros(0), np.zeros(0, bool), np.zeros(0))
        power = [(c.device.active_power_w.value, c.device.radio_tx_power_w.value,
                  c.device.radio_rx_power_w.value, c.device.idle_power_w.value) for c in clients]
        self.active_w, self.tx_w, self.rx_w, self.idle_w = (
            np.array(col, dtype=float) for col in zip(*power)) if power else (np.zeros(0),) * 4


def actor_kind(actor: str) -> tuple[int, int]:
    """(kind, owner) of an actor: kind 0 the server, 1 an uplink, 2 a downlink, 3 a
    client device's own compute (``"client<owner>"``), -1 anything else (access points);
    owner -2 but for kind 3."""
    if actor == "server":
        return 0, -2
    if actor.endswith(":uplink"):
        return 1, -2
    if actor.endswith(":downlink"):
        return 2, -2
    if actor.startswith("client") and actor[6:].isdigit():
        return 3, int(actor[6:])
    return -1, -2


def actor_codes(actors: Sequence[str], table: ClientTable) -> np.ndarray:
    """Per event, its actor's place in the table's per-actor lists; the table keeps every
    actor met so far. ``actors``: a list of names, or a ``pandas.Categorical`` (a
    booked round's block, :mod:`sflsim.execution.booked`), whose categories are
    looked up once per categorical type."""
    dtype = getattr(actors, "dtype", None)
    if dtype is not None and hasattr(actors, "codes"):
        lut = table.category_codes.get(id(dtype))
        if lut is None or lut[0] is not dtype:
            names = dtype.categories.tolist()
            lut = (dtype, _codes(names, table, ordered=True))
            table.category_codes[id(dtype)] = lut
        return lut[1][np.asarray(actors.codes)]
    return _codes(actors, table)


def _codes(actors: Sequence[str], table: ClientTable, ordered: bool = False) -> np.ndarray:
    """:func:`actor_codes` of a list of names; ``ordered``: the names are distinct, and
    new ones are registered in their order (else sorted)."""
    code = table.actor_code
    new = [a for a in actors if a not in code] if ordered else sorted(set(actors).difference(code))
    if new:
        code.update(zip(new, range(len(table.actor_kinds), len(table.actor_kinds) + len(new))))
        table.actor_kinds.extend(map(actor_kind, new))
        table.actor_hops.extend(map(table.hops.get, new))
        table.kind_arrays = tuple(np.array(col, dtype=np.int64)
                                  for col in zip(*table.actor_kinds))
        hops = table.actor_hops
        table.hop_arrays = (
            np.array([h.latency_s if h else 0.0 for h in hops], dtype=float),
            np.array([bool(h and h.shared) for h in hops], dtype=bool),
            np.array([h.bandwidth_bps if h else math.nan for h in hops], dtype=float))
    return np.fromiter(map(code.__getitem__, actors), dtype=np.int64, count=len(actors))
