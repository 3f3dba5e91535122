"""A run's files read for the check: every damaged or foreign file is one error line.

:func:`read_run` reads a results directory (``scenario.yaml`` validated against the
profiles the run kept in ``profiles/``, ``summary.json``, ``rounds.csv``, the clients and
events tables); :func:`prepare` puts tables, from files or from memory, in the form
the checks read, and raises :class:`~sflsim.errors.SflsimError` naming the file, and
where it applies the round and the client, for what cannot be checked at all: a file
that does not parse, text where numbers belong, a column the check cannot do without,
a client the scenario does not have (events of another run). Everything else that is
wrong is a :class:`~sflsim.checks.report.Violation`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sflsim.checks.hardware import Hardware, read_profiles
from sflsim.errors import SflsimError
from sflsim.text import plural

#: columns without which a table cannot be checked at all
NEEDED = {
    "rounds": ("round", "sim_time_s", "round_time_s"),
    "clients": ("round", "client_id", "status"),
    "events": ("round", "actor", "activity", "client_id", "start_s", "end_s"),
}
#: ``summary.json``'s totals the check compares: numbers where they are given
SUMMARY_NUMBERS = ("bytes_up", "bytes_down", "client_flops", "server_flops", "client_energy_j",
                   "sim_time_s", "rounds_completed", "num_clients", "events")
#: text columns of the tables (every other column holds numbers)
TEXT = ("group", "profile", "domain", "status", "note", "actor", "activity")
_CLIENT_ACTOR = re.compile(r"client(\d+)(?::(uplink|downlink))?")


@dataclass
class Tables:
    """A run's tables as the checks read them.

    Attributes:
        scenario: the resolved :class:`~sflsim.config.scenario.Scenario`.
        hardware: its devices, links and server (:mod:`sflsim.checks.hardware`).
        rounds, clients, events: the tables; only the rounds ``rounds.csv`` lists
            (a round is finished once its row is written).
        summary: ``summary.json`` (None: none written yet).
        names: file names to report, by table (``rounds``, ``clients``, ``events``,
            ``summary``).
        status: ``summary.json``'s status, or ``"no summary.json"``.
        unfinished: rounds in the clients or events table that ``rounds.csv`` does
            not list yet (a run in progress writes a round's tables first): not checked.
        missing: per table, the columns sflsim writes that the file lacks.
        early_exit: ``early_exit.csv`` (None: the run has none).
        held: whether a process held the folder when it was read
            (:func:`~sflsim.metrics.lock.is_held`: a run writing it); None for tables
            given in memory, or where that cannot be told.
    """

    scenario: object
    hardware: Hardware
    rounds: pd.DataFrame
    clients: pd.DataFrame
    events: pd.DataFrame
    summary: dict | None
    names: dict[str, str]
    status: str
    unfinished: list[int] = field(default_factory=list)
    missing: dict[str, list[str]] = field(default_factory=dict)
    manifest: dict | None = None
    early_exit: pd.DataFrame | None = None
    held: bool | None = None

    @property
    def in_progress(self) -> bool:
        """Whether the run had not ended when its files were read (or never said so)."""
        return self.status in ("running", "no summary.json")

    @property
    def stopped(self) -> bool:
        """Whether the run had not ended, yet no process was writing it: it was killed, or
        its ``summary.json`` was deleted or edited."""
        return self.in_progress and self.held is False


def read_run(run_dir: str | Path) -> Tables:
    """The tables of the results directory ``run_dir``.

    Raises:
        SflsimError: ``run_dir`` is not a results directory, or a file of it cannot be
            read or is not this run's (see the module docstring).
    """
    from sflsim.metrics import results

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not (run_dir / "scenario.yaml").is_file():
        raise SflsimError(results.not_a_folder_of(
            run_dir, "results directory", "scenario.yaml, rounds.csv and summary.json",
            f"sflsim run SCENARIO -o {run_dir}"))
    from sflsim.metrics.lock import is_held

    held = is_held(run_dir)  # before the files: a run that ends meanwhile reads as running
    summary = _read_summary(run_dir / "summary.json")
    rounds_path = run_dir / "rounds.csv"
    if not rounds_path.is_file():
        raise SflsimError(f"{run_dir} holds no finished round yet (scenario.yaml, but no "
                          f"rounds.csv): a run still starting, or one stopped before its "
                          f"first round ended; check it once a round has ended")
    rounds = _read_csv(rounds_path)
    names = {"rounds": "rounds.csv", "summary": "summary.json"}
    tables = {}
    for table in ("clients", "events"):
        path = results.run_table_path(run_dir, table)
        if path is None:
            raise SflsimError(f"{run_dir} has no {table}.parquet or {table}.csv; give a "
                              f"results directory of `sflsim run`")
        if path.is_dir() and not any(path.glob("*.parquet")):
            raise SflsimError(f"{path} holds no Parquet file: the table's files were deleted "
                              f"or never written; the check needs them")
        names[table] = path.name
        tables[table] = results.read_run_table(run_dir, table)
    scenario, hardware = _read_scenario(run_dir)
    manifest = None
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        pass
    early_exit = run_dir / "early_exit.csv"
    return prepare(scenario, rounds, tables["clients"], tables["events"], summary, names,
                   manifest=manifest if isinstance(manifest, dict) else None,
                   folder=run_dir, hardware=hardware, held=held,
                   early_exit=_read_csv(early_exit) if early_exit.is_file() else None)


def _read_summary(path: Path) -> dict | None:
    if not path.exists():
        return None
    from sflsim.metrics.reading import read_json_object

    summary = read_json_object(path)
    for key in SUMMARY_NUMBERS:
        value = summary.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SflsimError(f"{path}: {key} is {value!r}, not a number: the file cannot be "
                              f"read as sflsim writes it; it was edited or cut short")
    return summary


def _read_csv(path: Path) -> pd.DataFrame:
    from sflsim.metrics.reading import read_result_csv

    return read_result_csv(path)


def _read_scenario(run_dir: Path) -> tuple[object, Hardware]:
    """The run's resolved scenario and its hardware, read with the profiles the run kept
    searched first."""
    from sflsim.config.load import read_yaml_mapping, validate_scenario
    from sflsim.hardware import profiles
    from sflsim.metrics import results

    path = run_dir / "scenario.yaml"
    kept = run_dir / results.PROFILES_FOLDER  # the profiles the run read, as they were
    with profiles.searched_first(kept if kept.is_dir() else None):
        scenario = validate_scenario(read_yaml_mapping(path), where=str(path))
        return scenario, read_profiles(scenario)


def prepare(scenario: object, rounds: pd.DataFrame, clients: pd.DataFrame,
            events: pd.DataFrame, summary: dict | None = None,
            names: dict[str, str] | None = None, *, manifest: dict | None = None,
            folder: Path | None = None, hardware: Hardware | None = None,
            early_exit: pd.DataFrame | None = None, held: bool | None = None) -> Tables:
    """The tables in the form the checks read (see :class:`Tables`); ``hardware`` as
    :func:`~sflsim.checks.hardware.read_profiles` gives it (None: from the profiles
    found now).

    Raises:
        SflsimError: a table lacks a column of :data:`NEEDED`, holds text where numbers
            belong, or names a client the scenario does not have.
    """
    names = {"rounds": "rounds.csv", "clients": "clients table", "events": "events table",
             "summary": "summary.json", "early_exit": "early_exit.csv", **(names or {})}
    where = {k: str(folder / v) if folder is not None else v for k, v in names.items()}
    frames = {"rounds": rounds.copy(), "clients": clients.copy(), "events": events.copy()}
    for table, frame in frames.items():
        absent = [c for c in NEEDED[table] if c not in frame.columns]
        if absent:
            raise SflsimError(f"{where[table]} has no column {', '.join(absent)}: its header "
                              f"was edited or cut, or it is not sflsim's")
        _numbers(frame, where[table])
    rounds = frames["rounds"].sort_values("round", kind="stable").reset_index(drop=True)
    status = "no summary.json" if summary is None else str(summary.get("status", "unknown"))
    clients, events = frames["clients"], frames["events"]
    unfinished: list[int] = []
    if status != "completed" and len(rounds):
        # a run writes a round's tables before its rounds.csv row: a round the file does
        # not list yet is not finished, and is not checked
        last = int(rounds["round"].max())
        later = pd.concat([clients["round"], events["round"]])
        unfinished = sorted(int(r) for r in set(later[later > last].tolist()))
        clients = clients[clients["round"] <= last]
        events = events[events["round"] <= last]
    n = int(scenario.num_clients)
    _foreign_clients(clients, events, n, where)
    events = events.reset_index(drop=True)
    events["actor"] = events["actor"].astype(str)
    if "cut_off" in events:
        events["cut_off"] = events["cut_off"].astype(bool)
    if hardware is None:
        hardware = read_profiles(scenario)
    return Tables(scenario, hardware, rounds, clients.reset_index(drop=True), events, summary,
                  names, status, unfinished, {}, manifest, early_exit, held)


def _numbers(frame: pd.DataFrame, where: str) -> None:
    """Raise naming the first cell of ``frame`` that holds text where sflsim writes a
    number (a file edited by hand, or damaged)."""
    for column in frame.columns:
        if column in TEXT or column == "cut_off" or pd.api.types.is_numeric_dtype(frame[column]):
            continue
        cells = frame[column]
        bad = cells.notna() & pd.to_numeric(cells, errors="coerce").isna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            at = f"row {i + 2}" + (f" (round {frame['round'].iloc[i]})" if "round" in frame
                                   and column != "round" else "")
            raise SflsimError(f"{where}: {at}: {column} is {cells.iloc[i]!r}, not a number: "
                              f"the file was edited or is damaged")
        frame[column] = pd.to_numeric(cells)


def _foreign_clients(clients: pd.DataFrame, events: pd.DataFrame, n: int,
                     where: dict[str, str]) -> None:
    """Raise naming the file, round and client of the first row that names a client the
    run does not have (a table of another run, or of the same scenario with another
    number of clients), or no round at all."""
    for table, frame in (("clients", clients), ("events", events)):
        rounds = frame["round"].to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(rounds) | (rounds != np.round(rounds)))
        if len(bad):
            raise SflsimError(f"{where[table]}: row {int(bad[0]) + 2}: round is "
                              f"{frame['round'].iloc[int(bad[0])]!r}, not a round number: the "
                              f"file was edited or is damaged")
    run = (f"the run has {plural(n, 'client')}, 0 to {n - 1}, as its scenario.yaml says"
           if n else "the run's scenario.yaml has no client")
    ids = clients["client_id"].to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(ids) | (ids < 0) | (ids >= n) | (ids != np.round(ids)))
    if len(bad):
        i = int(bad[0])
        raise SflsimError(f"{where['clients']}: round {_at(clients, i)}: client "
                          f"{_cell(ids[i])}: no such client ({run}): the table is from "
                          f"another run or damaged, or scenario.yaml was edited")
    ids = events["client_id"].to_numpy(dtype=float)
    owner = np.array([_owner(a) for a in events["actor"].astype(str)], dtype=float)
    bad_id = ~np.isfinite(ids) | (ids < -1) | (ids >= n) | (ids != np.round(ids))
    bad = np.flatnonzero(bad_id | (owner >= n))
    if len(bad):
        i = int(bad[0])
        actor = str(events["actor"].iloc[i])
        who = actor if owner[i] >= n else f"client {_cell(ids[i])}"
        raise SflsimError(f"{where['events']}: round {_at(events, i)}: {who}: no such client "
                          f"({run}): the events are from another run or damaged, or "
                          f"scenario.yaml was edited")


def _owner(actor: str) -> int:
    m = _CLIENT_ACTOR.fullmatch(actor)
    return int(m.group(1)) if m else -1


def _at(frame: pd.DataFrame, i: int) -> str:
    return _cell(frame["round"].iloc[i])


def _cell(value: object) -> str:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return repr(value)
    return str(int(f)) if np.isfinite(f) and f == int(f) else repr(value)
