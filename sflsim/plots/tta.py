"""Time-to-accuracy curves: server test accuracy against simulated time, one line per run."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from sflsim.errors import SflsimError
from sflsim.metrics.compare import check_target, expand_run_dirs, time_to_accuracy
from sflsim.metrics.results import read_result
from sflsim.plots.options import FigureOptions, finish_figure
from sflsim.plots.result_files import run_labels
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


def plot_tta(dirs: list[str | Path], out: str | Path, target: float | None = None,
             formats: list[str] | None = None,
             options: FigureOptions | None = None) -> list[Path]:
    """Accuracy (%) vs simulated time (s) of each run, from its ``rounds.csv``.

    Each curve starts at time 0 with the untrained model's accuracy (round 0 of
    ``rounds.csv``; results written before round 0 was recorded start at round 1).
    Each evaluated round is a marker at the simulated time its round ended, and the
    accuracy holds until the next evaluation (a step line, ``steps-post``): it is what
    the model scores from then on, not a trend between evaluations. With ``target``,
    a dotted line marks the target accuracy and each run's time-to-accuracy (the end
    of its first evaluated round at or above the target, as ``sflsim compare``) is a
    drop line from where its step first reaches the target down to the time axis, and
    the legend gives each run's time to it (``seq: 70% at 20 s``, or ``not reached``).
    Lines are labelled with the runs' names (:func:`~sflsim.plots.result_files.run_labels`);
    each has its own colour, dash pattern and hollow marker shape
    (:func:`~sflsim.plots.style.series_style`), so runs whose curves coincide stay
    visible one over the other.

    Args:
        dirs: results directories and/or sweep directories (completed points).
        out: output path: a prefix, or a file name whose extension is the one format.
        target: accuracy in (0, 1], or None.
        formats: figure formats to write (see :func:`~sflsim.plots.style.output_paths`).
        options: legend labels, axis labels, title and width
            (:class:`~sflsim.plots.options.FigureOptions`).

    Returns:
        The written files.

    Raises:
        SflsimError: a directory is neither a results nor a sweep directory, no run
            has an evaluated round, a ``--label`` names no run, or a bad output path or
            format.
    """
    paths = output_paths(out, formats)
    with paper_style():
        return save_figure(tta_figure(dirs, target, options), paths)


def tta_curves(dirs: list[str | Path], target: float | None = None,
               options: FigureOptions | None = None) -> list[tuple[str, pd.DataFrame, float]]:
    """``(label, evaluated rounds, time to target in s or NaN)`` of each run with an
    evaluated round, in the order of ``dirs`` (arguments and errors as :func:`plot_tta`)."""
    if target is not None:
        check_target(target)
    runs = expand_run_dirs(list(dirs))
    results = [read_result(d) for d, _ in runs]
    labels = run_labels([s for s, _ in results], [d for d, _ in runs],
                        [lab for _, lab in runs], options)
    curves = []
    for (_, rounds), label in zip(results, labels):
        if "server_accuracy" not in rounds or "sim_time_s" not in rounds:
            continue
        done = rounds.dropna(subset=["server_accuracy", "sim_time_s"])
        if len(done):
            curves.append((label, done, time_to_accuracy(done, target) if target else math.nan))
    if not curves:
        from sflsim.metrics.results import TIMING_ONLY_NOTE, is_timing_only

        if all(is_timing_only(d) for d in dirs):
            raise SflsimError(f"{', '.join(map(str, dirs))}: "
                              f"{'each run is' if len(dirs) > 1 else 'the run is'} "
                              f"{TIMING_ONLY_NOTE} accuracy to plot; run without --no-train")
        raise SflsimError(f"no evaluated round in {', '.join(map(str, dirs))}: rounds.csv has no "
                          "server_accuracy (no round was evaluated)")
    return curves


def time_to_target(dirs: list[str | Path], target: float,
                   options: FigureOptions | None = None) -> list[tuple[str, float]]:
    """``(run label, time to target in s, NaN if not reached)`` per run, as drawn by
    :func:`plot_tta` (arguments and errors as there)."""
    return [(label, tta) for label, _, tta in tta_curves(dirs, target, options)]


def time_to_target_text(dirs: list[str | Path], target: float,
                        options: FigureOptions | None = None) -> str:
    """A table of :func:`time_to_target`: each run's name and its time to ``target`` in
    seconds, or ``not reached`` (arguments and errors as :func:`plot_tta`)."""
    rows = [[label, "not reached" if math.isnan(t) else f"{t:.6g}"]
            for label, t in time_to_target(dirs, target, options)]
    return text_table(["run", f"time to {100 * target:g}% (s)"], rows)


def tta_figure(dirs: list[str | Path], target: float | None = None,
               options: FigureOptions | None = None) -> Figure:
    """The figure of :func:`plot_tta`, not saved (arguments and errors as there)."""
    options = options or FigureOptions()
    curves = tta_curves(dirs, target, options)
    with paper_style():
        fig = new_figure(2.4, options.width)
        ax = fig.add_subplot()
        many = len(curves) > 8
        for i, (label, done, tta) in enumerate(curves):
            ax.plot(done["sim_time_s"], 100 * done["server_accuracy"],
                    label=label if target is None else target_label(label, tta, target),
                    drawstyle="steps-post", zorder=2 + 0.01 * i,
                    **series_style(i, 2.5 if many or len(done) > 30 else 3.5),
                    markevery=_markevery(len(done)))
        ax.margins(y=0.06)  # whole markers at the lowest and highest accuracy
        first = min(float(done["sim_time_s"].min()) for _, done, _ in curves)
        last = max(float(done["sim_time_s"].max()) for _, done, _ in curves)
        pad = 0.03 * ((last - min(first, 0)) or 1.0)  # whole markers at the first and last time
        ax.set_xlim(min(first, 0) - pad if first <= 0 else 0, last + pad)  # time from 0
        if target is not None:
            ax.axhline(100 * target, color="0.4", lw=0.7, ls=":", zorder=0)
            keep_min_span(ax, "y")
            ax.annotate(f"target {100 * target:g}%", (0, 100 * target), xycoords=("axes fraction", "data"),
                        xytext=(2, 2), textcoords="offset points", fontsize=6, color="0.35")
            bottom, top = ax.get_ylim()
            for i, (_, _, tta) in enumerate(curves):
                if not math.isnan(tta):  # a drop line from the target to the time axis
                    ax.vlines(tta, bottom, 100 * target, color=series_style(i)["color"], lw=0.7,
                              ls=(0, (2, 2)), zorder=0)
            ax.set_ylim(bottom, top)
        ax.set_xlabel("Simulated time (s)")
        ax.set_ylabel("Server accuracy (%)")
        keep_min_span(ax)
        place_legend(fig, ax)
        return finish_figure(fig, options)


def target_label(label: str, tta: float, target: float) -> str:
    """A run's legend entry with its time to ``target``: ``seq: 70% at 20 s`` (the
    time to 4 significant digits), or ``avg: 70% not reached``."""
    reached = "not reached" if math.isnan(tta) else f"at {tta:.4g} s"
    return f"{label}: {100 * target:g}% {reached}"


def _markevery(n: int) -> int:
    """Mark every round up to 20 rounds, then about 20 markers per line."""
    return max(1, n // 20)
