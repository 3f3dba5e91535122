"""Each client's cut layer over rounds (FedSGA's adaptive splits), as a clients x rounds heatmap.

Reads the ``cut_layer`` column of the run's ``clients`` table (``clients.parquet``, or
``clients.csv``: the cut each client used in each round). Rows are clients (labelled
with their device group when there is room), columns rounds; colour is the cut layer,
a deeper cut is a darker cell. Small grids print the cut in each cell so the figure
reads in greyscale too.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure

from sflsim.errors import SflsimError
from sflsim.metrics.results import run_table_path
from sflsim.plots.options import FigureOptions, finish_figure
from sflsim.plots.result_files import client_groups, read_input
from sflsim.plots.style import (
    count_ticks,
    new_figure,
    output_paths,
    paper_style,
    save_figure,
)


def plot_splits(run_dir: str | Path, out: str | Path, formats: list[str] | None = None,
                options: FigureOptions | None = None) -> list[Path]:
    """Heatmap of the cut layer per client (rows) and round (columns).

    Args:
        run_dir: a results directory of ``sflsim run``.
        out: output path: a prefix, or a file name whose extension is the one format.
        formats: figure formats to write (see :func:`~sflsim.plots.style.output_paths`).
        options: labels (a device group's name, ``pi4_wifi``, in the row labels), axis
            labels, title and width (:class:`~sflsim.plots.options.FigureOptions`).

    Returns:
        The written files.

    Raises:
        SflsimError: not a results directory, or the ``clients`` table is missing, empty or
            has no ``cut_layer``; a ``--label`` names no device group; a bad output path
            or format.
    """
    paths = output_paths(out, formats)
    with paper_style():
        return save_figure(splits_figure(run_dir, options), paths)


def splits_figure(run_dir: str | Path, options: FigureOptions | None = None) -> Figure:
    """The figure of :func:`plot_splits`, not saved (arguments and errors as there)."""
    options = options or FigureOptions()
    clients = read_input(run_dir, "clients", ("round", "client_id", "cut_layer"),
                         optional=("group", "profile"))
    clients = clients.dropna(subset=["cut_layer"])
    if clients.empty:
        raise SflsimError(f"{run_table_path(run_dir, 'clients')} has no cut_layer values")
    grid = clients.pivot_table(index="client_id", columns="round", values="cut_layer", aggfunc="first")
    first, last = int(grid.columns.min()), int(grid.columns.max())
    grid = grid.reindex(columns=range(first, last + 1))  # a round without cuts stays a blank column
    cuts = grid.to_numpy(float)
    rounds, ids = list(grid.columns), list(grid.index)
    lo, hi = int(np.nanmin(cuts)), int(np.nanmax(cuts))
    levels = list(range(lo, hi + 1))
    colors = mpl.colormaps["viridis_r"](np.linspace(0.05, 0.95, max(len(levels), 2)))[: len(levels)]
    cmap = ListedColormap(colors).with_extremes(bad="white")
    norm = BoundaryNorm([v - 0.5 for v in levels] + [hi + 0.5], cmap.N)
    groups = {c: options.label(g) for c, g in client_groups(run_dir, clients).items()
              } if len(ids) <= 24 else {}

    n_clients, n_rounds = len(ids), len(rounds)
    height = min(8.0, 0.9 + max(0.09, min(0.16, 3.0 / n_clients)) * n_clients)
    with paper_style():
        fig = new_figure(height, options.width)
        ax = fig.add_subplot()
        image = ax.imshow(np.ma.masked_invalid(cuts), aspect="auto", cmap=cmap, norm=norm,
                          interpolation="nearest", extent=(rounds[0] - 0.5, rounds[-1] + 0.5,
                                                           n_clients - 0.5, -0.5))
        ax.grid(False)
        if n_rounds * n_clients <= 400 and n_rounds <= 25:
            for (r, c), value in np.ndenumerate(cuts):
                if not np.isnan(value):
                    dark = norm(value) >= cmap.N / 2
                    ax.text(rounds[c], r, f"{int(value)}", ha="center", va="center", fontsize=5.5,
                            color="white" if dark else "black")
        step = max(1, int(np.ceil(n_clients / 24)))
        ax.set_yticks(range(0, n_clients, step),
                      [f"C{ids[i]}" + (f" {groups[ids[i]]}" if ids[i] in groups else "")
                       for i in range(0, n_clients, step)], fontsize=6 if n_clients > 8 else 7)
        ax.tick_params(axis="y", length=0)
        count_ticks(ax.xaxis, n_rounds, nbins=8)  # every round up to 10, else integers only
        ax.set_xlabel("Round")
        ax.set_ylabel("Client")
        bar = fig.colorbar(image, ax=ax, ticks=levels, fraction=0.06, pad=0.02, aspect=25)
        bar.set_label("Cut layer")
        bar.ax.tick_params(labelsize=7, length=2)
        bar.outline.set_linewidth(0.5)
        return finish_figure(fig, options)
