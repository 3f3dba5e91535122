"""Compare finished runs: one row per run of accuracy, time-to-accuracy, time, bytes, FLOPs, energy.

Reads result files only (``summary.json``, ``rounds.csv``, and a sweep's
``sweep.csv``), so a table can be rebuilt at any time without re-running
anything. Used by ``sflsim compare``, ``sflsim plot`` and the scripts in
``analysis/``.

Time-to-accuracy is the simulated time at the end of the first evaluated round
whose server accuracy reaches the target (the usual definition, e.g. FedScale's
"time to accuracy"); round 0, the untrained model, counts at time 0; a run that never
reaches it gets NaN (an empty CSV cell). ``rounds`` counts rounds of training (from 1).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from sflsim.errors import SflsimError
from sflsim.metrics.records import percent
from sflsim.metrics.results import read_result, read_result_csv, training_rounds

#: Columns of ``sweep.csv`` that are not sweep axes.
SWEEP_FIXED_COLUMNS = (
    "point", "status", "error", "run_dir", "algorithm", "final_server_accuracy",
    "final_client_accuracy", "sim_time_s", "wall_time_s", "bytes_up", "bytes_down",
    "client_flops", "server_flops", "client_energy_j",
)

#: Columns of :func:`compare_runs`, in order.
COMPARE_COLUMNS = (
    "run", "name", "algorithm", "status", "rounds", "final_accuracy_pct", "target_accuracy_pct",
    "time_to_target_s", "sim_time_s", "bytes_mb", "client_gflop", "server_gflop",
    "client_energy_j",
)


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
    sweep["label"] = [
        ", ".join(f"{name}={_short(row[a])}" for a, name in zip(axes, names)) or f"point {row['point']}"
        for _, row in sweep.iterrows()
    ]
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
    runs: list[tuple[Path, str | None]] = []
    for d in dirs:
        d = Path(d)
        if is_sweep_dir(d):
            points = completed_points(read_sweep(d))
            if points.empty:
                raise SflsimError(f"sweep {d} has no completed point (see the status and error "
                                  f"columns of {d / 'sweep.csv'})")
            runs.extend((Path(p), f"{d.name}: {lab}" if len(dirs) > 1 else lab)
                        for p, lab in zip(points["path"], points["label"]))
        else:
            read_result(d)  # raises the "not an sflsim results directory" error
            runs.append((d, None))
    return runs


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
        ``summary.json``), ``status``, ``rounds`` of training completed (round 0, the
        untrained model, is not one), ``final_accuracy_pct``
        (final server accuracy, %), ``target_accuracy_pct``, ``time_to_target_s``
        (NaN if never reached), ``sim_time_s``, ``bytes_mb`` (up + down, 1e6 bytes),
        ``client_gflop`` and ``server_gflop`` (totals, 1e9 FLOPs) and
        ``client_energy_j`` (all clients, all rounds).

    Raises:
        SflsimError: a directory is not a results or sweep directory, or ``target`` is
            outside (0, 1].
    """
    check_target(target)
    runs = expand_run_dirs(run_dirs)
    names = short_names([d for d, _ in runs])
    rows = []
    for (run_dir, label), run in zip(runs, names):
        summary, rounds = read_result(run_dir)
        rows.append({
            "run": f"{run} ({label})" if label else run,
            "name": summary.get("name", ""),
            "algorithm": summary.get("algorithm", ""),
            "status": summary.get("status", ""),
            "rounds": len(training_rounds(rounds)),
            "final_accuracy_pct": percent(_number(summary.get("final_server_accuracy"))),
            "target_accuracy_pct": percent(target),
            "time_to_target_s": time_to_accuracy(rounds, target),
            "sim_time_s": _number(summary.get("sim_time_s")),
            "bytes_mb": (_number(summary.get("bytes_up")) + _number(summary.get("bytes_down"))) / 1e6,
            "client_gflop": _number(summary.get("client_flops")) / 1e9,
            "server_gflop": _number(summary.get("server_flops")) / 1e9,
            "client_energy_j": _number(summary.get("client_energy_j")),
        })
    return pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))


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


def _short(value: object) -> str:
    """An axis value for a label: ``4.0`` -> ``4``; a JSON mapping such as
    ``{"name": "multisfl", "split": {"name": "resource"}}`` -> ``multisfl(split=resource)``."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return _compact(json.loads(value))
        except ValueError:
            return value
    return _compact(value)


def _compact(value: object) -> str:
    if isinstance(value, dict):
        rest = ",".join(f"{k}={_compact(v)}" for k, v in value.items() if k != "name")
        head = str(value.get("name", ""))
        return f"{head}({rest})" if head and rest else head or f"({rest})"
    if isinstance(value, list):
        return "[" + ",".join(_compact(v) for v in value) + "]"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)
