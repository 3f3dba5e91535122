"""Peak memory of a run against the bytes that really differ between clients.

Usage::

    python benchmarks/memory.py                     # ~30 s; --help for clients, width, ...

Runs, each in a fresh subprocess (``ru_maxrss`` is a per-process high-water mark):

* **baseline**: import sflsim and torch and load the dataset; its peak RSS.
* **run**: a Hetero-SplitEE Averaging run (one server-side copy per client) of
  ``--clients`` clients for one round; its peak RSS, and from the built objects
  the bytes that must exist: every client's client-side model, exit head and
  server-side copy (parameters, buffers and optimizer state), the backbone once,
  and the dataset tensors. Gradients are reported apart (they could be freed).

It prints the estimate of :func:`sflsim.memory.estimate_memory` too, and last
the ratio peak RSS / necessary bytes, raw and with the baseline subtracted
(``(peak - baseline) / (necessary - dataset)``, the baseline holding the
dataset). Target: at most 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

MIB = 2**20


def scenario_dict(args: argparse.Namespace) -> dict:
    n = args.clients
    counts = [n - 2 * (n // 3), n // 3, n // 3]
    return {
        "name": "memory_bench", "seed": 0,
        "dataset": {"name": "fashion_mnist", "fraction": args.fraction,
                    "partition": {"scheme": "iid"}},
        "model": {"name": "hetero_splitee_resnet", "width": args.width},
        "devices": {
            "weak": {"profile": "rpi4", "count": counts[0], "end_layer": 3, "link": "wifi"},
            "mid": {"profile": "jetson_nano", "count": counts[1], "end_layer": 4, "link": "lte"},
            "strong": {"profile": "jetson_orin_nano", "count": counts[2], "end_layer": 5,
                       "link": "wifi"},
        },
        "server": {"profile": "a100"},
        "algorithm": {"name": args.algorithm},
        "training": {"rounds": 1, "local_epochs": 1, "batch_size": args.batch_size,
                     "optimizer": {"name": "adam", "lr": 1e-3}},
        "evaluation": {"max_test_samples": 200, "early_exit": {"enabled": False}},
    }


def _maxrss() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _module_bytes(module) -> int:
    return _tensor_bytes([*module.parameters(), *module.buffers()])


def _optimizer_bytes(opt) -> int:
    import torch
    return _tensor_bytes([v for state in opt.state.values() for v in state.values()
                          if isinstance(v, torch.Tensor)])


def _grad_bytes(module) -> int:
    return _tensor_bytes([p.grad for p in module.parameters() if p.grad is not None])


def measure(kind: str, args: argparse.Namespace) -> dict:
    """Runs in the child process."""
    import torch

    torch.set_num_threads(1)
    from sflsim import runner
    from sflsim.config.load import validate_scenario
    from sflsim.memory import estimate_memory

    scenario = validate_scenario(scenario_dict(args))
    if kind == "baseline":
        data = runner.load_data(scenario)
        return {"peak_rss": _maxrss(), "dataset": _tensor_bytes(
            [data.x_train, data.y_train, data.x_test, data.y_test])}
    result = runner.run_scenario(scenario)
    alg = result.algorithm
    ctx = alg.ctx
    data = ctx.data
    dataset = _tensor_bytes([data.x_train, data.y_train, data.x_test, data.y_test])
    params = _module_bytes(ctx.backbone.stages) + _module_bytes(ctx.backbone.head)
    optim, grads = 0, 0
    for c in ctx.clients:
        params += _module_bytes(c.model) + _module_bytes(c.exit_head)
        optim += _optimizer_bytes(c.optimizer)
        grads += _grad_bytes(c.model) + _grad_bytes(c.exit_head)
    for cid, model in getattr(alg, "server_models", {}).items():
        params += _module_bytes(model)
        optim += _optimizer_bytes(alg.server_optimizers[cid])
        grads += _grad_bytes(model)
    estimate = estimate_memory(scenario, ctx.backbone, data)
    return {"peak_rss": _maxrss(), "dataset": dataset, "params": params, "optimizer": optim,
            "grads": grads, "estimate": estimate.total_bytes,
            "estimate_parts": estimate.contributors, "events": len(ctx.sim.trace)}


def child(kind: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--clients", str(args.clients),
           "--width", str(args.width), "--fraction", str(args.fraction),
           "--batch-size", str(args.batch_size), "--algorithm", args.algorithm]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--fraction", type=float, default=0.1,
                        help="dataset.fraction (12,000 train samples at 1.0)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--algorithm", default="hetero_splitee_averaging")
    parser.add_argument("--child", choices=["baseline", "run"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return
    base = child("baseline", args)
    run = child("run", args)
    necessary = run["params"] + run["optimizer"] + run["dataset"]
    print(f"scenario: {args.algorithm}, {args.clients} clients, width {args.width}, "
          f"dataset.fraction {args.fraction}, batch {args.batch_size}, 1 round")
    print(f"baseline peak RSS (import sflsim+torch, load data): {base['peak_rss'] / MIB:8.1f} MiB")
    print(f"run peak RSS:                                       {run['peak_rss'] / MIB:8.1f} MiB")
    print(f"  parameters and buffers (backbone + per client):   {run['params'] / MIB:8.1f} MiB")
    print(f"  optimizer states:                                 {run['optimizer'] / MIB:8.1f} MiB")
    print(f"  dataset tensors:                                  {run['dataset'] / MIB:8.1f} MiB")
    print(f"  necessary (the three above):                      {necessary / MIB:8.1f} MiB")
    print(f"  gradients still held (not counted as necessary):  {run['grads'] / MIB:8.1f} MiB")
    print(f"  trace events: {run['events']}")
    print(f"estimate_memory total:                              {run['estimate'] / MIB:8.1f} MiB")
    for name, b in sorted(run["estimate_parts"].items(), key=lambda kv: -kv[1]):
        print(f"    {name}: {b / MIB:.1f} MiB")
    raw = run["peak_rss"] / necessary
    net = (run["peak_rss"] - base["peak_rss"]) / (necessary - run["dataset"])
    print(f"ratio peak RSS / necessary: raw {raw:.2f}, baseline subtracted {net:.2f} "
          f"(target <= 1.5)")


if __name__ == "__main__":
    main()
