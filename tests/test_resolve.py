"""The resolved scenario: run-time defaults written as the values the run used."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml

from sflsim.checkpoint import _same
from sflsim.config import load_scenario, validate_scenario
from sflsim.config.resolve import resolve_scenario, resolved_dump
from sflsim.config.schema import DatasetConfig, ModelConfig
from sflsim.metrics.results import read_result_csv, read_run_table
from sflsim.runner import build, run_scenario


def _used(algorithm) -> dict:
    """The values a built run uses for each field that resolving fills in."""
    ctx = algorithm.ctx
    used = {"server.slots": ctx.server.resource.capacity}
    name = ctx.scenario.algorithm.name
    if name == "hetero_splitee_sequential":
        lr = ctx.scenario.training.optimizer.lr
        used["algorithm.server_lr_divisor"] = pytest.approx(
            lr / algorithm.server_optimizer.param_groups[0]["lr"])
    if name in ("splitfed_v1", "multisfl"):
        used["algorithm.split.candidates"] = algorithm.candidates
    if name == "multisfl":
        used["algorithm.num_branches"] = algorithm.num_branches
        used["algorithm.replay_min_samples"] = algorithm.replay_min_samples
    if name == "fedsga":
        used["algorithm.candidates"] = algorithm.candidates
        used["algorithm.reference_split"] = algorithm.p_ref
    return used


def _field(scenario, dotted: str):
    value = scenario
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("algorithm", ["hetero_splitee_sequential", "splitfed_v1", "multisfl",
                                       "fedsga"])
def test_resolved_values_are_the_ones_the_run_uses(tiny, algorithm):
    tiny["algorithm"] = {"name": algorithm}
    given = validate_scenario(tiny)
    resolved = resolve_scenario(given)
    _, built = build(given)  # built from what the user gave: the algorithm's own defaults
    used = _used(built)
    assert len(used) > 1
    for dotted, value in used.items():
        assert _field(given, dotted) is None, dotted
        assert _field(resolved, dotted) == value, dotted


def test_explicit_values_are_kept_and_resolving_is_idempotent(tiny):
    tiny["algorithm"] = {"name": "hetero_splitee_sequential", "server_lr_divisor": 12}
    tiny["server"] = {"profile": "a100", "slots": 2}
    given = validate_scenario(tiny)
    assert resolve_scenario(given) is given
    tiny["server"] = {"profile": "cpu_server"}
    resolved = resolve_scenario(validate_scenario(tiny))
    assert (resolved.server.slots, resolved.algorithm.server_lr_divisor) == (2, 12.0)
    assert resolve_scenario(resolved) is resolved


def test_vit_sizes_are_the_builder_defaults_and_null_stays_null_where_it_is_the_setting(tiny):
    tiny["model"] = {"name": "vit", "width": 0.25}
    tiny["devices"] = {"a": {"profile": "rpi4", "count": 2, "end_layer": 2, "link": "wifi"}}
    resolved = resolve_scenario(validate_scenario(tiny))
    assert {f: getattr(resolved.model, f) for f in ModelConfig.VIT_DEFAULTS} == \
        ModelConfig.VIT_DEFAULTS
    assert resolved.model.mlp_dim is None  # 4 x the scaled width: no mlp_dim reproduces it
    assert resolved.conditions.round_deadline_s is None  # no deadline
    assert resolved.seeds.model is None  # follows seed
    ctx, _ = build(resolved)
    assert ctx.backbone.num_stages == resolved.model.depth + 1


def test_num_classes_table_matches_the_datasets():
    from sflsim.data import datasets

    assert set(DatasetConfig.NUM_CLASSES) == set(datasets.DATASETS)
    assert DatasetConfig.NUM_CLASSES["fashion_mnist"] == \
        datasets.load_dataset("fashion_mnist", fraction=0.01).num_classes
    assert DatasetConfig.NUM_CLASSES == datasets.NUM_CLASSES
    assert DatasetConfig.RESIZABLE == datasets.RESIZABLE
    assert DatasetConfig.DOWNLOADABLE == datasets.DOWNLOADABLE
    from sflsim.config.schema import DOMAINNET_DOMAINS
    assert DOMAINNET_DOMAINS == datasets.DOMAINNET_DOMAINS


def test_written_scenario_yaml_has_the_values_and_runs_again_the_same(tiny, tmp_path):
    run_scenario(validate_scenario(tiny), tmp_path / "a")
    written = yaml.safe_load((tmp_path / "a" / "scenario.yaml").read_text())
    assert written["algorithm"]["server_lr_divisor"] == 3.0  # 3 clients
    assert written["server"]["slots"] == 4  # the a100 profile's
    again = run_scenario(load_scenario(tmp_path / "a" / "scenario.yaml"), tmp_path / "b")
    for table in ("rounds", "clients", "events"):
        a, b = (read_result_csv(tmp_path / d / "rounds.csv") if table == "rounds"
                else read_run_table(tmp_path / d, table) for d in "ab")
        pd.testing.assert_frame_equal(a.drop(columns=["wall_time_s"], errors="ignore"),
                                      b.drop(columns=["wall_time_s"], errors="ignore"))
    assert yaml.safe_load((tmp_path / "b" / "scenario.yaml").read_text()) == written
    assert again.scenario == resolve_scenario(validate_scenario(tiny))


def test_resume_compares_scenarios_resolved(tiny):
    given = validate_scenario(tiny).model_dump(mode="json")
    resolved = resolved_dump(given)
    assert resolved != given and _same(given, resolved) and _same(resolved, given)
    other = copy.deepcopy(given)
    other["server"]["slots"] = 1
    assert not _same(other, resolved)
    assert resolved_dump({"devices": "none"}) is None


def test_a_finished_sweep_point_is_recognised_from_its_resolved_scenario(tiny, tmp_path):
    from sflsim.sweep import load_sweep, run_sweep

    (tmp_path / "base.yaml").write_text(yaml.safe_dump(tiny))
    (tmp_path / "sw.yaml").write_text("base: base.yaml\naxes: {seed: [0]}\n")
    sweep = load_sweep(tmp_path / "sw.yaml")
    assert run_sweep(sweep, tmp_path / "out").ran == ["p000"]
    written = yaml.safe_load((tmp_path / "out" / "points" / "p000" / "scenario.yaml").read_text())
    assert written["server"]["slots"] == 4
    again = run_sweep(load_sweep(tmp_path / "sw.yaml"), tmp_path / "out")
    assert again.ran == []
    summary = json.loads((tmp_path / "out" / "points" / "p000" / "summary.json").read_text())
    assert summary["status"] == "completed"


def test_a_stored_run_without_a_field_of_today_never_counts_as_today(tiny, tmp_path):
    """A field a stored scenario lacks did not exist when the run was made: today's
    default need not be what it did, so it is neither finished, reused nor resumed."""
    from sflsim.config.resolve import ABSENT
    from sflsim.errors import SflsimError
    from sflsim.sweep import load_sweep, run_sweep
    from sflsim.sweep.run import finished_summary, refuse_other_points

    tiny["algorithm"] = {"name": "fedsga"}
    full = resolved_dump(validate_scenario(tiny).model_dump(mode="json"))
    older = copy.deepcopy(full)
    del older["algorithm"]["backbone"]
    assert resolved_dump(full, stored=True) == full
    assert resolved_dump(older, stored=True)["algorithm"]["backbone"] == ABSENT
    assert resolved_dump(older)["algorithm"]["backbone"] == "one"  # a mapping a user wrote
    assert not _same(older, full)
    kept = copy.deepcopy(full)  # a field added with the old behaviour as its default
    del kept["dataset"]["augment"]
    assert resolved_dump(kept, stored=True) == full and _same(kept, full)

    tiny["training"]["rounds"] = 1
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(tiny))
    (tmp_path / "sw.yaml").write_text("base: base.yaml\naxes: {seed: [0]}\n")
    sweep = load_sweep(tmp_path / "sw.yaml")
    run_sweep(sweep, tmp_path / "out")
    run_dir = tmp_path / "out" / "points" / "p000"
    assert finished_summary(run_dir, sweep.points[0].scenario) is not None
    written = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    del written["algorithm"]["backbone"]
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(written))
    assert finished_summary(run_dir, sweep.points[0].scenario) is None
    with pytest.raises(SflsimError, match=r"p000 \(algorithm\.backbone"):
        refuse_other_points(tmp_path / "out", sweep)
