"""Reading the result files a figure needs, with one clear error when one is missing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from sflsim.config.schema import DatasetConfig  # torch-free: plotting does not load torch
from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result, read_result_csv

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


def num_classes(run_dir: str | Path) -> int | None:
    """Number of classes of the run's dataset (``dataset.name`` in its ``scenario.yaml``),
    or None when the file, the name or the dataset is unknown."""
    path = Path(run_dir) / "scenario.yaml"
    try:
        scenario = yaml.safe_load(path.read_text())
        return DatasetConfig.NUM_CLASSES.get(str(scenario["dataset"]["name"]))
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None


def run_labels(summaries: list[dict], paths: list[Path],
               sweep_labels: list[str | None] | None = None) -> list[str]:
    """Legend labels, one kind in every figure and in ``sflsim compare``: a sweep's point
    by what varies, its shortest distinguishing path and its axis values
    (``p000 (tiny: pi4_wifi=4, orin_wifi=4)``, the labels of
    :func:`~sflsim.metrics.compare.expand_run_dirs`); any other run by its name (``name``
    in its ``summary.json``, the scenario's name), else its shortest distinguishing path;
    runs that share a name get their shortest distinguishing path after it,
    ``name (a/p0)``."""
    from sflsim.metrics.compare import short_names

    paths_short = short_names(paths)
    sweep_labels = sweep_labels or [None] * len(paths)
    names = [str(s.get("name") or "") or short for s, short in zip(summaries, paths_short)]
    return [f"{short} ({point})" if point else
            name if names.count(name) == 1 or name == short else f"{name} ({short})"
            for name, short, point in zip(names, paths_short, sweep_labels)]
