"""Stragglers, dropouts, the round deadline and the energy breakdown (scenario.conditions)."""

import copy
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from sflsim.algorithms.aggregation import weighted_average
from sflsim.algorithms.fedavg import FedAvg
from sflsim.config import validate_scenario
from sflsim.engine import TraceEvent
from sflsim.errors import ConfigError
from sflsim.metrics import records
from sflsim.runner import child_seeds, draw_conditions, run_scenario


def _run(tiny, conditions, *, algorithm="fedavg", rounds=1, seed=0, out=None):
    tiny = copy.deepcopy(tiny)
    tiny["algorithm"] = {"name": algorithm}
    tiny["training"]["rounds"] = rounds
    tiny["seed"] = seed
    tiny["conditions"] = conditions
    return run_scenario(validate_scenario(tiny), out)


def _capture_uploads(monkeypatch) -> list[dict[int, dict]]:
    """Record, per round, the FedAvg uploads that reach aggregation."""
    seen: list[dict[int, dict]] = []
    original = FedAvg.end_round

    def end_round(self, round_):
        seen.append({cid: copy.deepcopy(m.state_dict()) for cid, m in self.uploads.items()})
        original(self, round_)

    monkeypatch.setattr(FedAvg, "end_round", end_round)
    return seen


def _assert_global_is_mean(result, uploads: dict[int, dict]) -> None:
    ids = sorted(uploads)
    mean = weighted_average([uploads[i] for i in ids],
                            [len(result.algorithm.ctx.clients[i].indices) for i in ids])
    for name, tensor in result.algorithm.global_model.state_dict().items():
        assert torch.equal(tensor, mean[name]), name


@pytest.mark.parametrize(("field", "value"), [("client_drop_prob", 1.5), ("straggler_sigma", -0.1),
                                              ("round_deadline_s", 0), ("round_deadline_s", "-1 s")])
def test_bad_conditions_are_refused_naming_the_field(tiny, field, value):
    tiny["conditions"] = {field: value}
    with pytest.raises(ConfigError, match=f"conditions.{field}"):
        validate_scenario(tiny)


def test_unknown_conditions_key_is_refused(tiny):
    tiny["conditions"] = {"dropout": 0.1}
    with pytest.raises(ConfigError, match="conditions.dropout"):
        validate_scenario(tiny)


def test_defaults_change_nothing(tiny):
    result = _run(tiny, {})
    assert (result.clients.status == "trained").all() and (result.clients.slowdown == 1.0).all()
    row = result.rounds.iloc[-1]  # round 1 (row 0 is round 0, the untrained model)
    assert (row.clients_trained, row.clients_dropped, row.clients_late, row.note) == (3, 0, 0, "")


def test_same_seed_same_draws_and_tables(tiny):
    cond = {"client_drop_prob": 0.5, "straggler_sigma": 0.5}
    a, b = _run(tiny, cond, rounds=2, seed=6), _run(tiny, cond, rounds=2, seed=6)
    pd.testing.assert_frame_equal(a.rounds.drop(columns="wall_time_s"),
                                  b.rounds.drop(columns="wall_time_s"))
    pd.testing.assert_frame_equal(a.clients, b.clients)
    # the draws are the documented ones: per round, per client in id order
    rng = np.random.default_rng(child_seeds(a.scenario)["conditions"])
    for r in (1, 2):
        dropped, slowdowns = draw_conditions(rng, a.scenario, 3)
        rows = a.clients[a.clients["round"] == r].set_index("client_id")
        assert set(rows.index[rows.status == "dropped"]) == dropped
        assert rows.slowdown.to_dict() == pytest.approx(slowdowns, rel=0, abs=0)


def test_every_client_dropped_round_still_ends_and_models_stay(tiny):
    result = _run(tiny, {"client_drop_prob": 1.0}, rounds=2)
    initial = result.algorithm.ctx.backbone
    model = result.algorithm.global_model
    for k, stage in enumerate(initial.stages):
        for (name, a), b in zip(stage.state_dict().items(), model[k].state_dict().values()):
            assert torch.equal(a, b), name
    assert result.events.empty
    for _, row in result.rounds[result.rounds["round"] >= 1].iterrows():
        assert row.note == "every client dropped" and row.round_time_s == 0.0
        assert (row.clients_trained, row.clients_dropped) == (0, 3)
        assert 0.0 <= row.server_accuracy <= 1.0  # evaluation still ran
    assert result.summary["status"] == "completed"


@pytest.mark.parametrize("algorithm", ["splitfed_v1", "hetero_splitee_averaging", "multisfl"])
def test_every_client_dropped_other_algorithms(tiny, algorithm):
    result = _run(tiny, {"client_drop_prob": 1.0}, algorithm=algorithm)
    assert result.rounds.note.iloc[-1] == "every client dropped" and result.events.empty


def test_dropped_clients_do_no_work_and_are_not_aggregated(tiny, monkeypatch):
    uploads = _capture_uploads(monkeypatch)
    result = _run(tiny, {"client_drop_prob": 0.5}, seed=6)
    clients = result.clients.set_index("client_id")
    dropped = set(clients.index[clients.status == "dropped"])
    trained = set(clients.index[clients.status == "trained"])
    assert dropped and trained  # seed 6 drops some but not all in round 1
    assert not set(result.events.client_id) & dropped
    assert (clients.loc[list(dropped), ["compute_s", "bytes_up", "client_flops"]] == 0).all().all()
    assert set(uploads[0]) == trained
    _assert_global_is_mean(result, uploads[0])


def test_deadline_cuts_off_the_slow_client(tiny, monkeypatch):
    uploads = _capture_uploads(monkeypatch)
    free = _run(tiny, {})
    slowest = int(free.events.groupby("client_id").end_s.max().idxmax())  # finishes last
    deadline = free.rounds.round_time_s.iloc[-1] / 2  # before the slowest client is done
    result = _run(tiny, {"round_deadline_s": deadline})
    clients = result.clients.set_index("client_id")
    assert clients.status[slowest] == "late"
    late = set(clients.index[clients.status == "late"])
    row = result.rounds.iloc[-1]
    assert row.round_time_s == pytest.approx(deadline) and row.sim_time_s == pytest.approx(deadline)
    assert row.clients_late == len(late) and row.note == f"deadline: {len(late)} late"
    assert (result.events.end_s <= deadline + 1e-12).all()  # cut-off work leaves no event
    # the late clients' uploads never arrived, so only the others are averaged
    assert set(uploads[1]) == set(clients.index) - late
    _assert_global_is_mean(result, uploads[1])


def test_deadline_stops_server_jobs_of_late_clients(tiny):
    free = _run(tiny, {}, algorithm="hetero_splitee_sequential")
    deadline = free.rounds.round_time_s.iloc[-1] / 2
    result = _run(tiny, {"round_deadline_s": deadline}, algorithm="hetero_splitee_sequential")
    late = set(result.clients.client_id[result.clients.status == "late"])
    assert late
    assert result.rounds.sim_time_s.iloc[-1] == pytest.approx(deadline)
    server = result.events[result.events.actor == "server"]
    assert (server.end_s <= deadline + 1e-12).all()
    steps = [t for _, cid, t in result.algorithm.steps.server_steps if cid in late]
    assert all(t <= deadline + 1e-12 for t in steps)


def test_straggler_slowdown_scales_compute_time(tiny):
    base = _run(tiny, {}).clients.set_index("client_id")
    slow = _run(tiny, {"straggler_sigma": 0.8}).clients.set_index("client_id")
    assert not np.allclose(slow.slowdown, 1.0)
    np.testing.assert_allclose(slow.compute_s, base.compute_s * slow.slowdown, rtol=1e-9)
    np.testing.assert_allclose(slow.client_flops, base.client_flops)  # same work, slower


def _power(w: float) -> SimpleNamespace:
    return SimpleNamespace(value=w)


def test_energy_breakdown_hand_case():
    device = SimpleNamespace(name="hand", active_power_w=_power(5.0), idle_power_w=_power(0.5),
                             radio_tx_power_w=_power(2.0), radio_rx_power_w=_power(1.0))
    client = SimpleNamespace(client_id=0, group="g", end_layer=1, indices=np.arange(4),
                             device=device)
    events = [
        TraceEvent(1, "client0:downlink", "download_model", 0, 0.0, 0.5, payload_bytes=10),
        TraceEvent(1, "client0", "client_train", 0, 0.5, 2.5, flops=100.0),
        TraceEvent(1, "client0:uplink", "upload_model", 0, 2.5, 3.5, payload_bytes=10),
    ]
    rows = records.client_round_rows(1, events, [client], 0.0, 10.0, None)
    r = rows[0]
    # compute 2 s x 5 W; radio 1 s x 2 W + 0.5 s x 1 W; idle (10 - 2) s x 0.5 W
    assert (r["compute_energy_j"], r["radio_energy_j"], r["idle_energy_j"]) == (10.0, 2.5, 4.0)
    assert r["energy_j"] == 16.5
    row = records.round_row(1, events, rows, 0.0, 10.0, 0.0, None, {0: 1})
    assert (row["client_compute_energy_j"], row["client_radio_energy_j"],
            row["client_idle_energy_j"], row["client_energy_j"]) == (10.0, 2.5, 4.0, 16.5)


def test_work_cut_off_at_the_deadline_is_on_the_books(tiny):
    """Averaging on a one-slot CPU server, the deadline halfway through the second
    server job: the server time used up to the cut is busy time, and the cut-off part
    of device compute is billed at active power (issue 14 §3)."""
    tiny["server"] = {"profile": "cpu_server", "slots": 1}
    free = _run(tiny, {}, algorithm="hetero_splitee_averaging")
    jobs = free.events[free.events.actor == "server"].sort_values("start_s")
    second = jobs.iloc[1]
    deadline = (second.start_s + second.end_s) / 2
    result = _run(tiny, {"round_deadline_s": deadline}, algorithm="hetero_splitee_averaging")
    ev = result.events
    server = ev[ev.actor == "server"]
    cut = server[server.cut_off]
    assert len(cut) == 1 and cut.end_s.iloc[0] == pytest.approx(deadline)
    assert cut.flops.iloc[0] == pytest.approx(second.flops / 2)
    used = (server.end_s - server.start_s).sum()
    assert result.rounds.set_index("round").server_busy_s[1] == pytest.approx(used)
    assert used == pytest.approx(jobs.iloc[0].end_s - jobs.iloc[0].start_s + (deadline - second.start_s))
    # every client's compute up to the cut counts as compute (active power), not idle
    clients = result.clients.set_index("client_id")
    for cid, group in ev[ev.actor.str.fullmatch(r"client\d+")].groupby("client_id"):
        busy = (group.end_s - group.start_s).sum()
        assert clients.compute_s[cid] == pytest.approx(busy)
        assert clients.idle_s[cid] == pytest.approx(deadline - busy)
    assert ev.cut_off.any() and (ev.end_s <= deadline + 1e-12).all()
