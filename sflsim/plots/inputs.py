"""Reading the result files a figure needs, with one clear error when one is missing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result, read_result_csv

#: How the figures name the algorithms (as their papers do); others keep their registry name.
ALGORITHM_NAMES = {
    "hetero_splitee_sequential": "Hetero-SplitEE Seq.",
    "hetero_splitee_averaging": "Hetero-SplitEE Avg.",
    "distributed": "Distributed",
    "centralized": "Centralized",
    "splitfed_v1": "SplitFed V1",
    "splitfed_v2": "SplitFed V2",
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "fedbabu": "FedBABU",
    "fedmut": "FedMut",
    "fedsga": "FedSGA",
    "multisfl": "MultiSFL",
}

#: What to do when a run lacks a table: the hint appended to the error.
HINTS = {
    "events.csv": "it is written by `sflsim run`; rerun the scenario to get the event trace",
    "clients.csv": "it is written by `sflsim run`; rerun the scenario",
    "early_exit.csv": "run with evaluation.early_exit.enabled: true",
}


def read_run_table(run_dir: str | Path, name: str, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """``run_dir/name`` as a DataFrame, after checking that ``run_dir`` is a results directory.

    Args:
        run_dir: a results directory of ``sflsim run``.
        name: the file, e.g. ``"events.csv"``.
        columns: columns the caller needs.

    Raises:
        SflsimError: ``run_dir`` is not a results directory, the file is missing or
            empty, or it lacks one of ``columns``.
    """
    run_dir = Path(run_dir)
    read_result(run_dir)
    path = run_dir / name
    if not path.is_file():
        hint = HINTS.get(name, "")
        raise SflsimError(f"{run_dir} has no {name}" + (f"; {hint}" if hint else ""))
    try:
        table = read_result_csv(path)
    except pd.errors.EmptyDataError:
        raise SflsimError(f"{path} is empty") from None
    missing = [c for c in columns if c not in table]
    if missing:
        raise SflsimError(f"{path} has no column {', '.join(missing)} (columns: "
                          f"{', '.join(map(str, table.columns))})")
    return table


def client_groups(run_dir: str | Path, clients: pd.DataFrame | None = None) -> dict[int, str]:
    """Client id -> device group (the scenario's name for it, e.g. ``pi4_wifi``), else its
    profile, from ``clients.csv``; empty when neither is recorded."""
    if clients is None:
        path = Path(run_dir) / "clients.csv"
        if not path.is_file():
            return {}
        clients = read_result_csv(path)
    for column in ("group", "profile"):
        if {"client_id", column} <= set(clients.columns):
            named = clients.dropna(subset=["client_id", column])
            if len(named):
                return dict(zip(named["client_id"].astype(int), named[column].astype(str)))
    return {}


def algorithm_name(algorithm: str) -> str:
    """``fedavg`` -> ``FedAvg``: the name an algorithm goes by in its paper."""
    return ALGORITHM_NAMES.get(algorithm, algorithm)


def run_labels(summaries: list[dict], paths: list[Path], sweep_labels: list[str | None]) -> list[str]:
    """Legend labels: the algorithm if it tells the runs apart, else (sweep points) the
    point's axis values, else the run name, else the shortest distinguishing path."""
    from sflsim.metrics.compare import short_names

    keys = ("algorithm",) if any(sweep_labels) else ("algorithm", "name")
    for key in keys:
        values = [str(s.get(key, "")) for s in summaries]
        if all(values) and len(set(values)) == len(values):
            return [algorithm_name(v) for v in values] if key == "algorithm" else values
    return [lab or name for lab, name in zip(sweep_labels, short_names(paths))]
