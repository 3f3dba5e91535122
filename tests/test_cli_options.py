"""Command-line options with a bad value end in one message naming the option and what
is valid, before anything runs or is written: empty output paths, output folders the
file system will not make, ``--threads`` out of range, ``profile-host``'s sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.threads import MAX_THREADS

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"
SWEEP = SCENARIOS / "sweeps" / "device_mix.yaml"


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``sflsim ARGS``; the exit code and stdout + stderr (no exception escapes)."""
    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"sflsim {' '.join(args)} raised {result.exception!r}")
    return result.exit_code, result.output


def assert_refused(code: int, out: str, *expected: str) -> None:
    assert code == USER_ERROR, out
    assert "Traceback" not in out and out.count("error:") == 1, out
    for part in expected:
        assert part in out, f"{part!r} not in output:\n{out}"


@pytest.mark.parametrize("args", [
    ["run", str(QUICKSTART), "-o", ""],
    ["run", str(QUICKSTART), "--output", " "],
    ["sweep", str(SWEEP), "-o", ""],
    ["sweep", str(SWEEP), "--dry-run", "-o", ""],
    ["export", ".", "--csv", "--to", ""],
    ["profile-host", "-o", ""],
], ids=["run", "run-blank", "sweep", "sweep-dry-run", "export", "profile-host"])
def test_an_empty_output_path_is_refused_and_nothing_is_written(args, tmp_path, monkeypatch):
    """``-o ''`` would write the results into the current folder."""
    monkeypatch.chdir(tmp_path)
    code, out = cli(*args)
    option = "--to" if "--to" in args else "-o"
    assert_refused(code, out, f"{option} ", "an empty path", f"leave out {option}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_folder_the_file_system_will_not_make_is_told_before_torch_loads(command):
    """/proc takes no new folder, whatever the user's rights (root's included, to whom
    every folder looks writable): said with the other -o checks, before the run is
    announced."""
    file = str(QUICKSTART if command == "run" else SWEEP)
    code, out = cli(command, file, "-o", "/proc/sflsim-nope/out", "--set", "training.rounds=1")
    assert_refused(code, out, "-o /proc/sflsim-nope/out cannot be ")  # made (root) / written
    assert "running" not in out and "sweep device_mix:" not in out


def test_finding_out_whether_a_folder_can_be_made_leaves_nothing(tmp_path):
    code, out = cli("sweep", str(SWEEP), "--dry-run", "-o", str(tmp_path / "a" / "b" / "c"))
    assert code == 0, out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("threads", ["0", "-1", str(MAX_THREADS + 1), "100000"])
def test_threads_out_of_range_is_refused_with_the_valid_range(threads, tmp_path):
    code, out = cli("run", str(QUICKSTART), "-o", str(tmp_path / "out"), "--threads", threads)
    assert_refused(code, out, f"--threads {threads} is out of range; valid: 1 to {MAX_THREADS}")
    assert not (tmp_path / "out").exists()


def test_threads_bound_is_that_of_parallel_clients():
    from sflsim.config.schema import TrainingConfig

    bounds = {type(m).__name__: m for m in TrainingConfig.model_fields["parallel_clients"].metadata}
    assert (bounds["Ge"].ge, bounds["Le"].le) == (1, MAX_THREADS)


def test_omp_num_threads_out_of_range_is_refused(tmp_path):
    code, out = cli("run", str(QUICKSTART), "-o", str(tmp_path / "out"),
                    env={"OMP_NUM_THREADS": "100000"})
    assert_refused(code, out, "OMP_NUM_THREADS=100000 is out of range", f"1 to {MAX_THREADS}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "value"), [("--image-size", "0"), ("--channels", "0"),
                                               ("--channels", "-1"), ("--image-size", "-3")])
def test_profile_host_refuses_sizes_below_one(option, value, tmp_path):
    result = CliRunner().invoke(app, ["profile-host", "-o", str(tmp_path / "p.yaml"),
                                      option, value])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert option in result.output and "Traceback" not in result.output
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(("options", "told"), [
    (["--width", "1e6"], "--width 1e+06 is out of range; valid: above 0 and at most 4"),
    (["--classes", "1000000000000"], "--classes"), (["--channels", "5000"], "--channels"),
    (["--batch-sizes", "99999999999"], "--batch-sizes '99999999999': each must be a whole "
                                       "number from 1 to 100000"),
    (["--batch-sizes", "0"], "--batch-sizes '0'"), (["--repeats", "-3"], "--repeats"),
    (["--statistic", "mean"], "--statistic mean; valid: min, median")])
def test_profile_host_refuses_sizes_past_their_bounds_naming_the_option(options, told, tmp_path):
    """Sizes that would allocate beyond any memory are refused before anything is built,
    one message naming the option."""
    result = CliRunner().invoke(app, ["profile-host", "--steps", str(tmp_path / "s.csv"),
                                      "--models", "small_cnn", "--batch-sizes", "4", *options])
    assert result.exit_code == 2, result.output
    assert told in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "s.csv").exists()


def test_profile_host_output_inside_a_file_is_told_as_run_tells_it(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("a file")
    code, out = cli("profile-host", "-o", str(blocker / "x.yaml"))
    assert_refused(code, out, f"-o {blocker / 'x.yaml'} cannot be made: {blocker} is a file, "
                              f"not a folder")
    code, out = cli("profile-host", "-o", str(tmp_path))
    assert_refused(code, out, f"-o {tmp_path} is a folder; give a file name")
    assert blocker.read_text() == "a file"


def test_profile_host_writes_a_profile_in_a_new_folder(tmp_path):
    """The checks refuse nothing that works: a missing folder is made, 1x1 images train."""
    out = tmp_path / "new" / "host.yaml"
    code, text = cli("profile-host", "-o", str(out), "--image-size", "1", "--batch-sizes", "2",
                     "--repeats", "1", "--width", "0.0625")
    assert code == 0, text
    assert yaml.safe_load(out.read_text())["stage_latency"][0]["input"] == [1, 1, 1]


def test_a_run_and_a_sweep_do_not_share_a_folder(tmp_path):
    """A run into a sweep's folder, or a sweep into a run's, is refused before anything is
    written: their files would mix (check and compare would read one and miss the other)."""
    from sflsim.errors import SflsimError
    from sflsim.metrics.results import refuse_other_kind

    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "points").mkdir(parents=True)
    (sweep_dir / "sweep.yaml").write_text("base: x.yaml\n")
    code, out = cli("run", str(QUICKSTART), "--no-train", "-o", str(sweep_dir), "--overwrite")
    assert_refused(code, out, f"{sweep_dir} holds a sweep (sweep.yaml, points)",
                   "a run goes in a folder of its own")
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["points", "sweep.yaml"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text("{}")
    with pytest.raises(SflsimError, match=r"holds a run's results \(summary\.json\); a sweep "
                                          r"goes in a folder of its own"):
        refuse_other_kind(run_dir, "sweep")
    refuse_other_kind(tmp_path / "new", "sweep")  # a new folder: nothing to say
