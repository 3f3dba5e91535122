"""FedSGA: split policy, monotone estimator, private prompts, prototypes, calibration."""

import copy
from pathlib import Path

import pytest
import torch

from sflsim.algorithms.fedsga import (
    Harmonizer,
    MonotoneEstimator,
    ServerPath,
    alignment_loss,
    split_index,
)
from sflsim.config import validate_scenario
from sflsim.engine import FifoResource
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario
from tests.conftest import TINY
from tests.test_resilience import StopAfter, assert_same_tables


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


def _fedsga_run():
    data = copy.deepcopy(TINY)
    data["algorithm"] = {"name": "fedsga", "calibration_every": 2}
    data["training"]["rounds"] = 3
    return run_scenario(validate_scenario(data))


@pytest.fixture(scope="module")
def fedsga_run():
    """A finished 3-round FedSGA run, shared by the tests that only read it."""
    return _fedsga_run()


@pytest.fixture
def own_fedsga_run():
    """The same run for one test that drives its algorithm further."""
    return _fedsga_run()


def test_records_a_split_per_client_per_round_and_charges_calibration(fedsga_run):
    clients, events, alg = fedsga_run.clients, fedsga_run.events, fedsga_run.algorithm
    assert len(clients) == 3 * 3 and clients.cut_layer.between(1, 5).all()
    assert [(r, c) for r, c, *_ in sorted(alg.decisions)] == [(r, c) for r in (1, 2, 3)
                                                               for c in range(3)]
    probes = events[events.activity == "calibration_probe"]
    # calibration rounds 1, 1 + 2; probe: adapted: in round 1 no client has an adapted prefix
    assert set(probes["round"]) == {3}
    assert (probes.flops > 0).all()
    assert set(probes.actor) == {"client0", "client1", "client2", "server"}
    assert len(alg.sufficiency.calibration) == 3
    # clients.csv: r every round; L_p1, L_pref and s in the calibration round only
    assert clients.sufficiency_r.between(0, 1).all()
    calibrated = clients[clients["round"] == 3]
    assert calibrated[["probe_loss_p1", "probe_loss_pref"]].gt(0).all().all()
    assert set(calibrated.sufficient_s) <= {0.0, 1.0}
    assert clients[clients["round"] < 3][["probe_loss_p1", "sufficient_s"]].isna().all().all()
    for row in calibrated.itertuples():
        loss1, loss_ref, s = alg.calibration_probes.records[(3, row.client_id)]
        assert (row.probe_loss_p1, row.probe_loss_pref, row.sufficient_s) == (loss1, loss_ref, s)
        assert s == float(loss1 <= 1.05 * loss_ref)  # eq. 7, beta 0.05


def test_shared_probe_calibrates_from_round_one(tiny):
    tiny["algorithm"] = {"name": "fedsga", "calibration_every": 2, "probe": "shared"}
    tiny["training"]["rounds"] = 3
    result = run_scenario(validate_scenario(tiny))
    probes = result.events[result.events.activity == "calibration_probe"]
    assert set(probes["round"]) == {1, 3}
    assert len(result.algorithm.sufficiency.calibration) == 2 * 3


def test_prompts_never_leave_their_client(fedsga_run):
    alg = fedsga_run.algorithm
    tokens = [alg.prompts[c].tokens for c in range(3)]
    assert not torch.equal(tokens[0], tokens[1])  # private, not averaged
    shared = [*alg.global_model.parameters(), *alg.server_side.harmonizer.parameters(),
              *alg.server_side.server_stages.parameters(), *alg.server_side.phi_s.parameters()]
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
    norms = fedsga_run.algorithm.class_prototypes.prototypes.norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)


def test_ablation_switches(tiny):
    tiny["algorithm"] = {"name": "fedsga", "adapt": False, "harmonize": False,
                         "sufficiency": False}
    tiny["training"]["rounds"] = 2
    alg = run_scenario(validate_scenario(tiny)).algorithm
    assert alg.prompts == {}
    assert all(q == 0.0 for *_, q, _r, _cut in alg.decisions)
    assert all(r == pytest.approx((a + 1) / 2) for _, _, a, _, _, r, _ in alg.decisions)
    assert alg.sufficiency.calibration == []


def test_head_only_reading_runs(tiny):
    tiny["algorithm"] = {"name": "fedsga", "server_backbone": False}
    result = run_scenario(validate_scenario(tiny))
    assert len(result.algorithm.server_side.server_stages) == 0
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


def test_defaults_are_the_readings_the_docstring_quotes(tiny):
    cfg = _fedsga(tiny).algorithm
    assert (cfg.server_update, cfg.client_fronts, cfg.backbone, cfg.probe, cfg.harmonizer,
            cfg.projector, cfg.phi_s, cfg.descriptor, cfg.prototypes, cfg.depth_embedding,
            cfg.prototype_update, cfg.before_first_fit) == (
        "per_client", "averaged", "one", "adapted", "shared", "two_layer", "separate",
        "before_decision", "previous_round", "representation", "per_round", "estimator")


@pytest.mark.parametrize(("server_update", "client_fronts", "backbone"), [
    ("sequential", "averaged", "one"), ("sequential", "averaged", "separate"),
    ("per_client", "averaged", "separate"), ("per_client", "local", "separate"),
    ("sequential", "local", "separate")])
def test_each_reading_runs(tiny, server_update, client_fronts, backbone):
    result = run_scenario(_fedsga(tiny, server_update=server_update, client_fronts=client_fronts,
                                  backbone=backbone))
    alg, events = result.algorithm, result.events
    assert result.rounds.server_accuracy.between(0, 1).all()
    assert alg.server_side.sequential == (server_update == "sequential")
    assert alg.server_side.copies == {}  # per_client: averaged into w_s at round end
    initial = alg.ctx.backbone.stages  # never trained: the common initialisation
    assert not all(_states_equal(s, i) for s, i in zip(alg.server_side.server_stages, initial[1:]))
    one = [s is g for s, g in zip(alg.server_side.server_stages, alg.global_model[1:])]
    assert all(one) if backbone == "one" else not any(one)
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
    assert _states_equal(seq.server_side.server_stages, per.server_side.server_stages)
    assert _states_equal(seq.server_side.harmonizer, per.server_side.harmonizer)
    assert _states_equal(seq.global_model, per.global_model)
    assert torch.equal(seq.class_prototypes.prototypes, per.class_prototypes.prototypes)
    assert seq.decisions == per.decisions
    cols = ["round", "actor", "activity", "client_id", "start_s", "end_s"]
    assert runs["sequential"].events[cols].equals(runs["per_client"].events[cols])


@pytest.mark.parametrize(("backbone", "depth_embedding"), [
    ("one", "cut"), ("separate", "cut"), ("one", "representation"), ("one", "none")])
def test_per_client_aggregation_averages_each_piece_over_the_copies_that_trained_it(
        tiny, backbone, depth_embedding):
    alg = run_scenario(_fedsga(tiny, rounds=1, backbone=backbone, harmonizer="per_client",
                               projector="per_depth", depth_embedding=depth_embedding)).algorithm
    cuts = {0: 1, 1: 3, 2: 4}
    n = {cid: len(alg.ctx.clients[cid].indices) for cid in cuts}
    before = copy.deepcopy(alg.server_side.harmonizer)

    def end_round(status):
        alg.cost_model.cut_layers, alg.protocol.status = dict(cuts), status
        alg.round_fronts = {cid: copy.deepcopy(alg.global_model[:4]) for cid in cuts}
        alg.client_copies = {cid: alg.round_fronts[cid][:cut] for cid, cut in cuts.items()}
        alg.server_side.copies = {cid: (cut, ServerPath(copy.deepcopy(alg.server_side.harmonizer), cut,
                                                   copy.deepcopy(alg.server_side.path(cut).stages)))
                             for cid, cut in cuts.items()}
        with torch.no_grad():
            for cid in cuts:
                for module in (alg.round_fronts[cid], alg.server_side.copies[cid][1]):
                    for t in module.state_dict().values():
                        t.fill_(cid + 1)
        alg.end_round(2)

    def mean(ids):
        return sum((cid + 1) * n[cid] for cid in ids) / sum(n[cid] for cid in ids)

    def value(module):
        return module.weight.detach().flatten()[0].item()

    def stage(module):  # the first conv of a ResNet stage (stage 1: the stem's conv)
        return value(module[0] if isinstance(module[0], torch.nn.Conv2d) else module[0].conv1)

    end_round({0: "trained", 1: "trained", 2: "trained"})
    g, w_s, h = alg.global_model, alg.server_side.server_stages, alg.server_side.harmonizer
    if backbone == "one":  # every stage was trained for every client, on one side or the other
        assert [stage(g[j]) for j in range(5)] == pytest.approx([mean([0, 1, 2])] * 5)
        assert g[4][0].bn1.running_var[0].item() == pytest.approx(mean([0, 1, 2]))
    else:  # fronts into the global model, server copies into w_s
        assert stage(g[0]) == pytest.approx(mean([0, 1, 2]))
        assert stage(g[1]) == pytest.approx(mean([1, 2]))  # stage 2: the fronts cut at 3, 4
        assert stage(g[3]) == 3.0
        assert stage(w_s[0]) == 1.0  # stage 2: only the server copy of the client cut at 1
        assert stage(w_s[2]) == pytest.approx(mean([0, 1]))  # stage 4
        assert stage(w_s[3]) == pytest.approx(mean([0, 1, 2]))  # stage 5
    assert value(h.inputs["1"]) == 1.0
    assert value(h.inputs["3"]) == 2.0
    assert _states_equal(h.inputs["2"], before.inputs["2"])  # nobody at cut 2
    if depth_embedding == "cut":  # row p over the clients at p
        assert h.depth_embedding.weight[4, 0].item() == 3.0
        assert torch.equal(h.depth_embedding.weight[2], before.depth_embedding.weight[2])
    elif depth_embedding == "representation":  # server_backbone: one row (L = 6) for all
        assert h.depth_embedding.weight[6, 0].item() == pytest.approx(mean([0, 1, 2]))
        assert torch.equal(h.depth_embedding.weight[:6], before.depth_embedding.weight[:6])
    else:
        assert h.depth_embedding is None
    assert value(h.head) == pytest.approx(mean([0, 1, 2]))
    assert value(h.mlp[0]) == pytest.approx(mean([0, 1, 2]))
    assert alg.server_side.copies == {} and alg.client_copies == {}

    end_round({0: "trained", 1: "late", 2: "trained"})  # a late client's copies never count
    assert value(alg.server_side.harmonizer.inputs["3"]) == 2.0  # as it was
    assert stage(g[4] if backbone == "one" else w_s[3]) == pytest.approx(mean([0, 2]))


def test_the_shared_harmonizer_is_one_module_stepped_by_every_client(tiny):
    alg = run_scenario(_fedsga(tiny, rounds=1)).algorithm
    alg.server_side.locks = {c: FifoResource(alg.sim.env) for c in range(3)}
    shared = [alg.server_side.for_client(alg.ctx.clients[c], cut, 2)[0] for c, cut in ((0, 1), (1, 3))]
    assert all(p.harmonizer is alg.server_side.harmonizer for p in shared)
    assert shared[0].stages[0] is not alg.server_side.server_stages[0]  # per_client: stages are copies
    initial = Harmonizer({p: alg.ctx.backbone.stage_output_dim(5) for p in range(1, 5)},
                         alg.cfg.projector_dim, 10)
    assert not _states_equal(alg.server_side.harmonizer, initial)
    per = run_scenario(_fedsga(tiny, rounds=1, harmonizer="per_client")).algorithm
    per.server_side.locks = {0: FifoResource(per.sim.env)}
    path = per.server_side.for_client(per.ctx.clients[0], 1, 2)[0]
    assert path.harmonizer is not per.server_side.harmonizer


def test_two_layer_projector_reads_the_padded_interface_and_the_depth_embedding():
    """§4.1.3's two-layer MLP over [Pool(z) zero-padded; e(p)]: widths 8 and 16 both fit,
    and the same pooled vector at another depth gives another Z."""
    torch.manual_seed(0)
    h = Harmonizer({1: 8, 2: 16}, dim=6, num_classes=3)
    assert [type(m) for m in h.mlp] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear]
    assert h.mlp[0].in_features == 16 + 6 and h.mlp[2].out_features == 6
    z8 = torch.randn(2, 8, 3, 3)
    padded = torch.cat([z8, torch.zeros(2, 8, 3, 3)], dim=1)
    assert torch.equal(h.embed(z8, 2), h.embed(padded, 2))
    assert not torch.allclose(h.embed(z8, 1), h.embed(z8, 2))
    assert h.embed(torch.randn(4, 16, 2, 2), 2).shape == (4, 6)
    plain = Harmonizer({1: 8, 2: 16}, dim=6, num_classes=3, harmonize=False)
    assert isinstance(plain.mlp, torch.nn.Linear)  # the ablation: one linear map, no e(p)
    assert torch.equal(plain.embed(z8, 1), plain.embed(z8, 2))


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


def test_observation_and_calibration_probes_move_no_statistics(own_fedsga_run):
    """Measurements (eqs. 3-5, Alg. 1): no parameter or BatchNorm statistic of the
    client's front or of w_s moves, and every module keeps its mode."""
    alg = own_fedsga_run.algorithm
    client = alg.ctx.clients[0]
    body = alg.client_body(0, copy.deepcopy(alg.global_model[:max(alg.candidates)]))
    watched = {"body": body, "w_s": alg.server_side.server_stages, "harmonizer": alg.server_side.harmonizer}
    before = {k: copy.deepcopy(m) for k, m in watched.items()}
    alg.server_side.locks[0] = FifoResource(alg.sim.env)
    idx = next(iter(alg.batching.batches(client)))
    alg.sim.run_until(alg.observation.observe(client, body, idx, calibrating=True))
    for key, module in watched.items():
        assert _states_equal(module, before[key]), key
        assert [m.training for m in module.modules()] == [m.training for m in before[key].modules()]
    assert all(m.training for m in body.modules())  # as built: train mode


# ----- one backbone: what the probes read, what a deeper cut downloads ------------------------
def test_the_probes_read_the_stages_that_training_updates(tiny, monkeypatch):
    """After round 1, in which the server trained stage 2 for the clients cut at 1: the
    shared probe forwards the aggregated stage 2 (the global model's, no longer the
    initial one), and the adapted probe each client's own stage 2 as trained for it."""
    from sflsim.algorithms.fedsga.probes import CalibrationProbes

    seen = {}
    original = CalibrationProbes.probe

    def probe(self, client, body, h1, x, y):
        alg = self.fedsga
        deeper = (alg.adapted[client.client_id] if alg.cfg.probe == "adapted"
                  else body[alg._position(alg.p1): alg._position(alg.p_ref)])
        seen[(alg.cfg.probe, alg.round_, client.client_id)] = (
            copy.deepcopy(deeper[0]), copy.deepcopy(alg.global_model[1]))
        return (yield from original(self, client, body, h1, x, y))

    monkeypatch.setattr(CalibrationProbes, "probe", probe)
    runs = {p: run_scenario(_fedsga(copy.deepcopy(tiny), rounds=2, probe=p, calibration_every=1,
                                    candidates=[1, 3], reference_split=3))
            for p in ("shared", "adapted")}
    initial = runs["shared"].algorithm.ctx.backbone.stages[1]
    for cid in range(3):
        stage2, global2 = seen[("shared", 2, cid)]
        assert _states_equal(stage2, global2) and not _states_equal(stage2, initial)
        own, global2 = seen[("adapted", 2, cid)]
        assert not _states_equal(own, initial) and not _states_equal(own, global2)
    assert ("adapted", 1, 0) not in seen  # round 1: nobody has trained a prefix yet


def test_a_deeper_cut_downloads_the_stages_it_adds(tiny):
    """sufficiency: false puts r = (a + 1) / 2 near 0.5, so k = ceil(4 (1.1 - r)) is 3 or
    4: each client downloads stages 1..p_1 with phi_s and the prototypes, then stages
    2..k, each charged on its downlink."""
    from sflsim.algorithms.global_model import model_bytes

    result = run_scenario(_fedsga(tiny, rounds=2, sufficiency=False))
    alg, events = result.algorithm, result.events
    assert set(result.clients.cut_layer) <= {3, 4}
    head = (model_bytes(alg.global_model[:1]) + model_bytes(alg.server_side.phi_s)
            + 4 * alg.class_prototypes.prototypes.numel())
    downloads = events[events.activity == "download_model"]
    for row in result.clients.itertuples():
        group = downloads[(downloads["round"] == row.round) & (downloads.client_id == row.client_id)]
        added = model_bytes(alg.global_model[1:row.cut_layer])
        assert group.payload_bytes.tolist() == [head, added]
        assert (group.end_s > group.start_s).all()
        assert row.bytes_down >= head + added


def test_the_descriptor_is_computed_before_the_decision_and_charged(tiny):
    result = run_scenario(_fedsga(tiny, rounds=2))
    events, alg = result.events, result.algorithm
    described = events[events.activity == "describe_prompts"]
    assert set(zip(described["round"], described.client_id)) == {(r, c) for r in (1, 2)
                                                                  for c in range(3)}
    assert (described.flops > 0).all() and set(described.actor) >= {"server", "client0"}
    assert all(len(alg.observation.descriptors[c]) == 2 for c in range(3))  # m^1, m^2: q of round 2 > 0
    assert (result.clients.query("round == 2").prompt_change_q > 0).all()
    late = run_scenario(_fedsga(copy.deepcopy(tiny), rounds=2, descriptor="after_training"))
    assert late.events[late.events.activity == "describe_prompts"].empty
    assert (late.clients.query("round == 2").prompt_change_q == 0).all()  # one round late


def test_every_fedsga_tensor_lives_where_the_backbone_does(tiny):
    """training.device: cuda puts the backbone on the GPU; FedSGA's own modules follow it.
    The meta device stands in for a GPU here."""
    from sflsim.algorithms.fedsga import FedSGA
    from sflsim.runner import build

    ctx, _ = build(_fedsga(tiny, rounds=1))
    ctx.backbone.stages.to("meta")
    ctx.backbone.head.to("meta")
    alg = FedSGA(ctx)
    modules = [alg.server_side.harmonizer, alg.sufficiency.estimator, alg.server_side.phi_s,
               alg.global_model, *alg.prompts.values()]
    tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    tensors += [alg.class_prototypes.prototypes, alg.class_prototypes.round_prototypes]
    assert tensors and all(t.device.type == "meta" for t in tensors)


def test_the_estimator_fit_recovers_from_saturation(tiny):
    """Gamma_theta fitted on labels that are 30 % ones predicts about 0.3 for inputs that
    carry no signal, even from weights that had saturated it at 0 (a clamped-probability
    loss would have no gradient there)."""
    from sflsim.algorithms.fedsga import FedSGA
    from sflsim.runner import build

    ctx, _ = build(_fedsga(tiny, rounds=1))
    alg = FedSGA(ctx)
    with torch.no_grad():
        alg.sufficiency.estimator.b2.fill_(-30.0)  # r = sigmoid(-30 + ...) ~ 1e-13
    alg.sufficiency.calibration = [([0.1, 0.1, 0.01], 0.5, float(i % 10 < 3)) for i in range(20)]
    alg.sufficiency.fit(steps=300)
    assert alg.sufficiency.estimator_r([0.1, 0.1, 0.01], 0) == pytest.approx(0.3, abs=0.05)


# ----- depth embedding, prototype timing, the estimator before its first fit -------------------
def _built(tiny, **algorithm):
    """A FedSGA of the tiny scenario, built, not run."""
    from sflsim.algorithms.fedsga import FedSGA
    from sflsim.runner import build

    ctx, _ = build(_fedsga(tiny, rounds=1, **algorithm))
    return FedSGA(ctx)


@pytest.mark.parametrize("depth_embedding", ["representation", "cut", "none"])
@pytest.mark.parametrize("server_backbone", [True, False])
def test_which_depth_embedding_each_cut_reads(tiny, depth_embedding, server_backbone):
    """§3.4's e is "the semantic level at which the representation is produced":
    representation reads the depth of what is pooled (the last stage, L = 6, for every cut
    when the server runs its stages first; the cut itself when the interface is pooled);
    cut reads e(p) of the cut; none has no embedding. The same pooled vector gives the same
    Z at every cut exactly when no cut-specific row is read."""
    alg = _built(tiny, depth_embedding=depth_embedding, server_backbone=server_backbone)
    h = alg.server_side.harmonizer
    rows = {p: h.row(p) for p in range(1, 6)}
    if depth_embedding == "none":
        assert h.depth_embedding is None and rows == dict.fromkeys(range(1, 6))
        assert not any("depth_embedding" in name for name, _ in h.named_parameters())
        assert h.mlp[0].in_features == h.width  # the MLP stays, without e
    elif depth_embedding == "representation" and server_backbone:
        assert rows == dict.fromkeys(range(1, 6), 6)
    else:
        assert rows == {p: p for p in range(1, 6)}
    pooled = torch.randn(4, alg.ctx.backbone.stage_output_dim(6) if server_backbone
                         else alg.ctx.backbone.stage_output_dim(1), 2, 2)
    with torch.no_grad():
        same = torch.equal(h.embed(pooled, 1), h.embed(pooled, 3))
    assert same == (depth_embedding == "none" or (depth_embedding == "representation"
                                                  and server_backbone))


def test_no_depth_embedding_means_no_embedding_parameter_moves_z(tiny):
    """cut: perturbing e(p) moves Z at p; none: Z at every cut is the MLP of the pooled
    interface alone (the same function as cut's MLP with its e columns removed)."""
    with_e, without = _built(tiny, depth_embedding="cut"), _built(tiny, depth_embedding="none")
    x = torch.randn(3, with_e.server_side.harmonizer.width, 2, 2)
    with torch.no_grad():
        before = with_e.server_side.harmonizer.embed(x, 2)
        with_e.server_side.harmonizer.depth_embedding.weight[2] += 1.0
        assert not torch.allclose(with_e.server_side.harmonizer.embed(x, 2), before)
        plain = without.server_side.harmonizer
        w1 = torch.nn.Linear(plain.width, plain.mlp[0].out_features)
        w1.load_state_dict({"weight": plain.mlp[0].weight, "bias": plain.mlp[0].bias})
        expected = plain.mlp[2](torch.relu(w1(x.mean(dim=(2, 3)))))
        assert torch.allclose(plain.embed(x, 2), expected, atol=1e-6)


@pytest.mark.parametrize("depth_embedding", ["representation", "cut", "none"])
@pytest.mark.parametrize("timing_only", [False, True])
def test_each_depth_embedding_runs(tiny, depth_embedding, timing_only):
    """Trained (sufficiency splits, phi_s: projector, per_depth projector, per-client
    harmonizer) and timing-only (static splits) runs under each setting."""
    tiny["training"]["timing_only"] = timing_only
    extra = ({"split": "static"} if timing_only else
             {"phi_s": "projector", "projector": "per_depth", "harmonizer": "per_client"})
    result = run_scenario(_fedsga(tiny, rounds=2, depth_embedding=depth_embedding, **extra))
    assert len(result.clients) == 2 * 3
    if not timing_only:
        assert result.rounds.server_accuracy.between(0, 1).all()
        assert result.clients.sufficiency_r.between(0, 1).all()


@pytest.mark.parametrize("depth_embedding", ["representation", "none", "cut"])
def test_shared_probes_over_one_backbone_differ_only_by_the_depth_embedding(tiny, depth_embedding):
    """probe: shared, server_backbone: true, one backbone: L_p1 and L_pref split the same
    weights at p_1 and p_ref. With no cut-specific row (representation, none) the two
    losses are equal and s is 1: the probe carries nothing; with cut they differ."""
    alg = run_scenario(_fedsga(tiny, rounds=1, probe="shared",
                               depth_embedding=depth_embedding)).algorithm
    losses = list(alg.calibration_probes.records.values())
    assert len(losses) == 3
    if depth_embedding == "cut":
        assert all(loss1 != loss_ref for loss1, loss_ref, _ in losses)
    else:
        assert all(loss1 == pytest.approx(loss_ref, rel=1e-5) and s == 1.0
                   for loss1, loss_ref, s in losses)


def test_per_round_prototypes_take_one_ema_step_over_the_round(tiny):
    """§3.4's C^t <- mu C^{t-1} + (1 - mu) (class mean over every participant's Z of the
    round): two clients' batches make one step from C^{t-1}, not two in a row."""
    alg = _built(tiny)
    mu, c0 = alg.cfg.mu, alg.class_prototypes.prototypes.clone()
    z1, z2 = torch.randn(4, c0.shape[1]), torch.randn(2, c0.shape[1])
    y1, y2 = torch.tensor([0, 0, 1, 3]), torch.tensor([0, 1])
    alg.class_prototypes.accumulate(z1, y1)
    alg.class_prototypes.accumulate(z2, y2)
    assert torch.equal(alg.class_prototypes.prototypes, c0)  # nothing moves before the round ends
    alg.class_prototypes.end_round()
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    y = torch.cat([y1, y2])
    for label in range(len(c0)):
        if label in (0, 1, 3):
            expected = torch.nn.functional.normalize(
                mu * c0[label] + (1 - mu) * z[y == label].mean(0), dim=0)
            assert torch.allclose(alg.class_prototypes.prototypes[label], expected, atol=1e-6)
        else:  # a class nobody sent stays as it was
            assert torch.equal(alg.class_prototypes.prototypes[label], c0[label])
    assert alg.class_prototypes.sums is None
    per_step = _built(copy.deepcopy(tiny), prototype_update="per_step")
    per_step.class_prototypes.update(z1, y1)
    per_step.class_prototypes.update(z2, y2)
    assert not torch.allclose(per_step.class_prototypes.prototypes[0], alg.class_prototypes.prototypes[0])


@pytest.mark.parametrize("prototype_update", ["per_round", "per_step"])
def test_when_the_prototypes_move(tiny, monkeypatch, prototype_update):
    """per_round: the EMA stands still through the round's server steps and moves once,
    at round end; per_step: it moves at every step."""
    from sflsim.algorithms.fedsga.prototypes import ClassPrototypes

    calls = {"step": 0, "still": 0, "round": 0}
    step, end = ClassPrototypes.update, ClassPrototypes.end_round
    accumulate = ClassPrototypes.accumulate

    def on_step(self, z, y):
        calls["step"] += 1
        return step(self, z, y)

    def on_accumulate(self, z, y):
        calls["still"] += torch.equal(self.prototypes, self.round_prototypes)
        return accumulate(self, z, y)

    def on_end(self):
        calls["round"] += self.sums is not None
        return end(self)

    monkeypatch.setattr(ClassPrototypes, "update", on_step)
    monkeypatch.setattr(ClassPrototypes, "accumulate", on_accumulate)
    monkeypatch.setattr(ClassPrototypes, "end_round", on_end)
    alg = run_scenario(_fedsga(tiny, rounds=2, prototype_update=prototype_update)).algorithm
    steps = sum(1 for _ in alg.steps.losses)
    if prototype_update == "per_round":
        assert calls["step"] == 0 and calls["round"] == 2 and calls["still"] == steps
    else:
        assert calls["step"] == steps and calls["round"] == 0 and calls["still"] == 0
    prototypes = alg.class_prototypes
    assert not torch.equal(prototypes.prototypes, prototypes.round_prototypes)  # round 2 moved them


@pytest.mark.parametrize("before_first_fit", ["estimator", "alignment"])
def test_r_before_the_estimator_is_first_fitted(tiny, before_first_fit):
    """probe: adapted, calibration every 2: the first fit is in round 3 (no client has an
    adapted prefix in round 1). Before it, estimator: r from Gamma_theta as initialised;
    alignment: r = (a + 1) / 2. From the fit on, Gamma_theta in both."""
    alg = run_scenario(_fedsga(tiny, rounds=3, before_first_fit=before_first_fit)).algorithm
    assert alg.sufficiency.fitted
    proxy = {(rnd, cid): r == pytest.approx((a + 1) / 2) for rnd, cid, a, _, _, r, _ in alg.decisions}
    early = [v for (rnd, _), v in proxy.items() if rnd < 3]
    assert all(early) if before_first_fit == "alignment" else not any(early)
    assert not any(v for (rnd, _), v in proxy.items() if rnd == 3)


@pytest.mark.parametrize("algorithm", [
    {"depth_embedding": "cut", "prototype_update": "per_step"},
    {"depth_embedding": "none", "before_first_fit": "alignment"},
    {"harmonizer": "per_client", "projector": "per_depth", "phi_s": "projector"}])
def test_resume_equals_the_uninterrupted_run(tiny, tmp_path, algorithm):
    """A run stopped after round 1 and resumed writes the uninterrupted run's tables (the
    embedding rows, the round's prototype sums and the fitted flag come back)."""
    scenario = _fedsga(tiny, rounds=3, **algorithm)
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "cut", tmp_path / "full")


@pytest.mark.parametrize("init, factor", [("normal", 1.0), ("scaled", 1 / 8), ("zeros", 0.0)])
def test_depth_embedding_init_scales_one_draw_and_leaves_the_rest(init, factor):
    def make(name):
        torch.manual_seed(0)
        return Harmonizer({1: 8, 2: 16}, 64, 10, embedding_init=name)
    normal, other = make("normal"), make(init)
    assert torch.allclose(other.depth_embedding.weight, factor * normal.depth_embedding.weight)
    for a, b in zip(normal.mlp.parameters(), other.mlp.parameters()):  # same draws after e
        assert torch.equal(a, b)
    if init == "scaled":  # N(0, 1/64): squared norm of a row about 1, not about 64
        assert other.depth_embedding.weight.pow(2).sum(1).mean().item() < 3


def test_depth_embedding_width_is_its_own():
    h = Harmonizer({1: 8, 2: 16}, 64, 10, embedding_dim=4)
    assert h.depth_embedding.weight.shape[1] == 4
    assert h.embed(torch.randn(5, 8, 3, 3), 1).shape == (5, 64)
    with pytest.raises(ValueError, match="embedding_dim must be 64"):
        Harmonizer({1: 8}, 64, 10, projector="per_depth", embedding_dim=4)


def test_a_depth_embedding_width_per_depth_cannot_use_is_refused():
    data = copy.deepcopy(TINY)
    data["algorithm"] = {"name": "fedsga", "projector": "per_depth", "depth_embedding_dim": 8}
    with pytest.raises(ConfigError, match="depth_embedding_dim must equal projector_dim"):
        validate_scenario(data)
