"""What a run builds and checks per client is in proportion to what the algorithm does
with that client: algorithms that keep one global model build no per-client models,
and the divergence check looks at each module once."""

from __future__ import annotations

import copy

import pytest
import torch

from sflsim.algorithms.base import ALGORITHMS
from sflsim.config import validate_scenario
from sflsim.errors import DivergenceError
from sflsim.runner import build, run_scenario


def many_clients(tiny: dict, algorithm: str, count: int = 6) -> dict:
    tiny["algorithm"] = {"name": algorithm}
    tiny["devices"] = {"pi": {"profile": "rpi4", "count": count, "end_layer": 2, "link": "wifi"}}
    return tiny


def test_global_model_algorithms_build_no_per_client_models(tiny):
    ctx, algorithm = build(validate_scenario(many_clients(tiny, "fedavg")))
    assert not type(algorithm).client_models
    assert len({id(c.model) for c in ctx.clients}) == 1
    assert len({id(c.exit_head) for c in ctx.clients}) == 1
    assert all(c.optimizer is None and c.scheduler is None for c in ctx.clients)


def test_algorithms_that_train_client_models_still_get_their_own(tiny):
    ctx, algorithm = build(validate_scenario(many_clients(tiny, "hetero_splitee_sequential")))
    assert type(algorithm).client_models
    assert len({id(c.model) for c in ctx.clients}) == len(ctx.clients)
    assert all(c.optimizer is not None for c in ctx.clients)


def test_exit_heads_are_drawn_once_per_end_layer_with_the_same_weights(tiny, monkeypatch):
    ctx, _ = build(validate_scenario(tiny))
    backbone = ctx.backbone
    seeds = []
    monkeypatch.setattr(torch, "manual_seed", lambda s: seeds.append(s) or torch.Generator())
    first, second = backbone.exit_head(4), backbone.exit_head(4)
    assert first is not second
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(),
                                                 second.state_dict().values()))
    assert len(seeds) <= 1  # end layer 4 was drawn by build already, or is drawn now, once


def test_divergence_check_visits_each_shared_module_once(tiny, monkeypatch):
    ctx, algorithm = build(validate_scenario(many_clients(tiny, "fedavg")))
    calls = []
    real = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: calls.append(t) or real(t))
    algorithm.steps.check_parameters()
    distinct = {id(m) for c in ctx.clients
                for m in (c.model, c.exit_head, algorithm.server_model_for(c))}
    per_module = {id(m): len(list(m.parameters())) for c in ctx.clients
                  for m in (c.model, c.exit_head, algorithm.server_model_for(c))}
    assert len(distinct) == 3
    assert len(calls) == sum(per_module.values())
    with torch.no_grad():
        next(algorithm.global_model.parameters())[0] = float("nan")
    with pytest.raises(DivergenceError, match="server-side model of client 0"):
        algorithm.steps.check_parameters()


@pytest.mark.parametrize("name", ["fedavg", "fedmut", "fedbabu"])
def test_reused_global_copies_train_as_fresh_deep_copies(tiny, monkeypatch, name):
    """Copies handed back after aggregation and rewritten from the global model give the
    same weights, round after round, as a deep copy each time."""
    data = many_clients(tiny, name, count=3)
    data["training"]["rounds"] = 3
    if name == "fedbabu":  # its evaluation fine-tunes each client on a copy (one epoch
        data["algorithm"]["finetune_epochs"] = 1  # of the default 5 is enough for that)

    def final_weights() -> list[torch.Tensor]:
        result = run_scenario(validate_scenario(copy.deepcopy(data)))
        return [t.clone() for t in result.algorithm.global_model.state_dict().values()]

    reused = final_weights()
    monkeypatch.setattr(ALGORITHMS[name], "release_copies", lambda self, copies: None)
    fresh = final_weights()
    assert all(torch.equal(a, b) for a, b in zip(reused, fresh))
