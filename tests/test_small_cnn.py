"""The small CNN backbone (``small_cnn``): shapes, parameter count, splits, a FedAvg run."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.models import MODELS
from sflsim.runner import run_scenario


def build(width: float = 1.0, image_size: int = 28, in_channels: int = 1, seed: int = 0):
    return MODELS["small_cnn"](in_channels=in_channels, image_size=image_size, num_classes=10,
                               width=width, seed=seed)


def whole(backbone) -> nn.Sequential:
    return nn.Sequential(*backbone.stages, backbone.head)


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_stage_shapes():
    b = build()
    assert b.num_stages == 2
    assert b.stage_channels == [16, 32]
    x = torch.randn(3, 1, 28, 28)
    x = b.stages[0](x)
    assert tuple(x.shape) == (3, 16, 14, 14)
    x = b.stages[1](x)
    assert tuple(x.shape) == (3, 32, 7, 7)
    assert tuple(b.head(x).shape) == (3, 10)


def test_param_count_is_the_hand_count():
    # conv1: 1*16*3*3 + 16; conv2: 16*32*3*3 + 32; linear: 32*7*7*10 + 10
    assert n_params(whole(build())) == (16 * 9 + 16) + (16 * 32 * 9 + 32) + (32 * 49 * 10 + 10)
    assert n_params(whole(build())) == 20_490
    # width 0.5 on 3x32x32: 8 and 16 channels, 8x8 after two pools
    b = build(width=0.5, image_size=32, in_channels=3)
    assert n_params(whole(b)) == (3 * 8 * 9 + 8) + (8 * 16 * 9 + 16) + (16 * 64 * 10 + 10)


def test_seed_fixes_the_weights():
    a, b, c = whole(build(seed=1)), whole(build(seed=1)), whole(build(seed=2))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def test_split_at_layer_1_composes_and_exit_head_works():
    b = build()
    x = torch.randn(2, 1, 28, 28)
    client, server = b.client_model(1), b.server_model(1)
    with torch.no_grad():
        assert torch.allclose(server(client(x)), whole(b)(x))
        assert tuple(b.exit_head(1)(client(x)).shape) == (2, 10)
    with pytest.raises(ValueError):
        b.client_model(2)  # the server needs a stage


def test_bad_arguments():
    with pytest.raises(ValueError, match="width"):
        build(width=0)
    with pytest.raises(ValueError, match="4x4"):
        build(image_size=3)
    with pytest.raises(ValueError, match="options"):
        MODELS["small_cnn"](in_channels=1, image_size=28, num_classes=10, width=1.0, seed=0,
                            depth=3)


def test_schema_accepts_small_cnn(tiny):
    tiny["model"] = {"name": "small_cnn", "width": 1.0}
    tiny["devices"] = {"a": {"profile": "rpi4", "count": 2, "end_layer": 1, "link": "wifi"}}
    tiny["algorithm"] = {"name": "fedavg"}
    assert validate_scenario(tiny).model.name == "small_cnn"
    tiny["devices"]["a"]["end_layer"] = 2  # past the last client stage of a 2-stage model
    tiny["algorithm"] = {"name": "hetero_splitee_sequential"}
    with pytest.raises(ConfigError, match="end_layer"):
        validate_scenario(tiny)


def test_fedavg_run_with_small_cnn(tiny):
    tiny["model"] = {"name": "small_cnn", "width": 0.5}
    tiny["algorithm"] = {"name": "fedavg"}
    # the runner builds each client's split model even for FedAvg: end layer 1 of 2 stages
    tiny["devices"] = {"a": {"profile": "rpi4", "count": 3, "end_layer": 1, "link": "wifi"}}
    tiny["training"] = {"rounds": 2, "local_epochs": 1, "batch_size": 16,
                        "optimizer": {"name": "sgd", "lr": 0.05},
                        "schedule": {"name": "constant"}}
    tiny["evaluation"] = {"max_test_samples": 40, "early_exit": {"enabled": False}}
    result = run_scenario(validate_scenario(tiny))
    assert result.summary["status"] == "completed"
    assert result.summary["rounds_completed"] == 2
    acc = result.summary["final_server_accuracy"]
    assert not math.isnan(acc) and 0.0 <= acc <= 1.0
    assert result.summary["client_flops"] > 0
    model = result.algorithm.global_model
    assert n_params(model) == n_params(whole(build(width=0.5)))


def test_split_algorithm_with_small_cnn_at_end_layer_1(tiny):
    tiny["model"] = {"name": "small_cnn", "width": 0.5}
    tiny["devices"] = {"a": {"profile": "rpi4", "count": 2, "end_layer": 1, "link": "wifi"}}
    tiny["evaluation"] = {"max_test_samples": 40, "early_exit": {"enabled": False}}
    result = run_scenario(validate_scenario(tiny))
    assert result.summary["status"] == "completed"
    assert 0.0 <= result.summary["final_client_accuracy"] <= 1.0
