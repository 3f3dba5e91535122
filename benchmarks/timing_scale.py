"""Timing-only runs at fleet scale: wall time for 100 to 10,000 devices.

Each point is a fresh subprocess running ``run_scenario`` on a Hetero-SplitEE
Sequential scenario with ``training.timing_only`` (``sflsim run --no-train``): the
same SimPy processes as a trained run, one activation transfer and one server job
per batch, costs from the cost table, no torch step. Four device groups (rpi4,
jetson_nano, jetson_orin_nano, rpi5; end layers 2-5; Wi-Fi and LTE); the shipped
Fashion-MNIST subset scaled so every device holds about 1.2 samples (one batch per
round) whatever the fleet size, so the work per device-round is constant and the
time should grow linearly with devices. Results are written (rounds.csv,
clients.csv, events.csv) unless ``--no-output``.

Reported per point: wall time of the run (build + rounds + writing; the Python and
torch import is excluded and printed apart), microseconds per device-round, and the
growth factor against the smallest fleet, normalised by the fleet-size ratio (1.0 =
linear). The last line is the largest fleet's wall time.

    python benchmarks/timing_scale.py                       # 100, 1000, 10000 devices x 100 rounds
    python benchmarks/timing_scale.py --devices 100 1000 --rounds 20
    python benchmarks/timing_scale.py --repeats 3           # fastest of 3 runs per fleet size
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import torch
    torch.set_num_threads(1)
    from sflsim.config.schema import Scenario
    from sflsim.runner import run_scenario
    imported = time.perf_counter() - t0
    n, rounds, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] or None
    per = n // 4
    scenario = Scenario.model_validate({
        "name": f"scale{n}", "seed": 0,
        "dataset": {"name": "fashion_mnist", "fraction": min(1.0, n / 10_000),
                    "partition": {"scheme": "iid"}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.25},
        "devices": {
            "a": {"profile": "rpi4", "count": per, "end_layer": 2, "link": "wifi"},
            "b": {"profile": "jetson_nano", "count": per, "end_layer": 3, "link": "lte"},
            "c": {"profile": "jetson_orin_nano", "count": per, "end_layer": 4, "link": "wifi"},
            "d": {"profile": "rpi5", "count": n - 3 * per, "end_layer": 5, "link": "wifi"}},
        "server": {"profile": "a100"},
        "algorithm": {"name": "hetero_splitee_sequential"},
        "training": {"rounds": rounds, "batch_size": 16, "timing_only": True},
    })
    t1 = time.perf_counter()
    result = run_scenario(scenario, out)
    print(json.dumps({"devices": n, "rounds": rounds, "import_s": imported,
                      "run_s": time.perf_counter() - t1, "events": len(result.trace),
                      "sim_time_s": result.summary["sim_time_s"]}))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--no-output", action="store_true", help="do not write result files")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per fleet size; the fastest is kept (on a shared machine the "
                             "minimum is the least disturbed time), every run is printed")
    args = parser.parse_args()
    rows = []
    for n in sorted(args.devices):
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="sflsim-scale-") as tmp:
                out = "" if args.no_output else f"{tmp}/run"
                proc = subprocess.run([sys.executable, "-c", CHILD, str(n), str(args.rounds), out],
                                      capture_output=True, text=True, check=True)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        row = min(runs, key=lambda r: r["run_s"])
        if args.repeats > 1:
            times = ", ".join(f"{r['run_s']:.1f}" for r in runs)
            print(f"{n:>6} devices: runs {times} s", flush=True)
        rows.append(row)
        us = row["run_s"] / (n * args.rounds) * 1e6
        growth = (row["run_s"] / rows[0]["run_s"]) / (n / rows[0]["devices"])
        print(f"{n:>6} devices x {args.rounds} rounds: {row['run_s']:7.1f} s "
              f"({us:6.1f} us per device-round, {row['events']:,} events, "
              f"simulated {row['sim_time_s']:.1f} s; import {row['import_s']:.1f} s; "
              f"growth vs linear {growth:.2f})", flush=True)
    last = rows[-1]
    print(f"timing-only wall time, {last['devices']} devices x {last['rounds']} rounds: "
          f"{last['run_s']:.1f} s")


if __name__ == "__main__":
    main()
