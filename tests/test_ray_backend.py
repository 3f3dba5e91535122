"""``training.parallel_backend: ray``: the FedAvg family's clients trained on Ray actors
give exactly the processes backend's run (final weights and rounds.csv), the setting is
checked, an actor that dies is replaced and its clients retried, and one that dies too
often stops the run with the client and round named, the completed rounds kept."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import pandas as pd
import pytest
import torch

import sflsim.execution.ray_workers as ray_workers
import sflsim.execution.workers as workers
from sflsim.config import load_scenario, validate_scenario
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the processes backend forks")

#: bench_fedavg_cnn (FedAvg, small CNN) shrunk: 6 clients of 40 samples, 2 rounds
SHRUNK = ["dataset.fraction=0.02", "devices.clients.count=6", "training.rounds=2",
          "evaluation.max_test_samples=200", "evaluation.batch_size=50",
          "training.parallel_clients=2",
          # augmentation draws and momentum travel to the actors and back
          "dataset.augment.random_crop_padding=2", "dataset.augment.horizontal_flip=true",
          "training.optimizer.momentum=0.9"]


#: the algorithms compared: FedAvg; FedProx's anchor and FedMut's own start models travel too
ALGORITHMS = {"fedavg": [], "fedprox": ["algorithm={name: fedprox, mu: 0.1}"],
              "fedmut": ["algorithm={name: fedmut, alpha: 2.0}"]}


def _fedavg(backend: str, algorithm: str = "fedavg"):
    return load_scenario("bench_fedavg_cnn", [*SHRUNK, f"training.parallel_backend={backend}",
                                              *ALGORITHMS[algorithm]])


def _weights_hash(result) -> str:
    digest = hashlib.sha256()
    for name, t in result.algorithm.global_model.state_dict().items():
        digest.update(name.encode())
        digest.update(t.cpu().numpy().tobytes())
    return digest.hexdigest()


def _rounds_csv(out) -> pd.DataFrame:
    return pd.read_csv(out / "rounds.csv").drop(columns=["wall_time_s"])


@pytest.fixture(scope="module")
def processes_runs(tmp_path_factory):
    """Per algorithm, the shrunk scenario's final weights hash and rounds.csv on the
    processes backend (forked before any Ray runs)."""
    runs = {}
    for algorithm in ALGORITHMS:
        out = tmp_path_factory.mktemp("processes") / algorithm
        result = run_scenario(_fedavg("processes", algorithm), out)
        runs[algorithm] = _weights_hash(result), _rounds_csv(out)
    return runs


@pytest.fixture(scope="module")
def processes_run(processes_runs):
    """FedAvg's of :func:`processes_runs`."""
    return processes_runs["fedavg"]


@pytest.fixture(scope="module")
def local_ray(processes_runs):
    """A local Ray of 2 CPUs on 127.0.0.1 for the module's runs (the pool then starts
    none of its own)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


def _no_actors_left() -> None:
    """No pool left, and the local Ray's 2 CPUs free again: every actor is gone."""
    assert not workers._POOLS
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU") == 2


def test_a_pool_starts_and_shuts_down_a_ray_of_its_own():
    if ray.is_initialized():
        pytest.skip("another test left this process connected to a Ray")
    pool = ray_workers.RayClientWorkers(1, torch.nn.Linear(2, 2), None, None, None, None)
    try:
        assert ray.is_initialized() and len(pool.actors) == 1
    finally:
        pool.close()
    assert pool.closed and not ray.is_initialized()
    with pytest.raises(RuntimeError, match="stopped"):
        pool.train([], 0.1, None, lambda: None)


def test_a_local_ray_takes_one_actor_per_core_and_refuses_more():
    """A local Ray the pool starts has this machine's cores as its CPUs: more actors than
    cores are refused at once (each is a process with torch and the data; tens of them
    ran out of memory), and the Ray it started is shut down."""
    if ray.is_initialized():
        pytest.skip("another test left this process connected to a Ray")
    cores = os.cpu_count() or 1
    with pytest.raises(ConfigError, match=rf"training\.parallel_clients: {cores + 1} actors .*"
                                          rf"the local Ray has {cores}"):
        ray_workers.RayClientWorkers(cores + 1, torch.nn.Linear(2, 2), None, None, None, None)
    assert not ray.is_initialized()


def test_an_address_where_nothing_answers_is_refused_before_ray_retries():
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"training\.ray_address: cannot start or reach Ray "
                                          r"at 127\.0\.0\.1:1: nothing accepts connections"):
        ray_workers._start_ray(ray, "127.0.0.1:1")
    assert time.monotonic() - started < 30 and not ray.is_initialized()


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_ray_gives_the_processes_run(local_ray, processes_runs, tmp_path, algorithm):
    result = run_scenario(_fedavg("ray", algorithm), tmp_path / "run")
    assert torch.get_num_threads() == 1
    assert _weights_hash(result) == processes_runs[algorithm][0]
    pd.testing.assert_frame_equal(_rounds_csv(tmp_path / "run"), processes_runs[algorithm][1],
                                  check_exact=True)
    assert result.rounds["server_accuracy"].notna().all()  # evaluated on the actors too
    _no_actors_left()


class _Killer:
    """A progress display that kills actor 0 at the first training batch reported after
    ``after_rounds`` rounds are done."""

    def __init__(self, after_rounds: int = 0):
        self.after, self.rounds, self.pool = after_rounds, 0, None

    def start(self, total_batches, rounds):
        pass

    def advance(self):
        if self.pool is None and self.rounds == self.after:
            self.pool = next(iter(workers._POOLS.values()))
            ray.kill(self.pool.actors[0], no_restart=True)

    def round_done(self, row):
        self.rounds += 1


def test_a_killed_actor_is_replaced_and_its_clients_retried(local_ray, processes_run, tmp_path):
    killer = _Killer()
    result = run_scenario(_fedavg("ray"), tmp_path / "run", progress=killer)
    assert killer.pool.replaced >= 1  # the actor's death was seen, its clients sent again
    assert _weights_hash(result) == processes_run[0]  # a retry changes nothing
    pd.testing.assert_frame_equal(_rounds_csv(tmp_path / "run"), processes_run[1],
                                  check_exact=True)
    _no_actors_left()


def test_an_actor_dying_too_often_stops_the_run_keeping_completed_rounds(
        local_ray, tmp_path, monkeypatch):
    monkeypatch.setattr(ray_workers, "RETRIES", 0)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match=r"the Ray actor training client \d+ in round 2 "
                                           r"died \(1 time, 0 retries allowed\): ActorDiedError"):
        run_scenario(_fedavg("ray"), out, progress=_Killer(after_rounds=1))
    assert list(pd.read_csv(out / "rounds.csv")["round"]) == [0, 1]
    error = json.loads((out / "summary.json").read_text())["error"]
    assert error["round"] == 2 and "client" in error["message"]
    _no_actors_left()


def test_actors_asking_for_more_than_the_cluster_has_are_refused(local_ray):
    with pytest.raises(ConfigError, match=r"training\.parallel_clients: 3 actors of "
                                          r"training\.ray_cpus_per_actor: 1 need 3 CPUs, "
                                          r"the Ray this process is connected to has 2"):
        ray_workers.RayClientWorkers(3, torch.nn.Linear(2, 2), None, None, None, None)
    with pytest.raises(ConfigError, match=r"ray_gpus_per_actor: 1 need 2 GPUs.* has 0"):
        ray_workers.RayClientWorkers(2, torch.nn.Linear(2, 2), None, None, None, None,
                                     gpus_per_actor=1)


def test_quickstart_refuses_ray_as_it_refuses_processes():
    for backend in ("processes", "ray"):
        with pytest.raises(ConfigError, match=fr"training\.parallel_backend: '{backend}' is not "
                                              fr"available for algorithm "
                                              fr"'hetero_splitee_sequential'.*fedavg.*threads"):
            load_scenario("quickstart", [f"training.parallel_backend={backend}"])


@pytest.mark.parametrize(("training", "message"), [
    ({"parallel_backend": "gpus"}, r"training\.parallel_backend: 'gpus' .*threads, processes, ray"),
    ({"parallel_backend": "ray", "ray_cpus_per_actor": 0},
     r"training\.ray_cpus_per_actor: 0 "),
    ({"parallel_backend": "ray", "ray_address": "head node"},
     r"training\.ray_address.*'head node'.*auto, local, HOST:PORT"),
    ({"ray_address": "auto"}, r"ray_address: 'auto' is read only with parallel_backend: ray, "
                              r"got parallel_backend: 'threads'"),
    ({"parallel_backend": "ray", "ray_gpus_per_actor": 1},
     r"ray_gpus_per_actor: 1 .*device 'cpu'; valid: device cuda"),
    ({"parallel_backend": "ray", "device": "cuda"}, r"'ray' with device 'cuda' .*"
                                                    r"ray_gpus_per_actor: 0"),
])
def test_the_settings_are_checked(tiny, training, message):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"].update(training)
    with pytest.raises(ConfigError, match=message):
        validate_scenario(tiny)


def test_without_ray_installed_the_error_says_how_to_install_it(tiny, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else find_spec(name, *a))
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"].update(parallel_backend="ray", ray_address="10.0.0.1:6379")
    with pytest.raises(ConfigError, match=r"'ray' needs Ray.*pip install \"sflsim\[ray\]\""):
        validate_scenario(tiny)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(ConfigError, match=r"pip install \"sflsim\[ray\]\""):
        ray_workers.require_ray()
