"""A sweep keeps each point's input warnings: in the point's ``summary.json`` and
``manifest.json`` as ``sflsim run`` keeps a scenario's, and on the terminal with the
points they concern, at the start and again at the end."""

from __future__ import annotations

import copy
import json

import yaml
from typer.testing import CliRunner

from sflsim.cli.main import app
from tests.conftest import TINY

BARE = "devices.weak.link_override.uplink_bps: 10 is read as 10 bit/s"


def _sweep(tmp_path):
    base = copy.deepcopy(TINY)
    base["training"] |= {"timing_only": True, "rounds": 1}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "base": "base.yaml", "axes": {"devices.weak.link_override.uplink_bps": [10, "20 Mbps"]}}))
    return tmp_path / "s.yaml"


def test_each_point_keeps_its_own_input_warnings(tmp_path):
    result = CliRunner().invoke(app, ["sweep", str(_sweep(tmp_path)), "-o", str(tmp_path / "out"),
                                      "--threads", "1"])
    assert result.exit_code == 0, result.output
    # said with the point it concerns, at the start and again after the table
    assert result.output.count(f"warning: p000: {BARE}") == 2
    assert "p001:" not in result.output.replace("p001 completed", "")
    for point, expected in (("p000", True), ("p001", False)):
        for name in ("summary.json", "manifest.json"):
            kept = json.loads((tmp_path / "out" / "points" / point / name).read_text())["warnings"]
            assert any(m.startswith(BARE) for m in kept) is expected, (point, name, kept)


def test_strict_refuses_naming_the_point(tmp_path):
    result = CliRunner().invoke(app, ["sweep", str(_sweep(tmp_path)), "-o", str(tmp_path / "out"),
                                      "--strict"])
    assert result.exit_code == 2
    assert f"error: p000: {BARE}" in result.output and "refused as an error by --strict" in result.output
    assert not (tmp_path / "out" / "points").exists()


def test_validate_strict_refuses_what_run_strict_refuses(tmp_path):
    base = copy.deepcopy(TINY)
    base["devices"]["weak"]["link_override"] = {"uplink_bps": 10}
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(base))
    runner = CliRunner()
    strict = runner.invoke(app, ["validate", str(path), "--strict"])
    assert strict.exit_code == 2 and BARE in strict.output and "--strict" in strict.output
    plain = runner.invoke(app, ["validate", str(path)])
    assert plain.exit_code == 0 and f"warning: {path}: {BARE}" in plain.output


def test_a_sweep_base_may_name_a_shipped_scenario(tmp_path):
    from sflsim.shipped import scenarios_dir
    from sflsim.sweep import load_sweep

    (tmp_path / "s.yaml").write_text("base: quickstart\naxes: {server.slots: [1, 2]}\n")
    sweep = load_sweep(tmp_path / "s.yaml")
    assert sweep.base_path == scenarios_dir() / "quickstart.yaml" and len(sweep.points) == 2
