"""Reading the result files a figure needs, with one clear error when one is missing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from sflsim.config.schema import DatasetConfig  # torch-free: plotting does not load torch
from sflsim.errors import SflsimError
from sflsim.metrics import results
from sflsim.metrics.results import (
    RUN_TABLES,
    read_result,
    read_result_csv,
    run_table_columns,
    run_table_path,
)
from sflsim.plots.options import FigureOptions

#: Per-run quantities of ``summary.json`` and ``sweep.csv`` that figures draw (the
#: tradeoff's x axis, a sweep's y axis): axis label and the factor from the stored unit
#: to the drawn one.
RUN_QUANTITIES = {
    "sim_time_s": ("Simulated training time (s)", 1.0),
    "wall_time_s": ("Wall-clock time (s)", 1.0),
    "bytes_up": ("Bytes up (MB)", 1e-6),
    "bytes_down": ("Bytes down (MB)", 1e-6),
    "bytes_total": ("Bytes up + down (MB)", 1e-6),
    "client_flops": ("Client compute (GFLOP)", 1e-9),
    "server_flops": ("Server compute (GFLOP)", 1e-9),
    "client_energy_j": ("Client energy (J)", 1.0),
}

#: What to do when a run lacks a table: the hint appended to the error.
HINTS = {
    "events": "it is written by `sflsim run`; rerun the scenario to get the event trace",
    "clients": "it is written by `sflsim run`; rerun the scenario",
    "early_exit": "run with evaluation.early_exit.enabled: true",
}


def read_input(run_dir: str | Path, name: str, columns: tuple[str, ...] = (),
              optional: tuple[str, ...] = (), rounds: list[int] | None = None) -> pd.DataFrame:
    """Table ``name`` of a run, after checking that ``run_dir`` is a results directory:
    ``events`` and ``clients`` from Parquet or CSV
    (:func:`~sflsim.metrics.results.read_run_table`), ``early_exit`` from its CSV file.

    Args:
        run_dir: a results directory of ``sflsim run``.
        name: ``"events"``, ``"clients"`` or ``"early_exit"``.
        columns: the columns the caller needs; ``events`` and ``clients`` read only
            these and ``optional`` (every column when both are empty).
        optional: columns read when the table has them.
        rounds: ``events`` and ``clients``: only the rows of these rounds.

    Raises:
        SflsimError: ``run_dir`` is not a results directory, the table is missing or
            empty, or it lacks one of ``columns``.
    """
    run_dir = Path(run_dir)
    read_result(run_dir)
    hint = HINTS.get(name, "")
    if name in RUN_TABLES:
        if run_table_path(run_dir, name) is None:
            raise SflsimError(f"{run_dir} has no {name}.parquet or {name}.csv"
                              + (f"; {hint}" if hint else ""))
        have = run_table_columns(run_dir, name)
        wanted = [*columns, *(c for c in optional if c in have and c not in columns)]
        return results.read_run_table(run_dir, name, wanted or None, rounds=rounds)
    path = run_dir / f"{name}.csv"
    if not path.is_file():
        raise SflsimError(f"{run_dir} has no {path.name}" + (f"; {hint}" if hint else ""))
    table = read_result_csv(path)
    missing = [c for c in columns if c not in table]
    if missing:
        raise SflsimError(f"{path} has no column {', '.join(missing)} (columns: "
                          f"{', '.join(map(str, table.columns))})")
    return table


def client_groups(run_dir: str | Path, clients: pd.DataFrame | None = None) -> dict[int, str]:
    """Client id -> device group (the scenario's name for it, e.g. ``pi4_wifi``), else its
    profile, from ``clients`` (a run's ``clients`` table, or the columns of it read so
    far) or, when that has neither, from the run's table; empty when neither is
    recorded."""
    names = ("group", "profile")
    if clients is None or not any(c in clients for c in names):
        if run_table_path(run_dir, "clients") is None:
            return {}
        have = run_table_columns(run_dir, "clients")
        if "client_id" not in have:
            return {}
        clients = results.read_run_table(run_dir, "clients",
                                         ["client_id", *(c for c in names if c in have)])
    for column in names:
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
        dataset = yaml.safe_load(path.read_text())["dataset"]
        if dataset["name"] == "synthetic" and dataset.get("synthetic"):
            return int(dataset["synthetic"].get("classes", DatasetConfig.NUM_CLASSES["synthetic"]))
        return DatasetConfig.NUM_CLASSES.get(str(dataset["name"]))
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return None


def run_labels(summaries: list[dict], paths: list[Path],
               sweep_labels: list[str | None] | None = None,
               options: FigureOptions | None = None) -> list[str]:
    """Legend labels, one kind in every figure: a sweep's point by its shortest
    distinguishing path, its axis values under their fields' names and its algorithm
    (``p000 (tiny: pi4_wifi.count=4, orin_wifi.count=4, algorithm=fedavg)``: the labels
    of :func:`~sflsim.metrics.compare.expand_run_dirs`, as ``sflsim compare`` names the
    points, and ``algorithm`` from its ``summary.json`` unless an axis value names it
    already); any other run by its name (``name`` in its ``summary.json``, the
    scenario's name), else its shortest distinguishing path; runs that share a name get
    their shortest distinguishing path after it, ``name (a/p0)``. With ``options``, a
    run the author relabelled (``--label NAME=TEXT``, NAME its label, folder, scenario
    name or sweep point id) gets that text instead."""
    from sflsim.metrics.compare import short_names

    paths_short = short_names(paths)
    sweep_labels = sweep_labels or [None] * len(paths)
    names = [str(s.get("name") or "") or short for s, short in zip(summaries, paths_short)]
    points = [_with_algorithm(point, s) for s, point in zip(summaries, sweep_labels)]
    labels = [f"{short} ({point})" if point else
              name if names.count(name) == 1 or name == short else f"{name} ({short})"
              for name, short, point in zip(names, paths_short, points)]
    if options is None:
        return labels
    return [options.label(label, Path(path).name, str(s.get("name") or ""))
            for label, path, s in zip(labels, paths, summaries)]


def _with_algorithm(point: str | None, summary: dict) -> str | None:
    """A sweep point's label with ``, algorithm=<name>`` (from its ``summary.json``) added
    unless the label names the algorithm already (an algorithm axis) or none is known."""
    algorithm = str(summary.get("algorithm") or "")
    if not point or not algorithm or algorithm in point:
        return point
    return f"{point}, algorithm={algorithm}"
