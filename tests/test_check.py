"""``sflsim check``: results checked against the simulator's physics and bookkeeping
(sflsim.checks), and a property test over random small scenarios."""

from __future__ import annotations

import json
import shutil
import tempfile
import zlib
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sflsim.checks import ResultCheckError, Violation, check_result, check_run
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.metrics import records
from sflsim.metrics.lock import hold_folder
from sflsim.metrics.results import read_result_csv
from sflsim.runner import run_scenario

#: the algorithms the property test draws from, each as a scenario's ``algorithm``
ALGORITHMS = [
    {"name": "fedavg"},
    {"name": "splitfed_v1"},
    {"name": "splitfed_v2"},
    {"name": "hetero_splitee_sequential"},
    {"name": "hetero_splitee_averaging"},
    {"name": "fedsga", "split": "static"},
    {"name": "fedsga", "split": "random"},
    {"name": "multisfl", "adaptive_replay": False},
]
PROFILES = ["rpi4", "jetson_nano", "phone_midrange"]
LINKS = ["wifi", "lte", "5g"]
#: one-way latencies (s): none given (the link profile's), a LAN's, seconds, tens of seconds
LATENCIES = [None, 0.001, 0.5, 5.0, 35.0]
DEADLINES = [None, 0.05, 0.3, 2.0, 20.0, 80.0]

_TRACES = Path(tempfile.mkdtemp(prefix="sflsim-check-traces-"))


def _availability(rows: list[tuple[str, float, float]]) -> str:
    """An availability trace file of ``rows`` (device, online from, online until), once per
    content."""
    text = "device,online_from_s,online_until_s\n" + "".join(
        f"{d},{a:g},{'inf' if b == float('inf') else f'{b:g}'}\n" for d, a, b in rows)
    path = _TRACES / f"availability-{zlib.crc32(text.encode()):08x}.csv"
    if not path.exists():
        path.write_text(text)
    return str(path)


@st.composite
def scenarios(draw, algorithm: dict) -> dict:
    """A small timing-only scenario of ``algorithm``: 1-3 device groups of 1-2 clients,
    star or a shared access point, maybe a bandwidth trace, client sampling (with
    over-commitment), an availability trace, stragglers, drop-outs, a round deadline,
    link latencies up to tens of seconds and any energy rule."""
    split = algorithm["name"] in ("fedavg", "splitfed_v1", "splitfed_v2")
    model = draw(st.sampled_from(["small_cnn", "hetero_splitee_resnet"])) if split \
        else "hetero_splitee_resnet"
    last = 1 if model == "small_cnn" else 5
    groups: dict[str, dict] = {}
    for g in range(draw(st.integers(1, 3))):
        group = {"profile": draw(st.sampled_from(PROFILES)), "count": draw(st.integers(1, 2)),
                 "end_layer": draw(st.integers(1, last)), "link": draw(st.sampled_from(LINKS))}
        latency = draw(st.sampled_from(LATENCIES))
        if latency is not None:
            group["link_override"] = {"latency_s": latency}
        groups[f"g{g}"] = group
    n = sum(g["count"] for g in groups.values())
    network: dict = {}
    if draw(st.booleans()):
        behind = draw(st.lists(st.sampled_from(sorted(groups)), min_size=1, unique=True))
        ap: dict = {"link": "wifi", "groups": behind,
                    "link_override": {"uplink_bps": draw(st.sampled_from([2e6, 20e6])),
                                      "latency_s": draw(st.sampled_from([0.003, 2.0, 30.0]))}}
        if draw(st.booleans()):
            ap["backhaul"] = draw(st.sampled_from(["ethernet", "lte"]))
        network = {"topology": "shared_access", "access_points": {"ap1": ap}}
    if draw(st.booleans()):
        network.setdefault("traces", {})[draw(st.sampled_from(
            sorted(groups) + (["ap1"] if "access_points" in network else [])))] = \
            "traces/pi4_wifi.csv"
    training: dict = {"rounds": 2, "batch_size": 8, "timing_only": True}
    participation = draw(st.sampled_from(["all", "sampled", "over_committed"])) if n > 1 \
        else "all"
    if participation != "all":
        training["clients_per_round"] = draw(st.integers(1, n - 1))
        if participation == "over_committed":
            training["over_commit"] = 2.0
    conditions: dict = {"round_deadline_s": draw(st.sampled_from(DEADLINES)),
                        "straggler_sigma": draw(st.sampled_from([0.0, 0.5])),
                        "client_drop_prob": draw(st.sampled_from([0.0, 0.3]))}
    if draw(st.booleans()):
        rows = [(g, 0.0, draw(st.sampled_from([0.01, 0.2, 3.0]))) for g in groups]
        rows += [(g, draw(st.sampled_from([0.5, 5.0, 60.0])), float("inf")) for g in groups
                 if draw(st.booleans())]
        conditions["availability"] = _availability(rows)
    server = draw(st.sampled_from([{"profile": "a100"}, {"profile": "cpu_server", "slots": 1}]))
    return {
        "name": "property", "seed": draw(st.integers(0, 3)),
        "dataset": {"name": "synthetic", "partition": {"scheme": "iid"},
                    "synthetic": {"train_samples": 20 * n, "test_samples": 8,
                                  "image_shape": [1, 16, 16]}},
        "model": {"name": model, "width": 0.0625},
        "devices": groups, "server": server, "algorithm": algorithm, "training": training,
        "network": network, "conditions": conditions,
        "energy": {"radio_on": draw(st.sampled_from(["serialisation", "transfer"])),
                   "idle_draw": draw(st.sampled_from(["participants", "all", "none"]))},
    }


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: "-".join(
    str(v) for k, v in a.items() if k != "adaptive_replay"))
@settings(max_examples=5, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_runs_keep_physics_and_bookkeeping(algorithm, data):
    """Whatever the algorithm, topology, sampling, availability, deadline and latency, a
    run's results pass every check (energy within power x time, capacity one, bits over
    the highest rate, tables that agree, time that moves forward)."""
    data = data.draw(scenarios(algorithm))
    result = run_scenario(validate_scenario(data))
    found = check_result(result)
    assert not found, "\n".join(map(str, found))
    statuses = set(result.clients["status"])  # what the draws exercised (--hypothesis-show-statistics)
    event(data["algorithm"]["name"])
    event(data["network"].get("topology", "star"))
    for status in sorted(statuses - {"trained"}):
        event(f"a client {status}")
    if result.events["cut_off"].any():
        event("work cut off")
    if max(g.get("link_override", {}).get("latency_s") or 0 for g in data["devices"].values()) >= 30:
        event("a link latency of 35 s")


# ----- the check on files -------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished timing-only run of Hetero-SplitEE Sequential on 4 devices, 2 of them on
    LTE with 5 s latency (activations stream: transfers overlap by the latency)."""
    data = {
        "name": "checked", "dataset": {"name": "synthetic", "synthetic": {
            "train_samples": 64, "test_samples": 8, "image_shape": [1, 16, 16]}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
        "devices": {"pi": {"profile": "rpi4", "count": 2, "end_layer": 3, "link": "wifi"},
                    "nano": {"profile": "jetson_nano", "count": 2, "end_layer": 4,
                             "link": "lte", "link_override": {"latency_s": 5.0}}},
        "algorithm": {"name": "hetero_splitee_sequential"},
        "training": {"rounds": 2, "batch_size": 8, "timing_only": True},
    }
    out = tmp_path_factory.mktemp("checked") / "run"
    run_scenario(validate_scenario(data), out)
    return out


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    shutil.copytree(run_dir, tmp_path / "run")
    return tmp_path / "run"


def test_a_sound_run_passes(run_dir):
    assert check_run(run_dir) == []


def test_the_check_reads_the_profiles_the_run_kept_not_todays(run_dir, tmp_path, profile_dir):
    """A profile changed after the run (the Jetson Nano's active power lowered) does not
    turn the run into a violation: the run folder keeps the profiles it read, as they were."""
    from sflsim.hardware.profiles import SHIPPED_PROFILES

    kept = run_dir / "profiles"
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*.yaml")) == [
        "devices/jetson_nano.yaml", "devices/rpi4.yaml", "links/lte.yaml", "links/wifi.yaml",
        "servers/a100.yaml"]
    shipped = SHIPPED_PROFILES / "devices" / "jetson_nano.yaml"
    assert (kept / "devices" / "jetson_nano.yaml").read_bytes() == shipped.read_bytes()
    lowered = shipped.read_text().replace('value: "7.25 W"', 'value: "0.5 W"')
    assert lowered != shipped.read_text()
    profile_dir("devices", "jetson_nano", lowered)  # today's library, searched first
    assert check_run(run_dir) == []
    run = _copy(run_dir, tmp_path)
    shutil.rmtree(run / "profiles")  # a run made before runs kept their profiles
    found = check_run(run)
    assert found and all("power" in str(v) or "energy" in str(v) for v in found)


def test_an_overcounted_radio_is_caught(run_dir, tmp_path):
    """uplink_s as the old sum of transfer spans (latency counted per transfer): more
    radio time than the round has, and not what the events give."""
    run = _copy(run_dir, tmp_path)
    events = pd.read_parquet(run / "events.parquet")
    ups = events[events.actor.str.endswith(":uplink")]
    spans = (ups.end_s - ups.start_s).groupby([ups["round"], ups.client_id]).sum()
    for part in sorted((run / "clients.parquet").glob("*.parquet")):
        clients = pd.read_parquet(part)
        clients["uplink_s"] = [spans.get((r, c), 0.0) for r, c in
                               zip(clients["round"], clients.client_id)]
        clients.to_parquet(part, index=False)
    found = [str(v) for v in check_run(run)]
    assert any("uplink_s" in v and "exceeds the round time" in v and "client 2" in v
               for v in found), found
    assert any("but its events in events.parquet give" in v for v in found), found


def test_overlapping_compute_and_broken_sums_are_caught(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    part = sorted((run / "events.parquet").glob("*.parquet"))[0]
    events = pd.read_parquet(part)
    first = events.index[(events.actor == "client0") & (events["round"] == 1)]
    a, b = first[0], first[1]
    events.loc[b, "start_s"] = events.loc[a, "start_s"]  # two batches at once on one CPU
    events.to_parquet(part, index=False)
    rounds = read_result_csv(run / "rounds.csv")
    rounds.loc[rounds["round"] == 2, "client_energy_j"] += 1.0
    rounds.loc[rounds["round"] == 2, "sim_time_s"] = 0.0
    rounds.to_csv(run / "rounds.csv", index=False)
    found = [str(v) for v in check_run(run)]
    assert any(v.startswith("events.parquet: round 1: client0: compute of") and
               "capacity one" in v for v in found), found
    assert any(v.startswith("rounds.csv: round 2: client_energy_j") for v in found), found
    assert any("simulated time went backward" in v for v in found), found
    assert any(v.startswith("summary.json: client_energy_j") for v in found), found


def test_a_transfer_faster_than_its_link_is_caught(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    part = sorted((run / "events.parquet").glob("*.parquet"))[0]
    events = pd.read_parquet(part)
    up = events.index[events.actor == "client2:uplink"][0]
    events.loc[up, "payload_bytes"] *= 1000
    events.to_parquet(part, index=False)
    found = [str(v) for v in check_run(run)]
    assert any(v.startswith("events.parquet: round 1: client2:uplink:") and
               "hop's highest rate" in v and "latency 5 s" in v for v in found), found


def test_cli_check(run_dir, tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["check", str(run_dir)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("ok: 2 rounds of ")
    run = _copy(run_dir, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "bytes_up": 1}))
    bad = runner.invoke(app, ["check", str(run)])
    assert bad.exit_code == 1
    lines = bad.output.strip().splitlines()
    assert lines[0].startswith("summary.json: bytes_up: 1, but rounds.csv gives ")
    assert lines[-1] == f"1 violation in 2 rounds of {run}"
    missing = runner.invoke(app, ["check", str(tmp_path / "nothing")])
    assert missing.exit_code == 2
    assert "does not exist; give an sflsim results directory" in missing.output
    assert "Traceback" not in missing.output and len(missing.output.strip().splitlines()) == 1


def _one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, \
        result.output
    assert result.output.startswith("error: "), result.output
    for needle in needles:
        assert needle in result.output, result.output


@pytest.mark.parametrize("command", [["compare"], ["plot", "tta"], ["plot", "timeline"]])
def test_commands_that_read_a_run_tell_a_damaged_file_as_check_does(command, run_dir, tmp_path):
    """compare and the plots read summary.json and rounds.csv through the reader check
    uses: a damaged file is one line naming it, not a JSON or pandas traceback."""
    runner = CliRunner()
    for name, damage, told in (("summary.json", "", "summary.json cannot be read as JSON"),
                               ("summary.json", "[]", "summary.json holds list"),
                               ("rounds.csv", "", "rounds.csv is empty")):
        run = tmp_path / f"{command[-1]}_{name}_{len(damage)}"
        shutil.copytree(run_dir, run)
        (run / name).write_text(damage)
        out = ["-o", str(tmp_path / "p.png")] if command[0] == "plot" else []
        _one_line_error(runner.invoke(app, [*command, str(run), *out]), told)


def test_cli_check_damaged_and_unfinished_runs(run_dir, tmp_path):
    """A results folder edited, cut or emptied by hand, or one whose first round has not
    ended, is one error line naming the file, never a traceback."""
    runner = CliRunner()

    def damaged(name, change):
        run = tmp_path / name
        shutil.copytree(run_dir, run)
        change(run)
        return runner.invoke(app, ["check", str(run)])

    summary_text = (run_dir / "summary.json").read_text()
    _one_line_error(damaged("cut_summary", lambda r: (r / "summary.json").write_text(
        summary_text[:60])), "summary.json cannot be read as JSON", "cut short")
    _one_line_error(damaged("list_summary", lambda r: (r / "summary.json").write_text("[]")),
                    "summary.json holds list")
    _one_line_error(damaged("empty_rounds", lambda r: (r / "rounds.csv").write_text("")),
                    "rounds.csv is empty")

    def text_in_rounds(run):
        lines = (run / "rounds.csv").read_text().splitlines()
        lines[2] = "1,abc" + lines[2].split(",", 2)[2]  # round 1's sim_time_s
        (run / "rounds.csv").write_text("\n".join(lines) + "\n")
    _one_line_error(damaged("text_rounds", text_in_rounds), "rounds.csv: row 3 (round 1)",
                    "sim_time_s is 'abc")

    def no_column(run):
        rounds = read_result_csv(run / "rounds.csv")
        rounds.drop(columns=["sim_time_s"]).to_csv(run / "rounds.csv", index=False)
    _one_line_error(damaged("no_column", no_column), "rounds.csv has no column sim_time_s")
    for table in ("clients", "events"):
        def emptied(run, table=table):
            for part in (run / f"{table}.parquet").glob("*.parquet"):
                part.unlink()
        _one_line_error(damaged(f"no_{table}", emptied), f"{table}.parquet holds no Parquet file")

    def text_in_summary(run):
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "bytes_up": "abc"}))
    _one_line_error(damaged("text_summary", text_in_summary), "cannot be read as sflsim writes",
                    "edited or cut short")

    starting = tmp_path / "starting"
    starting.mkdir()
    shutil.copy(run_dir / "scenario.yaml", starting / "scenario.yaml")
    _one_line_error(runner.invoke(app, ["check", str(starting)]), "holds no finished round yet")
    neither = tmp_path / "neither"
    neither.mkdir()
    _one_line_error(runner.invoke(app, ["check", str(neither)]), "is neither a run's results "
                    "folder", "nor a sweep's (sweep.csv, points/")


def test_cli_check_says_a_running_run_is_checked_so_far(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    with hold_folder(run):  # as the run writing it does
        ok = CliRunner().invoke(app, ["check", str(run)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip() == (f"ok: 2 rounds of {run} keep the simulator's physics and "
                                 f"bookkeeping (so far: summary.json says running)")
    # nobody writes it: a run killed before it ended, checked as far as it got
    stopped = CliRunner().invoke(app, ["check", str(run)])
    assert stopped.exit_code == 0, stopped.output
    assert stopped.output.strip().endswith(
        "(so far: summary.json says running, but no process is writing the run: it stopped "
        "before it ended (killed?); --resume continues it)"), stopped.output


def test_a_deleted_summary_fails_the_check_unless_a_run_is_writing_the_folder(run_dir,
                                                                             tmp_path):
    run = _copy(run_dir, tmp_path)
    (run / "summary.json").unlink()
    with hold_folder(run):  # between a round's rows and its summary.json
        assert check_run(run) == []
        ok = CliRunner().invoke(app, ["check", str(run)])
        assert ok.exit_code == 0 and "(so far: no summary.json yet)" in ok.output, ok.output
    found = check_run(run)
    assert [str(v) for v in found] == [
        "summary.json: missing, yet rounds.csv lists finished rounds and no process "
        "is writing the run: it was deleted, or the run was killed while it wrote a round "
        "(`sflsim run SCENARIO -o DIR --resume` writes it again)"]
    failed = CliRunner().invoke(app, ["check", str(run)])
    assert failed.exit_code == 1 and "no process is writing the run" in failed.output
    # a lock file left by a killed holder holds nothing
    (run / ".sflsim.lock").write_text("{}")
    assert len(check_run(run)) == 1


def test_a_round_written_before_its_rounds_row_is_not_checked_until_the_run_ends(run_dir,
                                                                                  tmp_path):
    """A run writes a round's tables, then its rounds.csv row: stopped in between, the
    folder holds a round rounds.csv does not list. Unfinished, that round is not checked;
    finished, it is a violation."""
    run = _copy(run_dir, tmp_path)
    rows = (run / "rounds.csv").read_text().splitlines()
    (run / "rounds.csv").write_text("\n".join(rows[:-1]) + "\n")  # the last row not yet written
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    assert check_run(run) == []
    (run / "summary.json").write_text(json.dumps(summary))
    assert any("does not list" in v.message for v in check_run(run))


def test_violation_text():
    assert str(Violation("clients.parquet", 3, "client 4", "uplink_s 2 exceeds")) == \
        "clients.parquet: round 3: client 4: uplink_s 2 exceeds"
    assert str(Violation("summary.json", None, "bytes_up", "1")) == "summary.json: bytes_up: 1"


def test_every_test_run_is_checked(monkeypatch):
    """SFLSIM_CHECK_RESULTS (tests/conftest.py) makes run_scenario check what it wrote:
    radio time counted per transfer with its latency, as before the energy rule, fails."""
    def spans(mask, client, start, end, n):
        import numpy as np

        m = mask & (client >= 0)
        return np.bincount(client[m], weights=(end - start)[m], minlength=n)

    monkeypatch.setattr(records, "union_per_client", spans)
    monkeypatch.setattr(records, "radio_on_until", lambda events, table, *a, **k:
                        __import__("numpy").asarray(events["end_s"], dtype=float))
    data = {
        "name": "late", "dataset": {"name": "synthetic", "synthetic": {
            "train_samples": 32, "test_samples": 8, "image_shape": [1, 16, 16]}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
        "devices": {"nano": {"profile": "jetson_nano", "count": 1, "end_layer": 4,
                             "link": "lte", "link_override": {"latency_s": 35.0}}},
        "algorithm": {"name": "hetero_splitee_sequential"},
        "training": {"rounds": 1, "batch_size": 8, "timing_only": True},
    }
    with pytest.raises(ResultCheckError, match=r"uplink_s .* exceeds the round time"):
        run_scenario(validate_scenario(data))
    monkeypatch.delenv("SFLSIM_CHECK_RESULTS")
    run_scenario(validate_scenario(data))  # unchecked: no error
