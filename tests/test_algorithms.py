"""Hetero-SplitEE strategies and baselines: order, aggregation, timing."""

import pytest
import torch
from torch import nn

from sflsim.algorithms.hetero_splitee import cross_layer_aggregate
from sflsim.config import validate_scenario
from sflsim.models import MODELS
from sflsim.models.cost import count_flops
from sflsim.runner import run_scenario
from tests.conftest import sourced


def _device_yaml(flops: str) -> str:
    import yaml

    fields = {"description": "test device", "sustained_flops": sourced(flops),
              "memory_bytes": sourced("4 GiB"), "active_power_w": sourced("5 W"),
              "idle_power_w": sourced("1 W"), "radio_tx_power_w": sourced("1 W"),
              "radio_rx_power_w": sourced("1 W")}
    return yaml.safe_dump(fields)


def test_one_client_zero_latency_time_is_sum_of_compute(tiny, profile_dir):
    """One client, instant link: sim time = client compute + the last server step."""
    profile_dir("devices", "unit_device", _device_yaml("1 GFLOPS"))
    tiny["devices"] = {"only": {"profile": "unit_device", "count": 1, "end_layer": 3,
                                "link": "wifi", "link_override": {
                                    "uplink_bps": 1e18, "downlink_bps": 1e18, "latency_s": 0}}}
    result = run_scenario(validate_scenario(tiny))
    ev = result.events
    client = ev[ev.actor == "client0"]
    n_samples = len(result.algorithm.ctx.clients[0].indices)
    # hand arithmetic: FLOPs of the client-side model + exit head over 1e9 FLOP/s
    backbone = result.algorithm.ctx.backbone
    piece = nn.Sequential(backbone.client_model(3), backbone.exit_head(3))
    per_sample = count_flops(piece, backbone.input_shape)
    expected_client_s = (per_sample.forward_flops + per_sample.backward_flops) * n_samples / 1e9
    assert (client.end_s - client.start_s).sum() == pytest.approx(expected_client_s, rel=1e-9)
    last_server = ev[ev.actor == "server"].iloc[-1]
    assert result.summary["sim_time_s"] == pytest.approx(
        expected_client_s + (last_server.end_s - last_server.start_s), rel=1e-6)


def test_sequential_serves_fast_device_first(tiny, profile_dir):
    profile_dir("devices", "slow_device", _device_yaml("1 GFLOPS"))
    profile_dir("devices", "fast_device", _device_yaml("100 GFLOPS"))
    tiny["devices"] = {  # the slow client has the lower id, so insertion order alone would favour it
        "slow": {"profile": "slow_device", "count": 1, "end_layer": 3, "link": "wifi"},
        "fast": {"profile": "fast_device", "count": 1, "end_layer": 3, "link": "wifi"},
    }
    tiny["training"]["batch_size"] = 1000  # one batch per client
    result = run_scenario(validate_scenario(tiny))
    steps = result.algorithm.steps.server_steps
    assert [cid for _, cid, _ in steps] == [1, 0]
    served = result.events[result.events.activity == "server_train"].sort_values("seq")
    assert list(served.client_id) == [1, 0]


def test_cross_layer_aggregation_hand_case():
    """End layers 3, 4, 5: C_l = {i | l_i < l} (paper eq. 1)."""
    backbone = MODELS["hetero_splitee_resnet"](in_channels=1, image_size=28, num_classes=10,
                                               width=0.0625)
    models = [(end, backbone.server_model(end)) for end in (3, 4, 5)]
    with torch.no_grad():  # give each client's copy distinct weights: client i adds i
        for i, (_, m) in enumerate(models):
            for p in m.parameters():
                p.add_(float(i))
    before = {i: [p.clone() for p in m.parameters()] for i, (_, m) in enumerate(models)}
    members = cross_layer_aggregate(models, backbone.num_stages)
    assert members == {4: [0], 5: [0, 1], 6: [0, 1, 2], 7: [0, 1, 2]}
    # layer 4 held only by client 0 (end layer 3): unchanged
    assert torch.equal(models[0][1][0][0].conv1.weight, before[0][0])
    # layer 5 averaged over clients 0 and 1; layer 6 and the head over all three
    w5 = [models[0][1][1][0].conv1.weight, models[1][1][0][0].conv1.weight]
    assert torch.allclose(w5[0], w5[1])
    w6 = [m[-2][0].conv1.weight for _, m in models]
    assert torch.allclose(w6[0], w6[2]) and torch.allclose(w6[1], w6[2])
    heads = [m[-1][2].weight for _, m in models]
    original = heads[0] - 0  # after averaging, offsets 0,1,2 average to +1
    assert torch.allclose(heads[2], original)
    fresh_head = backbone.server_model(5)[-1][2].weight
    assert torch.allclose(heads[0], fresh_head + 1.0)


def test_cross_layer_aggregation_by_samples():
    """``weighting: samples``: within each C_l, copies weigh their clients' samples
    (renormalised); uniform weights give the paper's unweighted mean."""
    backbone = MODELS["hetero_splitee_resnet"](in_channels=1, image_size=28, num_classes=10,
                                               width=0.0625)
    def offset_models():
        models = [(end, backbone.server_model(end)) for end in (3, 4, 5)]
        with torch.no_grad():  # client i adds i to every parameter
            for i, (_, m) in enumerate(models):
                for p in m.parameters():
                    p.add_(float(i))
        return models

    fresh_head = backbone.server_model(5)[-1][2].weight
    models = offset_models()
    cross_layer_aggregate(models, backbone.num_stages, [1.0, 3.0, 6.0])
    # the head (all three): offsets 0, 1, 2 weighted 1, 3, 6 -> (3 + 12) / 10 = 1.5
    assert torch.allclose(models[0][1][-1][2].weight, fresh_head + 1.5)
    # layer 5 (clients 0 and 1): (0 * 1 + 1 * 3) / 4 = 0.75
    w5 = backbone.server_model(3)[1][0].conv1.weight
    assert torch.allclose(models[0][1][1][0].conv1.weight, w5 + 0.75)
    models = offset_models()
    cross_layer_aggregate(models, backbone.num_stages, [2.0, 2.0, 2.0])  # equal: eq. 1
    assert torch.allclose(models[0][1][-1][2].weight, fresh_head + 1.0)


def test_averaging_weighting_option_reaches_the_aggregation(tiny, monkeypatch):
    import sflsim.algorithms.hetero_splitee as hs

    seen = []
    original = hs.cross_layer_aggregate

    def spy(models, num_stages, weights=None, **kwargs):
        seen.append(weights)
        return original(models, num_stages, weights, **kwargs)

    monkeypatch.setattr(hs, "cross_layer_aggregate", spy)
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 0.5}  # unequal sizes
    for weighting in ("uniform", "samples"):
        tiny["algorithm"] = {"name": "hetero_splitee_averaging", "weighting": weighting}
        alg = run_scenario(validate_scenario(tiny)).algorithm
    sizes = [float(len(c.indices)) for c in alg.ctx.clients]
    assert seen == [None, sizes] and len(set(sizes)) > 1


def test_averaging_synchronises_shared_layers(tiny):
    tiny["algorithm"] = {"name": "hetero_splitee_averaging"}
    alg = run_scenario(validate_scenario(tiny)).algorithm
    heads = [alg.server_models[c][-1][2].weight for c in range(3)]
    assert torch.equal(heads[0], heads[1]) and torch.equal(heads[1], heads[2])


def test_distributed_does_not_share(tiny):
    tiny["algorithm"] = {"name": "distributed"}
    alg = run_scenario(validate_scenario(tiny)).algorithm
    heads = [alg.server_models[c][-1][2].weight for c in range(3)]
    assert not torch.equal(heads[0], heads[1])


def test_sequential_server_lr_divided_by_clients(tiny):
    alg = run_scenario(validate_scenario(tiny)).algorithm
    assert alg.server_optimizer.param_groups[0]["initial_lr"] == pytest.approx(1e-3 / 3)


def test_centralized_uploads_data_then_trains_at_server(tiny):
    tiny["algorithm"] = {"name": "centralized"}
    result = run_scenario(validate_scenario(tiny))
    ev = result.events
    uploads = ev[ev.activity == "upload_data"]
    assert uploads.payload_bytes.sum() == 240 * (28 * 28 + 1)
    assert (ev[ev.activity == "central_train"].start_s >= uploads.end_s.max()).all()
    assert not ev.actor.str.fullmatch(r"client\d+").any()  # no compute on the devices


@pytest.mark.parametrize("algorithm", ["hetero_splitee_sequential", "hetero_splitee_averaging"])
def test_booked_rounds_give_the_step_by_step_rounds(tiny, algorithm):
    """Without a round deadline Hetero-SplitEE books each client's compute and uplink
    from the round's start; with a deadline (here one never reached) every step is a
    simulated process. Both give the same activities at the same times (to float
    rounding), the same bytes and FLOPs, and, the server's steps running in the same
    order, the same trained models."""
    import pandas as pd

    from sflsim.config.scenario import Scenario

    tiny["algorithm"] = {"name": algorithm}
    tiny["training"]["rounds"] = 2
    tiny["conditions"] = {"straggler_sigma": 0.3}
    booked = run_scenario(Scenario.model_validate(tiny))
    tiny["conditions"]["round_deadline_s"] = 1e9
    stepped = run_scenario(Scenario.model_validate(tiny))
    key = ["round", "end_s", "actor", "activity", "start_s"]

    def events(result):
        return result.events.sort_values(key, kind="stable").drop(columns="seq").reset_index(
            drop=True)

    pd.testing.assert_frame_equal(events(booked), events(stepped), rtol=1e-12)
    assert (booked.events["end_s"].diff().dropna() >= 0).all()  # in order of completion
    same = ["bytes_up", "bytes_down", "client_flops", "server_flops", "server_accuracy",
            "client_accuracy"]
    pd.testing.assert_frame_equal(booked.rounds[same], stepped.rounds[same], check_exact=True)
