"""The run's hardware as the check reads it from the scenario and the profiles.

Worked out here from the scenario, the device, link and server profiles (the copies a
run keeps in ``profiles/``, read while they are searched first) and the bandwidth and
fleet files it names, not taken from the simulator's own objects, so that a mistake in
how the simulator builds its links or devices shows as a violation.

A device's link in each direction is a list of :class:`Hop`: on a star topology one,
its own link; behind an access point the access hop, whose capacity
(:class:`SharedCapacity`) the devices behind the access point share, capped at the
device's own rate, then each backhaul on the way to the server (shared, uncapped).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Steps:
    """A rate (bit/s) as a step function of simulated time (s): ``bps[k]`` holds from
    ``times[k]`` to ``times[k + 1]``, the first value before ``times[0]``, the last after."""

    times: tuple[float, ...]
    bps: tuple[float, ...]

    @classmethod
    def constant(cls, bps: float) -> Steps:
        return cls((0.0,), (float(bps),))

    @property
    def top(self) -> float:
        """The highest rate."""
        return max(self.bps)

    @property
    def varies(self) -> bool:
        return len(set(self.bps)) > 1

    def at(self, t: float) -> float:
        """The rate in force at ``t`` (a step at ``t`` already applies)."""
        return self.bps[max(bisect.bisect_right(self.times, t) - 1, 0)]

    def next_after(self, t: float) -> float:
        """The first step strictly after ``t``, or inf."""
        k = bisect.bisect_right(self.times, t)
        return self.times[k] if k < len(self.times) else math.inf

    def bits(self, t0: float, t1: float) -> float:
        """Bits sent alone at this rate from ``t0`` to ``t1``."""
        total, t = 0.0, t0
        while t < t1:
            nxt = min(self.next_after(t), t1)
            total += self.at(t) * (nxt - t)
            t = nxt
        return total

    def finish(self, t0: float, bits: float) -> float:
        """When ``bits`` sent alone from ``t0`` are all sent."""
        t, left = t0, float(bits)
        while True:
            rate, nxt = self.at(t), self.next_after(t)
            if left <= rate * (nxt - t):
                return t + left / rate
            left -= rate * (nxt - t)
            t = nxt


UNCAPPED = Steps.constant(math.inf)


@dataclass(frozen=True)
class SharedCapacity:
    """A link whose capacity the transfers in flight share (an access point's medium,
    a backhaul): ``name`` as the messages print it, its capacity and latency."""

    name: str
    capacity: Steps
    latency_s: float
    #: the scenario field it comes from, for messages naming the likely cause
    source: str


@dataclass(frozen=True)
class Hop:
    """One hop of a device's link, recorded under ``actor``: the sender's own rate (its
    link; behind an access point, the cap on its share), the one-way latency after the
    last bit, and the shared capacity it crosses (None: the device's own link)."""

    actor: str
    own: Steps
    latency_s: float
    shared: SharedCapacity | None
    #: the scenario field or profile the hop's figures come from
    source: str

    @property
    def top(self) -> float:
        """The highest rate one transfer can get on this hop (bit/s)."""
        top = self.own.top
        return min(top, self.shared.capacity.top) if self.shared is not None else top


@dataclass
class Device:
    """A client's device: its profile (or fleet row), powers (W), compute rate (FLOP/s;
    NaN when the run derives it from something else) and hops, per direction."""

    client_id: int
    group: str
    profile: str
    end_layer: int
    rate_flops: float
    active_w: float
    idle_w: float
    tx_w: float
    rx_w: float
    uplink: list[Hop]
    downlink: list[Hop]
    operator_costs: object | None = None
    stage_latency: list | None = None
    source: str = ""


@dataclass
class Hardware:
    """Everything of the run's hardware the check needs."""

    devices: list[Device]
    server_rate: float
    server_slots: int
    server_source: str
    cost_model: str
    #: every hop by its actor (access hops, own links and backhauls)
    hops: dict[str, Hop] = field(default_factory=dict)


def read_profiles(scenario: object) -> Hardware:
    """The run's :class:`Hardware` from ``scenario`` and the profiles found now (call it
    while the run's kept profiles are searched first)."""
    from sflsim.hardware import profiles

    server = profiles.server_profile(scenario.server.profile)
    traces = _traces(scenario)
    devices = (_fleet_devices(scenario) if getattr(scenario, "fleet", None) is not None
               else _group_devices(scenario, traces))
    cost_model = getattr(getattr(scenario, "hardware", None), "cost_model", "flops")
    hw = Hardware(devices, server.sustained_flops.value, scenario.server.slots or server.slots,
                  f"server profile {scenario.server.profile}", cost_model)
    for d in devices:
        for hop in (*d.uplink, *d.downlink):
            hw.hops[hop.actor] = hop
    return hw


def _traces(scenario: object) -> dict[tuple[str, str], Steps]:
    from sflsim.network.bandwidth_trace import read_trace

    out = {}
    for name, path in scenario.network.traces.items():
        for direction in ("uplink", "downlink"):
            t = read_trace(path, direction)
            out[name, direction] = Steps(tuple(t.times_s), tuple(t.bandwidth_bps))
    return out


def _device(cid: int, group: str, end_layer: int, profile: object, up: list[Hop],
            down: list[Hop], source: str) -> Device:
    return Device(cid, group, getattr(profile, "name", "?"), end_layer,
                  float(profile.sustained_flops.value), float(profile.active_power_w.value),
                  float(profile.idle_power_w.value), float(profile.radio_tx_power_w.value),
                  float(profile.radio_rx_power_w.value), up, down,
                  getattr(profile, "operator_costs", None),
                  getattr(profile, "stage_latency", None), source)


def _group_devices(scenario: object, traces: dict[tuple[str, str], Steps]) -> list[Device]:
    from sflsim.hardware import profiles

    net = scenario.network
    ap_of = {g: name for name, ap in net.access_points.items() for g in ap.groups} \
        if net.topology == "shared_access" else {}
    access, backhaul = _access_points(scenario, traces) if ap_of else ({}, {})
    devices: list[Device] = []
    for group_name, group in scenario.devices.items():
        profile = profiles.device_profile(group.profile)
        link = profiles.link_profile(group.link)
        over = group.link_override
        latency = over.latency_s if over.latency_s is not None else link.latency_s.value
        source = f"link {group.link} of device group {group_name}"
        for _ in range(group.count):
            cid = len(devices)
            hops = {}
            for d in ("uplink", "downlink"):
                own = traces.get((group_name, d)) or Steps.constant(
                    getattr(over, f"{d}_bps") or getattr(link, f"{d}_bps").value)
                ap = ap_of.get(group_name)
                if ap is None:
                    hops[d] = [Hop(f"client{cid}:{d}", own, float(latency), None, source)]
                    continue
                shared = access[ap, d]
                first = Hop(f"client{cid}:{d}", own, shared.latency_s, shared, shared.source)
                rest = backhaul[ap, d]
                hops[d] = [first, *rest] if d == "uplink" else [*reversed(rest), first]
            devices.append(_device(cid, group_name, group.end_layer, profile, hops["uplink"],
                                   hops["downlink"], f"device profile {group.profile}"))
    return devices


def _access_points(scenario: object, traces: dict[tuple[str, str], Steps]
                   ) -> tuple[dict[tuple[str, str], SharedCapacity],
                              dict[tuple[str, str], list[Hop]]]:
    """Each access point's shared access capacity per direction, and the backhaul hops
    from it to the server (uplink order), per direction."""
    from sflsim.hardware import profiles

    aps = scenario.network.access_points
    access, own_backhaul = {}, {}
    for name, ap in aps.items():
        link = profiles.link_profile(ap.link)
        over = ap.link_override
        latency = over.latency_s if over.latency_s is not None else link.latency_s.value
        for d, suffix in (("uplink", "up"), ("downlink", "down")):
            capacity = traces.get((name, d)) or Steps.constant(
                getattr(over, f"{d}_bps") or getattr(link, f"{d}_bps").value)
            access[name, d] = SharedCapacity(f"access point {name} ({d})", capacity,
                                             float(latency), f"access point {name}")
            if ap.backhaul is not None:
                bh = profiles.link_profile(ap.backhaul)
                actor = f"ap:{name}:backhaul_{suffix}"
                cap = SharedCapacity(f"backhaul of access point {name} ({d})",
                                     Steps.constant(getattr(bh, f"{d}_bps").value),
                                     float(bh.latency_s.value), f"backhaul {ap.backhaul} of "
                                     f"access point {name}")
                own_backhaul[name, d] = Hop(actor, UNCAPPED, cap.latency_s, cap, cap.source)
    backhaul = {}
    for name in aps:
        for d in ("uplink", "downlink"):
            chain, at, seen = [], name, set()
            while at != "server" and at in aps and at not in seen:
                seen.add(at)
                if (at, d) in own_backhaul:
                    chain.append(own_backhaul[at, d])
                at = aps[at].upstream
            backhaul[name, d] = chain
    return access, backhaul


def _fleet_devices(scenario: object) -> list[Device]:
    from sflsim.fleet import load_fleet

    fleet = load_fleet(scenario.fleet)
    f = fleet.figures
    ends = fleet.end_layers(scenario.fleet_end_layer or 1).tolist()
    devices = []
    for cid, device in enumerate(fleet.devices()):
        latency = float(f["latency_s"][cid])
        source = f"fleet {fleet.path} row {fleet.row(cid)}"
        up = [Hop(f"client{cid}:uplink", Steps.constant(f["uplink_bps"][cid]), latency, None,
                  source)]
        down = [Hop(f"client{cid}:downlink", Steps.constant(f["downlink_bps"][cid]), latency,
                    None, source)]
        devices.append(_device(cid, fleet.group_names[fleet.group[cid]], int(ends[cid]),
                               device, up, down, source))
    return devices
