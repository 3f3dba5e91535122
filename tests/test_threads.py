"""Torch threads per run and per sweep point (:mod:`sflsim.threads`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from sflsim import threads
from sflsim.cli.main import app
from sflsim.errors import SflsimError
from sflsim.threads import CpuSample, ThreadChoice, busy_note, choose_threads, others_busy_cores

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cores(monkeypatch):
    """Pretend this process may use ``n`` cores, with OMP_NUM_THREADS unset."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def set_cores(n: int) -> None:
        monkeypatch.setattr(threads, "usable_cores", lambda: n)

    return set_cores


def test_threads_option_wins(cores, monkeypatch):
    cores(8)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    choice = choose_threads(3)
    assert choice == ThreadChoice(3, "--threads 3", explicit=True)
    assert choice.describe() == "torch threads: 3 (--threads 3)"


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("6", 6), (" 2 ", 2), ("3,2", 3)])
def test_omp_num_threads_is_honoured(cores, monkeypatch, value, expected):
    cores(8)
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    for workers in (1, 4):  # per process: a sweep's workers inherit it
        choice = choose_threads(workers=workers)
        assert (choice.threads, choice.explicit) == (expected, True)
    assert choose_threads().describe() == f"torch threads: {expected} (OMP_NUM_THREADS={expected})"


@pytest.mark.parametrize("requested", [0, -1, threads.MAX_THREADS + 1, 100_000])
def test_threads_out_of_range_are_refused_before_torch_starts_them(cores, requested):
    """Far more threads than cores would fail inside torch ("can't start new thread")."""
    cores(2)
    with pytest.raises(SflsimError, match=rf"^--threads {requested} is out of range; "
                                          rf"valid: 1 to {threads.MAX_THREADS}$"):
        choose_threads(requested)
    assert choose_threads(threads.MAX_THREADS).threads == threads.MAX_THREADS


def test_omp_num_threads_out_of_range_is_refused(cores, monkeypatch):
    cores(2)
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads.MAX_THREADS + 1))
    with pytest.raises(SflsimError, match=rf"OMP_NUM_THREADS={threads.MAX_THREADS + 1} is out "
                                          rf"of range .*valid: 1 to {threads.MAX_THREADS}"):
        choose_threads(workers=2)
    assert choose_threads(1).threads == 1  # --threads wins, as always


@pytest.mark.parametrize("value", ["", "0", "-2", "abc", "2.5"])
def test_unusable_omp_num_threads_falls_back_to_the_cores(cores, monkeypatch, value):
    cores(4)
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert choose_threads() == ThreadChoice(4, "4 usable cores", explicit=False)


@pytest.mark.parametrize(("n", "workers", "expected"), [(2, 1, 2), (2, 3, 1), (8, 3, 2), (8, 2, 4),
                                                         (1, 1, 1), (4, 16, 1)])
def test_default_shares_the_usable_cores_among_workers(cores, n, workers, expected):
    cores(n)
    choice = choose_threads(workers=workers)
    assert (choice.threads, choice.explicit) == (expected, False)
    assert choice.describe("point").startswith(f"torch threads: {expected} per point (")
    assert ("/ 3 workers" in choice.reason) == (workers == 3)


def test_usable_cores_follow_affinity_and_cgroup_quota(monkeypatch):
    monkeypatch.setattr(threads, "affinity_cpus", lambda: {0, 2, 5, 7})
    monkeypatch.setattr(threads, "cgroup_cpu_quota", lambda: None)
    assert threads.usable_cores() == 4
    monkeypatch.setattr(threads, "cgroup_cpu_quota", lambda: 1.5)
    assert threads.usable_cores() == 2
    monkeypatch.setattr(threads, "cgroup_cpu_quota", lambda: 0.2)
    assert threads.usable_cores() == 1


def test_usable_cores_on_this_machine():
    assert 1 <= threads.usable_cores() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("v2", "v1", "expected"), [
    ("max 100000\n", None, None),
    ("150000 100000\n", None, 1.5),
    (None, ("-1", "100000"), None),
    (None, ("400000", "100000"), 4.0),
    (None, None, None),
])
def test_cgroup_cpu_quota(tmp_path, v2, v1, expected):
    v2_path, v1_paths = tmp_path / "cpu.max", (tmp_path / "quota", tmp_path / "period")
    if v2 is not None:
        v2_path.write_text(v2)
    if v1 is not None:
        for path, text in zip(v1_paths, v1):
            path.write_text(text)
    assert threads.cgroup_cpu_quota(v2_path, v1_paths) == expected


def test_cpu_sample_counts_only_the_usable_cpus(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\n"
                    "cpu0 10 0 10 80 0 0 0 0 0 0\n"
                    "cpu1 50 5 20 20 5 0 0 0 0 0\n"
                    "intr 12345 0 0\n\n")
    monkeypatch.setattr(threads, "affinity_cpus", lambda: {1})
    sample = threads.cpu_sample(stat)
    assert (sample.busy_ticks, sample.total_ticks) == (75, 100)  # idle and iowait are not busy
    assert threads.cpu_sample(tmp_path / "missing") is None


def test_others_busy_cores_subtracts_this_process():
    tick = os.sysconf("SC_CLK_TCK")
    before = CpuSample(wall_s=10.0, busy_ticks=0, total_ticks=0, own_s=5.0)
    after = CpuSample(wall_s=12.0, busy_ticks=3 * tick, total_ticks=4 * tick, own_s=6.0)
    # 3 CPU-seconds busy over 2 s = 1.5 cores, 0.5 of them this process
    assert others_busy_cores(before, after) == pytest.approx(1.0)
    assert others_busy_cores(before, CpuSample(10.2, 3 * tick, 4 * tick, 5.0)) is None  # too short
    assert others_busy_cores(None, after) is None


@pytest.mark.parametrize(("n", "chosen", "busy", "suggested"), [
    (2, 2, 1.5, 1), (2, 2, 1.0, 1), (8, 8, 5.2, 3), (2, 1, 2.0, None), (2, 2, 0.3, None),
    (8, 8, 0.4, None),
])
def test_busy_note_when_other_work_leaves_fewer_idle_cores(n, chosen, busy, suggested):
    choice = ThreadChoice(chosen, f"{n} usable cores", explicit=False)
    note = busy_note(choice, busy, cores=n)
    if suggested is None:
        assert note is None
    else:
        assert f"about {busy:.1f} of the {n} usable cores busy" in note
        assert f"--threads {suggested} (or OMP_NUM_THREADS={suggested})" in note


def test_no_busy_note_for_an_explicit_choice_or_without_a_measure():
    assert busy_note(ThreadChoice(2, "--threads 2", explicit=True), 2.0, cores=2) is None
    assert busy_note(ThreadChoice(2, "2 usable cores", explicit=False), None, cores=2) is None


def test_torch_threads_are_restored():
    before = torch.get_num_threads()
    with threads.torch_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


# ---------------------------------------------------------------------------------- CLI


def _timing_run(tmp_path, *extra: str):
    return CliRunner().invoke(app, [
        "run", "quickstart", "-q", "--no-train", "-o", str(tmp_path / "out"),
        "--set", "training.rounds=1", "--set", "dataset.fraction=0.02", *extra])


def test_run_prints_its_threads_once_and_restores_them(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    result = _timing_run(tmp_path, "--threads", "2")
    assert result.exit_code == 0, result.output
    assert result.output.count("torch threads:") == 1
    assert "torch threads: 2 (--threads 2)" in result.output
    assert torch.get_num_threads() == before


def test_run_default_follows_omp_num_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = _timing_run(tmp_path)
    assert result.exit_code == 0, result.output
    assert "torch threads: 1 (OMP_NUM_THREADS=1)" in result.output


def test_resume_with_another_thread_count_says_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"torch_threads": 2}')
    from sflsim.cli.run import resume_threads_note

    note = resume_threads_note(out, ThreadChoice(1, "OMP_NUM_THREADS=1", explicit=True))
    assert "ran with 2 torch threads, these run with 1" in note and "--threads 2" in note
    assert resume_threads_note(out, ThreadChoice(2, "2 usable cores", explicit=False)) is None
    assert resume_threads_note(tmp_path / "none", ThreadChoice(1, "x", explicit=True)) is None


# -------------------------------------------------------------------------------- sweeps


def test_sweep_points_get_the_cores_divided_by_workers(cores):
    from sflsim.sweep.execute import point_threads

    cores(8)
    assert point_threads(1).threads == 8
    assert point_threads(3).threads == 2
    assert point_threads(3).describe("point") == "torch threads: 2 per point (8 usable cores / 3 workers)"
    assert point_threads(3, "ray").threads == 1


def test_sweep_points_run_with_the_threads_of_the_workers_asked_for(cores, monkeypatch, tmp_path):
    """The thread count comes from --workers, not from how many points are left to run."""
    from sflsim.sweep import execute, load_sweep, run_sweep

    cores(6)
    seen: list[tuple[str, int | None]] = []

    def fake_point(point_id, scenario_data, run_dir, threads=None, warnings=()):
        seen.append((point_id, threads))
        return execute.PointOutcome(point_id, "failed", error="not run")

    def fake_pool(jobs, on_done, workers, threads):
        for job in jobs:
            on_done(fake_point(job.point_id, job.scenario_data, job.run_dir, threads))

    monkeypatch.setattr(execute, "run_point", fake_point)
    monkeypatch.setattr("sflsim.sweep.run.run_processes", fake_pool)
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"name: s\nbase: {ROOT / 'scenarios' / 'bench_fedavg_cnn.yaml'}\n"
                          f"axes: {{seed: [1, 2]}}\n")
    sweep = load_sweep(sweep_file)
    run_sweep(sweep, tmp_path / "pool", workers=3)  # two points, a pool of 3 asked for
    run_sweep(sweep, tmp_path / "serial", workers=1)  # in this process
    assert seen == [("p000", 2), ("p001", 2), ("p000", 6), ("p001", 6)]
