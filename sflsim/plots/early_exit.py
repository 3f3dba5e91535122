"""Early-exit accuracy and exit ratio against the confidence threshold (Hetero-SplitEE Fig. 2).

Two stacked panels sharing the threshold axis, one line per end layer, from a
run's ``early_exit.csv`` (written when ``evaluation.early_exit.enabled: true``):
top, the accuracy of collaborative inference; bottom, the share of samples
that exit on the device (the paper's "adoption ratio of early-exit inference").
The threshold is ``tau`` on the confidence ``C = -H`` (entropy in nats); a sample
exits when ``C > tau``. Since the entropy of a softmax over ``K`` classes is at most
``ln K``, ``C >= -ln K`` always, so below ``tau = -ln K`` every sample exits and
nothing changes (with the default sweep from -4 and 10 classes, 42% of the range).
The threshold axis therefore starts at ``-ln K`` by default (``K`` from the run's
dataset in ``scenario.yaml``; the whole sweep when it is unknown).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MultipleLocator

from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result
from sflsim.plots.options import FigureOptions, finish_figure
from sflsim.plots.result_files import num_classes, read_input
from sflsim.plots.style import (
    MARKERS,
    PALETTE,
    keep_min_span,
    new_figure,
    output_paths,
    paper_style,
    save_figure,
)

COLUMNS = ("threshold", "end_layer", "accuracy", "exit_ratio")


def read_early_exit(run_dir: str | Path):
    """A run's ``early_exit.csv``.

    Raises:
        SflsimError: not a results directory, or no ``early_exit.csv`` (the message
            says why the run wrote none when ``summary.json`` records it).
    """
    run_dir = Path(run_dir)
    summary, _ = read_result(run_dir)
    if not (run_dir / "early_exit.csv").is_file():
        from sflsim.metrics.results import TIMING_ONLY_NOTE, is_timing_only

        if is_timing_only(run_dir):
            raise SflsimError(f"{run_dir} has no early_exit.csv: the run is {TIMING_ONLY_NOTE} "
                              f"early-exit results; run without --no-train")
        note = summary.get("early_exit")
        why = f" (the run says: {note})" if isinstance(note, str) else ""
        raise SflsimError(f"{run_dir} has no early_exit.csv{why}; run with "
                          "evaluation.early_exit.enabled: true and an algorithm with exit heads")
    return read_input(run_dir, "early_exit", COLUMNS)


def default_tau_min(run_dir: str | Path) -> float | None:
    """``-ln K`` for the ``K`` classes of the run's dataset (below it every sample exits),
    or None when the dataset is unknown."""
    k = num_classes(run_dir)
    return -math.log(k) if k else None


def informative_thresholds(table: pd.DataFrame, run_dir: str | Path,
                           tau_min: float | None = None) -> pd.DataFrame:
    """The rows of ``early_exit.csv`` with ``threshold >= tau_min`` (default
    :func:`default_tau_min`; every row when that is unknown).

    Raises:
        SflsimError: no threshold is left.
    """
    lo = default_tau_min(run_dir) if tau_min is None else tau_min
    if lo is None:
        return table
    kept = table[table["threshold"] >= lo - 1e-9]
    if table.empty:
        raise SflsimError(f"{Path(run_dir) / 'early_exit.csv'} has no rows (its header only): "
                          f"the file was cut or emptied; `sflsim check {run_dir}` says what "
                          f"else is wrong")
    if kept.empty:
        raise SflsimError(f"{Path(run_dir) / 'early_exit.csv'} has no threshold from {lo:g} up "
                          f"(thresholds {table['threshold'].min():g} to "
                          f"{table['threshold'].max():g})")
    return kept


def plot_early_exit(run_dir: str | Path, out: str | Path, formats: list[str] | None = None,
                    tau_min: float | None = None,
                    options: FigureOptions | None = None) -> list[Path]:
    """Accuracy (%) and early-exit ratio (%) vs threshold, one line per end layer.

    Args:
        run_dir: a results directory with ``early_exit.csv``.
        out: output path: a prefix, or a file name whose extension is the one format.
        formats: figure formats to write (see :func:`~sflsim.plots.style.output_paths`).
        tau_min: where the threshold axis starts. Default: ``-ln K`` for the ``K``
            classes of the run's dataset (every sample exits below it), or the
            smallest threshold in ``early_exit.csv`` if that is larger or ``K`` unknown.
        options: legend labels (``Layer-3``), axis labels (``ylabel``: the accuracy
            panel's), title and width (:class:`~sflsim.plots.options.FigureOptions`).

    Returns:
        The written files.

    Raises:
        SflsimError: see :func:`read_early_exit`; no threshold from ``tau_min`` up; a
            ``--label`` names no end layer; a bad output path or format.
    """
    paths = output_paths(out, formats)
    with paper_style():
        return save_figure(early_exit_figure(run_dir, tau_min, options), paths)


def early_exit_figure(run_dir: str | Path, tau_min: float | None = None,
                      options: FigureOptions | None = None) -> Figure:
    """The figure of :func:`plot_early_exit`, not saved (arguments and errors as there)."""
    options = options or FigureOptions()
    table = read_early_exit(run_dir).sort_values(["end_layer", "threshold"])
    lo = default_tau_min(run_dir) if tau_min is None else tau_min
    cut = lo is not None and float(table["threshold"].min()) < lo  # the axis starts at lo
    table = informative_thresholds(table, run_dir, tau_min)
    layers = list(dict.fromkeys(table["end_layer"]))
    markevery = max(1, table["threshold"].nunique() // 8)
    with paper_style():
        fig = new_figure(3.0, options.width)
        top, bottom = fig.subplots(2, 1, sharex=True)
        for i, layer in enumerate(layers):
            rows = table[table["end_layer"] == layer]
            style = {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)],
                     "ms": 3, "markevery": markevery,
                     "label": options.label(_layer_label(layer), str(layer))}
            top.plot(rows["threshold"], 100 * rows["accuracy"], **style)
            bottom.plot(rows["threshold"], 100 * rows["exit_ratio"], **style)
        top.set_ylabel("Accuracy (%)")
        bottom.set_ylabel("Early-exit ratio (%)")
        bottom.set_ylim(-4, 104)
        bottom.yaxis.set_major_locator(MultipleLocator(25))
        bottom.set_xlabel(r"Exit threshold $\tau$ on confidence $C = -H$ (nats)")
        first, last = float(table["threshold"].min()), float(table["threshold"].max())
        if cut and lo is not None:
            first = lo
        if last > first:  # the thresholds, and a margin that keeps the end markers whole
            pad = 0.02 * (last - first)
            bottom.set_xlim(first - pad, last + pad)
        keep_min_span(bottom, "x")
        keep_min_span(top, "y")
        fig.legend(*top.get_legend_handles_labels(), loc="outside upper center",
                   ncols=min(4, len(layers)))
        return finish_figure(fig, options, x_ax=bottom, y_ax=top, title_ax=top)


def _layer_label(layer: object) -> str:
    """``3`` -> ``Layer-3`` (the paper's naming of end layers)."""
    try:
        return f"Layer-{int(layer)}"  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return str(layer)
