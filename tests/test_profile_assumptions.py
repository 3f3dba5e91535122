"""Every shipped profile says plainly which of its numbers are assumptions.

The rule (``device_profiles/README.md``): a number whose ``source`` starts with
``Assumed.`` is a guess, an efficiency factor applied to a peak or a proxy from another
device, whatever its basis. A ``nominal`` number is either such an assumption or a
datasheet figure, whose source names the document (one of :data:`DATASHEET_WORDS`).
``fitted`` numbers are the cost model by operation's, found only in ``operator_costs``.
A profile without ``operator_costs`` names its assumed fields in a comment at the top
(``# Assumed (no measurement found): ...``), and a device without it says that it keeps the
FLOPs rule; ``sflsim profiles show`` and the generated profile library show all of it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.cli.profiles import _human
from sflsim.hardware import profiles
from sflsim.hardware.profiles import KINDS, SHIPPED_PROFILES, _Sourced
from sflsim.inputs.yaml_files import read_yaml_mapping

ASSUMED = "Assumed."
#: a non-assumed nominal number's source names one of these (case aside)
DATASHEET_WORDS = ("datasheet", "specification", "product brief", "documentation")
ASSUMED_LINE = "# Assumed (no measurement found): "
NO_OPERATOR_COSTS_LINE = ("# No operator_costs: under hardware.cost_model: operators this "
                          "device keeps the FLOPs rule (sustained_flops).")
MODELS = {"devices": profiles.DeviceProfile, "links": profiles.LinkProfile,
          "servers": profiles.ServerProfile}

SHIPPED = sorted(path for kind in KINDS for path in (SHIPPED_PROFILES / kind).glob("*.yaml"))
ROOT = Path(__file__).resolve().parents[1]


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _load(path: Path) -> BaseModel:
    """The shipped file itself (not an override on ``$SFLSIM_PROFILE_PATH``), validated."""
    data = read_yaml_mapping(path, what="profile")
    return MODELS[path.parent.name].model_validate({"name": path.stem, **data})


def _sourced(model: BaseModel) -> dict[str, _Sourced]:
    return {k: v for k, v in vars(model).items() if isinstance(v, _Sourced)}


def _every_number(profile: BaseModel) -> dict[str, _Sourced]:
    """Every sourced number of a profile, ``operator_costs.<field>`` for the cost model's."""
    numbers = _sourced(profile)
    costs = getattr(profile, "operator_costs", None)
    if costs is not None:
        numbers |= {f"operator_costs.{k}": v for k, v in _sourced(costs).items()}
    return numbers


def _is_assumed(number: _Sourced) -> bool:
    return number.source.strip().startswith(ASSUMED)


def _header(path: Path) -> list[str]:
    """The comment lines at the top of a profile file."""
    lines = path.read_text().splitlines()
    first = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return lines[:first]


def _assumed_line(path: Path) -> str | None:
    return next((line for line in _header(path) if line.startswith(ASSUMED_LINE)), None)


def test_profiles_are_shipped():
    assert {path.parent.name for path in SHIPPED} == set(KINDS)


@pytest.mark.parametrize("path", SHIPPED, ids=_id)
def test_a_nominal_number_is_an_assumption_or_a_datasheet_figure(path):
    for field, number in _every_number(_load(path)).items():
        if number.basis != "nominal":
            continue
        source = number.source.strip()
        assert source.startswith(ASSUMED) or any(w in source.lower() for w in DATASHEET_WORDS), (
            f"{_id(path)}.{field}: a nominal number's source starts with {ASSUMED!r} or names "
            f"a datasheet ({', '.join(DATASHEET_WORDS)}); got {source!r}")


@pytest.mark.parametrize("path", SHIPPED, ids=_id)
def test_only_operator_costs_are_fitted(path):
    profile = _load(path)
    for field, number in _sourced(profile).items():
        assert number.basis != "fitted", f"{_id(path)}.{field}: fitted outside operator_costs"
    for table in getattr(profile, "stage_latency", None) or []:
        assert table.basis != "fitted", f"{_id(path)}.stage_latency ({table.model})"


@pytest.mark.parametrize("path", SHIPPED, ids=_id)
def test_the_top_comment_names_the_assumed_fields(path):
    """Where the ``# Assumed`` line is (every profile without operator_costs has one), it
    names each field whose source starts with ``Assumed.``; in a profile without
    operator_costs it names no other (``none`` when nothing is assumed)."""
    profile = _load(path)
    line = _assumed_line(path)
    has_costs = getattr(profile, "operator_costs", None) is not None
    if line is None:
        assert has_costs, f"{_id(path)}: no '{ASSUMED_LINE.strip()}' line at the top"
        return
    assert line.endswith("."), line
    numbers = _every_number(profile)
    named = {f for f in numbers if re.search(rf"(?<![\w.]){re.escape(f)}(?!\w)", line)}
    assumed = {f for f, number in numbers.items() if _is_assumed(number)}
    assert assumed <= named, f"{_id(path)}: assumed but not named at the top: {assumed - named}"
    if not has_costs:
        assert named == assumed, f"{_id(path)}: named at the top but not 'Assumed.': " \
                                 f"{named - assumed}"
        if not assumed:
            assert line.startswith(f"{ASSUMED_LINE}none"), line


@pytest.mark.parametrize("path", [p for p in SHIPPED if p.parent.name == "devices"], ids=_id)
def test_a_device_without_operator_costs_says_it_keeps_the_flops_rule(path):
    if getattr(_load(path), "operator_costs", None) is None:
        assert NO_OPERATOR_COSTS_LINE in _header(path), _id(path)


def test_operator_costs_are_fitted_on_the_shipped_pis():
    """The devices with operator_costs (rpi4 at least) carry fitted numbers, rows and errors."""
    rpi4 = _load(SHIPPED_PROFILES / "devices" / "rpi4.yaml")
    assert rpi4.operator_costs is not None
    assert {n.basis for n in _sourced(rpi4.operator_costs).values()} == {"fitted"}
    assert rpi4.operator_costs.fitted_on


# ------------------------------------------------------------------ what the CLI and docs show

def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_profiles_show_rpi4_prints_the_operator_costs():
    rpi4 = _load(SHIPPED_PROFILES / "devices" / "rpi4.yaml")
    out = _cli("profiles", "show", "rpi4", "--kind", "devices")
    assert "cost model: operators (fitted)" in out
    for field, number in _sourced(rpi4.operator_costs).items():
        row = next((line for line in out.splitlines() if f" {field} " in line), None)
        assert row is not None, field
        assert _human(field, number.value) in row and "fitted" in row, row
    assert "GFLOP/s" in out and "GB/s" in out and " us " in out and " ms " in out
    assert "fitted_on" in out and "held_out_error" in out
    for label in rpi4.operator_costs.fitted_on:
        assert label in out, label
    for label, error in rpi4.operator_costs.held_out_error.items():
        assert f"{label}: {error:+.1%}" in out, label


def test_profiles_show_marks_assumptions_and_flops_only():
    out = _cli("profiles", "show", "laptop_cpu")
    assert "cost model: FLOPs only" in out and "keeps the FLOPs rule" in out
    assert "derived, assumed" in out and "nominal, assumed" in out


def test_profiles_list_names_fitted_assumed_and_the_cost_model():
    out = _cli("profiles", "list", "--kind", "devices")
    assert "f = fitted" in out and "* = assumed" in out and "cost model" in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│ ")}
    assert "operators (fitted)" in rows["rpi4"]
    assert "FLOPs only" in rows["laptop_cpu"] and "90 d*" in rows["laptop_cpu"]


def _gen_profiles():
    name = "gen_profiles"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_the_profile_library_lists_operator_costs_and_marks_assumptions():
    page = _gen_profiles().profile_library_markdown()
    lines = page.splitlines()
    rpi4 = _load(SHIPPED_PROFILES / "devices" / "rpi4.yaml")
    for field in _sourced(rpi4.operator_costs):
        assert any(line.startswith(f"| `rpi4` | `operator_costs.{field}` | ") and "| fitted |" in line
                   for line in lines), field
    assert any(line.startswith("| `rpi4` | operators (fitted) | ") for line in lines)
    assert any(line.startswith("| `laptop_cpu` | FLOPs only | ") for line in lines)
    wifi_latency = next(line for line in lines if line.startswith("| `wifi` | `latency_s` | "))
    assert "| **assumed** · Assumed." in wifi_latency
    laptop = next(line for line in lines if line.startswith("| `laptop_cpu` | Laptop"))
    assert "`sustained_flops`" in laptop and "`active_power_w`" not in laptop
