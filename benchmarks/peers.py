"""The same cross-device FedAvg workloads in sflsim and in pfl-research: wall time and accuracy.

Workloads (``benchmarks/scenarios/pfl_cross_device.yaml``): the embedded Fashion-MNIST
subset (12,000 train / 2,000 test images), IID, 50 clients drawn per round, 1 local epoch,
batch 10, SGD lr 0.1 (no momentum, constant), the ``small_cnn`` backbone (20,490
parameters), uploads averaged by sample count, accuracy on all 2,000 test images of the
initial weights and every 10 rounds (and after the last round):

* ``1000x12``: 1,000 clients of 12 images, 60 rounds (the scenario as written);
* ``240x50``: 240 clients of 50 images, 40 rounds (``devices.clients.count=240``,
  ``training.rounds=40``).

Both sides get the same inputs, all taken from an sflsim build
(:func:`sflsim.runner.build`) of the scenario:

* **initial weights**: sflsim's backbone, built from its ``model`` child seed; its state
  dict is loaded into pfl's model;
* **partition**: ``ctx.clients[i].indices``;
* **per-round client sampling**: the clients sflsim draws in round ``r``
  (:func:`sflsim.runner.round_participants`, from its ``sampling`` seed stream) are the
  cohort pfl trains in its central iteration ``r - 1``: pfl's ``FederatedDataset`` takes
  any ``callable() -> user_id`` as its user sampler, called once per cohort member
  (``pfl/data/federated_dataset.py``, ``_distributed_sampler``; with several worker
  processes every worker makes every draw and keeps its share), so the sampler here
  replays sflsim's draws, cohort after cohort, in client-id order;
* **batch order**: pfl's ``Dataset.iter`` slices a user's data in stored order and never
  shuffles, so each user dataset is made (``make_dataset_fn``) with its samples in the
  order sflsim trains them that round: the ``k``-th ``torch.randperm`` of the client's
  generator (seeded with sflsim's ``batches`` child seed + client id) for the client's
  ``k``-th round; sflsim draws a permutation only in the rounds a client takes part.
  With more than one local epoch pfl would repeat the epoch's order where sflsim draws a
  new one (these workloads have one);
* **normalisation**: pfl's images are sflsim's, normalised once up front with sflsim's
  own :meth:`~sflsim.data.split.DatasetSplit.normalize` (elementwise, so the same floats
  sflsim makes per batch).

pfl (``pfl`` 0.6.0, PyTorch) is set up as its own image-classification benchmark does it
(``benchmarks/image_classification/pytorch/train.py`` of github.com/apple/pfl-research): a
``PyTorchModel`` (the torch module with ``loss`` and ``metrics`` methods;
``local_optimizer_create=torch.optim.SGD`` with the scenario's momentum and weight decay,
``central_optimizer=SGD(lr=1.0)``, so the averaged model difference is applied as it is),
``FederatedAveraging``, a
``SimulatedBackend`` with ``WeightByDatapoints`` (sample-weighted average, as sflsim's),
``NNAlgorithmParams(central_num_iterations=rounds, train_cohort_size=50,
val_cohort_size=0)``, ``NNTrainHyperParams(local_learning_rate=0.1, local_num_epochs=1,
local_batch_size=10)``, and central evaluation (``CentralEvaluationCallback``,
``NNEvalHyperParams(local_batch_size=500)``) on the 2,000 test images. Two departures:
``CentralEvaluationCallback(frequency=10)`` evaluates after central iterations 10, 20, ...
counted from 0 (after 11, 21, ... rounds) and not after the last one, so a subclass here
evaluates after rounds 10, 20, ... and the last, as sflsim does (and, as pfl's callback
does, before the first); and ``evaluation_frequency`` (pfl's metrics of each trained
user on its own data before and after local training) is set to the number of rounds,
so those only run in central iteration 0 (pfl always runs them there). ``run`` is called
with ``send_metrics_to_platform=False``: by default pfl's platform prints every
iteration's metrics to stdout, which is not simulation.

pfl parallelises a simulation only across worker processes (``torchrun``, or
``PFL_WORKER_ADDRESSES``; ``torch.distributed`` with gloo on CPU), each training its
share of every cohort and all-reducing the sums (``docs/source/guides/
simulation_distributed.rst``); one process trains the cohort's users one after the other.
``--pfl-configs`` lists the setups to try: ``procs=P`` processes (P > 1 through
``python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=P``),
``threads=T`` torch threads per process, ``channels_last`` (the model and images in
NHWC layout, which oneDNN's max-pooling runs faster on CPU). ``--sflsim-configs`` lists
sflsim's: ``fuse_clients`` (``training.fuse_clients``), ``channels_last``
(``training.channels_last``), ``parallel_clients=N`` (``training.parallel_clients``, on
host threads), ``processes`` (with it: ``training.parallel_backend: processes``, N worker
processes), ``threads=T`` (torch threads). The fastest of each side is compared.

Timing: every run is a fresh process (``python benchmarks/peers.py _run ...``), which
imports, loads the data and builds the run untimed, then times the simulation only:
sflsim's ``run_scenario`` minus its ``build`` (data loading, partition, models: the
wrapped ``sflsim.run.scenario.build`` is timed and subtracted), i.e. its round loop with the
round-0 evaluation; pfl's ``FederatedAveraging.run`` (after a barrier with several
processes; with its round-0 evaluation). Each configuration runs ``--repeats`` times and
keeps its fastest run; the runs are interleaved (repeat after repeat, each workload's
configurations in turn), so a machine's load falls on all of them alike. The whole
process's wall time (imports, data, build, torchrun start) is printed too.

Install pfl in its own virtualenv, so the system packages stay as they are (it sees the
system torch and the editable sflsim through ``--system-site-packages``)::

    python -m venv --system-site-packages /tmp/venv-pfl
    /tmp/venv-pfl/bin/pip install "pfl[pytorch]"

Run from the repository root (``--rounds 3`` for a quick check of both sides)::

    /tmp/venv-pfl/bin/python benchmarks/peers.py --repeats 3
    /tmp/venv-pfl/bin/python benchmarks/peers.py --workloads 1000x12 --rounds 3 --repeats 1

Per workload it prints each run, then the best configuration of each side, sflsim wall s,
pfl wall s, the ratio sflsim / pfl, both final accuracies and their gap, the load average
(``os.getloadavg``) before each run (lowest-highest) and the CPU model. Flower is not run
here (``benchmarks/flower_vs_sflsim.py`` compares it on an every-client workload).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "benchmarks" / "scenarios" / "pfl_cross_device.yaml"

#: workload name -> overrides of the scenario
WORKLOADS = {
    "1000x12": [],
    "240x50": ["devices.clients.count=240", "training.rounds=40"],
}

SFLSIM_CONFIGS = ["default", "fuse_clients", "channels_last", "fuse_clients,channels_last",
                  "parallel_clients=2,channels_last", "parallel_clients=2,processes,channels_last"]
#: ``procs=1,threads=2`` (one process, two torch threads) is left out: on the loaded 2-core
#: machine it took about 14x as long as one thread (README)
PFL_CONFIGS = ["procs=1", "procs=1,channels_last", "procs=2", "procs=2,channels_last"]


def parse_config(text: str) -> dict:
    """``"fuse_clients,threads=2"`` -> ``{"fuse_clients": True, "threads": 2}``
    (``default``: nothing set)."""
    out: dict = {}
    for token in filter(None, text.split(",")):
        if token == "default":
            continue
        key, _, value = token.partition("=")
        out[key] = int(value) if value else True
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ----- the runs (each in its own process) ---------------------------------------------

def scenario_for(workload: str, rounds: int | None, extra: list[str] = ()):
    from sflsim.config import load_scenario

    overrides = [*WORKLOADS[workload], *extra]
    if rounds is not None:
        overrides.append(f"training.rounds={rounds}")
    return load_scenario(SCENARIO, overrides)


def run_sflsim(spec: dict) -> dict:
    import torch

    import sflsim.run.scenario as start
    import sflsim.runner as runner

    cfg = parse_config(spec["config"])
    extra = []
    if cfg.get("fuse_clients"):
        extra.append("training.fuse_clients=true")
    if cfg.get("channels_last"):
        extra.append("training.channels_last=true")
    if "parallel_clients" in cfg:
        extra.append(f"training.parallel_clients={cfg['parallel_clients']}")
    if cfg.get("processes"):
        extra.append("training.parallel_backend=processes")
    torch.set_num_threads(cfg.get("threads", 1))
    scenario = scenario_for(spec["workload"], spec["rounds"], extra)

    build_s = []
    build = start.build

    def timed_build(s):
        t0 = time.perf_counter()
        out = build(s)
        build_s.append(time.perf_counter() - t0)
        return out

    start.build = timed_build  # run_scenario calls build by its name in sflsim.run.scenario
    try:
        t0 = time.perf_counter()
        result = runner.run_scenario(scenario)
        total = time.perf_counter() - t0
    finally:
        start.build = build
    rows = result.rounds[result.rounds["server_accuracy"].notna()]
    return {"sim_s": total - build_s[0], "build_s": build_s[0],
            "accuracy": {int(r): float(a) for r, a in zip(rows["round"], rows["server_accuracy"])},
            "threads": torch.get_num_threads()}


def run_pfl(spec: dict) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByDatapoints
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.central_evaluation import CentralEvaluationCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.internal.ops import pytorch_ops  # its import starts torch.distributed under torchrun
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel  # selects pfl's PyTorch ops
    from torch import nn

    from sflsim.runner import build, build_backbone, round_participants

    cfg = parse_config(spec["config"])
    torch.set_num_threads(cfg.get("threads", 1))
    np.random.seed(0)
    torch.manual_seed(0)
    dist = pytorch_ops.distributed
    rank, world = dist.global_rank, dist.world_size
    layout = torch.channels_last if cfg.get("channels_last") else torch.contiguous_format

    # ---- inputs, all from an sflsim build (untimed) ----
    scenario = scenario_for(spec["workload"], spec["rounds"])
    ctx, _ = build(scenario)
    scenario, data, seeds = ctx.scenario, ctx.data, ctx.seeds
    training, rounds, n = scenario.training, scenario.training.rounds, len(ctx.clients)
    cohort = training.participants(n)
    every = scenario.evaluation.every_rounds
    assert scenario.algorithm.name == "fedavg" and training.optimizer.name == "sgd"
    assert training.schedule.name == "constant" and training.local_epochs == 1
    assert cohort % world == 0, "each pfl worker must make the same number of draws"
    schedule = []  # clients of round r (1-based) = schedule[r - 1], as sflsim draws them
    for r in range(1, rounds + 1):
        absent, _ = round_participants(scenario, None, seeds["sampling"], r, 0.0)
        schedule.append([c for c in range(n) if c not in absent])
    # each client's permutation for each round it takes part in (its generator's k-th draw)
    perms: dict[tuple[int, int], torch.Tensor] = {}
    gens = [torch.Generator().manual_seed(seeds["batches"] + c) for c in range(n)]
    assert all(int(c.generator.initial_seed()) == seeds["batches"] + c.client_id
               for c in ctx.clients)
    for r, ids in enumerate(schedule, start=1):
        for c in ids:
            perms[r, c] = torch.randperm(len(ctx.clients[c].indices), generator=gens[c])
    x_all = data.normalize(data.x_train)  # sflsim's float32 (x / 255 - mean) / std
    y_all = data.y_train
    user_x = [x_all[torch.as_tensor(c.indices)].contiguous(memory_format=layout)
              for c in ctx.clients]
    user_y = [y_all[torch.as_tensor(c.indices)] for c in ctx.clients]
    x_test = data.normalize(data.x_test).contiguous(memory_format=layout)
    y_test = data.y_test

    class Net(nn.Module):
        """sflsim's small CNN (stages + head) with the ``loss`` and ``metrics`` methods
        pfl's ``PyTorchModel`` calls."""

        def __init__(self, body: nn.Module):
            super().__init__()
            self.body = body

        def forward(self, x):
            return self.body(x.contiguous(memory_format=layout))

        def loss(self, x, y):
            self.train()
            return F.cross_entropy(self(x), y)

        @torch.inference_mode()
        def metrics(self, x, y):
            self.eval()
            logits = self(x)
            n_ = len(y)
            return {"loss": Weighted(float(F.cross_entropy(logits, y, reduction="sum")), n_),
                    "accuracy": Weighted(float((logits.argmax(1) == y).sum()), n_)}

    # pfl's model: the architecture built afresh (any seed), then the state dict of the
    # sflsim run's initial global model (its ``model`` child seed) loaded into it
    fresh = build_backbone(scenario, data, 0)
    net = Net(nn.Sequential(*fresh.stages, fresh.head))
    net.body.load_state_dict(nn.Sequential(*ctx.backbone.stages, ctx.backbone.head).state_dict())
    net = net.to(memory_format=layout)

    # user ids encode (round, client): round r's cohort is sflsim's draw for round r
    def sampler_iter():
        for r, ids in enumerate(schedule, start=1):
            for c in ids:
                yield r * n + c
    draws = sampler_iter()

    def make_user(uid: int) -> Dataset:
        r, c = divmod(uid, n)
        p = perms[r, c]
        return Dataset((user_x[c][p], user_y[c][p]), user_id=str(c))

    train_data = FederatedDataset(make_user, lambda: next(draws))

    def no_val():
        raise RuntimeError("no validation cohort in this benchmark")
    val_data = FederatedDataset(make_user, no_val)

    accuracies: dict[int, float] = {}

    def record(round_: int, metrics: Metrics) -> Metrics:
        for name, value in metrics:
            if str(name) == "Central val | accuracy":
                accuracies[round_] = float(getattr(value, "overall_value", value))
        return metrics

    class Evaluation(CentralEvaluationCallback):
        """Central evaluation before training and after rounds ``every``, ``2 every``, ...
        and the last (pfl's own counts central iterations from 0 and skips the last)."""

        def on_train_begin(self, *, model):
            return record(0, super().on_train_begin(model=model))

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            done = central_iteration + 1
            if done % every and done != rounds:
                return False, Metrics()
            stop, metrics = self._eval(model)
            return stop, record(done, metrics)

    local_sgd = functools.partial(torch.optim.SGD, momentum=training.optimizer.momentum,
                                  weight_decay=training.optimizer.weight_decay)
    model = PyTorchModel(model=net, local_optimizer_create=local_sgd,
                         central_optimizer=torch.optim.SGD(
                             [p for p in net.parameters() if p.requires_grad], 1.0))
    backend = SimulatedBackend(training_data=train_data, val_data=val_data,
                               postprocessors=[WeightByDatapoints()])
    algorithm = FederatedAveraging()
    algorithm_params = NNAlgorithmParams(central_num_iterations=rounds,
                                         evaluation_frequency=rounds,
                                         train_cohort_size=cohort, val_cohort_size=0)
    train_params = NNTrainHyperParams(local_learning_rate=training.optimizer.lr,
                                      local_num_epochs=training.local_epochs,
                                      local_batch_size=training.batch_size)
    eval_params = NNEvalHyperParams(local_batch_size=scenario.evaluation.batch_size)
    callbacks = [Evaluation(Dataset((x_test, y_test)), model_eval_params=eval_params,
                            frequency=every)]
    if world > 1:
        torch.distributed.barrier()
    t0 = time.perf_counter()
    algorithm.run(algorithm_params=algorithm_params, backend=backend, model=model,
                  model_train_params=train_params, model_eval_params=eval_params,
                  callbacks=callbacks, send_metrics_to_platform=False)
    sim_s = time.perf_counter() - t0
    import pfl
    return {"sim_s": sim_s, "accuracy": accuracies, "rank": rank, "world": world,
            "threads": torch.get_num_threads(), "pfl": pfl.__version__,
            "torch": torch.__version__}


def worker(argv: list[str]) -> None:
    side, spec = argv[0], json.loads(argv[1])
    import warnings
    warnings.simplefilter("ignore")
    out = run_sflsim(spec) if side == "sflsim" else run_pfl(spec)
    if out.get("rank", 0) == 0:
        print("RESULT " + json.dumps(out), flush=True)


# ----- the driver ----------------------------------------------------------------------

def launch(python: str, side: str, spec: dict, timeout: float) -> dict:
    cfg = parse_config(spec["config"])
    procs = cfg.get("procs", 1) if side == "pfl" else 1
    cmd = [python]
    if procs > 1:
        cmd += ["-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc_per_node={procs}"]
    cmd += [str(Path(__file__).resolve()), "_run", side, json.dumps(spec)]
    env = {**os.environ, "OMP_NUM_THREADS": str(cfg.get("threads", 1)),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"{side} {spec} failed (exit {proc.returncode})")
    return {**json.loads(lines[-1][len("RESULT "):]), "process_s": wall, "load": load,
            "side": side, "config": spec["config"]}


def final(run: dict) -> tuple[int, float]:
    r = max(run["accuracy"], key=int)
    return int(r), run["accuracy"][r]


def best_of(runs: list[dict], side: str) -> tuple[dict, dict[str, dict]]:
    """(the fastest run of ``side``, ``{configuration: its fastest run}``)."""
    by_config: dict[str, dict] = {}
    for run in runs:
        if run["side"] == side and (run["config"] not in by_config
                                    or run["sim_s"] < by_config[run["config"]]["sim_s"]):
            by_config[run["config"]] = run
    return min(by_config.values(), key=lambda run: run["sim_s"]), by_config


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_run"]:
        worker(argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of every workload (default: the workload's, 60 and 40)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each configuration; the fastest is kept")
    ap.add_argument("--sflsim-configs", nargs="+", default=SFLSIM_CONFIGS)
    ap.add_argument("--pfl-configs", nargs="+", default=PFL_CONFIGS)
    ap.add_argument("--pfl-python", default=sys.executable,
                    help="Python with pfl installed (default: this one)")
    ap.add_argument("--sflsim-python", default=sys.executable)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    args = ap.parse_args(argv)

    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}",
          flush=True)
    runs: dict[str, list[dict]] = {w: [] for w in args.workloads}
    for rep in range(args.repeats):
        for w in args.workloads:
            plan = [("sflsim", c, args.sflsim_python) for c in args.sflsim_configs] + \
                   [("pfl", c, args.pfl_python) for c in args.pfl_configs]
            for side, config, python in plan:
                spec = {"workload": w, "rounds": args.rounds, "config": config}
                run = launch(python, side, spec, args.timeout)
                runs[w].append(run)
                accs = ", ".join(f"{r}: {a:.4f}" for r, a in
                                 sorted(run["accuracy"].items(), key=lambda kv: int(kv[0])))
                print(f"[{rep + 1}/{args.repeats}] {w} {side} {config}: simulation "
                      f"{run['sim_s']:.2f} s (process {run['process_s']:.2f} s), load "
                      f"{run['load']:.2f}, accuracy by round {{{accs}}}", flush=True)

    for w, wruns in runs.items():
        s, s_all = best_of(wruns, "sflsim")
        p, p_all = best_of(wruns, "pfl")
        (rs, acc_s), (rp, acc_p) = final(s), final(p)
        assert rs == rp
        loads = [r["load"] for r in wruns]
        changes = [*WORKLOADS[w], *([] if args.rounds is None else [f"--rounds {args.rounds}"])]
        print(f"\n== {w} ({', '.join(changes) or 'the scenario as written'}) ==")
        for name, table in (("sflsim", s_all), ("pfl", p_all)):
            print(f"{name} best of {args.repeats} per configuration: " + ", ".join(
                f"{c} {r['sim_s']:.2f} s" for c, r in sorted(table.items(),
                                                          key=lambda kv: kv[1]["sim_s"])))
        print(f"sflsim wall {s['sim_s']:.2f} s ({s['config']}), pfl {p.get('pfl', '?')} wall "
              f"{p['sim_s']:.2f} s ({p['config']}), ratio sflsim/pfl "
              f"{s['sim_s'] / p['sim_s']:.3f}")
        gap = 100 * (acc_s - acc_p)
        print(f"final accuracy (round {rs}): sflsim {100 * acc_s:.2f}%, pfl {100 * acc_p:.2f}%, "
              f"gap {gap:+.2f} points")
        print(f"load average (1 min, before each run): {min(loads):.2f}-{max(loads):.2f}; "
              f"CPU {cpu_model()} x {os.cpu_count()}")


if __name__ == "__main__":
    main()
