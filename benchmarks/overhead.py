"""Overhead of ``sflsim run`` over a hand-written PyTorch loop doing the same training.

Runs a quickstart-sized Hetero-SplitEE Sequential scenario with
:func:`sflsim.runner.run_scenario` (results written to a temporary folder, as
``sflsim run`` does), then a plain PyTorch loop that does the same work:

- the same setup: data, partition and initial weights from :func:`sflsim.runner.build`
  (the clients' models, exit heads, optimizers, schedulers and batch generators; the
  shared server-side stages, head and optimizer of the Sequential algorithm);
- the same batches in the same order: each client shuffles with its own generator
  once per local epoch, as :meth:`sflsim.algorithms.base.Algorithm.batches`;
- the same interleaving of client-side and server-side steps: the order sflsim
  executed them in, read from the sflsim run's ``algorithm.steps.losses`` (one entry per
  real step, in execution order; nothing in sflsim is patched);
- the same evaluations: accuracy of every client (client-side model, exit head,
  server-side model) on the same seeded test subset, at the same batch size, of the
  untrained models before round 1 (sflsim's round 0, the first row of ``rounds.csv``;
  see :mod:`sflsim.runner`) and after each round.

No SimPy, no FLOP counting, no result files, no checkpoints, no early-exit sweep in
the bare loop. At the end it checks that both produced the same losses, accuracies
and parameters, and prints the wall times and the ratio sflsim / bare last. The
accuracies compared are every client's after each round (``clients.csv``, which starts
at round 1) and round 0's means over clients (``rounds.csv``, rounded as written there).

Each side runs ``--repeats`` times, alternating (sflsim, bare, sflsim, bare, ...), and
keeps its fastest run (on a shared machine the minimum is the least-disturbed run).

    python benchmarks/overhead.py                     # ~5-8 min on 2 cores
    python benchmarks/overhead.py --rounds 1 --fraction 0.25 --repeats 1   # quick check
    python benchmarks/overhead.py --threads 1 2
    python benchmarks/overhead.py --set evaluation.early_exit.enabled=false
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from collections import deque

import numpy as np
import torch
from torch import nn

from sflsim.config.load import load_scenario
from sflsim.metrics.records import fraction
from sflsim.runner import build, child_seeds, run_scenario


def run_sflsim(scenario) -> tuple[float, dict]:
    out = tempfile.mkdtemp(prefix="sflsim_overhead_")
    try:
        t0 = time.perf_counter()
        res = run_scenario(scenario, out, overwrite=True)
        wall = time.perf_counter() - t0
        clients = res.clients  # read from the results directory, before it goes
    finally:
        shutil.rmtree(out, ignore_errors=True)
    alg = res.algorithm
    acc_cols = sorted(c for c in clients.columns if c in ("server_accuracy", "client_accuracy"))
    accs = [tuple(r) for r in clients[["round", "client_id", *acc_cols]].itertuples(index=False)]
    round0 = res.rounds[res.rounds["round"] == 0]  # the untrained models: means over clients
    assert len(round0) == 1, "rounds.csv has no round 0"
    accs0 = tuple(float(round0[c].iloc[0]) for c in acc_cols)
    last_round_wall = float(res.rounds["wall_time_s"].iloc[-1])
    return wall, {
        "order": [(where, cid) for where, cid, _, _ in alg.steps.losses],
        "losses": [v for _, _, v, _ in alg.steps.losses],
        "accs": accs,
        "accs0": accs0,
        "params": snapshot(alg.ctx.clients, alg.stages, alg.head),
        "tail_s": float(res.summary["wall_time_s"]) - last_round_wall,
    }


def snapshot(clients, stages: nn.Module, head: nn.Module) -> list[torch.Tensor]:
    mods = [m for c in clients for m in (c.model, c.exit_head)] + [stages, head]
    return [t.detach().clone() for m in mods for t in m.state_dict().values()]


@torch.inference_mode()
def accuracy(body, exit_head, server, x, y, batch_size):
    for m in (body, exit_head, server):
        m.eval()
    server_ok = client_ok = 0
    for xb, yb in zip(torch.split(x, batch_size), torch.split(y, batch_size)):
        h = body(xb)
        client_ok += int((exit_head(h).argmax(1) == yb).sum())
        server_ok += int((server(h).argmax(1) == yb).sum())
    for m in (body, exit_head, server):
        m.train()
    return server_ok / len(y), client_ok / len(y)


def run_bare(scenario, order: list[tuple[str, int]]) -> tuple[float, float, dict]:
    """The hand-written loop; returns (total wall s, setup wall s, results)."""
    t0 = time.perf_counter()
    ctx, alg = build(scenario)  # data, partition, initial weights: the same setup as sflsim
    clients, data = ctx.clients, ctx.data
    y_train = data.y_train
    cfg = scenario.training
    views, server_opt = alg.views, alg.server_optimizer  # Sequential: one shared server model
    schedulers = alg.steps.schedulers  # every client's and the server's cosine schedule
    x_test, y_test = data.x_test, data.y_test
    n_eval = scenario.evaluation.max_test_samples
    if n_eval and n_eval < len(y_test):
        keep = np.sort(np.random.default_rng(child_seeds(scenario)["test_subset"])
                       .permutation(len(y_test))[:n_eval])
        x_test, y_test = x_test[keep], y_test[keep]
    x_test = data.normalize(x_test)  # sflsim normalises a batch at a time; the same values
    loss_fn = nn.CrossEntropyLoss()
    steps_per_round = 2 * cfg.local_epochs * sum(
        math.ceil(len(c.indices) / cfg.batch_size) for c in clients)
    setup = time.perf_counter() - t0

    def batches(c):
        for _ in range(cfg.local_epochs):
            perm = torch.randperm(len(c.indices), generator=c.generator)
            yield from torch.split(torch.as_tensor(c.indices)[perm], cfg.batch_size)

    def evaluate():
        return [(c.client_id, *accuracy(c.model, c.exit_head, views[c.end_layer], x_test,
                                        y_test, scenario.evaluation.batch_size))
                for c in clients]

    # round 0: the untrained models, as sflsim evaluates them before round 1; rounds.csv
    # holds the means over clients, rounded to FRACTION_DECIMALS (records.round_row)
    accs0_each = evaluate()
    accs0 = (fraction(sum(ca for _, _, ca in accs0_each) / len(accs0_each)),   # client_accuracy
             fraction(sum(sa for _, sa, _ in accs0_each) / len(accs0_each)))   # server_accuracy
    losses, accs, pos = [], [], 0
    for r in range(1, cfg.rounds + 1):
        todo = {c.client_id: batches(c) for c in clients}
        sent = {c.client_id: deque() for c in clients}
        for where, cid in order[pos:pos + steps_per_round]:
            c = clients[cid]
            if where == "client":
                idx = next(todo[cid])
                x, y = data.train_images(idx), y_train[idx]
                h = c.model(x)
                loss = loss_fn(c.exit_head(h), y)
                c.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                c.optimizer.step()
                sent[cid].append((h.detach(), y))
            else:
                h, y = sent[cid].popleft()
                loss = loss_fn(views[c.end_layer](h), y)
                server_opt.zero_grad(set_to_none=True)
                loss.backward()
                server_opt.step()
            losses.append(loss.item())
        pos += steps_per_round
        for s in schedulers:
            s.step()
        accs.extend((r, cid, ca, sa) for cid, sa, ca in evaluate())
    wall = time.perf_counter() - t0
    assert pos == len(order), (pos, len(order))
    return wall, setup, {"losses": losses, "accs": accs, "accs0": accs0,
                         "params": snapshot(clients, alg.stages, alg.head)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="scenarios/quickstart.yaml")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fraction", type=float, default=0.5,
                    help="dataset.fraction (class-balanced share of train and test)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], dest="overrides",
                    help="extra scenario override a.b=value (repeatable)")
    args = ap.parse_args()
    scenario = load_scenario(args.scenario, [f"training.rounds={args.rounds}",
                                             f"dataset.fraction={args.fraction}", *args.overrides])
    assert scenario.algorithm.name == "hetero_splitee_sequential", scenario.algorithm.name
    print(f"scenario {args.scenario}: {scenario.num_clients} clients, rounds {args.rounds}, "
          f"fraction {args.fraction}, batch {scenario.training.batch_size}, "
          f"early exit {'on' if scenario.evaluation.early_exit.enabled else 'off'}, "
          f"torch {torch.__version__}", flush=True)
    summary = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        s_times, s_notail, b_times, ref, match = [], [], [], None, True
        for rep in range(args.repeats):
            ws, s = run_sflsim(scenario)
            s_times.append(ws)
            s_notail.append(ws - s["tail_s"])
            print(f"[{threads} thread(s)] sflsim run {rep + 1}: {ws:.2f} s (after the last round: "
                  f"{s['tail_s']:.2f} s, incl. the early-exit sweep)", flush=True)
            if ref is None:
                ref = s
            else:
                match &= same(ref, s, f"sflsim run 1 vs sflsim run {rep + 1}")
            wb, setup, b = run_bare(scenario, ref["order"])
            b_times.append(wb)
            print(f"[{threads} thread(s)] bare loop {rep + 1}: {wb:.2f} s (setup {setup:.2f} s)",
                  flush=True)
            match &= same(ref, b, f"sflsim vs bare, run {rep + 1}")
        summary.append((threads, min(s_times), min(b_times), match, min(s_notail)))
    for threads, s, b, match, notail in summary:
        print(f"[{threads} thread(s)] identical losses, accuracies and parameters: "
              f"{'yes' if match else 'NO'}")
        print(f"[{threads} thread(s)] wall (min of {args.repeats}): sflsim {s:.2f} s, bare {b:.2f} s;"
              f" sflsim up to the end of the last round (no early-exit sweep, last files) "
              f"{notail:.2f} s (ratio {notail / b:.3f})")
    for threads, s, b, _, _ in summary:
        print(f"ratio sflsim / bare, {threads} thread(s): {s / b:.3f} (target <= 1.05)")


def same(a: dict, b: dict, what: str) -> bool:
    ok_loss = a["losses"] == b["losses"]
    ok_acc = ([tuple(x) for x in a["accs"]] == [tuple(x) for x in b["accs"]]
              and tuple(a["accs0"]) == tuple(b["accs0"]))
    ok_par = len(a["params"]) == len(b["params"]) and all(
        torch.equal(p, q) for p, q in zip(a["params"], b["params"]))
    if not (ok_loss and ok_acc and ok_par):
        diff = max((float((p.double() - q.double()).abs().max()) for p, q in
                    zip(a["params"], b["params"]) if p.is_floating_point()), default=float("nan"))
        print(f"  MISMATCH {what}: losses {ok_loss}, accuracies {ok_acc}, parameters {ok_par} "
              f"(max |diff| {diff:.3g}); round 0 (client, server) {a['accs0']} vs {b['accs0']}")
    return ok_loss and ok_acc and ok_par


if __name__ == "__main__":
    main()
