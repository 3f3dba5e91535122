"""Tests for the shipped hardware profiles in ``device_profiles/``.

Every YAML file must load through :func:`sflsim.hardware.profiles.load_profile`, every number
must say where it comes from, and a few anchor values that other parts of sflsim and the
README rely on are pinned here.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from sflsim.errors import ConfigError
from sflsim.hardware.profiles import (
    KINDS,
    REPO_PROFILES,
    DeviceProfile,
    LinkProfile,
    ServerProfile,
    _Sourced,
    available,
    load_profile,
)

EXPECTED = {
    "devices": {"rpi4", "jetson_nano", "jetson_orin_nano", "phone_midrange"},
    "links": {"wifi", "lte", "5g", "ethernet"},
    "servers": {"a100"},
}
MODEL_OF = {"devices": DeviceProfile, "links": LinkProfile, "servers": ServerProfile}

ALL_PROFILES = [(kind, name) for kind in KINDS for name in available(kind)]


def _sourced_fields(profile: BaseModel) -> dict[str, _Sourced]:
    return {k: v for k, v in vars(profile).items() if isinstance(v, _Sourced)}


@pytest.mark.parametrize("kind", KINDS)
def test_repo_ships_expected_profiles(kind: str) -> None:
    shipped = {p.stem for p in (REPO_PROFILES / kind).glob("*.yaml")}
    assert EXPECTED[kind] <= shipped


@pytest.mark.parametrize(("kind", "name"), ALL_PROFILES)
def test_profile_loads(kind: str, name: str) -> None:
    profile = load_profile(kind, name)
    assert isinstance(profile, MODEL_OF[kind])
    assert profile.name == name
    assert profile.description.strip()


@pytest.mark.parametrize(("kind", "name"), ALL_PROFILES)
def test_every_number_has_a_source(kind: str, name: str) -> None:
    fields = _sourced_fields(load_profile(kind, name))
    assert fields, f"{kind}/{name} has no sourced fields"
    for field, sourced in fields.items():
        assert sourced.source.strip(), f"{kind}/{name}.{field}: empty source"
        if sourced.basis == "derived":
            assert sourced.note and sourced.note.strip(), (
                f"{kind}/{name}.{field}: a derived value must show its arithmetic in note"
            )


def test_rpi4_sustained_flops_matches_measured_training_rate() -> None:
    rpi4 = load_profile("devices", "rpi4")
    assert 12e9 <= rpi4.sustained_flops.value <= 20e9
    assert rpi4.sustained_flops.basis == "derived"


def test_5g_uplink_is_ookla_median() -> None:
    link = load_profile("links", "5g")
    assert link.uplink_bps.value == pytest.approx(21e6, rel=0.01)  # Ookla Q3 2021: 21.08 Mbps
    assert link.uplink_bps.basis == "measured"


def test_server_slots_is_a_positive_int() -> None:
    a100 = load_profile("servers", "a100")
    assert isinstance(a100.slots, int) and a100.slots >= 1


@pytest.mark.parametrize("typo", ["rpi_4", "rpi5"])
def test_unknown_name_suggests_close_match(typo: str) -> None:
    with pytest.raises(ConfigError, match="Did you mean 'rpi4'"):
        load_profile("devices", typo)


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="Valid: .*rpi4"):
        load_profile("devices", "commodore64")
