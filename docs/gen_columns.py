"""Generate the reference of result columns from :mod:`sflsim.metrics.columns`.

Run by the MkDocs hook ``docs/hooks.py`` at build time (the page ``reference/result-columns.md``
exists only in the built site), by ``tests/test_result_columns.py``, or by hand:
``python docs/gen_columns.py > result-columns.md``.
"""

from __future__ import annotations

PAGE = "reference/result-columns.md"

INTRO = [
    "# Result columns",
    "",
    "<!-- generated at build time by docs/gen_columns.py from sflsim.metrics.columns; "
    "do not edit -->",
    "",
    "Every column of every result file `sflsim run -o DIR` writes, in the order written, "
    "with its unit, generated from `sflsim.metrics.columns` when the site is built; the "
    "test suite compares that module with the files a run writes, so this page lists "
    "exactly what the files hold. What the files are, how they are written and how to "
    "read them: [Result files](results.md).",
    "",
    "Units: `s` seconds of simulated time (wall-clock where the meaning says so), `J` "
    "joules, `bytes`, `FLOPs` (floating-point operations, a count, not a rate), `nats` "
    "(losses and entropies, natural logarithm), `fraction 0-1` (accuracies and ratios: "
    "`0.7031` is 70.31 %), `count`, `factor` (a multiplier), `dimensionless` (another "
    "pure number); no unit: a label, an identifier, a flag or text. A column named "
    "with `<k>` stands for one column per end layer `k` of the run's clients, in "
    "ascending order of `k` (`server_accuracy_l3`, `client_accuracy_l3`, "
    "`server_accuracy_l4`, ...).",
    "",
]


def _cell(text: str) -> str:
    """Table-cell text: a pipe would end the cell, and ``<`` outside code spans is HTML."""
    parts = text.replace("|", "\\|").split("`")
    parts[::2] = [t.replace("<", "&lt;").replace(">", "&gt;") for t in parts[::2]]
    return "`".join(parts)


def columns_table(columns: dict, optional: tuple[str, ...] = ()) -> list[str]:
    """Markdown rows ``| column | unit | meaning |`` of ``columns`` (name -> Column)."""
    out = ["| column | unit | meaning |", "|---|---|---|"]
    for name, col in columns.items():
        some = " (some runs)" if name in optional else ""
        out.append(f"| `{name}`{some} | {_cell(col.unit)} | {_cell(col.meaning)} |")
    return out


def result_columns_markdown() -> str:
    """The page: one section and table per result file of
    :data:`sflsim.metrics.columns.TABLES`, and the clients-table columns each algorithm
    adds."""
    from sflsim.metrics import columns

    lines = list(INTRO)
    for table in columns.TABLES.values():
        lines += [f"## `{table.file}`", "", _cell(table.rows[0].upper() + table.rows[1:]) + ".",
                  "", *columns_table(table.columns, table.optional), ""]
        if table is columns.CLIENTS:
            for algorithm, extra in columns.ALGORITHM_CLIENT_COLUMNS.items():
                lines += [f"### Columns `{algorithm}` adds", "",
                          f"A run of `{algorithm}` writes these after the columns above "
                          f"(empty where the round has no value; see "
                          f"[Algorithms](algorithms.md)).", "",
                          *columns_table(extra), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(result_columns_markdown())
