"""MultiSFL: branches, replay planning and transfers, master aggregation, resource cuts."""

import numpy as np
import pandas as pd
import pytest
import torch

from sflsim.algorithms.multisfl import choose_assistants, pull_towards, replay_quotas, samples_of
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.metrics.results import read_run_table
from sflsim.runner import build, run_scenario

REPLAY_ACTIVITIES = ("download_replay_model", "replay_forward", "send_replay_activations",
                     "server_replay")


def _multisfl(tiny, rounds=2, **algorithm):
    tiny["algorithm"] = {"name": "multisfl", "num_branches": 2,
                         "split": {"name": "static"}, **algorithm}
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 0.1}
    tiny["training"]["rounds"] = rounds
    return validate_scenario(tiny)


def test_runs_end_to_end_and_charges_replay(tiny):
    result = run_scenario(_multisfl(tiny))
    rounds, events = result.rounds, result.events
    assert list(rounds["round"]) == [0, 1, 2]  # round 0: the untrained model
    rounds = rounds[rounds["round"] >= 1]
    assert rounds.server_accuracy.between(0, 1).all()
    assert (rounds.bytes_up > 0).all() and (rounds.client_flops > 0).all()
    for activity in REPLAY_ACTIVITIES:
        assert activity in set(events.activity), activity
    sent = events[events.activity == "send_replay_activations"]
    assert (sent.payload_bytes > 0).all()
    assert (events[events.activity == "download_replay_model"].payload_bytes > 0).all()
    assert (events[events.activity == "replay_forward"].flops > 0).all()
    # the devices that sent replay in the last round are that round's assistants
    plan = result.algorithm.replay_plan
    assistants = {cid for branch in plan for cid in branch}
    assert set(sent[sent["round"] == 2].client_id) == assistants
    for b, branch in enumerate(plan):  # an assistant never serves its own branch
        assert all(result.algorithm.branch_of[cid] != b for cid in branch)
    # replay work is charged to the assistant's own device and uplink
    assert (sent.actor == "client" + sent.client_id.astype(str) + ":uplink").all()
    forward = events[events.activity == "replay_forward"]
    assert (forward.actor == "client" + forward.client_id.astype(str)).all()


def test_branch_assignment_covers_every_client_once_per_round(tiny):
    tiny["devices"]["weak"]["count"] = 4  # 6 clients
    _, alg = build(_multisfl(tiny, num_branches=3))
    seen = set()
    for _ in range(5):
        alg.assign_branches()
        members = [cid for group in alg.groups for cid in group]
        assert sorted(members) == list(range(6))
        assert all(len(group) == 2 for group in alg.groups)
        assert all(alg.branch_of[cid] == b for b, g in enumerate(alg.groups) for cid in g)
        seen.add(tuple(map(tuple, alg.groups)))
    assert len(seen) > 1  # a seeded reshuffle every round


def test_replay_quotas_follow_the_deficit_below_the_mean():
    score = np.array([0.4, 0.4, 0.1, 0.1])  # mean 0.25: classes 2 and 3 are short
    assert replay_quotas(score, 10).tolist() == [0, 0, 5, 5]
    assert replay_quotas(np.array([0.5, 0.3, 0.2, 0.0]), 7).tolist() == [0, 0, 1, 6]
    assert replay_quotas(np.full(4, 0.25), 10).sum() == 0
    assert replay_quotas(score, 0).sum() == 0


def test_assistants_are_the_richest_in_the_missing_classes():
    quotas = np.array([0, 0, 5, 5])
    counts = {7: np.array([100, 100, 0, 0]), 3: np.array([0, 0, 2, 1]),
              5: np.array([0, 0, 5, 4]), 9: np.array([0, 0, 0, 3])}
    chosen = choose_assistants(quotas, counts, [3, 5, 7, 9])
    assert list(chosen) == [5, 3]  # 5 supplies 9 of 10; then 3 and 9 tie at 1, lower id wins
    assert chosen[5].tolist() == [0, 0, 5, 4] and chosen[3].tolist() == [0, 0, 0, 1]
    assert list(choose_assistants(quotas, counts, [3, 5, 7, 9], max_assistants=1)) == [5]
    assert choose_assistants(quotas, counts, [7]) == {}


def test_plan_replay_on_a_hand_made_label_partition(tiny):
    _, alg = build(_multisfl(tiny, replay_min_samples=10))
    y = alg.ctx.data.y_train.numpy()
    by_class = {c: np.flatnonzero(y == c) for c in range(10)}
    parts = {0: np.concatenate([by_class[c][:10] for c in range(5)]),  # classes 0-4 only
             1: np.concatenate([by_class[c][10:20] for c in (5, 6)]),  # 10 each of 5, 6
             2: np.concatenate([by_class[c][20:21] for c in range(5, 10)])}  # 1 each of 5-9
    for cid, idx in parts.items():
        alg.ctx.clients[cid].indices = np.sort(idx)
        alg.label_counts[cid] = np.bincount(y[idx], minlength=10)
    alg.groups, alg.branch_of = [[0], [1, 2]], {0: 0, 1: 1, 2: 1}
    jobs = alg.plan_replay()
    # branch 0 lacks classes 5-9 (2 each); client 2 has one of each, client 1 the rest of 5, 6
    assert list(alg.replay_plan[0]) == [2, 1]
    assert alg.replay_plan[0][2].tolist() == [0] * 5 + [1] * 5
    assert alg.replay_plan[0][1].tolist() == [0] * 5 + [1, 1, 0, 0, 0]
    for cid in (1, 2):
        (branch, idx), *_ = jobs[cid]
        assert branch == 0
        assert set(idx.tolist()) <= set(parts[cid].tolist())
        assert np.bincount(y[idx.numpy()], minlength=10).tolist() == \
            alg.replay_plan[0][cid].tolist()


def test_master_is_the_sample_weighted_average_of_branches(tiny):
    _, alg = build(_multisfl(tiny, master_pull=0.1))
    alg.groups = [[0], [1, 2]]
    for cid, n in enumerate((60, 100, 80)):  # branch weights 60 and 180
        alg.ctx.clients[cid].indices = np.arange(n)
    assert [samples_of(alg.ctx.clients, alg.groups[b]) for b in (0, 1)] == [60, 180]
    with torch.no_grad():
        for branch, value in zip(alg.branches, (1.0, 4.0)):
            for t in branch.state_dict().values():
                if t.is_floating_point():
                    t.fill_(value)
    alg.aggregate_master()
    for t in alg.global_model.state_dict().values():
        if t.is_floating_point():
            assert torch.allclose(t, torch.full_like(t, 3.25))  # (60 * 1 + 180 * 4) / 240
    pull_towards(alg.branches, alg.global_model, alg.cfg.master_pull)  # 0.9 * branch + 0.1 * master
    for branch, value in zip(alg.branches, (1.225, 3.925)):
        for t in branch.state_dict().values():
            if t.is_floating_point():
                assert torch.allclose(t, torch.full_like(t, value))


def test_resource_policy_gives_faster_devices_deeper_cuts(tiny):
    fast = {"uplink_bps": "1 Gbps", "downlink_bps": "1 Gbps", "latency_s": "1 ms"}
    tiny["devices"] = {
        "weak": {"profile": "rpi4", "count": 1, "end_layer": 3, "link": "wifi",
                 "link_override": fast},
        "strong": {"profile": "jetson_orin_nano", "count": 1, "end_layer": 3, "link": "wifi",
                   "link_override": fast},
    }
    tiny["algorithm"] = {"name": "multisfl",
                         "split": {"name": "resource", "round_budget_s": "0.05 s"}}
    ctx, alg = build(validate_scenario(tiny))
    assert alg.num_branches == 2  # default min(4, clients)
    cuts = alg.policy.choose(1)
    assert cuts[1] > cuts[0]  # Jetson Orin Nano deeper than Raspberry Pi 4 on the same link
    for cid, cut in cuts.items():
        fits = [k for k in alg.candidates if alg.round_time_s(ctx.clients[cid], k) <= 0.05]
        assert cut == (max(fits) if fits else min(alg.candidates))
    alg.cost_model.cut_layers = cuts
    for cid, cut in cuts.items():
        expected = sum(p.numel() for stage in ctx.backbone.stages[:cut] for p in stage.parameters())
        assert alg.activated_params(cid) == expected


def test_adaptive_replay_doubles_on_rising_gradient_norm_and_halves_on_falling(tiny):
    _, alg = build(_multisfl(tiny, replay_fraction=0.05, replay_fraction_max=0.15))
    fractions = []
    for norm in (1.0, 2.0, 3.0, 0.1, 0.1):
        alg.grad_norms = [[norm], [norm]]
        alg.adapt_replay_fraction(1)
        fractions.append(alg.replay_fraction)
    assert fractions == pytest.approx([0.05, 0.1, 0.15, 0.075, 0.05])


def test_same_seed_same_rounds(tiny, tmp_path):
    scenario = _multisfl(tiny, split={"name": "random"})
    for name in ("a", "b"):
        run_scenario(scenario, tmp_path / name)
    a, b = (pd.read_csv(tmp_path / n / "rounds.csv").drop(columns=["wall_time_s"]) for n in "ab")
    pd.testing.assert_frame_equal(a, b)
    ca, cb = (read_run_table(tmp_path / n, "clients") for n in "ab")
    pd.testing.assert_frame_equal(ca, cb)


def test_default_split_is_resource_and_bad_settings_name_the_field(tiny):
    tiny["algorithm"] = {"name": "multisfl"}
    assert validate_scenario(tiny).algorithm.split.name == "resource"
    tiny["algorithm"] = {"name": "multisfl", "replay_fraction": 0.3}
    with pytest.raises(ConfigError, match="replay_fraction_max"):
        validate_scenario(tiny)
    tiny["algorithm"] = {"name": "multisfl", "num_branches": 4}
    with pytest.raises(ConfigError, match="algorithm.num_branches"):
        build(validate_scenario(tiny))
