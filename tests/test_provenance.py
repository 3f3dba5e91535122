"""Provenance of a run: the machine and source it was made on, and every input file it
read, hashed and kept in its folder, so the folder is self-contained."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil

import pandas as pd
import yaml

from sflsim.config.load import load_scenario
from sflsim.provenance import cpu_flags, cpu_model, sha256_of
from sflsim.runner import run_scenario
from sflsim.sweep import load_sweep


def timing(data: dict) -> dict:
    data = copy.deepcopy(data)
    data["training"]["timing_only"] = True
    data["training"]["rounds"] = 1
    data["evaluation"]["early_exit"] = {"enabled": False}
    return data


def fleet_scenario(tiny, folder) -> tuple:
    """A scenario file in ``folder`` whose fleet (``fleet.csv``, beside it) is named by a
    relative path; returns (scenario path, fleet path)."""
    folder.mkdir(parents=True, exist_ok=True)
    fleet = folder / "fleet.csv"
    pd.DataFrame({"profile": ["rpi4", "jetson_nano"], "link": ["wifi", "lte"]}).to_csv(
        fleet, index=False)
    data = timing(tiny)
    del data["devices"]
    data["fleet"] = "fleet.csv"
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, fleet


def test_a_relative_fleet_is_found_beside_its_scenario_file(tiny, tmp_path, monkeypatch):
    path, fleet = fleet_scenario(tiny, tmp_path / "study")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the scenario's folder
    assert load_scenario(path).fleet == str(fleet.resolve())


def test_a_sweeps_base_finds_its_fleet_beside_it(tiny, tmp_path, monkeypatch):
    path, fleet = fleet_scenario(tiny, tmp_path / "study")
    sweep = tmp_path / "sweeps" / "seeds.yaml"
    sweep.parent.mkdir()
    sweep.write_text(yaml.safe_dump({"base": "../study/scenario.yaml", "axes": {"seed": [0, 1]}}))
    monkeypatch.chdir(tmp_path / "sweeps")
    points = load_sweep(sweep).points
    assert [p.scenario.fleet for p in points] == [str(fleet.resolve())] * 2


def test_a_run_records_its_machine_source_and_inputs(tiny, tmp_path, monkeypatch):
    path, fleet = fleet_scenario(tiny, tmp_path / "study")
    out = tmp_path / "run"
    run_scenario(load_scenario(path), out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cpu"] == cpu_model() and manifest["cpu_flags"] == cpu_flags()
    assert {"git_commit", "git_dirty", "sflsim", "torch_cpu_capability"} <= set(manifest)
    inputs = manifest["inputs"]
    assert inputs["fleet"]["sha256"] == hashlib.sha256(fleet.read_bytes()).hexdigest()
    assert inputs["fleet"]["path"] == str(fleet.resolve())
    for field, entry in inputs.items():  # every input has a copy in the folder, same bytes
        assert sha256_of(out / entry["copy"]) == entry["sha256"], field
    assert any(e["copy"] == "profiles/devices/rpi4.yaml" for e in inputs.values())


def test_a_moved_run_folder_runs_again_from_its_own_copies(tiny, tmp_path):
    path, fleet = fleet_scenario(tiny, tmp_path / "study")
    out = tmp_path / "run"
    first = run_scenario(load_scenario(path), out).events.copy()  # read before the move
    moved = tmp_path / "moved"
    shutil.move(out, moved)
    shutil.rmtree(tmp_path / "study")  # the fleet the scenario names is gone
    scenario = load_scenario(moved / "scenario.yaml")
    assert scenario.fleet == str((moved / "inputs" / "fleet" / "fleet.csv").resolve())
    again = run_scenario(scenario)
    pd.testing.assert_frame_equal(first, again.events)


def test_a_rerun_into_the_same_folder_replaces_the_input_copies(tiny, tmp_path):
    path, fleet = fleet_scenario(tiny, tmp_path / "study")
    out = tmp_path / "run"
    run_scenario(load_scenario(path), out)
    pd.DataFrame({"profile": ["rpi5"], "link": ["wifi"]}).to_csv(fleet, index=False)
    run_scenario(load_scenario(path), out, overwrite=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (out / "inputs" / "fleet" / "fleet.csv").read_bytes() == fleet.read_bytes()
    assert manifest["inputs"]["fleet"]["sha256"] == sha256_of(fleet)
