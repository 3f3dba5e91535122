"""Three ``sflsim run`` processes at once against the same three one after another.

Three quickstart runs side by side on 2 cores, each with torch's two
threads, took 866 s for a round that takes about 60 s alone: torch's threads
busy-wait, and six of them spin against each other on two cores. Each run here is a
fresh ``sflsim run`` process (import, data load and build included) of a shipped
scenario at a reduced size, in three modes:

- ``sequential``: one run after another, each with the default threads (one per usable
  core, :mod:`sflsim.threads`);
- ``concurrent``: all runs at once, each with the default threads (runs x cores threads
  on the cores);
- ``split``: all runs at once with ``OMP_NUM_THREADS`` = usable cores // runs (at least
  1), what sflsim's note suggests and what a sweep with ``--workers`` does.

For each mode: the wall time from the first start to the last end, each run's wall
time, and the summed ``wall_time_s`` of its rounds (``rounds.csv``: training and
evaluation, without import and build). Last, each concurrent mode's time over the
sequential one: about 1 means running side by side costs nothing over running in a
row; far above 1 means torch's threads of the side-by-side runs spin against each other
on cores the others hold.

    python benchmarks/concurrent_runs.py                      # quickstart, 1 round, 25% of the data
    python benchmarks/concurrent_runs.py --fraction 1.0       # a full quickstart round (minutes)
    python benchmarks/concurrent_runs.py --fraction 0.02 --set evaluation.max_test_samples=100

The benchmark removes ``OMP_NUM_THREADS`` from the environment of the default-thread
modes, so that they use sflsim's default whatever the calling shell sets.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sflsim.threads import usable_cores  # noqa: E402

MODES = ("sequential", "concurrent", "split")


def command(args: argparse.Namespace, out: Path) -> list[str]:
    """The ``sflsim run`` command line of one run (this checkout's sflsim)."""
    sets = [f"training.rounds={args.rounds}", f"dataset.fraction={args.fraction}",
            "evaluation.early_exit.enabled=false", *args.set]
    return [sys.executable, "-m", "sflsim", "run", args.scenario, "-q", "--overwrite",
            "-o", str(out), *(f"--set={s}" for s in sets)]


def start(args: argparse.Namespace, out: Path, omp: int | None) -> tuple[subprocess.Popen, float]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if omp is not None:
        env["OMP_NUM_THREADS"] = str(omp)
    out.mkdir(parents=True, exist_ok=True)
    log = (out.parent / f"{out.name}.log").open("w")
    proc = subprocess.Popen(command(args, out), env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, time.perf_counter()


def finish(proc: subprocess.Popen, started: float, out: Path, timeout_s: float) -> dict:
    """Wait for one run; its wall time, its rounds' wall time and its printed thread choice."""
    try:
        proc.wait(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    wall = time.perf_counter() - started
    log = (out.parent / f"{out.name}.log").read_text()
    if proc.returncode != 0:
        raise SystemExit(f"run in {out} failed (exit {proc.returncode}):\n{log[-2000:]}")
    with (out / "rounds.csv").open() as f:
        rounds_s = sum(float(row["wall_time_s"]) for row in csv.DictReader(f))
    threads = re.search(r"torch threads: (.*)", log)
    return {"wall_s": wall, "rounds_s": rounds_s, "threads": threads.group(1) if threads else "?"}


def run_mode(mode: str, args: argparse.Namespace, tmp: Path) -> tuple[float, list[dict]]:
    """Wall time of the mode (first start to last end) and each run's figures."""
    omp = max(1, usable_cores() // args.runs) if mode == "split" else None
    outs = [tmp / mode / f"run{i}" for i in range(args.runs)]
    t0 = time.perf_counter()
    deadline = t0 + args.timeout_s
    if mode == "sequential":
        runs = [finish(*start(args, out, omp), out, deadline - time.perf_counter()) for out in outs]
    else:
        procs = [start(args, out, omp) for out in outs]
        runs = [finish(proc, began, out, deadline - time.perf_counter())
                for (proc, began), out in zip(procs, outs)]
    return time.perf_counter() - t0, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="quickstart", help="shipped scenario name or file")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--fraction", type=float, default=0.25, help="dataset.fraction")
    ap.add_argument("--set", action="append", default=[], help="more overrides, a.b=value")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="per mode")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"{args.runs} runs of {args.scenario}, {args.rounds} round(s), dataset.fraction "
          f"{args.fraction}, no early-exit sweep {' '.join(args.set)}; {usable_cores()} usable "
          f"cores; load average {load:.1f} at start")
    walls: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sflsim-concurrent-") as tmp:
        for mode in args.modes:
            walls[mode], runs = run_mode(mode, args, Path(tmp))
            per_run = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
            rounds = ", ".join(f"{r['rounds_s']:.1f}" for r in runs)
            print(f"{mode:>10}: {walls[mode]:7.1f} s wall | runs {per_run} s | rounds {rounds} s | "
                  f"torch threads {runs[0]['threads']}", flush=True)
    if "sequential" in walls:
        for mode in ("concurrent", "split"):
            if mode in walls:
                print(f"{mode} / sequential: {walls[mode] / walls['sequential']:.2f}")


if __name__ == "__main__":
    main()
