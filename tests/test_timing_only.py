"""Timing-only runs (``--no-train``): the same simulated timeline, no torch steps."""

from __future__ import annotations

import copy
import importlib
import pkgutil
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from torch import nn
from typer.testing import CliRunner

import sflsim.algorithms
from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.config.schema import TIMING_ONLY_ALGORITHMS
from sflsim.errors import ConfigError
from sflsim.metrics.export import export_csv
from sflsim.metrics.schedule import read_clients_table
from sflsim.runner import run_scenario

#: one scenario per method (and split policy) whose timing-only run must give the
#: trained run's events; FedSGA's sufficiency-guided split is tested apart (it needs a
#: recorded schedule)
METHODS = {
    "hetero_splitee_sequential": {"name": "hetero_splitee_sequential"},
    "hetero_splitee_averaging": {"name": "hetero_splitee_averaging"},
    "distributed": {"name": "distributed"},
    "centralized": {"name": "centralized"},
    "fedavg": {"name": "fedavg"},
    "fedprox": {"name": "fedprox"},
    "fedmut": {"name": "fedmut"},
    "fedbabu": {"name": "fedbabu", "finetune_epochs": 1},
    "fedgh": {"name": "fedgh"},
    "fedas": {"name": "fedas"},
    "splitfed_v1": {"name": "splitfed_v1"},
    "splitfed_v2 random": {"name": "splitfed_v2", "split": {"name": "random"}},
    "splitfed_v1 resource": {"name": "splitfed_v1",
                             "split": {"name": "resource", "round_budget_s": "5 s"}},
    "multisfl": {"name": "multisfl", "adaptive_replay": False},
    "mergesfl": {"name": "mergesfl"},
    "mu_splitfed": {"name": "mu_splitfed"},
    "mu_splitfed first_order": {"name": "mu_splitfed", "client_gradient": "first_order"},
    "fedsga static": {"name": "fedsga", "split": "static"},
    "fedsga random": {"name": "fedsga", "split": "random"},
    "fedsga resource": {"name": "fedsga", "split": "resource", "round_budget_s": "5 s"},
}
#: stragglers and drop-outs (a round deadline is added per method, see UNDER_CONDITIONS)
CONDITIONS = {"straggler_sigma": 0.4, "client_drop_prob": 0.2}
#: the methods also compared under CONDITIONS, each with a round deadline (s) that cuts
#: a client off in the traced scenario (about 2/3 of its round without conditions)
UNDER_CONDITIONS = {"hetero_splitee_sequential": 0.08, "hetero_splitee_averaging": 0.08,
                    "centralized": 0.02, "fedavg": 0.15, "fedgh": 0.035, "splitfed_v1": 0.18,
                    "multisfl": 0.25, "mergesfl": 0.12, "mu_splitfed": 0.3, "fedsga random": 0.2}
#: rounds columns that come from the timeline
TIMED = ["round", "sim_time_s", "bytes_up", "bytes_down", "client_flops", "server_flops",
         "client_energy_j", "clients_late", "clients_dropped"]


@pytest.fixture
def model_copies(monkeypatch) -> list[str]:
    """One type name per ``copy.deepcopy`` call of the algorithm modules that copies an
    ``nn.Module`` (or a list of them, named by its first), in order."""
    copied: list[str] = []

    def deepcopy(obj, memo=None):
        modules = [o for o in (obj if isinstance(obj, (list, tuple)) else (obj,))
                   if isinstance(o, nn.Module)]
        if modules:
            copied.append(type(modules[0]).__name__)
        return copy.deepcopy(obj, memo)

    proxy = SimpleNamespace(deepcopy=deepcopy)
    for info in pkgutil.iter_modules(sflsim.algorithms.__path__):
        module = importlib.import_module(f"sflsim.algorithms.{info.name}")
        if getattr(module, "copy", None) is copy:
            monkeypatch.setattr(module, "copy", proxy)
    return copied


def traced(tiny: dict, algorithm: dict, conditions: dict) -> dict:
    """The tiny scenario, smaller still (20 samples per client: 2 batches), 2 rounds."""
    tiny["algorithm"] = algorithm
    tiny["dataset"]["fraction"] = 0.005
    tiny["evaluation"]["max_test_samples"] = 8
    tiny["training"]["rounds"] = 2
    tiny["conditions"] = conditions
    return tiny


def assert_same_timeline(timed, trained) -> None:
    """Every column of every event, and the rounds' simulated time, bytes, FLOPs and
    energy, exactly."""
    assert len(trained.events) > 0
    pd.testing.assert_frame_equal(timed.events, trained.events, check_exact=True)
    pd.testing.assert_frame_equal(timed.rounds[TIMED], trained.rounds[TIMED], check_exact=True)
    assert timed.rounds["server_accuracy"].isna().all()
    assert timed.summary["final_server_accuracy"] is None
    assert timed.algorithm.steps.losses == []  # no torch step ran
    assert timed.early_exit is None


def timing_only(data: dict) -> dict:
    data = copy.deepcopy(data)
    data["training"]["timing_only"] = True
    return data


@pytest.mark.parametrize("method, deadline_s", [
    *((m, None) for m in METHODS), *UNDER_CONDITIONS.items()],
    ids=lambda v: "" if v is None else "conditions" if isinstance(v, float) else v)
def test_timing_only_gives_the_trained_runs_timeline(tiny, model_copies, method, deadline_s):
    conditions = {} if deadline_s is None else {**CONDITIONS, "round_deadline_s": deadline_s}
    data = traced(tiny, METHODS[method], conditions)
    trained = run_scenario(Scenario.model_validate(data))
    if conditions:  # the conditions bite: someone dropped out and someone was cut off
        assert trained.rounds["clients_dropped"].sum() and trained.rounds["clients_late"].sum()
    model_copies.clear()
    timed = run_scenario(Scenario.model_validate(timing_only(data)))
    assert_same_timeline(timed, trained)
    # nothing is copied per client: at most the models an algorithm keeps once
    # (FedAvg's global model; Hetero-SplitEE Sequential's shared stages and head)
    assert len(model_copies) <= 2, model_copies


def test_every_timing_only_algorithm_is_compared():
    assert {m["name"] for m in METHODS.values()} | {"fedsga"} == set(TIMING_ONLY_ALGORITHMS)


FEDSGA_SCHEDULED = {
    "adapted probe": {"name": "fedsga", "calibration_every": 1},
    "shared probe, sequential": {"name": "fedsga", "calibration_every": 1, "probe": "shared",
                                 "server_update": "sequential"},
    "local fronts": {"name": "fedsga", "calibration_every": 1, "client_fronts": "local",
                     "backbone": "separate", "descriptor": "after_training"},
}


@pytest.mark.parametrize("variant, deadline_s, table", [
    ("adapted probe", None, "directory"),
    ("adapted probe", 0.2, "clients.csv"),
    ("shared probe, sequential", None, "parquet"),
    ("local fronts", 0.2, "directory"),
], ids=lambda v: "" if v is None else "conditions" if isinstance(v, float) else v)
def test_fedsga_timing_only_follows_a_trained_runs_split_schedule(
        tiny, tmp_path, model_copies, variant, deadline_s, table):
    conditions = {} if deadline_s is None else {**CONDITIONS, "round_deadline_s": deadline_s}
    data = traced(tiny, FEDSGA_SCHEDULED[variant], conditions)
    trained = run_scenario(Scenario.model_validate(data), tmp_path / "trained")
    if conditions:
        assert trained.rounds["clients_dropped"].sum() and trained.rounds["clients_late"].sum()
    events = trained.events["activity"]
    # the observations, descriptors and (round 2, calibrating) probes are all simulated
    assert {"observe", "calibration_probe"} <= set(events)
    assert ("describe_prompts" in set(events)) == (variant != "local fronts")
    schedule = {"directory": tmp_path / "trained",
                "clients.csv": tmp_path / "trained" / "clients.csv",
                "parquet": tmp_path / "clients.parquet"}[table]
    if table == "parquet":  # one Parquet file, not a run's folder of rounds
        read_clients_table(tmp_path / "trained").to_parquet(schedule)
    if table == "clients.csv":  # as a run written before Parquet holds it
        list(export_csv(tmp_path / "trained"))
    timing = timing_only(data)
    timing["algorithm"]["split_schedule"] = str(schedule)
    model_copies.clear()
    timed = run_scenario(validate_scenario(timing))
    assert_same_timeline(timed, trained)
    pd.testing.assert_series_equal(timed.clients["cut_layer"], trained.clients["cut_layer"])
    assert timed.clients["sufficiency_r"].isna().all()  # nothing was estimated
    assert len(model_copies) <= 2, model_copies


def test_timing_only_shares_one_model_per_end_layer(tiny):
    tiny["devices"]["weak"]["count"] = 3
    tiny["training"]["timing_only"] = True
    result = run_scenario(Scenario.model_validate(tiny))
    weak = [c for c in result.algorithm.ctx.clients if c.group == "weak"]
    assert len({id(c.model) for c in weak}) == 1 and all(c.optimizer is None for c in weak)


@pytest.mark.parametrize("algorithm, match", [
    ({"name": "fedsga"}, r"training\.timing_only \(--no-train\): FedSGA's algorithm\.split: "
                         r"sufficiency .* give algorithm\.split_schedule .* or use "
                         r"algorithm\.split: static, random or resource"),
    ({"name": "multisfl"}, r"training\.timing_only \(--no-train\): algorithm\.adaptive_replay: "
                           r"true .* gradient norms .* valid in timing-only runs: "
                           r"algorithm\.adaptive_replay: false"),
])
def test_timing_only_is_refused_where_the_timeline_needs_training(tiny, algorithm, match):
    tiny["algorithm"] = algorithm
    tiny["training"]["timing_only"] = True
    with pytest.raises(ConfigError, match=match):
        validate_scenario(tiny)


@pytest.mark.parametrize("algorithm", [
    {"name": "multisfl", "replay": False},
    {"name": "multisfl", "replay_fraction": 0.05, "replay_fraction_max": 0.05},
])
def test_multisfl_timing_only_where_the_replay_fraction_is_fixed(tiny, algorithm):
    tiny["algorithm"] = algorithm
    tiny["training"]["timing_only"] = True
    assert validate_scenario(tiny).training.timing_only


def test_split_schedule_only_in_timing_only_runs_of_the_sufficiency_policy(tiny, tiny_run):
    tiny["algorithm"] = {"name": "fedsga", "split_schedule": str(tiny_run)}
    with pytest.raises(ConfigError, match=r"algorithm\.split_schedule: .* followed only by "
                                          r"timing-only runs \(training\.timing_only: true"):
        validate_scenario(tiny)
    tiny["algorithm"]["split"] = "static"
    tiny["training"]["timing_only"] = True
    with pytest.raises(ConfigError, match=r"split_schedule replaces the decisions of split: "
                                          r"sufficiency; split: static .* remove split_schedule"):
        validate_scenario(tiny)


def schedule_rows(rounds: int = 2, clients: int = 3, cut: int = 2) -> list[dict]:
    return [{"round": r, "client_id": c, "cut_layer": cut, "status": "trained"}
            for r in range(1, rounds + 1) for c in range(clients)]


@pytest.mark.parametrize("rows, match", [
    (schedule_rows(rounds=1), r"round 2 has no rows \(the table holds rounds 1 to 1\); the "
                              r"schedule must cover rounds 1 to 2 \(training\.rounds\)"),
    (schedule_rows()[:-1], r"round 2 has no row for clients 2 .*valid: 0 to 2"),
    (schedule_rows(clients=4), r"client ids 3 are not clients of this scenario \(3 clients\)"),
    (schedule_rows() + schedule_rows()[:1], r"round 1 has 2 rows for client 0"),
    (schedule_rows(cut=6), r"client 0 trained at cut_layer 6 in round 1, which is not a "
                           r"candidate cut; valid: 1, 2, 3, 4, 5"),
    ([{**r, "cut_layer": 1.5} for r in schedule_rows()],
     r"column cut_layer holds float64 values, not whole numbers"),
    ([{k: v for k, v in r.items() if k != "cut_layer"} for r in schedule_rows()],
     r"has no column cut_layer \(it has round, client_id, status\)"),
])
def test_a_bad_split_schedule_is_refused(tiny, tmp_path, rows, match):
    path = tmp_path / "clients.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    tiny["algorithm"] = {"name": "fedsga", "split_schedule": str(path)}
    tiny["training"]["rounds"] = 2
    tiny["training"]["timing_only"] = True
    with pytest.raises(ConfigError, match=r"algorithm\.split_schedule: .*" + match):
        validate_scenario(tiny)


def test_a_dropped_clients_cut_need_not_be_a_candidate(tiny, tmp_path):
    rows = schedule_rows(cut=5)
    rows[0].update(cut_layer=5, status="dropped")  # it kept its end layer, not a candidate
    path = tmp_path / "clients.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    tiny["algorithm"] = {"name": "fedsga", "candidates": [1, 3], "split_schedule": str(path)}
    tiny["training"]["rounds"] = 2
    tiny["training"]["timing_only"] = True
    with pytest.raises(ConfigError, match=r"client 1 trained at cut_layer 5 in round 1"):
        validate_scenario(tiny)  # a trained one must
    for row in rows[1:]:
        row["cut_layer"] = 3
    pd.DataFrame(rows).to_csv(path, index=False)
    assert validate_scenario(tiny).algorithm.split_schedule == str(path)


@pytest.mark.parametrize("where, match", [
    ("missing", r"does not exist \(looked in "),
    ("empty dir", r"is a directory without clients\.parquet or clients\.csv"),
    ("text", r"is neither a \.parquet nor a \.csv file"),
])
def test_a_split_schedule_that_is_not_a_clients_table(tiny, tmp_path, where, match):
    path = {"missing": tmp_path / "missing", "empty dir": tmp_path,
            "text": tmp_path / "cuts.txt"}[where]
    if where == "text":
        path.write_text("round,client_id,cut_layer\n")
    tiny["algorithm"] = {"name": "fedsga", "split_schedule": str(path)}
    tiny["training"]["timing_only"] = True
    with pytest.raises(ConfigError, match=r"algorithm\.split_schedule: '[^']+' " + match
                       + r".*valid: a run's results directory or its clients table"):
        validate_scenario(tiny)


def test_cli_no_train(tiny, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(out), "--no-train", "-q"])
    assert result.exit_code == 0, result.output
    assert "not evaluated (timing only)" in result.output
    assert yaml.safe_load((out / "scenario.yaml").read_text())["training"]["timing_only"] is True
    assert not (out / "checkpoint.pkl").exists()
    tiny["algorithm"] = {"name": "fedsga"}
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    refused = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "f"), "--no-train"])
    assert refused.exit_code == USER_ERROR and "split_schedule" in refused.output


def test_rounds_booked_as_arrays_equal_rounds_booked_client_by_client(tmp_path, monkeypatch):
    """A FedAvg timing-only round is booked for every client at once
    (:mod:`sflsim.execution.booked`): the same events, to the last bit, as the loop over
    clients, with clients of uneven sizes (Dirichlet), two local epochs, stragglers and
    dropped clients, four device kinds on two link kinds, over three rounds."""
    import sflsim.algorithms.fedavg as fedavg

    data = {
        "name": "booked", "seed": 3,
        "dataset": {"name": "synthetic", "partition": {"scheme": "dirichlet", "alpha": 0.3},
                    "synthetic": {"train_samples": 900, "test_samples": 20}},
        "model": {"name": "small_cnn"},
        "devices": {
            "a": {"profile": "rpi4", "count": 7, "end_layer": 2, "link": "wifi"},
            "b": {"profile": "jetson_nano", "count": 6, "end_layer": 2, "link": "lte"},
            "c": {"profile": "jetson_orin_nano", "count": 5, "end_layer": 2, "link": "wifi"},
            "d": {"profile": "rpi5", "count": 6, "end_layer": 2, "link": "lte"}},
        "server": {"profile": "a100"},
        "algorithm": {"name": "fedavg"},
        "training": {"rounds": 3, "local_epochs": 2, "batch_size": 16, "timing_only": True},
        "conditions": {"straggler_sigma": 0.5, "client_drop_prob": 0.2},
    }
    booked = run_scenario(Scenario.model_validate(data), tmp_path / "booked")
    monkeypatch.setattr(fedavg, "bookable", lambda clients: False)
    looped = run_scenario(Scenario.model_validate(data), tmp_path / "looped")
    assert booked.algorithm._booked is not None and looped.algorithm._booked is None
    assert (looped.clients.groupby("round")["status"].apply(lambda s: (s == "dropped").sum())
            > 0).any()
    pd.testing.assert_frame_equal(booked.events, looped.events, check_exact=True)
    pd.testing.assert_frame_equal(booked.rounds.drop(columns="wall_time_s"),
                                  looped.rounds.drop(columns="wall_time_s"), check_exact=True)
    pd.testing.assert_frame_equal(booked.clients, looped.clients, check_exact=True)
