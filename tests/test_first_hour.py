"""Small things a new user meets in a first hour with sflsim: a misspelt scenario path
gets a "did you mean" as a misspelt field does; ``--set training.lr`` points at
``training.optimizer.lr``; a run (or sweep) refused for a results folder in use says
nothing about running first; a fleet refused with ``network.traces`` names only that;
simulated time is shown with one rule in every progress line."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from sflsim.cli.common import USER_ERROR
from sflsim.cli.progress_display import PlainProgress, round_line, sim_seconds
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.metrics import results
from tests.conftest import TINY
from tests.test_silent_input import cli, scenario_file

SHIPPED = Path(__file__).resolve().parents[1] / "scenarios"


def one_line(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------ a misspelt scenario or sweep path


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A working folder with scenarios/quickstart.yaml and scenarios/sweeps/seeds.yaml,
    as a checkout has them, made the current folder."""
    (tmp_path / "scenarios" / "sweeps").mkdir(parents=True)
    data = copy.deepcopy(TINY)
    data["training"]["timing_only"] = True
    (tmp_path / "scenarios" / "quickstart.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "scenarios" / "sweeps" / "seeds.yaml").write_text(yaml.safe_dump(
        {"name": "seeds", "base": "scenarios/quickstart.yaml", "axes": {"seed": [1, 2]}}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", [["run", "-q"], ["validate"], ["run", "--no-train"]])
@pytest.mark.parametrize("typed", ["scenarios/quickstrat.yaml", "scenarios/quikstart.yaml",
                                   "scenarios/quickstrat"])
def test_a_misspelt_scenario_path_gets_a_did_you_mean(checkout, command, typed):
    code, out = cli(command[0], typed, *command[1:])
    assert code == USER_ERROR, out
    text = one_line(out)
    assert f"scenario file '{typed}' does not exist" in text, text
    assert text.endswith("did you mean 'scenarios/quickstart.yaml'?"), text


def test_a_misspelt_sweep_path_and_base_get_a_did_you_mean(checkout):
    code, out = cli("sweep", "scenarios/sweeps/seed.yaml", "--dry-run")
    assert code == USER_ERROR
    assert one_line(out).endswith("did you mean 'scenarios/sweeps/seeds.yaml'?"), out
    (checkout / "typo.yaml").write_text(yaml.safe_dump(
        {"name": "t", "base": "scenarios/quickstrt.yaml", "axes": {"seed": [1]}}))
    code, out = cli("sweep", "typo.yaml", "--dry-run")
    assert code == USER_ERROR
    assert one_line(out).endswith("scenarios/quickstart.yaml'?"), out  # the base's folder


def test_an_absolute_path_gets_its_folder_s_closest_name(tmp_path):
    code, out = cli("validate", str(SHIPPED / "multisfl_smal.yaml"))
    assert code == USER_ERROR
    assert one_line(out).endswith(f"did you mean '{SHIPPED / 'multisfl_small.yaml'}'?"), out


def test_a_path_close_to_no_file_gets_no_guess(checkout):
    code, out = cli("validate", "scenarios/completely_different.yaml")
    assert code == USER_ERROR and "did you mean" not in out, out
    code, out = cli("validate", "nowhere/quickstart.yaml")  # no such folder
    assert code == USER_ERROR and "did you mean" not in out, out


# ------------------------------------------------ --set with a field one level off


@pytest.mark.parametrize(("assignment", "meant"), [
    ("training.lr=0.01", "training.optimizer.lr"),
    ("lr=0.01", "training.optimizer.lr"),
    ("training.momentum=0.9", "training.optimizer.momentum"),
    ("training.seed=3", "seed"),
    ("training.rouns=3", "rounds"),  # a misspelling at its own level: as before
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_an_unknown_set_path_suggests_the_closest_existing_one(tmp_path, assignment, meant,
                                                               command):
    args = [command, str(scenario_file(tmp_path)), "--set", assignment]
    code, out = cli(*args, *(["-q", "-o", str(tmp_path / "o")] if command == "run" else []))
    assert code == USER_ERROR, out
    field = assignment.split("=")[0]
    assert f"--set {assignment}: {field}: unknown field; did you mean {meant!r}?" in one_line(out)


def test_a_sweep_set_and_a_scenario_file_get_the_nested_suggestion_too(tmp_path):
    base = scenario_file(tmp_path)
    sweep = tmp_path / "sw.yaml"
    sweep.write_text(yaml.safe_dump({"name": "sw", "base": str(base), "axes": {"seed": [1]}}))
    code, out = cli("sweep", str(sweep), "--dry-run", "--set", "training.lr=0.01")
    assert code == USER_ERROR and "did you mean 'training.optimizer.lr'?" in one_line(out), out
    data = copy.deepcopy(TINY)
    data["training"]["lr"] = 0.01
    with pytest.raises(ConfigError, match=r"training\.lr: unknown field; did you mean "
                                          r"'training\.optimizer\.lr'\?"):
        validate_scenario(data)


# ------------------------------------------------ a refused run prints nothing first


@pytest.fixture
def taken_after_the_check(monkeypatch):
    """Another run takes the folder between the command's check of it and its start
    (two runs started at once): the check finds the folder free, the hold does not."""
    monkeypatch.setattr(results, "check_not_held", lambda *a, **k: None)
    import sflsim.cli.sweep

    monkeypatch.setattr(sflsim.cli.sweep, "check_not_held", lambda *a, **k: None)


def test_a_run_into_a_folder_in_use_is_refused_before_it_says_anything(
        tmp_path, taken_after_the_check):
    out = tmp_path / "out"
    scenario = scenario_file(tmp_path)
    with results.hold_folder(out):  # the other run
        code, output = cli("run", str(scenario), "-o", str(out), "-q")
        assert code == USER_ERROR, output
        assert output.startswith("error: -o "), output
        assert "is in use" in one_line(output) and "torch threads" not in output
        assert len(output.strip().splitlines()) == 1, output  # the refusal alone
    assert not out.exists()  # nothing written, no folder left behind
    code, output = cli("run", str(scenario), "-o", str(out), "-q")  # free again: it runs
    assert code == 0 and output.startswith("running "), output


def test_a_sweep_into_a_folder_in_use_is_refused_before_it_says_anything(
        tmp_path, taken_after_the_check):
    sweep = tmp_path / "sw.yaml"
    sweep.write_text(yaml.safe_dump({"name": "sw", "base": str(scenario_file(tmp_path)),
                                     "axes": {"seed": [1]}}))
    out = tmp_path / "swout"
    with results.hold_folder(out):
        code, output = cli("sweep", str(sweep), "-o", str(out))
        assert code == USER_ERROR, output
        assert output.startswith("error: -o ") and "is in use" in one_line(output), output
        assert "sweep sw:" not in output and len(output.strip().splitlines()) == 1, output


def test_a_run_into_another_run_s_results_is_refused_before_it_says_anything(
        tmp_path, tiny_run):
    out = tmp_path / "out"
    shutil.copytree(tiny_run, out)
    for flags in ([], ["--resume"]):
        code, output = cli("run", str(scenario_file(tmp_path)), "-o", str(out), "-q", *flags)
        assert code == USER_ERROR, output
        assert output.startswith("error: ") and len(output.strip().splitlines()) == 1, output


# ------------------------------------------------ a fleet with network options


@pytest.mark.parametrize(("network", "named", "not_named"), [
    ({"traces": {"a": "t.csv"}}, "network.traces is not available with fleet yet",
     "network.topology"),
    ({"topology": "shared_access", "access_points": {"ap": {"link": "wifi", "groups": ["a"]}}},
     "network.topology: shared_access is not available with fleet yet", "network.traces"),
    ({"topology": "shared_access", "access_points": {"ap": {"link": "wifi", "groups": ["a"]}},
      "traces": {"a": "t.csv"}},
     "network.topology: shared_access and network.traces are not available with fleet yet",
     None),
])
def test_a_fleet_with_network_options_is_refused_naming_only_those_given(tmp_path, network,
                                                                         named, not_named):
    fleet = tmp_path / "fleet.csv"
    fleet.write_text("profile,link\nrpi4,wifi\n")
    data = copy.deepcopy(TINY)
    del data["devices"]
    data.update(fleet=str(fleet), network=network)
    with pytest.raises(ConfigError) as info:
        validate_scenario(data)
    message = str(info.value)
    assert named in message, message
    assert not_named is None or not_named not in message, message


# ------------------------------------------------ simulated time in progress lines


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.25, "0.25"), (0.35, "0.35"), (0.15, "0.15"), (0.45, "0.45"), (0.3125, "0.313"),
    (7.5, "7.5"), (1.0, "1.0"), (12.34, "12.3"), (31.25, "31.3"), (99.96, "100"),
    (9.99e14, "999000000000000"), (1e15, "1.000e+15"), (1e300, "1.000e+300"),
    (1234.5, "1235"), (0.0, "0.0"), (0.0004, "0.0004"), (0.1 + 0.2, "0.3"),
])
def test_simulated_seconds_follow_one_rule(seconds, shown):
    assert sim_seconds(seconds) == shown


def test_every_progress_line_shows_simulated_time_by_that_rule(capsys):
    """The bar's status, the plain line, the evaluating line, the round's line and a
    sweep's line per point: 0.25 s is 0.25 in each (``:.1f`` made it 0.2)."""
    from sflsim.cli.sweep import PrintProgress

    lines: list[str] = []
    plain = PlainProgress(lines.append, interval_s=30.0, step=0.1, min_gap_s=0.0,
                          clock=lambda: 0.0)
    plain.start(total_batches=10, rounds=1)
    plain.round_started(1, 10, lambda: 0.25)
    assert "  sim 0.25 s" in plain.status()
    plain.evaluating(1, 40)
    plain.round_done({"round": 1, "sim_time_s": 0.25, "wall_time_s": 1.0,
                      "server_accuracy": 0.5, "client_accuracy": 0.25, "note": ""})
    assert all("sim 0.25 s" in line for line in lines) and len(lines) == 2, lines
    assert round_line({"round": 1, "sim_time_s": 1234.5, "wall_time_s": 1.0,
                       "server_accuracy": 0.5, "client_accuracy": 0.25}, 1).startswith(
        "round 1/1  sim 1235 s  ")
    with PrintProgress() as shown:
        shown.start(1, 0)
        shown.point_done({"point": "p000", "status": "completed", "final_server_accuracy": 0.5,
                          "final_client_accuracy": 0.25, "sim_time_s": 0.25,
                          "wall_time_s": 2.0})
    assert "sim 0.25 s" in one_line(capsys.readouterr().out)
