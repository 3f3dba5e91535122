"""A metric of a sweep's points against one of its axes: one line per algorithm and
combination of the other axes (``sflsim plot sweep DIR --x AXIS --y METRIC``).

The metric (``y``) is a column of the sweep's ``sweep.csv`` (``final_server_accuracy``,
``sim_time_s``, ``client_energy_j``, ...; see :data:`SWEEP_METRICS`), ``bytes_total``
(up + down), or a number in each point's ``summary.json``, a nested one by its dotted
path (``final_accuracy_by_end_layer.server_accuracy_l3``). The x axis is one of the
sweep's axes, by the dotted path that heads its ``sweep.csv`` column
(``devices.pi4_wifi.count``; ``algorithm`` for ``algorithm_config``) or by the short
name the legends use (``pi4_wifi.count``). Numeric axis values are drawn to scale;
others (``iid``, ``dirichlet``) as categories in the sweep's order; numbers beside
``null`` (no deadline, every client) as categories too, ascending, ``null`` last.

Lines: the points that differ only in ``x`` share a line. Another axis splits the
points into lines unless it is fixed by ``x`` (zipped with it, as the Orin Nano count is
with the Raspberry Pi count in the shipped ``device_mix`` sweep; the x label names
it). The x label names an axis by its last key (``count``), or by as many keys as
tell it from the sweep's other axes (``pi4_wifi.count`` beside ``orin_wifi.count``;
:func:`axis_label_names`). The legend names each line by its algorithm and the other
axes' values, each under its field's name (``algorithm=fedavg, partition.scheme=iid``);
a figure of one line has no legend (unless ``--label`` names that line).
Only completed points with a value are drawn; :func:`left_out_text` says which
were left out and why.

Seeds: a sweep's ``seed`` axis (``seeds: [0, 1, 2]`` or ``--seeds``) never splits lines.
The points that differ only in their seed are drawn as their mean, with a band (numeric
x) or error bars (categories): the 95% t interval of the mean by default (``--band
ci95``), ± one sample standard deviation (``--band std``), or none (``--band none``).
The rule is :func:`sflsim.metrics.stats.describe`'s, the one ``sflsim compare`` and the
reproduction harness use; :func:`seeds_text` says what was drawn.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sflsim.errors import SflsimError
from sflsim.metrics.compare import (
    _short,
    axis_value_labels,
    config_axes,
    is_sweep_dir,
    read_sweep,
    short_axis_names,
    sweep_axes,
)
from sflsim.metrics.results import is_timing_only, not_a_folder_of
from sflsim.metrics.stats import describe
from sflsim.plots.options import FigureOptions, finish_figure
from sflsim.plots.result_files import RUN_QUANTITIES
from sflsim.plots.style import (
    integer_ticks,
    keep_min_span,
    new_figure,
    output_paths,
    paper_style,
    place_legend,
    save_figure,
    series_style,
)
from sflsim.text import did_you_mean, plural

#: Metrics of ``sweep.csv`` (and ``bytes_total``): axis label and the factor from the
#: stored unit to the drawn one. Other metrics (from ``summary.json``) are labelled with
#: their key, in % when the key names an accuracy.
SWEEP_METRICS = {
    "final_server_accuracy": ("Final server accuracy (%)", 100.0),
    "final_client_accuracy": ("Final client accuracy (%)", 100.0),
    **RUN_QUANTITIES,
}

#: Up to this many values of a numeric axis, the x axis ticks at each value swept.
MAX_VALUE_TICKS = 8

#: Keys of ``summary.json`` that are numbers but not results of the run.
NOT_METRICS = ("seed",)

#: The names of the algorithm axis (``algorithm_config`` in ``sweep.csv``).
ALGORITHM_AXES = ("algorithm_config", "algorithm.name")

#: The seeds axis of a sweep (``seeds:``): its points are aggregated, never a line each.
SEED_AXIS = "seed"

#: What the band around a mean over seeds shows (``--band``): the 95% t interval of the
#: mean, ± one sample standard deviation, or nothing.
BANDS = ("ci95", "std", "none")


def plot_sweep(sweep_dir: str | Path, out: str | Path, x: str | None = None,
               y: str = "final_server_accuracy", formats: list[str] | None = None,
               options: FigureOptions | None = None, band: str = "ci95") -> list[Path]:
    """Draw metric ``y`` of a sweep's completed points against axis ``x`` and write it.

    Args:
        sweep_dir: a sweep directory (it holds ``sweep.csv``).
        out: output path: a prefix, or a file name whose extension is the one format.
        x: a sweep axis, by its ``sweep.csv`` column (dotted path) or short name; None:
            the sweep's only axis.
        y: a metric: a column of ``sweep.csv``, ``bytes_total``, or a numeric key of
            the points' ``summary.json`` (nested keys by dotted path).
        formats: figure formats to write (see :func:`~sflsim.plots.style.output_paths`).
        options: legend labels, axis labels, title and width
            (:class:`~sflsim.plots.options.FigureOptions`).
        band: around a mean over seeds, one of :data:`BANDS` (module docstring).

    Returns:
        The written files.

    Raises:
        SflsimError: see :func:`sweep_points`; a ``--label`` names no line; an unknown
            ``band``; or a bad output path or format.
    """
    paths = output_paths(out, formats)
    with paper_style():
        return save_figure(sweep_figure(sweep_dir, x, y, options, band), paths)


def axis_label_names(axes: list[str]) -> list[str]:
    """Names of sweep axes for the x label: the last key of each dotted path (without a
    trailing ``name``), with the keys before it added while it is ambiguous among
    ``axes``: ``devices.weak.end_layer`` -> ``end_layer``; ``devices.pi4_wifi.count,
    devices.orin_wifi.count`` -> ``pi4_wifi.count, orin_wifi.count``;
    ``algorithm_config`` -> ``algorithm``."""
    parts = [("algorithm" if a in ALGORITHM_AXES else a).split(".") for a in axes]
    parts = [p[:-1] if len(p) > 1 and p[-1] == "name" else p for p in parts]
    names = []
    for i, mine in enumerate(parts):
        depth = 1
        while depth < len(mine) and any(p[-depth:] == mine[-depth:]
                                        for j, p in enumerate(parts) if j != i):
            depth += 1
        names.append(".".join(mine[-depth:]))
    return names


def read_sweep_metrics(sweep_dir: str | Path) -> tuple[pd.DataFrame, list[str], list[str]]:
    """``(points, axes, metrics)`` of a sweep: its :func:`~sflsim.metrics.compare.read_sweep`
    table, with ``bytes_total`` and every numeric key of the completed points'
    ``summary.json`` (dotted paths, :func:`pandas.json_normalize`) that ``sweep.csv``
    lacks added as columns; its axis columns; and the metric names ``y`` may take.

    Raises:
        SflsimError: ``sweep_dir`` is not a sweep directory.
    """
    sweep_dir = Path(sweep_dir)
    if not is_sweep_dir(sweep_dir):
        raise SflsimError(not_a_folder_of(sweep_dir, "sweep directory", "sweep.csv",
                                          f"sflsim sweep SWEEP.yaml -o {sweep_dir}"))
    table = read_sweep(sweep_dir).reset_index(drop=True)
    axes = sweep_axes(table)
    if {"bytes_up", "bytes_down"} <= set(table.columns):
        table["bytes_total"] = (pd.to_numeric(table["bytes_up"], errors="coerce")
                                + pd.to_numeric(table["bytes_down"], errors="coerce"))
    metrics = [m for m in SWEEP_METRICS if m in table]
    summaries = [_summary(Path(path)) if status == "completed" else {}
                 for path, status in zip(table["path"], table["status"])]
    flat = pd.json_normalize(summaries) if any(summaries) else pd.DataFrame(index=table.index)
    for key in flat.columns:
        values = flat[key]
        if (key in table.columns or key in NOT_METRICS or values.map(type).eq(bool).any()
                or not pd.api.types.is_numeric_dtype(values.dropna())
                or values.dropna().empty):
            continue
        table[key] = pd.to_numeric(values, errors="coerce").to_numpy()
        metrics.append(key)
    return table, axes, metrics


def _summary(run_dir: Path) -> dict:
    """``run_dir/summary.json``; {} when it is missing or holds no JSON object."""
    try:
        data = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def resolve_axis(x: str | None, axes: list[str], sweep_dir: Path,
                 table: pd.DataFrame | None = None) -> str:
    """The ``sweep.csv`` column of axis ``x`` (given as that column, its short name, or
    ``algorithm`` for the algorithm axis). When ``x`` is None: the sweep's one axis, the
    seed aside, or the first of axes zipped together (each value of it fixes the others'
    in ``table``, as the device counts of the shipped ``device_mix`` sweep).

    Raises:
        SflsimError: ``x`` names no axis (the message lists the axes), or is None and
            the sweep has several independent axes or none.
    """
    if not axes:
        raise SflsimError(f"{sweep_dir / 'sweep.csv'} has no axis column to draw against")
    shorts = short_axis_names(axes)
    if x is None:
        free = [a for a in axes if a != SEED_AXIS] or axes
        if len(free) == 1 or (table is not None and all(
                table.groupby(table[free[0]].astype(str))[a].nunique(dropna=False).max() <= 1
                for a in free[1:])):
            return free[0]
        raise SflsimError(f"give --x, the axis to draw against: the sweep {sweep_dir} has "
                          f"{len(free)} axes: {', '.join(free)}")
    if x in axes:
        return x
    if x in shorts:
        return axes[shorts.index(x)]
    labels = axis_label_names(axes)
    if x in labels:
        return axes[labels.index(x)]
    if x == "algorithm.name" and "algorithm_config" in axes:
        return "algorithm_config"
    raise SflsimError(f"unknown --x {x!r}: not an axis of the sweep {sweep_dir}"
                      f"{did_you_mean(x, axes + shorts)} (valid: {', '.join(axes)})")


def sweep_points(sweep_dir: str | Path, x: str | None = None,
                 y: str = "final_server_accuracy") -> pd.DataFrame:
    """The points of :func:`plot_sweep`, one row per point of the sweep in its order:
    ``point``, ``status``, ``series`` (the line's legend label; empty when there is one
    line and nothing to name), ``x`` (the axis value as in ``sweep.csv``), ``y`` (the
    metric in its stored unit, NaN where missing), ``seed`` (the point's value of the
    sweep's seed axis; NaN without one, or when ``x`` is it) and ``drawn`` (completed with
    a value).
    ``attrs`` holds ``x_axis`` and ``y_metric`` (the resolved names), ``others`` (the
    sweep's other axes) and ``with_x`` (those of them fixed by ``x``).

    Raises:
        SflsimError: ``sweep_dir`` is not a sweep directory; ``x`` is not one of its axes
            or ``y`` not one of its metrics (each message lists the valid names).
    """
    sweep_dir = Path(sweep_dir)
    table, axes, metrics = read_sweep_metrics(sweep_dir)
    axis = resolve_axis(x, axes, sweep_dir, table)
    if y not in metrics:
        raise SflsimError(f"unknown --y {y!r}: not a metric of the sweep {sweep_dir} (its "
                          f"sweep.csv and its points' summary.json){did_you_mean(y, metrics)} "
                          f"(valid: {', '.join(metrics)})")
    done = table["status"] == "completed"
    values = pd.to_numeric(table[y], errors="coerce")
    key_of = dict(zip(axes, short_axis_names(axes)))
    others = [a for a in axes if a != axis]
    if axis != SEED_AXIS and SEED_AXIS in others:  # seeds are aggregated, not lines
        others.remove(SEED_AXIS)
        if "name" in others and axis != "name" and "name" not in config_axes(table):
            others.remove("name")  # it names each seed's run: as compare, not lines
    completed = table[done]
    fixed_by_x = [a for a in others
                  if completed.groupby(completed[axis].astype(str))[a].nunique(dropna=False).max() <= 1]
    splitting = [a for a in others if a not in fixed_by_x]
    parts: list[pd.Series] = []
    algorithm_axis = any(a in ALGORITHM_AXES for a in [axis, *splitting])
    if "algorithm" in table and not algorithm_axis:
        names = completed["algorithm"].astype(str)
        fixed = completed.groupby(completed[axis].astype(str))["algorithm"].nunique().max() <= 1
        if names.nunique() == 1 or not fixed:  # the line's algorithm, unless x names it
            parts.append("algorithm=" + table["algorithm"].fillna("").astype(str))
    for a in splitting:
        parts.append(key_of[a] + "=" + axis_value_labels(table[a]))
    series = (pd.concat(parts, axis=1).agg(", ".join, axis=1) if parts
              else pd.Series("", index=table.index))
    seeds = (table[SEED_AXIS] if SEED_AXIS in table and axis != SEED_AXIS
             else pd.Series(np.nan, index=table.index))
    points = pd.DataFrame({"point": table["point"], "status": table["status"], "series": series,
                           "x": table[axis], "y": values, "seed": seeds,
                           "drawn": done & values.notna() & np.isfinite(values)})
    points.attrs.update(x_axis=axis, y_metric=y, with_x=fixed_by_x, others=others,
                        sweep_dir=str(sweep_dir), paths=list(table["path"]))
    return points


def left_out_text(points: pd.DataFrame) -> str:
    """Which points of :func:`sweep_points` the figure leaves out and why (not completed:
    their status; completed without a value of the metric), one line; empty when none."""
    out = points[~points["drawn"]]
    if out.empty:
        return ""
    why = [f"{p} ({s if s != 'completed' else 'no ' + points.attrs['y_metric']})"
           for p, s in zip(out["point"], out["status"])]
    shown = ", ".join(why[:8]) + (f", ... ({len(why) - 8} more)" if len(why) > 8 else "")
    return f"left out {len(out)} of {plural(len(points), 'point')}: {shown}"


def seed_means(points: pd.DataFrame, band: str = "ci95") -> pd.DataFrame:
    """The drawn points of :func:`sweep_points` with equal ``series`` and ``x`` (the seeds
    of one configuration) as one row each, in order of first appearance: ``series``,
    ``x``, ``n`` (points), ``seeds`` (``"0,1,2"``; empty without a seed axis), ``y`` (the
    mean), ``low`` and ``high`` (the band: the 95% t interval of the mean, the mean ± one
    sample std, or the mean itself, by ``band``; the mean for a single point), in the
    metric's stored unit.

    Raises:
        SflsimError: ``band`` is not one of :data:`BANDS`.
    """
    if band not in BANDS:
        raise SflsimError(f"unknown --band {band!r}{did_you_mean(band, BANDS)} (valid: "
                          f"{', '.join(BANDS)})")
    drawn = points[points["drawn"]]
    rows = []
    for (series, _x), group in drawn.groupby(["series", drawn["x"].astype(str)], sort=False):
        sample = describe(group["y"].tolist())
        spread = {"ci95": sample.half_width, "std": sample.std, "none": 0.0}[band]
        spread = 0.0 if not np.isfinite(spread) else spread
        seeds = ",".join(_short(v) for v in group["seed"].dropna())
        rows.append({"series": series, "x": group["x"].iloc[0], "n": sample.n, "seeds": seeds,
                     "y": sample.mean, "low": sample.mean - spread,
                     "high": sample.mean + spread})
    return pd.DataFrame(rows, columns=["series", "x", "n", "seeds", "y", "low", "high"])


def seeds_text(points: pd.DataFrame, band: str = "ci95") -> str:
    """What a figure of :func:`sweep_points` with seeds draws, one line ("each point: the
    mean of 3 seeds; band: 95% t interval of the mean"); empty when no point has more
    than one seed."""
    means = seed_means(points, band)
    if means.empty or means["n"].max() < 2:
        return ""
    counts = sorted(set(means["n"]))
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    what = {"ci95": "band: 95% t interval of the mean", "std": "band: ± one sample std",
            "none": "no band"}[band]
    return f"each point: the mean of {n} seeds; {what}"


def metric_label(y: str) -> tuple[str, float]:
    """The y-axis label of metric ``y`` (units in it) and the factor to the drawn unit."""
    if y in SWEEP_METRICS:
        return SWEEP_METRICS[y]
    if "accuracy" in y.rsplit(".", 1)[-1]:
        return f"{y} (%)", 100.0
    return y, 1.0


def _category_order(values: pd.Series) -> list[str]:
    """The categories of an axis that is not all numbers, in the sweep's order; numbers
    beside ``null`` ascending, ``null`` last (a line from null to the numbers in the
    sweep's order would slope the wrong way)."""
    order = list(dict.fromkeys(values.astype(str)))
    numbers = pd.to_numeric(pd.Series(order), errors="coerce")
    if set(pd.Series(order)[numbers.isna()]) == {"null"}:
        order = [order[i] for i in numbers.sort_values(na_position="last").index]
    return order


def sweep_figure(sweep_dir: str | Path, x: str | None = None,
                 y: str = "final_server_accuracy",
                 options: FigureOptions | None = None, band: str = "ci95") -> Figure:
    """The figure of :func:`plot_sweep`, not saved (arguments and errors as there).

    Raises:
        SflsimError: also when no completed point has a value of ``y`` (a timing-only
            sweep has no accuracy).
    """
    options = options or FigureOptions()
    points = sweep_points(sweep_dir, x, y)
    means = seed_means(points, band)  # an unknown band fails before drawing
    axis, drawn = points.attrs["x_axis"], points[points["drawn"]]
    if drawn.empty:
        paths = [Path(p) for p, s in zip(points.attrs["paths"], points["status"])
                 if s == "completed"]
        if paths and "accuracy" in y and all(is_timing_only(p) for p in paths):
            raise SflsimError(f"{sweep_dir}: the points are timing-only (--no-train): they "
                              f"trained nothing, so they have no {y}; draw another --y, e.g. "
                              "sim_time_s, or sweep without training.timing_only")
        raise SflsimError(f"no completed point of the sweep {sweep_dir} has a value of {y} "
                          f"({left_out_text(points) or 'no points'})")
    numeric = pd.to_numeric(drawn["x"], errors="coerce")
    numeric_x = bool(numeric.notna().all())
    if numeric_x:
        position = pd.to_numeric(points["x"], errors="coerce")
    else:
        order = _category_order(points["x"])
        position = points["x"].astype(str).map({v: i for i, v in enumerate(order)})
    ylabel, scale = metric_label(y)
    series = list(dict.fromkeys(drawn["series"]))
    shown = [options.label(name) if name else name for name in series]
    # one line needs no legend, unless its author named it
    legend = len(series) > 1 or bool(series[0] and shown[0] != series[0])
    with paper_style():
        fig = new_figure(2.5, options.width)
        ax = fig.add_subplot()
        where = dict(zip(points["x"].astype(str), position))
        for i, (name, text) in enumerate(zip(series, shown)):
            rows = means[means["series"] == name]
            xs = rows["x"].astype(str).map(where).to_numpy(float)
            order_ = np.argsort(xs, kind="stable")
            xs, rows = xs[order_], rows.iloc[order_]
            (line,) = ax.plot(xs, rows["y"].to_numpy(float) * scale, label=text or None,
                              zorder=2 + 0.01 * i, **series_style(i, 4.0))
            low, high = rows["low"].to_numpy(float) * scale, rows["high"].to_numpy(float) * scale
            if np.any(high > low):
                if numeric_x:
                    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.18,
                                    linewidth=0, zorder=1.5 + 0.01 * i)
                else:
                    mid = rows["y"].to_numpy(float) * scale
                    ax.errorbar(xs, mid, yerr=[mid - low, high - mid], fmt="none",
                                ecolor=line.get_color(), elinewidth=0.8, capsize=2,
                                zorder=1.5 + 0.01 * i)
        ax.margins(x=0.06, y=0.1)
        keep_min_span(ax, "y")
        if numeric_x:
            keep_min_span(ax, "x")
            swept = np.unique(numeric.to_numpy(float))
            if len(swept) <= MAX_VALUE_TICKS:  # a tick at each swept value
                ax.set_xticks(swept)
            elif np.all(np.mod(swept, 1) == 0):
                integer_ticks(ax.xaxis)
        else:
            shown = dict(zip(points["x"].astype(str), axis_value_labels(points["x"])))
            ax.set_xticks(range(len(order)), [shown[v] for v in order])
            ax.grid(axis="x", visible=False)
        all_axes = [axis, *points.attrs["others"]]
        names = dict(zip(all_axes, axis_label_names(all_axes)))
        xlabel = names[axis]
        with_x = points.attrs["with_x"]
        if with_x:
            xlabel += f" (with {', '.join(names[a] for a in with_x)}, zipped)"
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if legend:
            place_legend(fig, ax)
        return finish_figure(fig, options)
