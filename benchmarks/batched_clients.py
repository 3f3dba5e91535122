"""Batched clients: FedAvg rounds with the clients' local steps one by one against
training.fuse_clients, one batched step per step index (sflsim.models.fused.FusedClients).

For each fleet size, two runs of the same scenario, one round each, after a warm-up round
of the smallest fleet in both modes: FedAvg on the ResNet of the Hetero-SplitEE paper
(``hetero_splitee_resnet``, width ``--width``) or ResNet-18 (``--model resnet18``), the
``synthetic`` dataset (``--samples`` images per client of ``--image`` shape, so every
client has the same number of equal batches), batch ``--batch``, SGD. Reported per size:
the round's wall time (build excluded: the run's ``rounds.csv`` wall time of round 1 minus
round 0's), client steps per second, and the fused run's speed-up over the loop; the two
runs' event traces are checked equal (the timeline never depends on fusing).

    python benchmarks/batched_clients.py --clients 20 100 --device cpu
    python benchmarks/batched_clients.py --clients 20 100 500 --device cuda --model resnet18 \\
        --width 1.0 --image 3 32 32 --samples 64 --batch 32 -o OUT
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path


def scenario(n: int, args: argparse.Namespace, fuse: bool) -> dict:
    c, h, w = args.image
    return {
        "name": f"batched{n}", "seed": 0,
        "dataset": {"name": "synthetic", "partition": {"scheme": "iid"},
                    "synthetic": {"train_samples": n * args.samples, "test_samples": 64,
                                  "classes": 10, "image_shape": [c, h, w]}},
        "model": {"name": args.model, "width": args.width},
        "devices": {"fleet": {"profile": "jetson_orin_nano", "count": n, "end_layer": 1,
                              "link": "wifi"}},
        "server": {"profile": "a100"},
        "algorithm": {"name": "fedavg"},
        "training": {"rounds": 1, "batch_size": args.batch, "device": args.device,
                     "fuse_clients": fuse, "optimizer": {"name": "sgd", "lr": 0.05}},
        "evaluation": {"max_test_samples": 64},
    }


def positive(kind: type):
    """An argparse type: a number of ``kind`` above 0."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value
    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--clients", type=positive(int), nargs="+", default=[20, 100],
                        help="fleet sizes, each run with the clients one by one and batched")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N")
    parser.add_argument("--model", default="hetero_splitee_resnet",
                        help="backbone: hetero_splitee_resnet or resnet18 (any registered model)")
    parser.add_argument("--width", type=positive(float), default=0.25, help="width multiplier")
    parser.add_argument("--image", type=positive(int), nargs=3, default=[1, 28, 28],
                        metavar=("C", "H", "W"), help="image shape of the generated data")
    parser.add_argument("--samples", type=positive(int), default=32,
                        help="training images per client")
    parser.add_argument("--batch", type=positive(int), default=16, help="batch size")
    parser.add_argument("-o", "--output", type=Path,
                        help="a folder to write the figures in, as batched_clients_<device>.json "
                             "(again after every fleet size)")
    parser.add_argument("--budget-s", type=positive(float), default=None,
                        help="skip a fleet size whose two runs, estimated from the last size's "
                             "(linear in clients), would end past this many seconds from start")
    args = parser.parse_args()
    if args.output is not None:
        try:
            args.output.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            parser.error(f"-o {args.output}: cannot make this folder ({e.strerror})")

    from sflsim.errors import SflsimError

    try:
        measure(args)
    except SflsimError as e:  # a scenario this machine cannot run: one line, no traceback
        parser.exit(2, f"error: {e}\n")


def measure(args: argparse.Namespace) -> None:
    """Run the warm-up and every fleet size of ``args``; print and write the figures.

    Raises:
        SflsimError: a scenario is invalid or this machine cannot run it (no GPU, too
            little memory for the smallest fleet).
    """
    import pandas as pd
    import torch

    from sflsim.config import validate_scenario
    from sflsim.errors import SflsimError
    from sflsim.runner import run_scenario, torch_device
    from sflsim.text import plural

    for n in sorted({min(args.clients), max(args.clients)}):  # every field checked up front
        torch_device(validate_scenario(scenario(n, args, True)))
    if args.device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "0")) or torch.get_num_threads())
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    print(f"FedAvg, {args.model} width {args.width}, images {args.image}, {args.samples} per "
          f"client, batch {args.batch}, on {args.device} ({name}), torch {torch.__version__}, "
          f"{plural(torch.get_num_threads(), 'thread')}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    began = time.perf_counter()
    for fuse in (False, True):  # warm-up of both (kernel choice and caches on first use)
        run_scenario(validate_scenario(scenario(min(args.clients), args, fuse)))
    figures = []
    steps_per_client = -(-args.samples // args.batch)
    last = None  # (clients, seconds for both runs) of the last size measured
    for n in args.clients:
        row = {"clients": n}
        left_s = None if args.budget_s is None else args.budget_s - (time.perf_counter() - began)
        if left_s is not None and last is not None and last[1] * n / last[0] > left_s:
            row["skipped"] = (f"estimated {last[1] * n / last[0]:.0f} s for both runs, "
                              f"{left_s:.0f} s of the budget left")
            figures.append(row)
            print(f"{n:>5} clients: skipped, {row['skipped']}", flush=True)
            write(args, name, figures)
            continue
        sized = time.perf_counter()
        events = {}
        for fuse in (False, True):
            t = time.perf_counter()
            try:
                result = run_scenario(validate_scenario(scenario(n, args, fuse)))
            except SflsimError as e:  # e.g. the memory check: this size does not fit
                row["refused"] = f"{'fused' if fuse else 'loop'}: {e}"
                break
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            total = time.perf_counter() - t
            wall = result.rounds.wall_time_s
            round_s = float(wall.iloc[1] - wall.iloc[0])
            key = "fused" if fuse else "loop"
            row[f"{key}_round_s"], row[f"{key}_run_s"] = round_s, total
            row[f"{key}_steps_per_s"] = n * steps_per_client / round_s
            events[key] = result.events
            del result  # its models (on the GPU) are freed before the next run builds its own
            gc.collect()
        if "refused" in row:
            figures.append(row)
            print(f"{n:>5} clients: refused, {row['refused']}", flush=True)
            write(args, name, figures)
            continue
        pd.testing.assert_frame_equal(events["fused"], events["loop"], check_exact=True)
        row["speedup"] = row["loop_round_s"] / row["fused_round_s"]
        last = (n, time.perf_counter() - sized)
        figures.append(row)
        print(f"{n:>5} clients: loop {row['loop_round_s']:.2f} s ({row['loop_steps_per_s']:.0f} "
              f"steps/s), fused {row['fused_round_s']:.2f} s ({row['fused_steps_per_s']:.0f} "
              f"steps/s): {row['speedup']:.2f}x; same events", flush=True)
        write(args, name, figures)


def write(args: argparse.Namespace, device_name: str, figures: list[dict]) -> None:
    """The figures so far as ``batched_clients_<device>.json`` in ``-o`` (if given)."""
    if args.output is None:
        return
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / f"batched_clients_{args.device.replace(':', '')}.json").write_text(
        json.dumps({"device": device_name, "args": vars(args) | {"output": str(args.output)},
                    "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
