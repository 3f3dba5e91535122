"""Time moves forward, and nothing of capacity one does two things at once.

- ``rounds.csv`` starts with round 0 at time 0, numbers its rounds one after another,
  ``sim_time_s`` never decreases and each ``round_time_s`` is the step from the round
  before;
- a round whose clients trained (or were late) has events; a round with events but no
  row in ``rounds.csv``, or with a client that trained but no events, is named as the
  cause of all its other violations (:meth:`~sflsim.checks.checked_run.Run.blame_rounds`);
- every event belongs to a round ``rounds.csv`` lists, ends no earlier than it starts,
  waited no negative time (``queue_s``), and was asked for (its start minus its wait)
  and ended inside its round;
- a device computes one activity at a time (actor ``client<i>``); each direction of its
  radio sends one transfer at a time (``client<i>:uplink`` / ``client<i>:downlink``),
  counting the part of each transfer in which its bits are sent; the server runs at
  most ``server.slots`` jobs at once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import COMPUTE, DOWNLINK, SERVER, UPLINK, Run, radio_until
from sflsim.checks.report import at_most, close, g, slack
from sflsim.text import plural


def check_rounds_in_time(run: Run) -> None:
    """``rounds.csv``'s rounds in order and its times; fills :attr:`Run.bounds`."""
    rounds = run.rounds
    numbers = rounds["round"].to_numpy(dtype=np.int64)
    end = rounds["sim_time_s"].to_numpy(dtype=float)
    step = rounds["round_time_s"].to_numpy(dtype=float)
    first = int(numbers[0]) if len(numbers) else 0
    if len(numbers) and first != 0:
        run.add("rounds", first, "round", "the first row is not round 0 (the untrained model "
                "at time 0): rows are missing", "rounds.csv")
    for i, r in enumerate(numbers):
        r = int(r)
        if i and r != numbers[i - 1] + 1:
            run.add("rounds", r, "round", f"follows round {numbers[i - 1]}: rounds are "
                    f"missing or repeated", "rounds.csv")
        before = end[i - 1] if i else 0.0
        if r == 0 and not (close(end[i], 0.0) and close(step[i], 0.0)):
            run.add("rounds", r, "sim_time_s", f"round 0 ends at {g(end[i])} s after "
                    f"{g(step[i])} s; round 0 is the untrained model at time 0", "rounds.csv")
        if i and not at_most(before, end[i], end[i]):
            run.add("rounds", r, "sim_time_s", f"{g(end[i])} s is before the round before's "
                    f"{g(before)} s: simulated time went backward", "rounds.csv")
        if not (step[i] >= -slack(step[i], 0, end[i]) and close(step[i], end[i] - before,
                                                                  end[i])):
            run.add("rounds", r, "round_time_s", f"{g(step[i])} s, but sim_time_s went from "
                    f"{g(before)} to {g(end[i])} s", "rounds.csv")
            run.unsure.add(r)
        run.bounds[r] = (end[i] - step[i], end[i])


def check_events_in_rounds(run: Run) -> np.ndarray:
    """Every event inside a listed round; returns the mask of events of listed rounds."""
    known = np.isin(run.rnd, [r for r in run.bounds if r >= 1])
    for r in sorted(set(run.rnd[~known].tolist())):
        run.add("events", int(r), "", f"{plural(int((run.rnd == r).sum()), 'event')} of a round that "
                f"{run.names['rounds']} does not list", "the events table")
        run.missing[int(r)] = f"{run.names['rounds']}'s row of round {int(r)}, missing"
    worked = {r for (r, _), status in run.status.items() if status in ("trained", "late")}
    for r in sorted(r for r in run.bounds if r >= 1 and r in worked
                    and not (run.rnd == r).any()):
        run.add("events", r, "", f"no events, though {run.names['rounds']} and the clients "
                f"table list the round", "the events table")
        run.missing[r] = f"the events of round {r}, missing from {run.names['events']}"
    rows = pd.Series(run.rnd)
    lo = rows.map({r: b[0] for r, b in run.bounds.items()}).to_numpy(dtype=float)
    hi = rows.map({r: b[1] for r, b in run.bounds.items()}).to_numpy(dtype=float)
    asked = run.start - run.queue
    s = run.scale
    bad = known & ~(at_most(run.start, run.end, s) & at_most(0.0, run.queue, s)
                    & at_most(lo, asked, s) & at_most(run.end, hi, s))
    for i in np.flatnonzero(bad):
        run.add("events", int(run.rnd[i]), run.actor[i],
                f"{run.activity[i]} asked at {g(asked[i])} s, from {g(run.start[i])} to "
                f"{g(run.end[i])} s (queue_s {g(run.queue[i])}), is not inside its round, "
                f"{g(lo[i])} to {g(hi[i])} s, or ends before it starts", "the events table")
    return known


def check_capacity(run: Run) -> None:
    """Capacity one: a device's compute and each direction of its radio; server slots."""
    compute = (run.kind == COMPUTE)
    radio = (run.kind == UPLINK) | (run.kind == DOWNLINK)
    until = run.end.copy()
    until[radio] = radio_until(run, radio, "serialisation", "least")
    for mask, what in ((compute, "compute"), (radio, "radio serialisation")):
        idx = np.flatnonzero(mask & (until > run.start))
        if not len(idx):
            continue
        frame = pd.DataFrame({"actor": run.actor[idx], "start": run.start[idx],
                              "until": until[idx], "i": idx})
        frame = frame.sort_values(["actor", "start", "until"], kind="stable")
        latest = frame.groupby("actor", sort=False)["until"].cummax()
        before = latest.groupby(frame["actor"], sort=False).shift(1).to_numpy(dtype=float)
        starts = frame["start"].to_numpy()
        clash = np.isfinite(before) & ~at_most(before, starts, np.maximum(np.abs(before),
                                                                          np.abs(starts)))
        for k in np.flatnonzero(clash):
            i = int(frame["i"].iloc[k])
            run.add("events", int(run.rnd[i]), run.actor[i], f"{what} of {run.activity[i]} "
                    f"starts at {g(run.start[i])} s while an earlier activity runs until "
                    f"{g(before[k])} s, on a resource of capacity one", "the events table")
    _check_slots(run)


def _check_slots(run: Run) -> None:
    server = np.flatnonzero((run.kind == SERVER) & (run.end > run.start))
    if not len(server):
        return
    s, e = run.start[server], run.end[server]
    e = e - slack(e, s, np.abs(e))  # an end and a start at one instant do not overlap
    keep = e > s
    s, e, rows = s[keep], e[keep], server[keep]
    if not len(s):
        return
    times = np.concatenate([s, e])
    delta = np.concatenate([np.ones(len(s), int), -np.ones(len(e), int)])
    order = np.lexsort((delta, times))  # at one instant the ends come first
    running = np.cumsum(delta[order])
    worst = int(np.argmax(running))
    slots = run.hw.server_slots
    if running[worst] > slots:
        i = rows[order[worst] % len(s)]
        run.add("events", int(run.rnd[i]), "server", f"{int(running[worst])} jobs at once at "
                f"{g(times[order[worst]])} s, more than its {plural(slots, 'slot')}",
                run.hw.server_source)
