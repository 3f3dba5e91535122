"""Client sampling (training.clients_per_round) and availability traces
(conditions.availability)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sflsim.algorithms import fedavg, splitfed
from sflsim.availability import read_availability
from sflsim.config import validate_scenario
from sflsim.engine import FifoQueue, Link, Server, Simulation
from sflsim.errors import ConfigError
from sflsim.metrics.results import read_result_csv, read_run_table
from sflsim.run.participation import draw_participants
from sflsim.runner import child_seeds, round_participants, run_scenario
from tests.test_resilience import StopAfter, assert_same_tables
from tests.test_timing_only import METHODS, UNDER_CONDITIONS, timing_only, traced

WALL = ["wall_time_s"]


@pytest.fixture
def twelve(tiny) -> dict:
    """``tiny`` with 12 clients on the small CNN (one cut), 3 rounds, a quarter sampled."""
    tiny["model"] = {"name": "small_cnn", "width": 0.5}
    tiny["dataset"]["fraction"] = 0.04
    for group in tiny["devices"].values():
        group.update(count=4, end_layer=1)
    tiny["training"].update(rounds=3, clients_per_round=0.25)
    return tiny


def sampled(run_dir) -> dict[int, list[int]]:
    clients = read_run_table(run_dir, "clients", columns=["round", "client_id", "status"])
    return {r: sorted(g.client_id[g.status == "trained"]) for r, g in clients.groupby("round")}


@pytest.mark.parametrize("algorithm", ["fedavg", "splitfed_v1"])
def test_a_quarter_of_twelve_clients_train_each_round_and_only_they_are_aggregated(
        twelve, tmp_path, monkeypatch, algorithm):
    """clients_per_round 0.25 of 12: 3 clients train each round (not always the same),
    the others are "not_sampled" with no event; the round-end average takes exactly the
    sampled clients' models (weights: their samples); a resumed and a timing-only run
    sample the same clients."""
    twelve["algorithm"] = {"name": algorithm}
    scenario = validate_scenario(twelve)
    averaged: list[list[float]] = []
    if algorithm == "fedavg":
        real = fedavg.average_into
        monkeypatch.setattr(fedavg, "average_into", lambda modules, weights, target:
                            (averaged.append(list(weights)), real(modules, weights, target=target)))
    else:
        real = splitfed.weighted_average
        monkeypatch.setattr(splitfed, "weighted_average", lambda states, weights:
                            (averaged.append(list(weights)), real(states, weights))[1])
    full = run_scenario(scenario, tmp_path / "full")
    chosen = sampled(tmp_path / "full")
    assert all(len(ids) == 3 for ids in chosen.values()) and len(chosen) == 3
    assert len({tuple(ids) for ids in chosen.values()}) > 1  # drawn anew each round
    rounds = read_result_csv(tmp_path / "full" / "rounds.csv")
    assert rounds.clients_not_sampled.tolist()[1:] == [9, 9, 9]
    events = read_run_table(tmp_path / "full", "events", columns=["round", "client_id"])
    for r, ids in chosen.items():
        assert set(events.client_id[events["round"] == r]) - {-1} <= set(ids)
    samples = {c.client_id: len(c.indices) for c in full.algorithm.ctx.clients}
    per_round = [[samples[i] for i in ids] for ids in chosen.values()]
    if algorithm == "fedavg":
        assert averaged == per_round
    else:  # one average per layer, of the 3 clients' copies
        layers = len(averaged) // 3
        assert averaged == [w for w in per_round for _ in range(layers)]

    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "cut", tmp_path / "full")
    timing = validate_scenario({**twelve, "training": {**twelve["training"], "timing_only": True}})
    run_scenario(timing, tmp_path / "timing")
    assert sampled(tmp_path / "timing") == chosen


def test_a_count_samples_that_many_and_a_count_past_the_fleet_is_refused(tiny):
    tiny["training"]["clients_per_round"] = 2
    scenario = validate_scenario(tiny)
    absent, _ = round_participants(scenario, None, 7, 1, 0.0)
    assert list(absent.values()) == ["not_sampled"] and len(absent) == 1
    tiny["training"]["clients_per_round"] = 4
    with pytest.raises(ConfigError, match=r"training\.clients_per_round: 4 but the scenario has "
                                          r"3 clients; valid: a count from 1 to 3"):
        validate_scenario(tiny)
    for bad, match in ((0, "a count must be at least 1"), (1.5, r"a fraction must be in \(0, 1\]"),
                       (True, r"a count \(an integer\) or a fraction")):
        tiny["training"]["clients_per_round"] = bad
        with pytest.raises(ConfigError, match=match):
            validate_scenario(tiny)


# ----------------------------------------------------------------------- availability
def write_trace(path, rows: list[str]):
    path.write_text("device,online_from_s,online_until_s\n" + "\n".join(rows) + "\n")
    return str(path)


def test_a_trace_is_read_merged_and_checked(tmp_path):
    groups = {"weak": [0, 1], "strong": [2]}
    trace = read_availability(write_trace(tmp_path / "a.csv", [
        "weak,0,10", "weak,10,20", "2,5,inf", "1,30,40"]), groups)
    assert trace.offline_at(0, 0.0) == 20 and trace.offline_at(0, 20.0) is None
    assert trace.offline_at(1, 35.0) == 40 and trace.online(2, 4.9) is False
    assert trace.offline_at(2, 1e9) == math.inf
    assert trace.next_online_after(20.0) == 30
    for rows, match in (
            (["mid,0,1"], r"row 2, device: 'mid' is neither a device group \(weak, strong\) "
                          r"nor a client id \(0 to 2\)"),
            (["weak,5,5"], r"row 2: online_until_s \(5\) must be after online_from_s \(5\)"),
            (["weak,-1,5"], r"row 2, online_from_s: -1 is out of range; valid: a time from 0 s"),
            (["weak,1e20,inf"], r"row 2, online_from_s: 1e20 is out of range; valid: a time from "
                                r"0 s to 10,000,000,000 s"),
            ([], "has a header and no rows"),
            (["weak,soon,5"], r"row 2, online_from_s: cannot read 'soon' as a time: write a "
                              r"number and a unit, .*; a bare number is seconds$"),
            (["weak,0,5 W"], r"row 2, online_until_s: unknown time unit 'W' in '5 W' \(valid "
                             r"units: s, ms, us, min, h\); a bare number is seconds$"),
            (["weak,inf,inf"], r"row 2, online_from_s: inf is out of range; valid: a time from "
                               r"0 s to 10,000,000,000 s \(inf only for online_until_s\)$"),
            (["weak,nan,5"], r"row 2, online_from_s: nan is out of range"),
            (["weak,0"], r"row 2: 2 cells, expected 3"),
            (["weak"], r"row 2: 1 cell, expected 3")):
        with pytest.raises(ConfigError, match=match):
            read_availability(write_trace(tmp_path / "b.csv", rows), groups)
    (tmp_path / "c.csv").write_text("client,start,end\n0,0,1\n")
    with pytest.raises(ConfigError, match="must have the header device,online_from_s,"
                                          "online_until_s, got client,start,end"):
        read_availability(tmp_path / "c.csv", groups)
    with pytest.raises(ConfigError, match=r"conditions\.availability: '.*missing.csv' does not "
                                          r"exist"):
        read_availability(tmp_path / "missing.csv", groups)
    with pytest.raises(ConfigError, match=r"is a folder, not a file"):
        read_availability(tmp_path, groups)
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfdevice,online_from_s,online_until_s\r\n"
                                       b"weak,0,1\r\n")  # a spreadsheet's CSV UTF-8
    assert read_availability(tmp_path / "bom.csv", groups).offline_at(0, 0.5) == 1.0
    with_units = read_availability(write_trace(tmp_path / "u.csv", ["weak,500 ms,2 min"]), groups)
    assert with_units.offline_at(0, 1.0) == 120.0 and with_units.online(0, 0.4) is False


def test_the_stored_scenario_names_the_trace_absolutely_and_sampling_sets_the_divisor(
        tiny, tmp_path, monkeypatch):
    """A relative trace path is stored resolved (the results' scenario.yaml runs from
    any folder), and Sequential's server learning rate divides by the clients sampled."""
    from sflsim.config.resolve import resolve_scenario

    write_trace(tmp_path / "t.csv", ["weak,0,inf"])
    monkeypatch.chdir(tmp_path)
    tiny["conditions"] = {"availability": "t.csv"}
    tiny["training"]["clients_per_round"] = 2
    resolved = resolve_scenario(validate_scenario(tiny))
    assert resolved.conditions.availability == str(tmp_path / "t.csv")
    assert resolved.algorithm.server_lr_divisor == 2.0


def test_a_client_that_goes_offline_mid_round_is_cut_off_there(tiny, tmp_path):
    """Client 0 goes offline during round 1 (at 40% of its first round's length): its work
    up to then is recorded, the work under way is cut_off at that instant and nothing of
    it follows; the client is "offline" that round, and not sampled while offline."""
    tiny["training"]["rounds"] = 2
    free = run_scenario(validate_scenario(tiny))
    events = free.events
    mine = events[(events.client_id == 0) & (events["round"] == 1)]
    cut_s = float(mine.start_s.min() + 0.4 * (mine.end_s.max() - mine.start_s.min()))
    round_1_end = float(free.rounds.sim_time_s.iloc[1])
    tiny["conditions"] = {"availability": write_trace(tmp_path / "trace.csv", [
        f"0,0,{cut_s!r}", f"0,{round_1_end + 1e6!r},inf"])}
    run = run_scenario(validate_scenario(tiny), tmp_path / "run")
    clients = read_run_table(tmp_path / "run", "clients")
    assert clients.status[clients.client_id == 0].tolist() == ["offline", "offline"]
    ev = read_run_table(tmp_path / "run", "events")
    own = ev[(ev.client_id == 0) & (ev["round"] == 1)]
    assert own.end_s.max() == pytest.approx(cut_s, abs=1e-12) and own.cut_off.any()
    assert not ((own.start_s >= cut_s) & ~own.cut_off).any()
    assert ev[(ev.client_id == 0) & (ev["round"] == 2)].empty  # offline at round 2's start
    rounds = run.rounds
    assert rounds.clients_offline.tolist()[1:] == [1, 1] and "1 offline" in rounds.note.iloc[1]


def test_the_transfer_behind_a_cut_one_starts_at_the_cut():
    """Two transfers on one link: the first is cut at t = 1 s by an interrupt (its client
    went offline); the second, queued behind it, starts at 1 s, not at the first's
    planned end (4 s). The same on a one-slot server queue."""
    sim = Simulation()
    link = Link(sim, "ap:uplink", bandwidth_bps=8.0, latency_s=0.5)  # 1 byte/s
    first = sim.env.process(link.transfer("send", 0, 4))
    sim.env.process(link.transfer("send", 1, 2))
    sim.env.process(_interrupt_at(sim, first, 1.0))
    first.defused = True
    sim.env.run()
    rows = {(e.client_id, e.cut_off): e for e in sim.trace}
    assert rows[0, True].end_s == 1.0 and rows[0, True].payload_bytes == 1
    second = rows[1, False]
    assert (second.start_s, second.end_s, second.queue_s) == (1.0, 3.5, 1.0)

    sim = Simulation()
    server, queue = Server(sim, flops_per_s=1.0), FifoQueue(sim.env)
    job = sim.env.process(server.run_queued("server_train", 0, 4.0, queue))
    sim.env.process(server.run_queued("server_train", 1, 2.0, queue))
    sim.env.process(_interrupt_at(sim, job, 1.0))
    job.defused = True
    sim.env.run()
    rows = {(e.client_id, e.cut_off): e for e in sim.trace}
    assert rows[0, True].end_s == 1.0
    assert (rows[1, False].start_s, rows[1, False].end_s) == (1.0, 3.0)


def _interrupt_at(sim, proc, t):
    yield sim.env.timeout(t)
    proc.interrupt("offline")


def test_the_shipped_availability_scenario_cuts_a_client_off(tmp_path):
    """scenarios/availability.yaml with its trace (device_profiles/traces/): some client is
    cut off mid-round (status offline with cut_off work) and some sits a round out."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    from sflsim.config import load_scenario

    scenario = load_scenario(root / "scenarios" / "availability.yaml",
                             ["training.rounds=2"])
    run_scenario(scenario, tmp_path / "run")
    clients = read_run_table(tmp_path / "run", "clients")
    ev = read_run_table(tmp_path / "run", "events")
    offline = clients[clients.status == "offline"]
    assert not offline.empty
    cut = ev[ev.cut_off]
    assert set(cut.client_id) & set(offline.client_id)


@pytest.mark.parametrize("method", list(UNDER_CONDITIONS))
def test_every_method_samples_and_cuts_off_alike_trained_or_timing_only(tiny, tmp_path, method):
    """Two of three clients sampled per round (the draws give clients 1 and 2 in round 1)
    and client 1 offline from half the deadline the timing-only tests cut with (about a
    third of its round) to long after: each method cuts client 1 off there, samples the
    other two in round 2, and its timing-only run gives the same events."""
    offline_s = UNDER_CONDITIONS[method] / 2
    data = traced(tiny, METHODS[method], {"availability": write_trace(
        tmp_path / "trace.csv", [f"1,0,{offline_s!r}", "1,1e6,inf"])})
    data["training"]["clients_per_round"] = 2
    trained = run_scenario(validate_scenario(data))
    status = trained.clients.pivot(index="round", columns="client_id", values="status")
    assert status.to_dict("list") == {0: ["not_sampled", "trained"], 1: ["offline", "offline"],
                                      2: ["trained", "trained"]}
    mine = trained.events[trained.events.client_id == 1]
    assert mine.cut_off.any() and mine.end_s.max() == offline_s
    timed = run_scenario(validate_scenario(timing_only(data)))
    pd.testing.assert_frame_equal(timed.events, trained.events, check_exact=True)
    pd.testing.assert_series_equal(timed.clients.status, trained.clients.status)


def test_a_resume_after_the_trace_changed_is_refused(tiny, tmp_path):
    from sflsim.errors import SflsimError

    trace = write_trace(tmp_path / "t.csv", ["weak,0,inf"])
    tiny["training"]["rounds"] = 2
    tiny["conditions"] = {"availability": trace}
    scenario = validate_scenario(tiny)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "run", progress=StopAfter(1))
    write_trace(tmp_path / "t.csv", ["weak,5,inf"])
    with pytest.raises(SflsimError, match=r"the file of conditions\.availability .* changed "
                                          r"since the run started"):
        run_scenario(scenario, tmp_path / "run", resume=True)


def test_over_commitment_keeps_the_first_to_finish(twelve, monkeypatch):
    """FedScale's over-commitment: 3 of 12 kept, 6 drawn (over_commit 2); the first 3 to
    upload are kept and averaged, the others stop the instant the third upload arrives
    (status over_committed, the work under way cut_off); timing-only gives the same.
    In round 2 two identical clients (same device, same samples) upload third at the same
    instant: over-commitment keeps a count, so only the one sampled first is kept; the
    other's upload arrived whole but is not averaged (3 trained, 3 over-committed)."""
    twelve["algorithm"] = {"name": "fedavg"}
    twelve["training"].update(rounds=2, clients_per_round=3, over_commit=2.0)
    averaged: list[int] = []
    real = fedavg.average_into
    monkeypatch.setattr(fedavg, "average_into", lambda modules, weights, target:
                        (averaged.append(len(modules)), real(modules, weights, target=target)))
    scenario = validate_scenario(twelve)
    run = run_scenario(scenario)
    status = run.clients.pivot(index="round", columns="client_id", values="status")
    for r, tied in ((1, 1), (2, 2)):
        counts = status.loc[r].value_counts().to_dict()
        assert counts == {"not_sampled": 6, "trained": 3, "over_committed": 3}
        ev = run.events[run.events["round"] == r]
        kept = status.columns[status.loc[r] == "trained"]
        stopped = status.columns[status.loc[r] == "over_committed"]
        uploads = ev[ev.activity == "upload_model"]
        whole = uploads[~uploads.cut_off]
        third = whole.end_s.sort_values().iloc[2]
        at_third = list(whole.client_id[whole.end_s == third])
        assert len(at_third) == tied  # round 2: the tie
        order = draw_participants(scenario, None, child_seeds(scenario)["sampling"], r,
                                  0.0).order
        first = min(at_third, key=order.index)  # the tie: the one sampled first is kept
        assert first in set(kept)
        assert set(whole.client_id) - set(kept) == set(at_third) - {first}
        assert (ev[ev.client_id.isin(stopped)].end_s <= third).all()
        assert ev[ev.client_id.isin(stopped)].cut_off.any() and len(stopped) == 3
    assert averaged == [3, 3]
    assert run.rounds.clients_over_committed.tolist()[1:] == [3, 3]
    timed = run_scenario(validate_scenario(timing_only(twelve)))
    pd.testing.assert_frame_equal(timed.events, run.events, check_exact=True)
    with pytest.raises(ConfigError, match="set training.clients_per_round too"):
        validate_scenario({**twelve, "training": {**twelve["training"],
                                                  "clients_per_round": None}})
