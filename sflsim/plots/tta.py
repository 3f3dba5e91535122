"""Time-to-accuracy curves: server test accuracy against simulated time, one line per run."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure

from sflsim.errors import SflsimError
from sflsim.metrics.compare import check_target, expand_run_dirs, time_to_accuracy
from sflsim.metrics.results import read_result
from sflsim.plots.inputs import run_labels
from sflsim.plots.style import (
    MARKERS,
    PALETTE,
    keep_min_span,
    new_figure,
    paper_style,
    place_legend,
    save_figure,
)


def plot_tta(dirs: list[str | Path], out_prefix: str | Path, target: float | None = None,
             formats: list[str] = ("png", "pdf")) -> list[Path]:  # type: ignore[assignment]
    """Accuracy (%) vs simulated time (s) of each run, from its ``rounds.csv``.

    Each curve starts at time 0 with the untrained model's accuracy (round 0 of
    ``rounds.csv``; results written before round 0 was recorded start at round 1),
    then each evaluated round is a marker at the simulated time its round ended.
    With ``target``, a dotted line marks the target accuracy and each run's
    time-to-accuracy is marked by a vertical tick on the time axis.

    Args:
        dirs: results directories and/or sweep directories (completed points).
        out_prefix: output path without extension.
        target: accuracy in (0, 1], or None.
        formats: figure formats to write.

    Returns:
        The written files.

    Raises:
        SflsimError: a directory is neither a results nor a sweep directory, or no
            run has an evaluated round.
    """
    with paper_style():
        return save_figure(tta_figure(dirs, target), out_prefix, list(formats))


def tta_figure(dirs: list[str | Path], target: float | None = None) -> Figure:
    """The figure of :func:`plot_tta`, not saved (arguments and errors as there)."""
    if target is not None:
        check_target(target)
    runs = expand_run_dirs(list(dirs))
    results = [read_result(d) for d, _ in runs]
    labels = run_labels([s for s, _ in results], [d for d, _ in runs], [lab for _, lab in runs])
    curves = []
    for (_, rounds), label in zip(results, labels):
        if "server_accuracy" not in rounds or "sim_time_s" not in rounds:
            continue
        done = rounds.dropna(subset=["server_accuracy", "sim_time_s"])
        if len(done):
            curves.append((label, done, time_to_accuracy(done, target) if target else math.nan))
    if not curves:
        raise SflsimError(f"no evaluated round in {', '.join(map(str, dirs))}: rounds.csv has no "
                          "server_accuracy yet")
    with paper_style():
        fig = new_figure(2.4)
        ax = fig.add_subplot()
        many = len(curves) > 8
        for i, (label, done, _) in enumerate(curves):
            ax.plot(done["sim_time_s"], 100 * done["server_accuracy"], label=label,
                    color=PALETTE[i % len(PALETTE)], marker=MARKERS[i % len(MARKERS)],
                    ms=2.5 if many or len(done) > 30 else 3.5, markevery=_markevery(len(done)),
                    clip_on=False)  # the marker at time 0 whole, on the axis
        if target is not None:
            ax.axhline(100 * target, color="0.4", lw=0.7, ls=":", zorder=0)
            keep_min_span(ax, "y")
            ax.annotate(f"target {100 * target:g}%", (0, 100 * target), xycoords=("axes fraction", "data"),
                        xytext=(2, 2), textcoords="offset points", fontsize=6, color="0.35")
            bottom, top = ax.get_ylim()
            for i, (_, _, tta) in enumerate(curves):
                if not math.isnan(tta):  # a drop line from the target to the time axis
                    ax.vlines(tta, bottom, 100 * target, color=PALETTE[i % len(PALETTE)], lw=0.7,
                              ls=(0, (2, 2)), zorder=0)
            ax.set_ylim(bottom, top)
        ax.set_xlabel("Simulated time (s)")
        ax.set_ylabel("Server accuracy (%)")
        ax.set_xlim(left=0)
        keep_min_span(ax)
        place_legend(fig, ax)
        return fig


def _markevery(n: int) -> int:
    """Mark every round up to 20 rounds, then about 20 markers per line."""
    return max(1, n // 20)
