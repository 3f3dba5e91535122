"""One inclusive rule for every cut-off of a round (the deadline, a client going offline,
over-commitment): work that ends exactly at the cut-off instant counts, work that ends
one ulp after it is cut off; and the round deadline counts from the round's start,
the wait for an online client included."""

from __future__ import annotations

import copy
import math

import pytest

from sflsim.algorithms import fedavg
from sflsim.algorithms.base import OFFLINE
from sflsim.algorithms.protocol import RoundConditions, RoundProtocol
from sflsim.config import validate_scenario
from sflsim.engine import Simulation, cut_off_at
from sflsim.runner import build, run_scenario
from tests.test_participation import write_trace
from tests.test_timing_only import timing_only, traced

BEFORE, AT, AFTER = "one ulp before", "at", "one ulp after"


def _around(t: float) -> dict[str, float]:
    """The cut-off instants tried for work that ends at ``t``."""
    return {BEFORE: math.nextafter(t, -math.inf), AT: t, AFTER: math.nextafter(t, math.inf)}


# ----------------------------------------------------------------------------- engine
def test_a_cut_off_comes_after_everything_else_of_its_instant():
    """Work ending at the instant (also work scheduled at it while the instant runs, and
    a timeout that ends there after the cut-off event was made) completes before the
    cut-off; work ending one ulp later is still under way at it."""
    sim = Simulation()
    env, t = sim.env, 0.3
    seen: list[tuple[str, float]] = []

    def cutter():
        yield cut_off_at(env, t)
        seen.append(("cut", env.now))

    def work(name, duration, then=None):
        yield env.timeout(duration)
        seen.append((name, env.now))
        if then is not None:  # more work at the same instant
            yield env.timeout(0)
            seen.append((then, env.now))

    env.process(cutter())  # made first: insertion order alone would run it first
    env.process(work("ends at", t, then="and then at"))
    env.process(work("ends after", math.nextafter(t, 1)))
    env.process(work("ends before", math.nextafter(t, 0)))
    env.run()
    assert seen == [("ends before", math.nextafter(t, 0)), ("ends at", t), ("and then at", t),
                    ("cut", t), ("ends after", math.nextafter(t, 1))]


def test_a_cut_off_lands_on_its_instant_exactly_and_not_in_the_past():
    sim = Simulation()
    env = sim.env
    env.run(until=0.1)
    at = 0.1 + 0.2  # 0.30000000000000004: not 0.2 after 0.1 in floats
    event = cut_off_at(env, at)
    env.run(until=event)
    assert env.now == at
    with pytest.raises(ValueError, match="not at or after now"):
        cut_off_at(env, math.nextafter(at, 0))
    with pytest.raises(ValueError, match="not at or after now"):
        cut_off_at(env, math.nan)


# ---------------------------------------------------------- the round protocol itself
@pytest.fixture
def protocol(tiny):
    """A built (timing-only) FedAvg whose round is replaced by client compute of given
    lengths, to cut at exact instants: ``run(durations, ...)`` returns the statuses and
    the trace's ``(client_id, end_s, cut_off)`` rows."""
    tiny = timing_only(traced(tiny, {"name": "fedavg"}, {}))
    tiny["devices"] = {"g": {"profile": "rpi4", "count": 4, "end_layer": 3, "link": "wifi"}}

    def run(durations, *, deadline_s=None, offline_at=None, keep_first=None, order=None):
        _, alg = build(validate_scenario(copy.deepcopy(tiny)))
        sim, clients = alg.sim, alg.ctx.clients
        protocol = RoundProtocol(sim, clients, lambda round_: protocol.run_clients(
            lambda c: sim.busy(c.actor, "client_train", c.client_id, 1.0,
                               durations[c.client_id])), alg.leave_out)
        conditions = RoundConditions(
            dropped=frozenset(c.client_id for c in clients) - set(range(len(durations))),
            offline_at=dict(offline_at or {}), keep_first=keep_first,
            sampling_order=tuple(order or []), deadline_s=deadline_s, start_s=0.0)
        sim.round = 1
        sim.run_until(protocol.run_round(1, conditions))
        status = [protocol.status[i] for i in range(len(durations))]
        return status, sorted((e.client_id, e.end_s, e.cut_off) for e in sim.trace)

    return run


def test_the_deadline_and_going_offline_keep_work_ending_at_the_instant(protocol):
    t = 0.25
    durations = list(_around(t).values())  # clients 0, 1, 2 end before, at, after t
    status, rows = protocol(durations, deadline_s=t)
    assert status == ["trained", "trained", "late"]
    assert rows == [(0, durations[0], False), (1, t, False), (2, t, True)]
    status, rows = protocol(durations, offline_at={0: t, 1: t, 2: t})
    assert status == ["trained", "trained", OFFLINE]
    assert rows == [(0, durations[0], False), (1, t, False), (2, t, True)]
    status, rows = protocol(durations, deadline_s=t, offline_at={2: t})  # both at once
    assert status == ["trained", "trained", "late"]
    assert rows == [(0, durations[0], False), (1, t, False), (2, t, True)]


def test_over_commitment_keeps_its_count_and_breaks_an_exact_tie_by_sampling_order(
        protocol):
    """Two kept: client 0 finishes first (one ulp before t); clients 1 and 2 both finish
    at t, the cut-off instant, and only the one sampled first of them is kept (the other's
    work is whole, its status over_committed); client 3, one ulp after t, is stopped
    there. The order of events at t does not decide: reversing the sampling order
    reverses who is kept. Without a sampling order, ids decide."""
    t = 0.25
    durations = [math.nextafter(t, 0), t, t, math.nextafter(t, 1)]
    for order, kept in [([3, 2, 1, 0], 2), ([0, 1, 2, 3], 1), ([2, 0, 3, 1], 2), (None, 1)]:
        status, rows = protocol(durations, keep_first=2, order=order)
        lost = 3 - kept
        assert status[0] == status[kept] == "trained", order
        assert status[lost] == status[3] == "over_committed", order
        assert rows == [(0, durations[0], False), (1, t, False), (2, t, False), (3, t, True)]


@pytest.mark.parametrize("cut", ["deadline", "offline"])
def test_over_commitment_counts_a_tie_at_a_deadline_or_going_offline_at_the_same_instant(
        protocol, cut):
    """Clients 1 and 2 finish at t (the second kept place is theirs, client 2 sampled
    first), and at t the round deadline falls or both go offline: their work ended at the
    cut, so it counts (the inclusive rule), and over-commitment's count still keeps one
    of them only, client 2; client 3 is cut off at t."""
    t = 0.25
    durations = [math.nextafter(t, 0), t, t, math.nextafter(t, 1)]
    conditions = ({"deadline_s": t} if cut == "deadline"
                  else {"offline_at": {1: t, 2: t, 3: t}})
    status, rows = protocol(durations, keep_first=2, order=[2, 3, 1, 0], **conditions)
    assert status == ["trained", "over_committed", "trained",
                      "late" if cut == "deadline" else OFFLINE]
    assert rows == [(0, durations[0], False), (1, t, False), (2, t, False), (3, t, True)]


# ------------------------------------------------------- every transfer of real methods
#: (method, activity of client 0 to end at the cut-off instant, whether it is the client's
#: last work of the round, so that ending at the instant leaves it "trained")
TRANSFERS = [("fedavg", "download_model", False), ("fedavg", "upload_model", True),
             ("splitfed_v1", "send_activations", False),
             ("splitfed_v1", "send_gradients", False)]


def _scenario(tiny, method, conditions, *, timing=True):
    data = traced(copy.deepcopy(tiny), {"name": method}, conditions)
    data["training"]["rounds"] = 1
    return validate_scenario(timing_only(data) if timing else data)


@pytest.mark.parametrize("cut", ["deadline", "availability"])
@pytest.mark.parametrize(("method", "activity", "last"), TRANSFERS,
                         ids=[f"{m}-{a}" for m, a, _ in TRANSFERS])
def test_a_transfer_ending_at_the_cut_off_is_kept_and_one_ulp_later_is_cut(
        tiny, tmp_path, cut, method, activity, last):
    """Client 0's first ``activity`` ends at t in a run without conditions; with a round
    deadline at t (round 1 starts at 0) or client 0 going offline at t, the transfer is
    whole (cut_off false, all its bytes) when the cut is at t or one ulp after, and cut
    off at the cut when it is one ulp before. Nothing of client 0 ends after the cut."""
    free = run_scenario(_scenario(tiny, method, {})).events
    mine = free[(free.client_id == 0) & (free.activity == activity)].iloc[0]
    t = float(mine.end_s)
    for where, at in _around(t).items():
        if cut == "deadline":
            conditions = {"round_deadline_s": at}
        else:
            conditions = {"availability": write_trace(tmp_path / f"{where}.csv",
                                                      [f"0,0,{at!r}"])}
        run = run_scenario(_scenario(tiny, method, conditions))
        ev = run.events[run.events.client_id == 0]
        row = ev[ev.activity == activity].iloc[0]
        assert (ev.end_s <= at).all(), where
        status = run.clients.set_index("client_id").status[0]
        cut_status = "late" if cut == "deadline" else "offline"
        if where == BEFORE:
            assert bool(row.cut_off) and row.end_s == at, where
            assert status == cut_status, where
        else:
            assert not row.cut_off and row.end_s == t, where
            assert row.payload_bytes == mine.payload_bytes, where
            assert status == ("trained" if last else cut_status), where
        if where == AT:  # nothing more of it: what starts at the cut has done nothing
            assert (ev.start_s < at).all(), where


@pytest.mark.parametrize("cut", ["deadline", "availability"])
def test_a_model_upload_ending_at_the_cut_off_is_aggregated(tiny, tmp_path, monkeypatch, cut):
    """Trained FedAvg: client 0's upload ends at t; cut at t its model is averaged,
    cut one ulp before it is not; the average takes exactly the clients "trained"."""
    averaged: list[list[int]] = []
    real = fedavg.FedAvg.end_round

    def end_round(self, round_):
        averaged.append(sorted(self.uploads))
        real(self, round_)

    monkeypatch.setattr(fedavg.FedAvg, "end_round", end_round)
    free = run_scenario(_scenario(tiny, "fedavg", {}, timing=False)).events
    t = float(free[(free.client_id == 0) & (free.activity == "upload_model")].end_s.iloc[0])
    for where in (BEFORE, AT):
        at = _around(t)[where]
        conditions = ({"round_deadline_s": at} if cut == "deadline" else
                      {"availability": write_trace(tmp_path / "t.csv", [f"0,0,{at!r}"])})
        averaged.clear()
        run = run_scenario(_scenario(tiny, "fedavg", conditions, timing=False))
        trained = sorted(run.clients.client_id[run.clients.status == "trained"])
        assert averaged == [trained], where
        assert (0 in trained) == (where == AT), where


# ------------------------------------------------------ the deadline counts from the start
def test_a_round_never_runs_past_its_start_plus_the_deadline_the_wait_included(tiny, tmp_path):
    """A 1 s deadline; no client online until 4.04 s. Every round ends by its start + 1 s
    (round_time_s <= 1 s, the wait for an online client included, and no event of the
    round ends after it): rounds 1 to 4 find no client online before their deadline and
    end there with every client offline; round 5 starts at 4 s, waits 0.04 s and its
    clients train in the 0.96 s left. Then clients online from 0.95 s: the round's work
    (0.22 s without a deadline) is cut at 1 s, not at 0.95 + 1 s, and the slow clients are
    late."""
    data = timing_only(traced(tiny, {"name": "fedavg"}, {
        "round_deadline_s": 1.0, "availability": write_trace(tmp_path / "a.csv", [
            "weak,4.04,inf", "mid,4.04,inf", "strong,4.04,inf"])}))
    data["training"]["rounds"] = 5
    free = copy.deepcopy(data)
    free["conditions"], free["training"]["rounds"] = {}, 1
    work_s = run_scenario(validate_scenario(free)).rounds.round_time_s.iloc[-1]
    assert 0.1 < work_s < 0.96
    run = run_scenario(validate_scenario(data))
    rounds = run.rounds.set_index("round")
    assert (rounds.round_time_s <= 1.0).all()
    assert rounds.sim_time_s.loc[1:4].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert rounds.clients_offline.loc[1:4].tolist() == [3] * 4
    assert (rounds.note.loc[1:4] == "no client took part; 3 offline").all()
    ev = run.events
    assert set(ev["round"]) == {5} and ev.start_s.min() == 4.04
    assert ev.end_s.max() == pytest.approx(4.04 + work_s) and not ev.cut_off.any()
    assert rounds.round_time_s.loc[5] == pytest.approx(0.04 + work_s)
    assert set(run.clients.status[run.clients["round"] == 5]) == {"trained"}

    data["conditions"]["availability"] = write_trace(tmp_path / "b.csv", [
        "weak,0.95,inf", "mid,0.95,inf", "strong,0.95,inf"])
    data["training"]["rounds"] = 1
    run = run_scenario(validate_scenario(data))
    assert run.rounds.set_index("round").round_time_s[1] == 1.0
    assert run.events.end_s.max() <= 1.0 and run.events.cut_off.any()
    assert "late" in set(run.clients.status)


def test_a_client_online_only_from_the_deadline_instant_does_not_take_part(tiny, tmp_path):
    data = timing_only(traced(tiny, {"name": "fedavg"}, {
        "round_deadline_s": 1.0, "availability": write_trace(tmp_path / "a.csv", [
            "weak,1.0,inf", "mid,1.0,inf", "strong,1.0,inf"])}))
    data["training"]["rounds"] = 2
    run = run_scenario(validate_scenario(data))
    status = run.clients.pivot(index="round", columns="client_id", values="status")
    assert status.loc[1].tolist() == ["offline"] * 3 and status.loc[2].tolist() == ["trained"] * 3
    assert run.rounds.set_index("round").sim_time_s[1] == 1.0


def test_a_wait_without_a_deadline_is_part_of_the_round(tiny, tmp_path):
    """Without a deadline the round waits as long as it takes for a client to come online."""
    data = timing_only(traced(tiny, {"name": "fedavg"}, {
        "availability": write_trace(tmp_path / "a.csv", [
            "weak,4.04,inf", "mid,4.04,inf", "strong,4.04,inf"])}))
    data["training"]["rounds"] = 1
    run = run_scenario(validate_scenario(data))
    assert run.events.start_s.min() == 4.04
    assert run.rounds.set_index("round").round_time_s[1] > 4.04



def test_rounds_past_the_availability_traces_end_still_end_at_their_deadline(tiny, tmp_path):
    """Clients online only until 0.5 s: once a round starts at 0.5 s or later no client
    comes online again, and each such round ends at its start plus the deadline, as a
    round in which no client came online before the deadline does (not after 0 s)."""
    data = timing_only(traced(tiny, {"name": "fedavg"}, {
        "round_deadline_s": 1.0, "availability": write_trace(tmp_path / "a.csv", [
            "weak,0,0.5", "mid,0,0.5", "strong,0,0.5"])}))
    data["training"]["rounds"] = 5
    rounds = run_scenario(validate_scenario(data)).rounds.set_index("round")
    past = rounds[rounds.sim_time_s - rounds.round_time_s >= 0.5]  # started at 0.5 s or later
    assert past.index.tolist() == [4, 5]  # rounds 1-3 end at 0.22, 0.43 and 0.5 s
    assert (past.round_time_s == 1.0).all()
    assert (past.note == "no client took part; 3 offline").all()
