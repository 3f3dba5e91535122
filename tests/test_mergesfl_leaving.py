"""MergeSFL's merged batches go on without a client that leaves mid-round (it goes
offline, over-commitment stops it, the deadline cuts it off): no merge waits for it."""

from __future__ import annotations

import copy
import math

import torch

from sflsim.algorithms.mergesfl import MergeSFL
from sflsim.config import validate_scenario
from sflsim.runner import run_scenario
from tests.test_participation import write_trace

#: the reported scenario: 6 clients at two cuts, 4 kept of 6 drawn, clients 0 and 3
#: offline early in round 1 (0 comes back), client 5 online from 0.3 s
CASE = {
    "name": "mergesfl_availability", "seed": 0,
    "dataset": {"name": "fashion_mnist", "fraction": 0.02, "partition": {"scheme": "iid"}},
    "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
    "devices": {
        "pi4": {"profile": "rpi4", "count": 3, "end_layer": 2, "link": "wifi"},
        "nano": {"profile": "jetson_nano", "count": 2, "end_layer": 3, "link": "lte"},
        "orin": {"profile": "jetson_orin_nano", "count": 1, "end_layer": 2, "link": "wifi"}},
    "server": {"profile": "a100"},
    "algorithm": {"name": "mergesfl"},
    "training": {"rounds": 2, "batch_size": 32, "optimizer": {"name": "adam", "lr": 0.001},
                 "timing_only": True, "clients_per_round": 4, "over_commit": 1.5},
    "evaluation": {"max_test_samples": 50},
}
TRACE = ["0,0,0.05", "0,0.4,inf", "3,0,0.12", "3,0.9,inf", "5,0.3,inf"]


def test_clients_going_offline_mid_round_leave_the_merges_and_the_round_ends(tmp_path):
    """Every round ends; the clients that go offline in round 1 are "offline", cut off
    at the instant they leave; the merges after it go on without them."""
    data = copy.deepcopy(CASE)
    data["conditions"] = {"availability": write_trace(tmp_path / "trace.csv", TRACE)}
    result = run_scenario(validate_scenario(data))
    assert result.summary["status"] == "completed"
    assert result.summary["rounds_completed"] == 2
    status = result.clients.pivot(index="round", columns="client_id", values="status")
    assert status.loc[1, 0] == status.loc[1, 3] == "offline"
    ev = result.events[result.events["round"] == 1]
    for cid, gone in ((0, 0.05), (3, 0.12)):
        mine = ev[ev.client_id == cid]
        assert mine.cut_off.any() and mine.end_s.max() == gone
    # merges after client 0 left hold the rows of the others of its cut only
    assert (ev[ev.activity == "server_train"].end_s > 0.12).any()
    assert (status.loc[1] == "trained").sum() >= 2


def _runner_case(tmp_path, timing: bool):
    """Three clients at one cut; returns (scenario dict, the client whose activations
    complete round 1's first merged batch, that merged step's start and end (s))."""
    data = copy.deepcopy(CASE)
    data["devices"] = {
        "pi4": {"profile": "rpi4", "count": 1, "end_layer": 2, "link": "lte"},
        "orin": {"profile": "jetson_orin_nano", "count": 2, "end_layer": 2, "link": "wifi"}}
    data["training"].update(timing_only=timing, clients_per_round=None, over_commit=1.0,
                            rounds=1)
    data["dataset"]["fraction"] = 0.01
    free = run_scenario(validate_scenario(data)).events
    first = free[free.activity == "server_train"].sort_values("start_s").iloc[0]
    return data, int(first.client_id), float(first.start_s), float(first.end_s)


def test_a_client_leaving_during_the_merged_step_it_runs_hands_it_to_the_others(
        tmp_path, monkeypatch):
    """The client whose activations completed the first merged batch goes offline while
    the server runs that step: the step is cut off there and runs again, at once, for
    the two others, without the leaver's rows (trained: their activations and labels
    only); the others train every iteration; the round ends."""
    merged: list[int] = []
    real = MergeSFL.merge

    def merge(parts):
        merged.append(len(parts))
        return real(parts)

    monkeypatch.setattr(MergeSFL, "merge", staticmethod(merge))
    for timing in (True, False):
        data, runner, start, end = _runner_case(tmp_path, timing)
        gone = (start + end) / 2
        assert start < gone < end
        data["conditions"] = {"availability": write_trace(tmp_path / f"t{timing}.csv",
                                                          [f"{runner},0,{gone!r}"])}
        merged.clear()
        result = run_scenario(validate_scenario(data))
        status = result.clients.set_index("client_id").status
        assert status[runner] == "offline"
        assert (status.drop(runner) == "trained").all()
        ev = result.events
        steps = ev[ev.activity == "server_train"].sort_values(["start_s", "end_s"])
        cut = steps[steps.cut_off]
        assert list(cut.client_id) == [runner] and float(cut.end_s.iloc[0]) == gone
        again = steps[steps.start_s >= gone].iloc[0]
        assert again.client_id != runner and not again.cut_off
        iterations = result.algorithm.iterations
        backward = ev[ev.activity == "client_backward"].groupby("client_id").size()
        assert backward.drop(runner, errors="ignore").tolist() == [iterations] * 2
        assert len(steps[~steps.cut_off]) == iterations
        if not timing:  # the first merge that ran held three parts, the one after it two
            assert merged[:2] == [3, 2] and set(merged[2:]) == {2}
            assert all(math.isfinite(loss) for *_, loss, _ in result.algorithm.steps.losses)


def test_leave_takes_the_client_out_of_every_waiting_merge():
    """:meth:`MergeSFL.leave` on its own: a batch that waited only for the leaver is
    complete; the leaver's activations leave a batch whose step has not begun."""
    from sflsim.algorithms.mergesfl import _MergeSlot
    from sflsim.engine import Simulation

    class Stub:
        pass

    alg = Stub()
    alg.sim = Simulation()
    alg.cost_model = Stub()
    alg.cost_model.cut_layers = {0: 2, 1: 2, 2: 2}
    alg._members = {2: {0, 1, 2}}
    waiting = _MergeSlot(alg.sim.env.event(), parts={0: (torch.zeros(1), torch.zeros(1)),
                                                     2: (torch.zeros(1), torch.zeros(1))})
    alg._slots = {(2, 0): waiting}
    before = waiting.changed
    alg._changed = lambda slot: MergeSFL._changed(alg, slot)
    MergeSFL.leave(alg, 2)
    assert alg._members == {2: {0, 1}}
    assert set(waiting.parts) == {0} and waiting.runner is None
    assert before.triggered and waiting.changed is not before  # the waiters look again
    MergeSFL.leave(alg, 1)
    assert alg._members[2] <= waiting.parts.keys()  # now complete: client 0 runs it
