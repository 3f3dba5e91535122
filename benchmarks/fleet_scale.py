"""A fleet file of N devices (one row each) against the same devices as two groups.

Writes, in a temporary folder, an N-row fleet CSV (random compute figures and link
rates, two group labels) and two timing-only FedAvg scenarios on the ``synthetic``
dataset (small CNN, one batch of 16 per device, 1 round): one with ``fleet:``, one with
the same number of devices as two ``devices:`` groups (rpi4 on Wi-Fi, phone_midrange on
LTE). Each runs as ``sflsim run --no-train --threads 1`` in its own process; reported
per run: wall time and peak RSS (``ru_maxrss`` of the child: Python, torch and the
results written included), and the time :func:`sflsim.fleet.read_fleet` takes alone.

    python benchmarks/fleet_scale.py --devices 100000
    python benchmarks/fleet_scale.py --devices 5000 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

SCENARIO = """\
name: {name}
dataset: {{name: synthetic, synthetic: {{train_samples: {samples}, test_samples: 1000}}}}
model: {{name: small_cnn}}
{devices}
algorithm: {{name: fedavg}}
training: {{rounds: {rounds}, batch_size: 16, optimizer: {{name: sgd, lr: 0.05}},
           schedule: {{name: constant}}}}
evaluation: {{early_exit: {{enabled: false}}}}
"""


def run(folder: Path, name: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``sflsim run`` on ``folder/name.yaml``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sflsim", "run", str(folder / f"{name}.yaml"),
                    "-o", str(folder / name), "--no-train", "--threads", "1", "-q"],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ,
                                                               "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(rss, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    n = args.devices
    with tempfile.TemporaryDirectory(prefix="sflsim-fleet-") as tmp:
        folder = Path(tmp)
        rng = np.random.default_rng(0)
        pd.DataFrame({"group": np.where(np.arange(n) % 2, "b", "a"),
                      "flops_per_s": rng.uniform(5e9, 30e9, n), "memory_bytes": 4 * 2**30,
                      "uplink_bps": rng.uniform(1e6, 5e7, n),
                      "downlink_bps": rng.uniform(5e6, 1e8, n),
                      "latency_s": rng.uniform(0.005, 0.05, n)}).to_csv(folder / "fleet.csv",
                                                                         index=False)
        samples = int(n * 1.2)
        (folder / "fleet.yaml").write_text(SCENARIO.format(
            name="fleet", samples=samples, rounds=args.rounds,
            devices=f"fleet: {folder / 'fleet.csv'}"))
        half = n // 2
        (folder / "groups.yaml").write_text(SCENARIO.format(
            name="groups", samples=samples, rounds=args.rounds, devices=(
                f"devices:\n  a: {{profile: rpi4, count: {n - half}, end_layer: 1, link: wifi}}\n"
                f"  b: {{profile: phone_midrange, count: {half}, end_layer: 1, link: lte}}")))
        from sflsim.fleet import read_fleet

        t0 = time.perf_counter()
        read_fleet(folder / "fleet.csv")
        print(f"read_fleet, {n} rows: {time.perf_counter() - t0:.2f} s")
        # a fresh process each, so each peak RSS is its own (ru_maxrss of children is the max)
        for name in ("fleet", "groups"):
            out = subprocess.run([sys.executable, __file__, "--one", str(folder), name],
                                 capture_output=True, text=True, check=True)
            print(out.stdout.strip())


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        wall, rss = run(Path(sys.argv[2]), sys.argv[3])
        print(f"{sys.argv[3]}: sflsim run --no-train: {wall:.1f} s wall, peak RSS {rss:.0f} MiB")
    else:
        main()
