"""Seeds as a sweep axis: expansion, sweep.csv's seed and config columns, mean ± std over
seeds in ``sflsim compare`` (and its CSV, Markdown and LaTeX tables), the shared statistics."""

from __future__ import annotations

import copy
import math
import shutil
from io import StringIO

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.errors import ConfigError
from sflsim.metrics import stats
from sflsim.metrics.compare import aggregate_runs, aggregate_seeds, compare_runs, read_sweep
from sflsim.metrics.paper_table import display_table, latex, markdown
from sflsim.sweep import load_sweep, read_table, run_sweep
from sflsim.sweep.spec import parse_seeds
from tests.conftest import TINY


@pytest.fixture
def write_sweep(tmp_path):
    """The tiny scenario, timing-only, as ``base.yaml`` and a sweep file over it."""
    base = copy.deepcopy(TINY)
    base["training"]["timing_only"] = True
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))

    def write(**spec) -> object:
        path = tmp_path / "sw.yaml"
        path.write_text(yaml.safe_dump({"base": "base.yaml", **spec}, sort_keys=False))
        return path

    return write


@pytest.mark.parametrize("mode", ["product", "zip"])
def test_seeds_cross_every_configuration_seed_fastest(write_sweep, mode):
    sweep = load_sweep(write_sweep(mode=mode, axes={"training.batch_size": [8, 16]},
                                   seeds=[0, 1, 2]))
    assert [(p.config_id, p.scenario.training.batch_size, p.scenario.seed)
            for p in sweep.points] == [("c000", 8, 0), ("c000", 8, 1), ("c000", 8, 2),
                                       ("c001", 16, 0), ("c001", 16, 1), ("c001", 16, 2)]
    assert [p.point_id for p in sweep.points] == [f"p00{i}" for i in range(6)]
    # the command line's seeds replace the file's; seeds alone (no axes) repeat the base
    assert [p.scenario.seed for p in load_sweep(write_sweep(seeds=[0]), seeds=[4, 5]).points] \
        == [4, 5]


@pytest.mark.parametrize(("spec", "expected"), [
    ({"axes": {"seed": [1, 2]}, "seeds": [0, 1]}, "seeds [0, 1] and the axis 'seed'"),
    ({"set": {"seed": 3}, "seeds": [0, 1]}, "seeds [0, 1] and set 'seed' both set the seed"),
    ({"seeds": [0, 1, 0]}, "seed 0 is given twice"),
    ({"seeds": []}, "seeds: an empty list"),
    ({"seeds": 3}, "seeds: a single number; give the seeds as a list, [0, 1, 2], or a range, "
                   "'0-2' (as --seeds takes them) (got 3)"),
    ({"seeds": "0-x"}, "seeds: '0-x' is not a seed or a range; valid: a range 0-4"),
], ids=["seed axis", "seed set", "repeated", "empty", "one number", "bad range"])
def test_seeds_that_clash_are_refused_in_one_line(write_sweep, spec, expected):
    with pytest.raises(ConfigError) as info:
        load_sweep(write_sweep(**spec))
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_sweep_file_takes_seeds_as_the_command_line_does(write_sweep):
    assert [p.scenario.seed for p in load_sweep(write_sweep(seeds="0-1,5")).points] == [0, 1, 5]


def test_parse_seeds():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds("0-1, 7") == [0, 1, 7]
    for bad in ("a", "3-1", "-1", "1-", "0,0"):
        with pytest.raises(ConfigError, match=r"^--seeds "):
            parse_seeds(bad)


def test_statistics_match_numpy_and_scipy():
    values = [0.61, 0.58, 0.66, None, math.nan]
    sample = stats.describe(values)
    kept = np.array([0.61, 0.58, 0.66])
    half = scipy_stats.t.ppf(0.975, 2) * kept.std(ddof=1) / math.sqrt(3)
    assert (sample.n, sample.mean, sample.std) == (3, pytest.approx(kept.mean()),
                                                   pytest.approx(kept.std(ddof=1)))
    low, high = scipy_stats.t.interval(0.95, 2, loc=kept.mean(), scale=scipy_stats.sem(kept))
    assert (sample.low, sample.high) == (pytest.approx(low), pytest.approx(high))
    assert sample.half_width == pytest.approx(half)
    one = stats.describe([0.5])
    assert one.mean == 0.5 and math.isnan(one.std) and math.isnan(one.half_width)
    assert stats.paired_half_width([1.0, 2.0, 4.0]) == pytest.approx(
        scipy_stats.t.ppf(0.975, 2) * np.std([1.0, 2.0, 4.0], ddof=1) / math.sqrt(3))
    with pytest.raises(ValueError, match="at least 2"):
        stats.paired_half_width([1.0])


def test_aggregated_statistics_carry_no_float_noise():
    table = pd.DataFrame({"config": ["a", "a", "b"], "accuracy_pct": [10.83333333, 10.83333334, 7.0]})
    out = stats.aggregate(table, ["config"], ["accuracy_pct"])
    assert stats.describe([10.83333333, 10.83333334]).mean == 10.833333334999999  # the noise
    assert out["accuracy_pct_mean"].tolist() == [10.833333335, 7.0]
    assert "10.833333335," in out.to_csv(index=False)
    assert math.isnan(out["accuracy_pct_std"].iloc[1]) and out["accuracy_pct_n"].tolist() == [2, 1]


def test_three_seed_sweep_has_seed_and_config_columns_and_compare_aggregates(write_sweep,
                                                                             tmp_path):
    out = tmp_path / "out"
    sweep = load_sweep(write_sweep(axes={"training.batch_size": [8, 16]}), seeds=[0, 1, 2])
    run_sweep(sweep, out)
    written = pd.read_csv(out / "sweep.csv")
    assert list(written.columns[4:8]) == ["config", "training.batch_size", "seed", "algorithm"]
    assert written["seed"].tolist() == [0, 1, 2] * 2
    assert written["config"].tolist() == ["c000"] * 3 + ["c001"] * 3
    assert (written["status"] == "completed").all()

    # the sweep table by configuration (for plots): wall time differs by seed
    by_config = aggregate_seeds(read_table(out))
    assert by_config["config"].tolist() == ["c000", "c001"]
    assert by_config["training.batch_size"].tolist() == [8, 16]
    assert "seed" not in by_config.columns and by_config["n"].tolist() == [3, 3]
    assert aggregate_seeds(read_sweep(out))["config"].tolist() == ["c000", "c001"]
    walls = written.loc[written.config == "c001", "wall_time_s"].to_numpy()
    row = by_config.iloc[1]
    assert row["wall_time_s_mean"] == pytest.approx(walls.mean())
    assert row["wall_time_s_std"] == pytest.approx(walls.std(ddof=1))
    low, high = scipy_stats.t.interval(0.95, 2, loc=walls.mean(), scale=scipy_stats.sem(walls))
    assert (row["wall_time_s_ci95_low"], row["wall_time_s_ci95_high"]) == (
        pytest.approx(low), pytest.approx(high))

    runs = compare_runs([out])
    assert runs["seed"].tolist() == [0, 1, 2] * 2
    assert runs["config"].tolist() == ["training.batch_size=8"] * 3 + [
        "training.batch_size=16"] * 3
    table = aggregate_runs(runs)
    assert table["n"].tolist() == [3, 3] and table["seeds"].tolist() == ["0,1,2"] * 2
    sims = runs.loc[runs.config == "training.batch_size=16", "sim_time_s"]
    assert table["sim_time_s_mean"].iloc[1] == pytest.approx(sims.mean())
    assert table["sim_time_s_n"].iloc[1] == 3
    assert table["time_to_target_s_n"].iloc[1] == 0  # timing-only: no accuracy, no target
    # the same sweep again in another folder of the same name: two sets, never pooled
    again = tmp_path / "copy" / "out"
    shutil.copytree(out, again)
    both = aggregate_runs(compare_runs([out, again]))
    assert both["n"].tolist() == [3] * 4 and both["seeds"].tolist() == ["0,1,2"] * 4
    assert both["config"].tolist() == [f"{s}: training.batch_size={b}" for s in
                                       (f"{tmp_path.name}/out", "copy/out")
                                       for b in (8, 16)]

    result = CliRunner().invoke(app, ["compare", str(out), "--format", "markdown",
                                      "-o", str(tmp_path / "t.md")])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "t.md").read_text().splitlines()
    assert lines[0].startswith("| configuration | algorithm | seeds |")
    assert "sim. time (s)" in lines[0] and "client energy (J)" in lines[0]
    assert set(lines[1].replace("|", "").split()) <= {":---", "---:"}
    assert len(lines) == 4 and all(line.count("|") == lines[0].count("|") for line in lines)
    assert " ± " in lines[2] and "| 3 |" in lines[2]

    result = CliRunner().invoke(app, ["compare", str(out), "--format", "latex"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.lstrip().startswith(r"\begin{tabular}") and r"\end{tabular}" in text
    assert r"$\pm$" in text and r"\toprule" in text and r"\bottomrule" in text
    assert r"training.batch\_size=8" in text and r"accuracy (\%)" in text

    result = CliRunner().invoke(app, ["compare", str(out), "--format", "csv"])
    assert result.exit_code == 0, result.output
    csv = pd.read_csv(StringIO(result.stdout))
    assert csv["n"].tolist() == [3, 3] and "sim_time_s_ci95_high" in csv.columns

    result = CliRunner().invoke(app, ["compare", str(out), "--each-run", "--format", "csv"])
    assert len(pd.read_csv(StringIO(result.stdout))) == 6


def test_a_name_axis_that_names_each_seeds_run_does_not_split_the_configuration(write_sweep,
                                                                                tmp_path):
    """A zipped sweep naming every run (``b8.s0``, ``b8.s1``): its seeds are one
    configuration; a name that tells two runs of one seed apart stays in it."""
    out = tmp_path / "out"
    run_sweep(load_sweep(write_sweep(mode="zip", axes={
        "name": ["b8.s0", "b8.s1", "b16.s0", "b16.s1"], "seed": [0, 1, 0, 1],
        "training.batch_size": [8, 8, 16, 16]})), out)
    runs = compare_runs([out])
    assert runs["config"].tolist() == ["training.batch_size=8"] * 2 + [
        "training.batch_size=16"] * 2
    assert aggregate_runs(runs)["n"].tolist() == [2, 2]
    by_config = aggregate_seeds(read_table(out))
    assert by_config["n"].tolist() == [2, 2] and "name" not in by_config.columns
    table = read_sweep(out)
    table["training.batch_size"] = 8  # now name alone tells b8.s0 from b16.s0
    assert aggregate_seeds(table)["n"].tolist() == [1, 1, 1, 1]


def test_aggregated_cells_read_mean_plus_minus_std_and_a_target_some_seeds_missed():
    runs = pd.DataFrame({
        "run": ["a", "b", "c", "d"], "name": "x", "algorithm": "fedavg", "status": "completed",
        "rounds": 5, "final_accuracy_pct": [70.0, 72.0, 74.0, 50.0],
        "target_accuracy_pct": 70.0, "time_to_target_s": [10.0, 14.0, math.nan, math.nan],
        "sim_time_s": [100.0, 110.0, 120.0, 90.0], "bytes_mb": 1.5, "client_gflop": 2.0,
        "server_gflop": 3.0, "client_energy_j": 0.25, "seed": pd.array([0, 1, 2, 0], "Int64"),
        "config": ["lr=0.1", "lr=0.1", "lr=0.1", "lr=1"]})
    table = aggregate_runs(runs)
    assert table["n"].tolist() == [3, 1] and table["seeds"].tolist() == ["0,1,2", "0"]
    shown = display_table(table, 0.7)
    assert shown["accuracy (%)"].tolist() == ["72.00 ± 2.00", "50.00"]
    assert shown["time to 70% (s)"].tolist() == ["12.00 ± 2.83 (2 of 3)", "never"]
    assert shown["sim. time (s)"].tolist() == ["110 ± 10", "90.00"]
    assert "$\\pm$" in latex(shown) and markdown(shown).count("\n") == 4


def test_check_of_a_seeded_sweep_holds_sweep_csv_to_its_sweep_yaml(write_sweep, tmp_path,
                                                                    monkeypatch):
    """An axis column or config deleted from sweep.csv, or a point moved to another
    configuration: each fails ``sflsim check`` in one line naming it."""
    monkeypatch.delenv("SFLSIM_CHECK_RESULTS", raising=False)
    out = tmp_path / "out"
    run_sweep(load_sweep(write_sweep(axes={"training.batch_size": [8, 16]}), seeds=[0, 1]), out)
    runner = CliRunner()
    assert runner.invoke(app, ["check", str(out)]).exit_code == 0
    table = pd.read_csv(out / "sweep.csv")
    for damage, told in (
            (table.drop(columns="training.batch_size"),
             "sweep.csv: no column training.batch_size, though sweep.yaml sweeps it"),
            (table.drop(columns="config"), "sweep.csv: no column config, though sweep.yaml"),
            (table.assign(config=["c000", "c001", "c001", "c001"]),
             "sweep.csv: config c001 has points (p001, p002, p003) with other "
             "training.batch_size; with seed 1 twice")):
        damage.to_csv(out / "sweep.csv", index=False)
        result = runner.invoke(app, ["check", str(out)])
        assert result.exit_code == 1 and result.output.startswith(told), result.output
