"""Hetero-SplitEE's BatchNorm running statistics of the server-side layers
(``algorithm.bn_statistics``): shared, per end layer or per client, for Sequential's one
shared server-side model and for Averaging's cross-layer aggregation."""

import copy

import pytest
import torch
from torch import nn

from sflsim.algorithms.bn_statistics import BatchNormStatistics, statistics_view
from sflsim.algorithms.hetero_splitee import cross_layer_aggregate
from sflsim.config import validate_scenario
from sflsim.runner import run_scenario


def _norms(module: nn.Module) -> list[nn.BatchNorm2d]:
    return [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def test_statistics_view_keeps_one_set_per_key():
    body = nn.Sequential(nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2))
    stats = BatchNormStatistics(body, [0, 1])
    a, b = statistics_view(list(body), stats, 0), statistics_view(list(body), stats, 1)
    a.train()
    a(torch.randn(8, 2, 3, 3) * 3.0 + 5.0)  # moves key 0's running mean only
    b.eval()
    b(torch.randn(8, 2, 3, 3))
    assert torch.equal(stats.sets[1][0][0], torch.zeros(2))  # key 1: still the initial mean
    assert (stats.sets[0][0][0] != 0).all()
    assert int(stats.sets[0][0][2]) == 1 and int(stats.sets[1][0][2]) == 0
    # the parameters are one set: a's step and b's forward see the same weights
    assert a[0].weight is b[0].weight


@pytest.mark.parametrize("mode", ["shared", "per_depth", "per_client"])
def test_sequential_statistics_follow_the_switch(tiny, mode):
    tiny["algorithm"] = {"name": "hetero_splitee_sequential", "bn_statistics": mode}
    alg = run_scenario(validate_scenario(tiny)).algorithm
    views = [alg.views[c.client_id] for c in alg.ctx.clients]
    means = []
    for c, view in zip(alg.ctx.clients, views):
        if mode != "shared":
            alg.statistics.use(c.end_layer if mode == "per_depth" else c.client_id)
        means.append(_norms(view)[-1].running_mean.clone())  # the last stage: every view has it
    # three clients at end layers 3, 4, 5 (tiny): per client and per depth give 3 sets here
    distinct = {tuple(m.tolist()) for m in means}
    assert len(distinct) == (1 if mode == "shared" else 3)
    # parameters are one set under every value
    weights = {id(_norms(v)[-1].weight) for v in views}
    assert len(weights) == 1


def test_sequential_per_depth_shares_statistics_within_an_end_layer(tiny):
    tiny["devices"] = {g: {**d, "count": 2} for g, d in tiny["devices"].items()}
    tiny["algorithm"] = {"name": "hetero_splitee_sequential", "bn_statistics": "per_depth"}
    alg = run_scenario(validate_scenario(tiny)).algorithm
    assert sorted(alg.statistics.sets) == sorted({c.end_layer for c in alg.ctx.clients})
    by_layer = {}
    for c in alg.ctx.clients:
        by_layer.setdefault(c.end_layer, set()).add(id(alg.views[c.client_id]))
    assert all(len(v) == 1 for v in by_layer.values())


def test_sequential_shared_is_the_earlier_model(tiny):
    """``shared`` builds plain views: the same model, and so the same results, as before
    the switch existed (no statistics object at all)."""
    alg = run_scenario(validate_scenario(tiny)).algorithm
    assert alg.statistics is None
    assert all(type(v) is nn.Sequential for v in alg.views.values())


def _server_models():
    torch.manual_seed(0)
    stage = lambda: nn.Sequential(nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2))  # noqa: E731
    head = lambda: nn.Sequential(nn.Flatten(), nn.Linear(2, 2))  # noqa: E731
    full = [stage(), stage(), head()]  # layers 2, 3 and the output (num_stages 2)
    models = []
    for end, offset in ((1, 0.0), (1, 2.0), (2, 4.0)):
        m = nn.Sequential(*copy.deepcopy(full[end - 1:]))
        with torch.no_grad():
            for p in m.parameters():
                p.add_(offset)
            for norm in _norms(m):
                norm.running_mean.fill_(offset)
        models.append((end, m))
    return models


@pytest.mark.parametrize("mode,expected", [
    ("shared", [2.0, 2.0, 2.0]),      # layer 3: mean over all three
    ("per_depth", [1.0, 1.0, 4.0]),   # over the two at end layer 1; the third alone
    ("per_client", [0.0, 2.0, 4.0]),  # each its own
])
def test_cross_layer_aggregation_statistics(mode, expected):
    models = _server_models()
    cross_layer_aggregate(models, 2, statistics=mode)
    # layer 3 is child 1 of the end-layer-1 models and child 0 of the end-layer-2 one
    layer3 = [models[0][1][1], models[1][1][1], models[2][1][0]]
    assert [float(_norms(m)[0].running_mean[0]) for m in layer3] == pytest.approx(expected)
    # the parameters are averaged under every value (eq. 1)
    weights = [m[0].weight for m in layer3]
    assert torch.equal(weights[0], weights[1]) and torch.equal(weights[1], weights[2])


def test_averaging_default_keeps_each_clients_statistics(tiny):
    tiny["algorithm"] = {"name": "hetero_splitee_averaging"}
    scenario = validate_scenario(tiny)
    assert scenario.algorithm.bn_statistics == "per_client"  # eq. 1: "the parameters"
    alg = run_scenario(scenario).algorithm
    heads = [alg.server_models[c] for c in range(3)]
    last = [_norms(m[-2])[-1].running_mean for m in heads]  # the last stage, held by all
    assert not torch.equal(last[0], last[1])


def test_bn_statistics_refuses_unknown_values(tiny):
    from sflsim.errors import ConfigError

    tiny["algorithm"] = {"name": "hetero_splitee_sequential", "bn_statistics": "per_layer"}
    with pytest.raises(ConfigError, match="bn_statistics"):
        validate_scenario(tiny)


@pytest.mark.parametrize("algorithm,mode", [("hetero_splitee_sequential", "per_client"),
                                            ("hetero_splitee_averaging", "per_depth")])
def test_resumed_run_keeps_each_set_of_statistics(tiny, tmp_path, algorithm, mode):
    from tests.test_resilience import StopAfter, assert_same_tables

    tiny["algorithm"] = {"name": algorithm, "bn_statistics": mode}
    tiny["training"]["rounds"] = 2
    scenario = validate_scenario(tiny)
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "full", tmp_path / "cut")
