"""``training.device`` / ``--device``: a clear refusal without a GPU, the same simulated
timeline with one (that test needs a CUDA machine and is skipped elsewhere)."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.config.schema import CUDA_ALGORITHMS, FUSED_CLIENT_ALGORITHMS, WHOLE_MODEL_ALGORITHMS
from sflsim.errors import ConfigError
from sflsim.metrics.columns import ALGORITHM_CLIENT_COLUMNS
from sflsim.runner import run_scenario

HAS_CUDA = torch.cuda.is_available()


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "CUDA", "cuda:-1"])
def test_unknown_device_names_are_refused(tiny, name):
    tiny["training"]["device"] = name
    with pytest.raises(ConfigError, match=r"training\.device: unknown torch device .*valid: cpu, "
                                          r"cuda or cuda:N"):
        validate_scenario(tiny)


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU: the refusal cannot happen")
def test_cuda_without_a_gpu_is_one_clear_error(tiny, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "o"),
                                      "--device", "cuda"])
    assert result.exit_code == USER_ERROR
    assert "training.device: 'cuda' but torch finds no CUDA GPU" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_cpu_device_is_the_default_run(tiny):
    explicit = copy.deepcopy(tiny)
    explicit["training"]["device"] = "cpu"
    a = run_scenario(Scenario.model_validate(tiny))
    b = run_scenario(Scenario.model_validate(explicit))
    pd.testing.assert_frame_equal(a.rounds.drop(columns="wall_time_s"),
                                  b.rounds.drop(columns="wall_time_s"))


def test_every_registered_algorithm_may_train_on_cuda(tiny, monkeypatch):
    """No algorithm is CPU-only: with a GPU present (faked here), training.device: cuda is
    accepted for each one (its run needs a real GPU: test_gpu_gives_the_cpu_timeline)."""
    from sflsim.algorithms.base import ALGORITHMS
    from sflsim.runner import torch_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert set(CUDA_ALGORITHMS) == set(ALGORITHMS) == set(GPU_METHODS)
    for algorithm in ALGORITHMS:
        tiny["algorithm"], tiny["training"]["device"] = GPU_METHODS[algorithm], "cuda"
        assert torch_device(Scenario.model_validate(tiny)) == torch.device("cuda")


#: one scenario algorithm section per registered algorithm
GPU_METHODS = {"hetero_splitee_sequential": {"name": "hetero_splitee_sequential"},
               "hetero_splitee_averaging": {"name": "hetero_splitee_averaging"},
               "distributed": {"name": "distributed"}, "centralized": {"name": "centralized"},
               "fedavg": {"name": "fedavg"}, "fedprox": {"name": "fedprox"},
               "fedmut": {"name": "fedmut"}, "fedbabu": {"name": "fedbabu", "finetune_epochs": 1},
               "fedgh": {"name": "fedgh"}, "fedas": {"name": "fedas"},
               "splitfed_v1": {"name": "splitfed_v1"}, "splitfed_v2": {"name": "splitfed_v2"},
               "multisfl": {"name": "multisfl"}, "mergesfl": {"name": "mergesfl"},
               "mu_splitfed": {"name": "mu_splitfed"},
               # its cuts come from the sufficiency estimate r (eq. 6), a trained value: the
               # timelines agree while no r sits within GPU rounding of a decision threshold
               "fedsga": {"name": "fedsga"}}


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("algorithm", sorted(GPU_METHODS))
def test_gpu_gives_the_cpu_timeline(tiny, algorithm, record_property):
    tiny["algorithm"] = GPU_METHODS[algorithm]
    tiny["training"]["rounds"] = 2
    cpu = run_scenario(Scenario.model_validate(tiny))
    tiny["training"]["device"] = "cuda"
    gpu = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(gpu.events, cpu.events, check_exact=True)
    # every simulated column of rounds.csv and the clients table: identical
    simulated = [c for c in cpu.rounds.columns if not c.startswith(("server_acc", "client_acc",
                                                                      "client_loss", "server_loss",
                                                                      "wall_time", "note"))]
    pd.testing.assert_frame_equal(gpu.rounds[simulated], cpu.rounds[simulated], check_exact=True)
    # the algorithm's own columns are values its training computes (FedSGA's observations
    # and probe losses): GPU kernels round them differently, so they agree to a tolerance;
    # the simulator's columns (times, bytes, FLOPs, energy) are exact
    measured = [c for c in cpu.clients.columns if c.endswith(("_accuracy", "_loss"))]
    trained = list(ALGORITHM_CLIENT_COLUMNS.get(algorithm, {}))
    timed = [c for c in cpu.clients.columns if c not in measured + trained]
    pd.testing.assert_frame_equal(gpu.clients[timed], cpu.clients[timed], check_exact=True)
    pd.testing.assert_frame_equal(gpu.clients[trained], cpu.clients[trained], check_exact=False,
                                  rtol=1e-2, atol=1e-3)
    # accuracy: within 0.1 (GPU kernels round differently; a tiny run amplifies it)
    record_property("cpu_accuracy", cpu.summary["final_server_accuracy"])
    record_property("gpu_accuracy", gpu.summary["final_server_accuracy"])
    assert abs(gpu.summary["final_server_accuracy"] - cpu.summary["final_server_accuracy"]) < 0.1


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("algorithm", sorted(FUSED_CLIENT_ALGORITHMS))
def test_fused_clients_on_the_gpu_give_the_loop(tiny, algorithm, monkeypatch, record_property):
    """training.fuse_clients on the GPU: the same events as the clients one by one, and
    losses to float32 rounding (grouped and plain convolutions sum in another order; as
    in tests/test_fused_runs.py on the CPU, with TF32 off so that both run in float32)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    # as tests/test_fused_runs.py: the small CNN (no BatchNorm) where the whole model or
    # a cut after stage 1 trains; Hetero-SplitEE's ResNet at a smaller step, since
    # BatchNorm over a few samples amplifies rounding
    whole = algorithm in WHOLE_MODEL_ALGORITHMS or algorithm == "splitfed_v1"
    for group in tiny["devices"].values():
        group["count"] = 3
        if whole:
            group["end_layer"] = 1
    if whole:
        tiny["model"] = {"name": "small_cnn", "width": 0.5}
    tiny["algorithm"] = GPU_METHODS[algorithm]
    tiny["training"].update(rounds=2, device="cuda", optimizer={
        "name": "sgd", "lr": 0.05 if whole else 0.01, "momentum": 0.5})
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}  # unequal sizes
    loop = run_scenario(Scenario.model_validate(tiny))
    tiny["training"]["fuse_clients"] = True
    fused = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(fused.events, loop.events, check_exact=True)
    losses = [c for c in loop.clients.columns if c.endswith("_loss")]
    gap = (fused.clients[losses] - loop.clients[losses]).abs().max().max()
    record_property("largest_loss_gap", float(gap))
    pd.testing.assert_frame_equal(fused.clients[losses], loop.clients[losses],
                                  rtol=1e-3, atol=1e-4)
