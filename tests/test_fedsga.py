"""FedSGA: split policy, monotone estimator, private prompts, prototypes, calibration."""

import copy
from pathlib import Path

import pytest
import torch

from sflsim.algorithms.fedsga import MonotoneEstimator, ServerPath, alignment_loss, split_index
from sflsim.config import validate_scenario
from sflsim.engine import FifoResource
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


# ----- readings as switches: server_update, client_fronts (module docstring) -----------------
def _fedsga(tiny, rounds=2, **algorithm):
    tiny["algorithm"] = {"name": "fedsga", "calibration_every": 2, **algorithm}
    tiny["training"]["rounds"] = rounds
    return validate_scenario(tiny)


def _states_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_defaults_are_per_client_server_and_averaged_fronts(tiny):
    cfg = _fedsga(tiny).algorithm
    assert (cfg.server_update, cfg.client_fronts) == ("per_client", "averaged")


@pytest.mark.parametrize(("server_update", "client_fronts"), [
    ("sequential", "averaged"), ("per_client", "local"), ("sequential", "local")])
def test_each_reading_runs(tiny, server_update, client_fronts):
    result = run_scenario(_fedsga(tiny, server_update=server_update, client_fronts=client_fronts))
    alg, events = result.algorithm, result.events
    assert result.rounds.server_accuracy.between(0, 1).all()
    assert hasattr(alg, "server_optimizer") == (server_update == "sequential")
    assert alg.server_copies == {}  # per_client: averaged into w_s at round end
    initial = alg.ctx.backbone.stages  # never trained: the common initialisation
    assert not all(_states_equal(s, i) for s, i in zip(alg.server_stages, initial[1:]))
    uploads = events[events.activity == "upload_model"]
    deepest = max(alg.candidates)
    if client_fronts == "local":
        assert uploads.empty
        assert all(_states_equal(g, i) for g, i in zip(alg.global_model[:deepest], initial))
        fronts = [alg.fronts[c][0] for c in range(3)]  # stage 1: every client trains it
        assert not _states_equal(fronts[0], fronts[1])
        assert not any(f is g for f in fronts for g in alg.global_model)
    else:
        assert len(uploads) == 2 * 3 and alg.fronts == {}
        assert not _states_equal(alg.global_model[0], initial[0])


def test_per_client_with_one_client_updates_w_s_as_sequential(tiny):
    """One client, plain SGD (no optimizer state): a copy trained and 'averaged' alone is
    the shared w_s trained in place, bit for bit, with the same simulated times."""
    tiny["devices"] = {"one": {"profile": "rpi4", "count": 1, "end_layer": 3, "link": "wifi"}}
    tiny["training"]["optimizer"] = {"name": "sgd", "lr": 0.05}
    runs = {mode: run_scenario(_fedsga(copy.deepcopy(tiny), rounds=2, server_update=mode))
            for mode in ("sequential", "per_client")}
    seq, per = runs["sequential"].algorithm, runs["per_client"].algorithm
    assert _states_equal(seq.server_stages, per.server_stages)
    assert _states_equal(seq.harmonizer, per.harmonizer)
    assert _states_equal(seq.global_model, per.global_model)
    assert torch.equal(seq.prototypes, per.prototypes)
    assert seq.decisions == per.decisions
    cols = ["round", "actor", "activity", "client_id", "start_s", "end_s"]
    assert runs["sequential"].events[cols].equals(runs["per_client"].events[cols])


def test_per_client_aggregation_averages_each_piece_over_the_copies_that_trained_it(fedsga_run):
    alg = fedsga_run.algorithm
    cuts = {0: 1, 1: 3, 2: 3}
    n = {cid: len(alg.ctx.clients[cid].indices) for cid in cuts}
    before = copy.deepcopy(alg.harmonizer)

    def aggregate(status):
        copies = {}
        for cid, cut in cuts.items():
            path = ServerPath(copy.deepcopy(alg.harmonizer), cut,
                              copy.deepcopy(alg.server_path(cut).stages))
            with torch.no_grad():
                for t in path.state_dict().values():
                    t.fill_(cid + 1)
            copies[cid] = (cut, path)
        alg.server_copies, alg.status = copies, status
        alg.aggregate_server_copies()

    def mean(ids):
        return sum((cid + 1) * n[cid] for cid in ids) / sum(n[cid] for cid in ids)

    def value(module):
        return module.weight.detach().flatten()[0].item()

    aggregate({0: "trained", 1: "trained", 2: "trained"})
    h = alg.harmonizer
    assert value(alg.server_stages[0][0].conv1) == 1.0  # stage 2: only the client cut at 1
    assert value(alg.server_stages[2][0].conv1) == pytest.approx(mean([0, 1, 2]))  # stage 4
    assert alg.server_stages[2][0].bn1.running_var[0].item() == pytest.approx(mean([0, 1, 2]))
    assert value(h.inputs["1"]) == 1.0
    assert value(h.inputs["3"]) == pytest.approx(mean([1, 2]))
    assert _states_equal(h.inputs["2"], before.inputs["2"])  # nobody at cut 2
    assert h.depth_embedding.weight[3, 0].item() == pytest.approx(mean([1, 2]))
    assert torch.equal(h.depth_embedding.weight[2], before.depth_embedding.weight[2])
    assert value(h.head) == pytest.approx(mean([0, 1, 2]))
    assert value(h.mlp[0]) == pytest.approx(mean([0, 1, 2]))
    assert alg.server_copies == {}

    aggregate({0: "trained", 1: "late", 2: "trained"})  # a late client's copy never counts
    assert value(h.inputs["3"]) == 3.0
    assert value(alg.server_stages[2][0].conv1) == pytest.approx(mean([0, 2]))


def test_per_client_server_work_runs_in_parallel_up_to_the_slots(tiny, profile_dir):
    """A slow server with 2 slots: per-client server steps overlap (never more than 2 at
    once); the shared w_s of sequential takes one step at a time."""
    a100 = Path("device_profiles/servers/a100.yaml").read_text()
    profile_dir("servers", "slow_server", a100.replace('value: "15 TFLOPS"', 'value: "20 GFLOPS"'))
    tiny["server"] = {"profile": "slow_server", "slots": 2}
    tiny["devices"] = {"same": {"profile": "jetson_orin_nano", "count": 3, "end_layer": 3,
                                "link": "wifi"}}
    most = {}
    for mode in ("sequential", "per_client"):
        events = run_scenario(_fedsga(copy.deepcopy(tiny), rounds=1, split="static",
                                      server_update=mode)).events
        steps = events[events.activity.isin(["server_train", "calibration_probe"])
                       & (events.actor == "server")]
        most[mode] = max(int(((steps.start_s < t) & (steps.end_s > t)).sum())
                         for t in (steps.start_s + steps.end_s) / 2)
    assert most == {"sequential": 1, "per_client": 2}


def test_observation_and_calibration_probes_move_no_statistics(fedsga_run):
    """Measurements (eqs. 3-5, Alg. 1): no parameter or BatchNorm statistic of the
    client's front or of w_s moves, and every module keeps its mode."""
    alg = fedsga_run.algorithm
    client = alg.ctx.clients[0]
    body = alg.client_body(0, copy.deepcopy(alg.global_model[:max(alg.candidates)]))
    watched = {"body": body, "w_s": alg.server_stages, "harmonizer": alg.harmonizer}
    before = {k: copy.deepcopy(m) for k, m in watched.items()}
    alg.server_locks[0] = FifoResource(alg.sim.env)
    idx = next(iter(alg.batches(client)))
    alg.sim.run_until(alg.observe(client, body, idx, calibrating=True))
    for key, module in watched.items():
        assert _states_equal(module, before[key]), key
        assert [m.training for m in module.modules()] == [m.training for m in before[key].modules()]
    assert all(m.training for m in body.modules())  # as built: train mode
