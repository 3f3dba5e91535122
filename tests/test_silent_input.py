"""Input that was accepted without a word although it was surely not what was meant:
bare numbers in unit fields far from real hardware, one client per round, analysis
scripts given runs they do not tabulate, sweeps on a busy machine, ``--set a.b value``,
a run given twice to ``compare``, a profile name in the wrong case."""

from __future__ import annotations

import copy
import os
import runpy
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.hardware import profiles
from sflsim.threads import MAX_THREADS
from tests.conftest import TINY, sourced
from tests.test_plots import write_run, write_sweep

ROOT = Path(__file__).resolve().parents[1]
ANALYSIS = ROOT / "analysis"


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``sflsim ARGS``: exit code and stdout + stderr; no exception may escape."""
    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"sflsim {' '.join(args)} raised {result.exception!r}")
    return result.exit_code, result.output


def scenario_file(tmp_path: Path, **changes) -> Path:
    """The tiny scenario, timing only (nothing trains), written to a file, with
    ``changes``: keys are field paths with ``__`` for dots
    (``training__clients_per_round=1``)."""
    data = copy.deepcopy(TINY)
    data["training"]["timing_only"] = True
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ------------------------------------------------------ bare numbers in unit fields

UPLINK = "devices.weak.link_override.uplink_bps"
LATENCY = "devices.mid.link_override.latency_s"


def test_bare_numbers_far_from_real_links_are_warned_about_at_validate(tmp_path):
    path = scenario_file(tmp_path, devices__weak__link_override__uplink_bps=5,
                         devices__mid__link_override__latency_s=35)
    code, out = cli("validate", str(path))
    assert code == 0, out
    text = " ".join(out.split())
    assert (f'warning: {path}: {UPLINK}: 5 is read as 5 bit/s, under 1 kbit/s (shipped links: '
            f'20 kbit/s to 941 Mbit/s); did you mean "5 Mbit/s"?') in text
    assert f'{LATENCY}: 35 is read as 35 s, over 5 s' in text and 'did you mean "35 ms"?' in text
    assert "Traceback" not in out and out.count("warning:") == 2


def test_values_with_units_and_plausible_bare_numbers_do_not_warn(tmp_path):
    path = scenario_file(tmp_path, devices__weak__link_override__uplink_bps="5 bit/s",
                         devices__mid__link_override__latency_s="35 s",
                         devices__strong__link_override__uplink_bps=5e6)
    code, out = cli("validate", str(path))
    assert code == 0, out
    assert "warning" not in out


def test_run_warns_and_names_the_set_that_gave_the_number(tmp_path):
    path = scenario_file(tmp_path)
    code, out = cli("run", str(path), "-q", "-o", str(tmp_path / "out"),
                    "--set", f"{UPLINK}=5", "--set", f"{LATENCY}=35")
    assert code == 0, out
    text = " ".join(out.split())
    assert f'warning: --set {UPLINK}=5: {UPLINK}: 5 is read as 5 bit/s' in text
    assert f'warning: --set {LATENCY}=35: {LATENCY}: 35 is read as 35 s' in text


def test_a_sweep_warns_once_for_all_its_points(tmp_path):
    path = scenario_file(tmp_path, devices__weak__link_override__uplink_bps="5")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: sw\nbase: {path}\naxes: {{seed: [1, 2, 3]}}\n")
    code, out = cli("sweep", str(sweep), "--dry-run", "-o", str(tmp_path / "sw"))
    assert code == 0, out
    text = " ".join(out.split())
    assert text.count(f'{UPLINK}: 5 is read as 5 bit/s') == 1, out
    assert 'did you mean "5 Mbit/s"?' in text


def test_bare_numbers_in_a_profile_file_are_warned_about(tiny, profile_dir, capsys):
    fields = {"description": "mistyped", "sustained_flops": sourced(16),
              "memory_bytes": sourced(4), "active_power_w": sourced(6400),
              "idle_power_w": sourced("2 W"), "radio_tx_power_w": sourced(1),
              "radio_rx_power_w": sourced(0.7)}
    profile_dir("devices", "board", yaml.safe_dump(fields))
    link = {"description": "mistyped", "uplink_bps": sourced(10), "downlink_bps": sourced("10 Mbps"),
            "latency_s": sourced(20)}
    profile_dir("links", "slow", yaml.safe_dump(link))
    tiny["devices"]["weak"].update(profile="board", link="slow")
    validate_scenario(tiny)
    err = " ".join(capsys.readouterr().err.split())
    assert 'sustained_flops.value: 16 is read as 16 FLOP/s' in err and '"16 GFLOPS"' in err
    assert 'memory_bytes.value: 4 is read as 4 B' in err and '"4 GiB"' in err
    assert 'active_power_w.value: 6400 is read as 6400 W, over 1 kW' in err and '"6400 mW"' in err
    assert 'uplink_bps.value: 10 is read as 10 bit/s' in err and '"10 Mbit/s"' in err
    assert 'latency_s.value: 20 is read as 20 s' in err and '"20 ms"' in err
    assert "idle_power_w" not in err and "radio" not in err and "downlink" not in err
    assert err.count("warning: profile ") == 5
    code, out = cli("profiles", "show", "board")
    assert code == 0 and 'did you mean "16 GFLOPS"?' in " ".join(out.split())


def test_the_bounds_lie_far_beyond_every_shipped_profile():
    """Derived from device_profiles/: each bound beyond every shipped value (all but power
    by a factor of 5 or more), and the ranges the warning quotes are the shipped ones."""
    from sflsim.inputs.quantities import PLAUSIBLE

    by_field = {"sustained_flops": "flops", "memory_bytes": "bytes", "uplink_bps": "bandwidth",
                "downlink_bps": "bandwidth", "latency_s": "time"}
    seen: dict[str, list[float]] = {}
    for kind in profiles.KINDS:
        for path in (profiles.SHIPPED_PROFILES / kind).glob("*.yaml"):
            profile = profiles.load_profile(kind, path.stem)
            for field, value in vars(profile).items():
                if isinstance(value, profiles._Sourced):
                    dimension = "power" if field.endswith("power_w") else by_field[field]
                    seen.setdefault(dimension, []).append(value.value)
    for rule in PLAUSIBLE:
        lo, hi = min(seen[rule.dimension]), max(seen[rule.dimension])
        assert rule.shipped == pytest.approx((lo, hi), rel=0.01), rule
        margin = 1 if rule.dimension == "power" else 5
        if rule.low is not None:
            assert rule.low * margin < lo, rule
        if rule.high is not None:
            assert rule.high > hi * margin, rule


def test_one_client_per_round_is_said_at_the_start_of_the_run(tmp_path):
    path = scenario_file(tmp_path, training__clients_per_round=1)
    code, out = cli("run", str(path), "-q", "-o", str(tmp_path / "out"))
    assert code == 0, out
    text = " ".join(out.split())
    assert "training.clients_per_round: 1 trains 1 of 3 clients per round" in text
    code, out = cli("validate", str(path), "--set", "training.clients_per_round=1.0")
    assert code == 0 and "clients per round" not in out
    code, out = cli("validate", str(path), "--set", "training.clients_per_round=2")
    assert code == 0 and "2 of 3 clients per round" in " ".join(out.split())
    assert "warning" not in out


# -------------------------------------------------------------- analysis scripts


def analysis_main(script: str, *args: str) -> str:
    """Run ``analysis/<script>``'s main; the one line it exits with."""
    module = runpy.run_path(str(ANALYSIS / script))
    with pytest.raises(SystemExit) as exit_:
        module["main"]([*map(str, args)])
    message = str(exit_.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


@pytest.mark.parametrize("algorithm", ["multisfl", "fedsga", "fedavg"])
def test_table_iv_refuses_runs_of_methods_it_does_not_compare(tmp_path, algorithm):
    seq = write_run(tmp_path / "seq", "hetero_splitee_sequential")
    other = write_run(tmp_path / "x", algorithm)
    message = analysis_main("table_iv.py", seq, other)
    assert message.startswith(f"error: {other} is a") and f"{algorithm} run" in message
    assert "Table IV tabulates Hetero-SplitEE strategies and their baselines: " \
           "hetero_splitee_sequential, hetero_splitee_averaging, distributed, centralized" in message


def test_table_iv_refuses_a_timing_only_run_and_two_runs_of_one_method(tmp_path):
    timing = write_run(tmp_path / "timing", accuracies=(float("nan"),) * 2, untrained=None)
    (timing / "scenario.yaml").write_text("training: {timing_only: true}\n")
    message = analysis_main("table_iv.py", timing)
    assert f"{timing} has no accuracy to tabulate: it is a timing-only run" in message
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    message = analysis_main("table_iv.py", a, b)
    assert f"{a} and {b} are both hetero_splitee_sequential runs" in message


def test_table5_refuses_runs_without_what_it_tabulates(tmp_path):
    good = write_run(tmp_path / "fedsga", "fedsga")
    timing = write_run(tmp_path / "timing", "multisfl", accuracies=(float("nan"),) * 2)
    summary = (timing / "summary.json").read_text().replace("NaN", "null")
    (timing / "summary.json").write_text(summary)
    (timing / "scenario.yaml").write_text("training: {timing_only: true}\n")
    message = analysis_main("table5.py", good, timing)
    assert f"{timing} has no final accuracy to tabulate: it is a timing-only run" in message
    old = write_run(tmp_path / "old", "multisfl")
    rounds = pd.read_csv(old / "rounds.csv").drop(columns=["activated_params_mean"])
    rounds.to_csv(old / "rounds.csv", index=False)
    message = analysis_main("table5.py", good, old)
    assert f"{old}/rounds.csv has no activated_params_mean column" in message
    assert "older sflsim" in message


# --------------------------------------------------------------- sweeps: --threads

SWEEP = ROOT / "scenarios" / "sweeps" / "device_mix.yaml"


def test_sweep_takes_threads(tmp_path):
    code, out = cli("sweep", str(SWEEP), "--dry-run", "--threads", "1", "-o", str(tmp_path / "s"))
    assert code == 0, out
    assert "torch threads: 1 per point (--threads 1)" in out


@pytest.mark.parametrize("threads", ["0", "-1", str(MAX_THREADS + 1)])
def test_sweep_threads_out_of_range_is_refused_as_run_refuses_it(threads, tmp_path):
    code, out = cli("sweep", str(SWEEP), "--dry-run", "--threads", threads, "-o", str(tmp_path / "s"))
    assert code == USER_ERROR, out
    assert f"--threads {threads} is out of range; valid: 1 to {MAX_THREADS}" in out
    assert "Traceback" not in out and "sweep device_mix:" not in out


def test_sweep_threads_with_ray_is_refused(tmp_path):
    code, out = cli("sweep", str(SWEEP), "--dry-run", "--threads", "1", "--executor", "ray",
                    "-o", str(tmp_path / "s"))
    assert code == USER_ERROR, out
    assert "--threads 1: sets the threads of local points" in out and "--cpus-per-point" in out


def test_sweep_threads_reach_the_points(tmp_path, monkeypatch):
    from sflsim.sweep import execute

    seen: list[tuple[str, int | None]] = []

    def fake_point(point_id, scenario_data, run_dir, threads=None, warnings=()):
        seen.append((point_id, threads))
        return execute.PointOutcome(point_id, "failed", error="not run")

    monkeypatch.setattr(execute, "run_point", fake_point)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: s\nbase: {ROOT / 'scenarios' / 'bench_fedavg_cnn.yaml'}\n"
                     f"axes: {{seed: [1, 2]}}\n")
    code, out = cli("sweep", str(sweep), "--threads", "3", "-o", str(tmp_path / "out"))
    assert seen == [("p000", 3), ("p001", 3)], out
    assert os.environ["OMP_NUM_THREADS"] == "1"  # as it was


def test_sweep_on_a_busy_machine_gets_the_note_run_gets(tmp_path, monkeypatch):
    from sflsim import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr("sflsim.cli.sweep.measured_busy_cores", lambda started: 1.5)
    code, out = cli("sweep", str(SWEEP), "--dry-run", "-o", str(tmp_path / "s"))
    assert code == 0, out
    text = " ".join(out.split())
    assert "torch threads: 2 per point (2 usable cores)" in text
    assert "note: other processes kept about 1.5 of the 2 usable cores busy" in text
    assert "--threads 1 (or OMP_NUM_THREADS=1) avoids that" in text
    code, out = cli("sweep", str(SWEEP), "--dry-run", "--threads", "2", "-o", str(tmp_path / "s"))
    assert code == 0 and "note:" not in out  # an explicit choice gets no note


# ------------------------------------------------------------------- smaller ones


@pytest.mark.parametrize("command", [
    ["validate", str(ROOT / "scenarios" / "quickstart.yaml")],
    ["run", str(ROOT / "scenarios" / "quickstart.yaml"), "-o", "never"],
    ["sweep", str(SWEEP), "--dry-run", "-o", "never"],
], ids=["validate", "run", "sweep"])
@pytest.mark.parametrize(("typed", "shown"), [
    (["--set", "training.rounds", "2"], "--set 'training.rounds' 2"),
    (["--set", "training.rounds=", "2"], "--set 'training.rounds=' 2"),
], ids=["space", "space-after-equals"])
def test_a_set_without_equals_is_told_in_one_line(command, typed, shown, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = cli(*command, *typed)
    assert code == USER_ERROR, out
    assert out.count("error:") == 1 and "unexpected extra argument" not in out, out
    assert f"{shown}: --set takes a.b=value" in out and "e.g. --set training.rounds=2" in out
    assert not (tmp_path / "never").exists()


def test_compare_lists_a_run_given_twice_once(tmp_path):
    run = write_run(tmp_path / "a", "fedavg")
    code, out = cli("compare", str(run), f"{run}/", "-o", str(tmp_path / "t.csv"))
    assert code == 0, out
    assert len(pd.read_csv(tmp_path / "t.csv")) == 1
    assert "is given twice" in out and "listed once" in out


def test_compare_lists_a_sweep_point_given_with_its_sweep_once(tmp_path):
    sweep = write_sweep(tmp_path / "sweep")
    code, out = cli("compare", str(sweep), str(sweep / "points" / "p000"),
                    "-o", str(tmp_path / "t.csv"))
    assert code == 0, out
    assert len(pd.read_csv(tmp_path / "t.csv")) == 2  # the sweep's two completed points
    assert "is a point of the sweep" in out


@pytest.mark.parametrize(("typed", "meant", "kind"), [
    ("RPi4", "rpi4", "devices"), ("WIFI", "wifi", "links"), ("CPU_SERVER", "cpu_server", "servers"),
])
def test_profiles_show_suggests_the_name_case_aside(typed, meant, kind):
    for extra in ([], ["--kind", kind]):
        code, out = cli("profiles", "show", typed, *extra)
        assert code == USER_ERROR, out
        assert f"Did you mean {meant!r}" in out and out.count("error:") == 1, out


def test_a_scenario_profile_name_in_another_case_gets_a_suggestion(tiny):
    for group, field, value, meant in (("weak", "profile", "RPi4", "rpi4"),
                                       ("mid", "link", "LTE", "lte")):
        data = copy.deepcopy(tiny)
        data["devices"][group][field] = value
        with pytest.raises(ConfigError, match=f"devices.{group}.{field}: .*Did you mean {meant!r}"):
            validate_scenario(data)
    tiny["server"]["profile"] = "CPU_SERVER"
    with pytest.raises(ConfigError, match="server.profile: .*Did you mean 'cpu_server'"):
        validate_scenario(tiny)


def test_bare_numbers_in_a_fleet_file_are_warned_about_with_their_rows(tmp_path):
    """A fleet file's unit columns follow the same rule as the scenario's: a bare number
    far outside what any shipped profile has is named with its row and column, once per
    column; a number with a unit, or a plausible bare one, is not."""
    import pandas as pd

    fleet = tmp_path / "fleet.csv"
    pd.DataFrame({"profile": ["rpi4", "rpi4", "rpi4"],
                  "uplink_bps": ["5", "5 Mbit/s", "6"], "downlink_bps": [20e6, 20e6, 20e6],
                  "latency_s": ["35", "0.02", "20 ms"]}).to_csv(fleet, index=False)
    data = copy.deepcopy(TINY)
    data["training"]["timing_only"] = True
    del data["devices"]
    data["fleet"] = str(fleet)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out = cli("validate", str(path))
    assert code == 0, out
    text = " ".join(out.split())
    assert ("row 2, uplink_bps: 5 is read as 5 bit/s, under 1 kbit/s (shipped links: 20 kbit/s "
            'to 941 Mbit/s); did you mean "5 Mbit/s"? (1 more row like it)') in text
    assert 'row 2, latency_s: 35 is read as 35 s, over 5 s' in text
    assert "downlink_bps" not in text and out.count("warning:") == 2
