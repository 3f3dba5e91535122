"""Paper figures drawn from result files only: no simulation is re-run.

One module and one function per figure; each takes result or sweep directories
and an output path, writes ``<prefix>.png`` / ``.pdf`` one column wide (or the one
format the path's extension names, :func:`output_paths`), and returns the paths:

- :func:`plot_tradeoff`: accuracy vs simulated time (or early-exit latency) across
  runs or sweep points, Pareto front marked;
- :func:`plot_tta`: time-to-accuracy curves, accuracy vs simulated time per run;
- :func:`plot_timeline`: Gantt chart of devices, links and the server in a round;
- :func:`plot_early_exit`: accuracy and exit ratio vs threshold (Hetero-SplitEE Fig. 2);
- :func:`plot_splits`: each client's cut layer over rounds (FedSGA);
- :func:`plot_sweep`: a metric of a sweep's points against one of its axes, one line
  per algorithm and combination of the other axes.

Each also has a ``*_figure`` function (:func:`tta_figure`, ...) that takes the same
inputs and returns the :class:`~matplotlib.figure.Figure` unsaved, to adjust or test.
Every function takes ``options`` (:class:`~sflsim.plots.options.FigureOptions`): legend
labels, axis labels, title and width, which the figure keeps to (legends shrink and wrap;
a figure that cannot fit grows, and :func:`figure_notes` says so).
Series that coincide stay visible: each has its own colour, dash pattern and hollow
marker shape (:func:`~sflsim.plots.style.series_style`).
Axes are readable whatever the data (:mod:`sflsim.plots.style`): no offset notation,
a minimum span around nearly equal values, integer ticks for rounds and jobs, markers
whole inside the axes; runs are labelled with their names in every figure.

Errors in the input (a folder that is not a result, a missing table) raise
:class:`~sflsim.errors.SflsimError` with one message.
"""

from sflsim.plots.early_exit import default_tau_min, early_exit_figure, plot_early_exit
from sflsim.plots.options import FigureOptions, figure_notes
from sflsim.plots.splits import plot_splits, splits_figure
from sflsim.plots.style import output_paths, parse_formats
from sflsim.plots.sweep import (
    left_out_text,
    plot_sweep,
    seed_means,
    seeds_text,
    sweep_figure,
    sweep_points,
)
from sflsim.plots.timeline import plot_timeline, timeline_figure
from sflsim.plots.tradeoff import (
    front_text,
    pareto_front,
    plot_tradeoff,
    tradeoff_figure,
    tradeoff_points,
)
from sflsim.plots.tta import plot_tta, time_to_target_text, tta_figure

#: Figure kinds of ``sflsim plot KIND``.
KINDS = ("tradeoff", "tta", "timeline", "early-exit", "splits", "sweep")

__all__ = [ "KINDS", "FigureOptions", "default_tau_min", "early_exit_figure", "figure_notes",
    "front_text", "left_out_text", "output_paths", "pareto_front", "parse_formats",
    "plot_early_exit", "plot_splits", "plot_sweep", "plot_timeline", "plot_tradeoff", "plot_tta",
    "seed_means", "seeds_text", "splits_figure", "sweep_figure",
    "sweep_points", "time_to_target_text", "timeline_figure", "tradeoff_figure",
    "tradeoff_points", "tta_figure",
]
