"""Paper-figure style and saving: one column wide (3.4 in), 8 pt text, PNG and PDF.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot, so no
display, no global figure state) and written with the Agg/PDF renderers.

Readable axes whatever the data: no axis uses offset notation (every tick label is
the value itself, never "+9.07" beside the axis; only values from 1e6 up or below 1e-5
share a power of ten, matplotlib's "1e6" at the axis end), an axis of measured values is at
least :data:`MIN_RELATIVE_SPAN` of its magnitude wide (:func:`keep_min_span`), so
nearly equal values (9.0697 and 9.0701 s) sit side by side under short tick labels,
and counts (rounds, jobs) tick at integers only (:func:`integer_ticks`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, MultipleLocator

from sflsim.errors import SflsimError
from sflsim.metrics.results import atomic_write
from sflsim.text import did_you_mean

#: One column of a two-column paper (IEEE/ACM), in inches.
COLUMN_WIDTH_IN = 3.4

#: Output formats a figure can be written in.
FORMATS = ("png", "pdf", "svg")

#: Okabe-Ito colours: distinguishable with colour-blindness and in greyscale print.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442",
           "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: Dash patterns of successive series (in points: on, off, ...). A series drawn over an
#: equal one leaves gaps through which the one below shows.
DASHES = ("solid", (0, (4.0, 1.6)), (0, (1.0, 1.4)), (0, (5.0, 1.5, 1.0, 1.5)),
          (0, (2.4, 1.4)), (0, (6.0, 1.5, 1.0, 1.5, 1.0, 1.5)))

STYLE = {
    "font.size": 8,
    "axes.labelsize": 8,
    "axes.titlesize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "legend.handlelength": 1.6,
    "axes.linewidth": 0.6,
    "axes.grid": True,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.35,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": mpl.cycler(color=list(PALETTE)),
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "axes.formatter.useoffset": False,  # tick labels say their value: no "+9.07" offset
    "pdf.fonttype": 42,  # embed TrueType: editable text, accepted by IEEE/ACM checkers
    "ps.fonttype": 42,
    "savefig.dpi": 300,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
}


#: The narrowest span of an axis of measured values, as a fraction of the magnitude of its
#: middle: two runs 0.0004 s apart at 9.07 s are drawn on an axis about 0.18 s wide.
MIN_RELATIVE_SPAN = 0.02


def keep_min_span(ax, axes: str = "xy", fraction: float = MIN_RELATIVE_SPAN) -> None:
    """Widen the limits of ``ax`` (its ``x`` and/or ``y`` axis, as autoscaled or set so
    far) about their middle ``m`` to a span of at least ``fraction * |m|``.

    Call it after the data are drawn. Equal values and single points are already
    widened by matplotlib (by 5% of their value, or to +-0.05 at 0); this widens
    nearly equal ones, whose ticks would otherwise need many digits.
    """
    for name in axes:
        lo, hi = getattr(ax, f"get_{name}lim")()
        need = fraction * abs(lo + hi) / 2
        if abs(hi - lo) < need:
            mid, half = (lo + hi) / 2, need / 2 if hi >= lo else -need / 2
            getattr(ax, f"set_{name}lim")(mid - half, mid + half)


def integer_ticks(axis, nbins: int | str = "auto") -> None:
    """Ticks at integers only on ``axis`` (an ``ax.xaxis`` or ``ax.yaxis`` of counts such
    as rounds), even when the view holds a single integer (one round: a tick at 1)."""
    axis.set_major_locator(MaxNLocator(nbins=nbins, integer=True, min_n_ticks=1))


def count_ticks(axis, most: float, all_up_to: int = 10, nbins: int | str = "auto") -> None:
    """Ticks of a count axis (jobs, rounds) whose largest value is ``most``: every integer
    in view when ``most <= all_up_to`` (0, 1, 2, 3 for 3, where :func:`integer_ticks` may
    skip to 0, 2), else integers only (:func:`integer_ticks`)."""
    if most <= all_up_to:
        axis.set_major_locator(MultipleLocator(1))
    else:
        integer_ticks(axis, nbins)


def series_style(i: int, markersize: float = 3.5) -> dict:
    """Line settings of the ``i``-th series of a figure (0-based): its colour, marker and
    dash pattern all differ from the series before it, and the markers are hollow and
    shrink from one series to the next (``markersize`` in points for the first, then
    82% and 64% of it, repeating), so series that coincide stay visible: the dashes of
    the later line leave gaps onto the earlier one, and a later marker sits inside the
    outline of an earlier one of another shape."""
    return {"color": PALETTE[i % len(PALETTE)],
            "marker": MARKERS[(i + i // len(PALETTE)) % len(MARKERS)],
            "linestyle": DASHES[i % len(DASHES)], "markerfacecolor": "none",
            "markeredgewidth": 0.8, "markersize": markersize * (1 - 0.18 * (i % 3))}


@contextlib.contextmanager
def paper_style() -> Iterator[None]:
    """Apply :data:`STYLE` while a figure is built and saved."""
    with mpl.rc_context(STYLE):
        yield


def new_figure(height_in: float, width_in: float = COLUMN_WIDTH_IN) -> Figure:
    """A column-wide figure with constrained layout (call inside :func:`paper_style`)."""
    return Figure(figsize=(width_in, height_in), layout="constrained")


def place_legend(fig: Figure, ax) -> None:
    """A few short entries inside the axes where they cover least; more or longer ones
    below the axes (the figure grows to keep the axes' height), so they never hide data."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    longest = max(map(len, labels))
    if len(labels) <= 4 and longest <= 24:
        ax.legend(handles, labels, loc="best")
    else:
        ncols = 1 if longest > 24 else 2
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols)
        rows = -(-len(labels) // ncols)
        fig.set_figheight(fig.get_figheight() + 0.05 + 0.13 * rows)


def parse_formats(formats: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"png,pdf"`` or ``["png", "pdf"]`` -> ``["png", "pdf"]``.

    Raises:
        SflsimError: an unknown format, or none at all.
    """
    items = formats.split(",") if isinstance(formats, str) else list(formats)
    out = [f.strip().lower().lstrip(".") for f in items if f.strip()]
    bad = [f for f in out if f not in FORMATS]
    if bad or not out:
        hint = did_you_mean(bad[0], FORMATS) if len(bad) == 1 else ""
        raise SflsimError(f"unknown figure format {', '.join(bad) or repr(formats)}{hint} "
                          f"(valid: {', '.join(FORMATS)}, comma-separated)")
    return list(dict.fromkeys(out))


#: The formats written when neither the output path's extension nor ``formats`` names one.
DEFAULT_FORMATS = ("png", "pdf")

#: Extensions of image formats that are not in :data:`FORMATS` (matplotlib's others and common
#: raster ones): an output path ending in one is refused rather than taken as a prefix.
OTHER_IMAGE_SUFFIXES = frozenset({"bmp", "eps", "gif", "jpeg", "jpg", "pgf", "ps", "raw", "rgba",
                                  "svgz", "tif", "tiff", "webp"})


def output_paths(out: str | Path, formats: list[str] | tuple[str, ...] | None = None
                 ) -> list[Path]:
    """The files a figure is written to: ``out`` with each format's extension.

    ``out`` is a prefix (``figs/tta`` -> ``figs/tta.png``, ``figs/tta.pdf``) or a file name
    whose extension names the one format to write (``figs/tta.svg``). An extension that is
    not an image format is part of the prefix (``figs/tta_0.7`` -> ``figs/tta_0.7.png``, ...).

    Args:
        out: output path, with or without an extension.
        formats: formats to write; None: the extension's format, else :data:`DEFAULT_FORMATS`.

    Raises:
        SflsimError: the extension is an image format other than png, pdf and svg, it
            names one format while ``formats`` asks for others, or the folder of ``out``
            cannot be made (a file is in the way).
    """
    out = Path(out)
    suffix = out.suffix.lower().lstrip(".")
    wanted = parse_formats(formats) if formats is not None else None
    if suffix in OTHER_IMAGE_SUFFIXES:
        raise SflsimError(f"cannot write a figure as .{suffix} ({out}); choose "
                          f"{', '.join('.' + f for f in FORMATS)}, or no extension for "
                          f"{' and '.join(DEFAULT_FORMATS)}")
    if suffix in FORMATS:
        if wanted is not None and wanted != [suffix]:
            raise SflsimError(f"the output {out} names the format {suffix} but the formats asked "
                              f"for are {', '.join(wanted)}; give the output without an extension "
                              "to write several formats")
    else:
        wanted = wanted or list(DEFAULT_FORMATS)
    from sflsim.metrics.results import check_output_folder

    check_output_folder(out.parent, option=f"-o {out}: the folder")
    return [out] if suffix in FORMATS else [out.parent / f"{out.name}.{fmt}" for fmt in wanted]


def save_figure(fig: Figure, paths: list[Path]) -> list[Path]:
    """Write ``fig`` to each of ``paths`` (from :func:`output_paths`; the extension is the
    format) atomically, creating missing parent folders. Returns ``paths``."""
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        fmt = path.suffix[1:].lower()
        atomic_write(path, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt))
    return paths


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """``rows`` under ``header`` as left-aligned columns two spaces apart, one line each."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()
                     for r in [header, *rows])
