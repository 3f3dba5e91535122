"""FedAvg and SplitFed: aggregation, equivalence with centralised training, split policies."""

import copy

import pytest
import torch
from torch import nn

from sflsim.algorithms.aggregation import weighted_average
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.runner import build, run_scenario


def test_weighted_average_uses_sample_counts_and_keeps_integers():
    a, b = nn.BatchNorm2d(1), nn.BatchNorm2d(1)
    with torch.no_grad():
        a.weight.fill_(0.0), b.weight.fill_(1.0)
        a.running_mean.fill_(0.0), b.running_mean.fill_(1.0)
    a.num_batches_tracked.fill_(2), b.num_batches_tracked.fill_(7)
    mean = weighted_average([a.state_dict(), b.state_dict()], [100, 300])  # shares 0.25 / 0.75
    assert mean["weight"].item() == pytest.approx(0.75)
    assert mean["running_mean"].item() == pytest.approx(0.75)
    assert mean["num_batches_tracked"].dtype == torch.long
    assert mean["num_batches_tracked"].item() == round(0.25 * 2 + 0.75 * 7)


def test_weighted_average_rejects_zero_weights():
    with pytest.raises(ValueError, match="sum to more than 0"):
        weighted_average([nn.Linear(1, 1).state_dict()], [0])


def _one_client(tiny, algorithm):
    tiny["devices"] = {"only": {"profile": "rpi4", "count": 1, "end_layer": 3, "link": "wifi"}}
    tiny["algorithm"] = algorithm
    tiny["training"].update(optimizer={"name": "sgd", "lr": 0.05}, schedule={"name": "constant"},
                            batch_size=32, rounds=1)
    return validate_scenario(tiny)


def _train_whole_model_reference(ctx, generator_state):
    """Plain SGD on the whole model, same initial weights and batch order as the client."""
    whole = nn.Sequential(*copy.deepcopy([*ctx.backbone.stages, ctx.backbone.head]))
    opt = torch.optim.SGD(whole.parameters(), lr=0.05)
    client = ctx.clients[0]
    gen = torch.Generator().set_state(generator_state)
    order = torch.randperm(len(client.indices), generator=gen)
    for idx in torch.split(torch.as_tensor(client.indices)[order], 32):
        loss = nn.functional.cross_entropy(whole(ctx.data.train_images(idx)),
                                       ctx.data.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return whole


@pytest.mark.parametrize("algorithm", [{"name": "splitfed_v1"}, {"name": "splitfed_v2"},
                                       {"name": "fedavg"}])
def test_one_client_equals_training_in_one_place(tiny, algorithm):
    scenario = _one_client(tiny, algorithm)
    ctx, alg = build(scenario)
    reference = _train_whole_model_reference(ctx, ctx.clients[0].generator.get_state())
    alg.sim.round = 1
    alg.sim.run_until(alg.train_round(1))
    alg.end_round(1)
    for (name, p), q in zip(alg.global_model.named_parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    for b, c in zip(alg.global_model.buffers(), reference.buffers()):
        assert torch.allclose(b.float(), c.float(), atol=1e-6)


def test_splitfed_client_waits_for_activation_gradients(tiny):
    tiny["algorithm"] = {"name": "splitfed_v1"}
    events = run_scenario(validate_scenario(tiny)).events
    for cid, ev in events.groupby("client_id"):
        if cid < 0:
            continue
        forward = ev[ev.activity == "client_forward"].sort_values("start_s")
        grads = ev[ev.activity == "send_gradients"].sort_values("start_s")
        backward = ev[ev.activity == "client_backward"].sort_values("start_s")
        assert len(forward) == len(grads) == len(backward) > 0
        assert (backward.start_s.values >= grads.end_s.values - 1e-12).all()
        assert (forward.start_s.values[1:] >= backward.end_s.values[:-1] - 1e-12).all()
    kinds = set(events.activity)
    assert {"download_model", "upload_model", "send_activations", "server_train"} <= kinds


def test_random_split_is_seeded_and_within_candidates(tiny):
    tiny["algorithm"] = {"name": "splitfed_v2", "split": {"name": "random",
                                                          "candidates": [1, 2, 4]}}
    tiny["training"]["rounds"] = 3
    first = run_scenario(validate_scenario(tiny)).clients
    again = run_scenario(validate_scenario(tiny)).clients
    assert set(first.cut_layer) <= {1, 2, 4}
    assert list(first.cut_layer) == list(again.cut_layer)
    assert first.cut_layer.nunique() > 1


def test_resource_split_gives_faster_devices_deeper_cuts(tiny):
    tiny["algorithm"] = {"name": "splitfed_v1", "split": {"name": "resource",
                                                          "round_budget_s": "0.5 s"}}
    ctx, alg = build(validate_scenario(tiny))
    cuts = alg.policy.choose(1)
    weak, strong = cuts[0], cuts[2]  # rpi4 on Wi-Fi vs Jetson Orin Nano on Wi-Fi
    assert strong >= weak
    for cid, cut in cuts.items():
        times = {k: alg.round_time_s(ctx.clients[cid], k) for k in alg.candidates}
        fits = [k for k, t in times.items() if t <= 0.5]
        assert cut == (max(fits) if fits else min(times, key=times.get))


@pytest.mark.parametrize(("split", "message"), [
    ({"name": "static", "candidates": [0, 3]}, "algorithm.split.candidates"),
    ({"name": "static", "candidates": [3, 6]}, "valid cut layers: 1 to 5"),
    ({"name": "resource"}, "round_budget_s"),
])
def test_bad_split_configuration(tiny, split, message):
    tiny["algorithm"] = {"name": "splitfed_v1", "split": split}
    with pytest.raises(ConfigError, match=message):
        validate_scenario(tiny)
