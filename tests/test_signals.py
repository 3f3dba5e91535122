"""Ctrl-C and SIGTERM stop a run within seconds, also from inside a long torch call
(:mod:`sflsim.signals`), and never cut a round's files short."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.metrics.results import read_run_table
from sflsim.signals import GRACE_S, stop_on_signals, uninterrupted

#: A run whose second round starts with one torch call of about a minute (an
#: eigendecomposition; torch holds no GIL inside it), as a kernel that hangs would.
STUCK_RUN = textwrap.dedent("""
    import sys, time, torch
    import sflsim.run.loop as loop  # the round loop calls draw_conditions by its name there

    draw = loop.draw_conditions
    def draw_then_stick(rng, scenario, n):
        if STATE["round"] == 1:  # the second round
            matrix = torch.randn(4500, 4500, dtype=torch.float64)  # before "stuck": the
            print("stuck", time.monotonic(), flush=True)  # next statement is the C call
            torch.linalg.eig(matrix)
            print("returned", flush=True)
        STATE["round"] += 1
        return draw(rng, scenario, n)
    STATE = {"round": 0}
    loop.draw_conditions = draw_then_stick

    from sflsim.cli.main import app
    app(sys.argv[1:])
""")


def _run_stuck(scenario: dict, tmp_path, *extra: str) -> tuple[subprocess.Popen, float, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    proc = subprocess.Popen([sys.executable, "-c", STUCK_RUN, "run", str(path), "-o",
                             str(tmp_path / "run"), "-q", "--threads", "1", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("stuck"):
            line = proc.stdout.readline()
        assert line.startswith("stuck"), proc.communicate(timeout=60)
        time.sleep(2.0)  # well inside the torch call (on a loaded machine too)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc, time.monotonic() - sent, out + err


def test_sigterm_ends_a_run_stuck_in_a_long_torch_call_within_seconds(tiny, tmp_path):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["rounds"] = 3
    proc, waited_s, output = _run_stuck(tiny, tmp_path)
    assert proc.returncode == 130, output
    assert waited_s < GRACE_S + 10, f"SIGTERM took {waited_s:.1f} s to end the run"
    assert "returned" not in output  # it did not wait for torch
    assert "SIGTERM: torch did not return within 5 s" in output
    assert "--resume" in output
    out = tmp_path / "run"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] == 1
    assert pd.read_csv(out / "rounds.csv")["round"].tolist() == [0, 1]
    assert set(read_run_table(out, "clients", ["round"])["round"]) == {1}
    # the finished round is whole: the run continues from it to the end (in this process:
    # the files, not the process, are what is checked)
    resumed = CliRunner().invoke(app, ["run", str(tmp_path / "scenario.yaml"), "-o", str(out),
                                       "-q", "--threads", "1", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert pd.read_csv(out / "rounds.csv")["round"].tolist() == [0, 1, 2, 3]


def test_a_signal_inside_uninterrupted_waits_for_the_block_to_end():
    done = []
    with pytest.raises(KeyboardInterrupt), stop_on_signals(lambda signum: None):
        with uninterrupted():
            signal.raise_signal(signal.SIGTERM)
            with uninterrupted():  # nested: still held back
                done.append("inner")
            done.append("outer")
        done.append("after the block")  # not reached: the interrupt comes at the block's end
    assert done == ["inner", "outer"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(
        signal.getsignal(signal.SIGTERM))  # restored


def test_a_signal_outside_uninterrupted_interrupts_at_once():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), stop_on_signals(lambda signum: None):
        signal.raise_signal(signal.SIGINT)
        pytest.fail("not interrupted")
    assert signal.getsignal(signal.SIGINT) is before


def test_stop_on_signals_refuses_other_threads():
    errors = []

    def other():
        try:
            with stop_on_signals(lambda signum: None):
                pass
        except ValueError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert errors == ["stop_on_signals must be used in the main thread"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX signals")
def test_the_watcher_waits_while_the_main_thread_responds(tmp_path):
    """A main thread that takes the signal is never ended from the watcher, however long
    its own clean-up takes."""
    script = textwrap.dedent("""
        import signal, time
        from sflsim.signals import stop_on_signals
        with stop_on_signals(lambda s: print("forced", flush=True), grace_s=0.5):
            try:
                signal.raise_signal(signal.SIGTERM)
            except KeyboardInterrupt:  # taken; the clean-up (still watched) outlasts the grace
                time.sleep(2.0)
                print("clean", flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.split() == ["clean"] and result.returncode == 0, result.stderr
