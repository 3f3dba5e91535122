"""Every wait is a wait for a busy resource, and the queue columns add up.

- **A wait ends at a release.** An event that waited (``queue_s`` > 0) for the server
  or for its device's radio started the instant the resource was released: the end of
  another server job, or the instant another transfer of that radio sent its last bit
  (or was cut off).
- **The resource was busy all along.** From the instant it was asked for (its start
  minus its wait) until it started, the server ran another job and the radio sent
  another transfer.
- **Columns.** Per client and round, ``server_queue_s`` is the sum of the waits of the
  server jobs done for it; per round, ``server_queue_mean_s`` and
  ``server_queue_max_s`` the mean and largest wait of the round's server jobs (0
  without any).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import DOWNLINK, SERVER, UPLINK, Run, groups, radio_until
from sflsim.checks.report import close, g, slack


def check_queues(run: Run) -> None:
    """The rules of the module docstring."""
    radio = (run.kind == UPLINK) | (run.kind == DOWNLINK)
    freed = run.end.copy()
    freed[radio] = radio_until(run, radio, "serialisation", "replayed")
    for mask, what in ((run.kind == SERVER, "the server"), (radio, "its radio")):
        _waits(run, mask, freed, what)
    _queue_columns(run)


def _waits(run: Run, mask: np.ndarray, freed: np.ndarray, what: str) -> None:
    asked = run.start - run.queue
    waited = mask & (run.queue > slack(run.queue, 0.0, run.scale))
    if not waited.any():
        return
    rows = np.flatnonzero(mask)
    resource = np.where(run.kind[rows] == SERVER, "server", run.actor[rows])
    codes = pd.factorize(resource)[0]
    for part in groups(run.rnd[rows], codes):
        members = rows[part]
        queued = members[waited[members]]
        if not len(queued):
            continue
        released = _released(freed[members], run.start[queued], run.scale[queued])
        covered = _covered(run.start[members], freed[members], asked[queued],
                           run.start[queued], run.scale[queued])
        for i, rel, cov in zip(queued, released, covered):
            if not rel:
                run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} waited "
                        f"{g(run.queue[i])} s, but starts at {g(run.start[i])} s when {what} "
                        f"released nothing: a wait ends when the work before it does",
                        "the events table")
            elif not cov:
                run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} waited "
                        f"{g(run.queue[i])} s from {g(asked[i])} s, but {what} was idle in "
                        f"that time", "the events table")


def _released(freed: np.ndarray, at: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Per instant of ``at``, whether one of ``freed`` is that instant (within the
    tolerance)."""
    ends = np.sort(freed)
    j = np.searchsorted(ends, at)
    before = ends[np.clip(j - 1, 0, len(ends) - 1)]
    after = ends[np.clip(j, 0, len(ends) - 1)]
    return close(before, at, scale) | close(after, at, scale)


def _covered(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray,
             scale: np.ndarray) -> np.ndarray:
    """Per interval ``[a, b)``, whether the intervals ``[starts, ends)`` cover it (within
    the tolerance): it lies in one of their merged spans."""
    tol = float(np.max(slack(a, b, scale))) if len(a) else 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1] + tol]
    span_start = s[new]
    span_end = reach[np.r_[np.flatnonzero(new)[1:] - 1, len(s) - 1]]
    k = np.searchsorted(span_start, a + tol, side="right") - 1
    ok = k >= 0
    k = np.clip(k, 0, len(span_start) - 1)
    return ok & (span_start[k] <= a + tol) & (span_end[k] >= b - tol)


def _queue_columns(run: Run) -> None:
    server = run.kind == SERVER
    frame = pd.DataFrame({"r": run.rnd[server], "c": run.cid[server], "q": run.queue[server]})
    per_client = frame.groupby(["r", "c"])["q"].sum().to_dict()
    clients = run.clients
    if "server_queue_s" in clients:
        have = clients["server_queue_s"].to_numpy(dtype=float)
        want = np.array([per_client.get((int(r), int(c)), 0.0) for r, c in
                         zip(clients["round"], clients["client_id"])])
        for k in np.flatnonzero(~close(have, want, 1e3 * _end_of(run, clients["round"]))):
            run.add("clients", int(clients["round"].iloc[k]),
                    f"client {int(clients['client_id'].iloc[k])}", f"server_queue_s "
                    f"{g(have[k])}, but the waits of its server jobs in {run.names['events']} "
                    f"add up to {g(want[k])}", "server_queue_s column")
    per_round = frame.groupby("r")["q"]
    means, maxes = per_round.mean().to_dict(), per_round.max().to_dict()
    rounds = run.rounds[run.rounds["round"] >= 1]
    for name, wants, what in (("server_queue_mean_s", means, "mean"),
                              ("server_queue_max_s", maxes, "largest")):
        if name not in rounds:
            continue
        have = rounds[name].to_numpy(dtype=float)
        want = np.array([wants.get(int(r), 0.0) for r in rounds["round"]])
        for k in np.flatnonzero(~close(have, want, 1e3 * _end_of(run, rounds["round"]))):
            run.add("rounds", int(rounds["round"].iloc[k]), name, f"{g(have[k])}, but the "
                    f"{what} wait of the round's server jobs in {run.names['events']} is "
                    f"{g(want[k])}", f"{name} column")


def _end_of(run: Run, rounds: pd.Series) -> np.ndarray:
    """Each row's round end (s), the scale of its times."""
    return np.array([run.bounds.get(int(r), (0.0, 0.0))[1] for r in rounds], dtype=float)
