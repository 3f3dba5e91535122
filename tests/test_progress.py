"""What ``sflsim run`` and ``sflsim sweep`` print while they work (``sflsim/cli/progress_display.py``):
plain lines at a steady pace when the output is not a terminal, a heartbeat for sweeps."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli import progress_display as progress_mod
from sflsim.cli.main import app
from sflsim.cli.progress_display import PlainProgress, duration, round_line

ROW = {"round": 1, "sim_time_s": 12.34, "wall_time_s": 5.0, "server_accuracy": 0.5,
       "client_accuracy": 0.25, "note": ""}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_after_a_tenth_of_a_round_or_an_interval_whichever_first():
    lines: list[str] = []
    clock = Clock()
    plain = PlainProgress(lines.append, interval_s=30.0, step=0.1, min_gap_s=5.0, clock=clock)
    plain.start(total_batches=200, rounds=2)
    clock.now = 20.0  # loading and round 0, once: not in the time left
    plain.round_started(1, 100, lambda: 7.5)
    for _ in range(9):  # 9% of the round, 9 s: nothing yet
        clock.now += 1.0
        plain.advance()
    assert lines == []
    clock.now += 1.0
    plain.advance()  # 10%, 10 s into the round: 190 batches left at 1 s each
    assert lines == ["round 1/2 (10%)  batch 10/100  sim 7.5 s  elapsed 30 s  ETA 3 min 10 s"]
    for _ in range(5):  # slow batches: 30 s pass before the next tenth
        clock.now += 7.0
        plain.advance()
    # 45 s of the round done; 85 batches left at 3.1 s each (the first one left out)
    assert len(lines) == 2 and lines[1].startswith("round 1/2 (14%)  batch 15/100  ")
    assert "elapsed 1 min 05 s" in lines[1]
    for _ in range(9):  # a tenth of the round's estimated time after the last line
        clock.now += 1.0
        plain.advance()
    assert len(lines) == 2
    clock.now += 1.0
    plain.advance()
    assert len(lines) == 3 and lines[2].startswith("round 1/2 (25%)  batch 25/100  ")


def test_plain_lines_of_fast_rounds_keep_a_minimum_gap():
    lines: list[str] = []
    clock = Clock()
    plain = PlainProgress(lines.append, interval_s=30.0, step=0.1, min_gap_s=5.0, clock=clock)
    plain.start(total_batches=100, rounds=1)
    plain.round_started(1, 100, lambda: 0.0)
    for _ in range(100):  # 1/8 s a batch: a tenth every 1.25 s, but a line every 5 s at most
        clock.now += 0.125
        plain.advance()
    assert len(lines) == 2
    plain.round_done(ROW)
    assert lines[-1] == round_line(ROW, 1)


def test_duration_and_marked_rounds_from_the_checkpoint():
    assert [duration(s) for s in (0.4, 59.4, 61, 3599, 3600, 7620)] == [
        "0 s", "59 s", "1 min 01 s", "59 min 59 s", "1 h 00 min", "2 h 07 min"]
    assert round_line(ROW, 3) == "round 1/3  sim 12.3 s  wall 5.0 s  server acc 0.500  client acc 0.250"
    assert round_line({**ROW, "from_checkpoint": True}, 3).endswith("  (from checkpoint)")


@pytest.fixture
def fast_lines(monkeypatch):
    """Plain progress lines at every batch (the CLI reads the settings when it runs)."""
    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.0)
    monkeypatch.setattr(progress_mod, "MIN_GAP_S", 0.0)


TIME = r"(?:\d+ s|\d+ min \d\d s)"
PROGRESS_LINE = re.compile(rf"^round 1/1(?: \((\d+)%\))?  batch (\d+)/(\d+)  server (\d+)/(\d+)"
                           rf"  test (\d+)/(\d+)  sim [\d.]+ s  "
                           rf"elapsed {TIME}  ETA (?:{TIME}|estimating)$")


def test_cli_run_prints_progress_lines_when_output_is_not_a_terminal(tiny, tmp_path, fast_lines):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "--threads", "1"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    found = [PROGRESS_LINE.match(line) for line in lines]
    progress = [m for m in found if m]
    assert len(progress) >= 3, result.output
    # CliRunner's output is not a terminal: a line at every unit of work (the interval is
    # 0 here): 15 training batches (3 clients x 80 samples / batch 16), then a server
    # step for each, then 3 test batches (one per client)
    assert {(int(m[3]), int(m[5]), int(m[7])) for m in progress} == {(15, 15, 3)}
    counts = [(int(m[2]), int(m[4]), int(m[6])) for m in progress]
    assert counts[:15] == [(b, 0, 0) for b in range(1, 16)]
    assert counts[15:30] == [(15, s, 0) for s in range(1, 16)]
    assert counts[30:] == [(15, 15, t) for t in range(1, 4)]
    assert progress[-1][1] == "100"
    end = next(i for i, line in enumerate(lines) if line.startswith("round 1/1  sim"))
    assert end > max(i for i, m in enumerate(found) if m)  # the round's line comes last
    # between the last server step and the round's line, the evaluation is announced
    evaluating = [i for i, line in enumerate(lines) if "evaluating on" in line]
    last_server = max(i for i, m in enumerate(found) if m and m[6] == "0")
    assert len(evaluating) == 1 and last_server < evaluating[0] < end
    assert lines[evaluating[0]].startswith("round 1/1  evaluating on ")
    assert "  sim " in lines[evaluating[0]]
    # -q: no progress at all
    quiet = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "q"), "-q",
                                     "--threads", "1"])
    assert quiet.exit_code == 0 and not any(map(PROGRESS_LINE.match, quiet.output.splitlines()))


def test_cli_resume_marks_the_rounds_from_the_checkpoint(tiny, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    out = tmp_path / "o"
    runner = CliRunner()
    first = runner.invoke(app, ["run", str(path), "-o", str(out), "--threads", "1"])
    assert first.exit_code == 0, first.output
    assert "(from checkpoint)" not in first.output
    more = runner.invoke(app, ["run", str(path), "-o", str(out), "--threads", "1", "--resume",
                               "--set", "training.rounds=2"])
    assert more.exit_code == 0, more.output
    lines = more.output.splitlines()
    assert lines[0].startswith("resuming tiny")
    assert [line for line in lines if line.startswith("round 1/2  sim")][0].endswith(
        "  (from checkpoint)")
    assert "(from checkpoint)" not in [line for line in lines
                                       if line.startswith("round 2/2  sim")][0]


def test_cli_resume_of_a_complete_run_says_one_thing(tiny, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    out = tmp_path / "o"
    runner = CliRunner()
    assert runner.invoke(app, ["run", str(path), "-o", str(out), "-q"]).exit_code == 0
    again = runner.invoke(app, ["run", str(path), "-o", str(out), "-q", "--resume"])
    assert again.exit_code == 0
    assert again.output == f"{out} is already complete (1 round); nothing to resume\n"
    empty = runner.invoke(app, ["run", str(path), "-o", str(tmp_path / "none"), "--resume"])
    assert empty.exit_code == 2 and "has no checkpoint" in empty.output
    assert "resuming" not in empty.output  # refused before the run is announced


@pytest.mark.parametrize("timing_only", [False, True])
def test_cli_resume_of_a_complete_run_with_another_scenario_names_the_difference(
        tiny, tmp_path, timing_only):
    """A finished run resumed with a changed field is refused, naming it, as an unfinished
    one is (a timing-only run keeps no checkpoint: its scenario.yaml is compared)."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    out = tmp_path / "o"
    runner = CliRunner()
    first = ["run", str(path), "-o", str(out), "-q", *(["--no-train"] if timing_only else [])]
    assert runner.invoke(app, first).exit_code == 0
    again = runner.invoke(app, [*first, "--resume", "--set", "training.batch_size=32"])
    assert again.exit_code == 2, again.output
    assert "nothing to resume" not in again.output
    assert "the scenario differs" in again.output and "training.batch_size" in again.output
    same = runner.invoke(app, [*first, "--resume"])
    assert same.exit_code == 0 and "nothing to resume" in same.output


def test_cli_sweep_prints_a_heartbeat_while_points_run(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(progress_mod, "HEARTBEAT_S", 0.05)
    tiny["training"]["rounds"] = 2
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(tiny, sort_keys=False))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"name": "beat", "base": "base.yaml", "axes": {"seed": [1, 2]}}))
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"),
                                      "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    beats = [line for line in result.output.splitlines()
             if line.startswith(("[0/2 points done] running", "[1/2 points done] running"))]
    assert beats, result.output
    assert all(re.search(r"; elapsed \S.*; ETA ", line) for line in beats)
    assert any("running: p000 round 1/2" in line or "running: p001 round 1/2" in line
               for line in beats), beats


def test_the_heartbeat_beats_among_fast_point_lines_too():
    """Points that finish every few milliseconds print their lines, and the elapsed time
    and the time left still come every interval (each point line reset the wait)."""
    import time

    lines: list[str] = []
    beat = progress_mod.SweepHeartbeat(lines.append, interval_s=0.05)
    beat.start(100, 0)
    for k in range(40):
        beat.point_done()
        beat.say(f"[{k + 1}/100] p{k:03d} completed")
        time.sleep(0.01)
    beat.stop()
    beats = [line for line in lines if "; elapsed " in line and "; ETA " in line]
    assert len(beats) >= 2, lines


def test_the_resume_command_is_the_command_as_typed(tmp_path):
    """After Ctrl-C the command to continue keeps --threads and the options as typed."""
    from sflsim.cli.run import command_as_typed

    typed = {"training.device=cpu": "--device cpu", "training.timing_only=true": "--no-train"}
    words = command_as_typed("s.yaml", tmp_path / "o", ["seed=1"], typed, 1, True)
    assert words == ["sflsim", "run", "s.yaml", "-o", str(tmp_path / "o"), "--set=seed=1",
                     "--device", "cpu", "--no-train", "--threads", "1", "-q"]


def test_an_option_in_error_is_named_as_typed(tiny, tmp_path):
    """``--parallel-clients 0`` is refused as that option, not as a --set never typed."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "o"),
                                      "--parallel-clients", "0"])
    assert result.exit_code == 2, result.output
    assert "--parallel-clients 0: training.parallel_clients" in result.output
    assert "--set" not in result.output
    import torch

    if not torch.cuda.is_available():
        result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "g"),
                                          "--device", "cuda"])
        assert result.exit_code == 2, result.output
        assert "--device cuda:" in result.output and "--set" not in result.output


def test_the_first_eta_leaves_out_the_warm_up_batch():
    """The first batch of a run is slow (torch warms up): the time left is extrapolated
    from the batches after it, not from a 30 s first batch."""
    lines: list[str] = []
    clock = Clock()
    plain = PlainProgress(lines.append, interval_s=30.0, step=0.1, min_gap_s=5.0, clock=clock)
    plain.start(total_batches=200, rounds=2)
    plain.round_started(1, 100, lambda: 0.0)
    clock.now += 30.0
    plain.advance()  # the warm-up batch: 30 s
    assert lines and lines[0].endswith("ETA estimating")
    for _ in range(10):
        clock.now += 1.0
        plain.advance()
    # 189 batches left at 1 s each, not at (30 + 10) / 11 s
    assert plain.line(clock.now).endswith("ETA 3 min 09 s"), lines


def test_a_sweep_point_without_client_accuracy_says_n_a_as_run_does(capsys):
    from sflsim.cli.sweep import PrintProgress

    with PrintProgress() as shown:
        shown.start(1, 0)
        shown.point_done({"point": "p000", "status": "completed", "final_server_accuracy": 0.5,
                          "final_client_accuracy": float("nan"), "sim_time_s": 1.0,
                          "wall_time_s": 2.0})
    out = " ".join(capsys.readouterr().out.split())
    assert "[1/1] p000 completed server acc 0.500 client acc n/a sim 1.0 s" in out


def test_a_round_line_shows_a_short_wall_time_in_its_digits():
    """A timing-only round takes milliseconds of wall time: 0.0421 s, not 0 s."""
    assert "wall 0.0421 s" in round_line({**ROW, "wall_time_s": 0.0421}, 3)
    assert "wall 638 s" in round_line({**ROW, "wall_time_s": 637.69}, 3)

