"""Timing-only runs (``--no-train``): the same simulated timeline, no torch steps."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.config.schema import Scenario
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario


def timeline(events: pd.DataFrame) -> pd.DataFrame:
    return events.reset_index(drop=True)


@pytest.mark.parametrize("algorithm", ["hetero_splitee_sequential", "hetero_splitee_averaging"])
@pytest.mark.parametrize("conditions", [{}, {"straggler_sigma": 0.4, "client_drop_prob": 0.2,
                                             "round_deadline_s": "0.5 s"}])
def test_timing_only_gives_the_trained_runs_timeline(tiny, algorithm, conditions):
    tiny["algorithm"] = {"name": algorithm}
    tiny["training"]["rounds"] = 2
    tiny["conditions"] = conditions
    trained = run_scenario(Scenario.model_validate(tiny))
    timing = copy.deepcopy(tiny)
    timing["training"]["timing_only"] = True
    timed = run_scenario(Scenario.model_validate(timing))
    pd.testing.assert_frame_equal(timeline(timed.events), timeline(trained.events), check_exact=True)
    same = ["round", "sim_time_s", "bytes_up", "client_flops", "server_flops", "client_energy_j",
            "clients_late", "clients_dropped"]
    pd.testing.assert_frame_equal(timed.rounds[same], trained.rounds[same], check_exact=True)
    assert timed.rounds["server_accuracy"].isna().all()
    assert timed.summary["final_server_accuracy"] is None
    assert timed.algorithm.losses == []  # no torch step ran
    assert timed.early_exit is None


def test_timing_only_shares_one_model_per_end_layer(tiny):
    tiny["devices"]["weak"]["count"] = 3
    tiny["training"]["timing_only"] = True
    result = run_scenario(Scenario.model_validate(tiny))
    weak = [c for c in result.algorithm.ctx.clients if c.group == "weak"]
    assert len({id(c.model) for c in weak}) == 1 and all(c.optimizer is None for c in weak)


def test_timing_only_is_refused_where_the_timeline_needs_training(tiny):
    tiny["algorithm"] = {"name": "fedsga"}
    tiny["training"]["timing_only"] = True
    with pytest.raises(ConfigError, match=r"training\.timing_only .*'fedsga'.*valid: "
                                          r"hetero_splitee_sequential"):
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
    tiny["algorithm"] = {"name": "fedavg"}
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    refused = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "f"), "--no-train"])
    assert refused.exit_code == USER_ERROR and "timing_only" in refused.output
