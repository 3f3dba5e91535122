"""Check the names and files a validated scenario refers to against what exists:
profiles, links, traces, the fleet file, availability, end layers and cut layers of
the model, and a recorded split schedule.

Every mistake becomes one :class:`~sflsim.errors.ConfigError` led by the field that
names it; a profile file's numbers far from real hardware are warned about.
"""

from __future__ import annotations

import functools

import sflsim.config.resolve as resolve
from sflsim.config.algorithms import algorithms_with
from sflsim.config.capability_checks import check_timing_only, idle_settings
from sflsim.config.input_warnings import bare_number_warnings, warn
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.hardware import plausible, profiles
from sflsim.hardware.profiles import profile_path
from sflsim.inputs.messages import closest_name
from sflsim.inputs.yaml_files import read_yaml_mapping
from sflsim.text import plural, valid_range


def check_names(scenario: Scenario) -> None:
    """Check profile names and end layers against what exists.

    The checks that need the model (end layers and cut layers against its stages) come
    last: counting the stages builds a tiny copy of it, which imports torch, and every
    other mistake is told without waiting for that.
    """
    _check_profile("servers", scenario.server.profile, "server.profile")
    check_timing_only(scenario)
    for message in idle_settings(scenario):
        warn(message)
    _check_participation(scenario)
    _check_traces(scenario)
    branches = getattr(scenario.algorithm, "num_branches", None)
    if branches is not None and branches > scenario.num_clients:
        raise ConfigError(f"algorithm.num_branches: {plural(branches, 'branch')} need at least as "
                          f"many clients, but the scenario has {scenario.num_clients}; valid: 1 to "
                          f"{scenario.num_clients}")
    for group_name, group in scenario.devices.items():
        for kind, name in (("devices", group.profile), ("links", group.link)):
            field = "profile" if kind == "devices" else "link"
            _check_profile(kind, name, f"devices.{group_name}.{field}")
    for ap_name, ap in scenario.network.access_points.items():
        for field, name in (("link", ap.link), ("backhaul", ap.backhaul)):
            if name is not None:
                _check_profile("links", name, f"network.access_points.{ap_name}.{field}")
    num_stages = resolve.num_stages(scenario.model)  # torch only for a user's own backbone
    _check_split(scenario, num_stages)
    _check_split_schedule(scenario, num_stages)
    # the whole model trains on the device in FedAvg and its family (end_layer unused), so
    # the last stage is a valid end layer there; elsewhere the server needs a stage
    last = num_stages if scenario.algorithm.supports("whole_model") else num_stages - 1
    if scenario.fleet is not None:
        _check_fleet(scenario, num_stages, last)
    for group_name, group in scenario.devices.items():
        if group.end_layer == num_stages and last < num_stages:
            raise ConfigError(
                f"devices.{group_name}.end_layer: {group.end_layer} is the last stage of "
                f"{scenario.model.name}, which leaves the server nothing to train; only "
                f"algorithms that train the whole model on the device (the 'whole_model' "
                f"capability: {', '.join(algorithms_with('whole_model'))}) may end there, "
                f"and {scenario.algorithm.name!r} does not; {valid_range('end layer', 1, last)}")
        if group.end_layer > last:
            raise ConfigError(
                f"devices.{group_name}.end_layer: {group.end_layer} is past the end of "
                f"model.name {scenario.model.name} ({plural(num_stages, 'stage')}); "
                f"{valid_range('end layer', 1, last)}"
            )


def _check_fleet(scenario: Scenario, num_stages: int, last: int) -> None:
    """The fleet file reads (:func:`sflsim.fleet.load_fleet`: every cell, profile and link
    name), its end layers are cuts of the model, ``server.priorities`` names its groups."""
    from sflsim.fleet import load_fleet

    fleet = load_fleet(scenario.fleet)
    for message in fleet.warnings:
        warn(message)
    default = scenario.fleet_end_layer or 1
    ends = fleet.end_layers(default)
    bad = (ends > last).nonzero()[0]
    if len(bad):
        i = int(bad[0])
        where = (f"fleet: {scenario.fleet} row {fleet.row(i)}, end_layer" if fleet.end_layer[i]
                 else "fleet_end_layer")
        raise ConfigError(f"{where}: {int(ends[i])} is past the last cut "
                          f"{scenario.algorithm.name!r} may use in model.name "
                          f"{scenario.model.name} ({plural(num_stages, 'stage')}); "
                          f"{valid_range('end layer', 1, last)}")
    for group in scenario.server.priorities:
        if group not in fleet.group_names:
            raise ConfigError(f"server.priorities: {group!r} is not a group of the fleet; "
                              f"valid: {', '.join(fleet.group_names)}")


def _check_profile(kind: str, name: str, field: str) -> None:
    """Load the profile ``name`` of ``kind`` (``devices``, ``links``, ``servers``) that
    ``field`` names, and warn about the bare numbers of its file (:func:`profile_warnings`).

    Raises:
        ConfigError: leading with ``field``: no such profile (with the name that differs
            only in case, ``RPi4`` for ``rpi4``, or another close one), or a broken file.
    """
    try:
        profiles.load_profile(kind, name)
    except ConfigError as exc:
        raise ConfigError(f"{field}: {with_name_hint(str(exc), kind, name)}") from None
    for message in profile_warnings(kind, name):
        warn(message)


def with_name_hint(message: str, kind: str, name: str) -> str:
    """The error of an unknown profile ``name`` of ``kind`` with a "Did you mean" for the
    name that differs only in case (``RPi4`` for ``rpi4``), which the profile library's
    own suggestion, case-sensitive, misses; ``message`` as it is otherwise."""
    names = profiles.available(kind)
    close = closest_name(name, names) if name not in names else None
    if close is None or "Did you mean" in message:
        return message
    case = " (profile names are case-sensitive)" if close.lower() == name.lower() else ""
    return message.replace(f"profile {name!r}.", f"profile {name!r}. Did you mean {close!r}{case}?", 1)


def profile_warnings(kind: str, name: str) -> list[str]:
    """Warnings about the numbers of a profile file far from real hardware, each led by
    ``profile <file>: ``: bare numbers whose unit was surely forgotten
    (:func:`bare_number_warnings`), and a device's or server's compute, memory, powers
    and costs more than 10x outside the shipped profiles of its kind
    (:func:`sflsim.hardware.plausible.profile_warnings`)."""
    path = profile_path(kind, name)
    if path is None:
        return []
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return []
    return list(_profile_file_warnings(str(path), kind, stamp))


@functools.cache
def _profile_file_warnings(path: str, kind: str, _stamp: int) -> tuple[str, ...]:
    try:
        data = read_yaml_mapping(path, what="profile")
    except ConfigError:  # load_profile has said what is wrong
        return ()
    model = {"devices": profiles.DeviceProfile, "links": profiles.LinkProfile,
             "servers": profiles.ServerProfile}[kind]
    where = f"profile {path}: "
    return (*bare_number_warnings(data, model, where=where),
            *plausible.profile_warnings(kind, data, model, where))


def _check_traces(scenario: Scenario) -> None:
    """Read every ``network.traces`` file as the run will (both directions), so that a
    missing or broken trace is told before torch loads; errors name the field."""
    from sflsim.network.bandwidth_trace import read_trace

    for name, path in scenario.network.traces.items():
        for direction in ("uplink", "downlink"):
            try:
                read_trace(path, direction)
            except ConfigError as exc:
                raise ConfigError(f"network.traces.{name}: {exc}") from None


def _check_participation(scenario: Scenario) -> None:
    """``training.clients_per_round`` within the fleet; ``conditions.availability`` a
    readable trace naming the scenario's groups and clients."""
    k, n = scenario.training.clients_per_round, scenario.num_clients
    if isinstance(k, int) and k > n:
        counts = "of 1" if n == 1 else f"from 1 to {n}"
        raise ConfigError(f"training.clients_per_round: {k} but the scenario has "
                          f"{plural(n, 'client')}; valid: a count {counts} or a fraction "
                          f"in (0, 1]")
    if scenario.conditions.availability is not None:
        from sflsim.availability import read_availability

        read_availability(scenario.conditions.availability, scenario.client_groups())


def _check_split(scenario: Scenario, num_stages: int) -> None:
    """Candidate cut layers (and FedSGA's reference split) must be stage boundaries."""
    alg = scenario.algorithm
    split = getattr(alg, "split", None)
    field, candidates = "algorithm.split.candidates", getattr(split, "candidates", None)
    if hasattr(alg, "reference_split"):
        field, candidates = "algorithm.candidates", alg.candidates
    valid = f"{valid_range('cut layer', 1, num_stages - 1)} (stage boundaries)"
    if candidates is not None:
        bad = [k for k in candidates if not 1 <= k < num_stages]
        if bad:
            what = (f"{bad[0]} is not a cut layer" if len(bad) == 1 else
                    f"{', '.join(map(str, bad))} are not cut layers")
            raise ConfigError(f"{field}: {what} of model.name {scenario.model.name}; {valid}")
    ref = getattr(alg, "reference_split", None)
    if ref is not None:
        cands = sorted(candidates or range(1, num_stages))
        if ref not in cands or ref == cands[0]:
            raise ConfigError(
                f"algorithm.reference_split: {ref} must be one of the candidate cut layers "
                f"{cands} and deeper than the shallowest ({cands[0]})"
            )


def _check_split_schedule(scenario: Scenario, num_stages: int) -> None:
    """FedSGA's ``split_schedule`` must cover the run's rounds and clients with candidate
    cuts (:func:`~sflsim.metrics.schedule.read_split_schedule`)."""
    alg = scenario.algorithm
    path = getattr(alg, "split_schedule", None)
    if path is None:
        return
    from sflsim.metrics.schedule import read_split_schedule

    read_split_schedule(path, rounds=scenario.training.rounds, num_clients=scenario.num_clients,
                        candidates=alg.candidates or range(1, num_stages))
