"""A paper's claims as named checks on a :class:`~reproduction.numbers.ResultTable`, each
with the same noise rule.

**The noise rule.** Every check reduces a claim to one or more comparisons, each a
*margin* (how far the numbers are on the claim's side: positive when it holds, in the
numbers' unit, e.g. percentage points) and a *spread* (the noise the margin is judged
against, :func:`difference_spread`). A comparison whose ``|margin|`` is below its spread
is *within noise*.

*Paired, where the runs share seeds.* sflsim's runs of one configuration and of another
at the same seed share the partition and the initial weights, so two of sflsim's numbers
are compared seed by seed: the spread is the half-width of the 95% paired t interval of
the difference, ``t(0.975, n - 1) * s_d / sqrt(n)``, with ``s_d`` the sample std of the
``n`` per-seed differences (Student's paired t test; ``t`` = 12.71, 4.30, 3.18, 2.78 at
n = 2, 3, 4, 5). A comparison outside its interval is the paired test rejecting "no
difference" at the 5% level. What n = 3 can show: a difference larger than about 2.5
times the spread of the per-seed differences; a smaller one stays within noise, which
says that 3 seeds cannot tell, not that the methods are equal (such claims are the ones
to rerun at 5 seeds). The t interval assumes the per-seed differences are roughly
normal, which 3 values cannot check.

*Unpaired otherwise.* A paper's number, or two numbers without shared seeds: the root
sum of squares of their :attr:`Stat.spread` (the sample std over seeds, or the paper's
printed ±, or for a single run the test-set sampling error
``100 * sqrt(p (1 - p) / n_test)`` of an accuracy). The verdict is FAIL when a
comparison fails by more than its spread, WITHIN NOISE when none does but one is within
noise (the detail gives the margin and the spread), PASS otherwise; N/A when a number is
missing. Numbers without a spread (one run of a non-accuracy metric, a paper number
printed without ±) are judged by the claim's own rule alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sflsim.metrics.stats import paired_half_width

from .numbers import MissingNumber, ResultTable, Stat, _num

#: the verdicts, in the order the report counts them
STATUSES = ("PASS", "FAIL", "WITHIN NOISE", "N/A")


@dataclass(frozen=True)
class Verdict:
    """A claim's verdict: ``status`` (one of :data:`STATUSES`) and its numbers as text;
    ``holds``: whether the claim's own rule holds, noise aside (None when N/A)."""

    status: str
    detail: str
    holds: bool | None = None


@dataclass(frozen=True)
class Comparison:
    """One comparison of a claim: ``margin`` (positive: on the claim's side) and ``spread``
    (the noise it is judged against, NaN: none known), both in the numbers' unit;
    ``holds``: the claim's own rule for it (strict or not, as the claim says)."""

    margin: float
    spread: float
    holds: bool

    @property
    def within_noise(self) -> bool:
        return not math.isnan(self.spread) and self.spread > 0 and abs(self.margin) < self.spread


def spread_of(*stats: Stat) -> float:
    """The spread of a difference of ``stats``: the root sum of squares of their
    :attr:`Stat.spread` (those that have one); NaN when none has."""
    known = [s.spread for s in stats if not math.isnan(s.spread)]
    return math.sqrt(sum(x ** 2 for x in known)) if known else float("nan")


#: the shared seeds a difference needs to be judged paired (one difference has no spread)
MIN_PAIRED = 2


def paired_differences(a: Stat, b: Stat) -> list[float]:
    """``a - b`` at each seed both were measured at (empty when they share none)."""
    bs = dict(b.by_seed)
    return [v - bs[seed] for seed, v in a.by_seed if seed in bs]


def difference_spread(a: Stat, b: Stat) -> float:
    """The noise of ``a.mean - b.mean`` (module docstring): the half-width of the 95% paired
    t interval where ``a`` and ``b`` share at least :data:`MIN_PAIRED` seeds (and only
    those seeds: the means must be over the same runs), else :func:`spread_of`."""
    diffs = paired_differences(a, b)
    if len(diffs) < MIN_PAIRED or len(diffs) != a.n or len(diffs) != b.n:
        return spread_of(a, b)
    return paired_half_width(diffs)


def judge(holds: bool, comparisons: Iterable[Comparison]) -> tuple[str, Comparison | None]:
    """The status of a claim whose rule gives ``holds`` over ``comparisons`` (the noise
    rule of this module), and the comparison within noise that decided it, if any."""
    comparisons = list(comparisons)
    if any(not c.holds and not c.within_noise for c in comparisons):
        return "FAIL", None
    noisy = [c for c in comparisons if c.within_noise]
    if noisy:
        return "WITHIN NOISE", min(noisy, key=lambda c: c.margin)  # the worst of them
    return ("PASS" if holds else "FAIL"), None


@dataclass(frozen=True)
class Claim:
    """One claim of a paper: a direction checked on a :class:`ResultTable`.

    ``check(table)`` returns ``(holds, numbers as text, comparisons)`` (a list of
    :class:`Comparison`; ``(holds, text)`` is read as no comparison) and may raise
    :class:`MissingNumber`; ``refs`` are the keys of ``paper_numbers.csv`` the claim
    rests on (the test checks that they exist). ``condition(table)``, when given, is the
    paper's own condition for the claim (``(met, the numbers as text)``, e.g. "a
    challenging task: overall accuracy at most 39%"): a table that does not meet it
    gets N/A with the reason, not a verdict.
    """

    name: str
    statement: str
    source: str
    check: Callable[[ResultTable], tuple]
    refs: tuple[tuple[str, str, str, str], ...] = ()
    condition: Callable[[ResultTable], tuple[bool, str]] | None = None

    def evaluate(self, table: ResultTable) -> Verdict:
        try:
            if self.condition is not None:
                met, why = self.condition(table)
                if not met:
                    return Verdict("N/A", f"the paper's condition does not hold here: {why}")
            holds, detail, *rest = self.check(table)
        except MissingNumber as exc:
            return Verdict("N/A", f"missing {exc.args[0]}")
        status, noisy = judge(holds, rest[0] if rest else ())
        if noisy is not None:
            detail += (f" (within noise: margin {noisy.margin:+.3g} inside the spread "
                       f"{noisy.spread:.3g})")
        return Verdict(status, detail, holds)


def _f(x: float) -> str:
    return _num(x)


def mean_of(table: ResultTable, row: str, columns: Iterable[str]) -> Stat:
    """Mean over ``columns`` of ``row`` (std and se: root mean square of the cells'; by
    seed: the mean over the columns at each seed, where every cell has the same seeds)."""
    stats = [table.get(row, c) for c in columns]
    stds = [s.std for s in stats if not math.isnan(s.std)]
    std = math.sqrt(sum(s ** 2 for s in stds) / len(stds)) if stds else float("nan")
    ses = [s.se for s in stats if not math.isnan(s.se)]
    se = math.sqrt(sum(s ** 2 for s in ses) / len(ses)) if ses else float("nan")
    if len(stats) == 1:
        return stats[0]
    seeds = [dict(s.by_seed) for s in stats]
    shared = sorted(set.intersection(*(set(d) for d in seeds))) if all(seeds) else []
    by_seed = (tuple((k, sum(d[k] for d in seeds) / len(seeds)) for k in shared)
               if all(len(d) == len(shared) for d in seeds) else ())
    return Stat(sum(s.mean for s in stats) / len(stats), std, min(s.n for s in stats), se,
                by_seed)


def greater(name: str, statement: str, source: str, row: str, other: str, columns: list[str],
            refs: tuple = (), lower_is_better: bool = False, min_margin: float = 0.0,
            condition: Callable[[ResultTable], tuple[bool, str]] | None = None) -> Claim:
    """``row`` beats ``other`` on the mean over ``columns`` (by more than ``min_margin``);
    ``condition`` as :class:`Claim`'s."""

    def check(table: ResultTable) -> tuple[bool, str, list[Comparison]]:
        a, b = mean_of(table, row, columns), mean_of(table, other, columns)
        diff = a.mean - b.mean
        margin = (-diff if lower_is_better else diff) - min_margin
        holds = margin > 0
        over = "" if len(columns) == 1 else f" (mean over {', '.join(columns)})"
        return holds, (f"{row} {a.fmt()} vs {other} {b.fmt()}: {'+' if diff >= 0 else ''}"
                       f"{_num(diff)}{over}"), [Comparison(margin, difference_spread(a, b), holds)]

    return Claim(name, statement, source, check, refs, condition)


def upper_bound(name: str, statement: str, source: str, top: str, others: list[str],
                columns: list[str], refs: tuple = ()) -> Claim:
    """``top`` is at least every row of ``others`` in every one of ``columns``."""

    def check(table: ResultTable) -> tuple[bool, str, list[Comparison]]:
        parts, holds, comparisons = [], True, []
        for col in columns:
            t = table.get(top, col)
            best_row = max(others, key=lambda r: table.get(r, col).mean)
            best = table.get(best_row, col)
            holds &= t.mean >= best.mean
            comparisons.append(Comparison(t.mean - best.mean, difference_spread(t, best),
                                          t.mean >= best.mean))
            parts.append(f"{col}: {_f(t.mean)} vs {best_row} {_f(best.mean)}")
        return holds, "; ".join(parts), comparisons

    return Claim(name, statement, source, check, refs)


def close(name: str, statement: str, source: str, a: str, b: str, columns: list[str],
          tolerance: float, refs: tuple = (),
          condition: Callable[[ResultTable], tuple[bool, str]] | None = None) -> Claim:
    """``a`` and ``b`` differ by at most ``tolerance`` in every one of ``columns``;
    ``condition`` as :class:`Claim`'s."""

    def check(table: ResultTable) -> tuple[bool, str, list[Comparison]]:
        diffs = {c: table.get(a, c).mean - table.get(b, c).mean for c in columns}
        worst = max(abs(d) for d in diffs.values())
        shown = ", ".join(f"{c} {d:+.2f}" for c, d in diffs.items())
        comparisons = [Comparison(tolerance - abs(d), difference_spread(table.get(a, c), table.get(b, c)),
                                  abs(d) <= tolerance) for c, d in diffs.items()]
        return (worst <= tolerance,
                f"{a} − {b}: {shown}; largest |diff| {worst:.2f} (≤ {tolerance:g}?)", comparisons)

    return Claim(name, statement, source, check, refs, condition)


def lowest(name: str, statement: str, source: str, row: str, among: list[str], columns: list[str],
           refs: tuple = ()) -> Claim:
    """``row`` has the lowest mean over ``columns`` of the rows ``among`` (itself included)."""

    def check(table: ResultTable) -> tuple[bool, str, list[Comparison]]:
        stats = {r: mean_of(table, r, columns) for r in among}
        means = {r: s.mean for r, s in stats.items()}
        low = min(means, key=means.get)
        comparisons = [Comparison(means[r] - means[row], difference_spread(stats[r], stats[row]),
                                  low == row) for r in among if r != row]
        return (low == row, ", ".join(f"{r} {_f(v)}" for r, v in means.items()),
                [min(comparisons, key=lambda c: c.margin)] if comparisons else [])

    return Claim(name, statement, source, check, refs)


def monotone(name: str, statement: str, source: str, rows: list[str], prefix: str,
             increasing: bool, tolerance: float, overall: bool, refs: tuple = (),
             scale: float = 1.0, unit: str = "") -> Claim:
    """The series ``prefix@x`` of each of ``rows`` never moves against the direction by more
    than ``tolerance`` from its running extreme (and, with ``overall``, ends strictly beyond
    where it starts). Rows the table lacks are skipped; none at all is N/A."""

    def check(table: ResultTable) -> tuple[bool, str, list[Comparison]]:
        parts, holds, seen, comparisons = [], True, 0, []
        for row in rows:
            try:
                series = table.series(row, prefix)
            except MissingNumber:
                continue
            seen += 1
            sign = 1.0 if increasing else -1.0
            extreme, worst = -math.inf, 0.0
            top = dip = series[0][1]  # the running extreme and the point furthest against it
            for _, stat in series:
                v = sign * stat.mean
                if v > extreme:
                    extreme, current_top = v, stat
                if extreme - v > worst:
                    worst, top, dip = extreme - v, current_top, stat
            first, last = series[0][1].mean, series[-1][1].mean
            ok = worst <= tolerance + 1e-12 and (not overall or sign * (last - first) > 0)
            holds &= ok
            if worst > 0:  # a move against the trend, judged against its noise
                comparisons.append(Comparison(tolerance - worst, difference_spread(top, dip),
                                              worst <= tolerance + 1e-12))
            if overall:
                comparisons.append(Comparison(sign * (last - first),
                                              difference_spread(series[0][1], series[-1][1]),
                                              sign * (last - first) > 0))
            parts.append(f"{row}: {first * scale:.3g} -> {last * scale:.3g}{unit}, largest move "
                         f"against the trend {worst * scale:.3g}{unit}")
        if not seen:
            raise MissingNumber(f"{prefix}@... of {', '.join(rows)}")
        return holds, "; ".join(parts), comparisons

    return Claim(name, statement, source, check, refs)
