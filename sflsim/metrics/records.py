"""Per-round and per-client records derived from the event trace, and energy.

Energy, per device and round, from the trace and the device profile's powers (W);
the rules are the scenario's ``energy`` section (:class:`sflsim.config.schema.EnergyConfig`):

- compute energy (``compute_energy_j``) = busy time (``compute_s``, the device's own
  compute activities) x active power;
- radio energy (``radio_energy_j``) = ``uplink_s`` x transmit power + ``downlink_s`` x
  receive power, drawn on top of whatever else the device draws (profiles state radio
  power that way, see ``device_profiles/README.md``). ``uplink_s`` (``downlink_s``) is
  the time the device's radio transmits (receives): the union of its transfers'
  on-intervals in that direction, so overlapping transfers count once. With
  ``radio_on: serialisation`` (default) a transfer's radio is on from its start until
  its last bit has left the device, its arrival minus the one-way latency of the hop
  recorded under the device's actor (the access hop on a shared access point). A
  transfer cut off (``cut_off``, a deadline or the device going offline) had sent its
  recorded bytes by its end: on the device's own link its radio was on until those
  bytes were serialised (to half a byte: they are rounded), or until the cut when that
  came first; on a shared access hop, whose share of the capacity is not recorded, until
  the cut. With ``radio_on: transfer`` the radio is on from the start until the
  arrival, latency included (still a union).
- idle energy (``idle_energy_j``) = ``idle_s`` x idle power, where ``idle_s`` is the
  time the device draws idle power while not computing: with ``idle_draw:
  participants`` (default) the round time for a device that takes part (status
  trained, late or over_committed), the time from the round's start to the end of its
  last activity for any other device that did work this round (one that went
  offline), 0 for one that did nothing (not sampled, dropped, offline at the start);
  ``all``: the round time for every device; ``none``: 0.

``energy_j`` is the sum of the three. Work cut off by a deadline is recorded up to the
cut (``cut_off``), so it counts as busy time. The defaults follow the energy model of
the federated-learning literature, which counts the energy of the work a device does
for training, computation plus transmission at transmit power for bits / rate (Yang et
al., "Energy Efficient Federated Learning Over Wireless Communication Networks", IEEE
Transactions on Wireless Communications 2021, arXiv:1911.02417; Tran et al.,
"Federated Learning over Wireless Networks: Optimization Model Design and Analysis",
IEEE INFOCOM 2019), plus idle power while a taking-part device waits in its round.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from sflsim.engine import TraceEvent


def mean_losses(losses: Iterable[tuple[str, int, float, int]]) -> dict[tuple[str, int], float]:
    """Sample-weighted mean training loss per ``(where, client_id)``, plus ``(where, -1)``
    over everything of that kind."""
    sums: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
    for where, cid, loss, n in losses:
        for key in ((where, cid), (where, -1)):
            sums[key][0] += loss * n
            sums[key][1] += n
    return {k: total / n for k, (total, n) in sums.items()}


#: a round's mean training loss this many times the lowest of an earlier round is noted
#: ("grows by orders of magnitude"): a run on its way to diverging while still finite
LOSS_GROWTH_FACTOR = 100.0


def loss_growth_note(earlier: list[dict], row: dict, factor: float = LOSS_GROWTH_FACTOR) -> str:
    """A note when ``row``'s ``client_loss`` or ``server_loss`` (nats) is at least ``factor``
    times the lowest value of that loss in the ``earlier`` rounds.csv rows, else ""."""
    notes = []
    for key in ("client_loss", "server_loss"):
        value = row.get(key, float("nan"))
        best = min(((r[key], r["round"]) for r in earlier
                    if math.isfinite(r.get(key, float("nan"))) and r[key] > 0), default=None)
        if best is not None and math.isfinite(value) and value >= factor * best[0]:
            notes.append(f"{key.replace('_', ' ')} {value:.3g} is {value / best[0]:.0f}x its "
                         f"round-{best[1]} low ({best[0]:.3g}): diverging? (lower the learning "
                         f"rate)")
    return "; ".join(notes)


@dataclass(frozen=True)
class LinkHop:
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
        self.hops: dict[str, LinkHop] = {
            hop.actor: hop for c in clients
            for link in (getattr(c, "uplink", None), getattr(c, "downlink", None))
            for hop in link_hops(link)}
        #: every actor met so far -> its place in :attr:`actor_kinds`, and its
        #: :func:`actor_kind` there (also as two arrays: kinds, owners)
        self.actor_code: dict[str, int] = {}
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


def _actor_codes(actors: list[str], table: ClientTable) -> np.ndarray:
    """Per event, its actor's place in the table's per-actor lists; the table keeps every
    actor met so far."""
    code = table.actor_code
    new = set(actors).difference(code)
    if new:
        for actor in sorted(new):
            code[actor] = len(table.actor_kinds)
            table.actor_kinds.append(actor_kind(actor))
            table.actor_hops.append(table.hops.get(actor))
        table.kind_arrays = tuple(np.array(col, dtype=np.int64)
                                  for col in zip(*table.actor_kinds))
        hops = table.actor_hops
        table.hop_arrays = (
            np.array([h.latency_s if h else 0.0 for h in hops], dtype=float),
            np.array([bool(h and h.shared) for h in hops], dtype=bool),
            np.array([h.bandwidth_bps if h else math.nan for h in hops], dtype=float))
    return np.fromiter(map(code.__getitem__, actors), dtype=np.int64, count=len(actors))


def radio_on_until(events: dict[str, list], table: ClientTable, radio_on: str | None = None,
                   cut_shared: str = "cut", codes: np.ndarray | None = None) -> np.ndarray:
    """Per event, when its sender's radio stops drawing power for it (s): the end of its
    serialisation (``radio_on="serialisation"``: arrival minus the hop's latency; a
    cut-off transfer as the module docstring says) or its end (``"transfer"``, and every
    event that is no transfer over a known hop). Never before its start.

    ``cut_shared``: for a transfer cut off on a shared hop, ``"cut"`` takes the cut (an
    upper bound, the energy rule), ``"least"`` the least time its bytes could have taken
    at the hop's highest rate (a lower bound, for the overlap check). ``codes``: the
    events' actor codes, if known already.
    """
    radio_on = radio_on or table.radio_on
    start = np.asarray(events["start_s"], dtype=float)
    end = np.asarray(events["end_s"], dtype=float)
    until = end.copy()
    if radio_on == "transfer" or not len(end):
        return until
    if codes is None:
        codes = _actor_codes(events["actor"], table)
    latency, shared, bandwidth = (a[codes] for a in table.hop_arrays)
    cut = np.asarray(events["cut_off"], dtype=bool)
    whole = ~cut & (latency > 0)
    until[whole] = end[whole] - latency[whole]
    payload = np.asarray(events["payload_bytes"], dtype=float)
    fixed = cut & ~shared & np.isfinite(bandwidth)
    until[fixed] = np.minimum(end[fixed], start[fixed] + 8.0 * payload[fixed] / bandwidth[fixed])
    for i in np.flatnonzero(cut & ~fixed):  # traced own links, shared hops: few (cut-offs)
        hop = table.actor_hops[codes[i]]
        if hop is None:
            continue
        if hop.shared:
            if cut_shared == "least":
                until[i] = min(end[i], start[i] + 8.0 * payload[i] / hop.max_bps)
        else:
            until[i] = min(end[i], hop.trace.finish_time(start[i], 8.0 * payload[i]))
    return np.maximum(until, start)


def union_per_client(mask: np.ndarray, client: np.ndarray, start: np.ndarray,
                     end: np.ndarray, n: int) -> np.ndarray:
    """Per client id ``0..n-1``, the length (s) of the union of the intervals
    ``[start, end)`` of the events in ``mask`` (overlaps counted once)."""
    m = mask & (client >= 0)
    if not m.any():
        return np.zeros(n)
    c, s, e = client[m], start[m], end[m]
    order = np.lexsort((s, c))
    c, s, e = c[order], s[order], e[order]
    # the latest end so far within each client's run: a running maximum that restarts
    # at each client, on integer ranks of the ends offset by the client's run (exact)
    k = len(e)
    by_end = np.argsort(e, kind="stable")
    rank = np.empty(k, dtype=np.int64)
    rank[by_end] = np.arange(k)
    new = np.r_[True, c[1:] != c[:-1]]
    run = np.cumsum(new) - 1
    latest = e[by_end[np.maximum.accumulate(run * k + rank) - run * k]]
    before = np.r_[-np.inf, latest[:-1]]
    before[new] = -np.inf
    covered = np.maximum(0.0, e - np.maximum(s, before))
    return np.bincount(c, weights=covered, minlength=n)


#: statuses of a device that takes part in the round to its end (``idle_draw: participants``)
TAKING_PART = ("trained", "late", "over_committed")


def client_round_columns(
    round_: int, events: dict[str, list], table: ClientTable, round_start_s: float,
    round_end_s: float, accuracies: dict[int, tuple[float, float]] | None,
    losses: dict[tuple[str, int], float] | None = None, cuts: dict[int, int] | None = None,
    activated_params: dict[int, int] | None = None, status: dict[int, str] | None = None,
    slowdowns: dict[int, float] | None = None,
) -> dict[str, list | np.ndarray]:
    """The clients table's rows of ``round_`` as columns (one entry per client of ``table``):
    cut layer used this round, times (s), bytes, FLOPs, energy (J) by part (rules: the
    module docstring), losses and accuracy, and the round's conditions: ``status``
    ("trained", "dropped", "late":
    cut off by the deadline, its unfinished work discarded, "offline": offline at the
    start or gone offline during the round, "not_sampled", or "over_committed": drawn but
    stopped when enough others had finished) and ``slowdown`` (compute
    took that many times longer).

    Args:
        events: the round's trace as columns (:meth:`sflsim.engine.Trace.columns`).
    """
    n, ids = table.n, table.ids
    cid = np.asarray(events["client_id"], dtype=np.int64)
    codes = _actor_codes(events["actor"], table)
    kind, owner = (a[codes] for a in table.kind_arrays)
    start = np.asarray(events["start_s"], dtype=float)
    end = np.asarray(events["end_s"], dtype=float)
    span = end - start
    ok = cid >= 0

    def per_client(mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
        m = mask & ok
        return np.bincount(cid[m], weights=weights[m], minlength=n)[ids] if n else np.zeros(0)

    payload = np.asarray(events["payload_bytes"], dtype=float)
    compute_mask = (kind == 3) & (owner == cid)
    compute = per_client(compute_mask, span)
    flops = per_client(compute_mask, np.asarray(events["flops"], dtype=float))
    radio_end = radio_on_until(events, table, codes=codes) if n else end
    up = union_per_client(kind == 1, cid, start, radio_end, n)[ids] if n else np.zeros(0)
    down = union_per_client(kind == 2, cid, start, radio_end, n)[ids] if n else np.zeros(0)
    up_bytes = per_client(kind == 1, payload).astype(np.int64)
    down_bytes = per_client(kind == 2, payload).astype(np.int64)
    queue = per_client(kind == 0, np.asarray(events["queue_s"], dtype=float))
    accuracies, losses, cuts = accuracies or {}, losses or {}, cuts or {}
    status, slowdowns, activated_params = status or {}, slowdowns or {}, activated_params or {}

    def per(values: dict, default: object, transform=None) -> list:
        if not values:  # nothing recorded this round (timing-only runs): one constant
            return [default] * len(ids)
        got = [values.get(i, default) for i in ids]
        return got if transform is None else [transform(v) for v in got]

    statuses = per(status, "trained")
    idle = _idle_s(table, statuses, cid, end, round_start_s, round_end_s) - compute
    idle = np.maximum(0.0, idle)
    compute_j = compute * table.active_w
    radio_j = up * table.tx_w + down * table.rx_w
    idle_j = idle * table.idle_w
    nan = float("nan")
    accs = [accuracies.get(i, (nan, nan)) for i in ids] if accuracies else None
    return {
        "round": [round_] * len(ids), "client_id": ids, "group": table.group,
        "profile": table.profile, "domain": table.domain, "end_layer": table.end_layer,
        "cut_layer": [cuts.get(i, e) for i, e in zip(ids, table.end_layer)] if cuts
        else table.end_layer,
        "samples": table.samples,
        "status": statuses,
        "slowdown": per(slowdowns, 1.0),
        "activated_params": per(activated_params, 0),
        "compute_s": compute, "uplink_s": up, "downlink_s": down, "idle_s": idle,
        "server_queue_s": queue, "client_flops": flops,
        "bytes_up": up_bytes, "bytes_down": down_bytes,
        "energy_j": compute_j + radio_j + idle_j, "compute_energy_j": compute_j,
        "radio_energy_j": radio_j, "idle_energy_j": idle_j,
        "client_loss": [losses.get(("client", i), nan) for i in ids] if losses else [nan] * len(ids),
        "server_loss": [losses.get(("server", i), nan) for i in ids] if losses else [nan] * len(ids),
        "server_accuracy": [fraction(a[0]) for a in accs] if accs else [nan] * len(ids),
        "client_accuracy": [fraction(a[1]) for a in accs] if accs else [nan] * len(ids),
    }


def _idle_s(table: ClientTable, statuses: list[str], cid: np.ndarray, end: np.ndarray,
            round_start_s: float, round_end_s: float) -> np.ndarray:
    """Per client of ``table``, the time (s) in which it draws power while the round lasts
    (idle power while not computing): the round for every device (``idle_draw: all``),
    none (``none``), or (``participants``) the round for a device that takes part, the
    time to its last activity's end for another that did some work, else 0."""
    ids, round_s = table.ids, round_end_s - round_start_s
    if table.idle_draw == "all":
        return np.full(len(ids), round_s)
    if table.idle_draw == "none":
        return np.zeros(len(ids))
    last = np.full(table.n, round_start_s)
    ok = cid >= 0
    if ok.any():
        np.maximum.at(last, cid[ok], end[ok])
    window = last[ids] - round_start_s if table.n else np.zeros(0)
    part = np.array([s in TAKING_PART for s in statuses], dtype=bool)
    return np.where(part, round_s, np.minimum(window, round_s))


def client_round_rows(round_: int, events: Iterable[TraceEvent], clients: list,
                      round_start_s: float, round_end_s: float,
                      accuracies: dict[int, tuple[float, float]] | None, *,
                      energy: object | None = None, **kwargs) -> list[dict]:
    """:func:`client_round_columns` as one dict per client, from events as
    :class:`~sflsim.engine.TraceEvent` (``energy``: the scenario's energy rules, None the
    defaults; other keyword arguments as there)."""
    events = list(events)
    cols = {f: [getattr(e, f) for e in events] for f in TraceEvent._fields}
    columns = client_round_columns(round_, cols, ClientTable(clients, energy), round_start_s,
                                   round_end_s, accuracies, **kwargs)
    return rows_of(columns)


def rows_of(columns: dict[str, list | np.ndarray]) -> list[dict]:
    """Columns as one dict per row (NumPy numbers as Python ones)."""
    names = list(columns)
    lists = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in columns.values()]
    return [dict(zip(names, values)) for values in zip(*lists)]


def round_row(
    round_: int, events: dict[str, list] | Iterable[TraceEvent],
    clients: dict[str, list | np.ndarray] | list[dict], round_start_s: float,
    round_end_s: float, wall_time_s: float, accuracies: dict[int, tuple[float, float]] | None,
    end_layers: dict[int, int], losses: dict[tuple[str, int], float] | None = None,
) -> dict:
    """The ``rounds.csv`` row: simulated/wall time (s), accuracies, mean training losses
    (cross-entropy, nats), bytes, FLOPs, energy (J).

    ``events`` is the round's trace as columns (:meth:`sflsim.engine.Trace.columns`) or
    as :class:`~sflsim.engine.TraceEvent`; ``clients`` its clients-table rows as
    columns (:func:`client_round_columns`) or as dicts.

    ``server_accuracy`` and ``client_accuracy`` are means over clients;
    ``server_accuracy_l<k>`` and ``client_accuracy_l<k>`` are means over the
    clients at end layer ``k`` (paper Table IV), rounded by :func:`fraction`. NaN in
    rounds without evaluation.
    ``server_queue_mean_s`` / ``server_queue_max_s`` summarise the wait for a server
    slot of the round's ``server_jobs`` jobs (each job's wait is ``queue_s`` in the event trace).
    ``clients_trained`` / ``clients_dropped`` / ``clients_late`` / ``clients_offline`` /
    ``clients_not_sampled`` / ``clients_over_committed`` count the clients' statuses;
    ``note`` says why a round is special ("every client dropped", "deadline: N late",
    "untrained model" for round 0, the evaluation before training; the runner adds
    :func:`loss_growth_note`), else "".
    """
    if not isinstance(events, dict):
        events = list(events)
        events = {f: [getattr(e, f) for e in events] for f in TraceEvent._fields}
    if isinstance(clients, list):
        clients = {k: [r[k] for r in clients] for k in (clients[0] if clients else ())}

    def col(name: str) -> list:
        values = clients.get(name, [])
        return values.tolist() if isinstance(values, np.ndarray) else list(values)

    statuses = col("status")
    counts = {k: statuses.count(k) for k in ("trained", "dropped", "late", "offline",
                                              "not_sampled", "over_committed")}
    notes = ["untrained model"] if round_ == 0 else []
    if statuses and counts["dropped"] == len(statuses):
        notes.append("every client dropped")
    elif statuses and counts["trained"] + counts["late"] == 0 and round_ != 0:
        notes.append("no client took part")
    if counts["late"]:
        notes.append(f"deadline: {counts['late']} late")
    if counts["offline"]:
        notes.append(f"{counts['offline']} offline")
    server = [i for i, a in enumerate(events["actor"]) if a == "server"]
    s_flops = [events["flops"][i] for i in server]
    s_busy = [events["end_s"][i] - events["start_s"][i] for i in server]
    s_queue = [events["queue_s"][i] for i in server]
    client_flops = col("client_flops")
    row: dict = {
        "round": round_,
        "sim_time_s": round_end_s,
        "round_time_s": round_end_s - round_start_s,
        "wall_time_s": wall_time_s,
        "server_accuracy": float("nan"),
        "client_accuracy": float("nan"),
        "client_loss": (losses or {}).get(("client", -1), float("nan")),
        "server_loss": (losses or {}).get(("server", -1), float("nan")),
        "bytes_up": sum(col("bytes_up")),
        "bytes_down": sum(col("bytes_down")),
        "client_flops": sum(client_flops),
        "client_flops_mean": _mean(client_flops),
        "activated_params_mean": _mean(col("activated_params")),
        "server_flops": sum(s_flops),
        "server_busy_s": sum(s_busy),
        "server_queue_mean_s": sum(s_queue) / len(s_queue) if s_queue else 0.0,
        "server_queue_max_s": max(s_queue, default=0.0),
        "server_jobs": len(server),
        "client_energy_j": sum(col("energy_j")),
        "client_compute_energy_j": sum(col("compute_energy_j")),
        "client_radio_energy_j": sum(col("radio_energy_j")),
        "client_idle_energy_j": sum(col("idle_energy_j")),
        "clients_trained": counts["trained"],
        "clients_dropped": counts["dropped"],
        "clients_late": counts["late"],
        "clients_offline": counts["offline"],
        "clients_not_sampled": counts["not_sampled"],
        "clients_over_committed": counts["over_committed"],
        "note": "; ".join(notes),
    }
    layers = sorted(set(end_layers.values()))
    for layer in layers:
        row[f"server_accuracy_l{layer}"] = float("nan")
        row[f"client_accuracy_l{layer}"] = float("nan")
    if accuracies:  # means over clients, without float noise (fraction)
        row["server_accuracy"] = fraction(_mean(a[0] for a in accuracies.values()))
        row["client_accuracy"] = fraction(_mean(a[1] for a in accuracies.values()))
        for layer in layers:
            accs = [a for cid, a in accuracies.items() if end_layers[cid] == layer]
            row[f"server_accuracy_l{layer}"] = fraction(_mean(a[0] for a in accs))
            row[f"client_accuracy_l{layer}"] = fraction(_mean(a[1] for a in accs))
    return row


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else float("nan")


#: decimals that :func:`fraction` keeps
FRACTION_DECIMALS = 10


def fraction(value: float) -> float:
    """A fraction in [0, 1] (an accuracy, a share of clients) as written to the result
    files: rounded to :data:`FRACTION_DECIMALS` decimals, which drops the float noise of a
    mean (``0.7775000000000001`` is written ``0.7775``) and is far finer than any
    accuracy's resolution (one test sample in 10^5 is 1e-5). NaN stays NaN."""
    return round(value, FRACTION_DECIMALS)


def percent(value: float) -> float:
    """A fraction as a percentage, as precise as :func:`fraction` and as free of float
    noise (``100 * 0.57`` is ``56.99999999999999``; this gives ``57.0``)."""
    return round(100 * value, FRACTION_DECIMALS - 2)
