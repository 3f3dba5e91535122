"""The public Python API: the names of ``sflsim`` (docs/reference/python-api.md), a fast
``import sflsim`` (torch loads with the first name that needs it), and a clear error for
an argument of the wrong kind."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sflsim
from sflsim import load_scenario

PUBLIC = {"load_scenario", "validate_scenario", "Scenario", "run_scenario", "RunResult",
          "Algorithm", "register_algorithm", "AlgorithmConfig", "register_algorithm_config",
          "SflsimError", "ConfigError", "DatasetError", "DatasetNotFoundError"}


def test_the_public_names_are_the_documented_ones():
    assert set(sflsim.__all__) == PUBLIC
    page = (__import__("pathlib").Path(__file__).parents[1] / "docs" / "reference"
            / "python-api.md").read_text()
    for name in PUBLIC:
        assert getattr(sflsim, name) is not None
        assert f"`{name}" in page, name


def test_import_sflsim_loads_no_torch_until_asked():
    code = ("import sys, sflsim; assert 'torch' not in sys.modules; "
            "from sflsim import RunResult; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_overrides_as_one_string_or_none():
    assert load_scenario("quickstart", "training.rounds=2").training.rounds == 2
    assert load_scenario("quickstart", None) == load_scenario("quickstart")


@pytest.mark.parametrize("call, fragment", [
    (lambda: load_scenario(None), "path is a scenario file or a shipped scenario's name"),
    (lambda: load_scenario("quickstart", [3]), "overrides are 'FIELD=VALUE' strings"),
    (lambda: sflsim.run_scenario({"name": "x"}), "run_scenario takes a Scenario"),
])
def test_an_argument_of_the_wrong_kind_is_named(call, fragment):
    with pytest.raises(TypeError, match=fragment):
        call()


def test_a_sweep_point_without_results_says_to_run_the_sweep_again(tmp_path):
    from sflsim.metrics.reading import read_result

    (tmp_path / "s" / "points" / "p005").mkdir(parents=True)
    (tmp_path / "s" / "sweep.csv").write_text("point,status\np005,completed\n")
    with pytest.raises(sflsim.SflsimError, match=r"is a point of the sweep .* run the sweep "
                                                 r"again"):
        read_result(tmp_path / "s" / "points" / "p005")
