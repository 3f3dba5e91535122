"""The same FedAvg workload in Flower's simulation engine and in sflsim: wall time and accuracy.

Workload (``scenarios/bench_fedavg_cnn.yaml``): the embedded Fashion-MNIST subset (12,000
train / 2,000 test), 12 clients, IID, 3 rounds, every client every round, 1 local epoch,
batch 32, SGD lr 0.05 (no momentum, constant), the ``small_cnn`` backbone, uploads averaged
by sample count, accuracy on the 2,000 test images of the initial weights and after every
round.

Both sides use the same initial weights (sflsim's ``model`` child seed), the same IID
partition (taken from the sflsim run) and the same batch order (each client's
``torch.Generator`` seeded with sflsim's ``batches`` child seed + client id, one
``randperm`` per round). Flower runs the legacy ``flwr.simulation.start_simulation`` (Ray
virtual client engine) with ``NumPyClient``s and ``FedAvg`` (``fraction_evaluate=0``, a
centralized ``evaluate_fn`` on the driver: the initial weights, Flower's round 0, as sflsim
evaluates the untrained model as round 0 of ``rounds.csv``, then after each round). Ray is
started by this script (``ray.init``, timed apart) and kept for the simulation
(``keep_initialised=True``); the training data is put in Ray's object store once.
Each Flower configuration (``--cpus-per-client``) gets a fresh Ray.

Install Flower in its own virtualenv, so the system packages stay as they are::

    python -m venv --system-site-packages /tmp/flwr-venv
    /tmp/flwr-venv/bin/pip install "flwr[simulation]"

Run from the repository root (~1-2 minutes on 2 cores)::

    /tmp/flwr-venv/bin/python benchmarks/flower_vs_sflsim.py [--repeats 3] [--cpus-per-client 1 2]

Each side runs ``--repeats`` times and keeps its fastest run (on a shared machine the
minimum is the least disturbed time). ``--cpus-per-client`` lists Flower's
``client_resources={"num_cpus": k}`` settings to try (each actor also sets torch to ``k``
threads); the fastest is compared. On 2 cores, 1 CPU per actor (2 actors) is the best:
2 CPUs per actor (1 actor) took 190-210 s instead of ~30 s.

The last line is the wall-time ratio sflsim / Flower (simulation only) for the best
Flower configuration. Target: at most 0.5, final accuracies within 2 points.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network calls from Flower
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from sflsim.config import load_scenario  # noqa: E402
from sflsim.config.schema import Scenario  # noqa: E402
from sflsim.models import MODELS  # noqa: E402
from sflsim.runner import build_backbone, child_seeds, run_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "bench_fedavg_cnn.yaml"


def state_arrays(model: nn.Module) -> list[np.ndarray]:
    return [t.detach().cpu().numpy().copy() for t in model.state_dict().values()]


def load_arrays(model: nn.Module, arrays: list[np.ndarray]) -> None:
    with torch.no_grad():
        for t, a in zip(model.state_dict().values(), arrays):
            t.copy_(torch.from_numpy(np.asarray(a)))


def new_model(spec: dict) -> nn.Sequential:
    b = MODELS[spec["name"]](in_channels=spec["in_channels"], image_size=spec["image_size"],
                             num_classes=spec["num_classes"], width=spec["width"], seed=0)
    model = nn.Sequential(*b.stages, b.head)
    return model.to(memory_format=spec["layout"])


@torch.inference_mode()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> float:
    model.eval()
    correct = sum(int((model(xb).argmax(1) == yb).sum())
                  for xb, yb in zip(torch.split(x, batch_size), torch.split(y, batch_size)))
    model.train()
    return correct / len(y)


def run_sflsim(scenario: Scenario) -> dict:
    t0 = time.perf_counter()
    result = run_scenario(scenario)
    wall = time.perf_counter() - t0
    rounds = result.rounds[result.rounds["round"] >= 1]  # round 0: the untrained model
    untrained = result.rounds[result.rounds["round"] == 0]["server_accuracy"]
    return {"wall_s": wall, "accuracies": [float(a) for a in rounds["server_accuracy"]],
            "untrained": float(untrained.iloc[0]), "result": result}


def run_flower(scenario: Scenario, result, cpus_per_client: int, total_cpus: int,
               channels_last: bool) -> dict:
    """One Flower simulation of the workload on a fresh Ray with ``total_cpus`` CPUs; the
    client and evaluation models (and images) in channels-last layout if asked."""
    import flwr
    import ray
    from flwr.client import NumPyClient
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import start_simulation

    ctx = result.algorithm.ctx
    data, cfg = ctx.data, scenario.training
    seeds = child_seeds(scenario)
    parts = [np.asarray(c.indices) for c in ctx.clients]  # sflsim's partition, client order
    batch_seeds = [int(c.generator.initial_seed()) for c in ctx.clients]
    assert batch_seeds == [seeds["batches"] + c.client_id for c in ctx.clients]
    spec = {"name": scenario.model.name, "in_channels": data.in_channels,
            "image_size": data.image_size, "num_classes": data.num_classes,
            "width": scenario.model.width,
            "layout": torch.channels_last if channels_last else torch.contiguous_format}
    init = build_backbone(scenario, data, seeds["model"])  # sflsim's initial global model
    init_arrays = state_arrays(nn.Sequential(*init.stages, init.head))
    x_test = data.normalize(data.x_test).contiguous(memory_format=spec["layout"])
    y_test = data.y_test
    mean, std = data.mean, data.std  # Flower's clients normalise each batch as sflsim does
    eval_bs = scenario.evaluation.batch_size
    lr, momentum, wd = cfg.optimizer.lr, cfg.optimizer.momentum, cfg.optimizer.weight_decay
    batch_size, epochs = cfg.batch_size, cfg.local_epochs

    t0 = time.perf_counter()
    ray.init(num_cpus=total_cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    ray_init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    data_ref = ray.put((data.x_train.numpy(), data.y_train.numpy()))
    put_s = time.perf_counter() - t0

    class FlowerClient(NumPyClient):
        def __init__(self, pid: int):
            self.pid = pid

        def get_parameters(self, config):
            return init_arrays

        def fit(self, parameters, config):
            torch.set_num_threads(cpus_per_client)
            x_all, y_all = ray.get(data_ref)  # zero-copy numpy views of the object store
            model = new_model(spec)
            load_arrays(model, parameters)
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd)
            loss_fn = nn.CrossEntropyLoss()
            indices = parts[self.pid]
            gen = torch.Generator().manual_seed(batch_seeds[self.pid])
            for _ in range((int(config["round"]) - 1) * epochs):  # sflsim's generator state
                torch.randperm(len(indices), generator=gen)
            for _ in range(epochs):
                order = torch.randperm(len(indices), generator=gen)
                for b in np.array_split(indices[order.numpy()],
                                        range(batch_size, len(indices), batch_size)):
                    xb = torch.from_numpy(x_all[b]).to(torch.float32).div_(torch.tensor(255.0))
                    xb = xb.sub_(torch.tensor(mean).view(1, -1, 1, 1)).div_(
                        torch.tensor(std).view(1, -1, 1, 1))
                    xb = xb.contiguous(memory_format=spec["layout"])
                    yb = torch.from_numpy(y_all[b])
                    loss = loss_fn(model(xb), yb)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            return state_arrays(model), len(indices), {}

    def client_fn(context):
        return FlowerClient(int(context.node_config["partition-id"])).to_client()

    eval_model = new_model(spec)
    accuracies: list[float] = []
    untrained: list[float] = []

    def evaluate_fn(server_round, arrays, config):
        # round 0: the initial weights, as sflsim's round 0 (the untrained model)
        load_arrays(eval_model, arrays)
        acc = accuracy(eval_model, x_test, y_test, eval_bs)
        (untrained if server_round == 0 else accuracies).append(acc)
        return 0.0, {"accuracy": acc}

    n = len(parts)
    strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n,
                      min_evaluate_clients=0, min_available_clients=n,
                      initial_parameters=ndarrays_to_parameters(init_arrays),
                      evaluate_fn=evaluate_fn,
                      on_fit_config_fn=lambda r: {"round": r})
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start_simulation(client_fn=client_fn, num_clients=n,
                         client_resources={"num_cpus": cpus_per_client, "num_gpus": 0.0},
                         config=ServerConfig(num_rounds=cfg.rounds), strategy=strategy,
                         keep_initialised=True)
    sim_s = time.perf_counter() - t0
    ray.shutdown()
    return {"cpus_per_client": cpus_per_client, "channels_last": channels_last,
            "ray_init_s": ray_init_s, "put_s": put_s,
            "sim_s": sim_s, "accuracies": accuracies, "untrained": untrained[0],
            "flwr": flwr.__version__,
            "ray": ray.__version__}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=SCENARIO)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each side; the fastest is kept")
    ap.add_argument("--cpus-per-client", type=int, nargs="+", default=[1],
                    help="Flower client_resources num_cpus to try (and torch threads per actor)")
    ap.add_argument("--total-cpus", type=int, default=os.cpu_count() or 1,
                    help="CPUs given to Ray (default: all)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of this process (sflsim run and Flower's evaluation)")
    ap.add_argument("--parallel-clients", type=int, default=os.cpu_count() or 1,
                    help="sflsim's training.parallel_clients: clients trained at once, one "
                         "torch thread each (default: one per core, like Flower's actors)")
    ap.add_argument("--layout", choices=["contiguous", "channels_last"], default="channels_last",
                    help="memory layout of both sides' models and images (sflsim: "
                         "training.channels_last); channels-last is faster on CPU for both")
    args = ap.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)

    channels_last = args.layout == "channels_last"
    scenario = load_scenario(args.scenario, [f"training.parallel_clients={args.parallel_clients}",
                                             f"training.channels_last={channels_last}"])
    sruns = []
    for _ in range(args.repeats):
        s = run_sflsim(scenario)
        sruns.append(s)
        print(f"sflsim {scenario.name}: wall {s['wall_s']:.2f} s (run_scenario, data load "
              f"included), {args.threads} torch thread(s), {args.parallel_clients} client(s) at once, "
              f"{args.layout}, accuracy untrained {s['untrained']:.4f}, per round "
              f"{', '.join(f'{a:.4f}' for a in s['accuracies'])}", flush=True)
    s = min(sruns, key=lambda r: r["wall_s"])

    runs = []
    for cpus in [c for c in args.cpus_per_client for _ in range(args.repeats)]:
        f = run_flower(scenario, s["result"], cpus, args.total_cpus, channels_last)
        runs.append(f)
        print(f"flower {f['flwr']} (ray {f['ray']}), {cpus} CPU(s) and torch thread(s) per "
              f"client actor, {args.layout}, Ray with {args.total_cpus} CPUs: "
              f"ray.init {f['ray_init_s']:.2f} s, "
              f"ray.put data {f['put_s']:.2f} s, simulation {f['sim_s']:.2f} s, accuracy "
              f"untrained {f['untrained']:.4f}, per round "
              f"{', '.join(f'{a:.4f}' for a in f['accuracies'])}", flush=True)

    best = min(runs, key=lambda r: r["sim_s"])
    gap = 100 * (s["accuracies"][-1] - best["accuracies"][-1])
    with_ray = best["ray_init_s"] + best["put_s"] + best["sim_s"]
    print(f"best Flower configuration: {best['cpus_per_client']} CPU(s) per client actor")
    print(f"wall time: sflsim {s['wall_s']:.2f} s, Flower simulation {best['sim_s']:.2f} s, "
          f"Flower with Ray start {with_ray:.2f} s")
    print(f"final accuracy: sflsim {100 * s['accuracies'][-1]:.2f}%, Flower "
          f"{100 * best['accuracies'][-1]:.2f}%, gap {gap:+.2f} points "
          f"({'within' if abs(gap) <= 2 else 'NOT within'} 2)")
    print(f"ratio sflsim / Flower with Ray start: {s['wall_s'] / with_ray:.3f}")
    print(f"ratio sflsim / Flower simulation: {s['wall_s'] / best['sim_s']:.3f} (target <= 0.5)")


if __name__ == "__main__":
    main()
