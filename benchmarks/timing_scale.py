"""Timing-only runs at fleet scale: sflsim's event rate against bare SimPy's, and peak memory.

Each point is a fresh subprocess that first times a bare SimPy loop (as many processes as
devices, each yielding ``env.timeout`` one after the other: SimPy's own cost per event,
nothing else), then runs ``run_scenario`` on a timing-only scenario
(``training.timing_only``, ``sflsim run --no-train``: the same SimPy processes as a
trained run, costs from the cost table, no torch step) with its results written to a
temporary folder, then times the bare loop again. Reported per point:

- sflsim's rate: events (simulated activities recorded in ``events.parquet``) per second
  of ``run_scenario``, build, rounds and writing included (the Python and torch import
  excluded, printed apart);
- bare SimPy's rate: timeouts per second, the faster of the two bare loops;
- the ratio of the two (1.0 = sflsim records activities as fast as SimPy alone fires
  timeouts);
- peak RSS of the subprocess (``ru_maxrss``: the import of torch included).

FLOP counts come from sflsim's disk cache (:class:`sflsim.models.cost.DiskCounts`) when an
earlier run counted the same model, as they do for a user's second run; ``--cold`` turns
the cache off (``SFLSIM_CACHE_DIR=off``), so every run counts its model's FLOPs afresh.

The fleet: four device groups (rpi4, jetson_nano, jetson_orin_nano, rpi5; Wi-Fi and LTE;
end layers 2-5 of the split ResNet, the model's last stage for whole-model methods); the
``synthetic`` dataset with 1.2 training samples per device (one batch of 16 per round and
device) and 1,000 test samples, so the work per device-round is the same at every size.

    python benchmarks/timing_scale.py --devices 1000 10000 --rounds 100
    python benchmarks/timing_scale.py --devices 100000 --rounds 100
    python benchmarks/timing_scale.py --devices 1000 --rounds 20 --algorithm splitfed_v1
    python benchmarks/timing_scale.py --devices 10000 --rounds 20 --no-output
    python benchmarks/timing_scale.py --devices 1000 --rounds 100 --cold
    python benchmarks/timing_scale.py --algorithm fedavg --devices 131072 --rounds 20 --width 0.93
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    t0 = time.perf_counter()
    import simpy
    import torch
    torch.set_num_threads(1)
    import pyarrow.parquet  # imported by the first results written: a library import too
    from sflsim.config.scenario import Scenario
    from sflsim.config.schema import WHOLE_MODEL_ALGORITHMS
    from sflsim.runner import run_scenario
    imported = time.perf_counter() - t0
    n, rounds, out, algorithm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] or None, sys.argv[4]
    width = float(sys.argv[5])

    def bare(processes, timeouts):
        env = simpy.Environment()
        def proc():
            for _ in range(timeouts):
                yield env.timeout(1.0)
        for _ in range(processes):
            env.process(proc())
        t = time.perf_counter()
        env.run()
        return processes * timeouts / (time.perf_counter() - t)

    per_proc = max(1, 400_000 // n)
    bare_before = bare(n, per_proc)
    per = n // 4
    ends = [2, 3, 4, 5] if algorithm not in WHOLE_MODEL_ALGORITHMS else [6, 6, 6, 6]
    scenario = Scenario.model_validate({
        "name": f"scale{n}", "seed": 0,
        "dataset": {"name": "synthetic", "partition": {"scheme": "iid"},
                    "synthetic": {"train_samples": 12 * n // 10, "test_samples": 1_000}},
        "model": {"name": "hetero_splitee_resnet", "width": width},
        "devices": {
            "a": {"profile": "rpi4", "count": per, "end_layer": ends[0], "link": "wifi"},
            "b": {"profile": "jetson_nano", "count": per, "end_layer": ends[1], "link": "lte"},
            "c": {"profile": "jetson_orin_nano", "count": per, "end_layer": ends[2],
                  "link": "wifi"},
            "d": {"profile": "rpi5", "count": n - 3 * per, "end_layer": ends[3], "link": "wifi"}},
        "server": {"profile": "a100"},
        "algorithm": {"name": algorithm},
        "training": {"rounds": rounds, "batch_size": 16, "timing_only": True},
    })
    t1 = time.perf_counter()
    result = run_scenario(scenario, out)
    run_s = time.perf_counter() - t1
    events = result.summary.get("events", None)
    if events is None:
        events = len(result.events)
    bare_after = bare(n, per_proc)
    model = result.algorithm.global_model if hasattr(result.algorithm, "global_model") else None
    model_bytes = None if model is None else 4 * sum(t.numel() for t in model.state_dict().values())
    print(json.dumps({"devices": n, "rounds": rounds, "import_s": imported, "run_s": run_s,
                      "events": int(events), "sim_time_s": result.summary["sim_time_s"],
                      "bare_per_s": max(bare_before, bare_after), "model_bytes": model_bytes,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--algorithm", default="hetero_splitee_sequential",
                        help="any method that runs timing-only (sflsim run --no-train)")
    parser.add_argument("--width", type=float, default=0.25,
                        help="width multiplier of the split ResNet-18 (hetero_splitee_resnet): "
                             "the model's bytes on the wire (1.0: ~45 MB; 0.93: 39 MB, near the 38 MB "
                             "model of FedDES's default workload)")
    parser.add_argument("--no-output", action="store_true", help="do not write result files")
    parser.add_argument("--cold", action="store_true",
                        help="no FLOP counts from the disk cache: every run counts afresh")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per fleet size; the one with the best ratio is kept (every "
                             "run is printed)")
    args = parser.parse_args()
    env = {**os.environ, **({"SFLSIM_CACHE_DIR": "off"} if args.cold else {})}
    print(f"{args.algorithm}, timing-only, results {'not ' if args.no_output else ''}written; "
          f"FLOP counts {'counted afresh' if args.cold else 'from the disk cache once counted'}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for n in sorted(args.devices):
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="sflsim-scale-") as tmp:
                out = "" if args.no_output else f"{tmp}/run"
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD, str(n), str(args.rounds), out, args.algorithm,
                     str(args.width)],
                    capture_output=True, text=True, env=env)
            if proc.returncode:
                sys.exit(f"{n} devices: the run failed:\n{proc.stderr[-3000:]}")
            run = json.loads(proc.stdout.strip().splitlines()[-1])
            run["rate"] = run["events"] / run["run_s"]
            run["ratio"] = run["rate"] / run["bare_per_s"]
            runs.append(run)
            print(f"{n:>7,} devices x {args.rounds} rounds: {run['run_s']:7.1f} s, "
                  f"{run['events']:,} events, {run['rate']:,.0f} events/s; bare SimPy "
                  f"{run['bare_per_s']:,.0f} timeouts/s; ratio {run['ratio']:.3f}; peak RSS "
                  f"{run['peak_rss_bytes'] / 2**30:.2f} GiB; import {run['import_s']:.1f} s; "
                  f"simulated {run['sim_time_s']:.1f} s"
                  + (f"; model {run['model_bytes'] / 1e6:.1f} MB" if run["model_bytes"] else ""),
                  flush=True)
        best = max(runs, key=lambda r: r["ratio"])
        if args.repeats > 1:
            print(f"{n:>7,} devices: best ratio {best['ratio']:.3f}, peak RSS "
                  f"{best['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
