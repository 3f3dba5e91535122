"""Energy, per device and round, from the trace and the device profile's powers (W);
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

import numpy as np

from sflsim.metrics.client_table import ClientTable, actor_codes


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
        codes = actor_codes(events["actor"], table)
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


def idle_s(table: ClientTable, statuses: list[str], cid: np.ndarray, end: np.ndarray,
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
