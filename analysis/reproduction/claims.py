"""A paper's claims as named checks on a :class:`~reproduction.numbers.ResultTable`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .numbers import MissingNumber, ResultTable, Stat, _num


@dataclass(frozen=True)
class Verdict:
    status: str  # PASS | FAIL | N/A
    detail: str


@dataclass(frozen=True)
class Claim:
    """One claim of a paper: a direction checked on a :class:`ResultTable`.

    ``check(table)`` returns ``(holds, numbers as text)`` and may raise
    :class:`MissingNumber`; ``refs`` are the keys of ``paper_numbers.csv`` the claim
    rests on (the test checks that they exist).
    """

    name: str
    statement: str
    source: str
    check: Callable[[ResultTable], tuple[bool, str]]
    refs: tuple[tuple[str, str, str, str], ...] = ()

    def evaluate(self, table: ResultTable) -> Verdict:
        try:
            holds, detail = self.check(table)
        except MissingNumber as exc:
            return Verdict("N/A", f"missing {exc.args[0]}")
        return Verdict("PASS" if holds else "FAIL", detail)


def _f(x: float) -> str:
    return _num(x)


def _noise(a: Stat, b: Stat) -> str:
    """`` (within 1 std)`` when the difference of two means is inside their spread."""
    spread = math.sqrt(sum(s.std ** 2 for s in (a, b) if not math.isnan(s.std)))
    if spread > 0 and abs(a.mean - b.mean) < spread:
        return " (within 1 std)"
    return ""


def mean_of(table: ResultTable, row: str, columns: Iterable[str]) -> Stat:
    """Mean over ``columns`` of ``row`` (std: root mean square of the cells' stds)."""
    stats = [table.get(row, c) for c in columns]
    stds = [s.std for s in stats if not math.isnan(s.std)]
    std = math.sqrt(sum(s ** 2 for s in stds) / len(stds)) if stds else float("nan")
    return Stat(sum(s.mean for s in stats) / len(stats), std, min(s.n for s in stats))


def greater(name: str, statement: str, source: str, row: str, other: str, columns: list[str],
            refs: tuple = (), lower_is_better: bool = False, min_margin: float = 0.0) -> Claim:
    """``row`` beats ``other`` on the mean over ``columns`` (by more than ``min_margin``)."""

    def check(table: ResultTable) -> tuple[bool, str]:
        a, b = mean_of(table, row, columns), mean_of(table, other, columns)
        diff = a.mean - b.mean
        holds = (-diff > min_margin) if lower_is_better else (diff > min_margin)
        over = "" if len(columns) == 1 else f" (mean over {', '.join(columns)})"
        return holds, (f"{row} {a.fmt()} vs {other} {b.fmt()}: {'+' if diff >= 0 else ''}"
                       f"{_num(diff)}{over}"
                       f"{_noise(a, b)}")

    return Claim(name, statement, source, check, refs)


def upper_bound(name: str, statement: str, source: str, top: str, others: list[str],
                columns: list[str], refs: tuple = ()) -> Claim:
    """``top`` is at least every row of ``others`` in every one of ``columns``."""

    def check(table: ResultTable) -> tuple[bool, str]:
        parts, holds = [], True
        for col in columns:
            t = table.get(top, col)
            best_row = max(others, key=lambda r: table.get(r, col).mean)
            best = table.get(best_row, col)
            holds &= t.mean >= best.mean
            parts.append(f"{col}: {_f(t.mean)} vs {best_row} {_f(best.mean)}")
        return holds, "; ".join(parts)

    return Claim(name, statement, source, check, refs)


def close(name: str, statement: str, source: str, a: str, b: str, columns: list[str],
          tolerance: float, refs: tuple = ()) -> Claim:
    """``a`` and ``b`` differ by at most ``tolerance`` in every one of ``columns``."""

    def check(table: ResultTable) -> tuple[bool, str]:
        diffs = {c: table.get(a, c).mean - table.get(b, c).mean for c in columns}
        worst = max(abs(d) for d in diffs.values())
        shown = ", ".join(f"{c} {d:+.2f}" for c, d in diffs.items())
        return worst <= tolerance, f"{a} − {b}: {shown}; largest |diff| {worst:.2f} (≤ {tolerance:g}?)"

    return Claim(name, statement, source, check, refs)


def lowest(name: str, statement: str, source: str, row: str, among: list[str], columns: list[str],
           refs: tuple = ()) -> Claim:
    """``row`` has the lowest mean over ``columns`` of the rows ``among`` (itself included)."""

    def check(table: ResultTable) -> tuple[bool, str]:
        means = {r: mean_of(table, r, columns).mean for r in among}
        low = min(means, key=means.get)
        return low == row, ", ".join(f"{r} {_f(v)}" for r, v in means.items())

    return Claim(name, statement, source, check, refs)


def monotone(name: str, statement: str, source: str, rows: list[str], prefix: str,
             increasing: bool, tolerance: float, overall: bool, refs: tuple = (),
             scale: float = 1.0, unit: str = "") -> Claim:
    """The series ``prefix@x`` of each of ``rows`` never moves against the direction by more
    than ``tolerance`` from its running extreme (and, with ``overall``, ends strictly beyond
    where it starts). Rows the table lacks are skipped; none at all is N/A."""

    def check(table: ResultTable) -> tuple[bool, str]:
        parts, holds, seen = [], True, 0
        for row in rows:
            try:
                series = table.series(row, prefix)
            except MissingNumber:
                continue
            seen += 1
            sign = 1.0 if increasing else -1.0
            extreme, worst = -math.inf, 0.0
            for _, stat in series:
                v = sign * stat.mean
                extreme = max(extreme, v)
                worst = max(worst, extreme - v)
            first, last = series[0][1].mean, series[-1][1].mean
            ok = worst <= tolerance + 1e-12 and (not overall or sign * (last - first) > 0)
            holds &= ok
            parts.append(f"{row}: {first * scale:.3g} -> {last * scale:.3g}{unit}, largest move "
                         f"against the trend {worst * scale:.3g}{unit}")
        if not seen:
            raise MissingNumber(f"{prefix}@... of {', '.join(rows)}")
        return holds, "; ".join(parts)

    return Claim(name, statement, source, check, refs)
