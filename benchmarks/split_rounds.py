"""Timing-only split-learning rounds of several batches per client, timed in-process.

The shipped Averaging scenario's fleet and model (``scenarios/hetero_splitee_averaging.yaml``:
12 clients at end layers 3-5, 63 batches of 16 each a round) run timing-only
(``training.timing_only``) under the algorithm given, ``run_scenario`` timed in this
process (imports and the scenario's validation excluded; one torch thread), the best of
``--repeats`` runs. Prints the seconds and the events recorded. Run it from two checkouts
(``PYTHONPATH=...``) to compare a change.

    python benchmarks/split_rounds.py --algorithm splitfed_v2 --rounds 40
    python benchmarks/split_rounds.py --algorithm hetero_splitee_averaging --rounds 40
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import yaml

from sflsim.config import validate_scenario
from sflsim.runner import run_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "hetero_splitee_averaging.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithm", default="splitfed_v2")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = yaml.safe_load(SCENARIO.read_text())
    data["algorithm"] = {"name": args.algorithm}
    data["training"].update(rounds=args.rounds, timing_only=True)
    scenario = validate_scenario(data)
    best, events = float("inf"), 0
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = run_scenario(scenario)
        best, events = min(best, time.perf_counter() - start), len(result.events)
    print(f"{args.algorithm} {args.rounds} rounds: {best:.2f} s, {events} events")


if __name__ == "__main__":
    main()
