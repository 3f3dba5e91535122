"""The comparison of runs as a table for a paper: units in the headers, ``mean ± std``
cells over seeds, written as CSV, Markdown or LaTeX (``sflsim compare --format``).

Reads a :func:`~sflsim.metrics.compare.compare_runs` table (one row per run) or its
:func:`~sflsim.metrics.compare.aggregate_runs` (one row per configuration over its
seeds); makes no numbers of its own. Units are those of
:mod:`sflsim.metrics.columns` (``s``, ``J``), scaled where the comparison scales them:
``MB`` is 1e6 bytes, ``GFLOP`` 1e9 FLOPs, accuracies in %.

LaTeX comes from pandas' ``Styler.to_latex`` (booktabs rules: ``\\toprule``,
``\\midrule``, ``\\bottomrule``, so the document needs ``\\usepackage{booktabs}``),
which needs jinja2; Markdown is written here (a pipe table, numbers right-aligned), so
that it needs no ``tabulate``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from sflsim.errors import SflsimError
from sflsim.metrics.columns import COUNT, J, S

if TYPE_CHECKING:
    import pandas as pd

Format = Literal["csv", "markdown", "latex"]
FORMATS = ("csv", "markdown", "latex")

#: the unit of each number of the comparison (columns.py's, scaled as compare scales them)
COMPARE_UNITS = {"rounds": COUNT, "final_accuracy_pct": "%", "time_to_target_s": S,
                 "sim_time_s": S, "bytes_mb": "MB", "client_gflop": "GFLOP",
                 "server_gflop": "GFLOP", "client_energy_j": J}
#: what each number is called in a header (its unit follows in parentheses)
_NAMES = {"rounds": "rounds", "final_accuracy_pct": "accuracy",
          "time_to_target_s": "time to {target}", "sim_time_s": "sim. time",
          "bytes_mb": "up+down", "client_gflop": "client compute",
          "server_gflop": "server compute", "client_energy_j": "client energy"}


def header(column: str, target_pct: float) -> str:
    """A number's header with its unit: ``sim. time (s)``, ``time to 70% (s)``; a count
    has none (``rounds``)."""
    name = _NAMES[column].format(target=f"{target_pct:g}%")
    unit = COMPARE_UNITS[column]
    return name if unit == COUNT else f"{name} ({unit})"


def decimals(value: float, column: str) -> int:
    """Decimals a number is shown with: 2 for an accuracy in %, 0 for a count or from
    100 up, 2 from 1 up, else 3 significant digits."""
    if column == "final_accuracy_pct":
        return 2
    if column == "rounds" or abs(value) >= 100:
        return 0
    if abs(value) >= 1 or value == 0:
        return 2
    return max(0, 2 - math.floor(math.log10(abs(value))))


def cell(mean: float, std: float, n: int, column: str) -> str:
    """``mean ± std`` (std to the mean's decimals) over ``n`` > 1 runs, else ``mean``;
    ``-`` for no number."""
    if mean is None or math.isnan(mean):
        return "-"
    places = decimals(mean, column)
    text = f"{mean:,.{places}f}"
    if n > 1 and not math.isnan(std):
        text += f" ± {std:,.{places}f}"
    return text


def display_table(table: pd.DataFrame, target: float) -> pd.DataFrame:
    """The comparison as text cells with headers that carry units: from a
    :func:`~sflsim.metrics.compare.compare_runs` table one row per run (``run``,
    ``algorithm``, the numbers), from an
    :func:`~sflsim.metrics.compare.aggregate_runs` table one per configuration
    (``configuration``, ``algorithm``, ``seeds`` (n), the numbers as ``mean ± std``). A
    target never reached reads ``never`` (``n/a`` where a run has no accuracy:
    timing-only); reached by some seeds only, the mean of those with ``(k of n)``."""
    import pandas as pd

    aggregated = "n" in table.columns
    columns = list(COMPARE_UNITS)
    rows = []
    for _, row in table.iterrows():
        out = ({"configuration": row["config"], "algorithm": row["algorithm"],
                "seeds": str(row["n"])} if aggregated
               else {"run": row["run"], "algorithm": row["algorithm"]})
        if row["status"] not in ("completed", ""):
            out["configuration" if aggregated else "run"] += f" ({row['status']})"
        for column in columns:
            if aggregated:
                mean, std, n = row[f"{column}_mean"], row[f"{column}_std"], row[f"{column}_n"]
            else:
                mean, std = row[column], math.nan
                n = 0 if mean is None or math.isnan(mean) else 1  # a run's: it has the number
            text = cell(mean, std, int(n), column)
            if column == "time_to_target_s":
                accuracy = row["final_accuracy_pct_mean" if aggregated else "final_accuracy_pct"]
                if math.isnan(accuracy):
                    text = "n/a"  # no accuracy: timing-only
                elif n == 0:
                    text = "never"
                elif aggregated and n < row["n"]:
                    text += f" ({int(n)} of {row['n']})"
            out[header(column, 100 * target)] = text
        rows.append(out)
    first = ["configuration", "algorithm", "seeds"] if aggregated else ["run", "algorithm"]
    return pd.DataFrame(rows, columns=[*first, *(header(c, 100 * target) for c in columns)])


def markdown(frame: pd.DataFrame) -> str:
    """``frame`` (text cells) as a Markdown pipe table: the header, an alignment row
    (the first two columns left, the others right) and a row per row; ``|`` in a cell
    is escaped."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    align = [":---" if i < 2 else "---:" for i in range(len(frame.columns))]
    lines = [line(list(frame.columns)), "| " + " | ".join(align) + " |"]
    lines += [line(list(row)) for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def latex(frame: pd.DataFrame) -> str:
    """``frame`` (text cells) as a LaTeX ``tabular`` with booktabs rules, via pandas'
    ``Styler.to_latex``: cells and headers escaped for LaTeX (``%``, ``_``, ``&``), ``±``
    as ``$\\pm$``, the first two columns left-aligned and the numbers right-aligned.

    Raises:
        SflsimError: jinja2, which pandas needs for LaTeX, is not installed.
    """
    try:
        import jinja2  # noqa: F401
    except ImportError:
        raise SflsimError("--format latex needs jinja2 (pandas writes LaTeX with it): "
                          "pip install jinja2") from None
    styler = frame.style.hide(axis="index")
    styler = styler.format(lambda text: str(text).replace(" ± ", r" $\pm$ "), escape="latex")
    styler = styler.format_index(escape="latex", axis=1)
    return styler.to_latex(hrules=True, column_format="ll" + "r" * (len(frame.columns) - 2))


def render(table: pd.DataFrame, fmt: Format, target: float) -> str:
    """The comparison ``table`` in ``fmt``: ``csv`` the numbers as they are (one column
    per number and statistic, units in the names, as ``sflsim compare -o`` writes),
    ``markdown`` and ``latex`` :func:`display_table`.

    Raises:
        SflsimError: ``fmt`` is not one of :data:`FORMATS`; see :func:`latex`.
    """
    if fmt == "csv":
        return table.to_csv(index=False)
    if fmt == "markdown":
        return markdown(display_table(table, target))
    if fmt == "latex":
        return latex(display_table(table, target))
    raise SflsimError(f"--format {fmt}: not a table format; valid: {', '.join(FORMATS)}")
