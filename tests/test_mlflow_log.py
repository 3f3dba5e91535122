"""``--log mlflow`` (sflsim run, sflsim sweep): what a real MLflow file store holds, read
back with MLflow's own client, equals the results folder; a resumed run logs into the
same MLflow run, each round once; without MLflow, one message says how to install it."""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.cli.mlflow_log import (
    MAX_PARAM_CHARS,
    RUN_FILE,
    MlflowProgress,
    flatten,
    open_client,
    require_mlflow,
    round_metrics,
)
from sflsim.errors import SflsimError


def _scenario_file(tiny: dict, path: Path, rounds: int) -> Path:
    data = copy.deepcopy(tiny)
    data["training"]["rounds"] = rounds
    data["evaluation"].update({"every_rounds": 2, "max_test_samples": 8})
    path.write_text(yaml.safe_dump(data, sort_keys=False))  # the devices in order
    return path


def _runs(uri: str, experiment: str) -> list:
    client = open_client(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    return client.search_runs([found.experiment_id])


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in open_client(uri).get_metric_history(run_id, key))


def _assert_metrics_equal_rounds_csv(uri: str, run_id: str, run_dir: Path) -> None:
    """Every numeric rounds.csv column: its MLflow history is its non-NaN values, at
    step = round, each round once."""
    rounds = pd.read_csv(run_dir / "rounds.csv")
    columns = round_metrics(rounds.iloc[0].to_dict()).keys() | round_metrics(
        rounds.iloc[-1].to_dict()).keys()
    assert {"sim_time_s", "bytes_up", "server_accuracy"} <= columns
    for column in columns:
        kept = rounds[rounds[column].notna()]
        assert _history(uri, run_id, column) == list(zip(kept["round"], kept[column])), column


def test_run_logs_scenario_rounds_summary_and_files(tiny, tmp_path):
    pytest.importorskip("mlflow")
    uri = f"file://{tmp_path / 'mlruns'}"
    path = _scenario_file(tiny, tmp_path / "s.yaml", rounds=2)
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "out"), "-q",
                                      "--log", "mlflow", "--mlflow-uri", uri])
    assert result.exit_code == 0, result.output
    assert f"MLflow run in {uri} (experiment tiny" in result.output
    (run,) = _runs(uri, "tiny")
    run_id = run.info.run_id
    assert run.info.status == "FINISHED" and run.info.run_name == "out"
    assert json.loads((tmp_path / "out" / RUN_FILE).read_text())["run_id"] == run_id
    # parameters: the resolved scenario, dotted, as strings
    stored = yaml.safe_load((tmp_path / "out" / "scenario.yaml").read_text())
    assert run.data.params["training.rounds"] == "2"
    assert run.data.params["training.optimizer.lr"] == str(stored["training"]["optimizer"]["lr"])
    assert run.data.params["model.name"] == "hetero_splitee_resnet"
    assert run.data.params == flatten(stored)
    # metrics: rounds 0..2 at step = round; round 1 was not evaluated (NaN: not logged)
    assert [s for s, _ in _history(uri, run_id, "sim_time_s")] == [0, 1, 2]
    assert [s for s, _ in _history(uri, run_id, "server_accuracy")] == [0, 2]
    assert "note" not in run.data.metrics  # a text column
    _assert_metrics_equal_rounds_csv(uri, run_id, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert run.data.metrics["summary.sim_time_s"] == summary["sim_time_s"]
    assert run.data.metrics["summary.final_server_accuracy"] == summary["final_server_accuracy"]
    # artifacts: the result files, as written; not the checkpoint
    artifacts = {a.path for a in open_client(uri).list_artifacts(run_id)}
    assert {"rounds.csv", "summary.json", "manifest.json", "scenario.yaml", "clients.parquet",
            "events.parquet"} <= artifacts
    assert "checkpoint.pkl" not in artifacts
    local = Path(run.info.artifact_uri.removeprefix("file://"))
    assert (local / "rounds.csv").read_bytes() == (tmp_path / "out" / "rounds.csv").read_bytes()
    # logging changes no result: the same run without it
    plain = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "plain"), "-q"])
    assert plain.exit_code == 0, plain.output
    drop = ["wall_time_s"]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "rounds.csv").drop(columns=drop),
                                  pd.read_csv(tmp_path / "plain" / "rounds.csv").drop(columns=drop))


def test_an_interrupted_run_keeps_its_rounds_and_resume_continues_the_same_run(tiny, tmp_path):
    pytest.importorskip("mlflow")
    from sflsim.config.scenario import Scenario
    from sflsim.runner import run_scenario
    from tests.test_resilience import StopAfter

    uri, out = f"file://{tmp_path / 'mlruns'}", tmp_path / "out"
    data = copy.deepcopy(tiny)
    data["training"]["rounds"] = 3
    scenario = Scenario.model_validate(data)
    with pytest.raises(KeyboardInterrupt), MlflowProgress(out, uri, "tiny", False,
                                                          StopAfter(2)) as cut:
        run_scenario(scenario, out, progress=cut)
    (run,) = _runs(uri, "tiny")
    assert run.info.status == "KILLED"
    before = [s for s, _ in _history(uri, run.info.run_id, "sim_time_s")]
    assert before[:2] == [0, 1] and before == sorted(set(before))  # what was logged stays

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))  # the devices in order
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "-q", "--resume",
                                      "--log", "mlflow", "--mlflow-uri", uri])
    assert result.exit_code == 0, result.output
    (again,) = _runs(uri, "tiny")  # the same MLflow run, not a second one
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert [s for s, _ in _history(uri, run.info.run_id, "sim_time_s")] == [0, 1, 2, 3]
    _assert_metrics_equal_rounds_csv(uri, run.info.run_id, out)


def test_overwrite_starts_a_new_mlflow_run(tiny, tmp_path):
    pytest.importorskip("mlflow")
    uri = f"file://{tmp_path / 'mlruns'}"
    path = _scenario_file(tiny, tmp_path / "s.yaml", rounds=1)
    for extra in ([], ["--overwrite"]):
        result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "out"), "-q",
                                          "--no-train", "--log", "mlflow", "--mlflow-uri", uri,
                                          *extra])
        assert result.exit_code == 0, result.output
    runs = _runs(uri, "tiny")
    assert len(runs) == 2
    for run in runs:
        assert [s for s, _ in _history(uri, run.info.run_id, "sim_time_s")] == [0, 1]


def test_sweep_logs_one_run_per_point_in_the_sweeps_experiment(tiny, tmp_path):
    pytest.importorskip("mlflow")
    uri = f"file://{tmp_path / 'mlruns'}"
    base = _scenario_file(tiny, tmp_path / "base.yaml", rounds=1)
    (tmp_path / "sw.yaml").write_text(f"name: sw\nbase: {base}\naxes: {{seed: [0, 1]}}\n")
    command = ["sweep", str(tmp_path / "sw.yaml"), "-o", str(tmp_path / "out"), "--log", "mlflow",
               "--mlflow-uri", uri]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    runs = {run.info.run_name: run for run in _runs(uri, "sw")}
    assert sorted(runs) == ["p000", "p001"]
    for point, run in runs.items():
        assert run.info.status == "FINISHED"
        assert run.data.params["seed"] == point[-1]
        _assert_metrics_equal_rounds_csv(uri, run.info.run_id, tmp_path / "out" / "points" / point)
    # the sweep again: its points are finished and logged; no second run
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert len(_runs(uri, "sw")) == 2


def test_flatten_dots_keys_and_respects_mlflows_limits():
    flat = flatten({"a": {"b": 1, "c": [1, 2], "d": None, "e": "x" * 10_000}, "f": True})
    assert flat["a.b"] == "1" and flat["a.c"] == "[1, 2]" and flat["a.d"] == "null"
    assert flat["f"] == "true"
    assert len(flat["a.e"]) == MAX_PARAM_CHARS and flat["a.e"].endswith("...")
    assert round_metrics({"round": 3, "x": 1, "y": math.nan, "note": "text", "ok": True}) == \
        {"x": 1.0}


def test_without_mlflow_one_message_says_how_to_install_it(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` fails
    with pytest.raises(SflsimError, match=r'--log mlflow needs the mlflow package, which is '
                                          r'not installed: run pip install -e "\.\[mlflow\]"'):
        require_mlflow()
    path = _scenario_file(tiny, tmp_path / "s.yaml", rounds=1)
    (tmp_path / "sw.yaml").write_text(f"name: sw\nbase: {path}\naxes: {{seed: [0, 1]}}\n")
    for command in (["run", str(path), "-o", str(tmp_path / "out")],
                    ["sweep", str(tmp_path / "sw.yaml"), "-o", str(tmp_path / "out")]):
        result = CliRunner().invoke(app, [*command, "--log", "mlflow"])
        assert result.exit_code == USER_ERROR, result.output
        assert "Traceback" not in result.output and "pip install mlflow-skinny" in result.output
        assert result.output.count("error:") == 1, result.output
    assert not (tmp_path / "out").exists() and not Path("mlruns").exists()


def test_an_mlflow_uri_without_log_mlflow_is_refused(tiny, tmp_path):
    path = _scenario_file(tiny, tmp_path / "s.yaml", rounds=1)
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "out"),
                                      "--mlflow-uri", "file:///x"])
    assert result.exit_code == USER_ERROR, result.output
    assert "--mlflow-uri file:///x: the MLflow store of --log mlflow" in result.output
    assert not (tmp_path / "out").exists()
