"""Early-exit inference (Hetero-SplitEE Alg. 3): entropy, the threshold sweep, latency."""

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from sflsim.algorithms.early_exit import (
    COLUMNS,
    PREDICTION_BYTES,
    InferenceCosts,
    entropy_from_logits,
    entropy_from_probs,
    simulate_latency,
    thresholds,
)
from sflsim.config import validate_scenario
from sflsim.config.schema import EarlyExitConfig
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario
from tests.conftest import TINY

LN2 = math.log(2)


def test_entropy_of_probabilities_with_a_zero():
    h = entropy_from_probs(torch.tensor([[0.0, 0.5, 0.5]]))
    assert torch.isfinite(h).all()
    assert h.item() == pytest.approx(0.6931, abs=1e-4)
    assert h.item() == pytest.approx(LN2, abs=1e-6)


def test_entropy_of_logits_with_minus_infinity():
    h = entropy_from_logits(torch.tensor([[0.0, 0.0, -math.inf]]))
    assert torch.isfinite(h).all()
    assert h.item() == pytest.approx(0.6931, abs=1e-4)


def test_entropy_of_logits_extremes_are_finite_and_match_probs():
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [0.0, 0.0, 0.0], [3.0, -math.inf, 1.0]])
    h = entropy_from_logits(logits)
    assert torch.isfinite(h).all()
    assert h[0].item() == pytest.approx(0.0, abs=1e-6)
    assert h[1].item() == pytest.approx(math.log(3), abs=1e-6)
    assert torch.allclose(h, entropy_from_probs(torch.softmax(logits, 1)), atol=1e-6)


def test_threshold_grid_is_the_papers_range():
    taus = thresholds(EarlyExitConfig())
    assert len(taus) == 81
    assert taus[0] == -4.0 and taus[-1] == 0.0 and taus[1] == -3.95
    assert not np.signbit(taus[-1])  # 0.0, not -0.0


# ----- the latency simulation on hand-made costs ---------------------------------------

# 1 s on the device, 1 s uplink, 2 s on the server, 1 s downlink (no propagation latency)
COSTS = InferenceCosts(device_flops=1e6, server_flops=2e6, activation_bytes=1000,
                       device_flops_per_s=1e6, uplink_bps=8000.0, uplink_latency_s=0.0,
                       downlink_bps=8.0 * PREDICTION_BYTES, downlink_latency_s=0.0)


def test_offloaded_samples_queue_fifo_for_the_server():
    offload = np.array([False])
    one_slot = simulate_latency([COSTS, COSTS], [offload, offload], 1, 1e6, 1)
    # both arrive at t = 2 s; client 0 (lower id) is served 2-4 s, client 1 waits until 4 s
    assert [t.latency_s for t in one_slot] == [5.0, 7.0]
    assert [t.server_queue_s for t in one_slot] == [0.0, 2.0]
    assert [t.transfer_s for t in one_slot] == [2.0, 2.0]
    two_slots = simulate_latency([COSTS, COSTS], [offload, offload], 1, 1e6, 2)
    assert [t.latency_s for t in two_slots] == [5.0, 5.0]


def test_exits_cost_only_device_time():
    (t,) = simulate_latency([COSTS], [np.array([True, True, True])], 1, 1e6, 1)
    assert (t.samples, t.latency_s, t.device_s, t.transfer_s, t.server_s) == (3, 3.0, 3.0, 0, 0)


def test_device_batches_send_their_offloaded_samples_together():
    # batch [exit, offload] then [exit]: 2 s device, then 1 + 2 + 1 s for the offloaded one
    (t,) = simulate_latency([COSTS], [np.array([True, False, True])], 2, 1e6, 1)
    assert (t.device_s, t.transfer_s, t.server_s, t.server_queue_s) == (5.0, 2.0, 2.0, 0.0)
    assert t.latency_s == 2.0 + 6.0 + 1.0


@pytest.mark.parametrize("server_flops_per_s", [1e6, 1e10], ids=["queueing", "no_queue"])
@pytest.mark.parametrize("seed", range(3))
def test_shortcut_without_queueing_agrees_with_the_simulation(seed, server_flops_per_s):
    rng = np.random.default_rng(seed)
    costs = [InferenceCosts(device_flops=rng.uniform(1e5, 1e6), server_flops=rng.uniform(1e5, 4e6),
                            activation_bytes=int(rng.integers(100, 2000)),
                            device_flops_per_s=1e6, uplink_bps=rng.uniform(4e3, 4e4),
                            uplink_latency_s=0.01, downlink_bps=1e3, downlink_latency_s=0.01)
             for _ in range(4)]
    masks = [rng.random(30) < 0.6 for _ in costs]
    slots = int(rng.integers(1, 3))
    fast = simulate_latency(costs, masks, 2, server_flops_per_s, slots)
    full = simulate_latency(costs, masks, 2, server_flops_per_s, slots, shortcut=False)
    queued = sum(t.server_queue_s for t in full)
    assert queued > 0 if server_flops_per_s == 1e6 else queued == 0
    for a, b in zip(fast, full):
        assert a.latency_s == pytest.approx(b.latency_s, rel=1e-12)
        assert a.server_queue_s == pytest.approx(b.server_queue_s, abs=1e-9)


# ----- the sweep after a tiny Hetero-SplitEE run ---------------------------------------

@pytest.fixture(scope="module")
def sequential_run(tmp_path_factory):
    data = copy.deepcopy(TINY)
    data["evaluation"]["early_exit"] = {"samples_per_client": 20}
    out = tmp_path_factory.mktemp("early_exit")
    return run_scenario(validate_scenario(data), out), out


def test_early_exit_csv_is_written_with_every_column(sequential_run):
    result, out = sequential_run
    table = pd.read_csv(out / "early_exit.csv")
    assert list(table.columns) == COLUMNS
    assert len(table) == 81 * 3 and set(table.end_layer) == {3, 4, 5}
    pd.testing.assert_frame_equal(table, result.early_exit, check_dtype=False)
    assert (table.entropy_threshold == -table.threshold).all()
    assert (table.latency_samples == 20).all() and (table.samples == 40).all()
    parts = table[["device_s_mean", "transfer_s_mean", "server_queue_s_mean", "server_s_mean"]]
    assert np.allclose(parts.sum(axis=1), table.latency_s_mean)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["early_exit"].startswith("early_exit.csv: 81 thresholds")


def test_threshold_below_every_confidence_keeps_everything_on_the_device(sequential_run):
    # Alg. 3: exit when C = -H > tau; tau = -4 is below every C of a 10-class head
    # (H <= ln 10 = 2.30), i.e. the entropy threshold 4 is above every entropy.
    result, _ = sequential_run
    rounds, table = result.rounds.iloc[-1], result.early_exit
    low = table[table.threshold == -4.0]
    assert (low.exit_ratio == 1.0).all()
    assert (low.bytes_per_sample == 0).all() and (low.transfer_s_mean == 0).all()
    for _, row in low.iterrows():
        assert row.accuracy == pytest.approx(rounds[f"client_accuracy_l{int(row.end_layer)}"])


def test_threshold_above_every_confidence_sends_everything_to_the_server(sequential_run):
    # C = -H <= 0, so tau = 0 (entropy threshold 0, below every entropy) exits nothing
    result, _ = sequential_run
    rounds, table = result.rounds.iloc[-1], result.early_exit
    high = table[table.threshold == 0.0]
    assert (high.exit_ratio == 0.0).all()
    for _, row in high.iterrows():
        assert row.accuracy == pytest.approx(rounds[f"server_accuracy_l{int(row.end_layer)}"])
        assert row.bytes_up_per_sample > 0
        assert row.bytes_down_per_sample == PREDICTION_BYTES


def test_larger_thresholds_exit_fewer_and_take_longer(sequential_run):
    result, _ = sequential_run
    for _, group in result.early_exit.groupby("end_layer"):
        group = group.sort_values("threshold")
        assert (np.diff(group.exit_ratio) <= 0).all()
        assert (np.diff(group.bytes_per_sample) >= 0).all()
        # everything on the device is faster than everything over the (slow) link
        assert group.latency_s_mean.iloc[0] < group.latency_s_mean.iloc[-1]


def test_early_exit_pass_changes_no_training_result(sequential_run, tmp_path):
    result, out = sequential_run
    data = copy.deepcopy(TINY)
    data["evaluation"]["early_exit"] = {"enabled": False}
    off = run_scenario(validate_scenario(data), tmp_path)
    assert off.early_exit is None and not (tmp_path / "early_exit.csv").exists()
    assert off.summary["early_exit"].startswith("disabled")
    pd.testing.assert_frame_equal(off.rounds.drop(columns="wall_time_s"),
                                  result.rounds.drop(columns="wall_time_s"))
    # the models are back in training mode
    assert all(c.model.training and c.exit_head.training for c in result.algorithm.ctx.clients)


def test_algorithm_without_exit_heads_is_skipped_with_a_note(tmp_path):
    data = copy.deepcopy(TINY)
    data["algorithm"] = {"name": "fedavg"}
    result = run_scenario(validate_scenario(data), tmp_path)
    assert result.early_exit is None and not (tmp_path / "early_exit.csv").exists()
    note = json.loads((tmp_path / "summary.json").read_text())["early_exit"]
    assert note == "not applicable: fedavg has no exit heads"


@pytest.mark.parametrize("bad, field", [
    ({"tau_step": 0}, "evaluation.early_exit.tau_step"),
    ({"tau_step": -0.05}, "evaluation.early_exit.tau_step"),
    ({"tau_min": 0.0, "tau_max": -1.0}, "evaluation.early_exit.tau_max"),
    ({"tau_min": -1.0, "tau_max": -1.0}, "evaluation.early_exit.tau_max"),
    ({"samples_per_client": 0}, "evaluation.early_exit.samples_per_client"),
    ({"batch_size": 0}, "evaluation.early_exit.batch_size"),
    ({"tau_step": 1e-9}, "evaluation.early_exit.tau_step"),
])
def test_bad_early_exit_config_names_the_field(bad, field):
    data = copy.deepcopy(TINY)
    data["evaluation"]["early_exit"] = bad
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        validate_scenario(data)


@pytest.mark.parametrize("name", ["centralized", "hetero_splitee_averaging"])
def test_other_algorithms_with_exit_heads_sweep_too(name):
    data = copy.deepcopy(TINY)
    data["algorithm"] = {"name": name}
    data["evaluation"]["early_exit"] = {"tau_step": 1.0, "samples_per_client": 5}
    result = run_scenario(validate_scenario(data))
    table, rounds = result.early_exit, result.rounds.iloc[-1]
    assert list(table.threshold.unique()) == [-4.0, -3.0, -2.0, -1.0, 0.0]
    for row in table[table.threshold == 0.0].itertuples():
        assert row.accuracy == pytest.approx(rounds[f"server_accuracy_l{row.end_layer}"])
    for row in table[table.threshold == -4.0].itertuples():
        assert row.accuracy == pytest.approx(rounds[f"client_accuracy_l{row.end_layer}"])


def test_last_round_accuracies_do_not_depend_on_the_sweep(tiny):
    """The last round is evaluated from the sweep's test passes: same numbers as without."""
    from sflsim.config.scenario import Scenario
    from sflsim.runner import run_scenario

    tiny["training"]["rounds"] = 2
    with_sweep = run_scenario(Scenario.model_validate(tiny))
    tiny["evaluation"]["early_exit"] = {"enabled": False}
    without = run_scenario(Scenario.model_validate(tiny))
    assert with_sweep.early_exit is not None and without.early_exit is None
    pd.testing.assert_frame_equal(with_sweep.clients, without.clients, check_exact=True)
    cols = [c for c in with_sweep.rounds if c != "wall_time_s"]
    pd.testing.assert_frame_equal(with_sweep.rounds[cols], without.rounds[cols], check_exact=True)
