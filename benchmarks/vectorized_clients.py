"""Many clients, one step: per-client loop vs fused K-client steps (sflsim.models.fused).

The quickstart's clients (``scenarios/quickstart.yaml``: 12 clients, 4 each at end
layers 3, 4 and 5 of the width-0.25 six-stage ResNet, Fashion-MNIST 1x28x28,
batch 16, Adam) each take ``--steps`` client steps (forward client model, exit-head
cross-entropy, backward, optimizer step), on the same batches, in three ways:

* ``loop``: one client after the other, as :meth:`Algorithm.client_step` does;
* ``fused``: one :class:`~sflsim.models.fused.FusedClients` per device group
  (clients of a group share architecture and cut layer), fused once, one fused
  step per group and step, written back once at the end (included in the time);
* ``fused-cl``: the same with ``channels_last=True`` (faster on CPU);
* ``one-shot``: :func:`~sflsim.models.fused.fused_client_steps` per group and
  step (fuse + step + write back every step).

Times are the minimum over ``--repeats`` runs (after one warm-up), for each
torch thread count in ``--threads``, by wall clock or (``--clock cpu``) by this
process's CPU time, which is steadier on a shared machine at one thread.
Throughput is client steps per second; the last line is the best fused
variant's throughput over the loop's.

With ``--device cuda`` the models and batches live on the GPU and every timed run ends
with ``torch.cuda.synchronize()``; there small steps are launch-bound, which fusing should
help far more than on a CPU (not yet measured: no GPU was available when this was written).

Run: ``python benchmarks/vectorized_clients.py`` (a few minutes on 2 cores; see --help).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn

from sflsim.config.load import load_scenario
from sflsim.data.datasets import load_dataset
from sflsim.models.fused import FusedClients, fused_client_steps
from sflsim.models.registry import MODELS


def build_clients(scenario_path: str):
    sc = load_scenario(scenario_path)
    data = load_dataset(sc.dataset.name)
    backbone = MODELS[sc.model.name](in_channels=data.x_train.shape[1],
                                     image_size=data.x_train.shape[2],
                                     num_classes=int(data.y_train.max()) + 1,
                                     width=sc.model.width, seed=0)
    groups: list[list[tuple[nn.Module, nn.Module, torch.optim.Optimizer]]] = []
    for group in sc.devices.values():
        members = []
        for _ in range(group.count):
            model, head = backbone.client_model(group.end_layer), backbone.exit_head(group.end_layer)
            opt = torch.optim.Adam([*model.parameters(), *head.parameters()],
                                   lr=sc.training.optimizer.lr)
            members.append((model, head, opt))
        groups.append(members)
    return sc, data, groups


def batches(data, groups, steps: int, batch: int, seed: int = 0):
    """``[step][group] -> (xs (K, B, C, H, W), ys (K, B))``: the same for every method."""
    g = torch.Generator().manual_seed(seed)
    n = len(data.y_train)
    out = []
    for _ in range(steps):
        per_group = []
        for members in groups:
            idx = torch.randint(0, n, (len(members), batch), generator=g)
            per_group.append((data.normalize(data.x_train[idx]), data.y_train[idx]))
        out.append(per_group)
    return out


def run_loop(groups, data_steps, loss_fn) -> None:
    for per_group in data_steps:
        for members, (xs, ys) in zip(groups, per_group):
            for k, (model, head, opt) in enumerate(members):
                h = model(xs[k])
                loss = loss_fn(head(h), ys[k])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss.item()
                h.detach()


def run_fused(groups, data_steps, channels_last: bool = False) -> None:
    fused = [FusedClients(*[list(t) for t in zip(*members)], channels_last=channels_last)
             for members in groups]
    for per_group in data_steps:
        for f, (xs, ys) in zip(fused, per_group):
            _acts, losses = f.step(xs, ys)
            losses.tolist()
    for f in fused:
        f.write_back()


def run_one_shot(groups, data_steps) -> None:
    for per_group in data_steps:
        for members, (xs, ys) in zip(groups, per_group):
            models, heads, opts = (list(t) for t in zip(*members))
            fused_client_steps(models, heads, opts, xs, ys)


def timed(methods: dict, groups, repeats: int, clock=time.perf_counter,
          sync=lambda: None) -> dict[str, float]:
    """``{name: (fn, args)} -> {name: best time}``; the methods take turns run by run
    (so a burst of load from elsewhere hits all alike), the first round warms up;
    ``sync()`` waits for queued device work before each clock reading."""
    best = {name: float("inf") for name in methods}
    for r in range(repeats + 1):
        for name, (fn, args) in methods.items():
            g = copy.deepcopy(groups)
            sync()
            t0 = clock()
            fn(g, *args)
            sync()
            dt = clock() - t0
            if r > 0:
                best[name] = min(best[name], dt)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="scenarios/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=20, help="client steps per client")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2", help="torch thread counts to measure")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall clock, or this process's CPU time (steadier on a shared host)")
    ap.add_argument("--one-shot", action="store_true", help="also time fused_client_steps")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: torch finds no CUDA GPU on this machine")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    sc, data, groups = build_clients(args.scenario)
    for members in groups:
        for model, head, _opt in members:
            model.to(device)
            head.to(device)
    bs = sc.training.batch_size
    n_clients = sum(len(m) for m in groups)
    data_steps = [[(xs.to(device), ys.to(device)) for xs, ys in per_group]
                  for per_group in batches(data, groups, args.steps, bs)]
    total = n_clients * args.steps
    loss_fn = nn.CrossEntropyLoss()
    print(f"{sc.name}: {n_clients} clients in groups of {[len(m) for m in groups]} at end layers "
          f"{[g.end_layer for g in sc.devices.values()]}, {sc.model.name} width {sc.model.width}, "
          f"batch {bs}, {args.steps} steps each, min of {args.repeats}, torch {torch.__version__}, "
          f"device {device}")
    print(f"clock: {args.clock}")
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    ratio = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        methods = {"loop": (run_loop, (data_steps, loss_fn)),
                   "fused": (run_fused, (data_steps, False)),
                   "fused-cl": (run_fused, (data_steps, True))}
        if args.one_shot:
            methods["one-shot"] = (run_one_shot, (data_steps,))
        t = timed(methods, groups, args.repeats, clock, sync)
        t_loop, t_fused, t_cl = t["loop"], t["fused"], t["fused-cl"]
        line = f"threads={threads}: " + " | ".join(
            f"{name} {total / v:6.1f} steps/s ({t_loop / v:.2f}x)" for name, v in t.items())
        print(line, flush=True)
        best = min(t_fused, t_cl)
        ratio[threads] = (total / t_loop, total / best, t_loop / best)
    print("loop vs best fused: " + "; ".join(
        f"{t} thread(s): {lo:.1f} vs {fu:.1f} steps/s, ratio {r:.2f}x"
        for t, (lo, fu, r) in ratio.items()))


if __name__ == "__main__":
    main()
