"""Sweeps: expansion, bad sweep files, failing points, resume, executors, CLI, shipped files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError, SflsimError
from sflsim.metrics.results import RUN_TABLES, run_table_path
from sflsim.sweep import load_sweep, read_table, run_sweep
from sflsim.sweep.run import LEAD_COLUMNS, SUMMARY_COLUMNS

SWEEPS = sorted((Path(__file__).parents[1] / "scenarios" / "sweeps").glob("*.yaml"))
#: Points that pass validation but fail when built: more clients than training samples.
TOO_MANY = 500


@pytest.fixture
def write_sweep(tiny, tmp_path):
    """Write the tiny scenario as ``base.yaml`` and a sweep file over it; return its path."""
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(tiny))

    def write(name: str = "sw", **spec) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"base": "base.yaml", **spec}, sort_keys=False))
        return path

    return write


# ---------------------------------------------------------------------------- expansion


def test_product_expands_every_combination_last_axis_fastest(write_sweep):
    sweep = load_sweep(write_sweep(axes={"training.rounds": [1, 2], "seed": [0, 1, 2]}))
    assert sweep.name == "sw"
    assert [p.point_id for p in sweep.points] == [f"p00{i}" for i in range(6)]
    assert [(p.scenario.training.rounds, p.scenario.seed) for p in sweep.points] == [
        (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert sweep.points[4].values == {"training.rounds": 2, "seed": 1}
    assert sweep.points[4].scenario.name == "sw.p004"


def test_each_point_checked_is_reported_and_a_large_sweep_says_so(write_sweep):
    """``on_point`` sees every point validated; the command line's display speaks from
    500 points on (a 100,000-point sweep takes minutes to check) and not below."""
    import io

    from rich.console import Console

    from sflsim.cli.progress_display import CHECKS_SHOWN_FROM, PointChecks

    calls = []
    load_sweep(write_sweep(axes={"seed": [0, 1, 2]}), on_point=lambda *a: calls.append(a))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    for total, said in ((CHECKS_SHOWN_FROM - 1, ""),
                        (1200, "checking the 1,200 points of the sweep ...\n")):
        text = io.StringIO()
        with PointChecks(Console(file=text, width=200)) as checks:
            for done in range(1, total + 1):
                checks(done, total)
        assert text.getvalue() == said


def test_zip_pairs_values_and_device_mix_counts_may_be_zero(write_sweep):
    path = write_sweep(name="mix", mode="zip", set={"devices.mid.count": 0},
                       axes={"devices.weak.count": [0, 1, 2, 3], "devices.strong.count": [3, 2, 1, 0]})
    points = load_sweep(path).points
    assert len(points) == 4
    counts = [{k: g.count for k, g in p.scenario.devices.items()} for p in points]
    assert counts[0] == {"weak": 0, "mid": 0, "strong": 3}
    assert counts[3] == {"weak": 3, "mid": 0, "strong": 0}
    assert all(p.scenario.num_clients == 3 for p in points)


def test_dotted_paths_mappings_and_fixed_overrides(write_sweep):
    path = write_sweep(
        name="alg", description="x", set={"model.width": 0.125, "dataset.partition.alpha": 0.3},
        axes={"algorithm": [{"name": "hetero_splitee_averaging"}, {"name": "splitfed_v1",
                                                                   "split": {"name": "random"}}],
              "dataset.partition.scheme": ["dirichlet"],
              "server.slots": [2]})
    points = load_sweep(path).points
    assert [p.scenario.algorithm.name for p in points] == ["hetero_splitee_averaging",
                                                           "splitfed_v1"]
    assert points[1].scenario.algorithm.split.name == "random"
    for p in points:
        assert p.scenario.model.width == 0.125 and p.scenario.server.slots == 2
        assert p.scenario.dataset.partition.scheme == "dirichlet"
        assert p.scenario.dataset.partition.alpha == 0.3


def test_algorithm_name_axis_and_extra_set_from_command_line(write_sweep):
    path = write_sweep(axes={"algorithm.name": ["distributed", "centralized"]})
    sweep = load_sweep(path, ["training.rounds=3", "evaluation.max_test_samples=20"])
    assert [p.scenario.algorithm.name for p in sweep.points] == ["distributed", "centralized"]
    assert {p.scenario.training.rounds for p in sweep.points} == {3}
    assert sweep.resolved()["set"]["training.rounds"] == 3


def test_point_ids_are_zero_padded_and_in_order(write_sweep):
    points = load_sweep(write_sweep(axes={"seed": list(range(11))})).points
    assert points[10].point_id == "p010"


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("spec", "expected"), [
    ({"axes": {"training.roundz": [1, 2]}},
     ["axis 'training.roundz'", "unknown field", "did you mean 'rounds'"]),
    ({"axes": {"seed": []}}, ["'seed' is an empty axis"]),
    ({"mode": "zip", "axes": {"seed": [0, 1], "training.rounds": [1, 2, 3]}},
     ["mode zip needs axes of equal length", "seed has 2", "training.rounds has 3"]),
    ({"axes": {"devices.wek.count": [1]}},
     ["axis 'devices.wek.count'", "no entry 'wek'", "Did you mean 'weak'"]),
    ({"axes": {"training.rounds.x": [1]}}, ["axis 'training.rounds.x'", "not a mapping"]),
    ({"axes": {"training.rounds": [1, 0]}},
     ["axis 'training.rounds' = 0", "training.rounds: 0 is out of range"]),
    ({"axes": {"algorithm.name": ["fedsgd"]}}, ["axis 'algorithm.name'", "did you mean 'fedsga'"]),
    ({"axes": {}}, ["at least one axis"]),
    ({"axez": {"seed": [1]}}, ["axez: unknown field", "did you mean 'axes'"]),
    ({"axes": {"seed": 3}}, ["axes.seed", "expected a list"]),
    ({"mode": "grid", "axes": {"seed": [1]}}, ["mode", "'grid' is not valid", "product, zip"]),
    ({"set": {"trainin.rounds": 2}, "axes": {"seed": [1]}},
     ["set 'trainin.rounds' = 2", "trainin: unknown field", "did you mean 'training'"]),
    ({"set": {"seed": 2}, "axes": {"seed": [1]}}, ["seed is both in set and in axes"]),
    ({"mode": "zip", "axes": {"devices.weak.count": [0], "devices.mid.count": [0],
                              "devices.strong.count": [0]}},
     ["point p000", "devices: every group has count 0; at least one client is needed"]),
], ids=["unknown field", "empty axis", "zip lengths", "unknown device group", "through a number",
        "bad value", "bad algorithm", "no axes", "misspelled key", "axis not a list", "bad mode",
        "bad set path", "set and axis", "no clients"])
def test_bad_sweep_gives_one_clear_message(write_sweep, spec, expected):
    path = write_sweep(**spec)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    for part in expected:
        assert part in msg, f"{part!r} not in {msg!r}"
    for pydantic_wording in ("Input should", "Field required", "Value error", "--set"):
        assert pydantic_wording not in msg


def test_an_axis_wrong_with_another_axis_value_is_blamed_with_it(write_sweep):
    """FedProx's mu swept beside FedAvg and FedProx: the FedAvg points cannot take mu. The
    error names the mu axis with the algorithm it met and lists FedAvg's fields (it named
    the base's algorithm's)."""
    path = write_sweep(axes={"algorithm.name": ["fedprox", "fedavg"],
                             "algorithm.mu": [0.1, 0.2]})
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert str(info.value) == (
        f"{path}: axis 'algorithm.mu' = 0.1 (with algorithm.name=fedavg): "
        f"algorithm.mu: unknown field (valid fields: name, module)")


@pytest.mark.parametrize(("axes", "twins"), [
    ({"training.rounds": [1, 1]}, "points p000 (training.rounds=1) and p001 (training.rounds=1)"),
    ({"conditions.round_deadline_s": ["1 s", "1000 ms"]},
     "points p000 (conditions.round_deadline_s=1 s) and p001 (conditions.round_deadline_s=1000 ms)"),
    ({"algorithm": [{"name": "fedprox"}, {"name": "fedprox", "mu": 0.01}]},
     "points p000 (algorithm={name: fedprox}) and p001 (algorithm={name: fedprox, mu: 0.01})"),
])
def test_two_points_that_are_one_scenario_are_refused(write_sweep, axes, twins):
    path = write_sweep(axes=axes)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert str(info.value).startswith(f"{path}: {twins} are the same scenario"), info.value
    assert "sweep seed" in str(info.value)


def test_a_command_line_set_of_an_axis_is_blamed_on_the_set(write_sweep):
    path = write_sweep(axes={"training.batch_size": [8, 16]})
    with pytest.raises(ConfigError) as info:
        load_sweep(path, ["training.batch_size=4"])
    assert str(info.value) == (f"--set training.batch_size=4: training.batch_size is an axis of "
                               f"{path}; a --set cannot fix an axis (remove the axis, or the --set)")


@pytest.mark.parametrize(("spec", "cli", "expected"), [
    ({"axes": {"training.rounds": [1], "training": [{"rounds": 2}]}}, [],
     "axis 'training.rounds' lies inside axis 'training', whose value replaces the whole "
     "'training' mapping, so one of the two would silently override the other; give rounds "
     "inside the value of 'training' (e.g. training: [{rounds: ...}, ...]), or leave "
     "'training' out and give only dotted paths below it, such as 'training.rounds'"),
    ({"set": {"training.batch_size": 8}, "axes": {"training": [{"rounds": 2}]}}, [],
     "set 'training.batch_size' lies inside axis 'training'"),
    ({"set": {"training": {"rounds": 2}}, "axes": {"training.rounds": [1, 2]}}, [],
     "axis 'training.rounds' lies inside set 'training'"),
    ({"set": {"devices.weak.count": 2, "devices": {"weak": {"count": 1}}},
      "axes": {"seed": [0]}}, [],
     "set 'devices.weak.count' lies inside set 'devices', whose value replaces the whole "
     "'devices' mapping, so one of the two would silently override the other; give "
     "weak.count inside the value of 'devices' (e.g. devices: {weak: {count: ...}})"),
    ({"mode": "zip", "axes": {"devices": [{"weak": {"count": 1}}, {"weak": {"count": 2}}],
                              "devices.weak.count": [1, 2]}}, [],
     "axis 'devices.weak.count' lies inside axis 'devices'"),
    ({"axes": {"devices.weak.count": [1, 2]}}, ["devices={weak: {count: 3}}"],
     "axis 'devices.weak.count' lies inside --set devices={weak: {count: 3}}, whose value "
     "replaces the whole 'devices' mapping"),
    ({"set": {"training": {"rounds": 1}}, "axes": {"seed": [0, 1]}},
     ["training.rounds=2"], "--set training.rounds=2 lies inside set 'training'"),
    ({"seeds": [0, 1], "axes": {"algorithm": [{"name": "fedprox"}], "algorithm.mu": [0.1]}},
     [], "axis 'algorithm.mu' lies inside axis 'algorithm'"),
], ids=["axis in axis", "set in axis", "axis in set", "set in set", "zip", "axis in --set",
        "--set in set", "with seeds"])
def test_a_field_inside_another_given_field_is_refused(write_sweep, spec, cli, expected):
    """A mapping value replaces its whole section: a field inside it given beside it (as
    an axis, a set entry or a --set, in either order) would be overridden or override
    it while each point is labelled with both, so the sweep is refused naming the two."""
    path = write_sweep(**spec)
    with pytest.raises(ConfigError) as info:
        load_sweep(path, cli)
    assert str(info.value).startswith(f"{path}: {expected}"), info.value


def test_fields_that_only_share_their_first_letters_are_not_nested(write_sweep):
    """``seed`` and ``seeds.partition``, ``link`` and ``link_override``: two fields, not
    one inside the other."""
    path = write_sweep(set={"devices.weak.link": "wifi"},
                       axes={"seed": [0, 1], "seeds.partition": [5],
                             "devices.weak.link_override.latency_s": [0.01]})
    points = load_sweep(path, ["devices.weak.link_override.uplink_bps=1e6"]).points
    assert [(p.scenario.seed, p.scenario.seeds.partition) for p in points] == [(0, 5), (1, 5)]
    assert points[0].scenario.devices["weak"].link_override.latency_s == 0.01


def test_a_bad_seed_of_seeds_is_named_as_such(write_sweep):
    path = write_sweep(seeds=[-1], axes={"training.rounds": [1]})
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert str(info.value).startswith(
        f"{path}: seed -1 of seeds (with training.rounds=1): seed: -1 is out of range"), info.value


def test_missing_base_names_the_sweep_and_the_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("base: nowhere.yaml\naxes: {seed: [1]}\n")
    with pytest.raises(ConfigError, match=r"s.yaml: base: scenario file .*nowhere.yaml"):
        load_sweep(path)


# ------------------------------------------------------------------- running, resume


class FakeRunner:
    """Stands in for ``run_scenario`` (in-process sweeps): writes what resume reads."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    def __call__(self, scenario, output_dir, progress=None, resume=False, overwrite=False,
                 warnings=()):
        self.ran.append(scenario.seed)
        if scenario.seed == 99:
            raise ConfigError("seed 99 is cursed")
        out = Path(output_dir)
        (out / "scenario.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json")))
        summary = {"status": "completed", "final_server_accuracy": 0.5 + scenario.seed / 100,
                   "bytes_up": 105369600 + scenario.seed, "bytes_down": 7}
        (out / "summary.json").write_text(json.dumps(summary))
        return type("Result", (), {"summary": summary})()


@pytest.fixture
def fake_runner(monkeypatch):
    fake = FakeRunner()
    monkeypatch.setattr("sflsim.runner.run_scenario", fake)
    return fake


def test_interrupted_sweep_resumes_without_redoing_finished_points(write_sweep, tmp_path,
                                                                   fake_runner):
    sweep = load_sweep(write_sweep(axes={"seed": [1, 2, 3, 99]}))
    out = tmp_path / "out"

    class StopAfterTwo:
        def start(self, total, skipped):
            self.seen = 0

        def point_done(self, row):
            self.seen += 1
            if self.seen == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, progress=StopAfterTwo())
    stopped = read_table(out)  # one row per point: those not run yet are pending
    assert list(stopped.point) == ["p000", "p001", "p002", "p003"]
    assert list(stopped.status) == ["completed", "completed", "pending", "pending"]
    assert stopped.sim_time_s.iloc[2:].isna().all()
    assert fake_runner.ran == [1, 2]

    result = run_sweep(sweep, out)  # resume: only the points not finished yet
    assert fake_runner.ran == [1, 2, 3, 99]
    assert result.ran == ["p002", "p003"]
    table = result.table
    assert list(table.status) == ["completed", "completed", "completed", "failed"]
    assert table.error.iloc[3] == "seed 99 is cursed"
    assert table.final_server_accuracy.iloc[0] == pytest.approx(0.51)

    run_sweep(sweep, out)  # finished points stay finished; the failed one is retried
    assert fake_runner.ran == [1, 2, 3, 99, 99]

    changed = load_sweep(write_sweep(axes={"seed": [1, 2, 3, 99]}, set={"training.rounds": 2}))
    with pytest.raises(SflsimError, match="holds points of another sweep"):
        run_sweep(changed, out)  # not the same runs: refused unless asked
    assert run_sweep(changed, out, overwrite=True).ran == ["p000", "p001", "p002", "p003"]


def test_a_sweep_directory_holding_its_base_names_it_relatively_and_moves(
        tiny, tmp_path, fake_runner):
    """A base scenario inside the sweep directory is written as a relative ``base:``, so
    the directory, moved elsewhere, runs again from its own ``sweep.yaml`` with nothing
    redone; a base outside it stays an absolute path."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "base.yaml").write_text(yaml.safe_dump(tiny))
    (tmp_path / "sw.yaml").write_text(yaml.safe_dump({"base": "out/base.yaml",
                                                      "axes": {"seed": [1, 2]}}))
    run_sweep(load_sweep(tmp_path / "sw.yaml"), out)
    assert yaml.safe_load((out / "sweep.yaml").read_text())["base"] == "base.yaml"
    moved = out.rename(tmp_path / "elsewhere")
    assert run_sweep(load_sweep(moved / "sweep.yaml"), moved).ran == []
    assert fake_runner.ran == [1, 2]

    (tmp_path / "base.yaml").write_text(yaml.safe_dump(tiny))
    (tmp_path / "sw2.yaml").write_text(yaml.safe_dump({"base": "base.yaml",
                                                       "axes": {"seed": [1]}}))
    run_sweep(load_sweep(tmp_path / "sw2.yaml"), tmp_path / "out2")
    written = yaml.safe_load((tmp_path / "out2" / "sweep.yaml").read_text())["base"]
    assert written == (tmp_path / "base.yaml").resolve().as_posix()


def test_an_axis_of_1_and_1_0_keeps_them_apart_in_the_table(write_sweep, tmp_path, fake_runner):
    """training.clients_per_round 1 is one client, 1.0 all of them: sweep.csv writes such an
    axis as text, and read_table reads it back as written; a plain numeric axis stays numbers."""
    sweep = load_sweep(write_sweep(axes={"training.clients_per_round": [1, 1.0, 0.5],
                                         "seed": [1, 2]}))
    assert [p.scenario.training.clients_per_round for p in sweep.points][:3:2] == [1, 1.0]
    out = tmp_path / "out"
    table = run_sweep(sweep, out).table
    assert list(table["training.clients_per_round"]) == ["1", "1", "1.0", "1.0", "0.5", "0.5"]
    assert list(read_table(out)["training.clients_per_round"]) == list(
        table["training.clients_per_round"])
    assert read_table(out)["seed"].tolist() == [1, 2] * 3
    assert "1.0" in pd.read_csv(out / "sweep.csv", dtype=str)["training.clients_per_round"].tolist()


def test_a_null_axis_value_is_written_null_and_its_neighbours_stay_whole(write_sweep, tmp_path,
                                                                         fake_runner):
    """training.clients_per_round null (every client) beside 3: sweep.csv writes "null", as
    YAML does, not an empty cell that would read back as NaN and turn 3 into 3.0."""
    from sflsim.metrics.compare import read_sweep

    out = tmp_path / "out"
    run_sweep(load_sweep(write_sweep(axes={"training.clients_per_round": [None, 3]})), out)
    written = pd.read_csv(out / "sweep.csv", dtype=str, keep_default_na=False)
    assert list(written["training.clients_per_round"]) == ["null", "3"]
    assert list(read_table(out)["training.clients_per_round"].astype(str)) == ["null", "3"]
    assert list(read_sweep(out)["training.clients_per_round"].astype(str)) == ["null", "3"]


def test_broken_point_is_recorded_and_the_others_complete(write_sweep, tmp_path):
    path = write_sweep(name="broken", axes={"devices.weak.count": [1, TOO_MANY]})
    out = tmp_path / "out"
    result = run_sweep(load_sweep(path), out)
    table = pd.read_csv(out / "sweep.csv")
    assert list(table.columns) == [*LEAD_COLUMNS, "devices.weak.count", "algorithm",
                                   *SUMMARY_COLUMNS]
    ok, bad = table.iloc[0], table.iloc[1]
    assert ok.status == "completed" and pd.isna(ok.error) and ok.run_dir == "points/p000"
    assert 0 <= ok.final_server_accuracy <= 1 and ok.sim_time_s > 0 and ok.bytes_up > 0
    assert bad.status == "failed" and "only 240 training samples" in bad.error
    assert pd.isna(bad.final_server_accuracy) and bad.algorithm == "hetero_splitee_sequential"
    for name in ("rounds.csv", "summary.json", "scenario.yaml"):
        assert (out / ok.run_dir / name).is_file()
    assert all(run_table_path(out / ok.run_dir, name) for name in RUN_TABLES)
    assert "ConfigError" in (out / bad.run_dir / "error.txt").read_text()
    assert result.table.error.iloc[0] == ""
    # the resolved scenario of a point is that point; sweep.yaml expands to the same points
    point = validate_scenario(yaml.safe_load((out / "points/p000/scenario.yaml").read_text()))
    assert point.devices["weak"].count == 1
    again = load_sweep(out / "sweep.yaml")
    assert [p.scenario for p in again.points] == [p.scenario for p in load_sweep(path).points]


def test_process_pool_runs_points_in_parallel_workers(write_sweep, tmp_path):
    path = write_sweep(axes={"devices.weak.count": [1, TOO_MANY], "seed": [0]})
    result = run_sweep(load_sweep(path), tmp_path / "out", workers=2)
    assert list(result.table.status) == ["completed", "failed"]
    assert (tmp_path / "out/points/p000/rounds.csv").is_file()
    assert "training samples" in result.table.error.iloc[1]


# A real local Ray, started by run_sweep (a failing point among them), is
# tests/test_ray_sweep.py's one test: the suite starts Ray once. Here, a stand-in.


def test_missing_ray_is_one_clear_error(write_sweep, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    sweep = load_sweep(write_sweep(axes={"seed": [1]}))
    with pytest.raises(SflsimError, match=r"pip install 'sflsim\[ray\]'"):
        run_sweep(sweep, tmp_path / "out", executor="ray")
    assert not (tmp_path / "out").exists()


class StandInRay:
    """Stands in for the ``ray`` module: runs each task here when it is submitted, records
    what tasks asked for and their arguments; ``nodes`` is what ``ray.nodes()`` says."""

    class Ref:
        def __init__(self, value):
            self.value = value

    def __init__(self, nodes=({"CPU": 8.0, "GPU": 1.0},), initialized=True):
        from types import SimpleNamespace

        self.node_list = [{"NodeID": str(i), "Alive": True, "Resources": dict(r)}
                          for i, r in enumerate(nodes)]
        self.initialized, self.asked, self.args, self.calls = initialized, [], [], []
        self.exceptions = SimpleNamespace(TaskCancelledError=RuntimeError)

    def is_initialized(self):
        return self.initialized

    def init(self, **options):
        self.calls.append(("init", options))
        self.initialized = True

    def shutdown(self):
        self.calls.append(("shutdown", {}))
        self.initialized = False

    def nodes(self):
        return self.node_list

    def remote(self, **options):
        from types import SimpleNamespace

        self.asked.append(options)

        def wrap(fn):
            def submit(*args):
                self.args.append(args)
                return self.Ref(fn(*args))

            return SimpleNamespace(remote=submit)

        return wrap

    def get(self, ref):
        return ref.value

    def wait(self, pending, num_returns=1, timeout=None):
        return pending[:num_returns], pending[num_returns:]


@pytest.fixture
def stand_in_ray(monkeypatch):
    """Install a :class:`StandInRay` (call with its arguments); returns it."""
    from sflsim.sweep import execute

    def install(*args, **kwargs) -> StandInRay:
        fake = StandInRay(*args, **kwargs)
        monkeypatch.setattr(execute, "require_ray", lambda: fake)
        monkeypatch.setattr("sflsim.sweep.run.require_ray", lambda: fake)
        return fake

    return install


def test_ray_tasks_ask_for_the_cpus_and_gpus_given(write_sweep, tmp_path, stand_in_ray):
    """--gpus-per-point / --cpus-per-point reach each point's ray.remote (a stand-in Ray
    that runs the tasks here records what they asked for), each task runs with a torch
    thread per CPU; without --executor ray they are refused."""
    fake = stand_in_ray(nodes=[{"CPU": 2.0, "GPU": 1.0}])
    # timing only: the tasks run here on 2 torch threads, which training on a busy
    # machine would spin; what is checked is what they ask for and are given
    sweep = load_sweep(write_sweep(set={"training.timing_only": True}, axes={"seed": [0, 1]}))
    result = run_sweep(sweep, tmp_path / "out", executor="ray", cpus_per_point=2,
                       gpus_per_point=0.25)
    assert list(result.table.status) == ["completed", "completed"]
    assert fake.asked == [{"num_cpus": 2, "num_gpus": 0.25, "max_retries": 0}]
    assert [args[3] for args in fake.args] == [2, 2]  # torch threads of each task
    with pytest.raises(SflsimError, match="need --executor ray"):
        run_sweep(sweep, tmp_path / "other", gpus_per_point=1)


@pytest.mark.parametrize(("nodes", "asks", "expected"), [
    ([{"CPU": 2.0}], {"gpus_per_point": 0.5},
     "--gpus-per-point 0.5: no node of the local Ray has a GPU (1 node: 2 CPUs, 0 GPUs); "
     "valid: --gpus-per-point 0"),
    ([{"CPU": 2.0}], {"cpus_per_point": 4},
     "--cpus-per-point 4: no node of the local Ray has 4 CPUs (1 node: 2 CPUs, 0 GPUs); "
     "valid: at most 2"),
    ([{"CPU": 8.0, "GPU": 1.0}, {"CPU": 8.0, "GPU": 1.0}], {"gpus_per_point": 2},
     "--gpus-per-point 2: no node of the local Ray has 2 GPUs (2 nodes: 2 x 8 CPUs, 1 GPU); "
     "valid: at most 1"),
    ([{"CPU": 8.0}, {"CPU": 2.0, "GPU": 1.0}], {"cpus_per_point": 4, "gpus_per_point": 1},
     "--cpus-per-point 4 with --gpus-per-point 1: no node of the local Ray has both "
     "(2 nodes: 8 CPUs, 0 GPUs; 2 CPUs, 1 GPU); valid: --cpus-per-point at most 2"),
], ids=["no GPU", "too many CPUs", "too many GPUs", "not on one node"])
def test_points_no_ray_node_can_run_are_refused_before_any_is_submitted(
        write_sweep, tmp_path, stand_in_ray, nodes, asks, expected):
    """Ray would hold a task no node can run forever (the sweep printed its heartbeat
    forever): it is refused with what the nodes have, and the points stay pending."""
    fake = stand_in_ray(nodes=nodes, initialized=False)
    fake.node_list.append({"NodeID": "dead", "Alive": False,
                           "Resources": {"CPU": 64.0, "GPU": 8.0}})  # a dead node counts not
    out = tmp_path / "out"
    with pytest.raises(SflsimError) as info:
        run_sweep(load_sweep(write_sweep(axes={"seed": [0, 1]})), out, executor="ray", **asks)
    assert str(info.value).startswith(expected), info.value
    assert str(info.value).endswith("; no point was run")
    assert fake.asked == [] and fake.args == []
    assert [c[0] for c in fake.calls] == ["init", "shutdown"]
    assert list(read_table(out).status) == ["pending", "pending"]


def test_a_ray_cluster_names_its_address_when_it_cannot_run_a_point(monkeypatch):
    from sflsim.sweep import execute

    fake = StandInRay(nodes=[{"CPU": 2.0}], initialized=False)
    monkeypatch.setattr(execute, "require_ray", lambda: fake)
    monkeypatch.setattr(execute, "check_ray_address", lambda address: None)
    with pytest.raises(SflsimError, match=r"^--gpus-per-point 0.25: no node of the Ray cluster "
                                          r"at head:6379 has a GPU \(1 node: 2 CPUs, 0 GPUs\)"):
        execute.run_ray([], lambda outcome: None, "head:6379", gpus_per_point=0.25)
    assert fake.calls[0] == ("init", {"address": "head:6379", "include_dashboard": False,
                                      "log_to_driver": False, "logging_level": 30})


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_ray_address_where_nothing_listens_is_refused_at_once(write_sweep, tmp_path,
                                                               stand_in_ray):
    """Ray would retry an unreachable address for minutes: a TCP connection that is
    refused stops the sweep before Ray starts and before anything is written."""
    fake = stand_in_ray(initialized=False)
    port = _free_port()
    out = tmp_path / "out"
    sweep = load_sweep(write_sweep(axes={"seed": [0]}))
    with pytest.raises(SflsimError, match=rf"^cannot start or reach Ray at 127.0.0.1:{port}: "
                                          rf"nothing accepts connections at 127.0.0.1:{port} "
                                          rf".*--address takes auto"):
        run_sweep(sweep, out, executor="ray", address=f"127.0.0.1:{port}")
    assert fake.calls == [] and not out.exists()


@pytest.mark.parametrize(("address", "error", "expected"), [
    ("bogus:1", "gaierror", "cannot start or reach Ray at bogus:1: the host name 'bogus' "
                            "does not resolve"),
    ("ray://10.9.9.9:10001", "timeout", "cannot start or reach Ray at ray://10.9.9.9:10001: "
                                        "10.9.9.9:10001 did not answer within 5 s"),
    ("head:70000", None, "cannot start or reach Ray at head:70000: port 70000 is not a TCP "
                         "port (1 to 65535)"),
])
def test_an_unreachable_ray_address_is_one_message(monkeypatch, address, error, expected):
    import socket

    from sflsim.sweep import execute

    def connect(target, timeout):
        assert timeout == execute.CONNECT_TIMEOUT_S
        raise socket.gaierror(-2, "Name or service not known") if error == "gaierror" else \
            TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", connect)
    with pytest.raises(SflsimError) as info:
        execute.check_ray_address(address)
    assert str(info.value).startswith(expected), info.value


@pytest.mark.parametrize("address", [None, "auto", "local", "[::1]:bad"])
def test_ray_addresses_left_to_ray_are_not_dialled(monkeypatch, address):
    import socket

    from sflsim.sweep import execute

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("dialled"))
    execute.check_ray_address(address)


def _answering(reply: bytes | None):
    """A one-connection TCP server on 127.0.0.1 that reads the client's greeting and
    sends ``reply`` (None: says nothing); returns (address, thread)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve():
        conn, _ = server.accept()
        with conn, server:
            conn.recv(64)
            if reply is not None:
                conn.sendall(reply)
            conn.recv(64)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{server.getsockname()[1]}", thread


def test_a_listening_ray_address_passes():
    """A gRPC server (Ray's GCS) answers the HTTP/2 greeting with a SETTINGS frame; one
    that says nothing is left to Ray."""
    from sflsim.sweep import execute

    for reply in (b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64", None):
        address, thread = _answering(reply)
        execute.check_ray_address(address, timeout_s=0.5)
        thread.join(5)


def test_a_port_that_is_not_ray_is_refused():
    """The dashboard or any HTTP/1 server at --address: Ray would retry for good."""
    from sflsim.sweep import execute

    address, thread = _answering(b"HTTP/1.0 400 Bad request\r\n\r\n")
    with pytest.raises(SflsimError, match=rf"cannot start or reach Ray at {address}: {address} "
                                          r"accepts connections but is not Ray's GCS .*it "
                                          r"answered b'HTTP/1.0 400"):
        execute.check_ray_address(address, timeout_s=2)
    thread.join(5)


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("gpus_per_point", 1.5, "--gpus-per-point 1.5: more than one GPU must be a whole number"),
    ("cpus_per_point", 0.00001, "--cpus-per-point 1e-05: Ray counts resources to 4 decimal "
                                "places"),
])
def test_resource_amounts_ray_cannot_take_are_refused(option, value, expected):
    from sflsim.sweep.run import check_executor_options

    with pytest.raises(SflsimError, match=f"^{expected}".replace(".", r"\.")):
        check_executor_options("ray", **{option: value})


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine has no CUDA GPU (whatever it has)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_local_sweep_on_cuda_without_a_gpu_is_refused_before_any_point(
        write_sweep, tmp_path, no_cuda, fake_runner):
    sweep = load_sweep(write_sweep(axes={"seed": [0, 1]}), ["training.device=cuda"])
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        run_sweep(sweep, out, workers=2)
    message = str(info.value)
    assert message.startswith("sweep sw, every point: training.device: 'cuda' but torch finds "
                              "no CUDA GPU on this machine"), message
    assert message.endswith("use cpu (--set training.device=cpu)"), message
    assert fake_runner.ran == [] and not out.exists()
    # the dry run says so too, once, without a traceback; a device axis is named as one
    axis = write_sweep(axes={"training.device": ["cpu", "cuda"]})
    result = runner.invoke(app, ["sweep", str(axis), "-o", str(out), "--dry-run"])
    assert result.exit_code == USER_ERROR, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: sweep sw, point p001: training.device: 'cuda'"), text
    assert "(leave CUDA out of the training.device axis)" in text
    assert "--device cpu" not in text and "Traceback" not in text and not out.exists()


def test_ray_points_on_cuda_are_not_checked_against_this_machine(
        write_sweep, tmp_path, no_cuda, stand_in_ray, fake_runner):
    """With Ray the points run on the cluster's nodes (whose GPUs Ray counts)."""
    stand_in_ray(nodes=[{"CPU": 2.0, "GPU": 1.0}])
    path = write_sweep(axes={"seed": [0]})
    result = runner.invoke(app, ["sweep", str(path), "-o", str(tmp_path / "out"), "--set",
                                 "training.device=cuda", "--executor", "ray",
                                 "--gpus-per-point", "1", "--dry-run"])
    assert result.exit_code == 0, result.output
    sweep = load_sweep(path, ["training.device=cuda"])
    result = run_sweep(sweep, tmp_path / "out", executor="ray", gpus_per_point=1)
    assert list(result.table.status) == ["completed"] and fake_runner.ran == [0]


def test_the_ray_thread_line_follows_cpus_per_point(write_sweep, tmp_path):
    path = write_sweep(axes={"seed": [0]})
    for cpus, line in (("4", "torch threads: 4 per point (one per CPU a point's Ray task asks "
                             "for: --cpus-per-point 4)"),
                       ("0.5", "torch threads: 1 per point (--cpus-per-point 0.5 rounded down, "
                               "at least one)")):
        result = runner.invoke(app, ["sweep", str(path), "-o", str(tmp_path / "o"), "--executor",
                                     "ray", "--cpus-per-point", cpus, "--dry-run"])
        assert result.exit_code == 0, result.output
        assert line in " ".join(result.output.split()), result.output


def test_whole_number_columns_stay_whole_beside_empty_cells(write_sweep, tmp_path, fake_runner):
    """bytes_up of a completed point is written 105369601, not 105369601.0, when another
    point has none; sweep.csv still reads back (read_table, compare's reader)."""
    from sflsim.metrics.compare import read_sweep

    out = tmp_path / "out"
    run_sweep(load_sweep(write_sweep(axes={"seed": [1, 99]})), out)
    rows = pd.read_csv(out / "sweep.csv", dtype=str, keep_default_na=False)
    assert list(rows.bytes_up) == ["105369601", ""] and list(rows.bytes_down) == ["7", ""]
    assert rows.final_server_accuracy[0] == "0.51"
    table = read_table(out)
    assert table.bytes_up[0] == 105369601 and pd.isna(table.bytes_up[1])
    assert list(table.status) == ["completed", "failed"]
    assert read_sweep(out).bytes_down[0] == 7


# --------------------------------------------------------------------------------- CLI

runner = CliRunner()


def test_cli_runs_a_sweep_and_reports_failures(write_sweep, tmp_path):
    path = write_sweep(axes={"devices.weak.count": [1, TOO_MANY]})
    out = tmp_path / "cli"
    result = runner.invoke(app, ["sweep", str(path), "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert "p000 completed" in result.output and "p001 failed" in result.output
    assert "1 of 2 points did not complete" in result.output
    assert (out / "sweep.csv").is_file() and (out / "sweep.yaml").is_file()
    resumed = runner.invoke(app, ["sweep", str(path), "-o", str(out)])
    assert "1 of 2 points already finished" in resumed.output


def test_cli_dry_run_lists_points_and_runs_nothing(write_sweep, tmp_path):
    path = write_sweep(mode="zip", axes={"devices.weak.count": [0, 2], "devices.mid.count": [2, 0]})
    result = runner.invoke(app, ["sweep", str(path), "-o", str(tmp_path / "dry"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "p001  devices.weak.count=2, devices.mid.count=0" in result.output
    assert not (tmp_path / "dry").exists()


def test_points_show_their_values_as_the_sweep_file_writes_them(write_sweep, tmp_path):
    path = write_sweep(axes={"conditions.round_deadline_s": [None, 10.5],
                             "training.channels_last": [True]})
    result = runner.invoke(app, ["sweep", str(path), "-o", str(tmp_path / "dry"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "p000  conditions.round_deadline_s=null, training.channels_last=true" in result.output
    assert "p001  conditions.round_deadline_s=10.5, training.channels_last=true" in result.output


@pytest.mark.parametrize("args", [["--set", "training.roundz=1"], ["--address", "auto"]])
def test_cli_bad_input_is_a_user_error(write_sweep, tmp_path, args):
    path = write_sweep(axes={"seed": [1]})
    result = runner.invoke(app, ["sweep", str(path), "-o", str(tmp_path / "bad"), *args])
    assert result.exit_code == USER_ERROR, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "bad").exists()


# ------------------------------------------------------------------------ shipped files


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_shipped_sweep_expands_and_validates(path):
    sweep = load_sweep(path)
    assert sweep.name == path.stem and len(sweep.points) >= 2
    for point in sweep.points:
        assert point.scenario.training.rounds <= 2 and point.scenario.dataset.fraction <= 0.25


def test_device_mix_sweeps_weak_fraction_at_a_fixed_fleet():
    points = load_sweep(next(p for p in SWEEPS if p.stem == "device_mix")).points
    assert {p.scenario.num_clients for p in points} == {12}
    weak = [p.scenario.devices["pi4_wifi"].count / 12 for p in points]
    assert weak[0] == 0 and weak[-1] == 1 and weak == sorted(weak)


def test_device_mix_extremes_run_with_an_empty_device_group(tmp_path):
    small = ["training.rounds=1", "dataset.fraction=0.025", "model.width=0.0625",
             "evaluation.max_test_samples=40"]
    points = load_sweep(next(p for p in SWEEPS if p.stem == "device_mix"), small).points
    from sflsim.runner import run_scenario

    for point, present, absent in ((points[0], 5, 3), (points[-1], 3, 5)):
        result = run_scenario(point.scenario, tmp_path / point.point_id)
        assert set(result.clients.end_layer) == {present}
        assert f"server_accuracy_l{present}" in result.rounds
        assert f"server_accuracy_l{absent}" not in result.rounds


def test_sequential_vs_averaging_crosses_algorithms_and_partitions():
    points = load_sweep(next(p for p in SWEEPS if p.stem == "sequential_vs_averaging")).points
    assert {p.scenario.algorithm.name for p in points} >= {"hetero_splitee_sequential",
                                                           "hetero_splitee_averaging"}
    assert {p.scenario.dataset.partition.scheme for p in points} == {"iid", "dirichlet"}


def test_usable_cores_is_positive():
    from sflsim.threads import usable_cores

    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


def test_a_changed_sweep_does_not_replace_the_old_points(write_sweep, tmp_path, fake_runner):
    out = tmp_path / "out"
    run_sweep(load_sweep(write_sweep(axes={"seed": [1, 2]})), out)
    before = (out / "points" / "p000" / "scenario.yaml").read_text()
    changed = load_sweep(write_sweep(axes={"seed": [5, 2]}))
    with pytest.raises(SflsimError, match=r"holds points of another sweep: p000 \(seed: 1 before, "
                                          r"5 now\); pass --overwrite"):
        run_sweep(changed, out)
    assert (out / "points" / "p000" / "scenario.yaml").read_text() == before
    assert fake_runner.ran == [1, 2]
    # every difference of a point is named, and a dry run refuses as the run would
    twice = write_sweep(axes={"seed": [5, 2]}, set={"training.rounds": 3})
    result = CliRunner().invoke(app, ["sweep", str(twice), "-o", str(out), "--dry-run"])
    assert result.exit_code == 2
    assert ("p000 (seed: 1 before, 5 now, training.rounds: 1 before, 3 now)"
            in " ".join(result.output.split())), result.output
    assert CliRunner().invoke(app, ["sweep", str(twice), "-o", str(out), "--dry-run",
                                    "--overwrite"]).exit_code == 0
    run_sweep(changed, out, overwrite=True)
    assert fake_runner.ran == [1, 2, 5]  # p001 (seed 2) is the same point: kept


def test_a_sweep_as_base_is_one_clear_error(write_sweep, tmp_path):
    inner = write_sweep("inner", axes={"seed": [0, 1]})
    outer = tmp_path / "outer.yaml"
    outer.write_text("base: inner.yaml\naxes: {training.rounds: [1, 2]}\n")
    with pytest.raises(ConfigError) as info:
        load_sweep(outer)
    msg = str(info.value)
    assert msg.startswith(f"{outer}: base: {inner} is a sweep file (it has 'base', 'axes')"), msg
    assert "base must be a scenario file" in msg
    assert f"that sweep's base is {tmp_path / 'base.yaml'}" in msg
    assert "unknown field" not in msg and "\n" not in msg


def test_a_scenario_with_a_stray_sweep_key_is_not_taken_for_a_sweep(write_sweep, tmp_path):
    base = yaml.safe_load((tmp_path / "base.yaml").read_text())
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**base, "mode": "zip"}))
    with pytest.raises(ConfigError, match=r"mode: unknown field") as info:
        load_sweep(write_sweep(axes={"seed": [0]}))
    assert "sweep file" not in str(info.value)
