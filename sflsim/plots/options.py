"""What the author of a figure controls, the same in every kind: legend labels, axis labels,
title and width (``sflsim plot KIND ... --label NAME=TEXT --xlabel --ylabel --title --width``).

:class:`FigureOptions` carries them into each ``*_figure`` function, which renames its
legend entries with :meth:`FigureOptions.label` as it draws them and ends with
:func:`finish_figure`: the axis labels and title are set, a ``--label`` that named
nothing is refused, and the figure is fitted to its promised width
(:func:`fit_width`): legends shrink their font, then wrap their longest entries, and
only when that is not enough does the figure grow, with a note saying so
(:func:`figure_notes`), which ``sflsim plot`` prints.
"""

from __future__ import annotations

import textwrap
import weakref
from dataclasses import dataclass, field

from matplotlib.figure import Figure

from sflsim.errors import SflsimError
from sflsim.plots.style import COLUMN_WIDTH_IN, STYLE

#: How far (in) a saved figure may exceed its promised width: rounding of the tight box.
WIDTH_TOL_IN = 0.03

#: The narrowest and widest figure (in) ``--width`` takes: below 1.5 in the axes of a
#: figure with its tick and axis labels collapse (matplotlib's constrained layout gives up).
MIN_WIDTH_IN = 1.5
MAX_WIDTH_IN = 40.0

#: The smallest legend font (pt) a legend shrinks to before its entries wrap.
MIN_LEGEND_PT = 5.5

#: The narrowest wrapped legend entry or title, in characters.
MIN_WRAP_CHARS = 12

_NOTES: weakref.WeakKeyDictionary[Figure, list[str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class FigureOptions:
    """The text and width of a figure, as its author wants them.

    Args:
        labels: legend entry -> the text to show instead. The key is what the figure
            names the entry without it (the legend text), or for a run its results
            folder's name, its scenario's name (``name`` in ``summary.json``) or its
            sweep point id (``p003``).
        xlabel: the x-axis label (the bottom panel's); None: the figure's own.
        ylabel: the y-axis label (the top panel's); None: the figure's own.
        title: a title above the (top) axes; None: the figure's own, if any.
        width_in: the figure's width in inches; None: one column, 3.4 in.
    """

    labels: dict[str, str] = field(default_factory=dict)
    xlabel: str | None = None
    ylabel: str | None = None
    title: str | None = None
    width_in: float | None = None
    _used: set[str] = field(default_factory=set, compare=False, repr=False)
    _seen: dict[str, None] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.width_in is not None and not MIN_WIDTH_IN <= self.width_in <= MAX_WIDTH_IN:
            raise SflsimError(f"--width {self.width_in:g}: a figure's width in inches; valid: "
                              f"{MIN_WIDTH_IN:g} to {MAX_WIDTH_IN:g} (one column: 3.4; two: "
                              f"7.0), the narrowest fitting an axis with its labels")

    @property
    def width(self) -> float:
        """The promised width (in)."""
        return COLUMN_WIDTH_IN if self.width_in is None else float(self.width_in)

    def label(self, shown: str, *aliases: str) -> str:
        """The legend text of an entry the figure would show as ``shown``: the author's
        text for ``shown`` or for one of ``aliases`` (a run's folder, scenario name,
        point id), else ``shown``."""
        self._seen.setdefault(shown)
        for name in (shown, *aliases):
            if name and name in self.labels:
                self._used.add(name)
                return self.labels[name]
        return shown

    def check_labels(self) -> None:
        """Refuse a ``--label`` whose name matched no entry of the figure.

        Raises:
            SflsimError: the message lists the entries' names.
        """
        unused = [name for name in self.labels if name not in self._used]
        if unused:
            names = ", ".join(self._seen) or "none"
            raise SflsimError(f"--label {unused[0]}=...: no legend entry of this figure is named "
                              f"{unused[0]!r} (entries: {names}; a run may also be named by its "
                              "folder, its scenario or its sweep point)")


def parse_labels(items: list[str] | None) -> dict[str, str]:
    """``["seq=Sequential", "avg=Averaging"]`` -> ``{"seq": "Sequential", ...}``.

    Raises:
        SflsimError: an item without ``=`` or with an empty name.
    """
    labels: dict[str, str] = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise SflsimError(f"--label {item!r}: write NAME=TEXT, NAME being what the legend "
                              "shows today (a run's name or folder, a sweep point)")
        labels[name.strip()] = text
    return labels


def finish_figure(fig: Figure, options: FigureOptions | None, *, x_ax=None, y_ax=None,
                  title_ax=None, max_height_in: float | None = None) -> Figure:
    """Apply ``options`` to a drawn figure: the x label on ``x_ax``, the y label on
    ``y_ax``, the title over ``title_ax`` (each the figure's first axes by default);
    refuse an unused ``--label``; fit the figure to its width (:func:`fit_width`, growing
    no taller than ``max_height_in``).

    Raises:
        SflsimError: see :meth:`FigureOptions.check_labels`.
    """
    options = options or FigureOptions()
    first = fig.axes[0]
    if options.xlabel is not None:
        (x_ax or first).set_xlabel(options.xlabel)
    if options.ylabel is not None:
        (y_ax or first).set_ylabel(options.ylabel)
    if options.title is not None:
        (title_ax or first).set_title(options.title, loc="left", fontsize=8)
    options.check_labels()
    fit_width(fig, options.width, max_height_in)
    return fig


def figure_notes(fig: Figure) -> list[str]:
    """What the figure's fitting had to say (the figure grew past its promised width)."""
    return list(_NOTES.get(fig, []))


def saved_width_in(fig: Figure) -> float:
    """The width (in) of ``fig`` saved with ``bbox_inches="tight"`` and the style's pad."""
    fig.draw_without_rendering()
    pad = float(STYLE["savefig.pad_inches"])
    return fig.get_tightbbox().width + 2 * pad


def fit_width(fig: Figure, width_in: float, max_height_in: float | None = None) -> None:
    """Keep ``fig``, saved with a tight bounding box, within ``width_in`` inches.

    Legends (and titles) wider than the figure's room first shrink their font down to
    :data:`MIN_LEGEND_PT`, then wrap their longest lines; an outside legend that grows
    taller gives the figure that height (up to ``max_height_in``). If the figure is still too wide (the width
    is too narrow for its axes' labels, or an unbreakable text), the figure grows to
    what it needs and :func:`figure_notes` says so.
    """
    fig.set_figwidth(width_in)
    if saved_width_in(fig) <= width_in + WIDTH_TOL_IN:
        return
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    outside_in = _outside_legend_height(fig)
    for size in (6.5, 6.0, MIN_LEGEND_PT):
        for legend in legends:
            for text in legend.get_texts():
                if text.get_fontsize() > size:
                    text.set_fontsize(size)
        if saved_width_in(fig) <= width_in + WIDTH_TOL_IN:
            break
    texts = [t for legend in legends for t in legend.get_texts()]
    texts += [ax.title for ax in fig.axes if ax.title.get_text()]
    texts += [ax._left_title for ax in fig.axes if ax._left_title.get_text()]
    originals = {id(t): t.get_text().replace("\n", " ") for t in texts}
    chars = max((len(line) for t in texts for line in t.get_text().split("\n")), default=0)
    while saved_width_in(fig) > width_in + WIDTH_TOL_IN and chars > MIN_WRAP_CHARS:
        chars = max(MIN_WRAP_CHARS, int(chars * 0.85))
        for text in texts:
            if len(originals[id(text)]) > chars:
                text.set_text(textwrap.fill(originals[id(text)], chars,
                                            break_on_hyphens=False))
        grown = _outside_legend_height(fig) - outside_in
        if grown > 0:  # wrapped entries of a legend below the axes: keep the axes' height
            height = fig.get_figheight() + grown
            fig.set_figheight(height if max_height_in is None else min(height, max_height_in))
            outside_in += grown
    need = saved_width_in(fig)
    if need <= width_in + WIDTH_TOL_IN:
        return
    for _ in range(3):  # the layout changes with the width: settle in a few steps
        fig.set_figwidth(fig.get_figwidth() + need - width_in)
        need = saved_width_in(fig)
        if abs(need - width_in) <= WIDTH_TOL_IN or need < width_in:
            break
    _NOTES.setdefault(fig, []).append(
        f"the figure does not fit in {width_in:g} in (its labels and legend need more room): "
        f"it is {need:.2f} in wide; give a wider --width, or shorter --label, --xlabel, "
        "--ylabel or --title texts")


def _outside_legend_height(fig: Figure) -> float:
    """The height (in) of the figure's legends placed outside its axes."""
    if not fig.legends:
        return 0.0
    fig.draw_without_rendering()
    return sum(legend.get_window_extent().height for legend in fig.legends) / fig.dpi
