"""Every transfer takes the time its bits take on its hop.

- **A device's own link** (star topology, a fleet row): a transfer sends its bits one
  after another at the link's rate (a bandwidth trace's steps, integrated), then the
  latency follows: it lasts exactly its bits over the rate plus the latency. One cut
  off sent its recorded bytes (rounded: half a byte of slack) by the cut, and was
  either still sending then or was cut in its latency.
- **A shared hop** (an access point's medium, a backhaul): the capacity is divided
  max-min fairly among the transfers in flight, each capped at its device's own rate;
  replayed here from the recorded starts and ends, each transfer must have received
  exactly its bits by its last bit (its end minus the hop's latency), and one cut off
  at least its recorded bytes by the cut.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import Run
from sflsim.checks.hardware import Hop, SharedCapacity
from sflsim.checks.report import close, g

#: bits of slack for a cut-off transfer's recorded bytes (rounded to whole bytes)
ROUNDED_BITS = 4.0
#: transfers of one shared hop beyond which only the bound by its highest rate is checked
MAX_REPLAYED = 20000


def check_transfers(run: Run) -> None:
    """Own links exactly; shared hops by replaying their fair shares."""
    hops = pd.Series(run.actor).map(run.hw.hops).tolist()
    shared: dict[str, tuple[SharedCapacity, list[int]]] = {}
    steady = np.zeros(len(hops), bool)  # uncut, on an own link of one rate: checked at once
    rate, latency = np.full(len(hops), np.nan), np.zeros(len(hops))
    for i, hop in enumerate(hops):
        if not isinstance(hop, Hop):
            continue
        if hop.shared is not None:
            shared.setdefault(hop.shared.name, (hop.shared, []))[1].append(i)
        elif run.cut[i] or hop.own.varies:
            _own_link(run, i, hop)
        else:
            steady[i], rate[i], latency[i] = True, hop.own.bps[0], hop.latency_s
    took = run.end - run.start
    with np.errstate(invalid="ignore", divide="ignore"):
        want = 8.0 * run.payload / rate + latency
    for i in np.flatnonzero(steady & ~close(took, want, run.scale)):
        _own_link(run, int(i), hops[i])
    for capacity, rows in shared.values():
        rows = np.asarray(rows)
        if len(rows) > MAX_REPLAYED:
            _bound_only(run, rows)
            continue
        for r in sorted(set(run.rnd[rows].tolist())):
            _replay(run, capacity, rows[run.rnd[rows] == r])


def _own_link(run: Run, i: int, hop) -> None:
    bits = 8.0 * run.payload[i]
    start, end, scale = run.start[i], run.end[i], run.scale[i]
    sent = hop.own.finish(start, bits)
    if not run.cut[i]:
        want = sent + hop.latency_s
        if not close(end - start, want - start, scale):
            run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} of "
                    f"{int(run.payload[i])} bytes took {g(end - start)} s, but its bits at the "
                    f"hop's highest rate {_rate(hop.own)} take {g(sent - start)} s plus its "
                    f"latency {g(hop.latency_s)} s: {g(want - start)} s", hop.source)
        return
    could = hop.own.bits(start, end)  # bits the link could send by the cut
    rate_top = hop.own.top
    tol = ROUNDED_BITS + rate_top * 1e-12 * scale + 1e-9 * bits
    if bits > could + tol:
        run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} cut off after "
                f"{g(end - start)} s claims {int(run.payload[i])} bytes sent, but the link "
                f"({_rate(hop.own)}) sends at most {g(could / 8)} bytes in that time",
                hop.source)
    elif bits < could - tol and not end <= sent + hop.latency_s + 1e-9 * bits / rate_top \
            + 1e-12 * scale:
        run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} cut off at "
                f"{g(end)} s sent {int(run.payload[i])} bytes, but by then the link at "
                f"{_rate(hop.own)} had sent {g(could / 8)} bytes and, had it sent no more, "
                f"its last bit would have arrived at {g(sent + hop.latency_s)} s",
                hop.source)


def _rate(steps) -> str:
    return f"{g(steps.bps[0])} bit/s" if not steps.varies else \
        f"{g(steps.top)} bit/s (its bandwidth trace)"


def _bound_only(run: Run, rows: np.ndarray) -> None:
    """A transfer lasts at least its bits at the highest rate its hop can give."""
    for i in rows:
        hop = run.hw.hops[run.actor[i]]
        bits = 8.0 * run.payload[i]
        need = (max(bits - ROUNDED_BITS, 0.0) / hop.top if run.cut[i]
                else bits / hop.top + hop.latency_s)
        took = run.end[i] - run.start[i]
        if not took >= need - 1e-9 * need - 1e-12 * run.scale[i] - 1e-9:
            run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} of "
                    f"{int(run.payload[i])} bytes took {g(took)} s, less than {g(need)} s: its "
                    f"bits at the hop's highest rate {g(hop.top)} bit/s", hop.source)


def _replay(run: Run, capacity: SharedCapacity, rows: np.ndarray) -> None:
    """Replay the fair shares of ``capacity`` among the transfers ``rows`` (one round):
    each is in flight from its start until its last bit (uncut: the end minus the
    latency; cut off: until the cut, or, if its recorded bits were all sent well before
    it, until they were: it was cut in its latency)."""
    start, bits, cut = run.start[rows], 8.0 * run.payload[rows], run.cut[rows]
    leave = np.where(cut, run.end[rows], run.end[rows] - capacity.latency_s)
    caps = [run.hw.hops[a].own for a in run.actor[rows]]
    steady = not any(c.varies for c in caps)
    cap_now = np.array([c.bps[0] for c in caps]) if steady else None
    got = np.zeros(len(rows))
    done = np.zeros(len(rows), bool)  # left the hop
    to_cut = ~cut  # cut-off transfers still sending at their cut (uncut ones: at their end)
    left_at = np.full(len(rows), np.nan)
    points = np.unique(np.r_[start, leave])
    t = float(points[0]) if len(points) else 0.0
    horizon = float(points[-1]) if len(points) else 0.0
    while t < horizon:
        active = np.flatnonzero((start <= t) & ~done)
        nxt = float(points[min(np.searchsorted(points, t, side="right"), len(points) - 1)])
        nxt = min(nxt, capacity.capacity.next_after(t))
        if steady:
            cap = cap_now[active]
        else:
            cap = np.array([caps[k].at(t) for k in active])
            nxt = min([nxt] + [caps[k].next_after(t) for k in active])
        rate = _fair(capacity.capacity.at(t), cap)
        sending = ~to_cut[active] & (rate > 0) & (got[active] < bits[active])
        if sending.any():  # when a cut-off one has sent its recorded bits
            k = active[sending]
            nxt = min(nxt, float(np.min(t + (bits[k] - got[k]) / rate[sending])))
        nxt = max(nxt, float(np.nextafter(t, np.inf)))  # always a step forward
        got[active] += rate * (nxt - t)
        t = nxt
        gone = t >= leave[active]
        sent = ~gone & ~to_cut[active] & (got[active] >= bits[active] * (1 - 1e-12) - 1e-6)
        # all its bits sent: gone now, unless the cut comes before it could have sent the
        # half byte its count was rounded by (it was sending then)
        early = sent & (rate > 0) & (t + ROUNDED_BITS / np.where(rate > 0, rate, 1.0)
                                     < leave[active])
        done[active[gone | early]] = True
        left_at[active[gone | early]] = t
        to_cut[active[sent & ~early]] = True
    _judge(run, capacity, rows, got, bits, cut, leave, left_at)


def _fair(capacity: float, caps: np.ndarray) -> np.ndarray:
    """Max-min fair shares of ``capacity`` among transfers capped at ``caps``: each gets
    the lower of its cap and the level at which the shares use the capacity up."""
    n = len(caps)
    if not n:
        return caps
    order = np.argsort(caps, kind="stable")
    c = caps[order]
    below = np.r_[0.0, np.cumsum(c)[:-1]]  # capacity the smaller caps take
    level = (capacity - below) / (n - np.arange(n))
    k = np.flatnonzero(c >= level)
    rates = c.copy()
    if len(k):
        rates[k[0]:] = level[k[0]]
    out = np.empty(n)
    out[order] = rates
    return out


def _judge(run: Run, capacity: SharedCapacity, rows: np.ndarray, got: np.ndarray,
           bits: np.ndarray, cut: np.ndarray, leave: np.ndarray, left_at: np.ndarray) -> None:
    top = capacity.capacity.top
    for k, i in enumerate(rows):
        if cut[k] and math.isfinite(left_at[k]):
            run.last_bit[int(i)] = float(left_at[k])
        tol = ROUNDED_BITS * 2 + 1e-9 * bits[k] + top * 1e-12 * run.scale[i] \
            + top * 1e-9 * max(run.end[i] - run.start[i], 0.0)
        who = (int(run.rnd[i]), run.actor[i])
        if not cut[k] and abs(got[k] - bits[k]) > tol:
            faster = got[k] < bits[k]
            run.add("events", *who, f"{run.activity[i]} of {int(run.payload[i])} bytes sent its "
                    f"last bit at {g(leave[k])} s, but its fair share of the {capacity.name} "
                    f"({_rate(capacity.capacity)}, shared by the transfers in flight) carried "
                    f"{g(got[k] / 8)} bytes by then: the transfer is "
                    f"{'faster' if faster else 'slower'} than its hop allows", capacity.source)
        elif cut[k] and got[k] < bits[k] - tol:
            run.add("events", *who, f"{run.activity[i]} cut off at {g(run.end[i])} s claims "
                    f"{int(run.payload[i])} bytes sent, but its fair share of the "
                    f"{capacity.name} carried {g(got[k] / 8)} bytes by then", capacity.source)
        elif cut[k] and math.isfinite(left_at[k]) and left_at[k] < run.end[i] - 1e-9 \
                and run.end[i] > left_at[k] + capacity.latency_s + tol / top:
            run.add("events", *who, f"{run.activity[i]} cut off at {g(run.end[i])} s had sent "
                    f"its {int(run.payload[i])} bytes by {g(left_at[k])} s, so its last bit "
                    f"arrived at {g(left_at[k] + capacity.latency_s)} s, before the cut",
                    capacity.source)
