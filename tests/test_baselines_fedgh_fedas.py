"""FedGH and FedAS (issue 17): what leaves a client, what the server trains on, the
Fisher-weighted aggregation, scenario loading, and parallel clients = serial."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
import torch

from sflsim.algorithms.base import SERVER_ID
from sflsim.algorithms.fedas import FedAS, fisher_average, fisher_weights
from sflsim.algorithms.fedgh import CLASS_ID_BYTES, FedGH
from sflsim.algorithms.global_model import model_bytes
from sflsim.algorithms.personalized import split_header
from sflsim.algorithms.steps import TorchSteps
from sflsim.config import load_scenario, validate_scenario
from sflsim.runner import run_scenario

SMALL = "scenarios/fedsga_small.yaml"


def _small_cnn(tiny: dict, algorithm: dict, *, rounds: int = 1) -> dict:
    """The tiny 3-client scenario on the small CNN (cut layer 1), Dirichlet(0.5) labels."""
    tiny["model"] = {"name": "small_cnn", "width": 0.5}
    for group in tiny["devices"].values():
        group["end_layer"] = 1
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 0.5}
    tiny["algorithm"] = algorithm
    tiny["training"]["rounds"] = rounds
    return tiny


# ----- FedAS: the aggregation function ---------------------------------------------------
def test_fisher_weights_sum_to_one_per_parameter():
    gen = torch.Generator().manual_seed(0)
    fishers = [torch.rand(4, 5, generator=gen) for _ in range(3)]
    for f in fishers:
        f[0, 0] = 0.0  # no client has information on this element
    fishers[1][1, 1] = 0.0
    samples = [10, 30, 60]
    weights = fisher_weights(fishers, samples)
    total = sum(weights)
    assert torch.allclose(total, torch.ones_like(total), atol=1e-12)
    assert all((w >= 0).all() for w in weights)
    # element (1, 1): client 1 knows nothing about it, so it gets no weight there
    assert weights[1][1, 1] == 0
    # element (0, 0): nobody knows anything: the sample shares
    assert [float(w[0, 0]) for w in weights] == pytest.approx([0.1, 0.3, 0.6])
    # elsewhere n_i F_i / sum_j n_j F_j
    k = (2, 3)
    expect = [n * float(f[k]) for n, f in zip(samples, fishers)]
    assert [float(w[k]) for w in weights] == pytest.approx([e / sum(expect) for e in expect])


@pytest.mark.parametrize("shape", [(), (3, 2)])
def test_fisher_weights_are_sample_weights_when_fisher_is_equal(shape):
    samples = [5, 15, 80]
    equal = torch.full(shape, 0.37)
    weights = fisher_weights([equal.clone() for _ in samples], samples)
    for w, n in zip(weights, samples):
        assert torch.allclose(w, torch.full(shape, n / 100, dtype=torch.float64))


def test_fisher_average_weights_parameters_by_fisher_and_buffers_by_samples():
    states = [{"w": torch.tensor([1.0, 1.0]), "running_mean": torch.tensor([0.0]),
               "num_batches_tracked": torch.tensor(2)},
              {"w": torch.tensor([3.0, 3.0]), "running_mean": torch.tensor([4.0]),
               "num_batches_tracked": torch.tensor(6)}]
    # client 0 is sure about w[0] (client 1 not at all); both equally sure about w[1]
    fishers = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([0.0, 2.0])}]
    mean = fisher_average(states, fishers, samples=[1, 3])
    assert mean["w"].tolist() == pytest.approx([1.0, 0.25 * 1 + 0.75 * 3])
    assert mean["running_mean"].tolist() == pytest.approx([3.0])  # sample shares
    assert mean["num_batches_tracked"].dtype == torch.int64 and int(mean["num_batches_tracked"]) == 5
    # a trace is one number per client: the same weight for every element
    traces = [{"w": torch.tensor(1.0)}, {"w": torch.tensor(3.0)}]
    assert fisher_average(states, traces, [1, 1])["w"].tolist() == pytest.approx([2.5, 2.5])


def test_fisher_weights_refuse_mismatched_inputs():
    with pytest.raises(ValueError, match="one sample count per Fisher"):
        fisher_weights([torch.tensor(1.0)], [1, 2])
    with pytest.raises(ValueError, match="sum to more than 0"):
        fisher_weights([torch.tensor(1.0)], [0])


# ----- loading and a tiny run from the FedSGA scenario -----------------------------------
@pytest.mark.parametrize("name", ["fedgh", "fedas"])
def test_fedsga_small_loads_with_either_baseline(name):
    scenario = load_scenario(SMALL, [f"algorithm={{name: {name}}}"])
    assert scenario.algorithm.name == name
    assert load_scenario(SMALL, [f"algorithm.name={name}"]).algorithm == scenario.algorithm


@pytest.mark.parametrize("name", ["fedgh", "fedas"])
def test_a_tiny_fedsga_small_run_gives_a_finite_accuracy(name):
    scenario = load_scenario(SMALL, [f"algorithm={{name: {name}}}", "dataset.fraction=0.01",
                                     "model.width=0.125", "training.rounds=1",
                                     "evaluation.max_test_samples=40"])
    result = run_scenario(scenario)
    acc = result.rounds.set_index("round").server_accuracy
    assert math.isfinite(acc[1]) and 0 <= acc[1] <= 1
    assert (result.clients.status == "trained").all()


# ----- FedGH: only class means leave a client; the header trains only on them ------------
def test_fedgh_header_trains_only_on_the_uploaded_class_means(tiny, monkeypatch):
    seen, readers = [], set()
    server_step, train_batch = TorchSteps.server_step, TorchSteps.train_batch

    def spy_server_step(self, client, model, optimizer, h, y, lock, *args, **kwargs):
        seen.append((client.client_id, model, h.detach().clone(), y.clone()))
        return server_step(self, client, model, optimizer, h, y, lock, *args, **kwargs)

    def spy_train_batch(self, idx, client_id):
        readers.add(client_id)
        return train_batch(self, idx, client_id)

    monkeypatch.setattr(TorchSteps, "server_step", spy_server_step)
    monkeypatch.setattr(TorchSteps, "train_batch", spy_train_batch)
    result = run_scenario(validate_scenario(_small_cnn(tiny, {"name": "fedgh"})))
    alg: FedGH = result.algorithm
    clients = alg.ctx.clients
    assert SERVER_ID not in readers  # no server-side read of training samples
    dim = alg.representation_dim
    assert sorted(cid for cid, *_ in seen) == [c.client_id for c in clients]  # one step each
    for cid, model, h, y in seen:
        assert model is alg.header
        assert h.ndim == 2 and h.shape[1] == dim and y.shape == (len(h),)
        means, classes = alg.uploads[cid]
        assert torch.equal(h, means) and torch.equal(y, classes)
        # they are the client's class means, recomputed from its samples and extractor
        client = clients[cid]
        extractor, _ = split_header(alg.local_models[cid])
        x, labels = alg.steps.train_batch(torch.as_tensor(client.indices), None)
        with torch.no_grad():
            z = extractor(x)
        assert classes.tolist() == sorted(set(labels.tolist()))
        expect = torch.stack([z[labels == c].mean(0) for c in classes.tolist()])
        assert torch.allclose(h, expect, atol=1e-5)

    ev = result.events
    uplinks = ev[ev.actor.str.endswith("uplink")]
    assert set(uplinks.activity) == {"send_representations"}  # nothing else leaves a client
    for cid, _, h, _ in seen:
        sent = uplinks[uplinks.client_id == cid].payload_bytes.tolist()
        assert sent == [len(h) * (dim * 4 + CLASS_ID_BYTES)]
    header = split_header(alg.global_model)[1]
    down = ev[ev.activity == "download_header"]
    assert (down.payload_bytes == model_bytes(header)).all() and len(down) == len(clients)
    server = ev[ev.activity == "server_header"]
    assert (server.actor == "server").all() and len(server) == len(clients)
    per_sample = alg.ctx.costs.cost(f"server:l{len(alg.global_model)}", header, (dim,)).train_flops(1)
    for cid, _, h, _ in seen:
        assert server[server.client_id == cid].flops.tolist() == pytest.approx([len(h) * per_sample])
    assert result.rounds.set_index("round").server_flops[1] == pytest.approx(server.flops.sum())


def test_fedgh_clients_start_each_round_from_the_header_the_server_sent(tiny, monkeypatch):
    firsts: dict[tuple[int, int], bool] = {}
    sent: dict[int, torch.Tensor] = {}
    sgd_step = FedGH.sgd_step

    def spy(self, local, optimizer, idx, client_id):
        key = (self.sim.round, client_id)
        if key not in firsts:  # the client's first step of the round: its header as received
            firsts[key] = torch.equal(split_header(local)[1].weight, self.sent_header["weight"])
            sent[self.sim.round] = self.sent_header["weight"].clone()
        return sgd_step(self, local, optimizer, idx, client_id)

    monkeypatch.setattr(FedGH, "sgd_step", spy)
    result = run_scenario(validate_scenario(_small_cnn(tiny, {"name": "fedgh"}, rounds=2)))
    assert len(firsts) == 2 * len(result.algorithm.ctx.clients) and all(firsts.values())
    assert not torch.equal(sent[1], sent[2])  # the server trained the header in round 1


# ----- FedAS: the client's extra work is paid for; the server averages by Fisher ---------
@pytest.mark.parametrize("fisher", ["trace", "diagonal"])
def test_fedas_pays_for_fisher_and_averages_by_it(tiny, fisher):
    result = run_scenario(validate_scenario(_small_cnn(tiny, {"name": "fedas", "fisher": fisher})))
    alg: FedAS = result.algorithm
    clients, ev = alg.ctx.clients, result.events
    extractor = split_header(alg.global_model)[0]
    params = sum(p.numel() for p in extractor.parameters())
    fisher_bytes = 4 if fisher == "trace" else 4 * params
    up = ev[ev.activity == "upload_model"]
    assert (up.payload_bytes == model_bytes(extractor) + fisher_bytes).all() and len(up) == len(clients)
    whole = alg.whole_model_cost()
    for c in clients:
        mine = ev[ev.client_id == c.client_id]
        flops = mine[mine.activity == "client_fisher"].flops.tolist()
        assert flops == pytest.approx([whole.train_flops(len(c.indices))])
        assert {"client_prototypes", "client_align", "client_train"} <= set(mine.activity)
    # the global extractor is the Fisher-weighted average of the clients' extractors
    ids = sorted(alg.uploads)
    states = [split_header(alg.local_models[i])[0].state_dict() for i in ids]
    expect = fisher_average(states, [alg.uploads[i] for i in ids],
                            [len(clients[i].indices) for i in ids])
    for name, tensor in extractor.state_dict().items():
        assert torch.equal(tensor, expect[name]), name
    for f in alg.uploads.values():
        assert set(f) == {n for n, _ in extractor.named_parameters()}
        if fisher == "diagonal":
            shapes = dict(extractor.named_parameters())
            assert all(f[n].shape == shapes[n].shape for n in f)


def test_fedas_switches_off_to_plain_replacement_and_sample_weights(tiny):
    off = {"name": "fedas", "align": False, "synchronize": False}
    result = run_scenario(validate_scenario(_small_cnn(tiny, off)))
    activities = set(result.events.activity)
    assert not activities & {"client_prototypes", "client_align", "client_fisher"}
    alg: FedAS = result.algorithm
    extractor = split_header(alg.global_model)[0]
    up = result.events[result.events.activity == "upload_model"]
    assert (up.payload_bytes == model_bytes(extractor)).all()


# ----- parallel clients ---------------------------------------------------------------------
# host threads: in the isolated tests' one subprocess (see pyproject.toml)
@pytest.mark.isolated(group="host_kernels")
@pytest.mark.parametrize("algorithm", ["fedgh", "fedas"])
def test_parallel_clients_give_exactly_the_serial_run(tiny, algorithm):
    tiny = _small_cnn(tiny, {"name": algorithm}, rounds=2)
    for group in tiny["devices"].values():
        group["count"] = 2
    tiny["conditions"] = {"client_drop_prob": 0.3, "straggler_sigma": 0.5}
    serial = run_scenario(validate_scenario(copy.deepcopy(tiny)))
    tiny["training"]["parallel_clients"] = 3
    parallel = run_scenario(validate_scenario(tiny))
    wall = ["wall_time_s"]
    pd.testing.assert_frame_equal(parallel.rounds.drop(columns=wall), serial.rounds.drop(columns=wall),
                                  check_exact=True)
    pd.testing.assert_frame_equal(parallel.clients, serial.clients, check_exact=True)
    pd.testing.assert_frame_equal(parallel.events, serial.events, check_exact=True)
    assert [x[1:] for x in parallel.algorithm.steps.losses] == [x[1:] for x in serial.algorithm.steps.losses]
    assert (parallel.clients.status == "dropped").any()
    for a, b in [(parallel.algorithm.global_model, serial.algorithm.global_model),
                 *zip(parallel.algorithm.local_models.values(), serial.algorithm.local_models.values())]:
        assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
