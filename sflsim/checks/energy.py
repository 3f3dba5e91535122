"""Each client row's times, FLOPs, bytes and energy, worked out again from the events.

With the check's own arithmetic (not the writer's functions), per client and round:
``compute_s`` is the time its device computed (its compute events), ``uplink_s``
(``downlink_s``) the union of the intervals its radio was on in that direction
(``energy.radio_on: serialisation``: from a transfer's start until its last bit left,
its end minus the hop's latency; a cut-off one until its recorded bytes were sent on
its own link, or until the cut on a shared hop; ``transfer``: until its end),
``idle_s`` the time it drew idle power while not computing (``energy.idle_draw``:
``participants``, the round for a client that took part and until its last activity
for one that went offline; ``all``, the round; ``none``), ``client_flops`` and the
bytes the sums of its events; then each energy is its time times the profile's power
(active, transmit, receive, idle; W) and ``energy_j`` their sum. Each also stays
within its power times the round time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import COMPUTE, DOWNLINK, UPLINK, Run, radio_until
from sflsim.checks.report import at_most, close, g

#: statuses of a client that takes part in the round to its end
TAKING_PART = ("trained", "late", "over_committed")
TIMES = ("compute_s", "uplink_s", "downlink_s", "idle_s")
ENERGIES = ("compute_energy_j", "radio_energy_j", "idle_energy_j", "energy_j")


def check_client_rows(run: Run) -> None:
    """Every clients-table row against its events and its device's powers."""
    clients = run.clients
    if not len(clients):
        return
    want = _recompute(run)
    rows = clients.reset_index(drop=True)
    keys = list(zip(rows["round"].astype(int), rows["client_id"].astype(int)))
    span = np.array([_span(run, r) for r, _ in keys])
    end = np.array([run.bounds.get(r, (0.0, 0.0))[1] for r, _ in keys])
    count = np.array([want["events"].get(k, 0) for k in keys], dtype=float)
    scale = np.abs(end) * (count + 1.0)
    dev = [run.hw.devices[c] for _, c in keys]
    power = {"compute_energy_j": np.array([d.active_w for d in dev]),
             "radio_energy_j": np.array([d.tx_w + d.rx_w for d in dev]),
             "idle_energy_j": np.array([d.idle_w for d in dev])}
    peak = np.array([max(d.active_w, d.idle_w) + d.tx_w + d.rx_w for d in dev])
    power["energy_j"] = peak
    for name in (*TIMES, "client_flops", "bytes_up", "bytes_down", *ENERGIES):
        if name not in rows:
            continue
        have = rows[name].to_numpy(dtype=float)
        expect = np.array([want[name].get(k, 0.0) for k in keys])
        tol = scale * (power[name] if name in power else 1.0) if name.endswith(("_s", "_j")) \
            else 0.0
        for k in np.flatnonzero(~close(have, expect, tol)):
            r, c = keys[k]
            source = dev[k].source if name in ENERGIES else f"{name} column"
            run.add("clients", r, f"client {c}", f"{name} {g(have[k])}, but its events in "
                    f"{run.names['events']} and {dev[k].profile}'s powers give {g(expect[k])}"
                    if name in ENERGIES else f"{name} {g(have[k])}, but its events in "
                    f"{run.names['events']} give {g(expect[k])}", source)
        bound = span * (power[name] if name in ENERGIES else 1.0) if name in (*TIMES,
                                                                            *ENERGIES) else None
        if bound is not None:
            for k in np.flatnonzero(~at_most(have, bound, tol) | (have < -tol - 1e-9)):
                r, c = keys[k]
                what = "the round time" if name in TIMES else "its power x the round time"
                run.add("clients", r, f"client {c}", f"{name} {g(have[k])} exceeds {what}, "
                        f"{g(bound[k])} (round time {g(span[k])} s)",
                        dev[k].source if name in ENERGIES else f"{name} column")


def _span(run: Run, r: int) -> float:
    start, end = run.bounds.get(r, (0.0, 0.0))
    return end - start


def _recompute(run: Run) -> dict[str, dict]:
    """Per (round, client): each column of :data:`TIMES`, FLOPs, bytes and energy."""
    energy = run.scenario.energy
    rule = getattr(energy, "radio_on", "serialisation")
    draw = getattr(energy, "idle_draw", "participants")
    out: dict[str, dict] = {k: {} for k in (*TIMES, "client_flops", "bytes_up", "bytes_down",
                                            *ENERGIES, "events")}
    compute = (run.kind == COMPUTE) & (run.owner == run.cid)
    radio = {UPLINK: run.kind == UPLINK, DOWNLINK: run.kind == DOWNLINK}
    until = run.end.copy()
    for mask in radio.values():
        until[mask] = radio_until(run, mask, rule, "cut")
    frame = pd.DataFrame({"r": run.rnd, "c": run.cid, "o": run.owner, "k": run.kind,
                          "s": run.start, "e": run.end, "u": until, "f": run.flops,
                          "b": run.payload, "m": compute})
    last = frame[frame["c"] >= 0].groupby(["r", "c"])["e"].max().to_dict()
    out["events"] = frame[frame["c"] >= 0].groupby(["r", "c"]).size().to_dict()
    busy = frame[frame["m"]].assign(d=lambda f: f["e"] - f["s"]).groupby(["r", "o"])
    compute_s, flops = busy["d"].sum().to_dict(), busy["f"].sum().to_dict()
    on = {}
    for kind, name in ((UPLINK, "uplink_s"), (DOWNLINK, "downlink_s")):
        sub = frame[frame["k"] == kind]
        on[name] = {key: _union(g_["s"].to_numpy(), g_["u"].to_numpy())
                    for key, g_ in sub.groupby(["r", "o"])}
        out["bytes_up" if kind == UPLINK else "bytes_down"] = \
            sub.groupby(["r", "o"])["b"].sum().to_dict()
    for (r, c), status in run.status.items():
        d = run.device(c)
        if d is None or r not in run.bounds:
            continue
        start, span = run.bounds[r][0], _span(run, r)
        cs = compute_s.get((r, c), 0.0)
        if draw == "all":
            window = span
        elif draw == "none":
            window = 0.0
        elif status in TAKING_PART:
            window = span
        else:
            window = min(last[r, c] - start, span) if (r, c) in last else 0.0
        idle = max(0.0, window - cs)
        up, down = on["uplink_s"].get((r, c), 0.0), on["downlink_s"].get((r, c), 0.0)
        parts = (cs * d.active_w, up * d.tx_w + down * d.rx_w, idle * d.idle_w)
        values = {"compute_s": cs, "uplink_s": up, "downlink_s": down, "idle_s": idle,
                  "client_flops": flops.get((r, c), 0.0), "compute_energy_j": parts[0],
                  "radio_energy_j": parts[1], "idle_energy_j": parts[2],
                  "energy_j": parts[0] + parts[1] + parts[2]}
        for name, value in values.items():
            out[name][r, c] = value
    return out


def _union(start: np.ndarray, end: np.ndarray) -> float:
    """Length (s) of the union of the intervals ``[start, end)``."""
    order = np.argsort(start, kind="stable")
    total, reach = 0.0, -np.inf
    for s, e in zip(start[order], end[order]):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total
