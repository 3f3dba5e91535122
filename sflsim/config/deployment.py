"""The deployment a scenario simulates: its device groups and their links, the server,
the network between them (:mod:`sflsim.network.topology`), and the conditions they run
under (stragglers, dropouts, a round deadline, availability: the ``conditions`` section).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sflsim.config.schema_model import SchemaModel as _Model
from sflsim.inputs.quantities import FROZEN, BandwidthBps, PositiveTimeS, TimeS


class LinkOverride(_Model):
    """Optional per-group overrides of a link profile's numbers."""

    model_config = FROZEN
    #: Uplink rate (toward the server) instead of the profile's, e.g. ``20 Mbps``.
    uplink_bps: BandwidthBps | None = None
    #: Downlink rate (from the server) instead of the profile's.
    downlink_bps: BandwidthBps | None = None
    #: One-way latency instead of the profile's, e.g. ``30 ms``.
    latency_s: TimeS | None = None


class DeviceGroup(_Model):
    """``count`` devices of one hardware profile, all at the same end layer and link."""

    model_config = FROZEN
    #: Device profile: a shipped name (``sflsim profiles list``) or a YAML file.
    profile: str
    #: Devices in the group; 0 leaves the group out (device-mix sweeps).
    count: int = Field(ge=0, le=100_000)
    #: Cut layer: the client-side model runs stages 1..end_layer.
    end_layer: int = Field(ge=1)
    #: Link profile of each device's own link: a shipped name or a YAML file.
    link: str
    #: Numbers of the link profile replaced for this group.
    link_override: LinkOverride = LinkOverride()


class ServerConfig(_Model):
    """The server accelerator: profile, concurrent slots and queue discipline.

    ``queue: priority`` serves the waiting job of the lowest priority number first
    (ties in order of arrival; running jobs are not pre-empted). A client's
    priority is its device group's entry in ``priorities``, else the group's
    position in ``devices`` (0 for the first group listed).
    """

    model_config = FROZEN
    #: Server profile: a shipped name (``sflsim profiles list``) or a YAML file.
    profile: str = "a100"
    #: Concurrent jobs on the accelerator; default: the profile's ``slots``.
    slots: int | None = Field(None, ge=1)
    #: Queue discipline of jobs waiting for a slot.
    queue: Literal["fifo", "priority"] = "fifo"
    #: Priority per device group for ``queue: priority`` (lower is served first); under
    #: ``fifo`` they have no effect, and a warning says so.
    priorities: dict[str, int] = {}


class HardwareConfig(_Model):
    """How simulated hardware turns work into seconds.

    ``cost_model: flops`` (the default, the reading every earlier run was made under):
    a device step takes its FLOPs over the profile's ``sustained_flops``.
    ``cost_model: operators``: the cost model by operation
    (:mod:`sflsim.hardware.operator_cost`): each operator at the lower of its class's
    FLOP rate and the memory bandwidth, a fixed cost per operator, the optimizer update
    and a fixed cost per batch, for devices whose profile has ``operator_costs``; the
    others, and the server, keep the FLOPs rule. Measured ``stage_latency`` tables win
    under both.
    """

    model_config = FROZEN
    #: How a device's training step becomes seconds: ``flops`` (FLOPs / the profile's
    #: sustained_flops; the default) or ``operators`` (the cost model by operation, for
    #: devices whose profile has operator_costs; the others keep the FLOPs rule).
    cost_model: Literal["flops", "operators"] = "flops"


class AccessPointConfig(_Model):
    """An access point or gateway whose capacity the devices behind it share."""

    model_config = FROZEN
    #: Link profile of the shared medium (capacity each way and latency of the access hop).
    link: str
    link_override: LinkOverride = LinkOverride()
    #: Device groups whose devices sit behind this access point.
    groups: list[str] = Field(min_length=1)
    #: Link profile from the access point to ``upstream``; None: no link (no cost).
    backhaul: str | None = None
    #: ``server`` or the name of another access point.
    upstream: str = "server"


class NetworkConfig(_Model):
    """How devices reach the server (see :mod:`sflsim.network.topology`).

    ``star`` (default): one link per device straight to the server. ``shared_access``:
    the groups under an access point share its capacity, then cross its backhaul.
    ``traces`` maps a device group or access point to a CSV trace of bandwidth over
    time (``time_s,bandwidth_bps``; path absolute, or relative to the scenario file or the working directory
    or else to the shipped scenarios: :func:`sflsim.shipped.trace_path`).
    """

    model_config = FROZEN
    #: ``star`` (each device's own link to the server) or ``shared_access`` (the groups
    #: under an access point share its capacity).
    topology: Literal["star", "shared_access"] = "star"
    #: Access points of ``shared_access`` by name.
    access_points: dict[str, AccessPointConfig] = {}
    #: ``{device group or access point: CSV trace of bandwidth over time}``.
    traces: dict[str, str] = {}

    @model_validator(mode="after")
    def _consistent(self) -> NetworkConfig:
        if self.topology == "shared_access" and not self.access_points:
            raise ValueError("topology: shared_access needs at least one entry in access_points")
        if self.topology == "star" and self.access_points:
            raise ValueError("access_points apply only to topology: shared_access")
        seen: dict[str, str] = {}
        for name, ap in self.access_points.items():
            if name == "server":
                raise ValueError("access_points: 'server' is reserved; name the access point "
                                 "something else")
            if ap.upstream != "server" and ap.upstream not in self.access_points:
                raise ValueError(f"access_points.{name}.upstream: {ap.upstream!r} is neither "
                                 f"server nor an access point; valid: server, "
                                 f"{', '.join(self.access_points)}")
            for g in ap.groups:
                if g in seen:
                    raise ValueError(f"access_points.{name}.groups: {g!r} is already behind "
                                     f"access point {seen[g]!r}; a group sits behind one only")
                seen[g] = name
        return self


class ConditionsConfig(_Model):
    """Stragglers, dropouts and a round deadline; the defaults change nothing.

    Each round, for every client in id order, a generator seeded from the training
    stream (:class:`SeedsConfig`) draws whether it drops (probability
    ``client_drop_prob``) and its compute slowdown ``exp(N(0, straggler_sigma^2))``
    (lognormal, median 1): the client's compute takes that many times longer this round.
    """

    #: sigma of the lognormal per-client per-round compute slowdown factor (0: none).
    #: At most 3: slowdowns of e^(3 sigma) = 8,000x are already three sigmas out.
    straggler_sigma: float = Field(0.0, ge=0, le=3)
    #: probability that a client sits a round out (does nothing, is not aggregated).
    client_drop_prob: float = Field(0.0, ge=0, le=1)
    #: seconds after the round's start when unfinished work is discarded (None or
    #: omitted: no deadline). It bounds the round's duration (Nishio and Yonetani,
    #: "Client Selection for Federated Learning with Heterogeneous Resources in Mobile
    #: Edge", IEEE ICC 2019, arXiv:1804.08333): it counts from the round's start, the
    #: instant the round before ended, so a wait for a client to come online
    #: (``availability``) is part of it and nothing of the round ends after the start
    #: plus the deadline (``round_time_s`` <= the deadline); when no client comes
    #: online before it, the round ends there with no client taking part. Inclusive:
    #: work that ends exactly at the deadline counts, work that would end after it is
    #: cut off, the rule of every cut-off (:func:`sflsim.engine.cut_off_at`).
    round_deadline_s: PositiveTimeS | None = None
    #: CSV trace of the intervals in which devices are online
    #: (``device,online_from_s,online_until_s``; :mod:`sflsim.availability`); path
    #: absolute or relative to the scenario file or the working directory. None: always online.
    availability: str | None = None
