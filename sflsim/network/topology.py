"""The network topology: which links a client's transfers cross (networkx graph).

Nodes are ``server``, one per access point (``ap:<name>``) and ``client<i>`` for each
client behind an access point; each edge carries an uplink and a downlink object
(toward / away from the server). A star client's pair of links leads straight to the
server and is not a path to search, so it is not in the graph (a fleet of 100,000
devices is built without 100,000 edges). Two topologies (``network.topology`` in the
scenario):

- ``star`` (default): each client has its own :class:`~sflsim.engine.Link` per
  direction straight to the server, from its device group's link profile and
  ``link_override``: exactly the links sflsim always had, so results are unchanged.
- ``shared_access``: the clients of the groups listed under an access point
  reach it over a :class:`~sflsim.network.shared.SharedLink` whose capacity (the
  access point's link profile and override) is divided max-min fairly among
  the transfers in flight, each capped at its device's own link rate (its
  group's link profile and override, or its trace); a device sends (and receives) one
  payload at a time, first come first served, as on its star link, so its radio is
  never busy with two transfers at once; the access hop's latency is
  the access point's. From the access point a ``backhaul`` link (a SharedLink
  with the backhaul profile's rates, uncapped) leads to ``upstream`` (the server
  or another access point); without ``backhaul`` the access point sits at its
  upstream node at no cost. Groups under no access point keep star links.

A transfer crosses the links of its path (networkx shortest path) one after
another, store-and-forward per payload: the next hop starts when the whole
payload has arrived over the previous one. The access hop is recorded under the
client's ``client<i>:uplink`` / ``client<i>:downlink`` actor (it is the device's
radio time, which its energy counts); backhaul hops under ``ap:<name>:backhaul_up``
/ ``ap:<name>:backhaul_down``, which per-client tables do not count.

Traces (``network.traces``): a CSV of step-wise bandwidth over time (see
:mod:`sflsim.network.bandwidth_trace`) for a device group (its devices' link rate) or an
access point (its shared capacity). A relative path is looked for in the working
directory, then among the shipped scenarios (:func:`sflsim.shipped.trace_path`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx
import simpy

from sflsim.engine.link import Link
from sflsim.engine.simulation import Process, Simulation
from sflsim.errors import ConfigError
from sflsim.hardware import profiles
from sflsim.network.bandwidth_trace import BandwidthTrace, read_trace
from sflsim.network.shared import SharedLink

SERVER = "server"


@dataclass(frozen=True)
class LinkSpec:
    """A link as a scenario gives it: a link profile's name and the figures given over
    it (a device group's or access point's ``link`` and ``link_override``).

    Attributes:
        profile: the link profile (:func:`sflsim.hardware.profiles.link_profile`).
        uplink_bps, downlink_bps: bit/s instead of the profile's; None: the profile's.
        latency_s: one-way latency (s) instead of the profile's; None: the profile's.
    """

    profile: str
    uplink_bps: float | None = None
    downlink_bps: float | None = None
    latency_s: float | None = None


@dataclass(frozen=True)
class AccessPointSpec:
    """An access point of ``shared_access``: the link its devices share, the device
    groups behind it, its backhaul link profile (None: no cost) and ``upstream`` (the
    server or another access point's name)."""

    link: LinkSpec
    groups: tuple[str, ...]
    backhaul: str | None = None
    upstream: str = SERVER


@dataclass(frozen=True)
class Hop:
    """One link on a path: the link object, the sender's rate cap, the actor recorded."""

    link: Link | SharedLink
    max_bps: BandwidthTrace | None = None
    actor: str | None = None
    #: the sender's radio on a shared access hop: its transfers go one at a time
    radio: simpy.Resource | None = None

    @property
    def bandwidth_bps(self) -> float:
        cap = self.max_bps.mean_bps() if self.max_bps is not None else float("inf")
        return min(self.link.bandwidth_bps, cap)

    def transfer(self, activity: str, client_id: int, payload_bytes: int) -> Process:
        if isinstance(self.link, SharedLink):
            yield from self.link.transfer(activity, client_id, payload_bytes,
                                          max_bps=self.max_bps, actor=self.actor,
                                          radio=self.radio)
        else:
            yield from self.link.transfer(activity, client_id, payload_bytes, actor=self.actor)


class Path:
    """A client's route in one direction: the hops crossed in order (store-and-forward).

    Has the :meth:`transfer` generator and the ``bandwidth_bps`` (bottleneck) and
    ``latency_s`` (sum) attributes of a :class:`~sflsim.engine.Link`, so
    algorithms and estimates use it unchanged.
    """

    def __init__(self, hops: list[Hop]):
        if not hops:
            raise ValueError("a path needs at least one hop")
        self.hops = hops
        self.bandwidth_bps = min(h.bandwidth_bps for h in hops)
        self.latency_s = sum(h.link.latency_s for h in hops)

    def transfer(self, activity: str, client_id: int, payload_bytes: int) -> Process:
        for hop in self.hops:
            yield from hop.transfer(activity, client_id, payload_bytes)


def _link_profile(name: str, where: str) -> profiles.LinkProfile:
    try:
        return profiles.link_profile(name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _figures(spec: LinkSpec, where: str) -> tuple[float, dict[str, float]]:
    """A link's (one-way latency (s), ``{direction: bit/s}``): the figures ``spec`` gives,
    else its profile's."""
    link = _link_profile(spec.profile, where)
    latency = spec.latency_s if spec.latency_s is not None else link.latency_s.value
    return latency, {d: getattr(spec, f"{d}_bps") or getattr(link, f"{d}_bps").value
                     for d in ("uplink", "downlink")}


class Network:
    """The scenario's topology and the link objects on it, built once per run.

    Args:
        sim: the simulation the links run in.
        groups: each device group's link.
        access_points: the access points (``shared_access``); empty: every group is
            on a star link.
        traces: ``{device group or access point: bandwidth trace file}``.

    Raises:
        ConfigError: unreadable or invalid trace (names file, row, field); a device
            group with no path to the server (names the group and access point).
    """

    def __init__(self, sim: Simulation, groups: Mapping[str, LinkSpec],
                 access_points: Mapping[str, AccessPointSpec] | None = None,
                 traces: Mapping[str, str] | None = None):
        self.sim, self.groups = sim, dict(groups)
        access_points = dict(access_points or {})
        self.graph = nx.Graph()
        self.graph.add_node(SERVER)
        self._traces: dict[tuple[str, str], BandwidthTrace] = {}
        for name, path in (traces or {}).items():
            for direction in ("uplink", "downlink"):
                try:
                    self._traces[name, direction] = read_trace(path, direction)
                except ConfigError as exc:
                    raise ConfigError(f"network.traces.{name}: {exc}") from None
        self.ap_of_group: dict[str, str] = {}
        self._group_links: dict[str, tuple[float, dict[str, float], dict[str, object]]] = {}
        if access_points:
            for ap_name, ap in access_points.items():
                node = f"ap:{ap_name}"
                latency, rate = _figures(ap.link, f"network.access_points.{ap_name}.link")
                access = {d: SharedLink(sim, f"{node}:{d}", rate[d], latency,
                                        self._traces.get((ap_name, d)))
                          for d in ("uplink", "downlink")}
                self.graph.add_node(node, access=access)
                for g in ap.groups:
                    self.ap_of_group[g] = ap_name
            for ap_name, ap in access_points.items():
                node, up_node = f"ap:{ap_name}", (SERVER if ap.upstream == SERVER
                                                  else f"ap:{ap.upstream}")
                hops: dict[str, Hop | None] = {"uplink": None, "downlink": None}
                if ap.backhaul is not None:
                    bh = _link_profile(ap.backhaul, f"network.access_points.{ap_name}.backhaul")
                    for d, suffix in (("uplink", "up"), ("downlink", "down")):
                        hops[d] = Hop(SharedLink(sim, f"{node}:backhaul_{suffix}",
                                                 getattr(bh, f"{d}_bps").value,
                                                 bh.latency_s.value))
                self.graph.add_edge(node, up_node, up=hops["uplink"], down=hops["downlink"])

    def star_links(self, client_id: int, uplink_bps: float, downlink_bps: float,
                   latency_s: float) -> tuple[Link, Link]:
        """A fleet row's (uplink, downlink) straight to the server (star), from its own
        rates (bit/s) and one-way latency (s) (:mod:`sflsim.fleet`)."""
        node = f"client{client_id}"
        return (Link(self.sim, f"{node}:uplink", uplink_bps, latency_s, None),
                Link(self.sim, f"{node}:downlink", downlink_bps, latency_s, None))

    def group_link(self, group_name: str) -> tuple[float, dict[str, float], dict[str, object]]:
        """A device group's link figures: (one-way latency (s), ``{direction: bit/s}``,
        ``{direction: bandwidth trace or None}``), from its link profile and overrides
        (worked out once per group)."""
        figures = self._group_links.get(group_name)
        if figures is None:
            latency, rate = _figures(self.groups[group_name], f"devices.{group_name}.link")
            trace = {d: self._traces.get((group_name, d)) for d in ("uplink", "downlink")}
            figures = self._group_links[group_name] = (latency, rate, trace)
        return figures

    def links_for(self, client_id: int, group_name: str) -> tuple[Link | Path, Link | Path]:
        """The client's (uplink, downlink): plain Links for star, else Paths. A star
        client's links go straight to the server and are not added to :attr:`graph`,
        which holds the access points' tree (and each client on it)."""
        latency, rate, trace = self.group_link(group_name)
        node = f"client{client_id}"
        ap_name = self.ap_of_group.get(group_name)
        if ap_name is None:  # star: today's per-client links
            return (Link(self.sim, f"{node}:uplink", rate["uplink"], latency, trace["uplink"]),
                    Link(self.sim, f"{node}:downlink", rate["downlink"], latency,
                         trace["downlink"]))
        ap_node = f"ap:{ap_name}"
        access = self.graph.nodes[ap_node]["access"]
        caps = {d: trace[d] or BandwidthTrace.constant(rate[d]) for d in ("uplink", "downlink")}
        self.graph.add_edge(  # the device's radio sends one payload at a time, as on star
            node, ap_node,
            up=Hop(access["uplink"], caps["uplink"], f"{node}:uplink",
                   simpy.Resource(self.sim.env, 1)),
            down=Hop(access["downlink"], caps["downlink"], f"{node}:downlink",
                     simpy.Resource(self.sim.env, 1)))
        try:
            nodes = nx.shortest_path(self.graph, node, SERVER)
        except nx.NetworkXNoPath:
            reach = sorted(nx.node_connected_component(self.graph, node) - {node})
            raise ConfigError(
                f"network.access_points.{ap_name}: device group {group_name} (client "
                f"{client_id}) has no path to the server; it reaches only {', '.join(reach)}. "
                f"Give an access point on the way upstream: server") from None
        edges = [self.graph.edges[a, b] for a, b in zip(nodes, nodes[1:])]
        up_hops = [e["up"] for e in edges if e["up"] is not None]
        down_hops = [e["down"] for e in reversed(edges) if e["down"] is not None]
        return Path(up_hops), Path(down_hops)
