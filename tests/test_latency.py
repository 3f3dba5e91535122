"""Per-stage latency tables in device profiles: schema, interpolation, wiring, profile-host.

No assertion here depends on real timings: tables are hand-made and durations are
checked by hand arithmetic.
"""

from __future__ import annotations

import math

import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.hardware import profiles
from sflsim.hardware.latency import stage_time_s
from sflsim.hardware.profiles import DeviceProfile, load_profile
from sflsim.runner import run_scenario
from tests.conftest import sourced

MODEL, WIDTH, INPUT = "hetero_splitee_resnet", 0.0625, [1, 28, 28]


def _table(batch: int, forward: list[float], backward: list[float], **extra) -> dict:
    return {"model": MODEL, "width": WIDTH, "input": INPUT, "batch_size": batch,
            "forward_s": forward, "backward_s": backward, "basis": "measured",
            "source": "test", **extra}


# Stage k (1-based) takes k * (0.5 + n / 16) s forward and 2k * (0.5 + n / 16) s backward
# for a batch of n: exact at n = 8 and n = 16, linear in between and beyond.
HAND = [_table(8, [1.0 * k for k in range(1, 7)], [2.0 * k for k in range(1, 7)]),
        _table(16, [1.5 * k for k in range(1, 7)], [3.0 * k for k in range(1, 7)])]


def _fields(flops: str = "1 GFLOPS", stage_latency: list | None = None) -> dict:
    fields = {"description": "test device", "sustained_flops": sourced(flops),
              "memory_bytes": sourced("4 GiB"), "active_power_w": sourced("5 W"),
              "idle_power_w": sourced("1 W"), "radio_tx_power_w": sourced("1 W"),
              "radio_rx_power_w": sourced("1 W")}
    if stage_latency is not None:
        fields["stage_latency"] = stage_latency
    return fields


def _profile(stage_latency: list | None) -> DeviceProfile:
    return DeviceProfile.model_validate({"name": "t", **_fields(stage_latency=stage_latency)})


# ----------------------------------------------------------------------- schema

def test_profile_without_table_is_still_valid() -> None:
    assert _profile(None).stage_latency is None
    assert profiles.device_profile("rpi4").stage_latency is None


def test_table_is_accepted() -> None:
    p = _profile(HAND)
    assert [t.batch_size for t in p.stage_latency] == [8, 16]
    assert p.stage_latency[0].input == (1, 28, 28)


@pytest.mark.parametrize(("bad", "expected"), [
    ({"forward_s": [1.0, math.nan]}, "finite"),
    ({"backward_s": [1.0, -2.0, 3.0, 4.0, 5.0, 6.0]}, "greater than 0"),
    ({"forward_s": [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]}, "greater than 0"),
    ({"forward_s": [math.inf] * 6}, "finite"),
    ({"forward_s": []}, "at least one"),
    ({"forward_s": [1.0]}, "has 1 stage but backward_s has 6"),
    ({"batch_size": 0}, "at least 1"),
])
def test_bad_table_is_refused(profile_dir, bad: dict, expected: str) -> None:
    table = {**HAND[0], **bad}
    profile_dir("devices", "broken", yaml.safe_dump(_fields(stage_latency=[table])))
    with pytest.raises(ConfigError, match="devices/broken.yaml") as info:
        load_profile("devices", "broken")
    assert expected in str(info.value), str(info.value)


# ---------------------------------------------------------------- interpolation

@pytest.mark.parametrize("n", [1, 4, 8, 12, 16, 24, 32])
def test_stage_time_interpolates_in_batch_size(n: int) -> None:
    p = _profile(HAND)
    factor = 0.5 + n / 16  # linear through the two measured batch sizes, also outside them
    assert stage_time_s(p, MODEL, WIDTH, INPUT, range(1, 4), n, "forward") == pytest.approx(
        6 * factor)
    assert stage_time_s(p, MODEL, WIDTH, INPUT, [2, 5], n, "backward") == pytest.approx(14 * factor)


def test_extrapolation_below_the_smallest_batch_never_goes_under_proportional() -> None:
    steep = [_table(8, [1.0] * 6, [1.0] * 6), _table(16, [10.0] * 6, [10.0] * 6)]
    p = _profile(steep)
    # the line through (8, 1) and (16, 10) is negative at n = 4; proportional gives 4/8 * 1
    assert stage_time_s(p, MODEL, WIDTH, INPUT, [1], 4, "forward") == pytest.approx(0.5)
    assert stage_time_s(p, MODEL, WIDTH, INPUT, [1], 24, "forward") == pytest.approx(19.0)


def test_stage_time_with_one_batch_size_scales_proportionally() -> None:
    p = _profile([HAND[1]])
    assert stage_time_s(p, MODEL, WIDTH, INPUT, [1, 2], 4, "forward") == pytest.approx(4.5 / 4)
    assert stage_time_s(p, MODEL, WIDTH, INPUT, [6], 32, "backward") == pytest.approx(36.0)


def test_stage_time_is_none_without_a_matching_table() -> None:
    p = _profile(HAND)
    assert stage_time_s(p, "resnet18", WIDTH, INPUT, [1], 8, "forward") is None
    assert stage_time_s(p, MODEL, 0.25, INPUT, [1], 8, "forward") is None
    assert stage_time_s(p, MODEL, WIDTH, [3, 32, 32], [1], 8, "forward") is None
    assert stage_time_s(p, MODEL, WIDTH, INPUT, [7], 8, "forward") is None  # no stage 7
    assert stage_time_s(_profile(None), MODEL, WIDTH, INPUT, [1], 8, "forward") is None


# ----------------------------------------------------------------------- wiring

def _one_client(tiny: dict, profile: str, algorithm: str) -> dict:
    tiny["algorithm"] = {"name": algorithm}
    tiny["devices"] = {"only": {"profile": profile, "count": 1, "end_layer": 3, "link": "wifi"}}
    return tiny


def _per_sample_flops(result, activity: str) -> float:
    from torch import nn

    from sflsim.models.cost import count_flops

    backbone = result.algorithm.ctx.backbone
    if activity == "client_train":
        cost = count_flops(nn.Sequential(backbone.client_model(3), backbone.exit_head(3)),
                           backbone.input_shape)
        return cost.forward_flops + cost.backward_flops
    cost = count_flops(backbone.client_model(3), backbone.input_shape)
    return cost.forward_flops if activity == "client_forward" else cost.backward_flops


def test_client_step_uses_the_table(tiny, profile_dir) -> None:
    profile_dir("devices", "tabled", yaml.safe_dump(_fields(stage_latency=HAND)))
    result = run_scenario(validate_scenario(_one_client(tiny, "tabled", "hetero_splitee_sequential")))
    ev = result.events[result.events.activity == "client_train"]
    assert len(ev) > 1
    per_sample = _per_sample_flops(result, "client_train")
    for row in ev.itertuples():
        n = round(row.flops / per_sample)  # FLOPs are still recorded
        assert row.flops == pytest.approx(n * per_sample)
        # stages 1..3: forward (1+2+3) + backward (2+4+6) = 18 times (0.5 + n/16)
        assert row.end_s - row.start_s == pytest.approx(18 * (0.5 + n / 16), rel=1e-9)


def test_split_step_uses_the_table(tiny, profile_dir) -> None:
    profile_dir("devices", "tabled", yaml.safe_dump(_fields(stage_latency=HAND)))
    result = run_scenario(validate_scenario(_one_client(tiny, "tabled", "splitfed_v1")))
    for activity, total in (("client_forward", 6), ("client_backward", 12)):
        ev = result.events[result.events.activity == activity]
        assert len(ev) > 1
        per_sample = _per_sample_flops(result, activity)
        for row in ev.itertuples():
            n = round(row.flops / per_sample)
            assert row.end_s - row.start_s == pytest.approx(total * (0.5 + n / 16), rel=1e-9)


# update_s: 0.25 k s for stage k at any batch size; exit_head_s: 0.5 (0.5 + n/16) s after any stage
FULL = [{**t, "update_s": [0.25 * k for k in range(1, 7)], "exit_head_s": [0.5 * f] * 6}
        for t, f in zip(HAND, (1.0, 1.5))]


def test_update_and_exit_head_times_are_added(tiny, profile_dir) -> None:
    profile_dir("devices", "full", yaml.safe_dump(_fields(stage_latency=FULL)))
    result = run_scenario(validate_scenario(_one_client(tiny, "full", "hetero_splitee_sequential")))
    ev = result.events[result.events.activity == "client_train"]
    per_sample = _per_sample_flops(result, "client_train")
    for row in ev.itertuples():
        n = round(row.flops / per_sample)
        # stages 1..3 forward + backward, update 0.25 (1+2+3), exit head after stage 3
        expected = 18 * (0.5 + n / 16) + 1.5 + 0.5 * (0.5 + n / 16)
        assert row.end_s - row.start_s == pytest.approx(expected, rel=1e-9)
    result = run_scenario(validate_scenario(_one_client(tiny, "full", "splitfed_v1")))
    ev = result.events[result.events.activity == "client_backward"]
    per_sample = _per_sample_flops(result, "client_backward")
    for row in ev.itertuples():
        n = round(row.flops / per_sample)
        assert row.end_s - row.start_s == pytest.approx(12 * (0.5 + n / 16) + 1.5, rel=1e-9)


def test_update_list_must_match_the_stages(profile_dir) -> None:
    table = {**FULL[0], "update_s": [1.0, 2.0]}
    profile_dir("devices", "broken", yaml.safe_dump(_fields(stage_latency=[table])))
    with pytest.raises(ConfigError, match="update_s has 2"):
        load_profile("devices", "broken")


def test_flops_rule_without_a_matching_table(tiny, profile_dir) -> None:
    other = [{**t, "width": 0.5} for t in HAND]  # another width: does not apply
    profile_dir("devices", "other", yaml.safe_dump(_fields("1 GFLOPS", stage_latency=other)))
    result = run_scenario(validate_scenario(_one_client(tiny, "other", "hetero_splitee_sequential")))
    ev = result.events[result.events.activity == "client_train"]
    assert len(ev) > 1
    assert (ev.end_s - ev.start_s).to_numpy() == pytest.approx((ev.flops / 1e9).to_numpy(),
                                                               rel=1e-9)


# ----------------------------------------------------------------- profile-host

def test_profile_host_writes_a_loadable_profile(tmp_path, monkeypatch) -> None:
    root = tmp_path / "profiles"
    out = root / "devices" / "this_host.yaml"
    result = CliRunner().invoke(app, ["profile-host", "-o", str(out), "--width", "0.0625",
                                      "--batch-sizes", "2,4", "--repeats", "1"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("SFLSIM_PROFILE_PATH", str(root))
    profiles.load_profile.cache_clear()
    try:
        p = load_profile("devices", "this_host")
    finally:
        profiles.load_profile.cache_clear()
    assert isinstance(p, DeviceProfile)
    assert p.sustained_flops.basis == "measured" and p.sustained_flops.value > 0
    assert [t.batch_size for t in p.stage_latency] == [2, 4]
    for t in p.stage_latency:
        assert (t.model, t.width, t.input) == (MODEL, 0.0625, (1, 28, 28))
        assert len(t.forward_s) == len(t.backward_s) == len(t.update_s) == 6
        assert len(t.exit_head_s) == 6
    assert stage_time_s(p, MODEL, 0.0625, INPUT, range(1, 4), 3, "forward") > 0


def test_profile_host_refuses_bad_batch_sizes(tmp_path) -> None:
    result = CliRunner().invoke(app, ["profile-host", "-o", str(tmp_path / "x.yaml"),
                                      "--batch-sizes", "2,x"])
    assert result.exit_code == 2
    assert not (tmp_path / "x.yaml").exists()


def test_table_seconds_scale_with_the_client_slowdown(tiny, profile_dir) -> None:
    from sflsim.runner import build

    profile_dir("devices", "tabled", yaml.safe_dump(_fields(stage_latency=HAND)))
    _, alg = build(validate_scenario(_one_client(tiny, "tabled", "hetero_splitee_sequential")))
    client = alg.ctx.clients[0]
    base = alg.cost_model.compute_seconds(client, 3, 16, ("forward", "backward"))
    assert base == pytest.approx(18 * 1.5)
    client.slowdown = 2.0
    assert alg.cost_model.compute_seconds(client, 3, 16, ("forward", "backward")) == pytest.approx(2 * base)
