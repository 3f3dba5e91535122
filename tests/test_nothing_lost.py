"""Nothing a user has is lost: one writer per results folder, input files never
replaced, damaged checkpoints refused, tables that are missing said to be missing.

- A results folder is held by one run, sweep or export at a time (an OS lock named in
  the refusal: pid, host, command, since when); a lock left by a killed run blocks
  nothing.
- No writer (``run``, ``sweep``, ``export``, ``plot -o``) writes over or deletes a file
  it reads, with or without ``--overwrite``.
- A checkpoint damaged in the middle is refused as damaged, and the run's files stay
  byte for byte as they were.
- ``sflsim export`` of a run whose tables are missing says so (exit status 2).
"""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import pickletools
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config.scenario import Scenario
from sflsim.errors import SflsimError
from sflsim.metrics import results
from sflsim.runner import run_scenario


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def write_scenario(path: Path, data: dict, head: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + yaml.safe_dump(data, sort_keys=False))  # device order = client ids
    return path


def rounds_of(out: Path) -> list[int]:
    return list(pd.read_csv(out / "rounds.csv")["round"])


# ----- a results folder is held by one run, sweep or export at a time ------------------


def _sflsim_process(*args: object) -> subprocess.Popen:
    """``python -m sflsim ARGS`` on the sflsim under test (whatever is installed)."""
    import sflsim

    here = str(Path(sflsim.__file__).resolve().parents[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH"))))}
    return subprocess.Popen([sys.executable, "-m", "sflsim", *map(str, args)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_second_run_is_refused_naming_the_holder_and_a_killed_holder_blocks_nothing(
        tiny, tmp_path):
    """Two runs with one -o at once: the second (another seed), an --overwrite, a
    --resume and an export are each refused with one line naming the first (pid, host,
    command, since when), and write nothing. Once the first is killed with SIGKILL, its
    lock file (left behind) holds nothing: the resume runs to the end."""
    tiny["training"]["rounds"] = 12
    first = write_scenario(tmp_path / "s.yaml", tiny)
    other = copy.deepcopy(tiny)
    other["seed"] = 1
    second = write_scenario(tmp_path / "s1.yaml", other)
    out = tmp_path / "out"
    proc = _sflsim_process("run", first, "-o", out, "-q")
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:  # round 1's files are all on disk: the checkpoint, then the summary
                if json.loads((out / "summary.json").read_text())["rounds_completed"] >= 1:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        assert proc.poll() is None, f"the first run ended early: {proc.stderr.read()!r}"
        for args in (["run", second, "-o", out, "-q"],
                     ["run", second, "-o", out, "-q", "--overwrite"],
                     ["run", first, "-o", out, "-q", "--resume"],
                     ["export", out, "--csv"]):
            code, output = cli(*args)
            assert code == USER_ERROR, (args, output)
            line = " ".join(output.split())
            assert "is in use" in line and f"pid {proc.pid} on host {platform.node()}" in line, line
            assert "sflsim run" in line and "since" in line, line
            assert "Traceback" not in output and "running tiny" not in output
            assert not (out / "events.csv").exists()
        with pytest.raises(SflsimError, match=rf"is in use: pid {proc.pid}"):
            run_scenario(Scenario.model_validate(other), out, overwrite=True)
        assert proc.poll() is None, "the first run ended before the checks were done"
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert (out / results.LOCK_FILE).exists()  # left by the killed run, held by nobody
    done = rounds_of(out)
    assert done[-1] < 12 and done == sorted(set(done)), done  # rounds of one run only
    code, output = cli("run", first, "-o", out, "-q", "--resume")
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["seed"] == 0
    assert rounds_of(out) == list(range(13))
    assert not (out / results.LOCK_FILE).exists()  # let go of when the run ended


@pytest.fixture
def sweep_file(tiny, tmp_path):
    """A 1-point sweep of the tiny scenario (its base is ``base.yaml`` beside it)."""
    write_scenario(tmp_path / "base.yaml", tiny)

    def write(path: Path, head: str = "") -> Path:
        base = os.path.relpath(tmp_path / "base.yaml", path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(head + yaml.safe_dump({"base": base, "axes": {"seed": [0]}},
                                              sort_keys=False))
        return path

    return write


def test_a_sweep_and_an_export_into_a_held_folder_are_refused(sweep_file, tiny_run, tmp_path):
    from sflsim.sweep import load_sweep, run_sweep

    sweep = sweep_file(tmp_path / "sw.yaml")
    out = tmp_path / "swout"
    with results.hold_folder(out):  # this process holds it: as another run would
        for args in (["sweep", sweep, "-o", out], ["sweep", sweep, "-o", out, "--dry-run"]):
            code, output = cli(*args)
            line = " ".join(output.split())
            assert code == USER_ERROR and f"is in use: pid {os.getpid()}" in line, line
            assert "since" in line and "Traceback" not in output
        with pytest.raises(SflsimError, match=rf"is in use: pid {os.getpid()} on host"):
            run_sweep(load_sweep(sweep), out)
        assert sorted(p.name for p in out.iterdir()) == [results.LOCK_FILE]
    assert not out.exists()  # nothing was written: the hold leaves no empty folder
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    with results.hold_folder(run):
        code, output = cli("export", run, "--csv")
        assert code == USER_ERROR and f"is in use: pid {os.getpid()}" in " ".join(output.split())
        assert not (run / "events.csv").exists()
    code, output = cli("export", run, "--csv")
    assert code == 0 and (run / "events.csv").is_file(), output


# ----- no writer replaces a file it reads ------------------------------------------------


def test_run_never_writes_over_the_scenario_it_reads(tiny, tmp_path):
    """-o at the folder of the scenario: refused with and without --overwrite, naming the
    scenario (not calling it results); the file keeps its comments."""
    out = tmp_path / "exp"
    scenario = write_scenario(out / "scenario.yaml", tiny, head="# my notes on this run\n")
    text = scenario.read_text()
    for flags in ([], ["--overwrite"]):
        code, output = cli("run", scenario, "-o", out, "-q", *flags)
        line = " ".join(output.split())
        assert code == USER_ERROR, line
        assert f"the scenario {scenario}" in line and "already holds results" not in line, line
        assert "never replaces" in line and "Traceback" not in output
        assert scenario.read_text() == text
    assert sorted(p.name for p in out.iterdir()) == ["scenario.yaml"]


def test_a_resume_that_would_rewrite_its_scenario_file_is_refused(tiny, tmp_path):
    """Resuming a run from the scenario.yaml in its own folder: fine as it is (nothing
    rewrites it); with another training.rounds (which rewrites scenario.yaml) refused."""
    out = tmp_path / "run"
    assert cli("run", write_scenario(tmp_path / "s.yaml", tiny), "-o", out, "-q")[0] == 0
    scenario = out / "scenario.yaml"
    before = files_of(out)
    code, output = cli("run", scenario, "-o", out, "-q", "--resume")
    assert code == 0 and "already complete" in output, output
    code, output = cli("run", scenario, "-o", out, "-q", "--resume", "--set", "training.rounds=2")
    line = " ".join(output.split())
    assert code == USER_ERROR and f"the scenario {scenario}" in line, line
    assert files_of(out) == before


def test_run_never_deletes_a_trace_it_reads(tiny, tmp_path):
    """An availability trace that sits in -o under a result file's name: --overwrite
    would have deleted it with the old results before reading it."""
    out = tmp_path / "out"
    out.mkdir()
    trace = out / "events.csv"
    trace.write_text("device,online_from_s,online_until_s\nweak,0,inf\n")
    tiny["conditions"] = {"availability": str(trace)}
    scenario = write_scenario(tmp_path / "s.yaml", tiny)
    code, output = cli("run", scenario, "-o", out, "-q", "--overwrite")
    line = " ".join(output.split())
    assert code == USER_ERROR and f"conditions.availability {trace}" in line, line
    with pytest.raises(SflsimError, match="conditions.availability"):
        run_scenario(Scenario.model_validate(tiny), out, overwrite=True)
    assert trace.read_text().startswith("device,online_from_s")
    assert sorted(p.name for p in out.iterdir()) == ["events.csv"]


@pytest.mark.parametrize("relation", ["same path", "inside", "hard link", "symbolic link"])
def test_an_input_is_found_under_every_name_a_writer_could_reach_it_by(tmp_path, relation):
    """The rule under every writer: an input at a name written, inside a folder written, or
    the same file by another name (a hard or a symbolic link) is refused; an input that is
    none of these passes."""
    from sflsim.metrics.output import refuse_writing_inputs

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere.csv"
    (out / "points" / "p0").mkdir(parents=True)
    elsewhere.write_text("x")
    written = out / "points" / "p0" / "events.csv"
    trace, said = {"same path": (written, ""),
                   "inside": (out / "points" / "p0" / "trace.csv", " (it is inside "),
                   "hard link": (written, " (the same file as "),
                   "symbolic link": (written, "; sflsim never")}[relation]
    trace.write_text("x")
    if relation in ("hard link", "symbolic link"):
        trace = tmp_path / "trace.csv"
        (os.link if relation == "hard link" else os.symlink)(written, trace)
    names = ["points/p0"] if relation == "inside" else ["sweep.csv", "points/p0/events.csv"]
    with pytest.raises(SflsimError, match=re.escape(f"conditions.availability {trace}, a file "
                                                    f"it reads{said}")):
        refuse_writing_inputs(out, names, {"conditions.availability": trace, "x": None},
                              writer="the sweep")
    refuse_writing_inputs(out, names, {"conditions.availability": elsewhere})


def test_sweep_never_writes_over_the_sweep_file_it_reads(sweep_file, tmp_path):
    """The sweep file in -o as sweep.yaml: refused (a dry run too, --overwrite too), the
    file keeps its comments. A sweep run again from the sweep.yaml it wrote leaves that
    file as it is, so that is fine."""
    out = tmp_path / "exp"
    sweep = sweep_file(out / "sweep.yaml", head="# why this sweep\n")
    text = sweep.read_text()
    for flags in (["--dry-run"], [], ["--overwrite"]):
        code, output = cli("sweep", sweep, "-o", out, *flags)
        line = " ".join(output.split())
        assert code == USER_ERROR and f"the sweep file {sweep}" in line, line
        assert "Traceback" not in output
        assert sweep.read_text() == text
    assert sorted(p.name for p in out.iterdir()) == ["sweep.yaml"]
    done = tmp_path / "done"
    assert cli("sweep", sweep_file(tmp_path / "sw.yaml"), "-o", done)[0] == 0
    written = (done / "sweep.yaml").read_text()
    code, output = cli("sweep", done / "sweep.yaml", "-o", done)
    assert code == 0 and "already finished" in output, output
    assert (done / "sweep.yaml").read_text() == written


def test_export_never_damages_a_table(tiny_run, tmp_path):
    """--to inside a table's folder of Parquet files (every file there is read as part of
    the table) and --to over a pre-Parquet run's own CSV tables are refused."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    events = pd.read_parquet(run / "events.parquet")
    for to in (run / "events.parquet", run / "clients.parquet" / "sub"):
        code, output = cli("export", run, "--csv", "--to", to)
        line = " ".join(output.split())
        assert code == USER_ERROR and "every file of which is read as part of the table" in line, line
    pd.testing.assert_frame_equal(pd.read_parquet(run / "events.parquet"), events)
    old = tmp_path / "old"  # a run written before Parquet: its tables are the CSV files
    shutil.copytree(tiny_run, old)
    for name in results.RUN_TABLES:
        shutil.rmtree(old / f"{name}.parquet")
        (old / f"{name}.csv").write_text("round,client_id\n1,0\n")
    before = files_of(old)
    code, output = cli("export", run, "--csv", "--to", old)
    line = " ".join(output.split())
    assert code == USER_ERROR and f"write over {old / 'events.csv'}" in line, line
    assert files_of(old) == before


def test_plot_and_profile_host_never_write_into_a_table(tiny_run, tmp_path):
    """plot -o names a figure: a table's name as -o is a prefix, never the table. A
    figure or a profile inside a table's folder (where every file is read as part of
    the table: pd.read_parquet would fail) is refused; profile-host says so before it
    measures."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = files_of(run)
    code, output = cli("plot", "tta", run, "-o", run / "rounds.csv", "--format", "png")
    assert code == 0, output
    assert (run / "rounds.csv.png").is_file()
    (run / "rounds.csv.png").unlink()
    for args in (["plot", "tta", run, "-o", run / "events.parquet" / "fig"],
                 ["plot", "timeline", run, "-o", run / "clients.parquet"],
                 ["profile-host", "-o", run / "events.parquet" / "host.yaml"]):
        code, output = cli(*args)
        line = " ".join(output.split())
        assert code == USER_ERROR, (args, line)
        assert "every file of which is read as part of the table" in line, line
    assert files_of(run) == before
    pd.read_parquet(run / "events.parquet")


# ----- tables that are missing are said to be missing ----------------------------------


def test_export_of_a_run_without_its_tables_says_so(tiny_run, tmp_path):
    sweep = tmp_path / "sweep"
    for point in ("p000", "p001"):
        shutil.copytree(tiny_run, sweep / "points" / point)
    for name in results.RUN_TABLES:
        shutil.rmtree(sweep / "points" / "p001" / f"{name}.parquet")
    code, output = cli("export", sweep, "--csv")
    line = " ".join(output.split())
    assert code == USER_ERROR, line
    assert f"{sweep / 'points' / 'p001'} has no events.parquet and no clients.parquet" in line
    assert "nothing to write" not in line and "Traceback" not in output
    assert (sweep / "points" / "p000" / "events.csv").is_file()  # the others are written
    code, output = cli("export", sweep / "points" / "p001", "--csv")
    assert code == USER_ERROR and "tables are missing" in output, output


# ----- a damaged checkpoint is refused, and nothing changes ------------------------------


def damage_the_middle(path: Path) -> None:
    """Overwrite 16 bytes in the middle of the largest tensor the checkpoint holds: the
    file still unpickles, into a model with garbage weights."""
    data = path.read_bytes()
    stream = io.BytesIO(data)
    pickle.load(stream)  # the header
    start, best = stream.tell(), (0, 0)
    for op, arg, pos in pickletools.genops(data[start:]):
        if op.name in ("BYTEARRAY8", "BINBYTES8", "BINBYTES") and len(arg) > best[1]:
            best = (start + pos + (9 if op.name.endswith("8") else 5), len(arg))
    assert best[1] > 1000
    middle = best[0] + best[1] // 2
    damaged = bytearray(data)
    damaged[middle:middle + 16] = b"\xff" * 16
    path.write_bytes(bytes(damaged))


def test_a_checkpoint_damaged_in_the_middle_is_refused_and_nothing_changes(tiny, tmp_path):
    """A finished 2-round run, its checkpoint damaged in the middle, resumed with more
    rounds: refused as damaged (CLI and library), and every file of the run, summary.json
    included, stays byte for byte as it was (the run stays "completed")."""
    from sflsim.config.resolve import resolve_scenario
    from sflsim.resume import resumable

    tiny["training"]["rounds"] = 2
    scenario = write_scenario(tmp_path / "s.yaml", tiny)
    out = tmp_path / "run"
    assert cli("run", scenario, "-o", out, "-q")[0] == 0
    damage_the_middle(out / "checkpoint.pkl")
    before = files_of(out)
    code, output = cli("run", scenario, "-o", out, "-q", "--resume", "--set", "training.rounds=3")
    line = " ".join(output.split())
    assert code == USER_ERROR, line
    assert "the file is damaged or not an sflsim checkpoint" in line, line
    assert "lr" not in line and "Traceback" not in output and "resuming" not in output
    more = copy.deepcopy(tiny)
    more["training"]["rounds"] = 3
    with pytest.raises(SflsimError, match="damaged or not an sflsim checkpoint"):
        run_scenario(Scenario.model_validate(more), out, resume=True)
    # a sweep starts such a point afresh rather than resuming it
    data = resolve_scenario(Scenario.model_validate(more)).model_dump(mode="json")
    assert not resumable(out / "checkpoint.pkl", data)
    assert files_of(out) == before
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
