"""Wall time of a 1-round FedAvg ``sflsim run`` with and without ``training.channels_last``.

A small scenario (width 1/16, 3 clients, 2% of the embedded data): with
channels-last it hung (2 torch threads) or aborted (1 thread) on oneDNN's AVX2
kernels before :mod:`sflsim.models.layout`. Each configuration is a fresh ``sflsim
run`` process (import and data load included), run in interleaved order so that a
slow minute of a shared machine hits every configuration alike; the median is
reported, and the channels-last / NCHW ratio per (kernels, threads).

    python benchmarks/channels_last_run.py [--repeats 3] [--isa AVX2 AVX512_CORE]

``--isa`` sets ``ONEDNN_MAX_CPU_ISA`` (oneDNN's kernel set; a CPU without AVX-512
runs AVX2 whatever is asked).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

SCENARIO = {
    "name": "tiny_cl", "seed": 0,
    "dataset": {"name": "fashion_mnist", "fraction": 0.02, "partition": {"scheme": "iid"}},
    "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
    "devices": {
        "weak": {"profile": "rpi4", "count": 1, "end_layer": 3, "link": "wifi"},
        "mid": {"profile": "jetson_nano", "count": 1, "end_layer": 4, "link": "lte"},
        "strong": {"profile": "jetson_orin_nano", "count": 1, "end_layer": 5, "link": "wifi"},
    },
    "server": {"profile": "a100"},
    "algorithm": {"name": "fedavg"},
    "training": {"rounds": 1, "local_epochs": 1, "batch_size": 16,
                 "optimizer": {"name": "adam", "lr": 1.0e-3}},
    "evaluation": {"max_test_samples": 40},
}


def run_once(path: Path, out: Path, isa: str, threads: int, timeout_s: float) -> float:
    """Seconds of one ``sflsim run`` process; raises on failure or timeout."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from sflsim.cli.main import app; app()", "run",
                    str(path), "-o", str(out), "-q", "--overwrite", "--threads", str(threads)],
                   env={**os.environ, "ONEDNN_MAX_CPU_ISA": isa}, check=True, timeout=timeout_s,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--isa", nargs="+", default=["AVX2", "AVX512_CORE"])
    ap.add_argument("--timeout-s", type=float, default=300.0)
    args = ap.parse_args()
    configs = [(isa, threads, layout) for isa in args.isa for threads in (1, 2)
               for layout in ("nchw", "channels_last")]
    times: dict[tuple, list[float]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for layout in ("nchw", "channels_last"):
            scenario = copy.deepcopy(SCENARIO)
            scenario["training"]["channels_last"] = layout == "channels_last"
            paths[layout] = Path(tmp) / f"{layout}.yaml"
            paths[layout].write_text(yaml.safe_dump(scenario, sort_keys=False))
        for _ in range(args.repeats):
            for isa, threads, layout in configs:
                times[(isa, threads, layout)].append(
                    run_once(paths[layout], Path(tmp) / "run", isa, threads, args.timeout_s))
    print(f"{'kernels':<12} {'threads':>7} {'nchw s':>8} {'channels_last s':>16} {'ratio':>6}"
          f"   (median of {args.repeats}, whole process)")
    for isa in args.isa:
        for threads in (1, 2):
            a = statistics.median(times[(isa, threads, "nchw")])
            b = statistics.median(times[(isa, threads, "channels_last")])
            print(f"{isa:<12} {threads:>7} {a:>8.2f} {b:>16.2f} {b / a:>6.2f}")


if __name__ == "__main__":
    main()
