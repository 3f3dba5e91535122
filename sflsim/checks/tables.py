"""The tables have every column sflsim writes, numbers where numbers belong, and agree.

- **Columns.** ``rounds.csv``, the clients and the events tables hold every column
  :mod:`sflsim.metrics.columns` declares (per end layer for the ``<k>`` ones), and no
  time, energy, FLOPs, bytes, count or factor is NaN (but the means of round 0, which
  has no client rows);
- **Rows.** The clients table has one row per client of the scenario per round
  ``rounds.csv`` lists (from round 1), with the client's group, profile and end layer;
  events on a device's own compute or radio are done for that client;
- **Sums.** Each round's bytes, FLOPs, energy by part and clients by status in
  ``rounds.csv`` are the sums of its clients-table rows (``client_flops_mean`` and
  ``activated_params_mean`` their means), ``server_flops``, ``server_busy_s`` and
  ``server_jobs`` those of its server events; round 0, the untrained model, has them
  all 0;
- **Accuracies.** ``rounds.csv``'s accuracies, over all clients and per end layer, are
  the means of the clients table's; in every round, round 0 too, the accuracy over all
  clients is the mean of the end layers' weighted by their clients;
- **Summary.** Once the run has ended, ``summary.json``'s totals (bytes, FLOPs, client
  energy, simulated time, rounds completed, clients, events) are those of the tables,
  its final accuracies those of the last round with a ``server_accuracy``, and its name,
  algorithm, seed and planned rounds the scenario's;
- **Signs.** Losses and wall-clock times are not negative, and losses are finite.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import COMPUTE, DOWNLINK, SERVER, UPLINK, Run
from sflsim.checks.report import close, g
from sflsim.metrics import columns as cols
from sflsim.text import plural

STATUSES = ("trained", "dropped", "late", "offline", "not_sampled", "over_committed")
#: the statuses a run's ``summary.json`` can give (as the run loop writes them)
RUN_STATUSES = ("running", "completed", "interrupted", "diverged", "failed")
#: units whose columns hold a number in every row
NUMBERS = (cols.S, cols.J, cols.BYTES, cols.FLOPS, cols.COUNT, cols.FACTOR)
#: label columns that hold numbers
NUMBER_LABELS = ("round", "client_id", "end_layer", "cut_layer", "seq")
#: rounds.csv columns that are means over client rows: NaN in round 0, which has none
MEANS = ("client_flops_mean", "activated_params_mean")


def check_columns(run: Run) -> None:
    """Declared columns present, and numbers where numbers belong."""
    layers = sorted({d.end_layer for d in run.hw.devices})
    for key, table, frame in (("rounds", cols.ROUNDS, run.rounds),
                              ("clients", cols.CLIENTS, run.clients),
                              ("events", cols.EVENTS, run.events)):
        declared = cols.expand(table, layers if key == "rounds" else ())
        missing = [c for c in declared if c not in frame.columns]
        for name in missing:
            run.add(key, None, name, "no such column, though sflsim writes it in every run: "
                    "the file was edited, or written before the column was",
                    f"{run.names[key]}'s columns")
        for name in declared:
            if name not in frame.columns:
                continue
            unit = _unit(table, name)
            if unit not in NUMBERS and name not in NUMBER_LABELS:
                continue
            values = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
            bad = ~np.isfinite(values)
            if key == "rounds" and name in MEANS:
                bad &= frame["round"].to_numpy() != 0
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                rnd = int(frame["round"].iloc[first])
                n = int(bad.sum())
                run.add(key, rnd, name, f"{plural(n, 'row')} {'holds' if n == 1 else 'hold'} NaN "
                        f"or infinity where sflsim writes a number ({unit or 'a number'})",
                        f"{name} column")


def _unit(table: cols.Table, name: str) -> str:
    column = table.columns.get(name)
    if column is None:
        for pattern, c in table.columns.items():
            if cols.is_pattern(pattern) and name.startswith(pattern.split(cols.LAYER)[0]):
                return c.unit
        return ""
    return column.unit


def check_rows(run: Run) -> None:
    """One clients-table row per client and listed round, as the scenario has it."""
    clients, f = run.clients, "clients"
    listed = set(clients["round"].astype(int).tolist())
    for r in sorted(r for r in run.bounds if r >= 1 and r not in listed):
        run.add(f, r, "", f"no rows, though {run.names['rounds']} lists the round",
                "the clients table")
    for r in sorted(listed - set(run.bounds)):
        run.add(f, r, "", f"rows of a round that {run.names['rounds']} does not list",
                "the clients table")
    for r, rows in clients.groupby("round", sort=True):
        ids = sorted(rows["client_id"].astype(int).tolist())
        if ids != list(range(run.n)):
            run.add(f, int(r), "client_id", f"rows of clients {_ids(ids)}, not one of each of "
                    f"the scenario's {run.n} clients", "the clients table")
    for name, want in (("group", lambda d: d.group), ("profile", lambda d: d.profile),
                       ("end_layer", lambda d: d.end_layer)):
        if name not in clients:
            continue
        have = clients[name].tolist()
        for k, (r, c) in enumerate(zip(clients["round"], clients["client_id"])):
            d = run.device(int(c))
            if _label(have[k]) != _label(want(d)):
                run.add(f, int(r), f"client {int(c)}", f"{name} {have[k]!r}, but the scenario "
                        f"gives {want(d)!r}", f"{name} column")
                break
    statuses = clients["status"].astype(str)
    unknown = ~statuses.isin(STATUSES)
    for k in np.flatnonzero(unknown.to_numpy())[:1]:
        run.add(f, int(clients["round"].iloc[k]), f"client {int(clients['client_id'].iloc[k])}",
                f"status {statuses.iloc[k]!r}, not one of {', '.join(STATUSES)} "
                f"({plural(int(unknown.sum()), 'such row')})", "status column")
    own = np.isin(run.kind, (COMPUTE, UPLINK, DOWNLINK)) & (run.owner != run.cid)
    for i in np.flatnonzero(own)[:1]:
        run.add("events", int(run.rnd[i]), run.actor[i], f"{run.activity[i]} on client "
                f"{run.owner[i]}'s device is recorded as done for client {run.cid[i]} "
                f"({plural(int(own.sum()), 'such event')})", "client_id column")


def check_fractions(run: Run) -> None:
    """Accuracies (``*accuracy*`` columns of the rounds and clients tables) are fractions:
    0 to 1, or empty where nothing was measured."""
    for table, frame in (("rounds", run.rounds), ("clients", run.clients)):
        for column in [c for c in frame.columns if "accuracy" in str(c)]:
            values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
            bad = np.flatnonzero((values < 0) | (values > 1))
            for k in bad[:1]:
                run.add(table, int(frame["round"].iloc[k]), column,
                        f"{column} {values[k]:g}, not a fraction from 0 to 1 "
                        f"({plural(len(bad), 'such row')})", f"{column} column")


def check_signs(run: Run) -> None:
    """Losses (cross-entropy) and wall-clock times are not negative, and a loss is finite
    (empty where nothing was measured)."""
    for table, frame in (("rounds", run.rounds), ("clients", run.clients)):
        for column in [c for c in frame.columns if str(c).endswith("_loss")
                       or str(c) == "wall_time_s"]:
            values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
            bad = np.flatnonzero((values < 0) | np.isinf(values))
            for k in bad[:1]:
                run.add(table, int(frame["round"].iloc[k]), column,
                        f"{column} {g(values[k])}, not a number from 0 up "
                        f"({plural(len(bad), 'such row')})", f"{column} column")


def _label(value: object) -> str:
    """A label as text, a whole number (``3``, ``3.0``) as its digits."""
    if isinstance(value, (int, float, np.integer, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _ids(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 8 else f"{ids[:4]} ... {ids[-2:]} ({len(ids)})"


def check_sums(run: Run) -> None:
    """``rounds.csv`` against the clients table and the server events."""
    clients = run.clients
    sums = clients.groupby("round").agg(**{
        k: (v, "sum") for k, v in (("bytes_up", "bytes_up"), ("bytes_down", "bytes_down"),
                                   ("client_flops", "client_flops"),
                                   ("client_energy_j", "energy_j"),
                                   ("client_compute_energy_j", "compute_energy_j"),
                                   ("client_radio_energy_j", "radio_energy_j"),
                                   ("client_idle_energy_j", "idle_energy_j")) if v in clients})
    means = clients.groupby("round").agg(**{
        k: (v, "mean") for k, v in (("client_flops_mean", "client_flops"),
                                    ("activated_params_mean", "activated_params")) if v in clients})
    counts = clients.groupby(["round", "status"]).size().to_dict()
    server = run.kind == SERVER
    sframe = pd.DataFrame({"r": run.rnd[server], "f": run.flops[server],
                           "d": run.end[server] - run.start[server]})
    s_flops = sframe.groupby("r")["f"].sum().to_dict()
    s_busy = sframe.groupby("r")["d"].sum().to_dict()
    s_jobs = sframe.groupby("r").size().to_dict()
    n_events = pd.Series(run.rnd).value_counts().to_dict()
    for _, row in run.rounds.iterrows():
        r = int(row["round"])  # round 0, the untrained model, has no rows: all sums 0
        end = run.bounds.get(r, (0.0, 0.0))[1]
        scale = abs(end) * (n_events.get(r, 0) + run.n + 1)
        checks = [(c, sums[c].get(r, 0.0), "the clients table's rows", scale * 100)
                  for c in sums.columns]
        checks += [(c, means[c].get(r, np.nan), "the clients table's rows (mean)", 0.0)
                   for c in means.columns]
        checks += [("server_flops", s_flops.get(r, 0.0), "its server events", 0.0),
                   ("server_busy_s", s_busy.get(r, 0.0), "its server events", scale),
                   ("server_jobs", s_jobs.get(r, 0), "its server events", 0.0)]
        checks += [(f"clients_{s}", counts.get((r, s), 0), f"the clients table's {s} rows", 0.0)
                   for s in STATUSES]
        for name, want, what, tol in checks:
            if name in row and not close(row[name], want, tol):
                why = (f"{what} give {g(float(want))}" if r else "round 0 is the untrained "
                       "model: nothing is sent, computed, spent or counted before round 1")
                run.add("rounds", r, name, f"{g(float(row[name]))}, but {why}", f"{name} column")


def check_accuracy_means(run: Run) -> None:
    """``rounds.csv``'s ``server_accuracy`` and ``client_accuracy``, over all clients and
    per end layer (``_l<k>``), are the means of the clients table's in every round from
    1 (round 0, the untrained model, has no client rows); empty where those are."""
    clients, rounds = run.clients, run.rounds[run.rounds["round"] >= 1]
    for part in ("server_accuracy", "client_accuracy"):
        if part not in clients:
            continue
        values = pd.to_numeric(clients[part], errors="coerce")
        means = [(part, "its clients", values.groupby(clients["round"]).mean())]
        if "end_layer" in clients:
            means += [(f"{part}_l{int(k)}", f"its clients at end layer {int(k)}",
                       sub.groupby(clients.loc[sub.index, "round"]).mean())
                      for k, sub in values.groupby(clients["end_layer"])]
        for column, whose, mean in means:
            if column not in rounds:
                continue
            have = pd.to_numeric(rounds[column], errors="coerce").to_numpy(dtype=float)
            want = mean.reindex(rounds["round"].to_numpy()).to_numpy(dtype=float)
            bad = np.flatnonzero((np.isnan(have) != np.isnan(want)) | ~close(have, want))
            for k in bad[:1]:
                told = (f"the clients table has no {part} of {whose} (not evaluated"
                        f"{', or no exit heads' if part == 'client_accuracy' else ''})"
                        if np.isnan(want[k]) else
                        f"the mean of the clients table's {part} over {whose} is {g(want[k])}")
                run.add("rounds", int(rounds["round"].iloc[k]), column,
                        f"{g(have[k])}, but {told} ({plural(len(bad), 'such round')})",
                        f"{column} column")
    _overall_from_layers(run)


def _overall_from_layers(run: Run) -> None:
    """In every round, round 0 too, ``server_accuracy`` and ``client_accuracy`` are the
    means of their ``_l<k>`` columns weighted by the clients at each end layer."""
    counts = run.clients_per_end_layer()
    rounds = run.rounds
    for part in ("server_accuracy", "client_accuracy"):
        columns = [f"{part}_l{k}" for k in counts]
        if part not in rounds or any(c not in rounds for c in columns):
            continue
        have = pd.to_numeric(rounds[part], errors="coerce").to_numpy(dtype=float)
        layers = np.column_stack([pd.to_numeric(rounds[c], errors="coerce").to_numpy(float)
                                  for c in columns])
        want = layers @ np.array(list(counts.values()), float) / run.n
        bad = np.flatnonzero((np.isnan(have) != np.isnan(want)) | ~close(have, want))
        for k in bad[:1]:
            run.add("rounds", int(rounds["round"].iloc[k]), part,
                    f"{g(have[k])}, but its {', '.join(columns)} weighted by the clients at "
                    f"each end layer give {g(want[k])} ({plural(len(bad), 'such round')})",
                    f"{part} column")


def check_summary(run: Run) -> None:
    """``summary.json``'s totals, once the run has ended."""
    summary, rounds = run.tables.summary, run.rounds
    if summary is None and run.tables.stopped and (rounds["round"] >= 1).any():
        # a run writes summary.json after every round's rows, and holds its folder
        run.add("summary", None, "", "missing, yet rounds.csv lists finished rounds and no "
                "process is writing the run: it was deleted, or the run was killed while "
                "it wrote a round (`sflsim run SCENARIO -o DIR --resume` writes it again)")
    if summary is not None and summary.get("status") not in RUN_STATUSES:
        run.add("summary", None, "status", f"{summary.get('status')!r} is not a status a run "
                f"ends with or runs under; valid: {', '.join(RUN_STATUSES)}", "status in summary.json")
    if summary is None or run.tables.in_progress:
        return
    done = rounds[rounds["round"] >= 1]
    wants: dict[str, float] = {c: float(done[c].sum()) for c in (
        "bytes_up", "bytes_down", "client_flops", "server_flops", "client_energy_j")
        if c in done}
    if len(rounds):
        wants["sim_time_s"] = float(rounds["sim_time_s"].iloc[-1])
        wants["rounds_completed"] = float(len(done))
    wants["num_clients"] = float(run.n)
    wants["events"] = float(len(run.events))
    scale = abs(wants.get("sim_time_s", 0.0)) * (len(run.events) + 1)
    for name, want in wants.items():
        have = summary.get(name)
        if have is None:
            continue
        try:
            have = float(have)
        except (TypeError, ValueError):
            run.add("summary", None, name, f"{have!r} is not a number", f"{name} in summary.json")
            continue
        if not close(have, want, scale * 100):
            run.add("summary", None, name, f"{g(have)}, but {_from(name, run)} gives {g(want)}",
                    f"{name} in summary.json")
    _check_final_accuracies(run, summary, done)
    scenario = run.scenario
    for name, want in (("name", scenario.name), ("algorithm", scenario.algorithm.name),
                       ("seed", scenario.seed), ("rounds_planned", scenario.training.rounds)):
        if name in summary and str(summary[name]) != str(want):
            run.add("summary", None, name, f"{summary[name]!r}, but scenario.yaml gives "
                    f"{want!r}", f"{name} in summary.json")


def _check_final_accuracies(run: Run, summary: dict, done: pd.DataFrame) -> None:
    """``final_*_accuracy`` and ``final_accuracy_by_end_layer``: those of the last round
    with a ``server_accuracy`` (null without one)."""
    measured = done[pd.to_numeric(done["server_accuracy"], errors="coerce").notna()] \
        if "server_accuracy" in done else done.iloc[:0]
    last = measured.iloc[-1] if len(measured) else None
    wants = {f"final_{k}": k for k in ("server_accuracy", "client_accuracy")}
    layers = summary.get("final_accuracy_by_end_layer")
    layers = layers if isinstance(layers, dict) else {}
    for name, column in [*wants.items(), *((f"final_accuracy_by_end_layer.{k}", k)
                                           for k in layers)]:
        have = layers.get(column) if name.startswith("final_accuracy_by") else summary.get(name)
        want = None if last is None or column not in last else last[column]
        have_f = float("nan") if have is None else pd.to_numeric(have, errors="coerce")
        want_f = float("nan") if want is None else float(want)
        if (np.isnan(have_f) != np.isnan(want_f)) or not close(have_f, want_f):
            where = "no round has a server_accuracy" if last is None else \
                f"round {int(last['round'])}, the last with a server_accuracy, gives"
            run.add("summary", None, name, f"{have!r}, but {run.names['rounds']}: {where} "
                    f"{'' if last is None else g(want_f)}".rstrip(), f"{name} in summary.json")


def _from(name: str, run: Run) -> str:
    if name == "num_clients":
        return "the scenario"
    return run.names["events"] if name == "events" else run.names["rounds"]
