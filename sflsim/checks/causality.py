"""Nothing uses data before it has arrived.

In each round, per client:

- **server work after the data.** The ``k``-th server job of an activity that consumes
  one upload of the client (a server step on its activations, a replay or probe step,
  FedGH's header step) was asked for (its start minus its wait) no earlier than the
  arrival at the server of the client's ``k``-th data transfer of the round (its last
  hop; model uploads aside);
- **sends after the compute that made them.** The client's ``k``-th transfer of
  activations (``send_activations``, ``send_replay_activations``,
  ``send_probe_activations``) was asked for no earlier than the end of its ``k``-th
  compute activity of the round;
- **backward after forward and gradients.** Its ``k``-th ``client_backward`` starts no
  earlier than the end of its ``k``-th ``client_forward`` and the arrival of its ``k``-th
  activation gradients (``send_gradients``);
- **downloads after the aggregation.** A model download (``download_model``,
  ``download_replay_model``, ``download_header``) starts no earlier than the
  aggregation of the round before: the arrival of its last model upload, and the
  round's start.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import (
    BACKHAUL_DOWN,
    BACKHAUL_UP,
    COMPUTE,
    DOWNLINK,
    SERVER,
    UPLINK,
    Run,
    groups,
)
from sflsim.checks.report import at_most, g
from sflsim.text import plural

#: server activities that each consume one data transfer of the client they serve
CONSUMERS = ("server_train", "server_zo_losses", "server_replay", "calibration_probe",
             "describe_prompts", "server_header")
#: transfers of data a client computed
DATA_SENDS = ("send_activations", "send_replay_activations", "send_probe_activations")
#: uplink transfers that carry no data for a server step
NOT_DATA = ("upload_model", "upload_data")
DOWNLOADS = ("download_model", "download_replay_model", "download_header")
_ORD = {1: "1st", 2: "2nd", 3: "3rd"}


def _nth(k: int) -> str:
    return _ORD.get(k, f"{k}th") if not 10 <= k % 100 <= 20 else f"{k}th"


def check_causality(run: Run) -> None:
    """The four rules of the module docstring, round by round."""
    asked = run.start - run.queue
    for idx in groups(run.rnd, run.cid):
        r, c = run.rnd[idx[0]], run.cid[idx[0]]
        if c < 0:
            continue
        _server_after_data(run, int(r), int(c), idx, asked)
        _sends_after_compute(run, int(r), int(c), idx, asked)
        _backward_after_forward(run, int(r), int(c), idx)
    _downloads_after_aggregation(run)


def _arrivals(run: Run, c: int, idx: np.ndarray) -> np.ndarray:
    """When each data transfer of client ``c`` among events ``idx`` reached the server
    (the end of its last hop; cut-off ones never did), in order."""
    data = ~np.isin(run.activity[idx], NOT_DATA) & ~run.cut[idx]
    backhaul = idx[(run.kind[idx] == BACKHAUL_UP) & data]
    hops = run.hw.devices[c].uplink if c < run.n else []
    last = backhaul if len(hops) > 1 else idx[(run.kind[idx] == UPLINK) & (run.owner[idx] == c)
                                               & data]
    if len(hops) > 1:  # each transfer's last hop: the last backhaul it crosses
        last = backhaul[run.actor[backhaul] == hops[-1].actor]
    return np.sort(run.end[last])


def _server_after_data(run: Run, r: int, c: int, idx: np.ndarray, asked: np.ndarray) -> None:
    jobs = idx[(run.kind[idx] == SERVER) & np.isin(run.activity[idx], CONSUMERS)]
    if not len(jobs):
        return
    arrived = _arrivals(run, c, idx)
    for activity in sorted(set(run.activity[jobs].tolist())):
        mine = jobs[run.activity[jobs] == activity]
        mine = mine[np.argsort(asked[mine], kind="stable")]
        if len(mine) > len(arrived):
            i = mine[len(arrived)]
            run.add("events", r, "server", f"{activity} for client {c} asked at "
                    f"{g(asked[i])} s is its {_nth(len(arrived) + 1)} such job of the round, "
                    f"but only {plural(len(arrived), 'data transfer')} of that client reached the "
                    f"server", "the events table")
            mine = mine[:len(arrived)]
        early = ~at_most(arrived[:len(mine)], asked[mine], run.scale[mine])
        for k in np.flatnonzero(early)[:1]:
            i = mine[k]
            run.add("events", r, "server", f"{activity} for client {c} asked at "
                    f"{g(asked[i])} s (start {g(run.start[i])} s, queue_s "
                    f"{g(run.queue[i])}), before the data it works on arrived: that "
                    f"client's {_nth(k + 1)} data transfer of the round reached the server "
                    f"at {g(arrived[k])} s", "the events table")


def _sends_after_compute(run: Run, r: int, c: int, idx: np.ndarray, asked: np.ndarray) -> None:
    sends = idx[(run.kind[idx] == UPLINK) & (run.owner[idx] == c)
                & np.isin(run.activity[idx], DATA_SENDS)]
    if not len(sends):
        return
    done = np.sort(run.end[idx[(run.kind[idx] == COMPUTE) & (run.owner[idx] == c)]])
    sends = sends[np.argsort(asked[sends], kind="stable")]
    n = min(len(sends), len(done))
    early = np.r_[~at_most(done[:n], asked[sends[:n]], run.scale[sends[:n]]),
                  np.ones(len(sends) - n, bool)]
    for k in np.flatnonzero(early)[:1]:
        i = sends[k]
        when = f"its {_nth(k + 1)} compute of the round ends at {g(done[k])} s" \
            if k < len(done) else f"it computed only {plural(len(done), 'time')} in the round"
        run.add("events", r, run.actor[i], f"{run.activity[i]} asked at {g(asked[i])} s "
                f"(start {g(run.start[i])} s, queue_s {g(run.queue[i])}) is the client's "
                f"{_nth(k + 1)} such transfer of the round, but {when}: data sent before "
                f"it was computed", "the events table")


def _backward_after_forward(run: Run, r: int, c: int, idx: np.ndarray) -> None:
    act = run.activity[idx]
    mine = (run.kind[idx] == COMPUTE) & (run.owner[idx] == c)
    backward = idx[mine & (act == "client_backward")]
    if not len(backward):
        return
    backward = backward[np.argsort(run.start[backward], kind="stable")]
    forward = np.sort(run.end[idx[mine & (act == "client_forward")]])
    grads = idx[(run.kind[idx] == DOWNLINK) & (run.owner[idx] == c) & (act == "send_gradients")
                & ~run.cut[idx]]
    grads = np.sort(run.end[grads])
    for k, i in enumerate(backward):
        for what, ends in (("forward pass", forward), ("activation gradients", grads)):
            if what == "activation gradients" and not len(grads):
                continue
            if k >= len(ends) or not at_most(ends[k], run.start[i], run.scale[i]):
                when = f"ends at {g(ends[k])} s" if k < len(ends) else "never came"
                verb = "arrive" if what == "activation gradients" else "end"
                run.add("events", r, run.actor[i], f"client_backward starts at "
                        f"{g(run.start[i])} s, before its {what} {verb}: the "
                        f"{_nth(k + 1)} of the round {when}", "the events table")
                return


def _downloads_after_aggregation(run: Run) -> None:
    uploads = (run.activity == "upload_model") & ~run.cut \
        & ((run.kind == UPLINK) | (run.kind == BACKHAUL_UP))
    last_upload = pd.Series(run.end[uploads]).groupby(run.rnd[uploads]).max().to_dict()
    down = np.flatnonzero(np.isin(run.activity, DOWNLOADS)
                          & ((run.kind == DOWNLINK) | (run.kind == BACKHAUL_DOWN)))
    for i in down:
        r = int(run.rnd[i])
        start = run.bounds.get(r, (np.nan, np.nan))[0]
        agg = max(start, last_upload.get(r - 1, -np.inf))
        if np.isfinite(agg) and not at_most(agg, run.start[i], run.scale[i]):
            run.add("events", r, run.actor[i], f"{run.activity[i]} starts at "
                    f"{g(run.start[i])} s, before the model it downloads was aggregated at "
                    f"{g(agg)} s (round {r - 1}'s last model upload arrived, round {r} began)",
                    "the events table")
