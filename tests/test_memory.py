"""Memory estimate and the up-front refusal of runs that cannot fit (sflsim.memory)."""

from __future__ import annotations

import copy

import pytest
import torch

from sflsim import runner
from sflsim.config.load import load_scenario, validate_scenario
from sflsim.errors import ConfigError
from sflsim.memory import (
    LIMIT_ENV,
    MemoryEstimate,
    available_memory_bytes,
    check_fits,
    estimate_memory,
)


def _prepared(scenario):
    data = runner.load_data(scenario)
    seeds = runner.child_seeds(scenario)
    return data, runner.build_backbone(scenario, data, seeds["model"])


def _synthetic(test_samples: int, image_shape: list[int]) -> dict:
    """A ``dataset:`` of 240 synthetic training images (one image, viewed per sample)."""
    return {"name": "synthetic", "partition": {"scheme": "iid"},
            "synthetic": {"train_samples": 240, "test_samples": test_samples,
                          "image_shape": image_shape}}


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _with_clients(tiny: dict, per_group: int, algorithm: str) -> dict:
    d = copy.deepcopy(tiny)
    for g in d["devices"].values():
        g["count"] = per_group
    d["algorithm"] = {"name": algorithm}
    return d


def test_quickstart_estimate_matches_the_built_run(monkeypatch):
    """Models, gradients and Adam states of the built run (after one step of every
    model) come out as estimated; the total is within 2x of what was measured."""
    scenario = load_scenario("scenarios/quickstart.yaml",
                             ["algorithm.name=hetero_splitee_averaging"])
    data, backbone = _prepared(scenario)
    est = estimate_memory(scenario, backbone, data)
    ctx, alg = runner.build(scenario)
    x, y = data.train_images(torch.arange(2)), data.y_train[:2]
    modules, optimizers = [], []
    for c in ctx.clients:
        server, opt, _ = alg.server_for(c)
        for model, head, o in ((c.model, c.exit_head, c.optimizer), (server, None, opt)):
            o.zero_grad()
            h = c.model(x).detach() if head is None else x
            out = model(h) if head is None else head(model(h))
            torch.nn.functional.cross_entropy(out, y).backward()
            o.step()
        modules += [c.model, c.exit_head, server]
        optimizers += [c.optimizer, opt]
    params = _tensor_bytes([t for m in modules for t in (*m.parameters(), *m.buffers())])
    grads = _tensor_bytes([p.grad for m in modules for p in m.parameters()])
    states = _tensor_bytes([v for o in optimizers for s in o.state.values() for k, v in s.items()
                            if k != "step"])
    parts = est.contributors
    assert parts["server-side copies (12)"] + parts["client-side models (12 clients)"] == params
    # Hetero-SplitEE frees each model's gradients after its step: the estimate counts
    # the largest group of copies at once, not every copy's (this test keeps them all)
    largest = max(_tensor_bytes([p.grad for p in m.parameters()]) for m in modules)
    assert largest <= parts["gradients"] < grads
    assert parts["optimizer states"] == pytest.approx(states, rel=0.01)
    assert parts["dataset"] >= _tensor_bytes([data.x_train, data.y_train, data.x_test, data.y_test])
    measured = params + grads + states + parts["dataset"]
    assert measured / 2 < est.total_bytes < 2 * measured


def test_averaging_grows_linearly_with_clients(tiny):
    totals = []
    for per_group in (1, 2, 3):
        scenario = validate_scenario(_with_clients(tiny, per_group, "hetero_splitee_averaging"))
        data, backbone = _prepared(scenario)
        totals.append(estimate_memory(scenario, backbone, data).total_bytes)
    assert totals[1] - totals[0] == totals[2] - totals[1] > 0
    sequential = validate_scenario(_with_clients(tiny, 3, "hetero_splitee_sequential"))
    data, backbone = _prepared(sequential)
    assert estimate_memory(sequential, backbone, data).total_bytes < totals[2]


@pytest.mark.parametrize("algorithm", ["hetero_splitee_sequential", "hetero_splitee_averaging",
                                       "distributed", "centralized", "fedavg", "splitfed_v1",
                                       "splitfed_v2", "fedsga", "multisfl", "fedgh", "fedas",
                                       "fedprox", "fedbabu", "fedmut"])
def test_every_algorithm_has_an_estimate(tiny, algorithm):
    scenario = validate_scenario(_with_clients(tiny, 1, algorithm))
    data, backbone = _prepared(scenario)
    est = estimate_memory(scenario, backbone, data)
    assert all(v >= 0 for v in est.contributors.values())
    assert est.total_bytes > est.contributors["dataset"]


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "hetero_splitee_averaging"])
def test_fused_clients_count_their_stacked_copies(tiny, algorithm):
    """training.fuse_clients stacks the clients' trained copies once more (FedAvg's
    family: whole models; Hetero-SplitEE: client-side models and exit heads), with their
    gradients and optimizer states, plus FedProx's anchors: the global model per client."""
    d = _with_clients(tiny, 2, algorithm)
    if algorithm != "hetero_splitee_averaging":
        for g in d["devices"].values():
            g["end_layer"] = 1
    plain = validate_scenario(d)
    d["training"]["fuse_clients"] = True
    fused = validate_scenario(d)
    data, backbone = _prepared(plain)
    a, b = estimate_memory(plain, backbone, data), estimate_memory(fused, backbone, data)
    whole = _tensor_bytes([*backbone.stages.parameters(), *backbone.stages.buffers(),
                           *backbone.head.parameters(), *backbone.head.buffers()])
    copies = b.contributors["fused client copies (6)"]
    if algorithm == "hetero_splitee_averaging":
        assert copies == b.contributors["client-side models (6 clients)"]
    else:
        assert copies == 6 * whole
    anchors = b.contributors.get("fused proximal anchors (6)", 0)
    assert anchors == (6 * whole if algorithm == "fedprox" else 0)
    # copies, their gradients and (Adam) two optimizer states, the anchors, a larger graph
    assert b.total_bytes - a.total_bytes > 3 * copies + anchors


def test_ten_thousand_averaging_clients_are_refused(tiny, monkeypatch):
    """Only estimated, never built: 10,000 server-side copies of a width-1 ResNet."""
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    d = _with_clients(tiny, 1, "hetero_splitee_averaging")
    d["devices"] = {"many": {"profile": "rpi4", "count": 10_000, "end_layer": 1, "link": "wifi"}}
    d["model"]["width"] = 1.0
    scenario = validate_scenario(d)
    data = runner.load_data(validate_scenario(tiny))  # 240 samples are enough to estimate
    est = estimate_memory(scenario, runner.build_backbone(scenario, data, 0), data)
    name, largest = est.largest()
    assert name == "optimizer states"  # Adam: two per parameter of the 10,000 copies
    assert est.largest_copies()[0] == "server-side copies (10000)"
    with pytest.raises(ConfigError) as err:
        check_fits(est, available_memory_bytes())
    msg = str(err.value)
    assert f"{est.total_bytes / 2**30:.2f} GiB" in msg
    assert f"optimizer states: {largest / 2**30:.2f} GiB" in msg
    assert "server-side copies (10000)" in msg
    assert "devices.*.count" in msg and "model.width" in msg


def test_the_cap_refuses_the_quickstart(monkeypatch):
    scenario = load_scenario("scenarios/quickstart.yaml")
    data, backbone = _prepared(scenario)
    est = estimate_memory(scenario, backbone, data)
    monkeypatch.setenv(LIMIT_ENV, "1000000")
    assert available_memory_bytes() == 1_000_000
    with pytest.raises(ConfigError, match=f"the {LIMIT_ENV} cap has 0.00 GiB available"):
        check_fits(est, available_memory_bytes())
    monkeypatch.setenv(LIMIT_ENV, str(est.total_bytes))
    check_fits(est, available_memory_bytes())  # exactly enough is enough
    monkeypatch.setenv(LIMIT_ENV, "a lot")
    with pytest.raises(ConfigError, match=LIMIT_ENV):
        available_memory_bytes()


@pytest.mark.parametrize(("cap", "expected"), [
    ("4 GiB", 4 * 2**30), ("4GiB", 4 * 2**30), ("500 MB", 500_000_000), ("1.5 KiB", 1536),
    ("8000000000", 8_000_000_000), ("8_000_000_000", 8_000_000_000), (" 4e9 ", 4_000_000_000),
])
def test_the_cap_takes_a_size_with_a_unit_as_scenarios_do(monkeypatch, cap, expected):
    monkeypatch.setenv(LIMIT_ENV, cap)
    assert available_memory_bytes() == expected


@pytest.mark.parametrize(("cap", "expected"), [
    ("4 gib", "did you mean 'GiB'?"), ("0 GiB", "positive"), ("-1", "positive"),
    ("0.5 B", "positive"), ("a lot", "GiB"), ("inf B", "positive"),
])
def test_a_cap_that_is_not_a_size_is_refused(monkeypatch, cap, expected):
    monkeypatch.setenv(LIMIT_ENV, cap)
    with pytest.raises(ConfigError) as err:
        available_memory_bytes()
    assert str(err.value).startswith(f"{LIMIT_ENV}={cap!r}: expected a positive number of bytes")
    assert expected in str(err.value)


def test_the_machine_reports_some_memory(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert available_memory_bytes() > 2**20


def test_a_gpu_run_is_checked_against_the_gpus_memory(monkeypatch):
    """A CUDA run keeps its models, activations and dataset on the GPU: the check asks
    the GPU (free plus what torch already reserved there), not the host, and says so;
    the cap still wins. The GPU is faked here (real ones: tests/test_device.py)."""
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda d: asked.append(d) or (3 * 2**30, 140 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: 2**30)
    gpu = torch.device("cuda:0")
    assert available_memory_bytes(gpu) == 4 * 2**30 and asked == [gpu]
    assert available_memory_bytes(torch.device("cpu")) != 4 * 2**30  # the host's
    est = MemoryEstimate({"per-client model copies (9)": 5 * 2**30})
    with pytest.raises(ConfigError, match=r"needs about 5\.00 GiB but the GPU cuda:0 has "
                                          r"4\.00 GiB available"):
        check_fits(est, available_memory_bytes(gpu), "the GPU cuda:0")
    monkeypatch.setenv(LIMIT_ENV, str(6 * 2**30))
    check_fits(est, available_memory_bytes(gpu), "the GPU cuda:0")


def test_the_estimate_reads_shapes_wherever_the_backbone_lives(tiny):
    """The runner moves the backbone to the training device before the estimate (a GPU
    run failed here with 'weight is on cuda:0, ... other tensors on cpu'); the ``meta``
    device stands in for a GPU on a CPU-only machine. The backbone is left untouched."""
    scenario = validate_scenario(_with_clients(tiny, 1, "fedavg"))
    data, backbone = _prepared(scenario)
    expected = estimate_memory(scenario, backbone, data).total_bytes
    backbone.stages.train()
    before = {k: v.clone() for k, v in backbone.stages.state_dict().items()}
    assert estimate_memory(scenario, backbone, data).total_bytes == expected
    assert backbone.stages.training and all(m.training for m in backbone.stages.modules())
    after = backbone.stages.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    backbone.stages.to("meta")
    backbone.head.to("meta")
    assert estimate_memory(scenario, backbone, data).total_bytes == expected


@pytest.mark.parametrize("algorithm, field, small, big", [
    ("mergesfl", "algorithm.total_batch_size", 64, 100_000),  # one merged server batch
    ("fedavg", "evaluation.batch_size", 500, 1_000_000),  # inference between rounds
    ("multisfl", "algorithm.replay_fraction_max", 0.2, 1.0),  # replayed activations wait
    ("multisfl", "algorithm.replay_min_samples", 0, 10_000),
    ("fedsga", "training.batch_size", 16, 4096),  # calibration probes, every client's
    ("fedas", "training.batch_size", 16, 4096),  # alignment steps
    ("fedbabu", "training.batch_size", 16, 4096),  # fine-tuning steps
])
def test_every_knob_that_sizes_a_batch_moves_the_estimate(tiny, algorithm, field, small, big):
    """What a run holds at once grows with each knob that sizes a batch, not only with
    training.batch_size."""
    totals = []
    for value in (small, big):
        d = _with_clients(tiny, 1, algorithm)
        section, name = field.split(".")
        d.setdefault(section, {})[name] = value
        if field == "evaluation.batch_size":  # its batch is at most the test samples evaluated
            d["evaluation"].pop("max_test_samples")
            d["dataset"] = _synthetic(test_samples=1_000_000, image_shape=[1, 28, 28])
        scenario = validate_scenario(d)
        data, backbone = _prepared(scenario)
        est = estimate_memory(scenario, backbone, data)
        totals.append(est.total_bytes)
    assert totals[1] > totals[0]
    if algorithm == "fedsga":
        assert est.contributors["calibration probe activations"] > 0


def test_a_huge_merged_batch_is_refused_naming_its_field(monkeypatch):
    """MergeSFL with 100,000 samples per merged iteration grew to 15 GB without finishing
    a round; it is refused up front, and the message says which field to lower."""
    scenario = load_scenario("scenarios/fedsga_small.yaml", [
        "algorithm.name=mergesfl", "algorithm.total_batch_size=100000",
        "dataset.fraction=0.02", "model.width=0.0625", "training.rounds=1"])
    data, backbone = _prepared(scenario)
    est = estimate_memory(scenario, backbone, data)
    assert est.total_bytes > 15 * 2**30
    monkeypatch.setenv(LIMIT_ENV, str(8 * 2**30))
    with pytest.raises(ConfigError, match=r"activations: .* Lower algorithm.total_batch_size"):
        check_fits(est, available_memory_bytes())


def test_neither_a_shared_image_nor_an_evaluation_batch_past_the_test_set_is_counted(tiny):
    """The synthetic dataset's samples are views of one image, and an evaluation batch
    holds at most the test samples evaluated: neither is refused as if it were bigger."""
    tiny["dataset"] = _synthetic(test_samples=40, image_shape=[3, 256, 256])
    scenario = validate_scenario(tiny)
    data, backbone = _prepared(scenario)
    est = estimate_memory(scenario, backbone, data)
    image = 3 * 256 * 256
    assert data.x_train.stride(0) == 0  # one image, viewed 240 times
    assert est.contributors["dataset"] < 3 * image  # not 280 images
    huge = copy.deepcopy(tiny)
    huge["evaluation"] = {"batch_size": 100_000}
    as_test_set = copy.deepcopy(tiny)
    as_test_set["evaluation"] = {"batch_size": 40}
    huge_acts, test_set_acts = (
        estimate_memory(validate_scenario(d), backbone, data).contributors["activations"]
        for d in (huge, as_test_set))
    assert huge_acts == test_set_acts
