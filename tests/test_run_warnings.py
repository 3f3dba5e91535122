"""Input warnings that stay: said at the start of a run and again at its end, kept in
``summary.json`` and ``manifest.json``, refused by ``--strict``; and an implausible
outcome (over a year simulated, over 1 kWh per device and round) flagged when a run
ends. Timing-only runs of the tiny scenario (nothing trains)."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.config.input_warnings import (
    STRICT_NOTE,
    input_warnings,
    kept_warnings,
    run_warnings,
    warn,
)
from sflsim.errors import ConfigError
from sflsim.run.summary import Totals, gist, outcome_warnings
from tests.conftest import TINY

UPLINK = "devices.weak.link_override.uplink_bps"
LATENCY = "devices.mid.link_override.latency_s"
#: rounds of the tiny scenario with a 10 bit/s uplink that simulate over a year (each
#: round sends 35 kB up the slow link, about 800,000 s)
ROUNDS_OVER_A_YEAR = 45


def cli(*args: str) -> tuple[int, str]:
    """``sflsim ARGS``: exit code and stdout + stderr; no exception may escape."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"sflsim {' '.join(args)} raised {result.exception!r}")
    return result.exit_code, result.output


def timing_only(tmp_path: Path, **training) -> Path:
    """The tiny scenario, timing only, written to ``tmp_path/s.yaml``."""
    data = copy.deepcopy(TINY)
    data["training"].update(timing_only=True, **training)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def read(out: Path, name: str) -> dict:
    return json.loads((out / name).read_text())


def test_a_run_says_its_warnings_at_the_end_and_keeps_them(tmp_path):
    path, out = timing_only(tmp_path, rounds=ROUNDS_OVER_A_YEAR), tmp_path / "out"
    code, output = cli("run", str(path), "-q", "-o", str(out), "--threads", "1",
                       "--set", f"{UPLINK}=10", "--set", f"{LATENCY}=35")
    assert code == 0, output
    lines = output.splitlines()
    uplink = [i for i, line in enumerate(lines)
              if line.startswith(f"warning: --set {UPLINK}=10: {UPLINK}: 10 is read as 10 bit/s")]
    table_end = max(i for i, line in enumerate(lines) if "client energy" in line)
    assert len(uplink) == 2 and uplink[0] < table_end < uplink[1], output  # start and end
    assert sum(line.startswith(f"warning: --set {LATENCY}=35: {LATENCY}: 35 is read as 35 s")
               for line in lines) == 2, output

    summary, manifest = read(out, "summary.json"), read(out, "manifest.json")
    inputs = [w for w in summary["warnings"] if not w.startswith("implausible outcome")]
    assert len(inputs) == 2 and any(w.startswith(f"--set {UPLINK}=10: {UPLINK}: 10 is read as "
                                                 f"10 bit/s") for w in inputs), summary
    assert manifest["warnings"] == inputs
    assert summary["sim_time_s"] > 365.25 * 86_400
    outcome = [w for w in summary["warnings"] if w.startswith("implausible outcome")]
    assert len(outcome) == 1, summary["warnings"]
    assert "is over one year" in outcome[0] and f"{UPLINK}: 10 is read as 10 bit/s" in outcome[0]
    assert f"warning: {outcome[0]}" in output.splitlines()[table_end + 1:]


def test_a_clean_run_keeps_an_empty_list(tmp_path):
    path, out = timing_only(tmp_path), tmp_path / "out"
    code, output = cli("run", str(path), "-q", "-o", str(out), "--threads", "1", "--strict")
    assert code == 0, output
    assert "warning" not in output
    assert read(out, "summary.json")["warnings"] == [] == read(out, "manifest.json")["warnings"]


def test_strict_refuses_each_warning_in_one_line_before_anything_runs(tmp_path):
    path, out = timing_only(tmp_path), tmp_path / "out"
    code, output = cli("run", str(path), "-q", "-o", str(out), "--strict",
                       "--set", f"{UPLINK}=10", "--set", f"{LATENCY}=35")
    assert code == USER_ERROR, output
    lines = output.splitlines()
    assert len(lines) == 2 and all(line.startswith("error: --set ") for line in lines), output
    assert all(line.endswith(STRICT_NOTE) for line in lines)
    assert any(f"{UPLINK}: 10 is read as 10 bit/s" in line for line in lines)
    assert any(f"{LATENCY}: 35 is read as 35 s" in line for line in lines)
    assert "running" not in output and "warning:" not in output and not out.exists()


@pytest.mark.parametrize("dry_run", [True, False])
def test_sweep_strict_refuses_the_warnings_of_its_points(tmp_path, dry_run):
    base = timing_only(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: sw\nbase: {base}\naxes: {{{UPLINK}: [10, 5 Mbit/s]}}\n")
    out = tmp_path / "sw"
    code, output = cli("sweep", str(sweep), "-o", str(out), "--strict",
                       *(["--dry-run"] if dry_run else []))
    assert code == USER_ERROR, output
    (line,) = output.splitlines()
    assert line.startswith("error: ") and f"{UPLINK}: 10 is read as 10 bit/s" in line, output
    assert not out.exists()
    code, output = cli("sweep", str(sweep), "-o", str(out), "--dry-run")  # not strict: runs
    assert code == 0 and output.count("10 is read as 10 bit/s") == 1, output


def test_the_docs_recommend_strict_for_sweeps():
    root = Path(__file__).resolve().parents[1]
    for page in ("docs/reference/cli.md", "docs/reference/sweeps.md"):
        assert "--strict" in (root / page).read_text(), page


# ------------------------------------------------------------------- the library


def test_run_warnings_keep_each_warning_once_and_say_new_ones(capsys):
    with run_warnings(["given"]) as found:
        warn("given")  # said when the scenario loaded: not said again
        warn("built")
        warn("built")
        with input_warnings(lambda m: None):  # a block inside the run keeps its own
            warn("inner")
        assert kept_warnings() == ["given", "built"] == found
    assert kept_warnings() == []
    assert capsys.readouterr().err == "warning: built\n"


def test_a_strict_run_raises_a_warning_of_its_build():
    with run_warnings(strict=True), pytest.raises(ConfigError) as refused:
        warn("built")
    assert str(refused.value) == f"built {STRICT_NOTE}"
    with pytest.raises(ConfigError, match="^given .*; and 1 more$"):
        with run_warnings(["given", "another"], strict=True):
            pass


def test_run_scenario_keeps_the_warnings_given(tiny, tmp_path):
    from sflsim.runner import run_scenario

    tiny["training"]["timing_only"] = True
    out = tmp_path / "out"
    result = run_scenario(validate_scenario(tiny), out, warnings=["x.yaml: a.b: odd"])
    assert result.summary["warnings"] == ["x.yaml: a.b: odd"]
    assert read(out, "summary.json")["warnings"] == ["x.yaml: a.b: odd"]
    assert read(out, "manifest.json")["warnings"] == ["x.yaml: a.b: odd"]
    with pytest.raises(ConfigError, match=re.escape(f"a.b: odd {STRICT_NOTE}")):
        run_scenario(validate_scenario(tiny), tmp_path / "strict", warnings=["a.b: odd"],
                     strict=True)
    assert not (tmp_path / "strict").exists()


# ------------------------------------------------------------ implausible outcomes


def totals(sim_time_s: float, energy_j: float, rounds: int = 1) -> Totals:
    """The totals of ``rounds`` rounds ending at ``sim_time_s`` with ``energy_j`` in all."""
    rows = [{"round": r, "sim_time_s": sim_time_s * r / max(rounds, 1), "server_accuracy": 0.5,
             "bytes_up": 0, "bytes_down": 0, "client_flops": 0, "server_flops": 0,
             "client_energy_j": energy_j / rounds if r else 0} for r in range(rounds + 1)]
    return Totals(rows)


@pytest.mark.parametrize(("sim_time_s", "flagged"), [(3.0e7, False), (3.2e7, True)])
def test_over_a_year_of_simulated_time_is_flagged(sim_time_s, flagged):
    scenario = validate_scenario(copy.deepcopy(TINY))  # 3 clients
    found = outcome_warnings(scenario, totals(sim_time_s, 1.0), [])
    assert bool(found) == flagged
    if flagged:
        assert found[0].startswith("implausible outcome: simulated time 32,000,000 s (1.0 years)")
        assert "no input was warned about" in found[0]


@pytest.mark.parametrize(("energy_j", "flagged"), [(3 * 2 * 3.5e6, False), (3 * 2 * 3.7e6, True)])
def test_over_a_kilowatt_hour_per_device_and_round_is_flagged(energy_j, flagged):
    scenario = validate_scenario(copy.deepcopy(TINY))  # 3 clients, here 2 rounds
    found = outcome_warnings(scenario, totals(10.0, energy_j, rounds=2),
                             ["s.yaml: devices.x.active_power_w: 6400 is read as 6400 W, over "
                              "1 kW; did you mean \"6400 mW\"?"])
    assert bool(found) == flagged
    if flagged:
        assert "1.0 kWh per device and round, over 1 kWh" in found[0]
        assert found[0].endswith('likely cause, as warned when the run started: '
                                 '"s.yaml: devices.x.active_power_w: 6400 is read as 6400 W"')


def test_a_year_without_a_client_online_is_named_as_the_cause(tmp_path):
    """Simulated time (and idle energy) past the bounds because the availability trace
    leaves every client offline for years: the warning names that gap, not the units of
    the links and the devices."""
    trace = tmp_path / "availability.csv"
    groups = validate_scenario(copy.deepcopy(TINY)).client_groups()
    trace.write_text("device,online_from_s,online_until_s\n" + "".join(
        f"{group},0,3\n{group},1e9,inf\n" for group in groups))
    scenario = validate_scenario({**copy.deepcopy(TINY),
                                  "conditions": {"availability": str(trace)}})
    found = outcome_warnings(scenario, totals(1e9 + 5, 1.0), [])
    assert len(found) == 1
    assert found[0].endswith(f"likely cause: no client is online from 3 s to 1,000,000,000 s "
                             f"in the availability trace (conditions.availability: {trace}), "
                             "and a round that starts with none online waits, its devices "
                             "idle, for the first to come online (the trace's times are "
                             "seconds of simulated time)")
    # a gap shorter than half the run is not the cause: the units are looked at
    trace.write_text("device,online_from_s,online_until_s\n" + "".join(
        f"{group},0,3\n{group},10,inf\n" for group in groups))
    assert "no input was warned about" in outcome_warnings(scenario, totals(1e9, 1.0), [])[0]


def test_the_times_without_a_client_online():
    from sflsim.availability import AvailabilityTrace

    trace = AvailabilityTrace({0: [(0, 3), (10, 12)], 1: [(2, 5), (30, 40)]}, num_clients=2)
    assert trace.gaps(100.0) == [(5, 10), (12, 30), (40, 100.0)]
    assert trace.gaps(35.0) == [(5, 10), (12, 30)]
    assert trace.gaps(8.0) == [(5, 8.0)]  # cut at the run's end
    assert AvailabilityTrace({0: [(1, 3)]}, num_clients=2).gaps(100.0) == []
    assert AvailabilityTrace({0: [(0, math.inf)]}, num_clients=1).gaps(1e9) == []


def test_gaps_that_add_up_to_most_of_the_run_are_named_too(tmp_path):
    """Every client online 3 s in every 1.5e7 s: no gap alone is half the run, together
    they are almost all of it."""
    trace = tmp_path / "availability.csv"
    groups = validate_scenario(copy.deepcopy(TINY)).client_groups()
    trace.write_text("device,online_from_s,online_until_s\n" + "".join(
        f"{group},{k * 15_000_000},{k * 15_000_000 + 3}\n" for group in groups for k in range(4)))
    scenario = validate_scenario({**copy.deepcopy(TINY),
                                  "conditions": {"availability": str(trace)}})
    found = outcome_warnings(scenario, totals(45_000_003, 1.0), [])
    assert "likely cause: no client is online for 44,999,991 s of the run's 45,000,003 s, in " \
           "3 gaps (the longest from 3 s to 15,000,000 s) in the availability trace" in found[0]


def test_the_gist_of_a_warning_is_its_field_and_reading():
    assert gist("--set a.b=10: a.b: 10 is read as 10 bit/s, under 1 kbit/s (shipped: x)") == \
        "--set a.b=10: a.b: 10 is read as 10 bit/s"
    assert gist("--set x.l={up_bps: 10, down_bps: 10}: x.l.down_bps: 10 is read as 10 bit/s, "
                "under 1 kbit/s") == "--set x.l={up_bps: 10, down_bps: 10}: x.l.down_bps: 10 is " \
                                     "read as 10 bit/s"
    assert gist("no cut here") == "no cut here"


@pytest.mark.parametrize(("training", "expected"), [
    ({"parallel_backend": "processes"},
     "training.parallel_backend: 'processes' has no effect with training.parallel_clients: 1"),
    ({"parallel_clients": 2, "timing_only": True},
     "training.parallel_clients: 2 has no effect in a timing-only run"),
    ({"server": {"priorities": {"g": 0}}},
     "server.priorities: {'g': 0} has no effect with server.queue: 'fifo'"),
])
def test_settings_without_effect_are_warned_once(training, expected):
    """A worker backend with one client at a time, parallel clients in a run that trains
    nothing, priorities under a first-come queue: valid, but not what was meant; said
    once, and refused by --strict."""
    data = copy.deepcopy(TINY)
    data["algorithm"] = {"name": "fedavg"}
    training = dict(training)
    server = training.pop("server", None)
    if server:
        data["server"] = {**data.get("server", {}), **server}
        data["devices"] = {"g": next(iter(data["devices"].values()))}
    data["training"].update(training)
    with input_warnings(lambda m: None) as said:
        validate_scenario(data)
    assert len(said) == 1 and said[0].startswith(expected), said
    data["training"].update(parallel_clients=2, timing_only=False)
    if server:
        data["server"]["queue"] = "priority"
    with input_warnings(lambda m: None) as said:
        validate_scenario(data)
    assert said == []  # two workers of the backend asked for, a priority queue: nothing to say
