"""``sflsim check`` cries no wolf: every shipped scenario, timing-only, checks clean, and so
does a run whose 10 bit/s link takes its simulated time to about 1e8 s (where the float
error of a difference of two instants is about 1e-8 s); a sweep folder is checked point
by point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.checks import check_run, report_lines
from sflsim.cli.main import app
from sflsim.config import load_scenario, validate_scenario
from sflsim.errors import ConfigError, DatasetNotFoundError
from sflsim.runner import run_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").rglob("*.yaml") if "sweeps" not in p.parts)
#: datasets the shipped scenarios name whose files a fresh machine has not: (channels,
#: side, classes), for a synthetic stand-in of the same shape
SHAPES = {"cifar10": (3, 32, 10), "cifar100": (3, 32, 100), "stl10": (3, 96, 10),
          "tiny_imagenet": (3, 64, 200), "domainnet": (3, 64, 345)}
#: a timing-only run of these algorithm settings is refused (the timeline depends on
#: what is learned): the refusal names the setting, and the run goes on with these
TRAINED_ONLY = {"split_schedule": ["algorithm.split=static"],
                "adaptive_replay": ["algorithm.adaptive_replay=false"]}


def _timing_only(path: Path, extra: list[str]) -> object:
    """The scenario with 1 round, timing-only; a setting that needs training is asserted
    refused for that reason and replaced (:data:`TRAINED_ONLY`)."""
    overrides = ["training.rounds=1", "training.timing_only=true", *extra]
    try:
        return load_scenario(path, overrides)
    except ConfigError as exc:
        fixes = [fix for key, fix in TRAINED_ONLY.items() if key in str(exc)]
        assert fixes, f"{path.name}: refused timing-only for another reason: {exc}"
        assert "timeline depends on what is learned" in str(exc), str(exc)
        return _timing_only(path, [*extra, *fixes[0]])


def _stand_in(scenario: object) -> list[str]:
    """Overrides that replace a dataset not installed here by synthetic images of its
    shape (a timing-only run reads its dataset for the shape and the partition)."""
    channels, side, classes = SHAPES[scenario.dataset.name]
    side = scenario.dataset.image_size or side
    clients = scenario.num_clients
    samples = max(64 * clients, 2 * scenario.training.batch_size * clients)
    partition = "iid" if scenario.dataset.partition.scheme == "domain" \
        else scenario.dataset.partition.scheme
    synthetic = {"name": "synthetic", "partition": {"scheme": partition},
                 "synthetic": {"train_samples": samples, "test_samples": 16, "classes": classes,
                               "image_shape": [channels, side, side]}}
    return [f"dataset={json.dumps(synthetic)}"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_every_scenario_checks_clean(path, tmp_path, monkeypatch):
    monkeypatch.delenv("SFLSIM_CHECK_RESULTS", raising=False)  # checked here, in the open
    monkeypatch.chdir(ROOT)  # scenarios name their traces relative to the checkout
    scenario = _timing_only(path, [])
    out = tmp_path / "run"
    try:
        run_scenario(scenario, out)
    except DatasetNotFoundError as exc:
        assert scenario.dataset.name in str(exc) and scenario.dataset.name in SHAPES, str(exc)
        shutil.rmtree(out, ignore_errors=True)
        scenario = _timing_only(path, _stand_in(scenario))
        run_scenario(scenario, out)
    found = check_run(out)
    assert found == [], "\n".join(report_lines(found))
    assert (pd.read_csv(out / "rounds.csv")["round"] >= 1).sum() == 1


#: a device 10 bit/s away (its model takes 9e6 s each way) and two on Wi-Fi, whose
#: transfers of a few ms start at instants up to 1.3e8 s
SLOW = {"name": "slow", "model": {"name": "resnet18", "width": 1.0},
        "dataset": {"name": "synthetic", "synthetic": {
            "train_samples": 96, "test_samples": 8, "image_shape": [3, 32, 32]}},
        "devices": {"far": {"profile": "rpi4", "count": 1, "end_layer": 4, "link": "nbiot",
                            "link_override": {"uplink_bps": 10, "downlink_bps": 10}},
                    "near": {"profile": "jetson_nano", "count": 2, "end_layer": 1,
                             "link": "wifi"}},
        "algorithm": {"name": "splitfed_v1"},
        "training": {"rounds": 6, "batch_size": 8, "timing_only": True},
        "conditions": {"straggler_sigma": 0.3}}


def test_a_run_to_1e8_seconds_over_a_10_bit_per_second_link_checks_clean(tmp_path,
                                                                         monkeypatch):
    monkeypatch.delenv("SFLSIM_CHECK_RESULTS", raising=False)
    out = tmp_path / "run"
    result = run_scenario(validate_scenario(SLOW), out)
    assert result.summary["sim_time_s"] > 1e8
    events = pd.read_parquet(out / "events.parquet")
    late_and_short = events[(events["start_s"] > 5e7) & (events["end_s"] - events["start_s"] < 0.01)]
    assert len(late_and_short) > 50  # what a fixed tolerance of 1e-9 s got wrong
    found = check_run(out)
    assert found == [], "\n".join(report_lines(found))
    ok = CliRunner().invoke(app, ["check", str(out)])
    assert ok.exit_code == 0 and ok.output.startswith("ok: 6 rounds of "), ok.output


def _small() -> dict:
    """A one-round timing-only point of a sweep: a tiny model and dataset."""
    return dict(SLOW, model={"name": "hetero_splitee_resnet", "width": 0.0625},
                dataset={"name": "synthetic", "synthetic": {
                    "train_samples": 48, "test_samples": 8, "image_shape": [1, 16, 16]}},
                devices={"near": dict(SLOW["devices"]["near"], end_layer=2)},
                training={"rounds": 1, "batch_size": 8, "timing_only": True})


def _sweep_table(sweep: Path, points: list[str], statuses: list[str], errors: list[str]) -> None:
    """``sweep.csv`` as sflsim writes it: a completed point's row gives its summary's
    numbers, the others' are empty."""
    from sflsim.sweep.run import SUMMARY_COLUMNS

    rows = []
    for point, status, error in zip(points, statuses, errors):
        done = status == "completed"
        summary = json.loads((sweep / "points" / point / "summary.json").read_text()) if done \
            else {}
        rows.append({"point": point, "status": status, "error": error,
                     "run_dir": f"points/{point}" if done else "",
                     "algorithm": summary.get("algorithm", "splitfed_v1"),
                     **{c: summary.get(c) for c in SUMMARY_COLUMNS}})
    pd.DataFrame(rows).to_csv(sweep / "sweep.csv", index=False)


def test_a_sweep_folder_is_checked_point_by_point(tmp_path, monkeypatch):
    """Two points, one sound and one tampered, and one that failed to run: one line
    each, a total, and exit status 1."""
    monkeypatch.delenv("SFLSIM_CHECK_RESULTS", raising=False)
    sweep = tmp_path / "sweep"
    for point in ("p000", "p001"):
        run_scenario(validate_scenario(_small()), sweep / "points" / point)
    _sweep_table(sweep, ["p000", "p001", "p002"], ["completed", "completed", "failed"],
                 ["", "", "ConfigError: bad"])
    (sweep / "points" / "p002").mkdir()  # failed before its run began: its error only
    (sweep / "points" / "p002" / "error.txt").write_text("Traceback ...\nConfigError: bad\n")
    runner = CliRunner()
    ok = runner.invoke(app, ["check", str(sweep / "points" / "p000")])
    assert ok.exit_code == 0, ok.output
    summary = json.loads((sweep / "points" / "p001" / "summary.json").read_text())
    (sweep / "points" / "p001" / "summary.json").write_text(json.dumps({**summary,
                                                                        "bytes_up": 1}))
    result = runner.invoke(app, ["check", str(sweep)])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 4, result.output
    assert lines[0] == "p000: ok, 1 round"
    assert lines[1].startswith("p001: 1 violation in 1 round; first: summary.json: "
                               "bytes_up: 1, but rounds.csv gives ")
    assert lines[2].startswith("p002: not run (sweep.csv: status failed: ConfigError: bad")
    assert lines[3] == f"1 of 3 points of {sweep} keeps the simulator's physics and bookkeeping"
    # a point sweep.csv says completed: its summary gone, or its whole folder
    (sweep / "points" / "p000" / "summary.json").unlink()
    shutil.rmtree(sweep / "points" / "p001")
    lines = runner.invoke(app, ["check", str(sweep)]).output.strip().splitlines()
    assert lines[0].startswith("p000: error: sweep.csv says completed, but its summary.json "
                               "is missing"), lines
    assert lines[1].startswith("p001: missing: its folder is gone (sweep.csv: status completed")
    assert lines[3] == f"0 of 3 points of {sweep} keep the simulator's physics and bookkeeping"


def test_a_sweep_check_compares_each_row_of_sweep_csv_with_its_run(tmp_path, monkeypatch):
    """A final number edited in ``sweep.csv``, emptied, or a row deleted: each point so
    edited fails the check, naming the column and ``summary.json``'s value."""
    from sflsim.sweep.run import SUMMARY_COLUMNS

    monkeypatch.delenv("SFLSIM_CHECK_RESULTS", raising=False)
    sweep = tmp_path / "sweep"
    rows = []
    for point in ("p000", "p001", "p002", "p003"):
        run_scenario(validate_scenario(_small()), sweep / "points" / point)
        summary = json.loads((sweep / "points" / point / "summary.json").read_text())
        rows.append({"point": point, "status": "completed", "error": "",
                     "run_dir": f"points/{point}", "algorithm": summary["algorithm"],
                     **{c: summary[c] for c in SUMMARY_COLUMNS}})
    table = pd.DataFrame(rows)
    table.to_csv(sweep / "sweep.csv", index=False)
    runner = CliRunner()
    assert runner.invoke(app, ["check", str(sweep)]).exit_code == 0
    table.loc[1, "bytes_up"] += 1
    table.loc[2, "sim_time_s"] = np.nan
    table.drop(index=3).to_csv(sweep / "sweep.csv", index=False)
    result = runner.invoke(app, ["check", str(sweep)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 5, result.output
    assert lines[0] == "p000: ok, 1 round"
    assert lines[1] == (f"p001: error: sweep.csv's row disagrees with its run: bytes_up "
                        f"{rows[1]['bytes_up'] + 1}, but summary.json gives {rows[1]['bytes_up']}")
    assert lines[2].startswith("p002: error: sweep.csv's row disagrees with its run: sim_time_s "
                               "nan, but summary.json gives "), lines[2]
    assert lines[3].startswith("p003: error: sweep.csv has no row for it"), lines[3]
    assert lines[4] == f"1 of 4 points of {sweep} keeps the simulator's physics and bookkeeping"
    # a status, the algorithm, an infinite number, a row twice, a column gone
    table.loc[1, "status"], table.loc[2, "algorithm"] = "failed", "fedavg"
    table.loc[0, "sim_time_s"] = rows[0]["sim_time_s"]
    table["bytes_down"] = table["bytes_down"].astype(float)
    table.loc[3, "bytes_down"] = np.inf
    pd.concat([table, table.iloc[[3]]]).drop(columns="client_flops").to_csv(
        sweep / "sweep.csv", index=False)
    lines = runner.invoke(app, ["check", str(sweep)]).output.strip().splitlines()
    assert lines[:2] == ["sweep.csv: no column client_flops, which sflsim writes in every "
                         "sweep table", "sweep.csv: 1 point with several rows (p003)"], lines
    assert lines[3].endswith("status failed, but summary.json says completed"), lines[3]
    assert "algorithm fedavg, but summary.json gives " in lines[4], lines[4]
    assert lines[5].startswith("p003: error: sweep.csv's row disagrees with its run: bytes_down "
                               "inf, but summary.json gives "), lines[5]
    # sweep.csv gone: one line, not one per point
    (sweep / "sweep.csv").unlink()
    result = runner.invoke(app, ["check", str(sweep)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[0].startswith("sweep.csv: missing; `sflsim sweep "), lines
    assert [line.split(":")[0] for line in lines[1:5]] == ["p000", "p001", "p002", "p003"]
    assert all(line.endswith(": ok, 1 round") for line in lines[1:5]), lines
    # sweep.csv unreadable: the same, one line for the table
    (sweep / "sweep.csv").write_bytes(b"point,status\n\"p000,completed\n")
    result = runner.invoke(app, ["check", str(sweep)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[0].startswith("sweep.csv: cannot be read ("), lines
    assert all(line.endswith(": ok, 1 round") for line in lines[1:5]), lines
    assert lines[-1].endswith("keep the simulator's physics and bookkeeping, but 1 problem "
                              "with sweep.csv"), lines[-1]
    # another table written over sweep.csv (a comparison, say): one line, no "?" point
    (sweep / "sweep.csv").write_text("run,algorithm,final_accuracy_pct\na,fedavg,40\n")
    result = runner.invoke(app, ["check", str(sweep)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[0].startswith(
        "sweep.csv: not a sweep table (no column point; it has run, algorithm, "
        "final_accuracy_pct): it was replaced or edited"), lines
    assert [line.split(":")[0] for line in lines[1:]] == ["p000", "p001", "p002", "p003",
                                                          lines[-1].split(":")[0]], lines
    assert lines[-1].startswith("4 of 4 points"), lines


def test_a_sweep_with_points_not_run_yet_checks_what_has_run(tmp_path, monkeypatch):
    """An interrupted sweep: the points that ran pass, the others are listed as not run
    yet, and the check passes (exit status 0), as for a run in progress."""
    monkeypatch.delenv("SFLSIM_CHECK_RESULTS", raising=False)
    sweep = tmp_path / "sweep"
    run_scenario(validate_scenario(_small()), sweep / "points" / "p000")
    _sweep_table(sweep, ["p000", "p001"], ["completed", "pending"], ["", ""])
    result = CliRunner().invoke(app, ["check", str(sweep)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 0, result.output
    assert lines[0] == "p000: ok, 1 round"
    assert lines[1].startswith("1 point not run yet (p001; sweep.csv: status pending)")
    assert lines[2] == (f"1 of 1 point run so far of {sweep} keeps the simulator's physics and "
                        f"bookkeeping")


def test_a_sweep_check_shows_problems_first_caps_them_and_counts_points_not_run(tmp_path):
    """30 failed points and 1,000 not run yet: 20 failed lines, a count of the rest, one
    line for the points not run (the command that runs them), a total."""
    from sflsim.checks.sweep import MAX_LINES, check_sweep

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    points = [f"p{i:04d}" for i in range(1030)]
    _sweep_table(sweep, points, ["failed"] * 30 + ["pending"] * 1000,
                 ["ValueError: x"] * 30 + [""] * 1000)
    lines, ok = check_sweep(sweep)
    assert not ok and len(lines) == MAX_LINES + 3, lines
    assert lines[MAX_LINES - 1].startswith(f"p00{MAX_LINES - 1}: not run (sweep.csv: status failed")
    assert lines[MAX_LINES] == "... and 10 more points with a problem not shown"
    assert lines[MAX_LINES + 1] == (
        f"1,000 points not run yet (p0030, p0031, p0032 ... p1029; sweep.csv: status pending), "
        f"not checked: `sflsim sweep {sweep / 'sweep.yaml'} -o {sweep}` runs them and keeps "
        f"the finished points")
    assert lines[-1] == f"0 of 30 points run so far of {sweep} keep the simulator's physics " \
                        "and bookkeeping"


def test_a_sweep_check_compares_the_axis_cells_with_each_run(tmp_path, monkeypatch):
    """An axis value edited in sweep.csv (a configuration that never ran, as compare would
    show it) fails that point's check; values the run stores resolved (a quantity with its
    unit, null) are not compared, and pass."""
    import yaml

    from sflsim.sweep import load_sweep, run_sweep

    monkeypatch.delenv("SFLSIM_CHECK_RESULTS", raising=False)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_small()))
    (tmp_path / "sw.yaml").write_text(yaml.safe_dump({
        "base": "base.yaml", "mode": "zip",
        "axes": {"conditions.round_deadline_s": [0.5, "700 ms", None],
                 "devices.near.count": [1, 2, 1]}}))
    sweep = tmp_path / "out"
    run_sweep(load_sweep(tmp_path / "sw.yaml"), sweep)
    runner = CliRunner()
    assert runner.invoke(app, ["check", str(sweep)]).exit_code == 0
    table = pd.read_csv(sweep / "sweep.csv", dtype=str, keep_default_na=False)
    table.loc[0, "conditions.round_deadline_s"] = "0.7"
    table.loc[2, "devices.near.count"] = "9"
    table.to_csv(sweep / "sweep.csv", index=False)
    lines = runner.invoke(app, ["check", str(sweep)]).output.strip().splitlines()
    assert lines[0] == ("p000: error: sweep.csv's row disagrees with its run: "
                        "conditions.round_deadline_s 0.7, but its scenario.yaml gives 0.5"), lines
    assert lines[1] == "p001: ok, 1 round", lines
    assert lines[2].endswith("devices.near.count 9, but its scenario.yaml gives 1"), lines
