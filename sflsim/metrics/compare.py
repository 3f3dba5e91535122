"""Compare finished runs: one row per run of accuracy, time-to-accuracy, time, bytes, FLOPs, energy.

Reads result files only (``summary.json``, ``rounds.csv``, and a sweep's
``sweep.csv``), so a table can be rebuilt at any time without re-running
anything. Used by ``sflsim compare``, ``sflsim plot`` and the scripts in
``analysis/``.

Time-to-accuracy is the simulated time at the end of the first evaluated round
whose server accuracy reaches the target (the usual definition, e.g. FedScale's
"time to accuracy"); round 0, the untrained model, counts at time 0; a run that never
reaches it gets NaN (an empty CSV cell). ``rounds`` counts rounds of training (from 1).

Seeds: the runs of one configuration at several seeds (a sweep with ``seeds``, or one
that sweeps ``seed``) share a ``config``; :func:`aggregate_runs` (``sflsim compare``) and
:func:`aggregate_seeds` (a sweep table, for plots) make one row per configuration with
mean, sample std, n and the 95% t interval of each number (:mod:`sflsim.metrics.stats`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from sflsim.errors import SflsimError
from sflsim.metrics.columns import SWEEP_SUMMARY_COLUMNS
from sflsim.metrics.records import percent
from sflsim.metrics.results import read_result, read_result_csv, training_rounds
from sflsim.metrics.stats import aggregate

#: Columns of ``sweep.csv`` that are not sweep axes.
SWEEP_FIXED_COLUMNS = (
    "point", "status", "error", "run_dir", "config", "algorithm", "final_server_accuracy",
    "final_client_accuracy", "sim_time_s", "wall_time_s", "bytes_up", "bytes_down",
    "client_flops", "server_flops", "client_energy_j",
)

#: Columns of :func:`compare_runs`, in order.
COMPARE_COLUMNS = (
    "run", "name", "algorithm", "status", "rounds", "final_accuracy_pct", "target_accuracy_pct",
    "time_to_target_s", "sim_time_s", "bytes_mb", "client_gflop", "server_gflop",
    "client_energy_j", "seed", "config",
)
#: The numbers of :func:`compare_runs` that :func:`aggregate_runs` takes over seeds.
COMPARE_NUMBERS = ("rounds", "final_accuracy_pct", "time_to_target_s", "sim_time_s", "bytes_mb",
                   "client_gflop", "server_gflop", "client_energy_j")
#: The numbers of ``sweep.csv`` that :func:`aggregate_seeds` takes over seeds.
SWEEP_NUMBERS = SWEEP_SUMMARY_COLUMNS


def time_to_accuracy(rounds: pd.DataFrame, target: float, column: str = "server_accuracy") -> float:
    """Simulated time (s) at the end of the first round whose ``column`` is >= ``target``.

    Args:
        rounds: a run's ``rounds.csv`` (needs ``sim_time_s`` and ``column``).
        target: accuracy in [0, 1].
        column: the accuracy column to test.

    Returns:
        ``sim_time_s`` of that round, or NaN if no evaluated round reaches ``target``.
    """
    if column not in rounds or "sim_time_s" not in rounds:
        return math.nan
    reached = rounds[rounds[column] >= target]
    return float(reached["sim_time_s"].iloc[0]) if len(reached) else math.nan


def check_target(target: float) -> float:
    """``target`` if it is an accuracy in (0, 1].

    Raises:
        SflsimError: ``target`` is outside (0, 1] (e.g. a percentage such as 70).
    """
    if not 0.0 < target <= 1.0:
        raise SflsimError(f"target accuracy must be a fraction in (0, 1], e.g. 0.7 for 70%; "
                          f"got {target}")
    return target


def is_sweep_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a ``sweep.csv``."""
    return (Path(path) / "sweep.csv").is_file()


def read_sweep(sweep_dir: str | Path) -> pd.DataFrame:
    """A sweep's ``sweep.csv`` with two columns added: ``path`` (the run directory) and
    ``label`` (its axis values under :func:`short_axis_names`, e.g. ``"rounds=4, slots=2"``).

    Raises:
        SflsimError: ``sweep_dir`` has no ``sweep.csv``, or it lacks the ``status``
            and ``run_dir`` columns.
    """
    sweep_dir = Path(sweep_dir)
    if not is_sweep_dir(sweep_dir):
        raise SflsimError(f"{sweep_dir} is not a sweep directory (no sweep.csv)")
    sweep = read_result_csv(sweep_dir / "sweep.csv")
    missing = [c for c in ("point", "status", "run_dir") if c not in sweep]
    if missing:
        raise SflsimError(f"{sweep_dir / 'sweep.csv'} is not a sweep table (no column "
                          f"{', '.join(missing)})")
    axes = sweep_axes(sweep)
    names = short_axis_names(axes)
    sweep["path"] = [sweep_dir / str(d) for d in sweep["run_dir"]]
    sweep["label"] = _labels(sweep, axes, names).where(lambda x: x != "",
                                                       "point " + sweep["point"].astype(str))
    return sweep


def sweep_axes(sweep: pd.DataFrame) -> list[str]:
    """The axis columns of a sweep table (dotted scenario paths)."""
    return [c for c in sweep.columns if c not in SWEEP_FIXED_COLUMNS and c not in ("path", "label")]


def completed_points(sweep: pd.DataFrame) -> pd.DataFrame:
    """The rows of a :func:`read_sweep` table whose run completed."""
    return sweep[sweep["status"] == "completed"]


def expand_run_dirs(dirs: list[str | Path]) -> list[tuple[Path, str | None]]:
    """Run directories named by ``dirs``: each run directory itself, and for each sweep
    directory its completed points in order, as ``(run_dir, sweep label or None)``.

    Raises:
        SflsimError: a directory is neither a results directory nor a sweep directory,
            or a sweep has no completed point.
    """
    return [(path, label) for path, label, _ in _expand(dirs)]


def _expand(dirs: list[str | Path]) -> list[tuple[Path, str | None, str | None]]:
    """:func:`expand_run_dirs` with each run's configuration: for a point of a sweep
    with a ``seed`` column (``seeds``, or a ``seed`` axis), the label of its other axes
    (:func:`config_labels`), else None (the run is its own configuration)."""
    runs: list[tuple[Path, str | None, str | None]] = []
    # two sweeps in folders of one name (a/sweep, b/sweep) are told apart, never pooled
    called = short_names([Path(d) for d in dirs])
    for d, name in zip(dirs, called):
        d = Path(d)
        if is_sweep_dir(d):
            table = read_sweep(d)
            configs = config_labels(table, name)
            points = completed_points(table)
            if points.empty:
                raise SflsimError(f"sweep {d} has no completed point (see the status and error "
                                  f"columns of {d / 'sweep.csv'})")
            prefix = f"{name}: " if len(dirs) > 1 else ""
            runs.extend((Path(p), prefix + lab, None if configs is None else prefix + configs[i])
                        for i, p, lab in zip(points.index, points["path"], points["label"]))
        else:
            read_result(d)  # raises the "not an sflsim results directory" error
            runs.append((d, None, None))
    return runs


def config_labels(sweep: pd.DataFrame, name: str = "") -> pd.Series | None:
    """For each row of a :func:`read_sweep` table with a ``seed`` column, its configuration:
    its axis values but the seed under :func:`short_axis_names` (``"rounds=4"``), or
    ``name`` (the sweep's) where seed is its only axis; None for a table without seeds.
    An axis ``name`` (the scenario's, a label that changes no result) is left out too
    where each configuration then still has each seed once: a sweep that names every
    run (``homo-l3.s0``, ``homo-l3.s1``) has its seeds together."""
    if "seed" not in sweep.columns:
        return None
    axes = config_axes(sweep)
    names = short_axis_names(axes)
    return _labels(sweep, axes, names).replace("", name or "all seeds")


def _labels(sweep: pd.DataFrame, axes: list[str], names: list[str]) -> pd.Series:
    """``"name=value, ..."`` of ``axes`` per row (:func:`axis_value_labels`); ``""``
    without axes."""
    parts = [names[i] + "=" + axis_value_labels(sweep[a]) for i, a in enumerate(axes)]
    return pd.concat(parts, axis=1).agg(", ".join, axis=1) if parts else \
        pd.Series("", index=sweep.index, dtype=object)


def config_axes(sweep: pd.DataFrame) -> list[str]:
    """The axes of a sweep table that tell its configurations apart (:func:`config_labels`):
    all but ``seed``, and but ``name`` where the others with the seed tell every row apart."""
    axes = [a for a in sweep_axes(sweep) if a != "seed"]
    if "name" in axes and "seed" in sweep.columns:
        rest = [a for a in axes if a != "name"]
        key = sweep[[*rest, "seed"]].astype(str)
        if not key.duplicated().any():
            axes = rest
    return axes


def short_names(paths: list[Path]) -> list[str]:
    """For each path, its shortest trailing part that no other path ends with
    (``a/p0``, ``b/p0``, ``c``); paths as deep below their common folder are cut alike,
    so that the points of two sweeps read ``a/points/p003``, ``b/points/p004`` even
    where ``p004`` alone would do; a path given twice keeps its full form."""
    parts = [Path(p).resolve().parts for p in paths]
    needed: list[int | None] = []
    for i, mine in enumerate(parts):
        others = [p for j, p in enumerate(parts) if j != i]
        needed.append(next((d for d in range(1, len(mine) + 1)
                            if all(p[-d:] != mine[-d:] for p in others)), None))
    common = len(Path(os.path.commonpath([str(Path(*p)) for p in parts])).parts) if parts else 0
    below = [len(p) - common for p in parts]
    depth = {b: max((n for n, c in zip(needed, below) if c == b and n is not None), default=1)
             for b in set(below)}
    return [str(path) if n is None else "/".join(mine[-max(n, depth[b]):])
            for path, mine, n, b in zip(paths, parts, needed, below)]


def compare_runs(run_dirs: list[str | Path], target: float = 0.7) -> pd.DataFrame:
    """One row per run, columns :data:`COMPARE_COLUMNS` (units in the names).

    Args:
        run_dirs: results directories of ``sflsim run``, or sweep directories (each
            expands to its completed points).
        target: accuracy in (0, 1] for ``time_to_target_s``.

    Returns:
        ``run`` (shortest distinguishing path), ``name`` and ``algorithm`` (from
        ``summary.json``), ``status`` (``summary.json``'s; ``stopped`` for a run that
        says ``running`` while no process writes it), ``rounds`` of training completed (round 0, the
        untrained model, is not one), ``final_accuracy_pct``
        (final server accuracy, %), ``target_accuracy_pct``, ``time_to_target_s``
        (NaN if never reached), ``sim_time_s``, ``bytes_mb`` (up + down, 1e6 bytes),
        ``client_gflop`` and ``server_gflop`` (totals, 1e9 FLOPs) and
        ``client_energy_j`` (all clients, all rounds), ``seed`` (the scenario's) and
        ``config``: what the run's configuration is called whatever its seed (a seeded
        sweep's point: its axes but the seed, :func:`config_labels`; else ``run``).

    Raises:
        SflsimError: a directory is not a results or sweep directory, or ``target`` is
            outside (0, 1].
    """
    check_target(target)
    runs = _expand(run_dirs)
    names = short_names([d for d, _, _ in runs])
    rows = []
    for (run_dir, label, config), run in zip(runs, names):
        summary, rounds = read_result(run_dir)
        shown = f"{run} ({label})" if label else run
        rows.append({
            "run": shown,
            "name": summary.get("name", ""),
            "algorithm": summary.get("algorithm", ""),
            "status": _status(summary, run_dir),
            "rounds": len(training_rounds(rounds)),
            "final_accuracy_pct": percent(_number(summary.get("final_server_accuracy"))),
            "target_accuracy_pct": percent(target),
            "time_to_target_s": time_to_accuracy(rounds, target),
            "sim_time_s": _number(summary.get("sim_time_s")),
            "bytes_mb": (_number(summary.get("bytes_up")) + _number(summary.get("bytes_down"))) / 1e6,
            "client_gflop": _number(summary.get("client_flops")) / 1e9,
            "server_gflop": _number(summary.get("server_flops")) / 1e9,
            "client_energy_j": _number(summary.get("client_energy_j")),
            "seed": summary.get("seed"),
            "config": config if config is not None else shown,
        })
    table = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    table["seed"] = table["seed"].astype("Int64")  # whole numbers beside a run without one
    return table


def aggregate_runs(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`compare_runs` table with one row per ``config`` (its seeds together, in
    order of first appearance): ``config``, ``algorithm``, ``status`` (the first run's),
    ``target_accuracy_pct``, ``n`` (runs), ``seeds`` (as ``"0,1,2"``), then for each of
    :data:`COMPARE_NUMBERS` its ``_mean``, ``_std`` (sample), ``_n`` (runs with a number:
    ``time_to_target_s`` is NaN where the target was never reached), ``_ci95_low`` and
    ``_ci95_high`` (the 95% t interval of the mean; NaN for a single run), in the
    column's unit (:func:`sflsim.metrics.stats.aggregate`)."""
    seeds = {config: ",".join(str(s) for s in group["seed"].dropna())
             for config, group in table.groupby("config", sort=False)}
    out = aggregate(table, ["config"], COMPARE_NUMBERS,
                    keep=["algorithm", "status", "target_accuracy_pct"])
    out.insert(out.columns.get_loc("n") + 1, "seeds", out["config"].map(seeds))
    return out


def aggregate_seeds(sweep: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration of a sweep table (``sweep.csv`` as :func:`read_sweep` or
    :func:`sflsim.sweep.read_table` reads it) over its completed points: ``config`` (the
    ``config`` column of a sweep with ``seeds``, else :func:`config_labels`' label, else
    the point: one row per point), the axis columns but ``seed``, ``algorithm``, ``n``
    (completed seeds), then for each of :data:`SWEEP_NUMBERS` its ``_mean``, ``_std``,
    ``_n``, ``_ci95_low`` and ``_ci95_high`` (the 95% t interval of the mean, as
    :func:`aggregate_runs`), in the column's unit (accuracies: fractions 0-1). For error
    bands: ``<number>_ci95_low`` to ``_ci95_high`` around ``<number>_mean``, or ± ``_std``.

    Raises:
        SflsimError: the table is not a sweep table (no ``point`` or ``status`` column).
    """
    missing = [c for c in ("point", "status") if c not in sweep.columns]
    if missing:
        raise SflsimError(f"not a sweep table: no column {', '.join(missing)} (read sweep.csv "
                          f"with sflsim.metrics.compare.read_sweep)")
    table = completed_points(sweep).copy()
    if "config" not in table.columns:
        labels = config_labels(table)
        table["config"] = labels if labels is not None else table["point"]
    axes = config_axes(table)
    numbers = [c for c in SWEEP_NUMBERS if c in table.columns]
    return aggregate(table, ["config"], numbers,
                     keep=[*axes, *(["algorithm"] if "algorithm" in table.columns else [])])


def _status(summary: dict, run_dir: Path) -> str:
    """``summary.json``'s status; ``stopped`` for a run that says ``running`` while no
    process writes it (killed before it ended: :func:`sflsim.metrics.lock.is_held`)."""
    from sflsim.metrics.lock import is_held

    status = str(summary.get("status", ""))
    return "stopped" if status == "running" and is_held(run_dir) is False else status


def _number(value: object) -> float:
    """A summary value as a float; NaN for a missing or null one."""
    try:
        return math.nan if value is None else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def short_axis_names(axes: list[str]) -> list[str]:
    """Short names of sweep axes for labels: the last two parts of each dotted path
    (more where two axes would clash), without a trailing ``name``. The field itself is
    always kept, so a label says what its value is: ``pi4_wifi.end_layer=1``, never
    ``pi4_wifi=1``, which would read as a count.

    ``devices.pi4_wifi.count, devices.orin_wifi.count`` -> ``pi4_wifi.count, orin_wifi.count``;
    ``algorithm.name`` -> ``algorithm``; ``dataset.partition.alpha`` -> ``partition.alpha``.
    """
    parts = [("algorithm" if a == "algorithm_config" else a).split(".") for a in axes]
    parts = [p[:-1] if len(p) > 1 and p[-1] == "name" else p for p in parts]
    names = []
    for i, mine in enumerate(parts):
        depth = min(2, len(mine))
        while depth < len(mine) and any(p[-depth:] == mine[-depth:] for j, p in enumerate(parts) if j != i):
            depth += 1
        names.append(mine[-depth:])
    return [".".join(n) for n in names]


def axis_value_labels(column: pd.Series) -> pd.Series:
    """The values of a sweep axis as labels (:func:`_short`); a mapping (a device group,
    an algorithm with settings) shown by what tells the column's values apart: its
    ``name`` and the entries that are not the same in every row
    (``{"pi4": {"profile": "rpi4", "end_layer": 3}}`` beside the same with end layer 4 ->
    ``(pi4=(end_layer=3))``); the whole mapping where all rows hold the same one."""
    values = [_parsed(v) for v in column]
    if not any(isinstance(v, dict) for v in values):
        return column.map(_short)
    leaves = [dict(_leaves(v)) if isinstance(v, dict) else {} for v in values]
    paths = {p for leaf in leaves for p in leaf}
    varying = {p for p in paths if len({repr(leaf.get(p, _ABSENT)) for leaf in leaves}) > 1}
    return pd.Series([_compact(v, varying or None) if isinstance(v, dict) else _short(v)
                      for v in values], index=column.index, dtype=object)


_ABSENT = object()


def _parsed(value: object) -> object:
    """A JSON mapping or list of a sweep table's cell as an object; others as they are."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _leaves(value: dict, prefix: tuple = ()) -> list[tuple[tuple, object]]:
    """(path, value) of every leaf of a nested mapping."""
    out: list[tuple[tuple, object]] = []
    for k, v in value.items():
        out += _leaves(v, (*prefix, k)) if isinstance(v, dict) else [((*prefix, k), v)]
    return out


def _short(value: object) -> str:
    """An axis value for a label: ``4.0`` -> ``4``; a JSON mapping such as
    ``{"name": "multisfl", "split": {"name": "resource"}}`` -> ``multisfl(split=resource)``."""
    return _compact(_parsed(value))


def _compact(value: object, keep: set[tuple] | None = None, at: tuple = ()) -> str:
    """``value`` in short; of a mapping, its ``name`` and, with ``keep`` (paths of leaves
    from the top), only the entries with a leaf in it."""
    if isinstance(value, dict):
        shown = [k for k in value if k != "name" and (keep is None or any(
            p[:len(at) + 1] == (*at, k) for p in keep))]
        rest = ",".join(f"{k}={_compact(value[k], keep, (*at, k))}" for k in shown)
        head = str(value.get("name", ""))
        return f"{head}({rest})" if head and rest else head or f"({rest})"
    if isinstance(value, list):
        return "[" + ",".join(_compact(v) for v in value) + "]"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)
