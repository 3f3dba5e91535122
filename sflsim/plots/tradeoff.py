"""Latency/accuracy trade-off across runs or sweep points, with the Pareto front marked.

Two readings of "latency", chosen by ``x``:

- a training quantity of each run (``sim_time_s``, ``wall_time_s``, ``bytes_up``,
  ``client_energy_j``, ... from ``sweep.csv`` or ``summary.json``): one point per
  run, y = final server accuracy;
- an inference quantity of ``early_exit.csv`` (``latency_s_mean``,
  ``device_s_mean``, ``bytes_per_sample``, ...): one point per run and exit
  threshold, y = collaborative early-exit accuracy at that threshold, averaged
  over end layers weighted by test samples (Hetero-SplitEE §IV-D). Each run's
  points are joined in threshold order.

The Pareto front is the set of points no other point beats on both axes (lower
x and higher accuracy), drawn as a staircase.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sflsim.errors import SflsimError
from sflsim.metrics.compare import expand_run_dirs
from sflsim.metrics.results import read_result
from sflsim.plots.inputs import algorithm_name, read_run_table, run_labels
from sflsim.plots.style import (
    MARKERS,
    PALETTE,
    keep_min_span,
    new_figure,
    paper_style,
    place_legend,
    save_figure,
)

#: Columns of early_exit.csv that can be the x axis, with their axis labels.
EARLY_EXIT_X = {
    "latency_s_mean": "Mean inference latency (s)",
    "device_s_mean": "Mean on-device time (s)",
    "transfer_s_mean": "Mean transfer time (s)",
    "server_queue_s_mean": "Mean server queueing time (s)",
    "server_s_mean": "Mean server time (s)",
    "bytes_per_sample": "Bytes sent per sample",
}

#: Per-run quantities that can be the x axis, with their axis labels and scale.
RUN_X = {
    "sim_time_s": ("Simulated training time (s)", 1.0),
    "wall_time_s": ("Wall-clock time (s)", 1.0),
    "bytes_up": ("Bytes up (MB)", 1e-6),
    "bytes_down": ("Bytes down (MB)", 1e-6),
    "bytes_total": ("Bytes up + down (MB)", 1e-6),
    "client_flops": ("Client compute (GFLOP)", 1e-9),
    "server_flops": ("Server compute (GFLOP)", 1e-9),
    "client_energy_j": ("Client energy (J)", 1.0),
}


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points not dominated by another (lower ``x``, higher ``y``), by ``x``.

    A point is dominated when another has ``x`` <= and ``y`` >= with one strict.
    NaN points are never on the front.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    order = ok[np.lexsort((-y[ok], x[ok]))]  # x ascending, then y descending
    front, best = [], -np.inf
    for i in order:
        if y[i] > best:
            front.append(i)
            best = y[i]
    return np.array(front, dtype=int)


def tradeoff_points(dirs: list[str | Path], x: str = "sim_time_s") -> pd.DataFrame:
    """The points of the figure: columns ``series``, ``label``, ``algorithm``, ``x``,
    ``accuracy`` (0-1) and, for early-exit x, ``threshold``.

    Raises:
        SflsimError: an unknown ``x``, a directory that is neither a results nor a
            sweep directory, or (early-exit x) a run without ``early_exit.csv``.
    """
    if x not in RUN_X and x not in EARLY_EXIT_X:
        raise SflsimError(f"unknown --x {x!r}; choose from {', '.join([*RUN_X, *EARLY_EXIT_X])}")
    runs = expand_run_dirs(list(dirs))
    summaries = [read_result(d)[0] for d, _ in runs]
    labels = run_labels(summaries, [d for d, _ in runs], [lab for _, lab in runs])
    rows = []
    for (run_dir, _), summary, label in zip(runs, summaries, labels):
        algorithm = str(summary.get("algorithm", ""))
        if x in RUN_X:
            value = (_get(summary, "bytes_up") + _get(summary, "bytes_down") if x == "bytes_total"
                     else _get(summary, x))
            rows.append({"series": label, "label": label, "algorithm": algorithm, "x": value,
                         "accuracy": _get(summary, "final_server_accuracy")})
            continue
        table = read_run_table(run_dir, "early_exit.csv",
                               ("threshold", "end_layer", "accuracy", "samples", x))
        for tau, group in table.groupby("threshold", sort=True):
            w = group["samples"].to_numpy(dtype=float)
            w = w if w.sum() > 0 else np.ones_like(w)
            rows.append({"series": label, "label": f"{label} τ={tau:g}", "algorithm": algorithm,
                         "threshold": float(tau), "x": np.average(group[x], weights=w),
                         "accuracy": np.average(group["accuracy"], weights=w)})
    return pd.DataFrame(rows)


def plot_tradeoff(dirs: list[str | Path], out_prefix: str | Path, x: str = "sim_time_s",
                  formats: list[str] = ("png", "pdf")) -> list[Path]:  # type: ignore[assignment]
    """Accuracy (%) against ``x`` for runs or sweep points, Pareto front marked.

    Args:
        dirs: sweep directories and/or results directories.
        out_prefix: output path without extension.
        x: a key of :data:`RUN_X` or :data:`EARLY_EXIT_X`.
        formats: figure formats to write.

    Returns:
        The written files.

    Raises:
        SflsimError: see :func:`tradeoff_points`; or no point has both values.
    """
    with paper_style():
        return save_figure(tradeoff_figure(dirs, x), out_prefix, list(formats))


def tradeoff_figure(dirs: list[str | Path], x: str = "sim_time_s") -> Figure:
    """The figure of :func:`plot_tradeoff`, not saved (arguments and errors as there)."""
    points = tradeoff_points(dirs, x)
    early_exit = x in EARLY_EXIT_X
    xlabel, scale = (EARLY_EXIT_X[x], 1.0) if early_exit else RUN_X[x]
    if xlabel.endswith("(s)") and np.nanmax(np.abs(points["x"].to_numpy(float)), initial=0) < 1:
        xlabel, scale = xlabel.replace("(s)", "(ms)"), 1e3  # sub-second latencies read better in ms
    xs, ys = points["x"].to_numpy(float) * scale, points["accuracy"].to_numpy(float) * 100
    if np.all(np.isnan(xs) | np.isnan(ys)):
        raise SflsimError(f"no run in {', '.join(map(str, dirs))} has both {x} and an accuracy "
                          "to plot (was any round evaluated?)")
    front = pareto_front(xs, ys)
    series = list(dict.fromkeys(points["series"]))
    with paper_style():
        fig = new_figure(2.5)
        ax = fig.add_subplot()
        if len(front):
            fx, fy = xs[front], ys[front]
            ax.step(fx, fy, where="post", color="0.25", lw=0.8, ls="--", zorder=1)
            ax.plot(fx, fy, ls="none", marker="o", ms=7, mfc="none", mec="0.15", mew=0.8, zorder=3)
            ax.plot([], [], ls="--", lw=0.8, color="0.25", marker="o", ms=5, mfc="none", mec="0.15",
                    mew=0.8, label="Pareto front")
        if early_exit:
            for i, name in enumerate(series):
                sel = (points["series"] == name).to_numpy()
                ax.plot(xs[sel], ys[sel], marker=MARKERS[i % len(MARKERS)], ms=3,
                        color=PALETTE[i % len(PALETTE)], lw=0.9, label=name, zorder=2)
        else:
            _scatter_runs(ax, points, xs, ys, front)
        ax.margins(x=0.1, y=0.1)
        keep_min_span(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("Final accuracy (%)" if not early_exit else "Early-exit accuracy (%)")
        place_legend(fig, ax)
        return fig


def _scatter_runs(ax, points: pd.DataFrame, xs: np.ndarray, ys: np.ndarray, front: np.ndarray) -> None:
    """One marker per run, coloured by algorithm; runs on the front annotated with their
    label when there are few enough to read."""
    algorithms = list(dict.fromkeys(points["algorithm"]))
    by_algorithm = len(algorithms) < len(points)
    for i, algorithm in enumerate(algorithms):
        sel = (points["algorithm"] == algorithm).to_numpy()
        label = algorithm_name(algorithm) if by_algorithm else points["label"][sel].iloc[0]
        ax.scatter(xs[sel], ys[sel], s=16, marker=MARKERS[i % len(MARKERS)],
                   color=PALETTE[i % len(PALETTE)], label=label, zorder=4, lw=0)
    if by_algorithm and len(points) <= 12:
        middle = np.nanmean(xs)
        for i in range(len(points)):
            if np.isnan(xs[i]) or np.isnan(ys[i]):
                continue
            left = xs[i] > middle  # notes point inward so they stay inside the axes
            ax.annotate(points["label"].iloc[i], (xs[i], ys[i]),
                        xytext=(-3 if left else 3, 3), textcoords="offset points",
                        ha="right" if left else "left", fontsize=5.5, color="0.3", zorder=5,
                        bbox={"fc": "white", "ec": "none", "alpha": 0.75, "pad": 0.3})


def _get(summary: dict, key: str) -> float:
    value = summary.get(key)
    try:
        return float("nan") if value is None else float(value)
    except (TypeError, ValueError):
        return float("nan")
