"""FedSGA: split policy, monotone estimator, private prompts, prototypes, calibration."""

import pytest
import torch

from sflsim.algorithms.fedsga import MonotoneEstimator, alignment_loss, split_index
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario


@pytest.mark.parametrize(("r", "k"), [(0.9, 1), (0.2, 4), (1.0, 1), (0.0, 4), (0.5, 3)])
def test_split_policy_eq8_hand_values(r, k):
    # K = 4, rho = 0.1: k = min(4, max(1, ceil(4 (1 - r + 0.1))))
    assert split_index(r, 4, 0.1) == k


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_is_monotone_in_each_input(seed):
    torch.manual_seed(seed)
    est = MonotoneEstimator(hidden=8)
    with torch.no_grad():  # arbitrary (trained-like) weights
        for p in est.parameters():
            p.normal_(0, 2)
    obs = torch.rand(200, 3) * torch.tensor([2.0, 3.0, 3.0]) - torch.tensor([1.0, 0, 0])
    r_prev = torch.rand(200)
    base = est(obs, r_prev)
    for column, sign in ((0, 1), (1, -1), (2, -1)):
        moved = obs.clone()
        moved[:, column] += 0.5
        assert (sign * (est(moved, r_prev) - base) >= -1e-7).all(), column
    assert (est(obs, r_prev + 0.3) - base >= -1e-7).all()
    assert ((base >= 0) & (base <= 1)).all()


def test_alignment_loss_prefers_own_prototype():
    protos = torch.eye(3)
    z = torch.tensor([[5.0, 0, 0], [0, 5.0, 0]])
    good = alignment_loss(z, protos, torch.tensor([0, 1]), 0.5)
    bad = alignment_loss(z, protos, torch.tensor([1, 0]), 0.5)
    assert good < bad


@pytest.fixture
def fedsga_run(tiny):
    tiny["algorithm"] = {"name": "fedsga", "calibration_every": 2}
    tiny["training"]["rounds"] = 3
    return run_scenario(validate_scenario(tiny))


def test_records_a_split_per_client_per_round_and_charges_calibration(fedsga_run):
    clients, events, alg = fedsga_run.clients, fedsga_run.events, fedsga_run.algorithm
    assert len(clients) == 3 * 3 and clients.cut_layer.between(1, 5).all()
    assert [(r, c) for r, c, *_ in sorted(alg.decisions)] == [(r, c) for r in (1, 2, 3)
                                                               for c in range(3)]
    probes = events[events.activity == "calibration_probe"]
    assert set(probes["round"]) == {1, 3}  # calibration rounds 1, 1 + 2
    assert (probes.flops > 0).all()
    assert set(probes.actor) == {"client0", "client1", "client2", "server"}
    assert len(alg.calibration) == 2 * 3


def test_prompts_never_leave_their_client(fedsga_run):
    alg = fedsga_run.algorithm
    tokens = [alg.prompts[c].tokens for c in range(3)]
    assert not torch.equal(tokens[0], tokens[1])  # private, not averaged
    shared = [*alg.global_model.parameters(), *alg.harmonizer.parameters(),
              *alg.server_stages.parameters()]
    assert not any(t is p for t in tokens for p in shared)
    assert not any("prompt" in k for k in alg.global_model.state_dict())
    events = fedsga_run.events
    uploads = events[(events.activity == "upload_model")]
    for _, row in uploads.iterrows():  # uploads hold the stages only
        cut = fedsga_run.clients.query(f"round == {row['round']} and client_id == {row.client_id}"
                                       ).cut_layer.item()
        stage_bytes = 4 * sum(t.numel() for t in alg.global_model[:cut].state_dict().values())
        assert row.payload_bytes == stage_bytes


def test_prototypes_stay_unit_norm(fedsga_run):
    norms = fedsga_run.algorithm.prototypes.norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)


def test_ablation_switches(tiny):
    tiny["algorithm"] = {"name": "fedsga", "adapt": False, "harmonize": False,
                         "sufficiency": False}
    tiny["training"]["rounds"] = 2
    alg = run_scenario(validate_scenario(tiny)).algorithm
    assert alg.prompts == {}
    assert all(q == 0.0 for *_, q, _r, _cut in alg.decisions)
    assert all(r == pytest.approx((a + 1) / 2) for _, _, a, _, _, r, _ in alg.decisions)
    assert alg.calibration == []


def test_head_only_reading_runs(tiny):
    tiny["algorithm"] = {"name": "fedsga", "server_backbone": False}
    result = run_scenario(validate_scenario(tiny))
    assert len(result.algorithm.server_stages) == 0
    assert result.rounds.server_accuracy.notna().all()


@pytest.mark.parametrize("split", ["static", "random"])
def test_other_split_strategies(tiny, split):
    tiny["algorithm"] = {"name": "fedsga", "split": split, "candidates": [1, 3, 5]}
    clients = run_scenario(validate_scenario(tiny)).clients
    assert set(clients.cut_layer) <= ({3, 4, 5} if split == "static" else {1, 3, 5})


@pytest.mark.parametrize(("algorithm", "message"), [
    ({"name": "fedsga", "candidates": [1, 2, 3], "reference_split": 4}, "reference_split"),
    ({"name": "fedsga", "reference_split": 1}, "deeper than the shallowest"),
    ({"name": "fedsga", "rho": 1.5}, "algorithm.rho"),
    ({"name": "fedsga", "beta": -0.1}, "algorithm.beta"),
    ({"name": "fedsga", "candidates": [2, 7]}, "algorithm.candidates"),
    ({"name": "fedsga", "split": "resource"}, "round_budget_s"),
])
def test_bad_fedsga_configuration(tiny, algorithm, message):
    tiny["algorithm"] = algorithm
    with pytest.raises(ConfigError, match=message):
        validate_scenario(tiny)
