"""A sweep on a real local Ray brings back every file and folder its points write.

Each Ray task runs its point in a temporary folder and returns the files: the clients
and events tables are folders of Parquet files, and they come back too, so each
point's folder holds what the same sweep run locally holds. A point that fails on Ray
is recorded as on a local run (its ``error.txt`` written by the driver).

The one test here is the suite's only real Ray: it starts it through ``run_sweep``
(``--executor ray``, a local Ray of ``workers`` CPUs, shut down when the sweep ends);
``tests/test_sweep.py`` tests the executor's other paths on a stand-in ``ray`` module.
Starting a Ray costs several seconds of daemons and each worker process imports torch,
so one Ray of one CPU (one worker, reused by every task) runs every point.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sflsim
from sflsim.cli.main import app
from sflsim.metrics import results
from sflsim.sweep import load_sweep, run_sweep

ray = pytest.importorskip("ray")

#: columns that hold wall-clock time, which differs between any two runs
WALL = ["wall_time_s"]
#: a point that passes validation but fails when built: more clients than training samples
TOO_MANY = 500


def point_files(point_dir) -> list[str]:
    return sorted(p.relative_to(point_dir).as_posix() for p in point_dir.rglob("*")
                  if p.is_file())


def test_a_ray_sweep_brings_back_every_file_and_table(tiny, tmp_path, monkeypatch):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(tiny, sort_keys=False))
    path = tmp_path / "sw.yaml"
    # two points that train and one that fails when built (more clients than samples)
    path.write_text(yaml.safe_dump({"base": "base.yaml", "mode": "zip", "axes": {
        "seed": [0, 1, 0], "devices.weak.count": [1, 1, TOO_MANY]}}))
    local = run_sweep(load_sweep(path), tmp_path / "local")
    # the tasks run the sflsim under test: the local Ray's processes inherit this
    # environment; Ray's default niceness (15) would leave its workers waiting behind
    # whatever else the machine runs (the other test worker)
    here = str(Path(sflsim.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, (here, os.environ.get("PYTHONPATH")))))
    monkeypatch.setenv("RAY_worker_niceness", "0")
    assert not ray.is_initialized()
    # one CPU: the points run one after another, in one worker process
    remote = run_sweep(load_sweep(path), tmp_path / "ray", executor="ray", workers=1)
    assert not ray.is_initialized()  # the Ray the sweep started is shut down
    assert list(local.table.status) == list(remote.table.status) == [
        "completed", "completed", "failed"]
    # the failed point: recorded here by the driver, as a local run records it
    for where in ("local", "ray"):
        assert "training samples" in (tmp_path / where / "points/p002/error.txt").read_text()
    for point in ("p000", "p001"):
        a, b = tmp_path / "local" / "points" / point, tmp_path / "ray" / "points" / point
        names = point_files(a)
        assert {"events.parquet/round-000001.parquet",
                "clients.parquet/round-000001.parquet"} <= set(names), names
        assert point_files(b) == names
        for name in results.RUN_TABLES:
            pd.testing.assert_frame_equal(results.read_run_table(a, name),
                                          results.read_run_table(b, name),
                                          check_exact=True, obj=f"{point} {name}")
        pd.testing.assert_frame_equal(
            results.read_result_csv(a / "rounds.csv").drop(columns=WALL),
            results.read_result_csv(b / "rounds.csv").drop(columns=WALL), check_exact=True)
        summaries = [json.loads((d / "summary.json").read_text()) for d in (a, b)]
        for summary in summaries:
            summary.pop("wall_time_s")
        assert summaries[0] == summaries[1]
    # the tables are there to export and to plot
    result = CliRunner().invoke(app, ["export", str(tmp_path / "ray"), "--csv"])
    assert result.exit_code == 0 and result.output.count("wrote") == 4, result.output
    result = CliRunner().invoke(app, ["plot", "timeline", str(tmp_path / "ray/points/p000"),
                                      "-o", str(tmp_path / "timeline"), "--format", "png"])
    assert result.exit_code == 0, result.output
