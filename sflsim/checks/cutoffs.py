"""Work is cut off exactly when a cut-off comes, and only then.

Every cut-off of a round is an instant: the round deadline (its start plus
``conditions.round_deadline_s``), a participant going offline (the end of its online
interval in ``conditions.availability``), or over-commitment (the instant enough
clients have finished: one instant per round). So, per round:

- an event marked ``cut_off`` ends at such an instant of the client it serves (work of
  the server's own, at the deadline); a client whose status is ``trained`` finished in
  time: nothing of its own device is cut off;
- a ``late`` client's round ends at the deadline, and the client was still working
  then (something was cut off at the deadline, or its own last work ended there);
  work of it recorded as finished and ending at the deadline did a whole step's FLOPs
  (those of a finished step of that activity elsewhere in the run), not the part of
  one a cut leaves;
- an ``offline`` client's work ends by the instant it went offline;
- a client that sat the round out (``dropped``, ``not_sampled``, or ``offline`` at
  the start) did nothing in it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import COMPUTE, DOWNLINK, UPLINK, Run
from sflsim.checks.report import close, g
from sflsim.text import plural

#: statuses of clients that did no work in the round
SAT_OUT = ("dropped", "not_sampled")


def check_cutoffs(run: Run) -> None:
    """The rules of the module docstring."""
    deadline = run.scenario.conditions.round_deadline_s
    availability = _availability(run)
    frame = pd.DataFrame({"i": np.arange(len(run.rnd)), "r": run.rnd})
    events_of = {int(r): rows["i"].to_numpy() for r, rows in frame.groupby("r")}
    for r, (start, end) in run.bounds.items():
        if r < 1:
            continue
        idx = events_of.get(r, np.zeros(0, np.int64))
        at = None if deadline is None else start + deadline
        _cut_events(run, r, idx, at, availability)
        _statuses(run, r, idx, at, end)


def _availability(run: Run):
    path = getattr(run.scenario.conditions, "availability", None)
    if path is None:
        return None
    from sflsim.availability import read_availability

    try:
        return read_availability(path, run.scenario.client_groups())
    except Exception:  # the trace moved or changed since the run: instants not checked
        return None


def _own(run: Run, i: int, c: int) -> bool:
    """Whether event ``i`` is on client ``c``'s own device (compute or radio)."""
    return run.owner[i] == c and run.kind[i] in (COMPUTE, UPLINK, DOWNLINK)


def _cut_events(run: Run, r: int, idx: np.ndarray, at: float | None, availability) -> None:
    cut = idx[run.cut[idx]]
    over: dict[float, int] = {}
    for i in cut:
        c, end = int(run.cid[i]), run.end[i]
        status = run.status.get((r, c), "") if c >= 0 else ""
        at_deadline = at is not None and close(end, at, run.scale[i])
        if status == "trained" and _own(run, i, c):
            why = f"client {c}'s status is trained: it finished in time"
        elif at_deadline:
            continue
        elif status == "offline" and (availability is None
                                      or not availability.online(c, end)):
            continue
        elif status == "over_committed":
            over.setdefault(float(end), int(i))
            continue
        else:
            why = (f"not at a cut-off of client {c} (status {status or 'none'}"
                   + (f"; the deadline is at {g(at)} s)" if at is not None else
                      "; the scenario has no deadline)") if c >= 0 else
                   f"not at the deadline ({g(at)} s)" if at is not None else
                   "and the scenario has no deadline")
        run.add("events", r, run.actor[i], f"{run.activity[i]} marked cut_off at {g(end)} s, "
                f"{why}", "cut_off column")
    if len(over) > 1:
        times = sorted(over)
        i = over[times[-1]]
        run.add("events", r, run.actor[i], f"over-committed clients cut off at "
                f"{len(times)} instants ({', '.join(g(t) for t in times[:4])} s); "
                f"over-commitment stops them all at one", "cut_off column")


def _statuses(run: Run, r: int, idx: np.ndarray, at: float | None, end: float) -> None:
    statuses = {c: s for (rr, c), s in run.status.items() if rr == r}
    cid = run.cid[idx]
    for c, status in sorted(statuses.items()):
        mine = idx[cid == c]
        if status in SAT_OUT and len(mine):
            run.add("clients", r, f"client {c}", f"status {status}, but "
                    f"{run.names['events']} holds {plural(len(mine), 'event')} of it in the round",
                    "status column")
        if status != "late":
            continue
        if at is None:
            run.add("clients", r, f"client {c}", "status late, but the scenario has no round "
                    "deadline", "status column")
            continue
        if not close(end, at, abs(end)):
            run.add("clients", r, f"client {c}", f"status late, but the round ends at "
                    f"{g(end)} s, not at its deadline {g(at)} s", "status column")
            continue
        cut_at = idx[run.cut[idx] & close(run.end[idx], at, run.scale[idx])]
        ends_at = mine[~run.cut[mine] & close(run.end[mine], at, run.scale[mine])]
        if not len(cut_at) and not len(ends_at):
            run.add("clients", r, f"client {c}", f"status late, but nothing was cut off at "
                    f"the deadline {g(at)} s and its work ended before it: it finished in "
                    f"time", "status column")
        for i in ends_at:
            _whole_step(run, int(i), c)


def _whole_step(run: Run, i: int, c: int) -> None:
    """A compute event of a late client recorded as finished at the deadline did the
    FLOPs of a whole step: those of some finished step of the same activity in the run
    (when it has any to compare with)."""
    if run.kind[i] != COMPUTE:
        return
    same = (run.kind == COMPUTE) & (run.activity == run.activity[i]) & ~run.cut
    same[i] = False
    whole = np.unique(run.flops[same])
    if len(whole) and not np.any(close(whole, run.flops[i])):
        run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} ends at the "
                f"deadline {g(run.end[i])} s as finished (cut_off false) with "
                f"{g(run.flops[i])} FLOPs, which no finished {run.activity[i]} has "
                f"({', '.join(g(f) for f in whole[:3])}): work cut off at the deadline",
                "cut_off column")
