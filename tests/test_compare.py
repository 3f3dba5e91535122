"""The comparison table: hand-checked time-to-accuracy, "never reached", sweeps, the CLI."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.errors import SflsimError
from sflsim.metrics.compare import (
    COMPARE_COLUMNS,
    _short,
    axis_value_labels,
    compare_runs,
    short_axis_names,
    short_names,
    time_to_accuracy,
)
from tests.test_plots import write_run, write_sweep


@pytest.fixture
def two_runs(tmp_path):
    # fast: rounds end at 10, 20, 30 s with accuracy 0.5, 0.72, 0.8 -> reaches 0.7 at 20 s
    # slow: rounds end at 8, 16, 24 s with accuracy 0.4, 0.6, 0.65 -> never reaches 0.7
    return (write_run(tmp_path / "fast", "fedavg", (0.5, 0.72, 0.8), 10.0),
            write_run(tmp_path / "slow", "splitfed_v1", (0.4, 0.6, 0.65), 8.0))


def test_time_to_accuracy_by_hand():
    rounds = pd.DataFrame({"sim_time_s": [5.0, 9.0, 14.0, 20.0],
                           "server_accuracy": [0.3, float("nan"), 0.71, 0.69]})
    assert time_to_accuracy(rounds, 0.7) == 14.0
    assert time_to_accuracy(rounds, 0.3) == 5.0
    assert math.isnan(time_to_accuracy(rounds, 0.9))
    assert math.isnan(time_to_accuracy(rounds.drop(columns="server_accuracy"), 0.5))


def test_compare_two_runs(two_runs):
    table = compare_runs(list(two_runs), target=0.7)
    assert list(table.columns) == list(COMPARE_COLUMNS)
    fast, slow = table.iloc[0], table.iloc[1]
    assert (fast["run"], fast["algorithm"], slow["algorithm"]) == ("fast", "fedavg", "splitfed_v1")
    assert fast["time_to_target_s"] == 20.0
    assert fast["rounds"] == 3  # round 0 in rounds.csv, the untrained model, is not a round
    assert math.isnan(slow["time_to_target_s"])
    assert fast["final_accuracy_pct"] == pytest.approx(80.0)
    assert fast["sim_time_s"] == 30.0 and slow["sim_time_s"] == 24.0
    assert fast["bytes_mb"] == pytest.approx(4.5)  # 3 rounds x (1 MB up + 0.5 MB down)
    assert fast["client_gflop"] == pytest.approx(6.0) and fast["server_gflop"] == pytest.approx(12.0)
    assert fast["client_energy_j"] == pytest.approx(36.0)
    assert compare_runs(list(two_runs), target=0.6)["time_to_target_s"].tolist() == [20.0, 16.0]


def test_compare_expands_sweeps_and_rejects_bad_input(tmp_path, two_runs):
    table = compare_runs([write_sweep(tmp_path / "sweep")])
    assert len(table) == 2  # the failed point is left out
    assert table["run"].tolist() == ["p000 (server.slots=1)", "p001 (server.slots=2)"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(SflsimError, match="is not an sflsim results directory"):
        compare_runs([two_runs[0], tmp_path / "empty"])
    with pytest.raises(SflsimError, match=r"fraction in \(0, 1\]"):
        compare_runs(list(two_runs), target=70)


def test_compare_says_which_points_of_a_sweep_it_leaves_out(tmp_path):
    sweep = write_sweep(tmp_path / "sweep")  # two completed points and a failed one
    result = CliRunner().invoke(app, ["compare", str(sweep)])
    assert result.exit_code == 0, result.output
    assert (f"note: sweep {sweep}: the table has its 2 completed points; left out: 1 failed"
            in " ".join(result.output.split())), result.output


def test_sweep_labels():
    # the field stays in the name: "pi4_wifi=1" would read as a count of devices
    assert short_axis_names(["devices.pi4_wifi.count", "devices.orin_wifi.count"]) == [
        "pi4_wifi.count", "orin_wifi.count"]
    assert short_axis_names(["devices.pi4_wifi.end_layer", "devices.orin_wifi.end_layer"]) == [
        "pi4_wifi.end_layer", "orin_wifi.end_layer"]
    assert short_axis_names(["algorithm_config", "dataset.partition.alpha", "server.slots"]) == [
        "algorithm", "partition.alpha", "server.slots"]
    assert short_axis_names(["algorithm.name"]) == ["algorithm"]
    assert _short('{"name": "multisfl", "split": {"name": "resource", "round_budget_s": 5}}') == (
        "multisfl(split=resource(round_budget_s=5))")
    assert (_short(4.0), _short(0.5), _short("iid")) == ("4", "0.5", "iid")


def test_a_mapping_axis_is_labelled_by_what_tells_its_values_apart():
    """A whole device mix as an axis: only the entries that change from point to point
    (here each group's end layer); an algorithm's name is always kept."""
    import json

    def mix(layer: int) -> str:  # as sweep.csv holds a mapping: JSON
        return json.dumps({"pi4": {"profile": "rpi4", "count": 4, "end_layer": layer},
                           "nano": {"profile": "jetson_nano", "count": 4, "end_layer": layer,
                                    "link_override": {"uplink_bps": "5 Mbps"}}})

    assert axis_value_labels(pd.Series([mix(3), mix(4)])).tolist() == [
        "(pi4=(end_layer=3),nano=(end_layer=3))", "(pi4=(end_layer=4),nano=(end_layer=4))"]
    algorithms = pd.Series(["fedavg", '{"name": "multisfl", "split": {"name": "resource"}}',
                            '{"name": "multisfl", "split": {"name": "static"}}'])
    assert axis_value_labels(algorithms).tolist() == [
        "fedavg", "multisfl(split=resource)", "multisfl(split=static)"]
    same_settings = pd.Series([{"name": "fedprox", "mu": 0.01}, {"name": "scaffold", "mu": 0.01}])
    assert axis_value_labels(same_settings).tolist() == ["fedprox", "scaffold"]
    assert axis_value_labels(pd.Series([4.0, 0.5, "iid"])).tolist() == ["4", "0.5", "iid"]
    assert axis_value_labels(pd.Series([mix(3)] * 2)).tolist() == [_short(mix(3))] * 2


def test_short_names(tmp_path):
    assert short_names([tmp_path / "a" / "p0", tmp_path / "b" / "p0", tmp_path / "c"]) == [
        "a/p0", "b/p0", "c"]
    # the points of two sweeps, one point only in the second: named alike
    points = [tmp_path / s / "points" / p for s, p in (("my", "p000"), ("my", "p003"),
                                                        ("dm", "p003"), ("dm", "p004"))]
    assert short_names(points) == ["my/points/p000", "my/points/p003", "dm/points/p003",
                                   "dm/points/p004"]


def test_cli_compare(two_runs, tmp_path):
    out = tmp_path / "tables" / "compare.csv"
    result = CliRunner().invoke(app, ["compare", *map(str, two_runs), "-o", str(out),
                                      "--target", "0.7"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "never" in result.output and "70% (s)" in result.output
    written = pd.read_csv(out)
    assert written["time_to_target_s"].iloc[0] == 20.0 and pd.isna(written["time_to_target_s"].iloc[1])


def test_a_run_that_never_reached_the_target_reads_never_in_every_format(two_runs):
    for fmt in ("markdown", "latex"):
        result = CliRunner().invoke(app, ["compare", *map(str, two_runs), "--target", "0.7",
                                          "--format", fmt])
        assert result.exit_code == 0, result.output
        slow = next(line for line in result.output.splitlines() if "slow" in line)
        assert "never" in slow and " - " not in slow, slow


def test_a_run_that_says_running_reads_stopped_once_no_process_writes_it(two_runs):
    import json

    from sflsim.metrics.lock import hold_folder

    run = two_runs[0]
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    with hold_folder(run):  # as the run writing it does
        assert compare_runs([run])["status"].tolist() == ["running"]
    assert compare_runs([run])["status"].tolist() == ["stopped"]  # killed before it ended


def test_cli_compare_bad_dir(tmp_path):
    result = CliRunner().invoke(app, ["compare", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not an sflsim results directory" in result.output


def test_a_bad_output_path_is_refused_before_the_table_and_names_no_temporary_file(tmp_path,
                                                                                 two_runs):
    (tmp_path / "f").write_text("x")
    for output, said in ((tmp_path, f"-o {tmp_path} is a folder; give a file name, e.g. "
                                    f"{tmp_path / 'compare.csv'}"),
                         (tmp_path / "f" / "c.csv", f"-o {tmp_path / 'f' / 'c.csv'} cannot be "
                                                    f"made: {tmp_path / 'f'} is a file")):
        result = CliRunner().invoke(app, ["compare", str(two_runs[0]), "-o", str(output)])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
        assert "final" not in result.output  # refused before the table is printed


def test_compare_never_writes_over_a_file_of_the_runs_or_sweeps_it_reads(tmp_path, two_runs):
    run = two_runs[0]
    sweep = tmp_path / "sweep"
    (sweep / "points").mkdir(parents=True)
    (sweep / "sweep.csv").write_text("point,status,run_dir\n")
    for target, folder in ((run / "rounds.csv", run), (run / "summary.json", run),
                           (run / "scenario.yaml", run), (run / "profiles" / "x.csv", run),
                           (sweep / "sweep.csv", sweep), (sweep / "points" / "c.csv", sweep)):
        before = target.read_bytes() if target.exists() else None
        result = CliRunner().invoke(app, ["compare", str(run), "-o", str(target)])
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and f"belongs to the {'sweep' if folder == sweep else 'run'}" \
            in said and f"in {folder}" in said, result.output
        assert (target.read_bytes() if target.exists() else None) == before
    beside = CliRunner().invoke(app, ["compare", str(run), "-o", str(run / "compare.csv")])
    assert beside.exit_code == 0 and (run / "compare.csv").is_file(), beside.output


def test_a_failed_write_names_the_file_asked_for(tmp_path, monkeypatch):
    from sflsim.metrics import results, writing

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr(writing.os, "replace", refuse)
    with pytest.raises(PermissionError) as err:
        results.write_text(tmp_path / "a.csv", "x")
    assert err.value.filename == str(tmp_path / "a.csv")
    assert not list(tmp_path.iterdir())  # no temporary file left behind


@pytest.mark.parametrize("damage, told", [(b"", "sweep.csv is empty"),
                                          (b"\xff\xfe\x00p", "sweep.csv is not a text table"),
                                          (b'point,status,run_dir\n"p000,completed\n',
                                           "sweep.csv cannot be read as a table")],
                         ids=["empty", "binary", "cut"])
@pytest.mark.parametrize("command", [["compare"], ["plot", "sweep"]])
def test_a_damaged_sweep_csv_is_one_line_naming_it(tmp_path, command, damage, told):
    sweep = write_sweep(tmp_path / "sweep")
    (sweep / "sweep.csv").write_bytes(damage)
    out = ["--y", "final_server_accuracy", "-o", str(tmp_path / "p.png")] \
        if command[0] == "plot" else []
    result = CliRunner().invoke(app, [*command, str(sweep), *out])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and told in lines[0] and "sflsim sweep" in lines[0], result.output
