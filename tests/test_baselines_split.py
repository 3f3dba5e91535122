"""The FedSGA paper's split-learning baselines MergeSFL and MU-SplitFed (issue 17):
feature merging and batch size regulation, the unbalanced update, the zeroth-order
estimator, the reduction to SplitFed, and runs from the shipped comparison scenario."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sflsim.algorithms.mergesfl import MergeSFL, regulate_batch_sizes
from sflsim.algorithms.mu_splitfed import zo_estimate
from sflsim.config import load_scenario, validate_scenario
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario
from tests.test_resilience import StopAfter, assert_same_tables, scenario_of

SMALL = "scenarios/fedsga_small.yaml"
#: fedsga_small at test size: a tenth of its data, width 1/8, one round
SMALL_TINY = ["dataset.fraction=0.02", "model.width=0.125", "training.rounds=1",
              "evaluation.max_test_samples=50"]


def _run(tiny: dict, algorithm: dict, **training):
    tiny = copy.deepcopy(tiny)
    tiny["algorithm"] = algorithm
    tiny["training"].update(training)
    return run_scenario(validate_scenario(tiny))


# ----- MergeSFL ---------------------------------------------------------------------------

@pytest.mark.parametrize(("speeds", "total"), [
    ({0: 1.0, 1: 2.0, 2: 4.0}, 48),
    ({3: 0.7, 1: 5.3, 8: 2.9, 2: 2.9}, 100),
    ({0: 1.0, 1: 1.0, 2: 1.0}, 10),
    ({0: 3.0}, 7),
])
def test_batch_sizes_are_proportional_to_speed_and_sum_to_the_total(speeds, total):
    sizes = regulate_batch_sizes(speeds, total)
    assert sorted(sizes) == sorted(speeds) and sum(sizes.values()) == total
    norm = sum(speeds.values())
    for cid, n in sizes.items():
        assert abs(n - total * speeds[cid] / norm) < 1  # proportional within rounding
    for a in speeds:  # a faster client never gets a smaller batch
        for b in speeds:
            if speeds[a] > speeds[b]:
                assert sizes[a] >= sizes[b]


def _one_sample_at_a_time(speeds: dict[int, float], total: int) -> dict[int, int]:
    """The largest-remainder rule as written: floors (at least 1), then one sample at a
    time to the largest remainder (ties to the lower id) or from the smallest remainder
    of a client above 1."""
    ids = sorted(speeds)
    share = total * np.array([speeds[i] for i in ids]) / sum(speeds[i] for i in ids)
    sizes = np.maximum(np.floor(share).astype(np.int64), 1)
    while (left := total - int(sizes.sum())) != 0:
        rest = share - sizes
        if left > 0:
            sizes[min(range(len(ids)), key=lambda i: (-rest[i], i))] += 1
        else:
            sizes[min((i for i in range(len(ids)) if sizes[i] > 1),
                      key=lambda i: (rest[i], i))] -= 1
    return dict(zip(ids, sizes.tolist()))


@settings(max_examples=300, deadline=None)
@given(speeds=st.lists(st.sampled_from([0.01, 0.1, 0.3, 1.0, 1.0, 2.5, 40.0]) | st.floats(1e-3, 1e3),
                       min_size=1, max_size=30),
       extra=st.integers(0, 200))
def test_batch_sizes_follow_the_rule_one_sample_at_a_time(speeds, extra):
    """The heaps give the sizes of the rule applied one sample at a time, ties included
    (many equal speeds; totals just above the clients, where floors of 1 overshoot)."""
    ids = {3 * i: v for i, v in enumerate(speeds)}
    total = len(speeds) + extra
    assert regulate_batch_sizes(ids, total) == _one_sample_at_a_time(ids, total)


def test_every_client_gets_at_least_one_sample():
    sizes = regulate_batch_sizes({0: 1.0, 1: 1000.0, 2: 1000.0}, 4)
    assert sizes[0] == 1 and sum(sizes.values()) == 4
    with pytest.raises(ValueError, match="cannot give 3 clients one each"):
        regulate_batch_sizes({0: 1.0, 1: 1.0, 2: 1.0}, 2)


def test_faster_devices_get_larger_batches(tiny):
    """tiny's devices at one cut: the Orin Nano on Wi-Fi is the fastest per sample, the
    Raspberry Pi on Wi-Fi next, the Jetson Nano on LTE (slow link) last."""
    for group in tiny["devices"].values():
        group["end_layer"] = 3
    result = _run(tiny, {"name": "mergesfl"})
    alg = result.algorithm
    sizes = alg.batch_sizes
    assert sum(sizes.values()) == tiny["training"]["batch_size"] * 3
    speed = {c.client_id: 1 / alg.sample_time_s(c, 3) for c in alg.ctx.clients}
    assert regulate_batch_sizes(speed, sum(sizes.values())) == sizes
    order = sorted(speed, key=speed.get)
    assert [sizes[c] for c in order] == sorted(sizes.values()) and len(set(sizes.values())) == 3
    # the round trains on one SplitFed round's samples: ceil(240 / 48) iterations
    assert alg.iterations == math.ceil(len(alg.ctx.data.y_train) / 48)
    # every client waits about equally: each one's iterations end within 1/3 of the others
    ev = result.events[result.events.activity == "client_backward"]
    ends = ev.groupby("client_id").end_s.max()
    assert ends.max() - ends.min() < ends.max() / 3


def test_merged_batch_holds_exactly_what_the_clients_sent(tiny, monkeypatch):
    for group in tiny["devices"].values():
        group["end_layer"] = 3  # one cut: one merged batch per iteration
    drawn: list[tuple[int, torch.Tensor]] = []
    sent: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    merged: list[tuple[list, torch.Tensor, torch.Tensor]] = []
    seen: list[torch.Tensor] = []
    next_batch, serve, merge = MergeSFL.next_batch, MergeSFL.serve, MergeSFL.merge

    def spy_next_batch(self, client, size):
        idx = next_batch(self, client, size)
        drawn.append((client.client_id, idx))
        return idx

    def spy_serve(self, client, server, opt, h, y, lock, **kw):
        sent.setdefault(client.client_id, []).append((h.clone(), y.clone()))
        if not seen and not hasattr(self, "_spy"):  # what the server-side model is fed
            def hook(module, args):  # training passes only (not evaluation, nor the
                if module.training and args[0].device.type != "meta":  # FLOP counter's)
                    seen.append(args[0].detach().clone())
            self._spy = self.global_model[3].register_forward_pre_hook(hook)
        grad = yield from serve(self, client, server, opt, h, y, lock, **kw)
        assert grad.shape == h.shape  # its own rows of the gradients come back
        return grad

    def spy_merge(parts):
        h, y = merge(parts)
        merged.append(([(p[0].clone(), p[1].clone()) for p in parts], h.clone(), y.clone()))
        return h, y

    monkeypatch.setattr(MergeSFL, "next_batch", spy_next_batch)
    monkeypatch.setattr(MergeSFL, "serve", spy_serve)
    monkeypatch.setattr(MergeSFL, "merge", staticmethod(spy_merge))
    result = _run(tiny, {"name": "mergesfl"})
    alg = result.algorithm
    sizes = alg.batch_sizes
    assert len(merged) == alg.iterations == len(seen)
    y_train = alg.ctx.data.y_train
    for k, (parts, h, y) in enumerate(merged):
        # the merged rows are the clients' activations and labels, in client-id order
        want_h = torch.cat([sent[c][k][0] for c in sorted(sent)])
        want_y = torch.cat([sent[c][k][1] for c in sorted(sent)])
        assert torch.equal(h, want_h) and torch.equal(y, want_y)
        assert len(h) == sum(sizes.values())
        assert [len(p[1]) for p in parts] == [sizes[c] for c in sorted(sizes)]
        assert torch.equal(seen[k], h)  # the server-side model ran on exactly that batch
        # the labels are those of the samples each client drew for this iteration
        idx = {c: [i for cc, i in drawn if cc == c][k] for c in sizes}
        assert torch.equal(y, torch.cat([y_train[idx[c]] for c in sorted(sizes)]))
    assert result.events.activity.value_counts()["server_train"] == alg.iterations


def test_mergesfl_refuses_a_total_below_one_sample_per_client(tiny):
    """One sample per client taking part: all three, or the two a round draws."""
    tiny["algorithm"] = {"name": "mergesfl", "total_batch_size": 2}
    with pytest.raises(ConfigError, match="total_batch_size: 2 samples per iteration cannot "
                                          "give 3 clients taking part one each"):
        run_scenario(validate_scenario(tiny))
    tiny["training"].update(clients_per_round=2, rounds=1, timing_only=True)
    assert len(run_scenario(validate_scenario(tiny)).algorithm.batch_sizes) == 2
    tiny["algorithm"]["total_batch_size"] = 1
    with pytest.raises(ConfigError, match="cannot give 2 clients taking part one each"):
        run_scenario(validate_scenario(tiny))


# ----- MU-SplitFed ------------------------------------------------------------------------

@pytest.mark.parametrize("difference", ["central", "forward"])
def test_zeroth_order_estimate_points_along_the_gradient(difference):
    """f(w) = |A w1 - b|^2 / 2 + |w2|^2: the estimate's cosine with the true gradient is
    clearly positive, and more directions make it better."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 5, generator=g), torch.randn(6, generator=g)
    w = [torch.randn(5, generator=g), torch.randn(2, 3, generator=g)]

    def f() -> torch.Tensor:
        return 0.5 * (a @ w[0] - b).square().sum() + w[1].square().sum()

    true = [a.T @ (a @ w[0] - b), 2 * w[1]]

    def cosine(est: list[torch.Tensor]) -> float:
        x, y = torch.cat([e.flatten() for e in est]), torch.cat([t.flatten() for t in true])
        return float(x @ y / (x.norm() * y.norm()))

    before = [p.clone() for p in w]
    one = [cosine(zo_estimate(w, f, mu=1e-3, count=1, generator=g, difference=difference))
           for _ in range(50)]
    many = cosine(zo_estimate(w, f, mu=1e-3, count=400, generator=g, difference=difference))
    assert all(torch.equal(p, q) for p, q in zip(w, before))  # parameters restored
    assert sum(one) / len(one) > 0.1  # unbiased up to O(mu): positive on average
    assert many > 0.8


def test_mu_splitfed_with_tau_1_and_first_order_clients_is_splitfed_v1(tiny, tmp_path):
    """Per-client server copies averaged each round (V1), one server step per batch and
    backpropagated clients: the same events and the same rounds.csv, bit for bit."""
    tiny["training"]["rounds"] = 2
    runs = {}
    for name, alg in [("v1", {"name": "splitfed_v1"}),
                      ("mu", {"name": "mu_splitfed", "tau": 1, "client_gradient": "first_order"})]:
        data = copy.deepcopy(tiny)
        data["algorithm"] = alg
        runs[name] = run_scenario(validate_scenario(data), tmp_path / name)
    v1, mu = (pd.read_csv(tmp_path / n / "rounds.csv").drop(columns="wall_time_s")
              for n in ("v1", "mu"))
    pd.testing.assert_frame_equal(v1, mu, check_exact=True)
    pd.testing.assert_frame_equal(runs["v1"].events, runs["mu"].events, check_exact=True)


def test_unbalanced_update_and_zeroth_order_traffic(tiny):
    """tau server steps per batch, the extra ones after the client has its feedback; a
    zeroth-order client sends 1 + 2P activation tensors and gets P scalars back."""
    fo = _run(tiny, {"name": "mu_splitfed", "tau": 3, "client_gradient": "first_order"})
    zo = _run(tiny, {"name": "mu_splitfed", "tau": 3, "zo_perturbations": 2})
    for result in (fo, zo):
        ev = result.events
        counts = ev.activity.value_counts()
        batches = counts["send_activations"]
        assert counts["server_train"] == batches and counts["server_extra_train"] == 2 * batches
        losses = result.algorithm.steps.losses
        assert sum(w == "server_extra" for w, *_ in losses) == 2 * batches
    def uploads(result) -> pd.Series:  # per client, in batch order
        ev = result.events
        return ev[ev.activity == "send_activations"].sort_values(["client_id", "start_s"]) \
            .payload_bytes.reset_index(drop=True)

    zo_ev = zo.events
    assert (uploads(zo) == 5 * uploads(fo)).all()  # the same batches: h and 2 x 2 perturbed
    assert (zo_ev[zo_ev.activity == "send_losses"].payload_bytes == 2 * 4).all()
    assert "client_backward" not in set(zo_ev.activity) and "send_gradients" not in set(zo_ev.activity)
    # the feedback on a batch leaves before the server's extra steps on it are done
    for result, feedback in ((fo, "send_gradients"), (zo, "send_losses")):
        c0 = result.events[result.events.client_id == 0].sort_values("start_s")
        sent = c0[c0.activity == feedback].start_s.iloc[0]
        extra = c0[c0.activity == "server_extra_train"].iloc[:2]
        assert (extra.start_s >= sent).all() and extra.end_s.max() > sent


def test_zeroth_order_clients_step_at_their_own_rate(tiny):
    """A zeroth-order client's optimizer runs at ``zo_client_lr`` on the run's schedule,
    scaled; the server copies and first-order clients keep ``training.optimizer.lr``;
    ``zo_client_lr: null`` gives the clients the server's rate."""
    tiny["training"].update(rounds=4, schedule={"name": "cosine", "min_lr": 0.0})
    params = [torch.nn.Parameter(torch.zeros(1))]

    def rate(algorithm: dict, round_: int) -> tuple[float, float]:
        run = _run(tiny, {"name": "mu_splitfed", **algorithm}).algorithm
        return (run.client_optimizer(params, round_).param_groups[0]["lr"],
                run.round_optimizer(params, round_).param_groups[0]["lr"])

    lr = tiny["training"]["optimizer"]["lr"]
    assert rate({}, 1) == (pytest.approx(1e-4), lr)
    client, server = rate({"zo_client_lr": 2e-4}, 3)
    assert server < lr and client == pytest.approx(server * 2e-4 / lr)  # cosine, scaled
    assert rate({"zo_client_lr": None}, 1) == (lr, lr)
    assert rate({"client_gradient": "first_order"}, 1) == (lr, lr)


@pytest.mark.parametrize(("name", "deadline"), [("mergesfl", "0.3 s"), ("mu_splitfed", "0.4 s")])
def test_resume_after_ctrl_c_equals_uninterrupted_run(tiny, tmp_path, name, deadline):
    """Batch streams, perturbation generators, and merges and server steps cut off by the
    round deadline (round 1 has late clients) all come back from the checkpoint."""
    tiny["algorithm"] = {"name": name}
    for group in tiny["devices"].values():
        group["end_layer"] = 3  # MergeSFL: one merged batch per iteration
    tiny["conditions"] = {"straggler_sigma": 0.3, "client_drop_prob": 0.2,
                          "round_deadline_s": deadline}
    scenario = scenario_of(tiny, rounds=2)
    full = run_scenario(scenario, tmp_path / "full")
    assert full.rounds.clients_late.iloc[1] > 0
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "cut", tmp_path / "full")


# ----- both, from the shipped comparison scenario ----------------------------------------

@pytest.mark.parametrize("name", ["mergesfl", "mu_splitfed"])
def test_runs_from_fedsga_small_with_set(name):
    scenario = load_scenario(SMALL, [f"algorithm={{name: {name}}}"])
    assert scenario.algorithm.name == name
    assert load_scenario(SMALL, [f"algorithm.name={name}"]).algorithm == scenario.algorithm
    result = run_scenario(load_scenario(SMALL, [f"algorithm={{name: {name}}}", *SMALL_TINY]))
    acc = result.summary["final_server_accuracy"]
    assert math.isfinite(acc) and 0.0 <= acc <= 1.0


@pytest.mark.parametrize("name", ["mergesfl", "mu_splitfed"])
def test_parallel_clients_are_refused(name):
    """Their clients' steps wait for the server (merged steps, server feedback), so they
    cannot be trained ahead of the simulated round."""
    with pytest.raises(ConfigError, match=rf"parallel_clients: not available for algorithm "
                                          rf"'{name}'"):
        load_scenario(SMALL, [f"algorithm={{name: {name}}}", "training.parallel_clients=2"])
