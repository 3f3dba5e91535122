"""Numbers with their spread, tables of them, and the papers' numbers
(``analysis/paper_numbers.csv``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sflsim.metrics.stats import mean_std, present, sampling_error

from .papers import PAPER_NUMBERS

__all__ = ["MissingNumber", "PaperNumbers", "ResultTable", "Stat", "sampling_error",
           "seeded_stat"]


@dataclass(frozen=True)
class Stat:
    """A number with its spread: mean, sample std over ``n`` runs (paper: as printed), and
    for an accuracy ``se``, the test-set sampling error of one run (same unit as ``mean``:
    percentage points for an accuracy in %)."""

    mean: float
    std: float = float("nan")
    n: int = 1
    se: float = float("nan")
    #: ``((seed, value), ...)``: the runs behind the mean, by seed (empty: not known, e.g.
    #: a paper's number); claims pair two numbers seed by seed through it
    #: (:func:`reproduction.claims.difference_spread`)
    by_seed: tuple[tuple[int, float], ...] = ()

    @staticmethod
    def of(values: Iterable[float], n_test: int | None = None,
           seeds: Iterable[int] | None = None) -> Stat:
        """Mean and sample std of ``values`` (NaN and None left out). With ``n_test`` the
        values are accuracies in % on ``n_test`` test samples each, and ``se`` is the
        sampling error of one: ``100 * sqrt(p (1 - p) / n_test)``, p = mean / 100. With
        ``seeds`` (one per value, in order) the values are kept by seed.

        Raises:
            ValueError: ``seeds`` and ``values`` differ in length, or a seed repeats.
        """
        values = list(values)
        if seeds is not None:
            seeds = [int(s) for s in seeds]
            if len(seeds) != len(values) or len(set(seeds)) != len(seeds):
                raise ValueError(f"seeds {seeds} must name each of the {len(values)} values once")
        keep = [k for k, v in enumerate(values) if present([v])]
        vals = [float(values[k]) for k in keep]
        if not vals:
            return Stat(float("nan"), float("nan"), 0)
        mean, std = mean_std(vals)  # sflsim.metrics.stats: the rule sflsim compare uses
        by_seed = tuple((seeds[k], float(values[k])) for k in keep) if seeds is not None else ()
        return Stat(mean, std, len(vals), sampling_error(mean, n_test), by_seed)

    @property
    def spread(self) -> float:
        """The noise this number is judged against: its std (over seeds, or the paper's
        printed ±) where it has one, else its test-set sampling error ``se``, else NaN."""
        return self.std if not math.isnan(self.std) else self.se

    @property
    def missing(self) -> bool:
        return math.isnan(self.mean)

    def fmt(self, digits: int = 2) -> str:
        """``mean ± std`` with ``digits`` decimals (3 significant digits for a mean below
        0.1); the std to the mean's precision (a float-rounding std of 1e-14 reads 0.00)."""
        if self.missing:
            return "n/a"
        text = _num(self.mean, digits)
        if not math.isnan(self.std):
            small = 0 < abs(self.mean) < 0.1
            text += f" ± {_num(self.std, digits) if small else f'{self.std:.{digits}f}'}"
        return text


def seeded_stat(pairs: list[tuple[int, float]], n_test: int | None = None) -> Stat:
    """:meth:`Stat.of` of ``[(seed, value), ...]``, kept by seed where each seed gives one
    value (a cell several values of one run fill is not paired)."""
    seeds = [seed for seed, _ in pairs]
    return Stat.of([v for _, v in pairs], n_test,
                   seeds if len(set(seeds)) == len(seeds) else None)


class MissingNumber(KeyError):
    """A claim needs a number that the result table does not have."""


class ResultTable:
    """Numbers by (row, column): sflsim's (mean ± std over seeds) or one view of a paper's."""

    def __init__(self, cells: dict[tuple[str, str], Stat] | None = None, name: str = ""):
        self.cells = dict(cells or {})
        self.name = name

    def __setitem__(self, key: tuple[str, str], value: Stat) -> None:
        self.cells[key] = value

    def get(self, row: str, column: str) -> Stat:
        stat = self.cells.get((row, column))
        if stat is None or stat.missing:
            raise MissingNumber(f"{row} / {column}")
        return stat

    def has(self, row: str, column: str) -> bool:
        stat = self.cells.get((row, column))
        return stat is not None and not stat.missing

    def rows(self) -> list[str]:
        return list(dict.fromkeys(r for r, _ in self.cells))

    def series(self, row: str, prefix: str) -> list[tuple[float, Stat]]:
        """``[(x, stat)]`` of the columns ``f"{prefix}@{x}"`` of ``row``, sorted by x."""
        out = []
        for (r, c), stat in self.cells.items():
            if r == row and c.startswith(prefix + "@") and not stat.missing:
                out.append((float(c.split("@", 1)[1]), stat))
        if not out:
            raise MissingNumber(f"{row} / {prefix}@...")
        return sorted(out)


class PaperNumbers:
    """``analysis/paper_numbers.csv``: one row per number a paper prints.

    Columns: ``paper`` (``fedsga`` | ``hetero_splitee``), ``table_or_figure`` (as the
    paper names it, or the section of a setting), ``row``, ``column``, ``value`` (a
    number, a setting's text, or empty when a figure prints none), ``std`` (FedSGA's
    ±), ``unit``, ``notes``.
    """

    COLUMNS = ("paper", "table_or_figure", "row", "column", "value", "std", "unit", "notes")

    def __init__(self, path: Path = PAPER_NUMBERS):
        """Raises:
            ConfigError: the file cannot be read as CSV, lacks a column, or holds a
                (paper, table_or_figure, row, column) twice (names both lines)."""
        from sflsim.errors import ConfigError

        self.path = path
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError) as exc:  # pandas' ParserError is a ValueError
            raise ConfigError(f"{path}: cannot read the paper numbers: {exc}") from None
        missing = [c for c in self.COLUMNS if c not in frame.columns]
        if missing:
            raise ConfigError(f"{path}: missing columns {', '.join(missing)}; the header is "
                              f"{','.join(self.COLUMNS)}")
        self.frame = frame
        self.index: dict[tuple[str, str, str, str], dict[str, str]] = {}
        lines: dict[tuple[str, str, str, str], int] = {}
        for line, record in enumerate(frame.to_dict("records"), start=2):  # 1: the header
            key = (record["paper"], record["table_or_figure"], record["row"], record["column"])
            if key in self.index:
                raise ConfigError(f"{path}: lines {lines[key]} and {line} are the same number "
                                  f"({', '.join(key)}); keep one")
            self.index[key], lines[key] = record, line

    def has(self, key: tuple[str, str, str, str]) -> bool:
        return key in self.index

    def record(self, key: tuple[str, str, str, str]) -> dict[str, str]:
        try:
            return self.index[key]
        except KeyError:
            raise KeyError(f"{self.path.name} has no number {key}") from None

    def stat(self, key: tuple[str, str, str, str]) -> Stat:
        """The number at ``key`` (NaN when the paper prints none, e.g. a bar chart)."""
        rec = self.record(key)
        value = _float(rec["value"])
        return Stat(value, _float(rec["std"]), 1)

    def setting(self, paper: str, name: str) -> str:
        """A setting's value as printed (``row == "setting"``), whatever section holds it."""
        for (p, _, row, col), rec in self.index.items():
            if p == paper and row == "setting" and col == name:
                return rec["value"]
        raise KeyError(f"{self.path.name} has no setting {name!r} of {paper}")

    def view(self, paper: str, table: str, cells: Iterable[tuple[str, str]],
             column_of: Callable[[str], str], name: str) -> ResultTable:
        """A :class:`ResultTable` with ``cells`` (row, our column) read from ``table`` at
        (row, ``column_of(our column)``); cells the file lacks are left out."""
        out = ResultTable(name=name)
        for row, col in cells:
            key = (paper, table, row, column_of(col))
            if key in self.index:
                out[(row, col)] = self.stat(key)
        return out


def _num(x: float, digits: int = 2) -> str:
    return f"{x:.3g}" if 0 < abs(x) < 0.1 else f"{x:.{digits}f}"


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")
