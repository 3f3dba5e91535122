"""Hardware numbers far outside every shipped profile of their kind are warned about
(``sflsim/hardware/plausible.py``): a device or server profile's compute, memory, powers
and costs, and a fleet row's, under ``validate``, ``profiles show`` and ``run``; with
the field, the value and the shipped range; warnings, never errors."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml

from sflsim.config.load import profile_warnings
from sflsim.hardware import plausible, profiles
from tests.conftest import TINY
from tests.test_silent_input import cli, scenario_file

#: (field, value with a unit, the value as the warning shows it, below or above)
DEVICE_CASES = [
    ("sustained_flops", "1000 TFLOPS", "1,000 TFLOP/s", "above"),  # a petaFLOP/s board
    ("operator_costs.conv_flops", "5 MFLOPS", "5 MFLOP/s", "below"),
    ("operator_costs.matmul_flops", "50 TFLOPS", "50 TFLOP/s", "above"),
    ("operator_costs.grouped_conv_flops", "1 kFLOPS", "1 kFLOP/s", "below"),
    ("operator_costs.elementwise_flops", "900 TFLOPS", "900 TFLOP/s", "above"),
    ("memory_bytes", "16 TiB", "16 TiB", "above"),
    ("operator_costs.memory_bandwidth_bps", "5 TB/s", "5 TB/s", "above"),
    ("active_power_w", "5 kW", "5 kW", "above"),
    ("idle_power_w", "1 mW", "1 mW", "below"),
    ("radio_tx_power_w", "300 W", "300 W", "above"),
    ("radio_rx_power_w", "2 mW", "2 mW", "below"),
    ("operator_costs.per_operator_s", "1 s", "1 s", "above"),
    ("operator_costs.per_batch_s", "1 us", "1 us", "below"),
]
SERVER_CASES = [
    ("sustained_flops", "1e18", "1,000,000 TFLOP/s", "above"),
    ("memory_bytes", "1 GiB", "1 GiB", "below"),
    ("active_power_w", "10 W", "10 W", "below"),
    ("idle_power_w", "10 kW", "10 kW", "above"),
]


def shipped_with(kind: str, name: str, field: str, value: str) -> str:
    """The shipped profile ``name`` of ``kind`` as YAML, with ``field`` (dotted) set to
    ``value``."""
    data = yaml.safe_load((profiles.SHIPPED_PROFILES / kind / f"{name}.yaml").read_text())
    node = data
    *parents, last = field.split(".")
    for key in parents:
        node = node[key]
    node[last]["value"] = value
    return yaml.safe_dump(data, sort_keys=False)


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(("kind", "field", "value", "shown", "side"),
                         [("devices", *case) for case in DEVICE_CASES]
                         + [("servers", *case) for case in SERVER_CASES])
def test_a_profile_number_far_outside_the_shipped_ones_is_warned_about(
        kind, field, value, shown, side, profile_dir, tmp_path):
    name = "board" if kind == "devices" else "bigiron"
    profile_dir(kind, name, shipped_with(kind, "rpi4" if kind == "devices" else "a100",
                                         field, value))
    low, high = plausible.shipped_ranges(kind)[field]
    expected = (f"{field}.value: {shown} is more than 10x {side} the shipped {kind}' {field} "
                f"({plausible.show(low, plausible._dimension(field))} to "
                f"{plausible.show(high, plausible._dimension(field))}); check the number and "
                f"its unit")
    changes = ({"devices__weak__profile": name} if kind == "devices"
               else {"server__profile": name})
    code, out = cli("validate", str(scenario_file(tmp_path, **changes)))
    assert code == 0, out  # a warning, not an error
    text = one_line(out)
    where = tmp_path / "profiles" / kind / f"{name}.yaml"
    assert f"warning: profile {where}: {expected}" in text, text
    assert text.count("warning:") == 1, text  # only the field changed
    code, out = cli("profiles", "show", name)
    assert code == 0 and expected in one_line(out), out


def test_the_message_names_the_value_and_the_shipped_range(profile_dir, tmp_path):
    profile_dir("devices", "board", shipped_with("devices", "rpi4", "sustained_flops", 1e15))
    code, out = cli("profiles", "show", "board")
    assert code == 0, out
    assert ("sustained_flops.value: 1,000 TFLOP/s is more than 10x above the shipped devices' "
            "sustained_flops (4 GFLOP/s to 2.1 TFLOP/s); check the number and its unit"
            ) in one_line(out)


def test_a_bare_number_gets_the_warning_on_its_unit_only(profile_dir, tmp_path):
    """``sustained_flops: 16`` is 16 FLOP/s, far below every device too: one warning,
    the one with the unit probably meant."""
    profile_dir("devices", "board", shipped_with("devices", "rpi4", "sustained_flops", 16))
    code, out = cli("validate", str(scenario_file(tmp_path, devices__weak__profile="board")))
    text = one_line(out)
    assert code == 0 and 'did you mean "16 GFLOPS"?' in text, text
    assert text.count("warning:") == 1 and "more than 10x" not in text


def test_every_shipped_profile_is_within_its_own_range():
    for kind in plausible.KINDS:
        for name in profiles.available(kind):
            assert profiles.profile_path(kind, name) is not None
            assert profile_warnings(kind, name) == [], (kind, name)


def test_the_ranges_are_those_of_the_shipped_profiles_devices_and_servers_apart():
    for kind in plausible.KINDS:
        seen: dict[str, list[float]] = {}
        for path in (profiles.SHIPPED_PROFILES / kind).glob("*.yaml"):
            for field, value in plausible.sourced_numbers(profiles.load_profile(kind, path.stem)):
                seen.setdefault(field, []).append(value)
        assert plausible.shipped_ranges(kind) == {f: (min(v), max(v)) for f, v in seen.items()}
    assert plausible.shipped_ranges("devices")["sustained_flops"] == (4e9, 2.1e12)
    assert plausible.shipped_ranges("servers")["sustained_flops"] == (1.2e12, 2.5e13)
    assert "operator_costs.per_batch_s" in plausible.shipped_ranges("devices")


# ------------------------------------------------------------------------ fleet rows


def fleet_scenario(tmp_path, rows: dict) -> str:
    fleet = tmp_path / "fleet.csv"
    pd.DataFrame(rows).to_csv(fleet, index=False)
    data = copy.deepcopy(TINY)
    data["training"]["timing_only"] = True
    data["algorithm"] = {"name": "fedavg"}
    del data["devices"]
    data["fleet"] = str(fleet)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


FLEET_ROWS = {"profile": ["rpi4", "rpi4", "rpi4"], "link": ["wifi", "wifi", "wifi"],
              "flops_per_s": [1e15, "1000 TFLOPS", 2e10],
              "memory_bytes": ["4 GiB", "16 TiB", "4 GiB"],
              "active_power_w": [0, 6.4, 6.4],  # 0 W: no energy counted, a choice
              "idle_power_w": [2.7, 2.7, "1 mW"],
              "radio_tx_power_w": [1.0, 1.0, 1.0],
              "radio_rx_power_w": [0.7, 0.7, 0.7]}


def test_a_fleet_row_far_outside_the_shipped_devices_is_warned_about(tmp_path):
    path = fleet_scenario(tmp_path, FLEET_ROWS)
    code, out = cli("validate", path)
    assert code == 0, out
    text = one_line(out)
    assert ("row 2, flops_per_s: 1,000 TFLOP/s is more than 10x above the shipped devices' "
            "sustained_flops (4 GFLOP/s to 2.1 TFLOP/s); check the number and its unit "
            "(1 more row like it)") in text, text
    assert "row 3, memory_bytes: 16 TiB is more than 10x above the shipped devices' " \
           "memory_bytes (1 GiB to 64 GiB)" in text
    assert "row 4, idle_power_w: 1 mW is more than 10x below the shipped devices' " \
           "idle_power_w (500 mW to 8 W)" in text
    assert "active_power_w" not in text and "radio" not in text
    assert text.count("warning:") == 3, text


def test_a_fleet_row_far_outside_is_warned_about_when_it_is_read_for_a_run(tmp_path):
    code, out = cli("run", fleet_scenario(tmp_path, FLEET_ROWS), "-q", "-o",
                    str(tmp_path / "out"))
    assert code == 0, out
    text = one_line(out)
    assert "row 2, flops_per_s: 1,000 TFLOP/s is more than 10x above" in text, text
    assert "row 3, memory_bytes: 16 TiB" in text and "row 4, idle_power_w: 1 mW" in text


def test_a_fleet_of_plausible_figures_gets_no_warning(tmp_path):
    rows = {"profile": ["rpi4", ""], "flops_per_s": ["", "25 GFLOPS"],
            "memory_bytes": ["", "6 GiB"], "active_power_w": ["", 0],
            "uplink_bps": ["", "5 Mbit/s"], "downlink_bps": ["", "20 Mbit/s"],
            "latency_s": ["", "20 ms"], "link": ["wifi", ""]}
    code, out = cli("validate", fleet_scenario(tmp_path, rows))
    assert code == 0 and "warning" not in out, out
