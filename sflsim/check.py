"""Check a run's results against the simulator's own physics and bookkeeping.

:func:`check_run` reads a results directory (``rounds.csv``, the clients and events
tables, ``summary.json`` and the resolved ``scenario.yaml``, whose device, link and
server profiles give the powers, bandwidths, latencies and slots: the copies the run kept
in its ``profiles/`` folder, else today's library) and returns every
:class:`Violation` of these rules (``sflsim check DIR`` prints them):

- **Time moves forward.** ``rounds.csv``'s ``sim_time_s`` never decreases and each
  ``round_time_s`` is the step from the round before; every event belongs to a round of
  ``rounds.csv``, ends no earlier than it starts, waited no negative time
  (``queue_s``) and lies inside its round.
- **Capacity one.** A device's compute (actor ``client<i>``) runs one activity at a
  time; so does each direction of its radio (``client<i>:uplink`` /
  ``client<i>:downlink``), counting the part of each transfer in which its bits are
  sent (its serialisation: arrival minus the hop's latency; of a cut-off transfer on a
  shared hop, the least time its bytes could take); the server runs at most
  ``server.slots`` jobs at once.
- **Bits take time.** A transfer lasts at least its bits over the highest rate its hop
  could have given (a bandwidth trace's highest step; on a shared access point the
  lower of the capacity's and the device's highest), plus the hop's latency when it
  was not cut off (a cut-off one's bytes are rounded: half a byte of slack).
- **Energy within power.** Per device and round, with ``T`` the round's
  ``round_time_s``: ``compute_s``, ``uplink_s``, ``downlink_s`` and ``idle_s`` are at
  most ``T``; ``compute_energy_j`` <= active power x ``T``, ``radio_energy_j`` <=
  (transmit + receive power) x ``T``, ``idle_energy_j`` <= idle power x ``T`` and
  ``energy_j`` <= peak power (the larger of active and idle, plus both radio powers) x
  ``T``; each part is its time x its power and ``energy_j`` their sum.
- **Tables agree.** Each client row's times, FLOPs and bytes are what its events give
  under the scenario's energy rules (:mod:`sflsim.metrics.records`); each round's sums
  of the clients table (bytes, FLOPs, energy by part, clients by status) and of its
  server events (FLOPs, busy time, jobs) are ``rounds.csv``'s; ``summary.json``'s
  totals (bytes, FLOPs, client energy, simulated time, rounds completed) are those of
  ``rounds.csv`` once the run has ended.

Numbers compare within a relative tolerance of :data:`REL_TOL` plus an absolute
:data:`ABS_TOL` (seconds, joules, FLOPs or bytes as the column says); integer counts
compare exactly.

With the environment variable ``SFLSIM_CHECK_RESULTS=1`` (the test suite sets it),
:func:`sflsim.runner.run_scenario` checks every run it finishes
(:func:`check_if_asked`) and raises :class:`ResultCheckError` on a violation.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from sflsim.errors import SflsimError
from sflsim.metrics import records, results

#: relative tolerance of every comparison of floats
REL_TOL = 1e-9
#: absolute tolerance added to it (in the compared column's unit: s, J, FLOPs, bytes)
ABS_TOL = 1e-9
#: the environment variable that makes :func:`check_if_asked` check a run
CHECK_ENV = "SFLSIM_CHECK_RESULTS"

_COMPUTE = re.compile(r"client\d+")
_RADIO = re.compile(r"client\d+:(uplink|downlink)")
_STATUSES = ("trained", "dropped", "late", "offline", "not_sampled", "over_committed")


@dataclass(frozen=True)
class Violation:
    """One broken rule: the file, the round (None: the run as a whole), the device,
    actor or column concerned, and what is wrong with the numbers."""

    file: str
    round: int | None
    who: str
    message: str

    def __str__(self) -> str:
        where = [self.file] + ([f"round {self.round}"] if self.round is not None else [])
        where += [self.who] if self.who else []
        return f"{': '.join(where)}: {self.message}"


class ResultCheckError(AssertionError):
    """A finished run broke the simulator's physics or bookkeeping (a defect, not the
    user's input); the message lists every :class:`Violation`."""


def _slack(a: object, b: object) -> object:
    return REL_TOL * np.maximum(np.abs(a), np.abs(b)) + ABS_TOL


def _close(a: object, b: object) -> object:
    return np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)) <= _slack(a, b)


def _at_most(a: object, b: object) -> object:
    return np.asarray(a, dtype=float) <= np.asarray(b, dtype=float) + _slack(a, b)


def _g(x: float) -> str:
    return f"{x:.10g}"


# ----- reading ------------------------------------------------------------------------
def check_run(run_dir: str | Path) -> list[Violation]:
    """Every :class:`Violation` of the results in ``run_dir`` (see the module docstring);
    [] when the run is sound.

    Raises:
        SflsimError: ``run_dir`` is not a results directory, or a file of it cannot be
            read (its scenario no longer validates, a profile or trace it names is gone).
    """
    from sflsim.config.load import read_yaml_mapping, validate_scenario
    from sflsim.hardware import profiles

    run_dir = Path(run_dir)
    summary, rounds = results.read_result(run_dir)
    names = {"rounds": "rounds.csv", "summary": "summary.json"}
    for table in ("clients", "events"):
        path = results.run_table_path(run_dir, table)
        if path is None:
            raise SflsimError(f"{run_dir} has no {table}.parquet or {table}.csv; give a "
                              f"results directory of `sflsim run`")
        names[table] = path.name
    scenario_path = run_dir / "scenario.yaml"
    if not scenario_path.is_file():
        raise SflsimError(f"{run_dir} has no scenario.yaml, which the check needs for the "
                          f"run's profiles; give a results directory of `sflsim run`")
    kept = run_dir / results.PROFILES_FOLDER  # the profiles the run read, as they were
    with profiles.searched_first(kept if kept.is_dir() else None):
        scenario = validate_scenario(read_yaml_mapping(scenario_path), where=str(scenario_path))
        clients = results.read_run_table(run_dir, "clients")
        events = results.read_run_table(run_dir, "events", columns=[
            "round", "actor", "activity", "client_id", "start_s", "end_s", "queue_s",
            "payload_bytes", "flops", "cut_off"])
        return check_tables(scenario, rounds, clients, events, summary, names)


def check_result(result: object) -> list[Violation]:
    """:func:`check_run` of a :class:`~sflsim.runner.RunResult`: its results directory,
    or, for a run without one, its tables in memory."""
    if result.output_dir is not None:
        return check_run(result.output_dir)
    return check_tables(result.scenario, result.rounds, result.clients, result.events,
                        result.summary)


def check_if_asked(result: object) -> None:
    """With ``SFLSIM_CHECK_RESULTS`` set to ``1`` (the tests), :func:`check_result`;
    raises :class:`ResultCheckError` listing the violations, if any."""
    if os.environ.get(CHECK_ENV, "").strip().lower() not in ("1", "true", "yes"):
        return
    found = check_result(result)
    if found:
        shown = "\n".join(map(str, found[:50]))
        more = f"\n... and {len(found) - 50} more" if len(found) > 50 else ""
        raise ResultCheckError(f"{len(found)} violation(s) of the simulator's physics or "
                               f"bookkeeping ({CHECK_ENV}):\n{shown}{more}")


# ----- the checks ---------------------------------------------------------------------
def _fleet(scenario: object) -> list[SimpleNamespace]:
    """The run's clients as :class:`~sflsim.metrics.records.ClientTable` reads them: id,
    group, profile and links, built from the scenario as the runner builds them."""
    from sflsim.engine import Simulation
    from sflsim.hardware import profiles
    from sflsim.network import Network

    network = Network(Simulation(), scenario)
    clients = []
    if getattr(scenario, "fleet", None) is not None:  # one row per device (sflsim.fleet)
        from sflsim.fleet import load_fleet

        fleet = load_fleet(scenario.fleet)
        f = fleet.figures
        ends = fleet.end_layers(scenario.fleet_end_layer or 1).tolist()
        for cid, device in enumerate(fleet.devices()):  # FLOP/s unused here
            up, down = network.star_links(cid, f["uplink_bps"][cid], f["downlink_bps"][cid],
                                          f["latency_s"][cid])
            clients.append(SimpleNamespace(
                client_id=cid, group=fleet.group_names[fleet.group[cid]], end_layer=ends[cid],
                device=device, indices=(), uplink=up, downlink=down))
    for group_name, group in scenario.devices.items():
        device = profiles.device_profile(group.profile)
        for _ in range(group.count):
            cid = len(clients)
            up, down = network.links_for(cid, group_name)
            clients.append(SimpleNamespace(client_id=cid, group=group_name, end_layer=group.end_layer,
                                           device=device, indices=(), uplink=up, downlink=down))
    return clients


def check_tables(scenario: object, rounds: pd.DataFrame, clients: pd.DataFrame,
                 events: pd.DataFrame, summary: dict | None = None,
                 names: dict[str, str] | None = None) -> list[Violation]:
    """Every :class:`Violation` of a run given as its tables (``rounds.csv``, clients and
    events tables as frames, ``summary.json`` as a dict); ``scenario`` is the resolved
    :class:`~sflsim.config.schema.Scenario`; ``names`` the file names to report
    (``rounds``, ``clients``, ``events``, ``summary``)."""
    from sflsim.hardware import profiles

    names = {"rounds": "rounds.csv", "clients": "clients table", "events": "events table",
             "summary": "summary.json", **(names or {})}
    fleet = _fleet(scenario)
    table = records.ClientTable(fleet, scenario.energy)
    slots = scenario.server.slots or profiles.server_profile(scenario.server.profile).slots
    out: list[Violation] = []
    rounds = rounds.sort_values("round").reset_index(drop=True)
    if summary is not None and summary.get("status") != "completed" and len(rounds):
        # a run writes a round's tables before its rounds.csv row: one stopped (or looked
        # at) in between holds a round rounds.csv does not list yet, which is not checked
        last = int(rounds["round"].max())
        clients = clients[clients["round"] <= last]
        events = events[events["round"] <= last]
    events = events.reset_index(drop=True)
    events["actor"] = events["actor"].astype(str)
    events["cut_off"] = events["cut_off"].astype(bool)
    bounds = _check_time(rounds, events, names, out)
    _check_capacity(events, table, slots, names, out)
    _check_transfers(events, table, names, out)
    _check_clients(rounds, clients, events, table, bounds, names, out)
    _check_rounds(rounds, clients, events, names, out)
    if summary is not None:
        _check_summary(rounds, summary, names, out)
    return out


def _check_time(rounds: pd.DataFrame, events: pd.DataFrame, names: dict[str, str],
                out: list[Violation]) -> dict[int, tuple[float, float]]:
    """Time moves forward; returns each round's (start, end) (s)."""
    f = names["rounds"]
    end = rounds["sim_time_s"].to_numpy(dtype=float)
    step = rounds["round_time_s"].to_numpy(dtype=float)
    numbers = rounds["round"].to_numpy()
    bounds: dict[int, tuple[float, float]] = {}
    for i, r in enumerate(numbers):
        before = end[i - 1] if i else 0.0
        if i and end[i] < before - _slack(end[i], before):
            out.append(Violation(f, int(r), "sim_time_s", f"{_g(end[i])} s is before the round "
                                 f"before's {_g(before)} s: simulated time went backward"))
        if step[i] < 0 or not _close(step[i], end[i] - before):
            out.append(Violation(f, int(r), "round_time_s", f"{_g(step[i])} s, but sim_time_s "
                                 f"went from {_g(before)} to {_g(end[i])} s"))
        bounds[int(r)] = (end[i] - step[i], end[i])
    f = names["events"]
    ev_round = events["round"].to_numpy()
    known = np.isin(ev_round, [r for r in bounds if r >= 1])
    for r in sorted(set(ev_round[~known].tolist())):
        out.append(Violation(f, int(r), "", f"{int((ev_round == r).sum())} event(s) of a round "
                             f"that {names['rounds']} does not list"))
    start = events["start_s"].to_numpy(dtype=float)
    stop = events["end_s"].to_numpy(dtype=float)
    queue = events["queue_s"].to_numpy(dtype=float)
    rows = pd.Series(ev_round)
    lo = rows.map({r: b[0] for r, b in bounds.items()}).to_numpy(dtype=float)
    hi = rows.map({r: b[1] for r, b in bounds.items()}).to_numpy(dtype=float)
    bad = known & ~(_at_most(start, stop) & _at_most(-queue, 0.0) & _at_most(lo, start)
                    & _at_most(stop, hi))
    for i in np.flatnonzero(bad):
        e = events.iloc[i]
        out.append(Violation(f, int(e["round"]), e["actor"], f"{e['activity']} from "
                             f"{_g(e['start_s'])} to {_g(e['end_s'])} s (queue_s "
                             f"{_g(e['queue_s'])}) is not inside its round, "
                             f"{_g(lo[i])} to {_g(hi[i])} s, or ends before it starts"))
    return bounds


def _overlaps(frame: pd.DataFrame, until: np.ndarray) -> list[int]:
    """Rows of ``frame`` (one actor's activities as ``start_s`` and ``until``, sorted by
    start) that start before an earlier one has ended."""
    start = frame["start_s"].to_numpy(dtype=float)
    busy = until > start
    start, until, rows = start[busy], until[busy], np.flatnonzero(busy)
    if len(start) < 2:
        return []
    latest = np.maximum.accumulate(until)[:-1]
    clash = start[1:] < latest - _slack(start[1:], latest)
    return [int(rows[i + 1]) for i in np.flatnonzero(clash)]


def _check_capacity(events: pd.DataFrame, table: records.ClientTable, slots: int,
                    names: dict[str, str], out: list[Violation]) -> None:
    f = names["events"]
    cols = {c: events[c].to_numpy() for c in events.columns}
    cols["actor"] = events["actor"].tolist()
    sending = records.radio_on_until(cols, table, "serialisation", cut_shared="least")
    actors = events["actor"]
    compute = actors.str.fullmatch(_COMPUTE.pattern)
    radio = actors.str.fullmatch(_RADIO.pattern)
    for mask, what, until in ((compute, "compute", events["end_s"].to_numpy(dtype=float)),
                              (radio, "radio serialisation", sending)):
        for actor, group in events[mask.to_numpy()].groupby("actor", sort=True):
            order = np.lexsort((group["end_s"].to_numpy(), group["start_s"].to_numpy()))
            g = group.iloc[order]
            u = until[g.index.to_numpy()]
            for k in _overlaps(g, u):
                e, before = g.iloc[k], g.iloc[:k]
                prev_end = float(np.max(u[:k]))
                out.append(Violation(f, int(e["round"]), actor, f"{what} of {e['activity']} "
                                     f"starts at {_g(e['start_s'])} s while an earlier activity "
                                     f"({before['activity'].iloc[int(np.argmax(u[:k]))]}) runs "
                                     f"until {_g(prev_end)} s, on a resource of capacity one"))
    server = events[(actors == "server").to_numpy()]
    s = server["start_s"].to_numpy(dtype=float)
    e = server["end_s"].to_numpy(dtype=float)
    keep = e > s + _slack(e, s)
    s, e, rnd = s[keep], e[keep] - _slack(e, s)[keep], server["round"].to_numpy()[keep]
    if len(s):
        times = np.concatenate([s, e])
        delta = np.concatenate([np.ones(len(s), int), -np.ones(len(e), int)])
        order = np.lexsort((delta, times))  # at one instant the ends come first
        running = np.cumsum(delta[order])
        worst = int(np.argmax(running))
        if running[worst] > slots:
            i = order[worst] % len(s)
            out.append(Violation(f, int(rnd[i]), "server", f"{int(running[worst])} jobs at once "
                                 f"at {_g(times[order[worst]])} s, more than its {slots} slot(s)"))


def _check_transfers(events: pd.DataFrame, table: records.ClientTable, names: dict[str, str],
                     out: list[Violation]) -> None:
    f = names["events"]
    hops = table.hops
    known = events["actor"].isin(list(hops)).to_numpy()
    if not known.any():
        return
    sub = events[known]
    hop = [hops[a] for a in sub["actor"]]
    top = np.array([h.max_bps for h in hop], dtype=float)
    latency = np.array([h.latency_s for h in hop], dtype=float)
    cut = sub["cut_off"].to_numpy(dtype=bool)
    bits = 8.0 * sub["payload_bytes"].to_numpy(dtype=float)
    need = np.where(cut, np.maximum(bits - 4.0, 0.0) / top, bits / top + latency)
    took = sub["end_s"].to_numpy(dtype=float) - sub["start_s"].to_numpy(dtype=float)
    for k in np.flatnonzero(~_at_most(need, took)):
        e = sub.iloc[k]
        out.append(Violation(f, int(e["round"]), e["actor"], f"{e['activity']} of "
                             f"{int(e['payload_bytes'])} bytes took {_g(took[k])} s, less than "
                             f"{_g(need[k])} s: its bits at the hop's highest rate "
                             f"{_g(top[k])} bit/s" + ("" if cut[k] else
                                                       f" plus its latency {_g(latency[k])} s")))


#: clients-table columns recomputed from the events (:func:`records.client_round_columns`)
_FROM_EVENTS = ("compute_s", "uplink_s", "downlink_s", "idle_s", "client_flops", "bytes_up",
                "bytes_down")


def _check_clients(rounds: pd.DataFrame, clients: pd.DataFrame, events: pd.DataFrame,
                   table: records.ClientTable, bounds: dict[int, tuple[float, float]],
                   names: dict[str, str], out: list[Violation]) -> None:
    f = names["clients"]
    power = {cid: i for i, cid in enumerate(table.ids)}
    by_round = dict(tuple(events.groupby("round", sort=True)))
    listed = set(clients["round"].tolist()) if len(clients) else set()
    for r in (r for r in bounds if r >= 1 and r not in listed):
        out.append(Violation(f, r, "", f"no rows, though {names['rounds']} lists the round"))
    for r, rows in clients.groupby("round", sort=True):
        r = int(r)
        if r not in bounds:
            out.append(Violation(f, r, "", f"rows of a round that {names['rounds']} does not "
                                 f"list"))
            continue
        start, end = bounds[r]
        span = end - start
        rows = rows.sort_values("client_id")
        ids = rows["client_id"].to_numpy()
        if ids.tolist() != table.ids:
            out.append(Violation(f, r, "client_id", f"rows of clients {ids.tolist()}, not one "
                                 f"of each of the scenario's clients 0 to {len(table.ids) - 1}"))
            continue
        at = np.array([power[int(c)] for c in ids])
        active, tx, rx, idle_w = (a[at] for a in (table.active_w, table.tx_w, table.rx_w,
                                                   table.idle_w))
        col = {c: rows[c].to_numpy(dtype=float) for c in (
            "compute_s", "uplink_s", "downlink_s", "idle_s", "energy_j", "compute_energy_j",
            "radio_energy_j", "idle_energy_j")}
        peak = np.maximum(active, idle_w) + tx + rx
        limits = [("compute_s", col["compute_s"], span, "the round time"),
                  ("uplink_s", col["uplink_s"], span, "the round time"),
                  ("downlink_s", col["downlink_s"], span, "the round time"),
                  ("idle_s", col["idle_s"], span, "the round time"),
                  ("compute_energy_j", col["compute_energy_j"], active * span,
                   "active power x round time"),
                  ("radio_energy_j", col["radio_energy_j"], (tx + rx) * span,
                   "(transmit + receive power) x round time"),
                  ("idle_energy_j", col["idle_energy_j"], idle_w * span,
                   "idle power x round time"),
                  ("energy_j", col["energy_j"], peak * span, "peak power x round time")]
        for name, value, bound, what in limits:
            bound = np.broadcast_to(bound, value.shape)
            for k in np.flatnonzero(~_at_most(value, bound) | (value < -_slack(value, 0.0))):
                out.append(Violation(f, r, f"client {ids[k]}", f"{name} {_g(value[k])} exceeds "
                                     f"{what}, {_g(bound[k])} (round time {_g(span)} s)"))
        parts = [("compute_energy_j", col["compute_s"] * active, "compute_s x active power"),
                 ("radio_energy_j", col["uplink_s"] * tx + col["downlink_s"] * rx,
                  "uplink_s x transmit power + downlink_s x receive power"),
                 ("idle_energy_j", col["idle_s"] * idle_w, "idle_s x idle power"),
                 ("energy_j", col["compute_energy_j"] + col["radio_energy_j"]
                  + col["idle_energy_j"], "the sum of its parts")]
        for name, want, what in parts:
            for k in np.flatnonzero(~_close(col[name], want)):
                out.append(Violation(f, r, f"client {ids[k]}", f"{name} {_g(col[name][k])} is not "
                                     f"{what}, {_g(want[k])}"))
        ev = by_round.get(r, events.iloc[:0])
        cols = {c: ev[c].to_numpy() for c in ev.columns}
        cols["actor"] = ev["actor"].tolist()
        statuses = dict(zip(ids.tolist(), rows["status"].astype(str).tolist()))
        want = records.client_round_columns(r, cols, table, start, end, None, status=statuses)
        for name in _FROM_EVENTS:
            have = rows[name].to_numpy(dtype=float)
            expect = np.asarray(want[name], dtype=float)
            for k in np.flatnonzero(~_close(have, expect)):
                out.append(Violation(f, r, f"client {ids[k]}", f"{name} {_g(have[k])}, but its "
                                     f"events in {names['events']} give {_g(expect[k])}"))


def _check_rounds(rounds: pd.DataFrame, clients: pd.DataFrame, events: pd.DataFrame,
                  names: dict[str, str], out: list[Violation]) -> None:
    f = names["rounds"]
    sums = clients.groupby("round").agg(
        bytes_up=("bytes_up", "sum"), bytes_down=("bytes_down", "sum"),
        client_flops=("client_flops", "sum"), client_energy_j=("energy_j", "sum"),
        client_compute_energy_j=("compute_energy_j", "sum"),
        client_radio_energy_j=("radio_energy_j", "sum"),
        client_idle_energy_j=("idle_energy_j", "sum")) if len(clients) else pd.DataFrame()
    counts = clients.groupby(["round", "status"]).size() if len(clients) else pd.Series(dtype=int)
    server = events[events["actor"] == "server"]
    busy = (server["end_s"] - server["start_s"]).groupby(server["round"]).sum()
    s_flops = server["flops"].groupby(server["round"]).sum()
    jobs = server.groupby("round").size()
    for _, row in rounds.iterrows():
        r = int(row["round"])
        if r < 1:
            continue
        checks = [(c, sums[c].get(r, 0.0) if c in sums else 0.0, "the clients table's rows")
                  for c in ("bytes_up", "bytes_down", "client_flops", "client_energy_j",
                            "client_compute_energy_j", "client_radio_energy_j",
                            "client_idle_energy_j")]
        checks += [("server_flops", s_flops.get(r, 0.0), "its server events"),
                   ("server_busy_s", busy.get(r, 0.0), "its server events"),
                   ("server_jobs", jobs.get(r, 0), "its server events")]
        checks += [(f"clients_{s}", counts.get((r, s), 0), f"the clients table's {s} rows")
                   for s in _STATUSES]
        for name, want, what in checks:
            if name not in row or (isinstance(row[name], float) and math.isnan(row[name])):
                continue
            if not _close(row[name], want):
                out.append(Violation(f, r, name, f"{_g(float(row[name]))}, but {what} give "
                                     f"{_g(float(want))}"))


def _check_summary(rounds: pd.DataFrame, summary: dict, names: dict[str, str],
                   out: list[Violation]) -> None:
    if summary.get("status") == "running":  # written a round at a time: may lag rounds.csv
        return
    f = names["summary"]
    wants = {c: float(rounds[c].sum()) for c in (
        "bytes_up", "bytes_down", "client_flops", "server_flops", "client_energy_j")
        if c in rounds}
    if len(rounds):
        wants["sim_time_s"] = float(rounds["sim_time_s"].iloc[-1])
        wants["rounds_completed"] = float((rounds["round"] >= 1).sum())
    for name, want in wants.items():
        have = summary.get(name)
        if have is None:
            continue
        if not _close(float(have), want):
            out.append(Violation(f, None, name, f"{_g(float(have))}, but {names['rounds']} "
                                 f"gives {_g(want)}"))


def summary_line(run_dir: str | Path, found: list[Violation]) -> str:
    """One line saying what was checked: rounds, clients, events (for ``sflsim check``)."""
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    rounds = summary.get("rounds_completed")
    what = f"{rounds} round(s)" if rounds is not None else "the run"
    # a run under way, or one killed before it could say how it ended
    so_far = " (so far: summary.json says running)" if summary.get("status") == "running" else ""
    if found:
        return f"{len(found)} violation(s) in {what} of {run_dir}{so_far}"
    keep = "keeps" if rounds is None else "keep"
    return f"ok: {what} of {run_dir} {keep} the simulator's physics and bookkeeping{so_far}"
