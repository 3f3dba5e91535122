"""The same FedAvg workloads in sflsim, pfl-research and Flower: wall time and accuracy.

Workloads:

* ``1000x12`` and ``240x50``, against pfl-research (``benchmarks/scenarios/
  pfl_cross_device.yaml``, cross-device): the embedded Fashion-MNIST subset (12,000 train /
  2,000 test images), IID, 50 clients drawn per round, 1 local epoch, batch 10, SGD lr 0.1
  (no momentum, constant), the ``small_cnn`` backbone (20,490 parameters), uploads averaged
  by sample count, accuracy on all 2,000 test images of the initial weights and every 10
  rounds (and after the last round). ``1000x12``: 1,000 clients of 12 images, 60 rounds
  (the scenario as written); ``240x50``: 240 clients of 50 images, 40 rounds
  (``devices.clients.count=240``, ``training.rounds=40``).
* ``fedavg_cnn``, against Flower (``scenarios/bench_fedavg_cnn.yaml``): the same data and
  backbone, 12 clients, IID, 3 rounds with every client every round, 1 local epoch, batch
  32, SGD lr 0.05 (no momentum, constant), accuracy of the initial weights and after every
  round.

Both sides of a workload get the same inputs, all taken from an sflsim build
(:func:`sflsim.runner.build`) of the scenario:

* **initial weights**: sflsim's backbone, built from its ``model`` child seed; its state
  dict is loaded into the peer's model;
* **partition**: ``ctx.clients[i].indices``;
* **per-round client sampling** (pfl): the clients sflsim draws in round ``r``
  (:func:`sflsim.runner.round_participants`, from its ``sampling`` seed stream) are the
  cohort pfl trains in its central iteration ``r - 1``: pfl's ``FederatedDataset`` takes
  any ``callable() -> user_id`` as its user sampler, called once per cohort member
  (``pfl/data/federated_dataset.py``, ``_distributed_sampler``; with several worker
  processes every worker makes every draw and keeps its share), so the sampler here
  replays sflsim's draws, cohort after cohort, in client-id order. Flower's workload
  trains every client every round (checked), as Flower's ``FedAvg`` with
  ``fraction_train=1.0`` does;
* **batch order**: the ``k``-th ``torch.randperm`` of the client's generator (seeded with
  sflsim's ``batches`` child seed + client id) orders its samples in the client's ``k``-th
  round, as in sflsim, which draws a permutation only in the rounds a client takes part.
  pfl's ``Dataset.iter`` slices a user's data in stored order and never shuffles, so each
  pfl user dataset is made (``make_dataset_fn``) in that order (with more than one local
  epoch pfl would repeat the epoch's order where sflsim draws a new one; these workloads
  have one); each Flower client replays its generator's draws up to the round it is in;
* **normalisation**: pfl's images are normalised once up front with sflsim's own
  :meth:`~sflsim.data.split.DatasetSplit.normalize` (elementwise, so the same floats sflsim
  makes per batch); Flower's clients normalise each batch as sflsim does.

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
NHWC layout, which oneDNN's max-pooling runs faster on CPU).

Flower (``flwr`` 1.42.0, with ``ray`` 2.55.1 from ``flwr[simulation]``) runs its
Simulation Engine with the Message API that current Flower apps are written in: a
``ClientApp`` whose ``@train()`` function trains the node's partition (node config
``partition-id``) and replies with an ``ArrayRecord`` of the weights and
``num-examples``; a ``ServerApp`` whose ``@main()`` runs ``flwr.serverapp.strategy.FedAvg``
(``fraction_train=1.0``, ``fraction_evaluate=0.0``, weighted by ``num-examples``)
through ``strategy.start(..., evaluate_fn=...)``, the central evaluation on the 2,000 test
images that ``start`` calls before the first round and after each round (scoring the
rounds sflsim scores); and ``flwr.simulation.run_simulation(server_app, client_app,
num_supernodes=12, backend_config={"client_resources": {"num_cpus": k}})`` on the Ray
backend. Flower 1.42 marks both Python entry points deprecated: the legacy
``start_simulation`` (``NumPyClient``s, the Ray virtual client engine) since 1.13, and
``run_simulation`` in favour of ``flwr run``, the CLI that runs a Flower App project
(``pyproject.toml``) on a SuperLink. ``run_simulation`` runs the same ``ServerApp`` and
``ClientApp`` in the same Simulation Engine without a SuperLink or a separate simulation
process, so ``flwr run`` would add process start-up to Flower's side, not take any away.
Ray is started here (``ray.init(num_cpus=<all CPUs>)``, timed apart; Flower uses a Ray that
is already running) and the training images are put in Ray's object store once.
``--flower-configs`` lists the setups to try: ``cpus=k`` (``client_resources={"num_cpus":
k}``, and ``k`` torch threads in each actor: ``cpus=1`` runs one actor per core),
``channels_last`` (client and evaluation models and images in NHWC), ``threads=T`` (torch
threads of the driver, which runs the central evaluation).

``--sflsim-configs`` lists sflsim's: ``fuse_clients`` (``training.fuse_clients``),
``channels_last`` (``training.channels_last``), ``parallel_clients=N``
(``training.parallel_clients``, on host threads), ``processes`` (with it:
``training.parallel_backend: processes``, N worker processes), ``threads=T`` (torch
threads); by default each workload
has its own list (``SFLSIM_CONFIGS``). The fastest of each side is compared.

``--floor`` adds, on the pfl workloads, the training steps alone (:func:`run_floor`):
``procs=P`` forked processes (``--floor-configs``, default ``procs=2,channels_last``) train
every round's cohort between them, each client from the initial weights with its batches
(sample order, batch size, learning rate as above): forward, cross-entropy, backward, SGD
step, and nothing else (no simulation, evaluation, aggregation or weights sent). That is the
least time any simulator that runs these steps on this machine can take; it is printed
as a share of pfl's wall time, with sflsim's time over it. ``evaluate`` in a floor
configuration (``procs=2,channels_last,evaluate``) adds the workload's evaluations (the
initial weights, every ``evaluation.every_rounds`` rounds and the last; each process the
forward passes of its share of the test batches): the least time of any simulator that
also reports the workload's accuracies, timed in the same run.

Each side runs in its own Python (``--sflsim-python``, default this one; ``--pfl-python``,
default ``/tmp/venv-pfl/bin/python``; ``--flower-python``, default
``/tmp/venv-flwr/bin/python``), so one command drives all three; a peer whose Python is
missing or cannot import it is reported as skipped, with the command that installs it,
and so is every workload none of whose peers runs. ``--peers`` and ``--workloads`` pick
what to run.

Timing: every run is a fresh process (``python benchmarks/peers.py _run ...``, in its own
session), which imports, loads the data and builds the run untimed, then times the
simulation only: sflsim's ``run_scenario`` minus its ``build`` (data loading, partition,
models: the wrapped ``sflsim.run.entry.build`` is timed and subtracted), i.e. its round
loop with the round-0 evaluation; pfl's ``FederatedAveraging.run`` (after a barrier with
several processes; with its round-0 evaluation); Flower's ``run_simulation`` (its actors'
start, the rounds with the round-0 evaluation, its shutdown; after ``ray.init``), with
``ray.init`` and ``strategy.start`` alone (the rounds and evaluations) printed beside it.
Each configuration runs ``--repeats`` times and keeps its fastest run; the runs are
interleaved (repeat after repeat, each workload's configurations in turn), so a machine's
load falls on all of them alike. The whole process's wall time (imports, data, build,
torchrun or Ray start) is printed too. Ray's actors outlive their driver by some seconds:
each run's session is waited for (untimed) before the next run starts.

Install the peers in their own virtualenvs, so the system packages stay as they are (they
see the system torch and the editable sflsim through ``--system-site-packages``)::

    python -m venv --system-site-packages /tmp/venv-pfl
    /tmp/venv-pfl/bin/pip install "pfl[pytorch]"
    python -m venv --system-site-packages /tmp/venv-flwr
    /tmp/venv-flwr/bin/pip install "flwr[simulation]"

Run from the repository root (``--rounds 3`` for a quick check of the pfl workloads)::

    python benchmarks/peers.py --repeats 3
    python benchmarks/peers.py --workloads fedavg_cnn --repeats 3
    python benchmarks/peers.py --workloads 1000x12 --rounds 3 --repeats 1
    python benchmarks/peers.py --workloads 1000x12 240x50 --floor

Per workload it prints each run, then the best configuration of each side, sflsim wall s,
the peer's wall s, the ratio sflsim / peer, both final accuracies and their gap, the load
average (``os.getloadavg``) before each run (lowest-highest) and the CPU model; for
Flower also the ratios with its Ray start added and against its strategy alone.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PFL_SCENARIO = ROOT / "benchmarks" / "scenarios" / "pfl_cross_device.yaml"
FLOWER_SCENARIO = ROOT / "scenarios" / "bench_fedavg_cnn.yaml"

#: workload name -> (scenario, overrides, the peers it is compared with)
WORKLOADS = {
    "1000x12": (PFL_SCENARIO, [], ("pfl",)),
    "240x50": (PFL_SCENARIO, ["devices.clients.count=240", "training.rounds=40"], ("pfl",)),
    "fedavg_cnn": (FLOWER_SCENARIO, [], ("flower",)),
}

#: sflsim's configurations to try on each workload (``--sflsim-configs`` replaces them all)
SFLSIM_CONFIGS = {
    "1000x12": ["default", "fuse_clients", "channels_last", "fuse_clients,channels_last",
                "parallel_clients=2,channels_last", "parallel_clients=2,processes,channels_last"],
    "240x50": ["default", "fuse_clients", "channels_last", "fuse_clients,channels_last",
               "parallel_clients=2,channels_last", "parallel_clients=2,processes,channels_last"],
    "fedavg_cnn": ["channels_last", "parallel_clients=2,channels_last",
                   "parallel_clients=2,processes,channels_last", "fuse_clients,channels_last"],
}
#: ``procs=1,threads=2`` (one process, two torch threads) is left out: on the loaded 2-core
#: machine it took about 14x as long as one thread (README)
PFL_CONFIGS = ["procs=1", "procs=1,channels_last", "procs=2", "procs=2,channels_last"]
#: ``cpus=2`` (one actor with two torch threads) is left out: on 2 cores it took 190-210 s
#: where ``cpus=1`` took 15-30 s (README)
FLOWER_CONFIGS = ["cpus=1,channels_last", "cpus=1"]

#: each peer: its virtualenv's python (the default of ``--<peer>-python``), an import
#: that fails without it, and how to install it
PEERS = {
    "pfl": {"python": "/tmp/venv-pfl/bin/python", "probe": "import pfl",
            "install": 'python -m venv --system-site-packages /tmp/venv-pfl && '
                       '/tmp/venv-pfl/bin/pip install "pfl[pytorch]"'},
    "flower": {"python": "/tmp/venv-flwr/bin/python",
               "probe": "import flwr.simulation, flwr.serverapp.strategy, ray",
               "install": 'python -m venv --system-site-packages /tmp/venv-flwr && '
                          '/tmp/venv-flwr/bin/pip install "flwr[simulation]"'},
}


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
    from sflsim.provenance import cpu_model as model

    return model()


# ----- the runs (each in its own process) ---------------------------------------------

def scenario_for(workload: str, rounds: int | None, extra: list[str] = ()):
    from sflsim.config import load_scenario

    path, changes, _ = WORKLOADS[workload]
    overrides = [*changes, *extra]
    if rounds is not None:
        overrides.append(f"training.rounds={rounds}")
    return load_scenario(path, overrides)


def run_sflsim(spec: dict) -> dict:
    import torch

    import sflsim.run.entry as start
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

    start.build = timed_build  # run_scenario calls build by its name in sflsim.run.entry
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


def cross_device_inputs(spec: dict, layout) -> dict:
    """What both sides of a pfl workload start from, taken from an sflsim build (untimed):
    the build's context, its scenario, ``schedule`` (the clients of round ``r``, 1-based,
    are ``schedule[r - 1]``, as sflsim draws them), ``perms[r, c]`` (client ``c``'s sample
    order in round ``r``: its generator's ``k``-th ``randperm`` in its ``k``-th round), and
    each client's normalised images (``user_x[c]``, float32 ``(n_c, 1, 28, 28)`` in
    ``layout``) and labels (``user_y[c]``, int64 ``(n_c,)``)."""
    import torch

    from sflsim.runner import build, round_participants

    scenario = scenario_for(spec["workload"], spec["rounds"])
    ctx, _ = build(scenario)
    scenario, data, seeds = ctx.scenario, ctx.data, ctx.seeds
    training, n = scenario.training, len(ctx.clients)
    assert scenario.algorithm.name == "fedavg" and training.optimizer.name == "sgd"
    assert training.schedule.name == "constant" and training.local_epochs == 1
    schedule = []
    for r in range(1, training.rounds + 1):
        absent, _ = round_participants(scenario, None, seeds["sampling"], r, 0.0)
        schedule.append([c for c in range(n) if c not in absent])
    perms: dict[tuple[int, int], torch.Tensor] = {}
    gens = [torch.Generator().manual_seed(seeds["batches"] + c) for c in range(n)]
    assert all(int(c.generator.initial_seed()) == seeds["batches"] + c.client_id
               for c in ctx.clients)
    for r, ids in enumerate(schedule, start=1):
        for c in ids:
            perms[r, c] = torch.randperm(len(ctx.clients[c].indices), generator=gens[c])
    x_all = data.normalize(data.x_train)  # sflsim's float32 (x / 255 - mean) / std
    user_x = [x_all[torch.as_tensor(c.indices)].contiguous(memory_format=layout)
              for c in ctx.clients]
    user_y = [data.y_train[torch.as_tensor(c.indices)] for c in ctx.clients]
    x_test = data.normalize(data.x_test).contiguous(memory_format=layout)
    return {"ctx": ctx, "scenario": scenario, "schedule": schedule, "perms": perms,
            "user_x": user_x, "user_y": user_y, "x_test": x_test}


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

    from sflsim.runner import build_backbone

    cfg = parse_config(spec["config"])
    torch.set_num_threads(cfg.get("threads", 1))
    np.random.seed(0)
    torch.manual_seed(0)
    dist = pytorch_ops.distributed
    rank, world = dist.global_rank, dist.world_size
    layout = torch.channels_last if cfg.get("channels_last") else torch.contiguous_format

    # ---- inputs, all from an sflsim build (untimed) ----
    inputs = cross_device_inputs(spec, layout)
    ctx, scenario, schedule, perms = (inputs["ctx"], inputs["scenario"], inputs["schedule"],
                                      inputs["perms"])
    data, user_x, user_y = ctx.data, inputs["user_x"], inputs["user_y"]
    training, rounds, n = scenario.training, scenario.training.rounds, len(ctx.clients)
    cohort = training.participants(n)
    every = scenario.evaluation.every_rounds
    assert cohort % world == 0, "each pfl worker must make the same number of draws"
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
            record(done, metrics)
            # pfl merges iteration 0's metrics with on_train_begin's and refuses the same
            # names twice (a 1-round run); they are recorded above either way
            return stop, metrics if central_iteration else Metrics()

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


def _floor_worker(rank: int, procs: int, inputs: dict, barrier, results) -> None:
    """One process of :func:`run_floor`: its share of every round's cohort, step by step."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    net, state, lr, batch = inputs["net"], inputs["state"], inputs["lr"], inputs["batch"]
    user_x, user_y, perms = inputs["user_x"], inputs["user_y"], inputs["perms"]
    schedule, evaluated = inputs["schedule"], inputs["evaluated"]
    x_test, eval_batch = inputs["x_test"], inputs["eval_batch"]
    starts = list(range(0, len(x_test), eval_batch))[rank::procs]  # its share of the batches

    def evaluate() -> float:
        t = time.perf_counter()
        net.eval()
        with torch.inference_mode():
            for s in starts:
                net(x_test[s:s + eval_batch]).argmax(1)
        net.train()
        return time.perf_counter() - t

    barrier.wait()
    t0, steps, eval_s = time.perf_counter(), 0, 0.0
    if 0 in evaluated:
        eval_s += evaluate()
    for r, ids in enumerate(schedule, start=1):
        for c in ids[rank::procs]:
            net.load_state_dict(state)
            opt = torch.optim.SGD(net.parameters(), lr=lr)
            order = perms[r, c]
            for i in range(0, len(order), batch):
                idx = order[i:i + batch]
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(net(user_x[c][idx]), user_y[c][idx]).backward()
                opt.step()
                steps += 1
        if r in evaluated:
            eval_s += evaluate()
    results.put((rank, time.perf_counter() - t0, steps, eval_s))


def run_floor(spec: dict) -> dict:
    """The training steps alone: a lower bound of any simulator's wall time on a pfl
    workload. ``procs`` processes (forked; one torch thread each) train every round's cohort
    between them, each client from the initial weights with the workload's batches (its
    sample order each round, batch size, SGD learning rate): forward, cross-entropy,
    backward, SGD step. Nothing else: no simulation, evaluation, aggregation or transfer of
    weights (the weights' values do not change what a step costs on the CPU). ``sim_s``
    is the wall time from the processes' common start to the last one's end."""
    import multiprocessing

    import torch
    from torch import nn

    cfg = parse_config(spec["config"])
    procs = cfg.get("procs", 2)
    layout = torch.channels_last if cfg.get("channels_last") else torch.contiguous_format
    inputs = cross_device_inputs(spec, layout)
    backbone, training = inputs["ctx"].backbone, inputs["scenario"].training
    net = nn.Sequential(*backbone.stages, backbone.head).to(memory_format=layout).train()
    rounds, every = training.rounds, inputs["scenario"].evaluation.every_rounds
    evaluated = {r for r in range(rounds + 1) if r % every == 0 or r == rounds} \
        if cfg.get("evaluate") else set()
    work = {**inputs, "net": net, "state": {k: v.clone() for k, v in net.state_dict().items()},
            "lr": training.optimizer.lr, "batch": training.batch_size, "evaluated": evaluated,
            "eval_batch": inputs["scenario"].evaluation.batch_size}
    mp = multiprocessing.get_context("fork")
    barrier, results = mp.Barrier(procs + 1), mp.Queue()
    workers = [mp.Process(target=_floor_worker, args=(rank, procs, work, barrier, results))
               for rank in range(procs)]
    for w in workers:
        w.start()
    barrier.wait()
    t0 = time.perf_counter()
    done = [results.get() for _ in workers]
    sim_s = time.perf_counter() - t0
    for w in workers:
        w.join()
    return {"sim_s": sim_s, "accuracy": {}, "procs": procs,
            "steps": sum(d[2] for d in done), "step_s": [round(d[1], 3) for d in sorted(done)],
            "eval_s": [round(d[3], 3) for d in sorted(done)], "evaluations": len(evaluated),
            "threads": 1}


def run_flower(spec: dict) -> dict:
    """One Flower simulation (Message API: ``ServerApp``, ``ClientApp``, ``FedAvg`` of
    ``flwr.serverapp.strategy``, ``flwr.simulation.run_simulation`` on the Ray backend)
    of a workload where every client trains every round."""
    import logging

    import numpy as np
    import ray
    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation
    from torch import nn

    from sflsim.models import MODELS
    from sflsim.runner import build, round_participants

    cfg = parse_config(spec["config"])
    cpus = cfg.get("cpus", 1)  # client_resources num_cpus, and torch threads per actor
    torch.set_num_threads(cfg.get("threads", 1))  # this process: the central evaluation
    logging.getLogger("flwr").setLevel(logging.WARNING)

    # ---- inputs, all from an sflsim build (untimed) ----
    ctx, _ = build(scenario_for(spec["workload"], spec["rounds"]))
    scenario, data, seeds = ctx.scenario, ctx.data, ctx.seeds
    training, rounds, n = scenario.training, scenario.training.rounds, len(ctx.clients)
    every = scenario.evaluation.every_rounds
    assert scenario.algorithm.name == "fedavg" and training.optimizer.name == "sgd"
    assert training.schedule.name == "constant"
    for r in range(1, rounds + 1):  # Flower's FedAvg here trains every client every round
        absent, _ = round_participants(scenario, None, seeds["sampling"], r, 0.0)
        assert not absent, "the Flower workload must train every client every round"
    parts = [np.asarray(c.indices) for c in ctx.clients]  # sflsim's partition, client order
    batch_seeds = [int(c.generator.initial_seed()) for c in ctx.clients]
    assert batch_seeds == [seeds["batches"] + c.client_id for c in ctx.clients]
    arch = {"name": scenario.model.name, "in_channels": data.in_channels,
            "image_size": data.image_size, "num_classes": data.num_classes,
            "width": scenario.model.width, "kwargs": scenario.model.builder_kwargs(),
            "layout": torch.channels_last if cfg.get("channels_last")
            else torch.contiguous_format}

    def new_model() -> nn.Sequential:
        """The architecture, built afresh (any seed: its weights are replaced)."""
        b = MODELS[arch["name"]](in_channels=arch["in_channels"], image_size=arch["image_size"],
                                 num_classes=arch["num_classes"], width=arch["width"], seed=0,
                                 **arch["kwargs"])
        return nn.Sequential(*b.stages, b.head).to(memory_format=arch["layout"])

    # sflsim's initial global model (its ``model`` child seed)
    init_state = nn.Sequential(*ctx.backbone.stages, ctx.backbone.head).state_dict()
    x_test = data.normalize(data.x_test).contiguous(memory_format=arch["layout"])
    y_test = data.y_test
    mean, std = data.mean, data.std  # the clients normalise each batch as sflsim does
    eval_bs = scenario.evaluation.batch_size
    lr, momentum, wd = (float(training.optimizer.lr), float(training.optimizer.momentum),
                        float(training.optimizer.weight_decay))
    batch_size, epochs = training.batch_size, training.local_epochs

    t0 = time.perf_counter()
    ray.init(num_cpus=cfg.get("ray_cpus", os.cpu_count() or 1), include_dashboard=False,
             log_to_driver=False, logging_level=logging.WARNING)
    ray_init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    data_ref = ray.put((data.x_train.numpy(), data.y_train.numpy()))  # once, for all actors
    put_s = time.perf_counter() - t0

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(cpus)
        x_all, y_all = ray.get(data_ref)  # zero-copy numpy views of the object store
        c = int(context.node_config["partition-id"])
        round_ = int(msg.content["config"]["server-round"])
        model = new_model()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        sgd = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd)
        loss_fn = nn.CrossEntropyLoss()
        indices = parts[c]
        gen = torch.Generator().manual_seed(batch_seeds[c])
        for _ in range((round_ - 1) * epochs):  # sflsim's generator state: one draw per epoch
            torch.randperm(len(indices), generator=gen)
        for _ in range(epochs):
            order = torch.randperm(len(indices), generator=gen)
            for b in np.array_split(indices[order.numpy()],
                                    range(batch_size, len(indices), batch_size)):
                xb = torch.from_numpy(x_all[b]).to(torch.float32).div_(torch.tensor(255.0))
                xb = xb.sub_(torch.tensor(mean).view(1, -1, 1, 1)).div_(
                    torch.tensor(std).view(1, -1, 1, 1))
                xb = xb.contiguous(memory_format=arch["layout"])
                loss = loss_fn(model(xb), torch.from_numpy(y_all[b]))
                sgd.zero_grad(set_to_none=True)
                loss.backward()
                sgd.step()
        reply = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                            "metrics": MetricRecord({"num-examples": len(indices)})})
        return Message(content=reply, reply_to=msg)

    eval_model = new_model()
    accuracies: dict[int, float] = {}

    @torch.inference_mode()
    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Central evaluation on the test images, when sflsim evaluates: the initial
        weights (round 0), every ``every`` rounds and the last."""
        if server_round % every and server_round != rounds:
            return None
        eval_model.load_state_dict(arrays.to_torch_state_dict())
        eval_model.eval()
        correct = sum(int((eval_model(xb).argmax(1) == yb).sum()) for xb, yb in
                      zip(torch.split(x_test, eval_bs), torch.split(y_test, eval_bs)))
        accuracies[server_round] = correct / len(y_test)
        return MetricRecord({"accuracy": accuracies[server_round]})

    server_app = ServerApp()
    strategy_s: list[float] = []

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n,
                          min_evaluate_nodes=0, min_available_nodes=n)
        t0 = time.perf_counter()
        strategy.start(grid=grid, initial_arrays=ArrayRecord(init_state), num_rounds=rounds,
                       evaluate_fn=evaluate)
        strategy_s.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=n,
                   backend_config={"client_resources": {"num_cpus": cpus, "num_gpus": 0.0}})
    sim_s = time.perf_counter() - t0
    expected = {r for r in range(rounds + 1) if r % every == 0 or r == rounds}
    assert set(accuracies) == expected and strategy_s, "the Flower run did not finish"
    import flwr
    return {"sim_s": sim_s, "strategy_s": strategy_s[0], "ray_init_s": ray_init_s,
            "put_s": put_s, "accuracy": accuracies, "threads": torch.get_num_threads(),
            "flwr": flwr.__version__, "ray": ray.__version__, "torch": torch.__version__}


def worker(argv: list[str]) -> None:
    side, spec = argv[0], json.loads(argv[1])
    import warnings
    warnings.simplefilter("ignore")
    out = {"sflsim": run_sflsim, "pfl": run_pfl, "flower": run_flower,
           "floor": run_floor}[side](spec)
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
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           # Flower and Ray: no usage reports over the network, every worker's log kept
           "FLWR_TELEMETRY_ENABLED": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    # its own session: what it starts (torchrun's workers, Ray's processes) is found
    # by session id afterwards
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stdout, stderr = "", f"timed out after {timeout:.0f} s"
        end_session(proc.pid, grace=0)
        proc.communicate()
    wall = time.perf_counter() - t0
    # Ray's actors outlive their driver by seconds: wait for them (untimed), so that
    # they do not run into the next run
    end_session(proc.pid, grace=120)
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        sys.stderr.write(stdout[-4000:] + stderr[-4000:])
        raise SystemExit(f"{side} {spec} failed (exit {proc.returncode})")
    if proc.returncode != 0:  # torchrun's pfl workers at times abort on their way out
        aborted = [ln for ln in stderr.splitlines() if "terminate called" in ln or "Signal" in ln]
        print(f"  note: {side} {spec['config']} exited {proc.returncode} after its result "
              f"({'; '.join(aborted[:2]) or 'no reason printed'}): the result is kept",
              file=sys.stderr)
    return {**json.loads(lines[-1][len("RESULT "):]), "process_s": wall, "load": load,
            "side": side, "config": spec["config"]}


def session_processes(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid`` (Linux ``/proc``; none
    elsewhere)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            state, _, _, session = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):
            continue
        if int(session) == sid and state != "Z":
            pids.append(int(entry.name))
    return pids


def end_session(sid: int, grace: float) -> None:
    """Wait up to ``grace`` seconds for the processes of session ``sid`` (a run started
    with ``start_new_session``) to exit, then kill those left, one by one."""
    deadline = time.monotonic() + grace
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


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


def missing(peer: str, python: str) -> str | None:
    """Why ``peer`` cannot run with ``python`` (with the command that installs it), or
    None when it can."""
    how = f"install it with: {PEERS[peer]['install']}"
    if not Path(python).is_file():
        return f"{python} does not exist; {how}"
    try:
        probe = subprocess.run([python, "-c", PEERS[peer]["probe"]], cwd=ROOT,
                               capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} cannot start ({exc}); {how}"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{python} -c {PEERS[peer]['probe']!r} failed ({last}); {how}"
    return None


def describe(run: dict) -> str:
    accs = ", ".join(f"{r}: {a:.4f}" for r, a in
                     sorted(run["accuracy"].items(), key=lambda kv: int(kv[0])))
    extra = ""
    if run["side"] == "flower":
        extra = (f"; strategy {run['strategy_s']:.2f} s, ray.init {run['ray_init_s']:.2f} s, "
                 f"ray.put {run['put_s']:.2f} s")
    return (f"simulation {run['sim_s']:.2f} s (process {run['process_s']:.2f} s{extra}), "
            f"load {run['load']:.2f}, accuracy by round {{{accs}}}")


def version(run: dict) -> str:
    if run["side"] == "pfl":
        return f"pfl {run.get('pfl', '?')}"
    if run["side"] == "flower":
        return f"Flower {run.get('flwr', '?')} (ray {run.get('ray', '?')})"
    return run["side"]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_run"]:
        worker(argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--peers", nargs="+", choices=list(PEERS), default=list(PEERS),
                    help="peers to run (a workload none of whose peers runs is skipped)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of every workload (default: the workload's: 60, 40 and 3)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each configuration; the fastest is kept")
    ap.add_argument("--sflsim-configs", nargs="+", default=None,
                    help="sflsim's configurations on every workload (default: per workload)")
    ap.add_argument("--pfl-configs", nargs="+", default=PFL_CONFIGS)
    ap.add_argument("--flower-configs", nargs="+", default=FLOWER_CONFIGS)
    ap.add_argument("--sflsim-python", default=sys.executable,
                    help="Python that runs sflsim (default: this one)")
    for peer, info in PEERS.items():
        ap.add_argument(f"--{peer}-python", default=info["python"],
                        help=f"Python with {peer} installed (default: %(default)s)")
    ap.add_argument("--floor", action="store_true",
                    help="also time the training steps alone (run_floor) on the pfl workloads: "
                         "the lower bound of any simulator's wall time there")
    ap.add_argument("--floor-configs", nargs="+",
                    default=["procs=2,channels_last", "procs=2,channels_last,evaluate"])
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    args = ap.parse_args(argv)

    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}",
          flush=True)
    pythons = {"sflsim": args.sflsim_python, "floor": args.sflsim_python,
               **{p: getattr(args, f"{p}_python") for p in PEERS}}
    configs = {"pfl": args.pfl_configs, "flower": args.flower_configs}
    skipped = {p: missing(p, pythons[p]) for p in PEERS
               if p in args.peers and any(p in WORKLOADS[w][2] for w in args.workloads)}
    for peer, why in skipped.items():
        if why:
            print(f"{peer}: skipped, {why}", flush=True)
    peers_of = {w: [p for p in WORKLOADS[w][2] if p in skipped and not skipped[p]]
                for w in args.workloads}
    for w, peers in peers_of.items():
        if not peers:
            print(f"{w}: skipped (none of its peers, {', '.join(WORKLOADS[w][2])}, runs)",
                  flush=True)
    workloads = [w for w in args.workloads if peers_of[w]]

    runs: dict[str, list[dict]] = {w: [] for w in workloads}
    for rep in range(args.repeats):
        for w in workloads:
            plan = [("sflsim", c) for c in (args.sflsim_configs or SFLSIM_CONFIGS[w])]
            plan += [(peer, c) for peer in peers_of[w] for c in configs[peer]]
            if args.floor and "pfl" in peers_of[w]:
                plan += [("floor", c) for c in args.floor_configs]
            for side, config in plan:
                spec = {"workload": w, "rounds": args.rounds, "config": config}
                run = launch(pythons[side], side, spec, args.timeout)
                runs[w].append(run)
                print(f"[{rep + 1}/{args.repeats}] {w} {side} {config}: {describe(run)}",
                      flush=True)

    for w, wruns in runs.items():
        s, s_all = best_of(wruns, "sflsim")
        rs, acc_s = final(s)
        loads = [r["load"] for r in wruns]
        changes = [*WORKLOADS[w][1], *([] if args.rounds is None else [f"--rounds {args.rounds}"])]
        print(f"\n== {w}: {WORKLOADS[w][0].relative_to(ROOT)} "
              f"({', '.join(changes) or 'as written'}) ==")
        tables = [("sflsim", s_all)] + [(p, best_of(wruns, p)[1]) for p in peers_of[w]]
        for name, table in tables:
            print(f"{name} best of {args.repeats} per configuration: " + ", ".join(
                f"{c} {r['sim_s']:.2f} s" for c, r in sorted(table.items(),
                                                          key=lambda kv: kv[1]["sim_s"])))
        for peer in peers_of[w]:
            p, _ = best_of(wruns, peer)
            rp, acc_p = final(p)
            assert rs == rp
            print(f"sflsim wall {s['sim_s']:.2f} s ({s['config']}), {version(p)} wall "
                  f"{p['sim_s']:.2f} s ({p['config']}), ratio sflsim/{peer} "
                  f"{s['sim_s'] / p['sim_s']:.3f}")
            if peer == "flower":
                with_ray = p["sim_s"] + p["ray_init_s"] + p["put_s"]
                print(f"Flower with its Ray start (ray.init + ray.put) {with_ray:.2f} s, ratio "
                      f"{s['sim_s'] / with_ray:.3f}; Flower's strategy alone (rounds and "
                      f"evaluations, no engine start or stop) {p['strategy_s']:.2f} s, ratio "
                      f"{s['sim_s'] / p['strategy_s']:.3f}")
            gap = 100 * (acc_s - acc_p)
            print(f"final accuracy (round {rs}): sflsim {100 * acc_s:.2f}%, {peer} "
                  f"{100 * acc_p:.2f}%, gap {gap:+.2f} points")
            for config in dict.fromkeys(r["config"] for r in wruns if r["side"] == "floor"):
                if peer != "pfl":
                    break
                f, _ = best_of([r for r in wruns if r["side"] == "floor"
                                and r["config"] == config], "floor")
                what = (f"the training steps and the {f['evaluations']} evaluations"
                        if f["evaluations"] else "the training steps alone")
                print(f"{what} ({config}: {f['steps']} steps, "
                      f"{' and '.join(f'{t:.2f}' for t in f['step_s'])} s in the processes"
                      + (f", {' and '.join(f'{t:.2f}' for t in f['eval_s'])} s of it evaluating"
                         if f["evaluations"] else "")
                      + f") {f['sim_s']:.2f} s: {f['sim_s'] / p['sim_s']:.3f} of pfl's wall; "
                      f"sflsim / this floor {s['sim_s'] / f['sim_s']:.3f}")
        print(f"load average (1 min, before each run): {min(loads):.2f}-{max(loads):.2f}; "
              f"CPU {cpu_model()} x {os.cpu_count()}")


if __name__ == "__main__":
    main()
