"""Every compute and server job takes the time its work takes on its hardware.

A device's compute activity (actor ``client<i>``) of ``F`` FLOPs takes ``F x slowdown /
R`` seconds: ``R`` the device's sustained FLOP/s (its profile's ``sustained_flops``, a
fleet row's figure; under ``hardware.cost_model: operators``, for a profile with
``operator_costs``, the cost model's rate of a whole-model training step), the
slowdown the clients table gives the client that round (stragglers; 1 otherwise).
A step the run times from a measured ``stage_latency`` table of the profile, or from
the cost model by operation, takes the time that table or model gives for its stages
and batch (:mod:`sflsim.checks.stage_times`). A server job of ``F`` FLOPs takes ``F`` over the
server profile's sustained FLOP/s. A job cut off part-way has done its FLOPs pro rata,
so the same rates hold for the part done.
"""

from __future__ import annotations

import numpy as np

from sflsim.checks.checked_run import COMPUTE, SERVER, Run
from sflsim.checks.report import close, g


def check_compute(run: Run) -> None:
    """Client compute and server jobs against their FLOPs and rates."""
    _check_server(run)
    idx = np.flatnonzero((run.kind == COMPUTE) & ((run.end > run.start) | (run.flops != 0)))
    if not len(idx):
        return
    sigma = float(getattr(run.scenario.conditions, "straggler_sigma", 0.0) or 0.0)
    rates = _rates(run)
    took = run.end[idx] - run.start[idx]
    owner = run.owner[idx]
    slow = np.array([run.slowdown.get((int(r), int(c)), 1.0) for r, c in
                     zip(run.rnd[idx], owner)], dtype=float)
    if sigma == 0.0:
        _check_no_stragglers(run, idx, slow)
    rate = rates[owner]
    want = run.flops[idx] * slow / rate
    ok = close(took, want, run.scale[idx]) | ~np.isfinite(want)
    from sflsim.checks.stage_times import StageTimes

    tables = StageTimes.for_run(run)
    for k in np.flatnonzero(~ok):
        i = int(idx[k])
        if tables is not None and tables.explains(i, took[k], slow[k]):
            continue
        device = run.device(int(owner[k]))
        run.add("events", int(run.rnd[i]), run.actor[i],
                f"{run.activity[i]} took {g(took[k])} s for {g(run.flops[i])} FLOPs, but at "
                f"{device.profile}'s {g(rate[k])} FLOP/s and slowdown {g(slow[k])} they take "
                f"{g(want[k])} s" + (tables.why(i) if tables is not None else ""),
                device.source)
    _check_unknown_rates(run, idx, rates, took, slow)


def _rates(run: Run) -> np.ndarray:
    """Per client, the FLOP/s its FLOPs-rule steps run at (NaN: not known here)."""
    rates = np.array([d.rate_flops for d in run.hw.devices] + [np.nan], dtype=float)
    if run.hw.cost_model == "operators" and any(d.operator_costs is not None
                                                for d in run.hw.devices):
        from sflsim.checks.stage_times import operator_rates

        for cid, rate in operator_rates(run).items():
            rates[cid] = rate
    return rates


def _check_no_stragglers(run: Run, idx: np.ndarray, slow: np.ndarray) -> None:
    """Without stragglers (``conditions.straggler_sigma: 0``) every slowdown is 1."""
    bad = sorted({(int(run.rnd[i]), int(run.owner[i])) for i, s in zip(idx, slow)
                  if not close(s, 1.0)})
    for r, c in bad:
        run.add("clients", r, f"client {c}", f"slowdown {g(run.slowdown[r, c])}, but the "
                f"scenario has no stragglers (conditions.straggler_sigma: 0)", "slowdown column")


def _check_unknown_rates(run: Run, idx: np.ndarray, rates: np.ndarray, took: np.ndarray,
                         slow: np.ndarray) -> None:
    """A client whose rate is not known here (a fleet row giving ``train_s_per_sample``)
    still runs every FLOPs-rule step at one rate: the FLOPs per second of its steps,
    slowdown taken out, agree."""
    owner = run.owner[idx]
    unknown = ~np.isfinite(rates[owner]) & (took > 0) & (run.flops[idx] > 0)
    for c in sorted(set(owner[unknown].tolist())):
        mine = unknown & (owner == c)
        speed = run.flops[idx][mine] * slow[mine] / took[mine]
        ref = float(np.median(speed))
        for k in np.flatnonzero(~close(speed, ref, speed * run.scale[idx][mine] / took[mine])):
            i = int(idx[np.flatnonzero(mine)[k]])
            run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} ran at "
                    f"{g(speed[k])} FLOP/s (slowdown taken out), but the device's other steps "
                    f"at {g(ref)}", run.device(int(c)).source)


def _check_server(run: Run) -> None:
    idx = np.flatnonzero(run.kind == SERVER)
    if not len(idx):
        return
    rate = run.hw.server_rate
    took = run.end[idx] - run.start[idx]
    want = run.flops[idx] / rate
    for k in np.flatnonzero(~close(took, want, run.scale[idx])):
        i = int(idx[k])
        run.add("events", int(run.rnd[i]), "server", f"{run.activity[i]} for client "
                f"{run.cid[i]} took {g(took[k])} s for {g(run.flops[i])} FLOPs, but at the "
                f"server's {g(rate)} FLOP/s they take {g(want[k])} s", run.hw.server_source)
