"""Tests for the shipped hardware profiles in ``device_profiles/``.

Every YAML file must load through :func:`sflsim.hardware.profiles.load_profile`, every number
must say where it comes from, and a few anchor values that other parts of sflsim and the
README rely on are pinned here.
"""

from __future__ import annotations

import math
import os

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.errors import ConfigError
from sflsim.hardware.profiles import (
    KINDS,
    SHIPPED_PROFILES,
    DeviceProfile,
    LinkProfile,
    ServerProfile,
    _Sourced,
    available,
    load_profile,
)
from sflsim.units import parse_quantity
from tests.conftest import sourced

EXPECTED = {
    "devices": {"rpi3bplus", "rpi4", "rpi5", "jetson_nano", "jetson_xavier_nx", "jetson_orin_nano",
                "jetson_agx_orin", "phone_midrange", "phone_flagship", "laptop_cpu"},
    "links": {"ethernet", "wifi", "wifi6", "lte", "5g", "nbiot"},
    "servers": {"a100", "h100", "cpu_server"},
}
MODEL_OF = {"devices": DeviceProfile, "links": LinkProfile, "servers": ServerProfile}

ALL_PROFILES = [(kind, name) for kind in KINDS for name in available(kind)]


def _sourced_fields(profile: BaseModel) -> dict[str, _Sourced]:
    return {k: v for k, v in vars(profile).items() if isinstance(v, _Sourced)}


@pytest.mark.parametrize("kind", KINDS)
def test_repo_ships_expected_profiles(kind: str) -> None:
    shipped = {p.stem for p in (SHIPPED_PROFILES / kind).glob("*.yaml")}
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
    for field, value in fields.items():
        assert value.source.strip(), f"{kind}/{name}.{field}: empty source"
        if value.basis == "derived":
            assert value.note and value.note.strip(), (
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


@pytest.mark.parametrize("typo", ["rpi_4", "rpi44"])
def test_unknown_name_suggests_close_match(typo: str) -> None:
    with pytest.raises(ConfigError, match="Did you mean 'rpi4'"):
        load_profile("devices", typo)


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="Valid: .*rpi4"):
        load_profile("devices", "commodore64")


@pytest.mark.parametrize(("kind", "name"), ALL_PROFILES)
def test_every_assumption_says_why(kind: str, name: str) -> None:
    for field, value in _sourced_fields(load_profile(kind, name)).items():
        if "assumed" in value.source.lower() and value.basis == "nominal":
            assert value.note and value.note.strip(), f"{kind}/{name}.{field}: say why in note"


@pytest.mark.parametrize(("kind", "name"), ALL_PROFILES)
def test_every_number_is_finite_and_positive(kind: str, name: str) -> None:
    for field, value in _sourced_fields(load_profile(kind, name)).items():
        assert math.isfinite(value.value) and value.value > 0, f"{kind}/{name}.{field}"


# ------------------------------------------------------------------------ units

@pytest.mark.parametrize(("text", "dimension", "si"), [
    ("2.5 Gbps", "bandwidth", 2.5e9),
    ("40 ms", "time", 0.04),
    ("4 GiB", "bytes", 4 * 2**30),
    ("25 kbps", "bandwidth", 25e3),
    ("837 ms", "time", 0.837),
    ("2.1 TFLOPS", "flops", 2.1e12),
    ("500 mW", "power", 0.5),
])
def test_unit_parsing(text: str, dimension: str, si: float) -> None:
    assert parse_quantity(text, dimension) == pytest.approx(si, rel=1e-12)


# ------------------------------------------------------------- bad profile files

def _link(**values: str) -> str:
    fields = {"uplink_bps": "10 Mbps", "downlink_bps": "10 Mbps", "latency_s": "20 ms", **values}
    return yaml.safe_dump({"description": "test link", **{k: sourced(v) for k, v in fields.items()}})


def _device(**values: str) -> str:
    fields = {"sustained_flops": "10 GFLOPS", "memory_bytes": "4 GiB", "active_power_w": "5 W",
              "idle_power_w": "1 W", "radio_tx_power_w": "1 W", "radio_rx_power_w": "0.5 W",
              **values}
    return yaml.safe_dump({"description": "test device",
                           **{k: sourced(v) for k, v in fields.items()}})


BAD_VALUES = {
    "nan string": ("nan {unit}", ("is out of range; valid: ",)),
    "inf string": ("inf", ("inf is out of range; valid: ",)),
    "overflow": ("1e999 {unit}", ("is out of range; valid: ",)),
    "zero": ("0 {unit}", ("is out of range; valid: greater than 0",
                          "is out of range; valid: at least 1 bit/s")),
    "negative": ("-5 {unit}", ("is out of range; valid: greater than 0",
                               "is out of range; valid: at least 0", "valid: at least 1 bit/s")),
}
BAD_FIELDS = [("links", "uplink_bps", "Mbps"), ("links", "latency_s", "ms"),
              ("devices", "sustained_flops", "GFLOPS"), ("devices", "active_power_w", "W"),
              ("devices", "radio_tx_power_w", "W")]


@pytest.mark.parametrize(("kind", "field", "unit"), BAD_FIELDS)
@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_bad_number_names_file_and_field(profile_dir, kind, field, unit, case) -> None:
    template, expected = BAD_VALUES[case]
    writer = _link if kind == "links" else _device
    profile_dir(kind, "broken", writer(**{field: template.format(unit=unit)}))
    with pytest.raises(ConfigError) as info:
        load_profile(kind, "broken")
    msg = str(info.value)
    assert f"{kind}/broken.yaml" in msg and f"{field}.value" in msg, msg
    assert any(e in msg for e in expected), msg
    assert "\n" not in msg, msg


@pytest.mark.parametrize("raw", [".nan", ".inf", "-.inf"])
def test_yaml_nan_and_inf_are_refused(profile_dir, raw: str) -> None:
    text = _link().replace("value: 10 Mbps", f"value: {raw}", 1)
    assert raw in text
    profile_dir("links", "broken", text)
    pattern = (r"links/broken\.yaml: (down|up)link_bps\.value: -?(nan|inf) is out of range; "
               r"valid: a finite number, at least 1 bit/s")
    with pytest.raises(ConfigError, match=pattern):
        load_profile("links", "broken")


# ------------------------------------------------------------------------- CLI

runner = CliRunner()


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"sflsim {' '.join(args)} raised {result.exception!r}")
    return result.exit_code, result.output


def test_profiles_list_shows_every_profile() -> None:
    code, out = _cli("profiles", "list")
    assert code == 0, out
    for kind in KINDS:
        assert kind in out
        for name in EXPECTED[kind]:
            assert name in out
    assert "15.6 d" in out and "6.4 m" in out  # rpi4: derived FLOP/s, measured power
    assert "GFLOP/s" in out and "Mbit/s" in out and "GiB" in out


def test_profiles_list_one_kind() -> None:
    code, out = _cli("profiles", "list", "--kind", "links")
    assert code == 0, out
    assert "nbiot" in out and "rpi4" not in out


def test_profiles_show_prints_values_bases_and_sources() -> None:
    code, out = _cli("profiles", "show", "rpi4")
    assert code == 0, out
    for part in ("rpi4", "15.6 GFLOP/s", "4 GiB", "6.4 W", "measured", "derived", "nominal",
                 "Flower Labs", "radio_rx_power_w", "note:"):
        assert part in out, part


def test_profiles_show_link_and_server() -> None:
    code, out = _cli("profiles", "show", "nbiot")
    assert code == 0 and "0.025 Mbit/s" in out and "837 ms" in out, out
    code, out = _cli("profiles", "show", "h100", "--kind", "servers")
    assert code == 0 and "slots" in out and "25,000 GFLOP/s" in out, out


def test_profiles_show_unknown_name_suggests() -> None:
    code, out = _cli("profiles", "show", "rpi44")
    assert code == USER_ERROR, out
    assert "Did you mean 'rpi4'" in out and "Traceback" not in out


def test_profiles_show_ambiguous_name_asks_for_kind(profile_dir) -> None:
    profile_dir("devices", "wifi", _device())
    code, out = _cli("profiles", "show", "wifi")
    assert code == USER_ERROR and "--kind" in out and "devices and links" in out, out
    code, out = _cli("profiles", "show", "wifi", "--kind", "links")
    assert code == 0 and "100 Mbit/s" in out, out


def test_profiles_show_bad_file_is_one_error(profile_dir) -> None:
    profile_dir("links", "broken", _link(latency_s="nan ms"))
    code, out = _cli("profiles", "show", "broken")
    assert code == USER_ERROR and "broken.yaml" in out and "latency_s.value" in out, out


# -------------------------------------------------------- LPWAN: no split learning

def test_split_learning_cannot_run_over_nbiot() -> None:
    """One batch of cut-layer activations up and their gradients down takes many minutes on
    NB-IoT (a fraction of a second on Wi-Fi), so one local epoch takes days."""
    import torch

    from sflsim.models import MODELS
    from sflsim.models.cost import count_flops

    torch.set_num_threads(1)
    backbone = MODELS["hetero_splitee_resnet"](in_channels=3, image_size=32, num_classes=10,
                                               width=0.25)
    cut = count_flops(backbone.client_model(3), backbone.input_shape)
    batch = 16
    payload_bytes = cut.output_numel * batch * 4  # fp32 activations; gradients are the same size

    def step_s(link: LinkProfile) -> float:
        return (2 * link.latency_s.value + 8 * payload_bytes / link.uplink_bps.value
                + 8 * payload_bytes / link.downlink_bps.value)

    nbiot, wifi = load_profile("links", "nbiot"), load_profile("links", "wifi")
    assert payload_bytes == 16 * 32 * 32 * 16 * 4  # 1 MiB: 16 channels x 32 x 32 per image
    assert step_s(wifi) < 1.0
    assert step_s(nbiot) > 10 * 60  # > 10 minutes for ONE batch of 16 images
    epoch_s = step_s(nbiot) * (50_000 / 10) / batch  # CIFAR-10 shared by 10 clients
    assert epoch_s > 24 * 3600  # one local epoch: more than a day (about 2.7 days)


def test_a_profile_path_folder_that_holds_no_profiles_is_warned_about_once(
        tmp_path, monkeypatch, capsys) -> None:
    """A missing folder (a typo in SFLSIM_PROFILE_PATH) would otherwise be searched
    silently: its profiles are then "unknown" with nothing saying why."""
    from sflsim.hardware import profiles

    missing, a_file, no_kinds = tmp_path / "nonexistent", tmp_path / "afile", tmp_path / "empty"
    a_file.write_text("x")
    no_kinds.mkdir()
    monkeypatch.setattr(profiles, "_WARNED", set())
    monkeypatch.setenv("SFLSIM_PROFILE_PATH", os.pathsep.join(map(str, (missing, a_file, no_kinds))))
    load_profile.cache_clear()
    try:
        assert "rpi4" in available("devices")  # the shipped library is still searched
        available("links")
        err = capsys.readouterr().err
        assert err.count("warning:") == 3, err  # once each, not once per look-up
        assert f"warning: SFLSIM_PROFILE_PATH names {missing}, which does not exist" in err
        assert f"SFLSIM_PROFILE_PATH names {a_file}, which is a file, not a folder" in err
        assert f"SFLSIM_PROFILE_PATH names {no_kinds}, which holds none of devices/" in err
        result = CliRunner().invoke(app, ["validate", "quickstart"],
                                    env={"SFLSIM_PROFILE_PATH": str(tmp_path / "other")})
        assert result.exit_code == 0, result.output
        assert f"SFLSIM_PROFILE_PATH names {tmp_path / 'other'}, which does not exist" in result.output
    finally:
        load_profile.cache_clear()


def test_profile_path_folders_with_profiles_are_not_warned_about(profile_dir, capsys) -> None:
    available("devices")
    assert "warning" not in capsys.readouterr().err
