"""Device energy from the hardware: a radio draws power while it sends bits (once however
many transfers overlap), idle power goes to the devices that take part (sflsim.metrics.records,
the scenario's ``energy`` section)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sflsim.config import validate_scenario
from sflsim.config.load import load_scenario
from sflsim.engine import Link, Simulation, TraceEvent
from sflsim.errors import ConfigError
from sflsim.hardware import profiles
from sflsim.metrics import records
from sflsim.network import BandwidthTrace, Hop, Path, SharedLink
from sflsim.runner import run_scenario
from sflsim.shipped import scenario_path


def _power(w: float) -> SimpleNamespace:
    return SimpleNamespace(value=w)


DEVICE = SimpleNamespace(name="hand", active_power_w=_power(5.0), idle_power_w=_power(0.5),
                         radio_tx_power_w=_power(2.0), radio_rx_power_w=_power(1.0))
#: 1 MB takes 1 s to serialise at 8 Mbit/s; the last bit arrives 0.5 s later
MB = 1_000_000


def _client(cid: int = 0, uplink: object = None, downlink: object = None) -> SimpleNamespace:
    sim = Simulation()
    return SimpleNamespace(
        client_id=cid, group="g", end_layer=1, indices=range(4), device=DEVICE,
        uplink=uplink or Link(sim, f"client{cid}:uplink", 8e6, 0.5),
        downlink=downlink or Link(sim, f"client{cid}:downlink", 8e6, 0.5))


def _rows(events, clients, end_s=10.0, energy=None, **kwargs) -> list[dict]:
    return records.client_round_rows(1, events, clients, 0.0, end_s, None,
                                     energy=SimpleNamespace(**energy) if energy else None,
                                     **kwargs)


def up(start, end, size=MB, cid=0, cut=False) -> TraceEvent:
    return TraceEvent(1, f"client{cid}:uplink", "send_activations", cid, start, end,
                      payload_bytes=size, cut_off=cut)


#: two pipelined transfers: the second is serialised while the first's last bit travels
PIPELINED = [up(0.0, 1.5), up(1.0, 2.5)]


def test_radio_draws_power_while_it_sends_bits_once_however_many_transfers():
    row = _rows(PIPELINED, [_client()])[0]
    assert row["uplink_s"] == pytest.approx(2.0)  # [0, 1] and [1, 2]: the latency not counted
    assert row["radio_energy_j"] == pytest.approx(2.0 * 2.0)
    # radio_on: transfer: start to arrival, latency included, still counted once: [0, 2.5]
    row = _rows(PIPELINED, [_client()], energy={"radio_on": "transfer"})[0]
    assert row["uplink_s"] == pytest.approx(2.5)  # the sum of spans would say 3.0


def test_cut_off_transfers_count_the_bits_they_sent():
    """Cut 0.4 s into its serialisation, the radio sent 40 % of the bytes and was on 0.4 s;
    cut in the latency (all bytes out at 1 s), it was on 1 s, not until the cut."""
    in_serialisation = _rows([up(3.0, 3.4, size=400_000, cut=True)], [_client()])[0]
    assert in_serialisation["uplink_s"] == pytest.approx(0.4)
    in_latency = _rows([up(3.0, 4.2, size=MB, cut=True)], [_client()])[0]
    assert in_latency["uplink_s"] == pytest.approx(1.0)
    # over a bandwidth trace: 8 Mbit/s for 0.5 s, then 4 Mbit/s: 1 MB is out at 1.5 s
    traced = Link(Simulation(), "client0:uplink", 8e6, 0.5,
                  BandwidthTrace((0.0, 0.5), (8e6, 4e6)))
    row = _rows([up(0.0, 1.8, size=MB, cut=True)], [_client(uplink=traced)])[0]
    assert row["uplink_s"] == pytest.approx(1.5)


def test_shared_access_hop_counts_its_own_latency_and_a_cut_until_the_cut():
    sim = Simulation()
    access = SharedLink(sim, "ap:ap1:uplink", 8e6, 0.25)
    backhaul = SharedLink(sim, "ap:ap1:backhaul_up", 8e6, 2.0)
    path = Path([Hop(access, BandwidthTrace.constant(8e6), "client0:uplink"), Hop(backhaul)])
    client = _client(uplink=path)
    done = _rows([up(0.0, 1.25), TraceEvent(1, "ap:ap1:backhaul_up", "send_activations", 0,
                                            1.25, 4.25, payload_bytes=MB)], [client])[0]
    assert done["uplink_s"] == pytest.approx(1.0)  # the backhaul is not the device's radio
    cut = _rows([up(0.0, 1.1, size=MB, cut=True)], [client])[0]
    assert cut["uplink_s"] == pytest.approx(1.1)  # its share is not recorded: until the cut


def test_idle_power_goes_to_the_devices_that_take_part():
    """10 s round; client 0 trains 2 s, client 1 is late (cut at the deadline), client 2
    went offline after working until 4 s, clients 3 and 4 sat the round out."""
    clients = [_client(c) for c in range(5)]
    events = [TraceEvent(1, "client0", "client_train", 0, 0.0, 2.0, flops=1.0),
              TraceEvent(1, "client1", "client_train", 1, 0.0, 10.0, flops=1.0, cut_off=True),
              TraceEvent(1, "client2", "client_train", 2, 1.0, 4.0, flops=1.0, cut_off=True)]
    status = {0: "trained", 1: "late", 2: "offline", 3: "not_sampled", 4: "dropped"}
    idle = [r["idle_s"] for r in _rows(events, clients, status=status)]
    assert idle == pytest.approx([8.0, 0.0, 1.0, 0.0, 0.0])
    idle = [r["idle_s"] for r in _rows(events, clients, status=status,
                                       energy={"idle_draw": "all"})]
    assert idle == pytest.approx([8.0, 0.0, 7.0, 10.0, 10.0])  # every device, all round
    rows = _rows(events, clients, status=status, energy={"idle_draw": "none"})
    assert [r["idle_energy_j"] for r in rows] == [0.0] * 5  # compute + radio only
    assert [r["energy_j"] for r in rows] == pytest.approx([10.0, 50.0, 15.0, 0.0, 0.0])


def test_energy_section_refuses_unknown_keys_and_values(tiny):
    scenario = validate_scenario(tiny)
    assert (scenario.energy.radio_on, scenario.energy.idle_draw) == ("serialisation",
                                                                     "participants")
    with pytest.raises(ConfigError, match=r"energy.*radio_power"):
        validate_scenario({**tiny, "energy": {"radio_power": 1}})
    with pytest.raises(ConfigError, match=r"energy\.idle_draw.*participants"):
        validate_scenario({**tiny, "energy": {"idle_draw": "sometimes"}})


def _quickstart(*overrides: str) -> tuple:
    """The shipped quickstart, timing-only, one round: (rounds row 1, Jetson Nano rows)."""
    scenario = load_scenario(scenario_path("quickstart"),
                             ["training.timing_only=true", "training.rounds=1", *overrides])
    result = run_scenario(scenario)
    clients = result.clients
    return result.rounds.set_index("round").loc[1], clients[clients.profile == "jetson_nano"]


def test_quickstart_jetson_nano_on_lte_draws_no_more_than_its_radio_can():
    """The Jetson Nanos send activations over LTE (11.22 Mbit/s) nearly all round; their
    radio energy stays below the radio's power x the round time, also with 35 s latency
    (counting each transfer's span, latency included, gave 19.15 J in a 17.95 s round and
    2,223 J in a 52.9 s round)."""
    tx = profiles.device_profile("jetson_nano").radio_tx_power_w.value
    sending = []
    for latency in (None, 35):
        round_, nanos = _quickstart(*([f"devices.nano_lte.link_override.latency_s={latency}"]
                                      if latency else []))
        assert (nanos.bytes_down == 0).all()  # Sequential sends activations up only
        assert (nanos.uplink_s <= round_.round_time_s).all()
        assert (nanos.radio_energy_j < tx * round_.round_time_s).all(), (
            nanos.radio_energy_j.tolist(), round_.round_time_s)
        sending.append(nanos.uplink_s.tolist())
    assert round_.round_time_s > 50
    assert sending[1] == pytest.approx(sending[0])  # the latency delays the round, not the bits
