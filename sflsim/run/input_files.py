"""The files a run of a scenario reads besides the scenario file and its dataset: the
profiles, traces, availability, fleet and split schedule it names (what
:mod:`sflsim.provenance` hashes and copies into the run folder, and what a sweep's
points are checked against)."""

from __future__ import annotations

from pathlib import Path

from sflsim.config.scenario import Scenario
from sflsim.metrics.results import PROFILES_FOLDER, clients_table_path


def scenario_profiles(scenario: Scenario) -> list[tuple[str, str, str]]:
    """``(field, kind, name)`` of every profile ``scenario`` names: its device groups'
    profiles and links, the server, the access points' links and backhauls, and the
    profiles a fleet file's rows name (field ``fleet``)."""
    profiles = [(f"devices.{g}.profile", "devices", group.profile)
                for g, group in scenario.devices.items()]
    profiles += [(f"devices.{g}.link", "links", group.link) for g, group in scenario.devices.items()]
    profiles += [("server.profile", "servers", scenario.server.profile)]
    for ap_name, ap in scenario.network.access_points.items():
        profiles.append((f"network.access_points.{ap_name}.link", "links", ap.link))
        if ap.backhaul:
            profiles.append((f"network.access_points.{ap_name}.backhaul", "links", ap.backhaul))
    if scenario.fleet is not None:
        from sflsim.fleet import load_fleet

        # a row with figures of its own may leave profile empty (None, or NaN from pandas)
        names = {n for n in load_fleet(scenario.fleet).profile.tolist() if isinstance(n, str)}
        profiles += [(f"fleet (profile {n})", "devices", n) for n in sorted(names)]
    return profiles


def write_profiles(out: Path, scenario: Scenario) -> None:
    """Copy every profile file ``scenario`` names (:func:`scenario_profiles`) into
    ``out/profiles/<kind>/<name>.yaml``, byte for byte: the run folder keeps the hardware
    it ran on, whatever later happens to the profile library."""
    import shutil

    from sflsim.hardware.profiles import profile_path

    for _field, kind, name in scenario_profiles(scenario):
        source = profile_path(kind, name)
        if source is None:
            continue
        target = out / PROFILES_FOLDER / kind / f"{name}.yaml"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def scenario_inputs(scenario: Scenario) -> dict[str, Path]:
    """The files a run of ``scenario`` reads, besides its scenario file and dataset, by
    the field that names them: ``network.traces.<name>``, ``conditions.availability``, ``fleet``,
    ``algorithm.split_schedule`` (the clients table it reads) and the profile files of
    the devices, links and server (``devices.<group>.profile``, ...), where they exist."""
    from sflsim.hardware.profiles import profile_path
    from sflsim.shipped import trace_path

    found: dict[str, Path] = {}
    for name, trace in scenario.network.traces.items():
        found[f"network.traces.{name}"] = trace_path(trace)
    if scenario.conditions.availability:
        found["conditions.availability"] = trace_path(scenario.conditions.availability)
    if scenario.fleet is not None:
        found["fleet"] = trace_path(scenario.fleet)
    schedule = getattr(scenario.algorithm, "split_schedule", None)
    if schedule:
        try:
            found["algorithm.split_schedule"] = clients_table_path(schedule)
        except (OSError, ValueError):  # none there: the run says so itself
            pass
    for field, kind, name in scenario_profiles(scenario):
        path = profile_path(kind, name)
        if path is not None:
            found[field] = path
    return found
