"""Runs survive interruption, bad output directories and divergence without losing work.

Kill-and-resume equivalence, atomic result files, overwrite refusal, determinism,
the NaN stop (issue 6).
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from sflsim.checkpoint import CHECKPOINT
from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config.scenario import Scenario
from sflsim.errors import DivergenceError, SflsimError
from sflsim.metrics import results
from sflsim.runner import run_scenario

WALL = ["wall_time_s"]


def tables(run_dir: Path) -> dict[str, pd.DataFrame]:
    return {"rounds": pd.read_csv(run_dir / "rounds.csv").drop(columns=WALL),
            "clients": results.read_run_table(run_dir, "clients"),
            "events": results.read_run_table(run_dir, "events")}


def assert_same_tables(a: Path, b: Path) -> None:
    ta, tb = tables(a), tables(b)
    for name in ta:
        pd.testing.assert_frame_equal(ta[name], tb[name], check_exact=True, obj=name)


class StopAfter:
    """A progress sink that raises KeyboardInterrupt (Ctrl-C) once round ``at`` is done."""

    def __init__(self, at: int):
        self.at = at

    def start(self, total_batches: int, rounds: int) -> None: ...
    def advance(self) -> None: ...

    def round_done(self, row: dict) -> None:
        if row["round"] == self.at:
            raise KeyboardInterrupt


def _trained(rounds_csv: Path) -> int:
    """Rounds completed in ``rounds.csv`` (its round 0 is the untrained model)."""
    return int((pd.read_csv(rounds_csv)["round"] >= 1).sum())


def scenario_of(data: dict, rounds: int = 3) -> Scenario:
    data = copy.deepcopy(data)
    data["training"]["rounds"] = rounds
    return Scenario.model_validate(data)


# ----- checkpoint and resume -----------------------------------------------------------


def test_checkpoint_pickling_keeps_every_kind_of_cpu_tensor():
    """The checkpoint writes CPU storages as raw bytes (sflsim.checkpoint._reduce_storage),
    not as torch's per-storage files: dtype, shape, strides, offset, values, parameters,
    shared objects and empty tensors come back as they were."""
    import io
    import pickle

    from sflsim.checkpoint import _Pickler

    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    param = torch.nn.Parameter(torch.randn(2, 3))
    tensors = [base, base.t(), base[1:, 2:], torch.tensor([True, False]),
               torch.randn(5).to(torch.bfloat16), torch.randint(0, 9, (4,), dtype=torch.int8),
               torch.zeros(0, 3), torch.tensor(7), param,
               torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)]
    buf = io.BytesIO()
    _Pickler(buf, None, None).dump({"tensors": tensors, "again": param})
    back = pickle.loads(buf.getvalue())
    for before, after in zip(tensors, back["tensors"], strict=True):
        assert type(after) is type(before) and after.dtype == before.dtype
        assert after.shape == before.shape and after.stride() == before.stride()
        assert after.storage_offset() == before.storage_offset()
        assert torch.equal(after, before)
    assert back["again"] is back["tensors"][8] and back["again"].requires_grad
    back["tensors"][0][0, 0] = 99.0  # a writable tensor, its own memory
    assert base[0, 0] == 0.0

def test_sigkill_in_round_3_then_resume_equals_uninterrupted_run(tiny, tmp_path):
    """The acceptance test: SIGKILL during round 3 of 5 in a subprocess, resume, compare."""
    tiny["training"]["rounds"] = 5
    tiny["conditions"] = {"straggler_sigma": 0.3, "client_drop_prob": 0.2}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))  # device order = client ids
    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sflsim.cli.main import app; app()", "run", str(path),
         "-o", str(killed), "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rounds_csv = killed / "rounds.csv"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            # the kill must come after round 2's files are all written (checkpoint, tables,
            # summary: no order of separate files is atomic; resume rewrites them all)
            if rounds_csv.exists() and _trained(rounds_csv) >= 2 and json.loads(
                    (killed / "summary.json").read_text()).get("rounds_completed", 0) >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"the run ended before round 3: {proc.stderr.read()!r}"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = _trained(rounds_csv)
    assert 2 <= done < 5, "killed after the run finished"
    # SIGKILL: nothing ran after the kill; the summary of the last round says so
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["status"] == "running" and summary["rounds_completed"] == done

    scenario = Scenario.model_validate(tiny)
    resumed = run_scenario(scenario, killed, resume=True)
    assert resumed.summary["status"] == "completed"
    assert resumed.summary["rounds_completed"] == 5
    full = run_scenario(scenario, tmp_path / "full")
    assert_same_tables(killed, tmp_path / "full")
    assert resumed.summary["final_server_accuracy"] == full.summary["final_server_accuracy"]


@pytest.mark.parametrize("algorithm", ["hetero_splitee_averaging", "fedavg", "splitfed_v2",
                                       "fedsga", "multisfl", "fedgh", "fedas"])
def test_resume_after_ctrl_c_equals_uninterrupted_run(tiny, tmp_path, algorithm):
    """Every kind of state (per-client server copies, global model, prompts, prototypes,
    estimator, branches, split policies, stragglers, dropouts, a round deadline that cuts
    work off) comes back from the checkpoint."""
    tiny["algorithm"] = {"name": algorithm}
    tiny["conditions"] = {"straggler_sigma": 0.3, "client_drop_prob": 0.2,
                          "round_deadline_s": "0.4 s"}
    scenario = scenario_of(tiny)
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    assert json.loads((tmp_path / "cut" / "summary.json").read_text())["status"] == "interrupted"
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "cut", tmp_path / "full")


def test_resume_refuses_another_scenario_and_a_missing_checkpoint(tiny, tmp_path):
    scenario = scenario_of(tiny, rounds=2)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "run", progress=StopAfter(1))
    other = copy.deepcopy(tiny)
    other["training"]["rounds"], other["training"]["batch_size"] = 2, 8
    with pytest.raises(SflsimError, match=r"training\.batch_size: 16 before, 8 now"):
        run_scenario(Scenario.model_validate(other), tmp_path / "run", resume=True)
    with pytest.raises(SflsimError, match="has no checkpoint"):
        run_scenario(scenario, tmp_path / "empty", resume=True)
    (tmp_path / "run" / CHECKPOINT).write_bytes(b"\x80\x05 damaged")
    with pytest.raises(SflsimError, match="cannot read checkpoint"):
        run_scenario(scenario, tmp_path / "run", resume=True)


def _checkpoint_header(tiny: dict, path: Path) -> dict:
    """The scenario dump of ``tiny`` as a run saves it, and ``path`` holding just its header."""
    from sflsim.config.resolve import resolve_scenario
    from sflsim.resume import VERSION

    data = resolve_scenario(Scenario.model_validate(tiny)).model_dump(mode="json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"version": VERSION, "scenario": data, "round": 1,
                                   "sim_now_s": 1.0}))
    return data


def test_a_refused_resume_counts_the_fields_it_does_not_name(tiny, tmp_path):
    """Three differing fields are named, the rest counted; values as YAML writes them."""
    from sflsim.resume import check_resume

    path = tmp_path / "run" / CHECKPOINT
    _checkpoint_header(tiny, path)
    other = copy.deepcopy(tiny)
    other["training"].update(batch_size=8, local_epochs=2)
    other["evaluation"]["max_test_samples"] = None
    other["seed"] = 5
    other["dataset"]["fraction"] = 0.03
    data = Scenario.model_validate(other).model_dump(mode="json")
    with pytest.raises(SflsimError) as info:
        check_resume(path, data)
    message = str(info.value)
    assert ("(dataset.fraction: 0.02 before, 0.03 now; evaluation.max_test_samples: 40 before, "
            "null now; seed: 0 before, 5 now; 2 more fields differ)") in message, message
    assert "None" not in message
    other["training"].update(batch_size=16, local_epochs=1)
    with pytest.raises(SflsimError, match=r"seed: 0 before, 5 now\); resume with"):
        check_resume(path, Scenario.model_validate(other).model_dump(mode="json"))


def test_a_damaged_checkpoint_says_so_without_python_s_words(tiny, tmp_path):
    from sflsim.checkpoint import load_checkpoint
    from sflsim.resume import check_resume

    path = tmp_path / "run" / CHECKPOINT
    data = _checkpoint_header(tiny, path)
    header = path.read_bytes()
    expected = (f"cannot read checkpoint {path}: the file is damaged or not an sflsim "
                f"checkpoint; start afresh with --overwrite")
    for damage in (b"garbage\n", b"\x80\x05 damaged", b"", pickle.dumps([1, 2])):
        path.write_bytes(damage)
        with pytest.raises(SflsimError) as info:
            check_resume(path, data)
        assert str(info.value).startswith(expected), info.value
        assert "Error" not in str(info.value) and "invalid literal" not in str(info.value)
    path.write_bytes(header + b"garbage after the header")  # the models do not unpickle
    with pytest.raises(SflsimError) as info:
        load_checkpoint(path, data, data=None, on_batch=None)
    assert str(info.value).startswith(expected) and "Error" not in str(info.value)


def test_cli_a_damaged_checkpoint_is_one_message(tiny, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    _checkpoint_header(tiny, tmp_path / "o" / CHECKPOINT)
    (tmp_path / "o" / CHECKPOINT).write_text("garbage\n")
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "o"), "-q",
                                      "--resume"])
    assert result.exit_code == USER_ERROR, result.output
    assert "is damaged or not an sflsim checkpoint" in result.output
    assert "ValueError" not in result.output and "Traceback" not in result.output


def test_cli_ctrl_c_says_how_to_resume(tiny, tmp_path, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))  # device order = client ids

    finished_rounds = []

    def interrupted(scenario, out, **kwargs):
        out.mkdir(parents=True, exist_ok=True)
        if finished_rounds:
            (out / CHECKPOINT).write_bytes(b"")
            results.write_json(out / "summary.json", {"rounds_completed": len(finished_rounds)})
        raise KeyboardInterrupt

    monkeypatch.setattr("sflsim.runner.run_scenario", interrupted)
    args = ["run", str(path), "-o", str(tmp_path / "o"), "-q", "--set", "seed=3",
            "--threads", "1"]
    result = CliRunner().invoke(app, args)  # before the first round ends: no checkpoint
    assert result.exit_code == 130
    assert "interrupted before the first round finished: nothing to resume" in result.output
    assert "kept" not in result.output  # one statement that matches the state
    # the command as typed, --threads and -q included
    assert f"-o {tmp_path / 'o'} --set=seed=3 --threads 1 -q --overwrite" in result.output
    finished_rounds.extend([1, 2])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130
    assert "interrupted: the 2 completed rounds are kept in" in " ".join(result.output.split())
    assert f"-o {tmp_path / 'o'} --set=seed=3 --threads 1 -q --resume" in result.output


def test_sigterm_stops_like_ctrl_c_and_keeps_the_rounds(tiny, tmp_path):
    tiny["training"]["rounds"] = 50
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sflsim.cli.main import app; app()", "run", str(path),
         "-o", str(out), "-q", "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "rounds.csv").exists():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "--resume" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] >= 1


def test_resuming_a_completed_run_changes_nothing(tiny, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    out = tmp_path / "o"
    assert CliRunner().invoke(app, ["run", str(path), "-o", str(out), "-q"]).exit_code == 0
    before = (out / "summary.json").read_bytes()
    again = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "-q", "--resume"])
    assert again.exit_code == 0 and "already complete" in again.output
    assert (out / "summary.json").read_bytes() == before


def test_summary_json_is_strict_json(tiny, tmp_path):
    tiny["algorithm"] = {"name": "fedavg"}  # no exit heads: client accuracy is missing
    run_scenario(Scenario.model_validate(tiny), tmp_path / "o")
    text = (tmp_path / "o" / "summary.json").read_text()
    assert "NaN" not in text
    summary = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert summary["final_client_accuracy"] is None


# ----- safe output -----------------------------------------------------------------------

def test_existing_results_are_not_overwritten_without_the_flag(tiny, tmp_path):
    scenario = scenario_of(tiny, rounds=1)
    out = tmp_path / "run"
    run_scenario(scenario, out)
    before = (out / "rounds.csv").read_bytes()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SflsimError, match=r"already holds results .*--overwrite.*--resume"):
        run_scenario(scenario, out)
    assert (out / "rounds.csv").read_bytes() == before
    # a scenario that cannot be built loses nothing, even with --overwrite
    bad = copy.deepcopy(tiny)
    bad["devices"]["weak"]["count"] = 10_000
    with pytest.raises(SflsimError):
        run_scenario(Scenario.model_validate(bad), out, overwrite=True)
    assert (out / "rounds.csv").read_bytes() == before
    run_scenario(scenario_of(tiny, rounds=2), out, overwrite=True)
    assert list(pd.read_csv(out / "rounds.csv")["round"]) == [0, 1, 2]
    assert (out / "notes.txt").read_text() == "mine"  # only sflsim's own files are replaced


def test_cli_refuses_existing_results_and_conflicting_flags(tiny, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))  # device order = client ids
    out = tmp_path / "o"
    runner = CliRunner()
    assert runner.invoke(app, ["run", str(path), "-o", str(out), "-q"]).exit_code == 0
    again = runner.invoke(app, ["run", str(path), "-o", str(out), "-q"])
    assert again.exit_code == USER_ERROR
    assert "already holds results" in again.output and "Traceback" not in again.output
    assert "running" not in again.output  # refused before the run is announced
    both = runner.invoke(app, ["run", str(path), "-o", str(out), "--resume", "--overwrite"])
    assert both.exit_code == USER_ERROR and "exclude each other" in both.output
    assert runner.invoke(app, ["run", str(path), "-o", str(out), "-q", "--overwrite"]).exit_code == 0


def test_nothing_is_written_outside_the_output_directory(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_scenario(scenario_of(tiny, rounds=1), tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert written <= set(results.RESULT_FILES) - {results.TRACEBACK_FILE}  # only when a run fails
    # every result file, each table in one format
    assert written >= {"scenario.yaml", "rounds.csv", "early_exit.csv", "summary.json",
                       "manifest.json", "checkpoint.pkl"}
    for name in results.RUN_TABLES:
        assert len(written & {f"{name}.parquet", f"{name}.csv"}) == 1, name


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "rounds.csv"
    path.write_text("round\n1\n")

    def half(tmp: Path) -> None:
        tmp.write_text("round\n1\n2")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        results.atomic_write(path, half)
    assert path.read_text() == "round\n1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rounds.csv"]  # no temporary left


def test_a_reader_never_sees_a_partial_rounds_csv(tiny, tmp_path):
    """A thread reads rounds.csv as fast as it can while the run rewrites it each round."""
    out = tmp_path / "run"
    seen: list[tuple[int, int]] = []  # (rows, columns) of every successful read
    stop = threading.Event()

    def read() -> None:
        path = out / "rounds.csv"
        while not stop.is_set():
            time.sleep(0.002)  # leave the GIL to the run between reads
            try:
                frame = pd.read_csv(path)
            except FileNotFoundError:
                continue
            seen.append(frame.shape)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        result = run_scenario(scenario_of(tiny, rounds=4), out)
    finally:
        stop.set()
        reader.join()
    width = result.rounds.shape[1]
    assert seen, "the reader never saw the file"
    assert {cols for _, cols in seen} == {width}
    assert {rows for rows, _ in seen} <= {2, 3, 4, 5}  # round 0, then 1 to 4 rounds done


# ----- determinism -----------------------------------------------------------------------

def test_same_seed_same_results_other_seed_other_results(tiny, tmp_path):
    tiny["conditions"] = {"straggler_sigma": 0.3, "client_drop_prob": 0.2}
    run_scenario(scenario_of(tiny, rounds=2), tmp_path / "a")
    run_scenario(scenario_of(tiny, rounds=2), tmp_path / "b")
    assert_same_tables(tmp_path / "a", tmp_path / "b")
    tiny["seed"] = 1
    run_scenario(scenario_of(tiny, rounds=2), tmp_path / "c")
    a, c = tables(tmp_path / "a"), tables(tmp_path / "c")
    assert not a["rounds"].equals(c["rounds"])
    assert not a["clients"]["client_loss"].equals(c["clients"]["client_loss"])


# ----- divergence --------------------------------------------------------------------------

def test_a_nan_loss_stops_the_run_and_keeps_the_completed_rounds(tiny, tmp_path):
    """Round 1 trains normally; then every learning rate becomes 1e12 and round 2 blows up."""
    tiny["training"]["optimizer"] = {"name": "sgd", "lr": 0.01}
    scenario = scenario_of(tiny, rounds=4)
    holder: dict = {}

    class RaiseLr(StopAfter):
        def round_done(self, row: dict) -> None:
            if row["round"] == 1:
                algorithm = holder["algorithm"]
                optimizers = [c.optimizer for c in algorithm.ctx.clients]
                optimizers.append(algorithm.server_optimizer)
                for opt in optimizers:
                    for group in opt.param_groups:
                        group["lr"] = 1e12

    import sflsim.run.entry as start  # run_scenario calls build by its name there

    real_build = start.build

    def build(s):
        ctx, algorithm = real_build(s)
        holder["algorithm"] = algorithm
        return ctx, algorithm

    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(start, "build", build)
        with pytest.raises(DivergenceError) as info:
            run_scenario(scenario, out, progress=RaiseLr(0))
    err = info.value
    assert (err.algorithm, err.round) == ("hetero_splitee_sequential", 2)
    assert f"client {err.client_id}" in str(err) and "round 2" in str(err)
    assert "hetero_splitee_sequential diverged" in str(err)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["rounds_completed"] == 1
    assert "round 2" in summary["diverged"]
    assert list(pd.read_csv(out / "rounds.csv")["round"]) == [0, 1]


def test_cli_reports_divergence_in_one_line(tiny, tmp_path, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny))

    def diverges(*args, **kwargs):
        raise DivergenceError("fedavg diverged in round 3: the client-side loss of client 2 is nan",
                              "fedavg", 3, 2)

    monkeypatch.setattr("sflsim.runner.run_scenario", diverges)
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "o"), "-q"])
    assert result.exit_code == USER_ERROR
    assert "\nerror: fedavg diverged in round 3" in result.output
    # run_scenario is replaced: no summary.json, so nothing is said to be kept
    assert "no round completed and nothing was written to" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_the_note_after_a_failed_run_counts_the_rounds_it_kept(tmp_path):
    from sflsim.cli.run import _kept_note

    for done, said in ((0, "no round completed; the record is in"),
                       (1, "the 1 completed round is kept in"),
                       (3, "the 3 completed rounds are kept in")):
        results.write_json(tmp_path / "summary.json", {"rounds_completed": done})
        assert _kept_note(tmp_path, "failed") == f"{said} {tmp_path} (summary.json: status failed)"
    empty = tmp_path / "never_written"  # failed before its folder was made: nothing is there
    assert _kept_note(empty, "failed") == f"no round completed and nothing was written to {empty}"


# host threads: in the isolated tests' one subprocess (see pyproject.toml)
@pytest.mark.isolated(group="host_kernels")
def test_resume_may_change_host_only_options(tiny, tmp_path):
    """training.parallel_clients changes how the host trains, not the results: a run
    interrupted with one value resumes with another and equals the uninterrupted run."""
    tiny["algorithm"] = {"name": "fedavg"}
    scenario = scenario_of(tiny)
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    tiny["training"]["parallel_clients"] = 2
    resumed = run_scenario(scenario_of(tiny), tmp_path / "cut", resume=True)
    assert resumed.algorithm.scenario.training.parallel_clients == 2  # the new value is used
    assert_same_tables(tmp_path / "cut", tmp_path / "full")


def _fail_in_round(monkeypatch, failing_round: int) -> None:
    """Make FedAvg's aggregation raise an unexpected IndexError in ``failing_round``."""
    from sflsim.algorithms.fedavg import FedAvg

    original = FedAvg.end_round

    def end_round(self, round_):
        if round_ == failing_round:
            raise IndexError("Target 200 is out of bounds.")
        original(self, round_)

    monkeypatch.setattr(FedAvg, "end_round", end_round)


def test_an_unexpected_error_fails_the_run_and_keeps_the_rounds(tiny, tmp_path, monkeypatch):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["rounds"] = 3
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny))
    out = tmp_path / "o"
    _fail_in_round(monkeypatch, 2)
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "-q"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert "error: the run failed: IndexError: Target 200 is out of bounds." in lines
    assert "Traceback" not in result.output and sum(line.startswith("error:") for line in lines) == 1
    assert "the 1 completed round is kept in" in " ".join(result.output.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 1
    assert summary["error"] == {"type": "IndexError", "message": "Target 200 is out of bounds.",
                                "round": 2, "traceback": results.TRACEBACK_FILE}
    text = (out / results.TRACEBACK_FILE).read_text()
    assert text.startswith("Traceback") and "IndexError: Target 200" in text and "end_round" in text
    assert pd.read_csv(out / "rounds.csv")["round"].tolist() == [0, 1]  # 0: untrained
    # the defect fixed, the run resumes from the kept round and the traceback goes
    monkeypatch.undo()
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "-q", "--resume"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert not (out / results.TRACEBACK_FILE).exists()


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_a_finished_run_can_train_more_rounds(tiny, tmp_path, schedule):
    """"Train 2 more rounds": resume a finished 2-round run with training.rounds 4. With a
    constant learning rate it equals a 4-round run; the cosine schedule keeps the horizon
    it started with, then stays at min_lr (stated on the terminal and in summary.json)."""
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["schedule"] = {"name": schedule, **({"min_lr": 1e-5} if schedule == "cosine" else {})}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))  # device order = client ids
    out = tmp_path / "run"
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(path), "-o", str(out), "-q", "--set", "training.rounds=2"])
    assert result.exit_code == 0, result.output
    with pytest.raises(SflsimError, match=r"completed 2 rounds; use 2 or more"):
        run_scenario(scenario_of(tiny, rounds=1), out, resume=True)
    result = runner.invoke(app, ["run", str(path), "-o", str(out), "-q", "--resume",
                                 "--set", "training.rounds=4"])
    assert result.exit_code == 0, result.output
    assert "training.rounds 2 -> 4" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 4
    assert summary["rounds_before"] == [2]
    assert yaml.safe_load((out / "scenario.yaml").read_text())["training"]["rounds"] == 4
    run = run_scenario(scenario_of(tiny, rounds=4), tmp_path / "full")
    if schedule == "constant":
        assert summary["lr_schedule_horizon_rounds"] is None
        assert_same_tables(out, tmp_path / "full")
        assert "a run started with 4 rounds" in result.output
    else:
        assert summary["lr_schedule_horizon_rounds"] == 2
        assert "from round 3 the learning rate stays at min_lr 1e-05" in result.output
        # the 4-round run decays over 4 rounds, so it differs from the extended one
        assert not pd.read_csv(out / "rounds.csv").client_loss.equals(run.rounds.client_loss)
        resumed = run_scenario(scenario_of(tiny, rounds=4), out, resume=True)  # complete
        lr_of = resumed.algorithm.lr_for_round
        assert lr_of(2) > 1e-5 and lr_of(3) == lr_of(4) == pytest.approx(1e-5)
        # a second resume: the horizon is still the checkpoint's 2 rounds, not the 4 of
        # the scenario.yaml the first resume wrote
        result = runner.invoke(app, ["run", str(path), "-o", str(out), "-q", "--resume",
                                     "--set", "training.rounds=5"])
        assert result.exit_code == 0, result.output
        assert "training.rounds 4 -> 5" in result.output
        assert "keeps the horizon the run started with (2 rounds)" in result.output
        assert "has been at min_lr 1e-05 since round 3" in result.output
        summary = json.loads((out / "summary.json").read_text())
        assert summary["lr_schedule_horizon_rounds"] == 2 and summary["rounds_before"] == [2, 4]


def test_torch_cosine_schedules_stay_at_min_lr_past_their_horizon():
    """Algorithms with torch schedulers (Hetero-SplitEE, SplitFed's server) extended past
    the rounds they started with: torch's cosine would climb back up; it stays at min_lr."""
    import torch

    from sflsim.algorithms.steps import TorchSteps

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2, eta_min=0.001)

    class Holder:
        schedulers = [sched]

    lrs = []
    for _ in range(4):
        TorchSteps.step_schedulers(Holder())
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[1:] == [pytest.approx(0.001)] * 3 and lrs[0] == pytest.approx(0.0505)


def test_resume_with_stream_seeds_equals_uninterrupted_run(tiny, tmp_path):
    """Each stream's generators come back from the checkpoint, not from ``seed``."""
    tiny["seeds"] = {"partition": 4, "model": 5, "training": 6}
    tiny["conditions"] = {"straggler_sigma": 0.3, "client_drop_prob": 0.2}
    tiny["evaluation"]["max_test_samples"] = 30
    scenario = scenario_of(tiny)
    run_scenario(scenario, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    run_scenario(scenario, tmp_path / "cut", resume=True)
    assert_same_tables(tmp_path / "cut", tmp_path / "full")
    other = scenario_of({**tiny, "seeds": {"partition": 4, "model": 5, "training": 7}})
    with pytest.raises(SflsimError, match=r"seeds\.training: 6 before, 7 now"):
        run_scenario(other, tmp_path / "cut", resume=True)


def test_a_checkpoint_keeps_the_schedule_horizon(tiny, tmp_path):
    """The checkpoint's header holds the rounds a cosine schedule decays over (the run's
    first training.rounds), read from the algorithm's torch steps, so a resume that
    extends the run keeps it."""
    from sflsim.config import validate_scenario
    from sflsim.resume import check_resume

    tiny["training"]["rounds"] = 2
    tiny["training"]["schedule"] = {"name": "cosine", "min_lr": 0.001}
    scenario = validate_scenario(tiny)
    run_scenario(scenario, tmp_path)
    header = check_resume(tmp_path / "checkpoint.pkl", scenario.model_dump(mode="json"))
    assert header["lr_horizon_rounds"] == 2
