"""Tests for scenario configuration: units, loading, ``--set`` overrides, frozen models."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest
import yaml

from sflsim.algorithms import ALGORITHMS
from sflsim.config import load_scenario, validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.config.schema import DeviceGroup, LinkOverride
from sflsim.errors import ConfigError
from sflsim.units import UNITS, parse_quantity

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"


# ----------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        ("20 Mbps", "bandwidth", 2e7),
        ("20Mbps", "bandwidth", 2e7),
        ("1.5 Gbit/s", "bandwidth", 1.5e9),
        ("1 MB/s", "bandwidth", 8e6),
        ("35 ms", "time", 0.035),
        ("2 min", "time", 120.0),
        ("4 GiB", "bytes", 4 * 2**30),
        ("4 GB", "bytes", 4e9),
        ("16 GFLOPS", "flops", 1.6e10),
        ("6.4 W", "power", 6.4),
        ("1.5 kJ", "energy", 1500.0),
        ("1e3 bps", "bandwidth", 1e3),
        ("2e7", "bandwidth", 2e7),  # a number in a string is in the base unit
        (20_000_000, "bandwidth", 2e7),
        (0.5, "time", 0.5),
    ],
)
def test_parse_quantity(text: object, dimension: str, expected: float) -> None:
    value = parse_quantity(text, dimension)
    assert isinstance(value, float)
    assert value == pytest.approx(expected)


def test_bad_unit_lists_valid_units() -> None:
    with pytest.raises(ValueError) as info:
        parse_quantity("20 Mbs", "bandwidth")
    msg = str(info.value)
    assert "'Mbs'" in msg and "'20 Mbs'" in msg
    assert all(unit in msg for unit in ("Mbps", "Gbps", "bit/s", "MB/s"))


def test_wrong_case_unit_suggests_the_right_one() -> None:
    with pytest.raises(ValueError, match="did you mean 'GiB'"):
        parse_quantity("4 gib", "bytes")


@pytest.mark.parametrize(("text", "dimension", "hint"), [
    ("20 Mbit", "bandwidth", "did you mean 'Mbit/s'?"),
    ("3 GFLOP", "flops", "did you mean 'GFLOPS' or 'GFLOP/s'?"),
])
def test_a_unit_cut_short_suggests_the_whole_one(text, dimension, hint) -> None:
    with pytest.raises(ValueError, match=re.escape(hint)):
        parse_quantity(text, dimension)


def test_unit_of_another_dimension_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown time unit 'Mbps' in .* \(valid units: s, ms"):
        parse_quantity("20 Mbps", "time")


@pytest.mark.parametrize("value", ["fast", "Mbps", "", "20 Mbps extra", True, None, [1]])
def test_unreadable_quantity_names_value_and_example(value: object) -> None:
    with pytest.raises(ValueError, match=r"20 Mbps"):
        parse_quantity(value, "bandwidth")


@pytest.mark.parametrize(("value", "dimension", "message"), [
    ("abc", "flops", "cannot read 'abc' as a speed in FLOP/s: write a number and a unit, for "
                     "example \"16 GFLOPS\""),
    ("abc", "bytes", "cannot read 'abc' as a size in bytes: "),
    ("3 Gb", "bytes", "unknown size unit 'Gb' in '3 Gb'; did you mean 'GB'? (valid units: B, "),
    (True, "time", "expected a time such as \"35 ms\", got true"),
    (None, "energy", "expected an energy such as \"1.5 J\", got null"),
])
def test_a_quantity_error_names_its_kind_in_words(value, dimension, message) -> None:
    """Each kind of quantity is named grammatically ("a speed in FLOP/s", not "a flops"),
    a value as YAML writes it (true, null), a suggestion as "; did you mean 'x'?"."""
    with pytest.raises(ValueError) as info:
        parse_quantity(value, dimension)
    assert str(info.value).startswith(message), str(info.value)


def test_every_dimension_has_units() -> None:
    assert set(UNITS) == {"bandwidth", "time", "bytes", "flops", "power", "energy"}


# --------------------------------------------------------------------------- loading


def test_quickstart_loads() -> None:
    scenario = load_scenario(QUICKSTART)
    assert isinstance(scenario, Scenario)
    assert scenario.name == "quickstart"
    assert scenario.algorithm.name == "hetero_splitee_sequential"
    assert scenario.num_clients == 12
    assert {g.end_layer for g in scenario.devices.values()} == {3, 4, 5}
    assert scenario.training.optimizer.lr == pytest.approx(1e-3)
    assert scenario.devices["pi4_wifi"].profile == "rpi4"


def test_load_accepts_str_path() -> None:
    assert load_scenario(str(QUICKSTART)).name == "quickstart"


def test_overrides_change_fields_with_types() -> None:
    scenario = load_scenario(QUICKSTART, ["training.rounds=2", "devices.pi4_wifi.count=1"])
    assert scenario.training.rounds == 2 and type(scenario.training.rounds) is int
    assert scenario.devices["pi4_wifi"].count == 1
    assert type(scenario.devices["pi4_wifi"].count) is int
    assert scenario.num_clients == 9


@pytest.mark.parametrize("written", ["1e-3", "1.0e-3", "0.001", "1E-3"])
def test_override_float_written_in_any_notation(written: str) -> None:
    # PyYAML (YAML 1.1) reads "1e-3" as a string; the schema must turn it into a float.
    assert isinstance(yaml.safe_load("1e-3"), str)
    scenario = load_scenario(QUICKSTART, [f"training.optimizer.lr={written}"])
    lr = scenario.training.optimizer.lr
    assert type(lr) is float and lr == pytest.approx(0.001)


def test_float_written_as_1e_minus_3_in_the_file(tmp_path: Path) -> None:
    text = QUICKSTART.read_text().replace("lr: 1.0e-3", "lr: 1e-3")
    assert "lr: 1e-3" in text
    path = tmp_path / "s.yaml"
    path.write_text(text)
    lr = load_scenario(path).training.optimizer.lr
    assert type(lr) is float and lr == pytest.approx(0.001)


def test_overrides_of_other_types() -> None:
    scenario = load_scenario(QUICKSTART, [
        "seed=7", "name=renamed", "dataset.fraction=0.5", "dataset.partition.scheme=dirichlet",
        "dataset.partition.alpha=0.1", "algorithm.name=hetero_splitee_averaging",
        "evaluation.max_test_samples=null", "server.slots=2", "wire_dtype=fp16",
        "devices.nano_lte.link_override.uplink_bps=5 Mbps",
    ])
    assert scenario.seed == 7 and scenario.name == "renamed"
    assert scenario.dataset.fraction == 0.5
    assert scenario.dataset.partition.scheme == "dirichlet"
    assert scenario.dataset.partition.alpha == pytest.approx(0.1)
    assert scenario.algorithm.name == "hetero_splitee_averaging"
    assert scenario.evaluation.max_test_samples is None
    assert scenario.server.slots == 2
    assert scenario.wire_dtype == "fp16"
    assert scenario.devices["nano_lte"].link_override.uplink_bps == pytest.approx(5e6)


def test_override_with_a_mapping_value_adds_a_device_group() -> None:
    scenario = load_scenario(
        QUICKSTART, ["devices.phone={profile: phone_midrange, count: 2, end_layer: 2, link: 5g}"]
    )
    assert scenario.devices["phone"].count == 2
    assert scenario.num_clients == 14


def test_later_override_wins_and_file_is_unchanged() -> None:
    before = QUICKSTART.read_text()
    scenario = load_scenario(QUICKSTART, ["training.rounds=2", "training.rounds=3"])
    assert scenario.training.rounds == 3
    assert QUICKSTART.read_text() == before


def test_override_of_unknown_field_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, ["training.roundz=2"])
    msg = str(info.value)
    assert "training.roundz" in msg and "did you mean 'rounds'" in msg


def test_override_of_unknown_device_group_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, ["devices.pi4_wfi.count=1"])
    msg = str(info.value)
    assert "pi4_wfi" in msg and "Did you mean 'pi4_wifi'" in msg
    assert "nano_lte" in msg


# ------------------------------------------------------------------- frozen models


def test_models_are_frozen() -> None:
    scenario = load_scenario(QUICKSTART)
    with pytest.raises(pydantic.ValidationError):
        scenario.training.rounds = 10  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        scenario.devices["pi4_wifi"].count = 10  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        scenario.seed = 1  # type: ignore[misc]
    assert scenario.training.rounds == 4


def test_model_copy_leaves_original_alone() -> None:
    scenario = load_scenario(QUICKSTART)
    changed = scenario.model_copy(update={"seed": 5})
    assert changed.seed == 5 and scenario.seed == 0


def test_round_trip_through_yaml(tmp_path: Path) -> None:
    scenario = load_scenario(QUICKSTART)
    path = tmp_path / "resolved.yaml"
    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json")))
    assert load_scenario(path) == scenario


# ------------------------------------------------------------------- quantity fields


def test_link_override_parses_units() -> None:
    over = LinkOverride.model_validate(
        {"uplink_bps": "5 Mbps", "downlink_bps": "1 Gbps", "latency_s": "20 ms"}
    )
    assert over.uplink_bps == pytest.approx(5e6)
    assert over.downlink_bps == pytest.approx(1e9)
    assert over.latency_s == pytest.approx(0.02)


def test_link_override_in_a_scenario() -> None:
    data = yaml.safe_load(QUICKSTART.read_text())
    data["devices"]["pi4_wifi"]["link_override"] = {"uplink_bps": "5 Mbps"}
    scenario = validate_scenario(data)
    group = scenario.devices["pi4_wifi"]
    assert group.link_override.uplink_bps == pytest.approx(5e6)
    assert group.link_override.downlink_bps is None


def test_bool_is_not_a_number() -> None:
    with pytest.raises(pydantic.ValidationError):
        DeviceGroup.model_validate({"profile": "rpi4", "count": True, "end_layer": 3,
                                    "link": "wifi"})


# ------------------------------------------------------------ YAML merge keys (<<)

MERGED_GROUPS = """\
devices:
  base: &b {profile: rpi4, count: 1, end_layer: 3, link: wifi,
            link_override: {uplink_bps: "100 Mbps", latency_s: "5 ms"}}
  derived:
    <<: *b
    link_override: {uplink_bps: "20 Mbps"}
"""


def _scenario_with_devices(tmp_path: Path, devices_yaml: str) -> Path:
    """quickstart.yaml with its ``devices:`` block replaced by ``devices_yaml``."""
    data = yaml.safe_load(QUICKSTART.read_text())
    del data["devices"]
    path = tmp_path / "merged.yaml"
    path.write_text(devices_yaml + yaml.safe_dump(data, sort_keys=False))
    return path


def test_merge_keys_in_a_scenario_merge_one_level_deep(tmp_path: Path) -> None:
    scenario = load_scenario(_scenario_with_devices(tmp_path, MERGED_GROUPS))
    base, derived = scenario.devices["base"], scenario.devices["derived"]
    assert (derived.profile, derived.count, derived.end_layer, derived.link) == (
        "rpi4", 1, 3, "wifi")
    # the mapping's own link_override replaces the merged one whole (no deep merge)
    assert derived.link_override.uplink_bps == pytest.approx(20e6)
    assert derived.link_override.latency_s is None
    assert base.link_override.uplink_bps == pytest.approx(100e6)
    assert base.link_override.latency_s == pytest.approx(0.005)


def test_merge_key_lists_merge_anchors_that_merge_and_first_listed_wins(tmp_path: Path) -> None:
    devices = """\
devices:
  a: &a {profile: rpi4, count: 1, end_layer: 3, link: wifi}
  b: &b {<<: *a, end_layer: 4, link: lte}
  c: {<<: [*b, *a], count: 2}
"""
    scenario = load_scenario(_scenario_with_devices(tmp_path, devices))
    c = scenario.devices["c"]
    assert (c.profile, c.count, c.end_layer, c.link) == ("rpi4", 2, 4, "lte")
    assert scenario.devices["b"].end_layer == 4


@pytest.mark.parametrize(("devices", "expected"), [
    ("devices:\n  a: &a {profile: rpi4, count: 1, end_layer: 3, link: wifi}\n"
     "  b: {<<: *a, count: 2, count: 3}\n", ["key 'count' appears twice", "line 3, column 25"]),
    ("devices:\n  a: &a {profile: rpi4, count: 1, end_layer: 3, link: wifi}\n"
     "  b: {<<: *a, <<: *a}\n", ["key '<<' appears twice", "'<<: [*a, *b]'"]),
    ("devices:\n  a: {<<: 3, count: 1}\n", ["merge key '<<'", "not a scalar"]),
], ids=["repeated key next to a merge", "two merge keys", "merge of a number"])
def test_merge_keys_keep_the_repeated_key_check(tmp_path: Path, devices: str,
                                                expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(_scenario_with_devices(tmp_path, devices))
    msg = str(info.value)
    assert "merged.yaml" in msg and "not valid YAML" in msg
    for part in expected:
        assert part in msg, msg


ANCHORS_APART = """\
x-devices:                        # extension field: anchors only, not validated
  pi: &pi {profile: rpi4, end_layer: 3, link: wifi}
  orin: &orin {profile: jetson_orin_nano, end_layer: 5, link: wifi}
x-note: anything at all
devices:
  weak: {<<: *pi, count: 2}
  strong: {<<: *orin, count: 1}
"""


def test_top_level_x_keys_hold_anchors_and_are_not_validated(tmp_path: Path) -> None:
    scenario = load_scenario(_scenario_with_devices(tmp_path, ANCHORS_APART))
    assert {k: (g.profile, g.count) for k, g in scenario.devices.items()} == {
        "weak": ("rpi4", 2), "strong": ("jetson_orin_nano", 1)}
    assert "x-devices" not in scenario.model_dump()
    # anchors under any other unknown top-level key are refused, with a pointer to x-
    with pytest.raises(ConfigError, match=r"anchors: unknown field .*starting with 'x-' is ignored"):
        load_scenario(_scenario_with_devices(tmp_path, ANCHORS_APART.replace("x-devices", "anchors")))
    # only at the top level: inside a mapping an x- key is still an unknown field
    nested = "devices:\n  x-a: {profile: rpi4, count: 1, end_layer: 3, link: wifi}\n"
    load_scenario(_scenario_with_devices(tmp_path, nested))  # a device group may be named so
    training = ANCHORS_APART + "training: {x-rounds: 3}\n"
    data = yaml.safe_load(QUICKSTART.read_text())
    del data["devices"], data["training"]
    path = tmp_path / "nested.yaml"
    path.write_text(training + yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"training\.x-rounds: unknown field"):
        load_scenario(path)


def test_top_level_x_keys_in_sweep_and_profile_files(tmp_path: Path, profile_dir) -> None:
    from sflsim.hardware import profiles
    from sflsim.sweep import load_sweep

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"x-seeds: &seeds [1, 2]\nbase: {QUICKSTART}\naxes: {{seed: *seeds}}\n")
    assert [p.values["seed"] for p in load_sweep(sweep).points] == [1, 2]
    profile_dir("links", "anchored", """\
x-nominal: &n {basis: nominal, source: test}
description: a link whose numbers share their basis and source
uplink_bps: {<<: *n, value: "20 Mbps"}
downlink_bps: {<<: *n, value: "40 Mbps"}
latency_s: {<<: *n, value: "5 ms"}
""")
    assert profiles.link_profile("anchored").downlink_bps.value == pytest.approx(40e6)


def test_merge_keys_in_a_profile(profile_dir) -> None:
    from sflsim.hardware import profiles

    profile_dir("links", "merged_link", """\
description: two directions from one anchored number
uplink_bps: &bw {value: "20 Mbps", basis: nominal, source: test}
downlink_bps: {<<: *bw, value: "40 Mbps"}
latency_s: {<<: *bw, value: "5 ms"}
""")
    link = profiles.link_profile("merged_link")
    assert link.uplink_bps.value == pytest.approx(20e6)
    assert link.downlink_bps.value == pytest.approx(40e6)
    assert link.downlink_bps.source == "test" and link.latency_s.basis == "nominal"
    assert link.latency_s.value == pytest.approx(0.005)


def test_merge_keys_in_a_sweep(tmp_path: Path) -> None:
    from sflsim.sweep import load_sweep

    (tmp_path / "base.yaml").write_text(QUICKSTART.read_text())
    path = tmp_path / "sweep.yaml"
    path.write_text("""\
base: base.yaml
set: {training.rounds: 1}
axes:
  algorithm:
    - &seq {name: hetero_splitee_sequential, server_lr_divisor: 4}
    - {<<: *seq, server_lr_divisor: 8}
""")
    divisors = [p.scenario.algorithm.server_lr_divisor for p in load_sweep(path).points]
    assert divisors == [4.0, 8.0]


# ------------------------------------------------- integral floats for integer fields


@pytest.mark.parametrize("written", ["1e3", "1E+3", "1.0e3", "1000.0", "'1e3'"])
def test_integer_field_takes_an_integral_float_from_the_file_and_set(tmp_path: Path,
                                                                     written: str) -> None:
    # PyYAML (YAML 1.1) reads 1e3 (no dot) as text, which pydantic's int refuses
    path = tmp_path / "s.yaml"
    path.write_text(QUICKSTART.read_text().replace("rounds: 4", f"rounds: {written}"))
    assert f"rounds: {written}" in path.read_text()
    for scenario in (load_scenario(path), load_scenario(QUICKSTART, [f"training.rounds={written}"])):
        assert scenario.training.rounds == 1000 and type(scenario.training.rounds) is int


def test_integral_floats_in_optional_list_and_mapping_integer_fields() -> None:
    scenario = load_scenario(QUICKSTART, [
        "seed=1e18", "server.slots=2.0", "evaluation.max_test_samples=5e2",
        "server.priorities={pi4_wifi: 1e0}",
        "algorithm={name: splitfed_v1, split: {name: random, candidates: [1e0, 3.0]}}"])
    assert scenario.seed == 10**18 and type(scenario.seed) is int
    assert scenario.server.slots == 2 and scenario.evaluation.max_test_samples == 500
    assert scenario.server.priorities == {"pi4_wifi": 1}
    assert scenario.algorithm.split.candidates == [1, 3]
    assert all(type(k) is int for k in scenario.algorithm.split.candidates)


@pytest.mark.parametrize(("written", "shown"), [
    ("1.5", "(got 1.5)"), ("'1.5'", "(got '1.5')"), ("1.5e0", "(got '1.5e0')"),
    ("1e400", "(got '1e400')"), ("true", "(got true)"), ("'true'", "(got 'true')")])
def test_integer_field_still_refuses_fractions(written: str, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, [f"training.rounds={written}"])
    msg = str(info.value)
    assert "training.rounds: expected a whole number, 1 to 100000" in msg and shown in msg, msg


def test_integral_float_past_the_range_says_out_of_range() -> None:
    with pytest.raises(ConfigError, match=r"training\.rounds: 1000000 is out of range; "
                                          r"valid: 1 to 100000"):
        load_scenario(QUICKSTART, ["training.rounds=1e6"])


@pytest.mark.parametrize(("setting", "field", "valid"), [
    ("training.batch_size=1e19", "training.batch_size: 10000000000000000000", "1 to 2147483647"),
    ("evaluation.every_rounds=2147483648", "evaluation.every_rounds: 2147483648",
     "1 to 2147483647"),
    ("training.local_epochs=1e5", "training.local_epochs: 100000", "1 to 10000"),  # its own
    ("server.slots=1e12", "server.slots: 1000000000000", "1 to 2147483647"),
    ("algorithm.name=mergesfl", None, None),
])
def test_integers_without_a_bound_of_their_own_stop_at_the_largest_count(setting, field, valid):
    """A count past 2**31 - 1 (a typo: it would overflow NumPy's integers, or hang a run)
    is refused, naming the field, the value and the range; the MergeSFL fields too."""
    overrides = [setting] if field else [setting, "algorithm.total_batch_size=1e19"]
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, overrides)
    msg = str(info.value)
    if field is None:
        field, valid = "algorithm.total_batch_size: 10000000000000000000", "1 to 2147483647"
    assert f"{field} is out of range; valid: {valid}" in msg, msg
    assert load_scenario(QUICKSTART, ["training.batch_size=2147483647"]).training.batch_size \
        == 2**31 - 1  # the largest still taken
    seed = load_scenario(QUICKSTART, ["seed=4294967296"])  # a bound of its own: kept
    assert seed.seed == 2**32


@pytest.mark.parametrize(("setting", "expected"), [
    ("server.priorities={a: 3, b: 1e19}", "server.priorities.b: 10000000000000000000 is out of "
                                          "range; valid: -2147483647 to 2147483647"),
    ("server.priorities={a: -3e9}", "server.priorities.a: -3000000000 is out of range; "
                                    "valid: -2147483647 to 2147483647"),
    ("dataset={name: synthetic, synthetic: {image_shape: [1, 1e19, 28]}}",
     "dataset.synthetic.image_shape.1: 10000000000000000000 is out of range; valid: at most 1024"),
])
def test_an_integer_out_of_range_in_a_list_or_mapping_is_named_by_its_place(setting, expected):
    """The item is named, not the whole list or mapping; an image side is held to the
    image's own bound, not the largest count."""
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, [setting])
    assert expected in str(info.value), str(info.value)


@pytest.mark.parametrize(("written", "read"), [
    ("6", 6), ("'6'", 6), ("1e1", 10), ("0.5", 0.5), ("'0.5'", 0.5), ("1.0", 1.0)])
def test_clients_per_round_reads_text_as_integer_fields_do(written, read) -> None:
    """``1e1`` (PyYAML's text) is the count 10, as for any integer field; with a decimal
    point a number is a fraction."""
    value = load_scenario(QUICKSTART, [f"training.clients_per_round={written}"]) \
        .training.clients_per_round
    assert value == read and type(value) is type(read)


@pytest.mark.parametrize(("written", "problem"), [
    ("[1, 2]", "a count (an integer) or a fraction (a number in (0, 1]) is needed (got [1, 2])"),
    ("true", "a count (an integer) or a fraction (a number in (0, 1]) is needed (got true)"),
    ("{a: 1}", "a count (an integer) or a fraction (a number in (0, 1]) is needed (got {a: 1})"),
    ("six", "a count (an integer) or a fraction"),
    ("1.5e1", "a fraction must be in (0, 1]; write a count as an integer"),
    ("0", "a count must be at least 1")])
def test_clients_per_round_refusals_are_one_line(written, problem) -> None:
    """One message, without the union's branch names (``clients_per_round.int``)."""
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, [f"training.clients_per_round={written}"])
    msg = str(info.value)
    assert f"training.clients_per_round: {problem}" in msg and "problems" not in msg, msg


def test_integral_float_in_a_sweep_axis_and_a_profile(tmp_path: Path, profile_dir) -> None:
    from sflsim.hardware import profiles
    from sflsim.sweep import load_sweep

    (tmp_path / "base.yaml").write_text(QUICKSTART.read_text())
    (tmp_path / "sw.yaml").write_text("base: base.yaml\naxes: {training.rounds: [1e1, 2e1]}\n")
    assert [p.scenario.training.rounds for p in load_sweep(tmp_path / "sw.yaml").points] == [10, 20]
    server = yaml.safe_load((profiles.SHIPPED_PROFILES / "servers" / "a100.yaml").read_text())
    profile_dir("servers", "many_slots", yaml.safe_dump({**server, "slots": "1e1"}))
    assert profiles.server_profile("many_slots").slots == 10
    profile_dir("servers", "half_slot", yaml.safe_dump({**server, "slots": 1.5}))
    with pytest.raises(ConfigError, match=r"slots: expected a whole number.*\(got 1\.5\)"):
        profiles.server_profile("half_slot")


# ----------------------------------------------- errors name the file and overrides


@pytest.mark.parametrize(("overrides", "lead"), [
    (["model={name: vit}", "model.hidden_dim=100"], "--set model.hidden_dim=100: "),
    (["model={name: vit}", "model.heads=5"], "--set model.heads=5: "),
    (["model={name: vit, heads: 5}"], "--set model={name: vit, heads: 5}: "),
])
def test_a_check_of_a_whole_mapping_is_blamed_on_the_override_of_the_field_it_names(
        overrides, lead) -> None:
    """The ViT's size check reads the whole model, but names hidden_dim and heads: the
    override that set one of them leads, not the one that chose the model."""
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, overrides)
    assert str(info.value).startswith(lead + "model: model.hidden_dim"), str(info.value)


def test_set_overrides_behind_a_validation_error_are_named() -> None:
    with pytest.raises(ConfigError) as info:  # the field in error comes from a --set: it leads
        load_scenario(QUICKSTART, ["seed=3", "training.rounds=0"])
    assert str(info.value).startswith("--set training.rounds=0: training.rounds: 0 is out of range")
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, ["algorithm={name: fedsga, candidates: [9, 1]}"])
    assert str(info.value).startswith(
        "--set algorithm={name: fedsga, candidates: [9, 1]}: "
        "algorithm.candidates: 9 is not a cut layer of model.name "
        "hetero_splitee_resnet; valid cut layers: 1 to 5")
    with pytest.raises(ConfigError) as info:  # only the override behind the mistake
        load_scenario(QUICKSTART, ["seed=3", "devices.pi4_wifi.count=1",
                                   "devices.pi4_wifi.end_layer=9"])
    assert str(info.value).startswith(
        "--set devices.pi4_wifi.end_layer=9: devices.pi4_wifi.end_layer: 9 is")
    with pytest.raises(ConfigError) as info:  # an override's own error names it once
        load_scenario(QUICKSTART, ["devices.pi4_wfi.count=1"])
    assert str(info.value).startswith("--set 'devices.pi4_wfi.count=1': devices has no entry")
    assert str(QUICKSTART) not in str(info.value)


@pytest.mark.parametrize(("overrides", "expected"), [
    (["training.round=2"], "--set training.round=2: training.round: unknown field; "
                           "did you mean 'rounds'?"),
    (["trainin.rounds=2"], "--set trainin.rounds=2: trainin: unknown field; did you mean "
                           "'training'?"),
    (["training.rounds=3", "seed=1", "training.rounds=0"],  # the one that took effect
     "--set training.rounds=0: training.rounds: 0 is out of range"),
])
def test_an_error_in_a_field_set_by_an_override_leads_with_the_override(overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, overrides)
    assert str(info.value).startswith(expected)


@pytest.mark.parametrize(("overrides", "expected"), [
    (["model.name=small_cnn"], f"{QUICKSTART} (--set model.name=small_cnn): "
                               f"devices.pi4_wifi.end_layer: 3 is past the end of model.name "
                               f"small_cnn (2 stages); valid end layer: 1"),
    (["model.name=vgg5"], f"{QUICKSTART} (--set model.name=vgg5): model.width: 0.25 is not valid "
                          f"with model.name vgg5, which has no width multiplier; valid: 1.0, or a "
                          f"model with one: "),
    (["dataset.download=true"], "--set dataset.download=true: dataset.download: true is "
                                "available for "),
])
def test_a_check_that_another_override_failed_names_it_and_the_field_once(overrides, expected):
    """A field checked against one an override changed names that override; a check of a
    whole mapping names its field once (``model.width: ...``, not ``model: model.width``)."""
    with pytest.raises(ConfigError) as info:
        load_scenario(QUICKSTART, overrides)
    assert str(info.value).startswith(expected), str(info.value)


def test_an_error_in_the_file_leads_with_the_file(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    data = yaml.safe_load(Path(QUICKSTART).read_text())
    data["training"]["roundz"] = 2
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:  # training.roundz is the file's, not the --set's
        load_scenario(path, ["training.rounds=2", "seed=1"])
    assert str(info.value).startswith(f"{path}: training.roundz: unknown field")


def test_scenario_errors_prefixes_build_errors_once_and_only_user_errors() -> None:
    from sflsim.config.load import scenario_errors
    from sflsim.errors import DatasetNotFoundError, SflsimError

    overrides = ["seed=1", "devices.a.count=9", "devices.b.count=2", "dataset.fraction=0.1"]
    with pytest.raises(ConfigError) as info, scenario_errors("s.yaml", overrides):
        raise ConfigError("devices: 11 clients; lower devices.*.count or raise dataset.fraction")
    assert str(info.value).startswith("s.yaml (--set devices.a.count=9, --set devices.b.count=2, "
                                      "--set dataset.fraction=0.1): devices: 11 clients")
    with pytest.raises(DatasetNotFoundError, match=r"^s\.yaml: dataset 'cifar10'"), \
            scenario_errors("s.yaml", overrides):
        raise DatasetNotFoundError("dataset 'cifar10': data/cifar-10-batches-py does not exist")
    with pytest.raises(ConfigError, match=r"^s\.yaml: seed x$"), scenario_errors("s.yaml"):
        raise ConfigError("s.yaml: seed x")  # already named
    with pytest.raises(SflsimError, match=r"^out already holds results$"), \
            scenario_errors("s.yaml", overrides):
        raise SflsimError("out already holds results")  # about the output, not the scenario


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_set_algorithm_name_switches_from_any_file(name: str) -> None:
    """``--set algorithm.name=X`` on a file written for another algorithm gives X with
    its own defaults: the old algorithm's fields that X lacks are dropped, shared ones kept."""
    small = Path("scenarios/fedsga_small.yaml")
    scenario = load_scenario(small, [f"algorithm.name={name}"])
    assert scenario.algorithm.name == name
    if name != "fedsga":  # the file's own algorithm keeps the file's settings
        fresh = load_scenario(small, [f"algorithm={{name: {name}}}"]).algorithm
        assert scenario.algorithm == fresh  # fedsga_small's algorithm shares no field but name


def test_set_algorithm_name_keeps_shared_fields_and_still_refuses_typos(tmp_path: Path) -> None:
    data = yaml.safe_load(QUICKSTART.read_text())
    data["algorithm"] = {"name": "splitfed_v1", "split": {"name": "random"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    switched = load_scenario(path, ["algorithm.name=mergesfl"]).algorithm
    assert switched.name == "mergesfl" and switched.split.name == "random"
    with pytest.raises(ConfigError, match="splt"):  # the same algorithm: nothing dropped
        load_scenario(path, ["algorithm.splt=1", "algorithm.name=splitfed_v1"])


def test_models_too_large_to_allocate_are_one_message(monkeypatch) -> None:
    """An allocation that fails while the run is built (a size far beyond the host's
    memory that the memory estimate let through) is one message naming the sizes set,
    not a traceback."""
    from sflsim.run import build as build_module

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: "
                           "not enough memory: you tried to allocate 51539607552 bytes.")

    monkeypatch.setattr(build_module, "_build", refuse)
    scenario = load_scenario(QUICKSTART, ["training.batch_size=8"])
    with pytest.raises(ConfigError, match=r"needs more memory than this host can give \(asked "
                                          r"for 48\.0 GiB at once\)"):
        build_module.build(scenario)
    monkeypatch.setattr(build_module, "_build", lambda s: (_ for _ in ()).throw(
        RuntimeError("a different failure")))
    with pytest.raises(RuntimeError, match="a different failure"):
        build_module.build(scenario)  # anything else stays as it is


@pytest.mark.parametrize(("path", "setting", "where"), [
    ("scenarios/fedsga_small.yaml", "algorithm.candidates=[1,1]", "algorithm"),
    ("scenarios/multisfl_small.yaml", "algorithm.split.candidates=[2,2]", "algorithm.split"),
])
def test_a_cut_layer_named_twice_among_the_candidates_is_refused(path, setting, where):
    """A repeated candidate would weigh one cut twice (the random policy) or make it the
    reference split by accident (FedSGA): refused, naming the list."""
    with pytest.raises(ConfigError, match=rf"{re.escape(where)}: candidates must name each cut "
                                          r"layer once, got \[\d, \d\]"):
        load_scenario(Path(__file__).parents[1] / path, [setting])
