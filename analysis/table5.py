"""Print a Table 5-style comparison (FedSGA, CIKM 2026) from result directories.

One row per run: final test accuracy (%), mean client FLOPs per client and round
(GFLOPs), mean activated client-side parameters (millions), simulated training
time (s), and total bytes moved (MB). FedSGA's Table 5 reports the first four
for MultiSFL and FedSGA.

Usage::

    sflsim run scenarios/fedsga_small.yaml -o runs/small/fedsga
    sflsim run scenarios/fedsga_small.yaml --set 'algorithm={name: multisfl}' -o runs/small/multisfl
    python analysis/table5.py runs/small/fedsga runs/small/multisfl [-o table5.csv]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result, training_rounds


def table5(run_dirs: list[Path]) -> pd.DataFrame:
    """One row per run (index: the run directory's name), columns with units in names."""
    rows = []
    for run_dir in run_dirs:
        summary, rounds = read_result(run_dir)
        rounds = training_rounds(rounds)  # without round 0, the untrained model
        rows.append({
            "run": Path(run_dir).name,
            "algorithm": summary["algorithm"],
            "accuracy_pct": 100 * (summary["final_server_accuracy"] or float("nan")),
            "client_gflops_per_round": _column_mean(rounds, "client_flops_mean") / 1e9,
            "activated_client_params_m": _column_mean(rounds, "activated_params_mean") / 1e6,
            "sim_time_s": summary["sim_time_s"],
            "bytes_mb": (summary["bytes_up"] + summary["bytes_down"]) / 1e6,
        })
    return pd.DataFrame(rows).set_index("run")


def _column_mean(rounds: pd.DataFrame, column: str) -> float:
    """Mean of a rounds.csv column; NaN for results written before the column existed."""
    return rounds[column].mean() if column in rounds else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="result directories of sflsim run")
    parser.add_argument("-o", "--output", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    try:
        table = table5(args.runs)
    except SflsimError as exc:
        sys.exit(f"error: {exc}")
    print(table.round(3).to_string())
    if args.output:
        table.to_csv(args.output)


if __name__ == "__main__":
    main()
