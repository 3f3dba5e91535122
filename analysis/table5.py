"""Print a Table 5-style comparison (FedSGA, CIKM 2026) from result directories.

One row per run: final test accuracy (%), mean client FLOPs per client and round
(GFLOPs), mean activated client-side parameters (millions), simulated training
time (s), and total bytes moved (MB). FedSGA's Table 5 reports the first four
for MultiSFL and FedSGA.

A run that lacks what the table shows is refused with one line naming its folder and
what is missing: no final accuracy (a timing-only run, or one not evaluated yet), or no
client-side FLOPs and parameters in its ``rounds.csv`` (a run of an older sflsim,
or one in which no client trained).

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
import yaml

from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result, training_rounds

#: rounds.csv columns the table averages -> what they are, for a refusal
CLIENT_COLUMNS = {"client_flops_mean": "client FLOPs",
                  "activated_params_mean": "activated client-side parameters"}


def table5(run_dirs: list[Path]) -> pd.DataFrame:
    """One row per run (index: the run directory's name), columns with units in names.

    Raises:
        SflsimError: a folder is not a results directory, or a run lacks what the table
            shows (:func:`check_run`).
    """
    rows = []
    for run_dir in run_dirs:
        summary, rounds = read_result(run_dir)
        rounds = training_rounds(rounds)  # without round 0, the untrained model
        check_run(Path(run_dir), summary, rounds)
        rows.append({
            "run": Path(run_dir).name,
            "algorithm": summary["algorithm"],
            "accuracy_pct": 100 * summary["final_server_accuracy"],
            "client_gflops_per_round": rounds["client_flops_mean"].mean() / 1e9,
            "activated_client_params_m": rounds["activated_params_mean"].mean() / 1e6,
            "sim_time_s": summary["sim_time_s"],
            "bytes_mb": (summary["bytes_up"] + summary["bytes_down"]) / 1e6,
        })
    return pd.DataFrame(rows).set_index("run")


def check_run(run_dir: Path, summary: dict, rounds: pd.DataFrame) -> None:
    """Refuse a run that lacks what the table shows: a final accuracy, and client FLOPs
    and activated client-side parameters in some training round.

    Raises:
        SflsimError: one line naming ``run_dir`` and what is missing.
    """
    if summary.get("final_server_accuracy") is None:
        raise SflsimError(f"{run_dir} has no final accuracy to tabulate: "
                          f"{_no_accuracy_reason(run_dir)}")
    for column, what in CLIENT_COLUMNS.items():
        if column not in rounds:
            raise SflsimError(f"{run_dir}/rounds.csv has no {column} column ({what}): it was "
                              f"written by an older sflsim; run it again")
        if rounds[column].isna().all() or not (rounds[column] > 0).any():
            raise SflsimError(f"{run_dir} has no {what} in rounds.csv ({column}): no client "
                              f"trained in its {summary.get('algorithm')} run, and Table 5 "
                              f"compares client-side costs")


def _no_accuracy_reason(run_dir: Path) -> str:
    """Why a run has no final accuracy: a timing-only run (``scenario.yaml`` says
    ``training.timing_only: true``) evaluates nothing; any other was not evaluated yet."""
    try:
        scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
        timing_only = bool(scenario["training"].get("timing_only"))
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        timing_only = False
    return ("it is a timing-only run (training.timing_only: true, --no-train), which "
            "evaluates nothing" if timing_only else "no round was evaluated")


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
