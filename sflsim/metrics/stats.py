"""The statistics of repeated runs: a number over seeds as mean ± std with a 95% t
interval, and the noise of a difference of two numbers measured at the same seeds.

One implementation, shared by ``sflsim compare`` (:func:`aggregate`,
:func:`aggregate_seeds`), the sweep plots and the reproduction harness
(``analysis/reproduction``: its ``Stat.of`` and its claims' paired rule), so that a
number reads the same wherever it is printed.

The rule: ``n`` runs of one configuration (one per seed) give the mean, the sample std
``s`` (divisor ``n - 1``; NaN for a single run) and the 95% t interval of the mean,
``mean ± t(0.975, n - 1) * s / sqrt(n)`` (Student's t; NaN for a single run). Two
configurations run at the same seeds share the partition and the initial weights, so
their difference is judged paired: the same interval over the per-seed differences
(:func:`paired_half_width`). The t interval assumes roughly normal values, which a few
seeds cannot check. The sums are written out in plain Python (not numpy's pairwise
sums), so the numbers do not move by a rounding when the harness and the CLI meet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

#: the confidence of every interval sflsim prints
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Sample:
    """A number over ``n`` runs: ``mean``, sample ``std`` (NaN below 2 runs) and the
    ``half_width`` of its 95% t interval (NaN below 2 runs), in the values' unit."""

    mean: float
    std: float
    n: int
    half_width: float

    @property
    def low(self) -> float:
        """The lower end of the 95% interval of the mean."""
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        """The upper end of the 95% interval of the mean."""
        return self.mean + self.half_width


def present(values: Iterable[float | None]) -> list[float]:
    """``values`` as floats, with None and NaN left out (a seed that gave no number)."""
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (divisor ``n - 1``) of ``values`` (all present); std NaN for one
    value, both NaN for none."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    std = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
           if len(values) > 1 else math.nan)
    return mean, std


def t_half_width(std: float, n: int, confidence: float = CONFIDENCE) -> float:
    """Half-width of the t interval of a mean of ``n`` values with sample std ``std``:
    ``t((1 + confidence) / 2, n - 1) * std / sqrt(n)``; NaN below 2 values.

    Raises:
        ValueError: ``confidence`` is not in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence}")
    if n < 2 or math.isnan(std):
        return math.nan
    from scipy.stats import t

    return float(t.ppf((1.0 + confidence) / 2.0, n - 1)) * std / math.sqrt(n)


def describe(values: Iterable[float | None]) -> Sample:
    """Mean, sample std, count and 95% t half-width of ``values`` (None and NaN left out)."""
    kept = present(values)
    mean, std = mean_std(kept)
    return Sample(mean, std, len(kept), t_half_width(std, len(kept)))


def paired_half_width(diffs: Sequence[float]) -> float:
    """Half-width of the 95% t interval of the mean of ``diffs``, the per-seed differences
    of two configurations (at least 2): ``t(0.975, n - 1) * s_d / sqrt(n)`` (Student's
    paired t test: a mean difference outside it rejects "no difference" at the 5% level).

    Raises:
        ValueError: fewer than 2 differences (one has no spread).
    """
    if len(diffs) < 2:
        raise ValueError(f"a paired interval needs at least 2 per-seed differences; got "
                         f"{len(diffs)}")
    _, sd = mean_std(list(diffs))
    return t_half_width(sd, len(diffs))


def sampling_error(accuracy_pct: float, n_test: int | None) -> float:
    """The standard error of an accuracy (in %) measured on ``n_test`` test samples,
    ``100 * sqrt(p (1 - p) / n_test)`` in percentage points (binomial sampling of the test
    set); NaN without ``n_test``."""
    if not n_test or math.isnan(accuracy_pct):
        return float("nan")
    p = min(1.0, max(0.0, accuracy_pct / 100.0))
    return 100.0 * math.sqrt(p * (1.0 - p) / n_test)


#: the significant digits of :func:`aggregate`'s statistics: enough for any result column
#: (times to 1e8 s keep 4 decimals), few enough to drop the float noise of a sum
TABLE_SIGNIFICANT_DIGITS = 12


def _tidy(value: float) -> float:
    """``value`` to :data:`TABLE_SIGNIFICANT_DIGITS` significant digits (NaN as it is)."""
    return float(f"{value:.{TABLE_SIGNIFICANT_DIGITS}g}") if math.isfinite(value) else value


#: the suffixes :func:`aggregate` gives each value column
STAT_SUFFIXES = ("mean", "std", "n", "ci95_low", "ci95_high")


def aggregate(table: pd.DataFrame, by: Sequence[str], columns: Sequence[str],
              keep: Sequence[str] = ()) -> pd.DataFrame:
    """One row per group of ``table``'s rows with equal ``by`` values (in order of first
    appearance): ``by``, ``keep`` (the group's first value: columns that do not vary
    within a group, e.g. axis values), ``n`` (rows in the group), then for each of
    ``columns`` ``<column>_mean``, ``_std``, ``_n`` (rows with a number), ``_ci95_low`` and
    ``_ci95_high`` (:func:`describe`), in the column's unit, each to
    :data:`TABLE_SIGNIFICANT_DIGITS` significant digits (a mean of 10.83333333 and
    10.83333334 reads 10.833333335, not 10.833333334999999). The interval is Student's t
    as it is, not clipped to the column's range: with few seeds an accuracy's can reach
    below 0.

    Raises:
        KeyError: naming a column of ``by``, ``keep`` or ``columns`` that ``table`` lacks.
    """
    import pandas as pd

    missing = [c for c in (*by, *keep, *columns) if c not in table.columns]
    if missing:
        raise KeyError(f"no column {', '.join(missing)} to aggregate; the table has "
                       f"{', '.join(map(str, table.columns))}")
    rows = []
    for _, group in table.groupby(list(by), sort=False, dropna=False):
        first = group.iloc[0]
        row = {c: first[c] for c in (*by, *keep)}
        row["n"] = len(group)
        for column in columns:
            sample = describe(pd.to_numeric(group[column], errors="coerce").tolist())
            row.update({f"{column}_mean": _tidy(sample.mean), f"{column}_std": _tidy(sample.std),
                        f"{column}_n": sample.n, f"{column}_ci95_low": _tidy(sample.low),
                        f"{column}_ci95_high": _tidy(sample.high)})
        rows.append(row)
    names = [*by, *keep, "n", *(f"{c}_{s}" for c in columns for s in STAT_SUFFIXES)]
    return pd.DataFrame(rows, columns=names)
