"""Print a Table IV-style table (Hetero-SplitEE, arXiv 2512.09313) from result directories.

Rows: method x location (server output / client early exit); columns: end
layers; cells: final test accuracy in percent, read from each run's
``rounds.csv`` (last evaluated round) and ``summary.json``.

Only runs of the methods Table IV compares are taken (:data:`METHOD_NAMES`: the
Hetero-SplitEE strategies and their baselines), each once; any other run (FedSGA,
MultiSFL, ...), a run with no evaluated round (timing only) or without per-end-layer
accuracies is refused with one line naming the run folder and what it lacks.

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
import yaml

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
        SystemExit: ``run_dir`` is not an sflsim result directory, is a run of a method
            Table IV does not compare, or has no evaluated round or no per-end-layer
            accuracy; one line naming the folder and what is missing.
    """
    try:
        summary, rounds = read_result(run_dir)
    except SflsimError as exc:
        sys.exit(f"error: {exc}")
    algorithm = summary.get("algorithm")
    if algorithm not in METHOD_NAMES:
        sys.exit(f"error: {run_dir} is a{'n' if str(algorithm)[:1] in 'aeiou' else ''} "
                 f"{algorithm} run; Table IV tabulates Hetero-SplitEE strategies and their "
                 f"baselines: {', '.join(METHOD_NAMES)}")
    if "server_accuracy" not in rounds:
        sys.exit(f"error: {run_dir}/rounds.csv has no server_accuracy column; Table IV "
                 f"needs the evaluated accuracies of a trained run")
    rounds = training_rounds(rounds).dropna(subset=["server_accuracy"])
    if rounds.empty:
        sys.exit(f"error: {run_dir} has no accuracy to tabulate: {no_accuracy_reason(run_dir)}")
    last = rounds.iloc[-1]
    rows = []
    for column, value in last.items():
        match = re.fullmatch(r"(server|client)_accuracy_l(\d+)", str(column))
        if match and not pd.isna(value):
            rows.append({"method": METHOD_NAMES[algorithm],
                         "location": match.group(1).capitalize(),
                         "end_layer": f"Layer-{match.group(2)}", "accuracy_pct": 100 * value})
    if not rows:
        sys.exit(f"error: {run_dir} has no per-end-layer accuracy (server_accuracy_l<k>, "
                 f"client_accuracy_l<k> in rounds.csv) at its last evaluated round "
                 f"{int(last['round'])}; Table IV's columns are end layers")
    return rows


def no_accuracy_reason(run_dir: Path) -> str:
    """Why a run has no evaluated accuracy: a timing-only run (its ``scenario.yaml`` says
    ``training.timing_only: true``) evaluates nothing; any other has not reached an
    evaluation yet."""
    try:
        scenario = yaml.safe_load((Path(run_dir) / "scenario.yaml").read_text())
        timing_only = bool(scenario["training"].get("timing_only"))
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        timing_only = False
    return ("it is a timing-only run (training.timing_only: true, --no-train), which "
            "evaluates nothing" if timing_only else "no round was evaluated yet")


def table_iv(run_dirs: list[Path]) -> pd.DataFrame:
    """Accuracy (%) with rows (method, location) and one column per end layer.

    Raises:
        SystemExit: see :func:`read_run`; or two runs of the same method (a row holds
            one run, it would otherwise show their mean).
    """
    seen: dict[str, Path] = {}
    for run_dir in run_dirs:
        try:
            algorithm = read_result(run_dir)[0].get("algorithm")
        except SflsimError:
            continue  # read_run says why
        if algorithm in seen and algorithm in METHOD_NAMES:
            sys.exit(f"error: {seen[algorithm]} and {run_dir} are both {algorithm} runs; "
                     f"Table IV has one row per method, so give one run of each")
        seen[algorithm] = run_dir
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
