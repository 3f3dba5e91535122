"""Latency/accuracy trade-off across runs or sweep points, with the Pareto front marked.

Two readings of "latency", chosen by ``x``:

- a training quantity of each run (``sim_time_s``, ``wall_time_s``, ``bytes_up``,
  ``client_energy_j``, ... from ``sweep.csv`` or ``summary.json``): one point per
  run, y = final server accuracy;
- an inference quantity of ``early_exit.csv`` (``latency_s_mean``,
  ``device_s_mean``, ``bytes_per_sample``, ...): one point per run and exit
  threshold, y = collaborative early-exit accuracy at that threshold, averaged
  over end layers weighted by test samples (Hetero-SplitEE §IV-D). Each run's
  points are joined in threshold order, and up to :data:`MAX_THRESHOLD_LABELS` of
  them, spread along the curve, say their threshold (``τ=-1.5``, in the run's colour;
  one grey label where runs coincide). Labels never overlap one another nor leave the
  axes (:func:`place_threshold_labels`): each takes the first free place beside its
  point (up-left, down-right, up-right, down-left), and one with no free place is
  left out, the first and last threshold of each run placed first.

The Pareto front is the set of points no other point beats (lower x and higher
accuracy), drawn as a staircase. Values that differ by less than a tolerance are
ties, not a ranking: x values within :data:`X_REL_TOL` of the larger (0.01%, e.g.
0.0003 s at 9.07 s) and accuracies within :data:`ACCURACY_ABS_TOL` (1e-9, as a
fraction) are equal, and points equal on both axes are all on the front (or all off
it). Points are labelled with their runs' names (:func:`~sflsim.plots.result_files.run_labels`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sflsim.errors import SflsimError
from sflsim.metrics.compare import expand_run_dirs
from sflsim.metrics.results import read_result
from sflsim.plots.early_exit import informative_thresholds
from sflsim.plots.options import FigureOptions, finish_figure
from sflsim.plots.result_files import RUN_QUANTITIES, read_input, run_labels
from sflsim.plots.style import (
    keep_min_span,
    new_figure,
    output_paths,
    paper_style,
    place_legend,
    save_figure,
    series_style,
    text_table,
)
from sflsim.text import did_you_mean

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
RUN_X = RUN_QUANTITIES


#: The most exit thresholds written beside one run's early-exit curve (``τ=-1.5``); a
#: curve of more thresholds has this many labels spread evenly along it.
MAX_THRESHOLD_LABELS = 6

#: Relative tolerance of x in the Pareto front: values closer than this fraction of the
#: larger one are equal (the simulator's device profiles are not known to 0.01%).
X_REL_TOL = 1e-4

#: Absolute tolerance of accuracy (a fraction in [0, 1]) in the Pareto front: float noise.
ACCURACY_ABS_TOL = 1e-9


def pareto_front(x: np.ndarray, y: np.ndarray, x_rel_tol: float = X_REL_TOL,
                 y_abs_tol: float = ACCURACY_ABS_TOL) -> np.ndarray:
    """Indices of the points not dominated by another (lower ``x``, higher ``y``), by ``x``.

    ``x`` values within ``x_rel_tol`` of the larger magnitude are equal, and ``y``
    values within ``y_abs_tol``; a point is dominated when another is better or equal
    on both and better on one. So points equal on both axes (within the tolerances)
    are ties: all on the front or all off it. NaN points are never on the front.

    Args:
        x: the quantity to minimise (time, bytes, ...), any unit.
        y: the quantity to maximise, in the unit ``y_abs_tol`` is given in.
        x_rel_tol: relative tolerance of ``x``.
        y_abs_tol: absolute tolerance of ``y``.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    xs, ys = x[ok], y[ok]
    on_front = np.ones(len(ok), dtype=bool)
    for j in range(len(ok)):  # is point j dominated by any point?
        x_tol = x_rel_tol * np.maximum(np.abs(xs), abs(xs[j]))
        x_better, x_worse = xs < xs[j] - x_tol, xs > xs[j] + x_tol
        y_better, y_worse = ys > ys[j] + y_abs_tol, ys < ys[j] - y_abs_tol
        on_front[j] = not np.any(~x_worse & ~y_worse & (x_better | y_better))
    front = ok[on_front]
    return front[np.lexsort((-y[front], x[front]))]  # x ascending, then y descending


def tradeoff_points(dirs: list[str | Path], x: str = "sim_time_s",
                    options: FigureOptions | None = None) -> pd.DataFrame:
    """The points of the figure: columns ``series``, ``label``, ``algorithm``, ``x``,
    ``accuracy`` (0-1), ``on_front`` (on the Pareto front, :func:`pareto_front`) and, for
    early-exit x, ``threshold`` (from -ln(number of classes) up, as
    :func:`~sflsim.plots.early_exit.informative_thresholds`: below it every sample exits).
    ``options`` relabels runs (:meth:`~sflsim.plots.options.FigureOptions.label`).

    Raises:
        SflsimError: an unknown ``x``, a directory that is neither a results nor a
            sweep directory, or (early-exit x) a run without ``early_exit.csv``.
    """
    if x not in RUN_X and x not in EARLY_EXIT_X:
        choices = [*RUN_X, *EARLY_EXIT_X]
        raise SflsimError(f"unknown --x {x!r}{did_you_mean(x, choices)} (valid: "
                          f"{', '.join(choices)})")
    runs = expand_run_dirs(list(dirs))
    summaries = [read_result(d)[0] for d, _ in runs]
    labels = run_labels(summaries, [d for d, _ in runs], [lab for _, lab in runs], options)
    rows = []
    for (run_dir, _), summary, label in zip(runs, summaries, labels):
        algorithm = str(summary.get("algorithm", ""))
        if x in RUN_X:
            value = (_get(summary, "bytes_up") + _get(summary, "bytes_down") if x == "bytes_total"
                     else _get(summary, x))
            rows.append({"series": label, "label": label, "algorithm": algorithm, "x": value,
                         "accuracy": _get(summary, "final_server_accuracy")})
            continue
        table = read_input(run_dir, "early_exit",
                               ("threshold", "end_layer", "accuracy", "samples", x))
        table = informative_thresholds(table, run_dir)
        for tau, group in table.groupby("threshold", sort=True):
            w = group["samples"].to_numpy(dtype=float)
            w = w if w.sum() > 0 else np.ones_like(w)
            rows.append({"series": label, "label": f"{label} τ={tau:g}", "algorithm": algorithm,
                         "threshold": float(tau), "x": np.average(group[x], weights=w),
                         "accuracy": np.average(group["accuracy"], weights=w)})
    points = pd.DataFrame(rows)
    points["on_front"] = False
    points.loc[points.index[pareto_front(points["x"], points["accuracy"])], "on_front"] = True
    return points


def front_text(points: pd.DataFrame, x: str) -> str:
    """The Pareto front of :func:`tradeoff_points` as a table (run, ``x``, accuracy %),
    under a line that states the tolerances within which points tie."""
    front = points[points["on_front"]].sort_values(["x", "accuracy"], ascending=[True, False])
    rows = [[str(row["label"]), f"{row['x']:.6g}", f"{100 * row['accuracy']:.6g}"]
            for _, row in front.iterrows()]
    head = (f"Pareto front (lower {x}, higher accuracy; {x} within {100 * X_REL_TOL:g}% and "
            f"accuracy within {ACCURACY_ABS_TOL:g} count as equal, and runs equal on both are "
            "ties, all on the front):")
    return head + "\n" + text_table(["run", x, "accuracy (%)"], rows)


def plot_tradeoff(dirs: list[str | Path], out: str | Path, x: str = "sim_time_s",
                  formats: list[str] | None = None,
                  options: FigureOptions | None = None) -> list[Path]:
    """Accuracy (%) against ``x`` for runs or sweep points, Pareto front marked (ties
    within :data:`X_REL_TOL` of x and :data:`ACCURACY_ABS_TOL` of accuracy all on it).

    Args:
        dirs: sweep directories and/or results directories.
        out: output path: a prefix, or a file name whose extension is the one format.
        x: a key of :data:`RUN_X` or :data:`EARLY_EXIT_X`.
        formats: figure formats to write (see :func:`~sflsim.plots.style.output_paths`).
        options: legend labels, axis labels, title and width
            (:class:`~sflsim.plots.options.FigureOptions`).

    Returns:
        The written files.

    Raises:
        SflsimError: see :func:`tradeoff_points`; or no point has both values, a
            ``--label`` names no run, or a bad output path or format.
    """
    paths = output_paths(out, formats)
    with paper_style():
        return save_figure(tradeoff_figure(dirs, x, options), paths)


def tradeoff_figure(dirs: list[str | Path], x: str = "sim_time_s",
                    options: FigureOptions | None = None) -> Figure:
    """The figure of :func:`plot_tradeoff`, not saved (arguments and errors as there)."""
    options = options or FigureOptions()
    points = tradeoff_points(dirs, x, options)
    early_exit = x in EARLY_EXIT_X
    xlabel, scale = (EARLY_EXIT_X[x], 1.0) if early_exit else RUN_X[x]
    if xlabel.endswith("(s)") and np.nanmax(np.abs(points["x"].to_numpy(float)), initial=0) < 1:
        xlabel, scale = xlabel.replace("(s)", "(ms)"), 1e3  # sub-second latencies read better in ms
    xs, ys = points["x"].to_numpy(float) * scale, points["accuracy"].to_numpy(float) * 100
    if np.all(np.isnan(xs) | np.isnan(ys)):
        raise SflsimError(f"no run in {', '.join(map(str, dirs))} has both {x} and an accuracy "
                          "to plot (was any round evaluated?)")
    front = np.flatnonzero(points["on_front"].to_numpy(bool))
    front = front[np.lexsort((-ys[front], xs[front]))]
    series = list(dict.fromkeys(points["series"]))
    with paper_style():
        fig = new_figure(2.5, options.width)
        ax = fig.add_subplot()
        if len(front):
            fx, fy = xs[front], ys[front]
            ax.step(fx, fy, where="post", color="0.25", lw=0.8, ls="--", zorder=1)
            ax.plot(fx, fy, ls="none", marker="o", ms=7, mfc="none", mec="0.15", mew=0.8, zorder=3)
            ax.plot([], [], ls="--", lw=0.8, color="0.25", marker="o", ms=5, mfc="none", mec="0.15",
                    mew=0.8, label="Pareto front")
        # (x, y, threshold) to 4 digits -> where its label goes, its colour and its rank
        # (the first and last thresholds of each run are placed first)
        labelled: dict[tuple[float, float, float], tuple[float, float, str, int]] = {}
        for i, name in enumerate(series):  # one legend entry per run, its name
            sel = (points["series"] == name).to_numpy()
            if early_exit:
                style = series_style(i, 3.0)
                ax.plot(xs[sel], ys[sel], lw=0.9, label=name, zorder=2, **style)
                taus = points["threshold"].to_numpy(float)[sel]
                ok = np.flatnonzero(~(np.isnan(xs[sel]) | np.isnan(ys[sel])))
                chosen = ok[threshold_labels(len(ok))]
                for rank, k in enumerate(chosen):
                    px, py = xs[sel][k], ys[sel][k]
                    key = (float(f"{px:.4g}"), float(f"{py:.4g}"), float(taus[k]))
                    ends = rank in (0, len(chosen) - 1)
                    # runs that coincide share one label, in grey
                    labelled[key] = ((*labelled[key][:2], "0.25", labelled[key][3])
                                     if key in labelled else
                                     (px, py, style["color"], 0 if ends else 1))
            else:
                style = series_style(i, 4.5)  # hollow, shrinking: equal runs all show
                style.pop("linestyle")
                ax.plot(xs[sel], ys[sel], ls="none", label=name, zorder=2, **style)
        ax.margins(x=0.1, y=0.1)
        keep_min_span(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("Final accuracy (%)" if not early_exit else "Early-exit accuracy (%)")
        place_legend(fig, ax)
        finish_figure(fig, options)
        # after the layout is final: the labels are placed where they are drawn
        order = sorted(labelled.items(), key=lambda item: item[1][3])
        place_threshold_labels(ax, [(px, py, f"τ={tau:.3g}".replace("-", "\N{MINUS SIGN}"), color)
                                    for (_, _, tau), (px, py, color, _) in order])
        return fig


#: Where a threshold label may sit beside its point, in the order tried: (offset in
#: points, horizontal and vertical alignment). Up-left first: the front is down-right.
LABEL_PLACES = (((-3, 3), "right", "bottom"), ((3, -3), "left", "top"),
                ((3, 3), "left", "bottom"), ((-3, -3), "right", "top"))


def place_threshold_labels(ax, labels: list[tuple[float, float, str, str]],
                           fontsize: float = 5.5) -> list:
    """Write each of ``labels`` (``(x, y, text, colour)``, in data units, most wanted
    first) beside its point in the first of :data:`LABEL_PLACES` where it overlaps no
    label already written and stays inside ``ax``; a label with no such place is left
    out. Call it when the figure's layout is final. Returns the labels written."""
    fig = ax.get_figure()
    fig.draw_without_rendering()
    inside = ax.get_window_extent()
    taken: list = []
    written = []
    for px, py, text, color in labels:
        for offset, ha, va in LABEL_PLACES:
            note = ax.annotate(text, (px, py), xytext=offset, textcoords="offset points",
                               ha=ha, va=va, fontsize=fontsize, color=color, zorder=4)
            note.set_in_layout(False)  # placed in the final layout: it must not move it
            box = note.get_window_extent().padded(1.0)
            fits = (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0
                    and box.y1 <= inside.y1)
            if fits and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                written.append(note)
                break
            note.remove()
    return written


def threshold_labels(n: int, most: int = MAX_THRESHOLD_LABELS) -> np.ndarray:
    """Indices of the points of one run's early-exit curve (``n`` points, in threshold
    order) whose threshold is written beside them: all up to ``most``, else ``most``
    spread evenly from the first to the last."""
    if n <= most:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, most)).astype(int))


def _get(summary: dict, key: str) -> float:
    value = summary.get(key)
    try:
        return float("nan") if value is None else float(value)
    except (TypeError, ValueError):
        return float("nan")
