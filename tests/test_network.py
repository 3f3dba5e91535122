"""Network topology, shared links, bandwidth traces and the server queue, by hand arithmetic."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from sflsim.config.load import validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.engine import Link, Server, Simulation
from sflsim.errors import ConfigError
from sflsim.hardware import profiles
from sflsim.network import BandwidthTrace, Hop, Path, SharedLink, fair_shares, read_trace
from sflsim.run.build import network_of

MBIT = 1_000_000 / 8  # bytes in one megabit


def _run(sim: Simulation, *gens) -> None:
    sim.env.run(sim.env.all_of([sim.env.process(g) for g in gens]))


def _delayed(sim: Simulation, delay_s: float, gen):
    yield sim.env.timeout(delay_s)
    yield from gen


# ----- processor sharing ----------------------------------------------------------------
def test_two_equal_transfers_on_shared_link_take_twice_the_solo_time():
    solo = Simulation()
    link = SharedLink(solo, "ap", 10e6, 0.0)
    solo.run_until(link.transfer("x", 0, 10 * MBIT))
    assert solo.now_s == pytest.approx(1.0)

    sim = Simulation()
    link = SharedLink(sim, "ap", 10e6, 0.0)
    _run(sim, link.transfer("x", 0, 10 * MBIT), link.transfer("x", 1, 10 * MBIT))
    assert [e.end_s for e in sim.trace] == pytest.approx([2.0, 2.0])
    assert [e.client_id for e in sim.trace] == [0, 1]  # ties finish in arrival order
    assert [e.queue_s for e in sim.trace] == [0.0, 0.0]


def test_staggered_transfers_share_by_hand_arithmetic():
    # A (10 Mbit) alone 0-0.5 s: 5 Mbit sent; both at 5 Mbit/s until A ends at 1.5 s;
    # B has 5 Mbit left at 1.5 s, alone at 10 Mbit/s: ends at 2.0 s; + 10 ms latency each
    sim = Simulation()
    link = SharedLink(sim, "ap", 10e6, 0.010)
    _run(sim, link.transfer("x", 0, 10 * MBIT),
         _delayed(sim, 0.5, link.transfer("x", 1, 10 * MBIT)))
    ends = {e.client_id: (e.start_s, e.end_s) for e in sim.trace}
    assert ends[0] == pytest.approx((0.0, 1.51))
    assert ends[1] == pytest.approx((0.5, 2.01))


def test_one_radio_sends_its_transfers_one_at_a_time_on_a_shared_link():
    """Client 0 asks for two 10 Mbit transfers at once, client 1 for one; the link has
    100 Mbit/s, each radio 10 Mbit/s. Client 0's second waits for its first (1 s, its
    queue_s), while client 1's runs beside them: client 0's radio is busy 2 s, not 2 s
    twice over at once, and never faster than its 10 Mbit/s."""
    import simpy

    sim = Simulation()
    link = SharedLink(sim, "ap", 100e6, 0.0)
    radios = {c: simpy.Resource(sim.env, 1) for c in (0, 1)}
    _run(sim, *(link.transfer("x", c, 10 * MBIT, max_bps=10e6, radio=radios[c]) for c in (0, 0, 1)))
    got = sorted((e.client_id, e.start_s, e.end_s, e.queue_s) for e in sim.trace)
    assert got == [pytest.approx((0, 0.0, 1.0, 0.0)), pytest.approx((0, 1.0, 2.0, 1.0)),
                   pytest.approx((1, 0.0, 1.0, 0.0))]


def test_an_interrupted_shared_transfer_is_recorded_cut_off_and_frees_the_radio():
    """A 10 Mbit transfer at 10 Mbit/s interrupted at 0.4 s: 4 Mbit (500,000 B) were sent,
    recorded ``cut_off``; the same radio's next transfer, queued behind it, starts at once."""
    import simpy

    sim = Simulation()
    link = SharedLink(sim, "ap", 100e6, 0.0)
    radio = simpy.Resource(sim.env, 1)
    first = sim.env.process(link.transfer("x", 0, 10 * MBIT, max_bps=10e6, radio=radio))
    second = sim.env.process(link.transfer("y", 0, 10 * MBIT, max_bps=10e6, radio=radio))

    def stop():
        yield sim.env.timeout(0.4)
        first.interrupt("deadline")

    def swallow():
        try:
            yield first
        except simpy.Interrupt:
            pass

    _run(sim, stop(), swallow())
    sim.env.run(second)
    cut, done = sim.trace
    assert (cut.activity, cut.cut_off, cut.payload_bytes) == ("x", True, 500_000)
    assert (cut.start_s, cut.end_s) == pytest.approx((0.0, 0.4))
    assert done.activity == "y" and not done.cut_off
    assert (done.start_s, done.end_s, done.queue_s) == pytest.approx((0.4, 1.4, 0.4))
    assert not link.active and radio.count == 0
    # interrupted in the latency after its last bit: all its bytes were sent
    sim = Simulation()
    link = SharedLink(sim, "ap", 100e6, 0.5)
    late = sim.env.process(link.transfer("z", 0, 10 * MBIT, max_bps=10e6))

    def stop_late():
        yield sim.env.timeout(1.2)
        late.interrupt("deadline")

    sim.env.process(stop_late())
    with pytest.raises(simpy.Interrupt):
        sim.env.run(late)
    (cut,) = sim.trace
    assert (cut.cut_off, cut.payload_bytes, cut.end_s) == (True, 10 * MBIT, pytest.approx(1.2))


def test_rate_caps_share_max_min_fairly():
    assert fair_shares(10.0, [2.0, float("inf"), float("inf")]) == pytest.approx([2.0, 4.0, 4.0])
    # capacity 10, caps 2 and none: A at 2, B at 8 -> B ends 1.25 s; A then 7.5 Mbit at 2 -> 5 s
    sim = Simulation()
    link = SharedLink(sim, "ap", 10e6, 0.0)
    _run(sim, link.transfer("x", 0, 10 * MBIT, max_bps=2e6), link.transfer("x", 1, 10 * MBIT))
    ends = {e.client_id: e.end_s for e in sim.trace}
    assert ends == pytest.approx({0: 5.0, 1: 1.25})


def test_shared_link_many_transfers_all_finite_and_conserve_work():
    sim = Simulation()
    link = SharedLink(sim, "ap", 8e6, 0.0)
    sizes = [1000 * (k + 1) for k in range(20)]
    _run(sim, *[_delayed(sim, 0.001 * k, link.transfer("x", k, b)) for k, b in enumerate(sizes)])
    assert len(sim.trace) == 20
    # work-conserving: the link is never idle while bits are waiting
    assert sim.now_s == pytest.approx(8 * sum(sizes) / 8e6)
    assert all(0 <= e.start_s <= e.end_s < float("inf") for e in sim.trace)


# ----- bandwidth traces -------------------------------------------------------------------
def _write(tmp_path, text: str, name: str = "trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_trace_driven_link_crosses_a_step(tmp_path):
    # 8 Mbit/s until t=1, then 2 Mbit/s; 10 Mbit from t=0.5: 4 Mbit by 1.0, 6 Mbit at 2 -> 4.0
    trace = read_trace(_write(tmp_path, "time_s,bandwidth_bps\n0,8e6\n1.0,2e6\n"))
    assert trace.value_at(0.99) == 8e6 and trace.value_at(1.0) == 2e6 and trace.value_at(99) == 2e6
    sim = Simulation()
    link = Link(sim, "l", 8e6, 0.020, trace)
    _run(sim, _delayed(sim, 0.5, link.transfer("x", 0, 10 * MBIT)))
    (event,) = sim.trace
    assert (event.start_s, event.end_s) == pytest.approx((0.5, 4.02))


def test_trace_before_first_time_uses_first_value_and_per_direction_columns(tmp_path):
    path = _write(tmp_path, "time_s,uplink_bps,downlink_bps\n2,1e6,4e6\n3,2e6,8e6\n")
    up, down = read_trace(path, "uplink"), read_trace(path, "downlink")
    assert up.value_at(0.0) == 1e6 and down.value_at(0.0) == 4e6
    # 1 Mbit/s before t=3 (first value before t=2): 3 Mbit by t=3, then 2 Mbit/s
    assert up.finish_time(0.0, 3e6) == pytest.approx(3.0)
    assert up.finish_time(0.0, 4e6) == pytest.approx(3.5)


def test_shared_link_capacity_follows_trace():
    # 10 Mbit/s until t=1 then 20: two 10 Mbit transfers have 5 Mbit left each at 1 s,
    # then 10 Mbit/s each -> both end at 1.5 s
    sim = Simulation()
    link = SharedLink(sim, "ap", 10e6, 0.0, BandwidthTrace((0.0, 1.0), (10e6, 20e6)))
    _run(sim, link.transfer("x", 0, 10 * MBIT), link.transfer("x", 1, 10 * MBIT))
    assert [e.end_s for e in sim.trace] == pytest.approx([1.5, 1.5])


@pytest.mark.parametrize(("text", "match"), [
    ("time_s,bandwidth_bps\n0,1e6\n2,1e6\n1,1e6\n", r"row 4, time_s: 1 is not after .* 2"),
    ("time_s,bandwidth_bps\n0,1e6\n0,2e6\n", r"row 3, time_s: 0 is not after"),
    ("time_s,bandwidth_bps\n0,nan\n", r"row 2, bandwidth_bps: nan is out of range; valid: "
                                       r"greater than 0 bit/s$"),
    ("time_s,bandwidth_bps\n0,1e6\n1,0\n", r"row 3, bandwidth_bps: 0 is out of range; valid: "
                                            r"greater than 0 bit/s$"),
    ("time_s,bandwidth_bps\n0,-5 Mbit/s\n", r"row 2, bandwidth_bps: '-5 Mbit/s' is out of range"),
    ("time_s,bandwidth_bps\n-1,1e6\n", r"row 2, time_s: -1 is out of range; valid: 0 s or more$"),
    ("time_s,bandwidth_bps\ninf,1e6\n", r"row 2, time_s: inf is out of range; valid: 0 s or "
                                         r"more$"),
    ("time_s,bandwidth_bps\n0,fast\n", r"row 2, bandwidth_bps: cannot read 'fast' as a "
                                        r"bandwidth: .*; a bare number is in bit/s$"),
    ("time_s,bandwidth_bps\n0,5 s\n", r"row 2, bandwidth_bps: unknown bandwidth unit 's'"),
    ("t,bw\n0,1\n", r"no column 'time_s' \(columns: t, bw\)"),
    ("time_s,bandwidth_bps\n", r"a header and no rows; valid: at least one row of time_s and "
                               r"bandwidth_bps"),
    ("", r"no column 'time_s' \(columns: none\)"),
])
def test_bad_trace_names_file_row_and_field(tmp_path, text, match):
    path = _write(tmp_path, text, "bad.csv")
    with pytest.raises(ConfigError, match=match) as info:
        read_trace(path)
    assert "bad.csv" in str(info.value)


def test_trace_cells_may_carry_their_units(tmp_path):
    """As in scenarios and fleet files: ``500 ms`` is 0.5 s, ``20 Mbit/s`` 2e7 bit/s."""
    path = _write(tmp_path, "time_s,bandwidth_bps\n0,20 Mbit/s\n500 ms,5e6\n", "units.csv")
    assert read_trace(path) == BandwidthTrace((0.0, 0.5), (20e6, 5e6))


def test_missing_trace_file(tmp_path):
    with pytest.raises(ConfigError, match="nowhere.csv: cannot be read"):
        read_trace(tmp_path / "nowhere.csv")


# ----- topology -----------------------------------------------------------------------------
def test_path_crosses_hops_store_and_forward():
    # access: 10 Mbit at 10 Mbit/s + 10 ms; backhaul: 10 Mbit at 20 Mbit/s + 5 ms
    sim = Simulation()
    path = Path([Hop(SharedLink(sim, "ap:a:uplink", 10e6, 0.010), BandwidthTrace.constant(100e6),
                     "client0:uplink"),
                 Hop(SharedLink(sim, "ap:a:backhaul_up", 20e6, 0.005))])
    assert (path.bandwidth_bps, path.latency_s) == pytest.approx((10e6, 0.015))
    sim.run_until(path.transfer("send_activations", 0, 10 * MBIT))
    assert sim.now_s == pytest.approx(1.01 + 0.505)
    assert [e.actor for e in sim.trace] == ["client0:uplink", "ap:a:backhaul_up"]


def _scenario(tiny: dict, network: dict | None = None, **server):
    if network is not None:
        tiny["network"] = network
    tiny["server"].update(server)
    return validate_scenario(tiny)


def test_star_gives_todays_links(tiny):
    scenario = _scenario(tiny)
    net = network_of(Simulation(), scenario)
    up, down = net.links_for(1, "mid")
    assert isinstance(up, Link) and isinstance(down, Link)
    lte = profiles.link_profile("lte")
    assert (up.actor, up.bandwidth_bps, up.latency_s, up.trace) == (
        "client1:uplink", lte.uplink_bps.value, lte.latency_s.value, None)
    assert (down.actor, down.bandwidth_bps) == ("client1:downlink", lte.downlink_bps.value)


SHARED = {"topology": "shared_access",
          "access_points": {"ap1": {"link": "wifi", "groups": ["weak", "mid", "strong"],
                                    "link_override": {"uplink_bps": "2 Mbps",
                                                      "downlink_bps": "2 Mbps"},
                                    "backhaul": "ethernet"}}}


def test_no_path_to_server_names_group_and_access_point(tiny):
    net_cfg = {"topology": "shared_access", "access_points": {
        "ap1": {"link": "wifi", "groups": ["weak"], "upstream": "ap2"},
        "ap2": {"link": "wifi", "groups": ["mid"], "upstream": "ap1"}}}
    net = network_of(Simulation(), _scenario(tiny, net_cfg))
    with pytest.raises(ConfigError, match=r"network\.access_points\.ap1: device group weak "
                                          r"\(client 0\) has no path to the server"):
        net.links_for(0, "weak")


@pytest.mark.parametrize(("network", "match"), [
    ({"topology": "shared_access", "access_points": {"ap1": {"link": "wifi", "groups": ["nope"]}}},
     r"network\.access_points\.ap1\.groups: 'nope' is not a device group"),
    ({"topology": "shared_access", "access_points": {"ap1": {"link": "wifi", "groups": ["weak"],
                                                             "upstream": "ap9"}}},
     r"upstream: 'ap9' is neither server nor an access point"),
    ({"topology": "shared_access"}, r"needs at least one entry in access_points"),
    ({"topology": "star", "traces": {"nope": "x.csv"}}, r"network\.traces: 'nope'"),
    ({"topology": "star", "colour": "red"}, r"colour"),
])
def test_bad_network_sections_refused(tiny, network, match):
    with pytest.raises(ConfigError, match=match):
        _scenario(tiny, network)


def test_bad_trace_in_scenario_names_field_and_file(tiny, tmp_path):
    """Told by the validation (before torch loads) and, for a scenario built without it,
    by the network."""
    path = _write(tmp_path, "time_s,bandwidth_bps\n0,1e6\n0,1e6\n", "back.csv")
    expected = r"network\.traces\.weak: bandwidth trace .*back\.csv, row 3, time_s"
    with pytest.raises(ConfigError, match=expected):
        _scenario(tiny, {"traces": {"weak": str(path)}})
    with pytest.raises(ConfigError, match=expected):
        network_of(Simulation(), Scenario.model_validate(tiny))


def test_unknown_access_point_link_profile_names_field(tiny):
    net_cfg = {"topology": "shared_access",
               "access_points": {"ap1": {"link": "carrier_pigeon", "groups": ["weak"]}}}
    with pytest.raises(ConfigError, match=r"network\.access_points\.ap1\.link"):
        network_of(Simulation(), _scenario(tiny, net_cfg))


def test_shared_access_end_to_end_slower_than_star(tiny):
    from sflsim.runner import run_scenario

    tiny["evaluation"]["early_exit"] = {"enabled": False}
    star = run_scenario(_scenario(dict(tiny)))
    shared = run_scenario(_scenario(tiny, SHARED))
    assert shared.summary["sim_time_s"] > 2 * star.summary["sim_time_s"]
    assert shared.summary["bytes_up"] == star.summary["bytes_up"]  # backhaul not double counted
    actors = set(shared.events["actor"])
    assert {"ap:ap1:backhaul_up", "client0:uplink"} <= actors
    assert {"server_queue_mean_s", "server_queue_max_s", "server_jobs"} <= set(shared.rounds)
    trained = shared.rounds[shared.rounds["round"] >= 1]  # round 0: the untrained model
    assert (trained["server_jobs"] > 0).all()
    assert isinstance(shared.rounds, pd.DataFrame)
    # each device's radio sends one payload at a time: its access-hop transfers never
    # overlap but by the latency that follows each, and its radio time fits in the round
    latency = profiles.link_profile("wifi").latency_s.value
    ev = shared.events
    for actor, hop in ev[ev["actor"].str.fullmatch(r"client\d+:(up|down)link")].groupby("actor"):
        hop = hop.sort_values("start_s")
        assert (hop["start_s"].to_numpy()[1:] >= hop["end_s"].to_numpy()[:-1] - latency - 1e-9
                ).all(), actor
    # uplink_s is the time the radio sends (serialisation, the latency after the last bit
    # not counted; README "Time, bytes and energy"): one payload at a time, so the sum of
    # each transfer's span less the access hop's latency, and it fits in the round
    ups = ev[ev["actor"].str.endswith(":uplink")]
    sent = (ups["end_s"] - ups["start_s"] - latency).groupby(
        [ups["round"], ups["client_id"]]).sum()
    clients = shared.clients.merge(trained[["round", "round_time_s"]], on="round")
    np.testing.assert_allclose(
        clients["uplink_s"], sent.loc[list(zip(clients["round"], clients["client_id"]))],
        rtol=1e-9)
    assert (clients["uplink_s"] <= clients["round_time_s"] + 1e-9).all()


# ----- server queue -------------------------------------------------------------------------
def _serve(queue: str) -> list:
    sim = Simulation()
    server = Server(sim, flops_per_s=1e9, slots=1, queue=queue, priorities={0: 2, 1: 1, 2: 0})

    def job(cid):
        asked = sim.now_s
        with server.request(cid) as slot:
            yield slot
            yield from server.run("server_train", cid, 1e9, asked)

    _run(sim, *[job(c) for c in (0, 1, 2)])
    return sim.trace


def test_fifo_vs_priority_service_order():
    # job 0 finds the slot free; 1 and 2 wait. FIFO: 1 then 2; priority: 2 (prio 0) then 1
    fifo, prio = _serve("fifo"), _serve("priority")
    assert [e.client_id for e in fifo] == [0, 1, 2]
    assert [e.client_id for e in prio] == [0, 2, 1]
    assert {e.client_id: e.queue_s for e in prio} == pytest.approx({0: 0.0, 2: 1.0, 1: 2.0})


def test_priority_defaults_to_group_order(tiny):
    scenario = _scenario(tiny, None, queue="priority", priorities={"strong": -1})
    assert [scenario.priority_of_group(g) for g in ("weak", "mid", "strong")] == [0, 1, -1]


def test_network_and_engine_import_no_torch():
    code = ("import sys, sflsim.engine, sflsim.network; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_group_trace_reaches_star_link_and_access_cap(tiny, tmp_path):
    path = _write(tmp_path, "time_s,bandwidth_bps\n0,4e6\n10,1e6\n")
    star = network_of(Simulation(), _scenario(copy.deepcopy(tiny), {"traces": {"weak": str(path)}}))
    up, _ = star.links_for(0, "weak")
    assert up.trace is not None and up.trace.value_at(11) == 1e6
    shared_cfg = copy.deepcopy(SHARED)
    shared_cfg["traces"] = {"weak": str(path), "ap1": str(path)}
    shared = network_of(Simulation(), _scenario(tiny, shared_cfg))
    up, down = shared.links_for(0, "weak")
    assert isinstance(up, Path) and [h.link.actor for h in up.hops] == [
        "ap:ap1:uplink", "ap:ap1:backhaul_up"]
    assert [h.link.actor for h in down.hops] == ["ap:ap1:backhaul_down", "ap:ap1:downlink"]
    assert up.hops[0].max_bps.value_at(11) == 1e6
    assert up.hops[0].link.capacity.value_at(0) == 4e6


def test_readme_network_example_validates(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # its trace, relative to the current folder
    (tmp_path / "traces").mkdir()
    _write(tmp_path / "traces", "time_s,bandwidth_bps\n0,20e6\n5,5e6\n", "pi4_wifi.csv")
    tiny["devices"] = {"pi4": {"profile": "rpi4", "count": 1, "end_layer": 3, "link": "wifi"},
                       "orin": {"profile": "jetson_orin_nano", "count": 1, "end_layer": 5,
                                "link": "wifi"}}
    scenario = _scenario(tiny, {
        "topology": "shared_access",
        "access_points": {"ap1": {"link": "wifi", "link_override": {"uplink_bps": "20 Mbps"},
                                  "groups": ["pi4", "orin"], "backhaul": "ethernet",
                                  "upstream": "server"}},
        "traces": {"pi4": "traces/pi4_wifi.csv"}}, queue="priority",
        priorities={"orin": 0, "pi4": 1})
    assert scenario.network.access_points["ap1"].link_override.uplink_bps == 20e6
    assert scenario.priority_of_group("pi4") == 1


def test_the_readme_trace_ships_and_is_stored_by_its_absolute_path(tiny, tmp_path,
                                                                   monkeypatch):
    """README "Network topology" names traces/pi4_wifi.csv: from a folder without it, the
    shipped copy is read (as availability traces are), and the resolved scenario stores
    its absolute path; a trace found nowhere says where it was looked for."""
    from sflsim.config.resolve import resolve_scenario
    from sflsim.shipped import scenarios_dir

    monkeypatch.chdir(tmp_path)
    scenario = _scenario(tiny, {"traces": {"weak": "traces/pi4_wifi.csv"}})
    shipped = scenarios_dir() / "traces" / "pi4_wifi.csv"
    assert resolve_scenario(scenario).network.traces == {"weak": str(shipped)}
    trace = read_trace("traces/pi4_wifi.csv")
    assert (trace.value_at(0.0), trace.value_at(5.0)) == (20e6, 5e6)
    with pytest.raises(ConfigError, match=r"network.traces.weak: bandwidth trace traces/none.csv: "
                                          r"cannot be read \(No such file or directory\) \(looked "
                                          r"for in .* and among the shipped scenarios"):
        _scenario(tiny, {"traces": {"weak": "traces/none.csv"}})


def test_priority_queue_reorders_server_jobs_in_a_real_run(tiny, profile_dir):
    """Averaging (one server model per client) on a slow one-slot server: a priority
    queue serves the favoured group's waiting jobs first, so the service order changes."""
    import yaml

    from sflsim.config import validate_scenario
    from sflsim.runner import run_scenario
    from tests.conftest import sourced

    profile_dir("servers", "slow_server", yaml.safe_dump({
        "description": "a deliberately slow server", "sustained_flops": sourced("1 GFLOPS"),
        "memory_bytes": sourced("8 GiB"), "active_power_w": sourced("100 W"),
        "idle_power_w": sourced("10 W")}))
    tiny["algorithm"] = {"name": "hetero_splitee_averaging"}
    tiny["server"] = {"profile": "slow_server", "slots": 1}
    orders = {}
    for queue in ("fifo", "priority"):
        tiny["server"].update(queue=queue)
        if queue == "priority":
            tiny["server"]["priorities"] = {"weak": 0, "mid": 1, "strong": 2}
        ev = run_scenario(validate_scenario(tiny)).events
        served = ev[ev.activity == "server_train"].sort_values("seq")
        orders[queue] = list(served.client_id)
        waited = served[served.queue_s > 0]
        assert len(waited) > 0  # the server is contended
    assert orders["fifo"] != orders["priority"]
    assert sorted(orders["fifo"]) == sorted(orders["priority"])
