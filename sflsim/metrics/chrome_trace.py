"""A run's event trace as Chrome Trace Event JSON (``sflsim export DIR --trace FILE``).

The file is the JSON Object Format of the Trace Event Format (Google's "Trace Event
Format" document), the format PyTorch's profiler exports
(``torch.profiler.profile.export_chrome_trace``); Perfetto (https://ui.perfetto.dev)
and ``chrome://tracing`` open it. Times are simulated time: ``ts`` and ``dur`` are in
microseconds from the start of the run, to the nanosecond (the table's seconds rounded
to 1 ns).

Tracks (a process with threads, each named by ``"M"`` metadata events, in this order):

- ``rounds``: one instant event (``"ph": "i"``, global scope) per round, named
  ``round <r>``, at the round's start, its args the round's row of ``rounds.csv``
  (``round_time_s``, ``client_energy_j``, ``bytes_up``, ...: units in the names);
- ``server``: one thread per slot, ``slot 1``, ``slot 2``, ... The events table does not
  record which slot ran a job: each job goes to the lowest-numbered slot free at its
  start, so a run within ``server.slots`` never needs more threads than slots;
- one process per client device, ``client<i> (<device group>)``, with the threads
  ``compute``, ``uplink`` and ``downlink`` (its ``client<i>``, ``client<i>:uplink`` and
  ``client<i>:downlink`` actors); a transfer that starts before the previous one in the
  same direction has arrived (the radio sends the next payload while the last bits of
  one are still on their way) goes to a second thread, ``uplink 2``, so slices on one
  thread never overlap;
- any other actor (an access point's backhaul, ``ap:<name>:backhaul_up``): a process
  ``ap:<name>`` with a thread ``backhaul_up`` (``backhaul_up 2``, ... for transfers in
  flight at once).

Each row of the events table is one complete event (``"ph": "X"``) named by its
activity, on its actor's track, with ``ts`` its start and ``dur`` its length; its
``args`` hold the rest of the row under names that carry the units: ``round``,
``client_id``, ``start_s`` and ``end_s`` (the table's values, exactly), ``queue_s``,
``payload_bytes``, ``flop`` (the ``flops`` column: floating-point operations),
``seq``, ``cut_off``, and any other column the table has. The events table holds no
energy: energy is per device and round (``clients.parquet``), and each round's total is
in its round marker's args.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sflsim.errors import SflsimError
from sflsim.metrics.results import (
    atomic_write,
    read_result,
    read_run_table,
    run_table_columns,
    run_table_path,
)

#: Columns of the events table a trace needs.
REQUIRED_COLUMNS = ("round", "actor", "activity", "start_s", "end_s")

#: Columns of the events table renamed in a slice's args (to say their unit).
ARG_NAMES = {"flops": "flop"}

#: Rows turned into JSON at a time (a large run's trace holds millions of rows).
BATCH_ROWS = 65_536

#: Process ids of the fixed tracks; client devices and other actors follow.
ROUNDS_PID, SERVER_PID, FIRST_PID = 1, 2, 3

#: Threads of a client device, in track order.
CLIENT_THREADS = ("compute", "uplink", "downlink")


@dataclass(frozen=True)
class TraceFile:
    """What :func:`write_chrome_trace` wrote: the file, its slices (one per event), its
    threads (tracks that hold slices) and its round markers."""

    path: Path
    slices: int
    tracks: int
    rounds: int


def first_free_lanes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A lane per interval so that intervals in one lane never overlap: in order of
    start, each takes the lowest-numbered lane whose last interval has ended (an end
    equal to the start is free). Returns the 0-based lane of each interval."""
    lanes = np.zeros(len(starts), dtype=np.int64)
    free: list[int] = []  # lanes free now, a heap
    busy: list[tuple[int, int]] = []  # (end, lane) of the lanes in use, a heap
    for i in np.lexsort((ends, starts)):
        while busy and busy[0][0] <= starts[i]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy)
        lanes[i] = lane
        heapq.heappush(busy, (int(ends[i]), lane))
    return lanes


def actor_track(actor: str) -> tuple[str, str]:
    """``(process, thread)`` of an actor: ``server`` -> ``(server, slot)``, ``client3`` ->
    ``(client3, compute)``, ``client3:uplink`` -> ``(client3, uplink)``,
    ``ap:home:backhaul_up`` -> ``(ap:home, backhaul_up)``, another name -> itself twice."""
    if actor == "server":
        return "server", "slot"
    if re.fullmatch(r"client\d+", actor):
        return actor, "compute"
    if ":" in actor:
        process, thread = actor.rsplit(":", 1)
        return process, thread
    return actor, actor


def _nanoseconds(seconds: pd.Series) -> np.ndarray:
    return np.rint(seconds.to_numpy(float) * 1e9).astype(np.int64)


def _microseconds(ns: int | np.integer) -> float:
    return int(ns) / 1000


def _plain(value: object) -> object:
    """A table value as JSON takes it: NaN and missing values become null."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


def _client_groups(run_dir: Path) -> dict[int, str]:
    """Client id -> device group (else profile), from the run's clients table; {} when it
    has neither."""
    if run_table_path(run_dir, "clients") is None:
        return {}
    have = run_table_columns(run_dir, "clients")
    for column in ("group", "profile"):
        if {"client_id", column} <= set(have):
            named = read_run_table(run_dir, "clients", ["client_id", column]).dropna()
            if len(named):
                return dict(zip(named["client_id"].astype(int), named[column].astype(str)))
    return {}


def _process_order(process: str) -> tuple[int, int, str]:
    if process == "server":
        return (0, 0, process)
    match = re.fullmatch(r"client(\d+)", process)
    return (1, int(match.group(1)), process) if match else (2, 0, process)


def _thread_order(thread: str) -> tuple[int, str]:
    return (CLIENT_THREADS.index(thread) if thread in CLIENT_THREADS else len(CLIENT_THREADS),
            thread)


def chrome_trace_events(run_dir: str | Path) -> Iterator[dict]:
    """The events of the Chrome trace of a run (see the module docstring): metadata
    events first, then one instant event per round, then one complete event per row of
    the events table, in the table's order.

    Args:
        run_dir: a results directory of ``sflsim run``.

    Raises:
        SflsimError: ``run_dir`` is not a results directory, it has no events table, the
            table lacks one of :data:`REQUIRED_COLUMNS`, or it holds no events.
    """
    run_dir = Path(run_dir)
    _, rounds = read_result(run_dir)
    if run_table_path(run_dir, "events") is None:
        raise SflsimError(f"{run_dir} has no events.parquet or events.csv: no event trace to "
                          "export; it is written by `sflsim run`")
    have = run_table_columns(run_dir, "events")
    missing = [c for c in REQUIRED_COLUMNS if c not in have]
    if missing:
        raise SflsimError(f"{run_table_path(run_dir, 'events')} has no column "
                          f"{', '.join(missing)} (columns: {', '.join(have)})")
    events = read_run_table(run_dir, "events")
    if events.empty:
        raise SflsimError(f"{run_table_path(run_dir, 'events')} holds no events (no round "
                          "ran): nothing to export")
    start_ns, end_ns = _nanoseconds(events["start_s"]), _nanoseconds(events["end_s"])

    # tracks: (process, thread kind, lane) per event
    rows_of = events.groupby(events["actor"].astype(str), sort=False).indices
    tracks = {name: actor_track(name) for name in rows_of}
    lane = np.zeros(len(events), dtype=np.int64)
    for rows in rows_of.values():
        lane[rows] = first_free_lanes(start_ns[rows], end_ns[rows])
    processes = sorted({p for p, _ in tracks.values()}, key=_process_order)
    pid = {"server": SERVER_PID} | {
        p: FIRST_PID + i for i, p in enumerate(q for q in processes if q != "server")}
    lanes_of: dict[tuple[str, str], int] = {}
    for name, track in tracks.items():
        used = int(lane[rows_of[name]].max()) + 1
        lanes_of[track] = max(lanes_of.get(track, 0), used)
    tid: dict[tuple[str, str, int], int] = {}
    groups = _client_groups(run_dir)

    yield _meta("process_name", ROUNDS_PID, 0, "rounds")
    yield _meta("process_sort_index", ROUNDS_PID, 0, sort_index=0)
    yield _meta("thread_name", ROUNDS_PID, 1, "rounds")
    for process in processes:
        match = re.fullmatch(r"client(\d+)", process)
        label = (f"{process} ({groups[int(match.group(1))]})"
                 if match and int(match.group(1)) in groups else process)
        yield _meta("process_name", pid[process], 0, label)
        yield _meta("process_sort_index", pid[process], 0, sort_index=pid[process])
        kinds = sorted((k for p, k in lanes_of if p == process), key=_thread_order)
        for kind in kinds:
            for k in range(lanes_of[process, kind]):
                number = len(tid) + 2  # thread ids unique in the file; 1 is the rounds
                tid[process, kind, k] = number
                thread = (f"slot {k + 1}" if kind == "slot" else
                          kind if k == 0 else f"{kind} {k + 1}")
                yield _meta("thread_name", pid[process], number, thread)
                yield _meta("thread_sort_index", pid[process], number, sort_index=number)

    yield from _round_markers(events, rounds, start_ns)

    arg_columns = [c for c in events.columns if c not in ("actor", "activity")]
    arg_names = [ARG_NAMES.get(c, c) for c in arg_columns]
    for first in range(0, len(events), BATCH_ROWS):
        chunk = slice(first, first + BATCH_ROWS)
        part = events.iloc[chunk]
        args = part[arg_columns].astype(object).to_numpy()
        for row, (name, activity, s_ns, e_ns, k) in enumerate(zip(
                part["actor"].astype(str), part["activity"].astype(str),
                start_ns[chunk], end_ns[chunk], lane[chunk])):
            process, kind = tracks[name]
            yield {"name": activity, "cat": "server" if kind == "slot" else kind, "ph": "X",
                   "ts": _microseconds(s_ns),
                   "dur": _microseconds(max(e_ns - s_ns, 0)), "pid": pid[process],
                   "tid": tid[process, kind, int(k)],
                   "args": {n: _plain(v) for n, v in zip(arg_names, args[row])}}


def _meta(what: str, pid: int, tid: int, name: str | None = None,
          sort_index: int | None = None) -> dict:
    args = {"name": name} if name is not None else {"sort_index": sort_index}
    return {"name": what, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _round_markers(events: pd.DataFrame, rounds: pd.DataFrame,
                   start_ns: np.ndarray) -> Iterator[dict]:
    """An instant event per round of the trace, at the round's start (``sim_time_s -
    round_time_s`` of ``rounds.csv``, else its first event's start)."""
    first = pd.Series(start_ns).groupby(events["round"].to_numpy()).min()
    table = rounds[rounds["round"] >= 1] if "round" in rounds else rounds.iloc[0:0]
    rows = {int(r["round"]): r for _, r in table.iterrows()}
    for r in sorted(set(first.index.astype(int)) | set(rows)):
        row = rows.get(r)
        at = first.get(r)
        if row is not None and {"sim_time_s", "round_time_s"} <= set(row.index):
            begin = float(row["sim_time_s"]) - float(row["round_time_s"])
            if math.isfinite(begin):
                at = int(np.rint(begin * 1e9))
        if at is None:
            continue
        args = {} if row is None else {
            k: _plain(v.item() if isinstance(v, np.generic) else v) for k, v in row.items()
            if k != "round" and isinstance(v, (int, float, np.number))
            and not isinstance(v, bool) and _plain(v) is not None}
        yield {"name": f"round {r}", "ph": "i", "s": "g", "ts": _microseconds(at),
               "pid": ROUNDS_PID, "tid": 1, "args": {"round": r, **args}}


def write_chrome_trace(run_dir: str | Path, path: str | Path) -> TraceFile:
    """Write the Chrome trace of a run (:func:`chrome_trace_events`) to ``path``,
    atomically, as one JSON object: ``traceEvents``, ``displayTimeUnit`` (``ms``) and
    ``otherData`` (the run's name, algorithm and folder, and what the times are).

    Raises:
        SflsimError: see :func:`chrome_trace_events`.
        OSError: ``path`` cannot be written.
    """
    run_dir, path = Path(run_dir), Path(path)
    events = chrome_trace_events(run_dir)
    head = [next(events)]  # the checks of the run and its table, before any file is made
    summary = read_result(run_dir)[0]
    counts = {"X": 0, "i": 0, "threads": 0}
    other = {"run": summary.get("name"), "algorithm": summary.get("algorithm"),
             "results": str(run_dir), "clock": "simulated time; ts and dur in microseconds"}

    def write(tmp: Path) -> None:
        with open(tmp, "w") as f:
            f.write('{"traceEvents": [\n')
            for i, event in enumerate(itertools.chain(head, events)):
                if event["ph"] in counts:
                    counts[event["ph"]] += 1
                elif event["name"] == "thread_name" and event["pid"] != ROUNDS_PID:
                    counts["threads"] += 1
                f.write(("" if i == 0 else ",\n") + json.dumps(event, allow_nan=False))
            f.write('\n],\n"displayTimeUnit": "ms",\n"otherData": '
                    + json.dumps(other, allow_nan=False) + "}\n")

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)
    return TraceFile(path, counts["X"], counts["threads"], counts["i"])
