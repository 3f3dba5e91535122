"""Print a Table IV-style table (Hetero-SplitEE, arXiv 2512.09313) from result directories.

Rows: method x location (server output / client early exit); columns: end
layers; cells: final test accuracy in percent, read from each run's
``rounds.csv`` (last evaluated round) and ``summary.json``.

Usage::

    sflsim run scenarios/quickstart.yaml -o runs/sequential
    sflsim run scenarios/hetero_splitee_averaging.yaml -o runs/averaging
    sflsim run scenarios/quickstart.yaml --set algorithm.name=distributed -o runs/distributed
    python analysis/table_iv.py runs/sequential runs/averaging runs/distributed [-o table_iv.csv]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result, training_rounds

METHOD_NAMES = {
    "hetero_splitee_sequential": "Sequential (Alg. 1)",
    "hetero_splitee_averaging": "Averaging (Alg. 2)",
    "distributed": "Distributed (baseline)",
    "centralized": "Centralized (baseline)",
}


def read_run(run_dir: Path) -> list[dict]:
    """Rows ``{method, location, end_layer, accuracy_pct}`` of one run's last evaluation.

    Raises:
        SystemExit: ``run_dir`` is not an sflsim result directory, or has no evaluation.
    """
    try:
        summary, rounds = read_result(run_dir)
    except SflsimError as exc:
        sys.exit(f"error: {exc}")
    algorithm = summary["algorithm"]
    rounds = training_rounds(rounds).dropna(subset=["server_accuracy"])
    if rounds.empty:
        sys.exit(f"error: {run_dir} has no evaluated round yet")
    last = rounds.iloc[-1]
    rows = []
    for column, value in last.items():
        match = re.fullmatch(r"(server|client)_accuracy_l(\d+)", str(column))
        if match:
            rows.append({"method": METHOD_NAMES.get(algorithm, algorithm),
                         "location": match.group(1).capitalize(),
                         "end_layer": f"Layer-{match.group(2)}", "accuracy_pct": 100 * value})
    return rows


def table_iv(run_dirs: list[Path]) -> pd.DataFrame:
    """Accuracy (%) with rows (method, location) and one column per end layer."""
    rows = [row for d in run_dirs for row in read_run(d)]
    table = pd.DataFrame(rows).pivot_table(index=["method", "location"], columns="end_layer",
                                           values="accuracy_pct", sort=False)
    return table.reindex(columns=sorted(table.columns))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="result directories of sflsim run")
    parser.add_argument("-o", "--output", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    table = table_iv(args.runs)
    print(table.to_markdown(floatfmt=".2f") if _has_tabulate() else table.round(2).to_string())
    if args.output:
        table.round(4).to_csv(args.output)


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
