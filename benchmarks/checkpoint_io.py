"""Checkpoint write and read time: sflsim's raw-bytes storages against torch's own reduction.

After every round a run pickles its whole state (``sflsim.checkpoint``). torch reduces each
CPU storage to a small ``torch.save`` file of its own; sflsim writes the storage's bytes
(``sflsim.checkpoint._reduce_storage``). This takes the checkpoint of a finished run of a
scenario and writes and reads it under both reductions, alternating, in one process::

    python benchmarks/checkpoint_io.py                   # the test suite's tiny scenario
    python benchmarks/checkpoint_io.py scenarios/quickstart.yaml --set training.rounds=1

Prints, per reduction, the median over the repeats of the save and load times (ms) and the
file's size.
"""

from __future__ import annotations

import argparse
import copy
import copyreg
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from sflsim import checkpoint
from sflsim.config import load_scenario, validate_scenario
from sflsim.config.resolve import resolve_scenario
from sflsim.runner import run_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario", nargs="?", help="scenario file (default: the tests' tiny one)")
    parser.add_argument("--set", action="append", default=[], metavar="A.B=V")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.scenario:
        scenario = load_scenario(args.scenario, args.set)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from conftest import TINY

        scenario = validate_scenario(copy.deepcopy(TINY))
    out = Path(tempfile.mkdtemp()) / "run"
    run_scenario(scenario, out)
    path = out / checkpoint.CHECKPOINT
    dump = resolve_scenario(scenario).model_dump(mode="json")
    state = checkpoint.load_checkpoint(path, dump, None, None)
    tables = {"torch": copyreg.dispatch_table, "sflsim": checkpoint._Pickler.dispatch_table}
    times: dict[str, dict[str, list[float]]] = {k: {"save": [], "load": []} for k in tables}
    sizes = {}
    for _ in range(args.repeats):
        for name, table in tables.items():
            checkpoint._Pickler.dispatch_table = table
            start = time.perf_counter()
            checkpoint.save_checkpoint(path, state)
            times[name]["save"].append(time.perf_counter() - start)
            start = time.perf_counter()
            checkpoint.load_checkpoint(path, dump, None, None)
            times[name]["load"].append(time.perf_counter() - start)
            sizes[name] = path.stat().st_size
    checkpoint._Pickler.dispatch_table = tables["sflsim"]
    print(f"{scenario.name} ({scenario.algorithm.name}, {scenario.num_clients} clients): "
          f"median of {args.repeats}")
    for name in tables:
        save, load = (1000 * statistics.median(times[name][k]) for k in ("save", "load"))
        print(f"  {name:7s} save {save:7.1f} ms  load {load:7.1f} ms  {sizes[name]:,} bytes")


if __name__ == "__main__":
    main()
