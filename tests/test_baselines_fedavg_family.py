"""FedProx, FedBABU and FedMut (the FedAvg family of FedSGA's Table 2): each reduces to
FedAvg where its paper says it should, does what sets it apart, and runs from the CLI."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from sflsim.algorithms.fedavg import FedAvg
from sflsim.algorithms.fedbabu import FedBABU, last_linear
from sflsim.algorithms.fedmut import FedMut
from sflsim.algorithms.protocol import RoundConditions
from sflsim.cli.main import app
from sflsim.config import load_scenario, validate_scenario
from sflsim.runner import build, run_scenario
from tests.test_resilience import StopAfter, assert_same_tables

WALL = ["wall_time_s"]
NAMES = ["fedprox", "fedbabu", "fedmut"]


@pytest.fixture
def small(tiny) -> dict:
    """``tiny`` on the small CNN: 3 clients (weak x1, mid x1, strong x1) of unequal size,
    2 rounds, each run well under a second."""
    tiny["model"] = {"name": "small_cnn", "width": 0.5}
    for group in tiny["devices"].values():
        group["end_layer"] = 1
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}
    tiny["training"]["rounds"] = 2
    return tiny


def _run(scenario: dict, algorithm: dict):
    scenario = copy.deepcopy(scenario)
    scenario["algorithm"] = algorithm
    return run_scenario(validate_scenario(scenario))


def _same_run(a, b) -> None:
    pd.testing.assert_frame_equal(a.rounds.drop(columns=WALL), b.rounds.drop(columns=WALL),
                                  check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)


@pytest.mark.parametrize("algorithm", [{"name": "fedprox", "mu": 0.0},
                                       {"name": "fedmut", "alpha": 0.0}])
def test_the_neutral_setting_is_fedavg_bit_for_bit(small, algorithm):
    small["devices"]["weak"]["count"] = 2  # 4 clients: FedMut would mutate in round 2
    fedavg = _run(small, {"name": "fedavg"})
    _same_run(_run(small, algorithm), fedavg)
    other = {**algorithm, "mu": 1.0} if algorithm["name"] == "fedprox" else {**algorithm, "alpha": 4.0}
    changed = _run(small, other).rounds
    assert not changed["client_loss"].iloc[1:].equals(fedavg.rounds["client_loss"].iloc[1:])


def test_fedprox_keeps_local_models_closer_to_the_global_one(small, monkeypatch):
    """Same start, same batches: the proximal term shortens every client's drift."""
    distances: list[tuple[str, int, float]] = []
    aggregate = FedAvg.end_round

    def end_round(self, round_):
        for upload in self.uploads.values():
            d = sum(float((p - g).detach().pow(2).sum())
                    for p, g in zip(upload.parameters(), self.global_model.parameters()))
            distances.append((self.scenario.algorithm.name, round_, d ** 0.5))
        aggregate(self, round_)

    monkeypatch.setattr(FedAvg, "end_round", end_round)
    small["training"]["optimizer"] = {"name": "sgd", "lr": 0.05}
    _run(small, {"name": "fedavg"})
    prox = _run(small, {"name": "fedprox", "mu": 1.0})
    assert prox.summary["status"] == "completed"
    table = pd.DataFrame(distances, columns=["name", "round", "distance"])
    mean = table.groupby(["round", "name"]).distance.mean().unstack()
    assert len(mean) == 2 and (mean["fedprox"] < mean["fedavg"]).all(), mean


def _head_and_body(model: torch.nn.Module) -> tuple[dict, dict]:
    name, _ = last_linear(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    head = {k: v for k, v in state.items() if k.startswith(name + ".")}
    return head, {k: v for k, v in state.items() if k not in head}


def test_fedbabu_trains_the_body_and_never_the_head(small, monkeypatch):
    ctx, _ = build(validate_scenario({**small, "algorithm": {"name": "fedbabu"}}))
    start = torch.nn.Sequential(*copy.deepcopy([*ctx.backbone.stages, ctx.backbone.head]))
    head0, body0 = _head_and_body(start)
    uploaded_heads = []
    aggregate = FedBABU.end_round

    def end_round(self, round_):
        uploaded_heads.extend(_head_and_body(u)[0] for u in self.uploads.values())
        aggregate(self, round_)

    monkeypatch.setattr(FedBABU, "end_round", end_round)
    result = _run(small, {"name": "fedbabu", "finetune_epochs": 1})
    head1, body1 = _head_and_body(result.algorithm.global_model)
    assert len(uploaded_heads) == 2 * 3
    for head in [head1, *uploaded_heads]:
        assert head.keys() == head0.keys() and all(torch.equal(head[k], head0[k]) for k in head0)
    changed = [k for k in body0 if not torch.equal(body0[k], body1[k])]
    assert any(k.endswith("weight") for k in changed)
    # only the body goes up, and the head's weight gradient is neither computed nor paid for
    fedavg = _run(small, {"name": "fedavg"})
    head_bytes = 4 * sum(v.numel() for v in head0.values())
    assert (fedavg.clients.bytes_up - result.clients.bytes_up == head_bytes).all()
    first = result.clients[result.clients["round"] == 1]
    assert (first.client_flops < fedavg.clients[fedavg.clients["round"] == 1].client_flops).all()


@pytest.mark.parametrize("finetune", ["full", "head"])
def test_fedbabu_reports_the_accuracy_of_the_fine_tuned_models(small, finetune):
    small["evaluation"]["max_test_samples"] = None  # score on the whole (small) test set
    result = _run(small, {"name": "fedbabu", "finetune": finetune, "finetune_epochs": 2,
                          "test_distribution": "global"})
    alg = result.algorithm
    tuned = alg.personalized
    assert sorted(tuned) == [0, 1, 2]
    head_g, body_g = _head_and_body(alg.global_model)
    for model in tuned.values():
        head, body = _head_and_body(model)
        assert any(not torch.equal(head[k], head_g[k]) for k in head)
        body_same = all(torch.equal(body[k], body_g[k]) for k in body)
        assert body_same == (finetune == "head")  # head: the body (BatchNorm too) is frozen
    x, y = alg.ctx.data.normalize(alg.ctx.data.x_test), alg.ctx.data.y_test
    with torch.inference_mode():
        accs = [int((m.eval()(x).argmax(1) == y).sum()) / len(y) for m in tuned.values()]
    final = result.rounds.iloc[-1]
    assert final.server_accuracy == pytest.approx(sum(accs) / len(accs), abs=1e-10)  # CSV: 10 decimals
    # personalisation is timed once, in the last round: the final model comes down again
    # and every client fine-tunes finetune_epochs passes over its data on its device
    ev = result.events
    tunes = ev[ev.activity == "client_finetune"]
    assert set(tunes["round"]) == {2}
    sizes = {c.client_id: len(c.indices) for c in alg.ctx.clients}
    bs = small["training"]["batch_size"]
    assert tunes.groupby("client_id").size().to_dict() == {c: 2 * -(-n // bs) for c, n in sizes.items()}
    downloads = ev[ev.activity == "download_model"].groupby("round").size().to_dict()
    assert downloads == {1: 3, 2: 6}


def test_fedbabu_scores_a_client_on_its_own_label_mix(small):
    """A model that always answers class k scores, on the test set reweighted to a client's
    training labels, that client's share of class k."""
    ctx, alg = build(validate_scenario({**small, "algorithm": {"name": "fedbabu"}}))
    x, y = ctx.data.x_test, ctx.data.y_test
    k = int(y[0])

    class Always(torch.nn.Module):
        def forward(self, inputs):
            out = torch.zeros(len(inputs), ctx.backbone.num_classes)
            out[:, k] = 1.0
            return out

    for client in ctx.clients:
        labels = ctx.data.y_train[torch.as_tensor(client.indices)]
        present = torch.isin(labels, y)
        share = float((labels[present] == k).sum()) / int(present.sum())
        assert alg.score(Always(), client, x, y, 16) == pytest.approx(share)
    global_ = copy.deepcopy(small)
    global_["algorithm"] = {"name": "fedbabu", "test_distribution": "global"}
    _, alg = build(validate_scenario(global_))
    assert alg.score(Always(), ctx.clients[0], x, y, 16) == pytest.approx(float((y == k).float().mean()))


def test_fedbabu_evaluating_between_rounds_leaves_augmented_training_alone(small):
    """The fine-tuning of an evaluation draws its batches and augmentation from its own
    generators: evaluating after round 1 or not gives the same round-2 models."""
    small["dataset"]["augment"] = {"random_crop_padding": 2, "horizontal_flip": True}
    small["training"]["rounds"] = 3
    algorithm = {"name": "fedbabu", "finetune_epochs": 1, "test_distribution": "global"}
    small["evaluation"]["every_rounds"] = 1
    every = _run(small, algorithm).rounds.set_index("round")
    small["evaluation"]["every_rounds"] = 3
    last = _run(small, algorithm).rounds.set_index("round")
    assert every.loc[3, "server_accuracy"] == last.loc[3, "server_accuracy"]
    pd.testing.assert_series_equal(every["client_loss"], last["client_loss"], check_exact=True)


@pytest.mark.parametrize("clients", [4, 5])
def test_fedmut_sends_balanced_mutations_around_the_global_model(small, monkeypatch, clients):
    small["devices"]["weak"]["count"] = clients - 2
    sent: dict[tuple[int, int], tuple[dict, dict]] = {}  # (round, client) -> (sent, global)
    original = FedMut.local_model

    def local_model(self, client_id):
        local = original(self, client_id)
        sent[(self.sim.round, client_id)] = (copy.deepcopy(dict(local.named_parameters())),
                                             copy.deepcopy(dict(self.global_model.named_parameters())))
        return local

    monkeypatch.setattr(FedMut, "local_model", local_model)
    result = _run(small, {"name": "fedmut", "alpha": 2.0})
    assert result.summary["status"] == "completed"
    for cid in range(clients):  # round 1: no previous update, every client gets the global model
        got, glob = sent[(1, cid)]
        assert all(torch.equal(got[k], glob[k]) for k in glob)
    round2 = [sent[(2, cid)] for cid in range(clients)]
    glob = round2[0][1]
    unmutated = [i for i, (got, _) in enumerate(round2)
                 if all(torch.equal(got[k], glob[k]) for k in glob)]
    assert len(unmutated) == clients % 2  # odd: one client keeps the global model
    mutated = [got for i, (got, _) in enumerate(round2) if i not in unmutated]
    for name, g in glob.items():
        steps = torch.stack([m[name] for m in mutated]) - g  # (clients, ...)
        assert steps[0].abs().sum() > 0, name
        assert torch.allclose(steps.mean(0), torch.zeros_like(g), atol=1e-6), name  # mean = global
        # every step is the same update, +1 or -1 times, half the clients each way
        same = [bool(torch.allclose(s, steps[0], atol=1e-6)) for s in steps]
        opposite = [bool(torch.allclose(s, -steps[0], atol=1e-6)) for s in steps]
        assert all(a != b for a, b in zip(same, opposite)), name
        assert sum(same) == len(mutated) // 2, name
    assert any(not torch.equal(a[k], b[k]) for a, b in zip(mutated, mutated[1:]) for k in glob)


def test_fedmut_steps_are_alpha_times_the_last_global_update(small, monkeypatch):
    """Round 2 mutations are +-alpha * (w_glb after round 1 - w_glb before it)."""
    small["training"]["rounds"] = 1
    one = _run(small, {"name": "fedmut", "alpha": 2.0})
    alg = one.algorithm
    start = torch.nn.Sequential(*copy.deepcopy([*alg.ctx.backbone.stages, alg.ctx.backbone.head]))
    for g, w, w0 in zip(alg.last_update, alg.global_model.parameters(), start.parameters()):
        assert torch.allclose(g, w.detach() - w0.detach())
    alg.sim.round = 2
    alg.protocol.conditions = RoundConditions()  # every client takes part
    alg.signs = alg.draw_signs(2)
    local = alg.local_model(0)
    for p, w, g, v in zip(local.parameters(), alg.global_model.parameters(), alg.last_update,
                          alg.signs[0]):
        assert v in (1.0, -1.0)
        assert torch.allclose(p - w, 2.0 * v * g, atol=1e-7)


# host threads: in the isolated tests' one subprocess (see pyproject.toml)
@pytest.mark.isolated(group="host_kernels")
@pytest.mark.parametrize("algorithm", [{"name": "fedprox", "mu": 0.1}, {"name": "fedmut"},
                                       {"name": "fedbabu", "finetune_epochs": 1}])
def test_parallel_clients_give_the_serial_run(small, algorithm):
    small["devices"]["weak"]["count"] = 2
    small["conditions"] = {"client_drop_prob": 0.3, "straggler_sigma": 0.5}
    small["training"]["rounds"] = 3
    serial = _run(small, algorithm)
    small["training"]["parallel_clients"] = 3
    parallel = _run(small, algorithm)
    _same_run(parallel, serial)
    assert (serial.clients["status"] == "dropped").any()
    pairs = zip(parallel.algorithm.global_model.state_dict().values(),
                serial.algorithm.global_model.state_dict().values())
    assert all(torch.equal(p, q) for p, q in pairs)


@pytest.mark.parametrize("name", NAMES)
def test_each_validates_on_the_fedsga_comparison_scenario(name):
    result = CliRunner().invoke(app, ["validate", "scenarios/fedsga_small.yaml",
                                      "--set", f"algorithm={{name: {name}}}"])
    assert result.exit_code == 0, result.output
    assert f"ok scenarios/fedsga_small.yaml: {name}, 8 clients" in " ".join(result.output.split())
    defaults = load_scenario("scenarios/bench_fedavg_cnn.yaml", [f"algorithm.name={name}"])
    assert defaults.algorithm.name == name


@pytest.mark.parametrize("name", NAMES)
def test_each_runs_from_the_cli(small, tmp_path, name):
    small["training"]["rounds"] = 1
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small, sort_keys=False))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out),
                                      "--set", f"algorithm.name={name}"])
    assert result.exit_code == 0, result.output
    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["round"].tolist() == [0, 1] and rounds.server_accuracy.notna().all()
    assert yaml.safe_load((out / "scenario.yaml").read_text())["algorithm"]["name"] == name


@pytest.mark.parametrize("algorithm", [{"name": "fedmut"}, {"name": "fedbabu", "finetune_epochs": 1}])
def test_resume_equals_the_uninterrupted_run(small, tmp_path, algorithm):
    """FedMut's last update and sign generator, FedBABU's frozen head come back."""
    small["algorithm"] = algorithm
    small["devices"]["weak"]["count"] = 2
    small["training"]["rounds"] = 3
    small["conditions"] = {"client_drop_prob": 0.2, "straggler_sigma": 0.3}
    scenario = validate_scenario(small)
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "cut", tmp_path / "full")
