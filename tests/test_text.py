"""Counts printed with their nouns (``sflsim/text.py``): singular for exactly one."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.text import plural


@pytest.mark.parametrize(("n", "noun", "expected"), [
    (1, "round", "1 round"), (0, "round", "0 rounds"), (2, "round", "2 rounds"),
    (1.0, "point", "1.0 point"), (3, "training sample", "3 training samples"),
    (2, "batch", "2 batches"), (5, "local epoch", "5 local epochs"), (2, "branch", "2 branches"),
    (2, "entry", "2 entries"),
    (2, "day", "2 days"), (2, "CUDA GPU", "2 CUDA GPUs"), (1, "CUDA GPU", "1 CUDA GPU"),
])
def test_plural(n, noun, expected):
    assert plural(n, noun) == expected


def test_plural_with_a_format_and_an_irregular_plural():
    assert plural(12000, "image", spec=",") == "12,000 images"
    assert plural(2, "datum", "data") == "2 data" and plural(1, "datum", "data") == "1 datum"


def test_validate_says_1_client_and_1_round(tiny, tmp_path):
    tiny["devices"] = {"weak": tiny["devices"]["weak"]}
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith(": hetero_splitee_sequential, 1 client "
                                           "(1x rpi4@l3/wifi), 1 round")


def test_did_you_mean_by_spelling_or_by_a_part_of_the_name():
    from sflsim.text import did_you_mean

    choices = ["sim_time_s", "wall_time_s", "client_energy_j", "latency_s_mean"]
    assert did_you_mean("energy", choices) == "; did you mean 'client_energy_j'?"
    assert did_you_mean("sim_time", choices) == "; did you mean 'sim_time_s'?"
    assert did_you_mean("time", choices) == ""  # two hold it: no guess
    assert did_you_mean("zzz", choices) == ""
