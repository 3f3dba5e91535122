"""Early-exit accuracy and exit ratio against the confidence threshold (Hetero-SplitEE Fig. 2).

Two stacked panels sharing the threshold axis, one line per end layer, from a
run's ``early_exit.csv`` (written when ``evaluation.early_exit.enabled: true``):
top, the accuracy of collaborative inference; bottom, the share of samples
that exit on the device (the paper's "adoption ratio of early-exit inference").
The threshold is ``tau`` on the confidence ``C = -H`` (entropy in nats).
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MultipleLocator

from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result
from sflsim.plots.inputs import read_run_table
from sflsim.plots.style import MARKERS, PALETTE, keep_min_span, new_figure, paper_style, save_figure

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
        note = summary.get("early_exit")
        why = f" (the run says: {note})" if isinstance(note, str) else ""
        raise SflsimError(f"{run_dir} has no early_exit.csv{why}; run with "
                          "evaluation.early_exit.enabled: true and an algorithm with exit heads")
    return read_run_table(run_dir, "early_exit.csv", COLUMNS)


def plot_early_exit(run_dir: str | Path, out_prefix: str | Path,
                    formats: list[str] = ("png", "pdf")) -> list[Path]:  # type: ignore[assignment]
    """Accuracy (%) and early-exit ratio (%) vs threshold, one line per end layer.

    Args:
        run_dir: a results directory with ``early_exit.csv``.
        out_prefix: output path without extension.
        formats: figure formats to write.

    Returns:
        The written files.

    Raises:
        SflsimError: see :func:`read_early_exit`.
    """
    with paper_style():
        return save_figure(early_exit_figure(run_dir), out_prefix, list(formats))


def early_exit_figure(run_dir: str | Path) -> Figure:
    """The figure of :func:`plot_early_exit`, not saved (arguments and errors as there)."""
    table = read_early_exit(run_dir).sort_values(["end_layer", "threshold"])
    layers = list(dict.fromkeys(table["end_layer"]))
    markevery = max(1, table["threshold"].nunique() // 8)
    with paper_style():
        fig = new_figure(3.0)
        top, bottom = fig.subplots(2, 1, sharex=True)
        for i, layer in enumerate(layers):
            rows = table[table["end_layer"] == layer]
            style = {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)],
                     "ms": 3, "markevery": markevery, "label": _layer_label(layer)}
            top.plot(rows["threshold"], 100 * rows["accuracy"], **style)
            bottom.plot(rows["threshold"], 100 * rows["exit_ratio"], **style)
        top.set_ylabel("Accuracy (%)")
        bottom.set_ylabel("Early-exit ratio (%)")
        bottom.set_ylim(-3, 103)
        bottom.yaxis.set_major_locator(MultipleLocator(25))
        bottom.set_xlabel(r"Exit threshold $\tau$ on confidence $C = -H$ (nats)")
        lo, hi = float(table["threshold"].min()), float(table["threshold"].max())
        if hi > lo:  # the thresholds from edge to edge; one threshold: matplotlib's margin
            bottom.set_xlim(lo, hi)
        keep_min_span(bottom, "x")
        keep_min_span(top, "y")
        fig.legend(*top.get_legend_handles_labels(), loc="outside upper center",
                   ncols=min(4, len(layers)))
        return fig


def _layer_label(layer: object) -> str:
    """``3`` -> ``Layer-3`` (the paper's naming of end layers)."""
    try:
        return f"Layer-{int(layer)}"  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return str(layer)
