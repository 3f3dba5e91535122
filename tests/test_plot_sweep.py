"""``sflsim plot sweep DIR --x AXIS --y METRIC``: a metric of a sweep's points against one
of its axes, one line per algorithm and combination of the other axes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.errors import SflsimError
from sflsim.plots import plot_sweep, seed_means, seeds_text, sweep_figure, sweep_points
from tests.conftest import TINY
from tests.test_plots import PNG_MAGIC, write_run

matplotlib.use("Agg")  # no display: figures render off screen

ALGORITHMS = ("hetero_splitee_sequential", "hetero_splitee_averaging")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A timing-only sweep of the tiny scenario: 2 algorithms x the weak device's end
    layer 1 or 3 (4 points, a few seconds)."""
    from sflsim.sweep import load_sweep, run_sweep

    root = tmp_path_factory.mktemp("plot_sweep")
    base = copy.deepcopy(TINY)
    base["training"] |= {"timing_only": True}
    (root / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (root / "sweep.yaml").write_text(yaml.safe_dump({
        "base": "base.yaml", "mode": "product",
        "axes": {"algorithm.name": list(ALGORITHMS), "devices.weak.end_layer": [1, 3]}}))
    result = run_sweep(load_sweep(root / "sweep.yaml"), root / "out")
    assert list(result.table["status"]) == ["completed"] * 4, result.table["error"]
    return root / "out"


def _lines(fig) -> dict[str, tuple[list[float], list[float]]]:
    """Legend label -> (x, y) of each labelled line of the figure's one axes."""
    ax = fig.axes[0]
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.get_lines() if not line.get_label().startswith("_")}


def test_a_metric_against_an_axis_one_line_per_algorithm(sweep, tmp_path):
    table = pd.read_csv(sweep / "sweep.csv")
    fig = sweep_figure(sweep, x="devices.weak.end_layer", y="client_energy_j")
    lines = _lines(fig)
    assert list(lines) == [f"algorithm={a}" for a in ALGORITHMS]  # field named, not a bare value
    for algorithm in ALGORITHMS:
        rows = table[table["algorithm.name"] == algorithm].sort_values("devices.weak.end_layer")
        xs, ys = lines[f"algorithm={algorithm}"]
        assert xs == [1.0, 3.0]
        assert ys == pytest.approx(rows["client_energy_j"].tolist())
    ax = fig.axes[0]
    assert ax.get_xlabel() == "end_layer"  # the last key: the only end_layer axis
    assert ax.get_ylabel() == "Client energy (J)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3"]  # the values swept
    # timing only: both algorithms take the same time, so their lines coincide; each keeps
    # its own dashes and marker, so the one below shows through
    seq, avg = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert seq.get_linestyle() != avg.get_linestyle() and seq.get_marker() != avg.get_marker()
    assert avg.get_markerfacecolor() == "none"
    # the short name and the dotted path draw the same figure
    again = _lines(sweep_figure(sweep, x="weak.end_layer", y="client_energy_j"))
    assert again == lines
    paths = plot_sweep(sweep, tmp_path / "energy.png", x="weak.end_layer", y="client_energy_j")
    assert paths == [tmp_path / "energy.png"] and paths[0].read_bytes()[:8] == PNG_MAGIC


def test_the_algorithm_as_x_leaves_one_line_per_other_axis(sweep):
    fig = sweep_figure(sweep, x="algorithm", y="sim_time_s")
    lines = _lines(fig)
    assert list(lines) == ["weak.end_layer=1", "weak.end_layer=3"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list(ALGORITHMS)
    assert fig.axes[0].get_xlabel() == "algorithm"


def test_cli_draws_and_names_the_valid_axes_and_metrics(sweep, tmp_path):
    out = tmp_path / "figs" / "time"
    result = CliRunner().invoke(app, ["plot", "sweep", str(sweep), "--x", "weak.end_layer",
                                      "--y", "sim_time_s", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.parent.iterdir()) == ["time.pdf", "time.png"]
    for args, said in (
            (["--x", "weak.endlayer"], "unknown --x 'weak.endlayer': not an axis of the sweep"),
            (["--x", "nope"], "valid: algorithm.name, devices.weak.end_layer"),
            (["--x", "algorithm", "--y", "energy"], "did you mean 'client_energy_j'"),
            (["--x", "algorithm", "--y", "energy"], "valid: final_server_accuracy, "
                                                    "final_client_accuracy, sim_time_s"),
            (["--y", "sim_time_s"], "give --x, the axis to draw against: the sweep"),
            (["--x", "algorithm"], "timing-only (--no-train)"),  # no accuracy to draw
    ):
        result = CliRunner().invoke(app, ["plot", "sweep", str(sweep), *args,
                                          "-o", str(tmp_path / "bad")])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), (args,
                                                                                  result.output)
    assert not list(tmp_path.glob("bad*"))
    point = sweep / "points" / "p000"
    result = CliRunner().invoke(app, ["plot", "sweep", str(point), "--x", "a"])
    assert result.exit_code == 2 and "not a sweep directory" in result.output
    result = CliRunner().invoke(app, ["plot", "tta", str(point), "--y", "sim_time_s"])
    assert result.exit_code == 2 and "--y applies to `sflsim plot sweep` only" in result.output
    result = CliRunner().invoke(app, ["plot", "sweep", str(sweep), str(sweep), "--x", "algorithm"])
    assert result.exit_code == 2 and "takes one sweep directory, got 2" in result.output


def _zipped_sweep(path: Path) -> Path:
    """A zip sweep over the Pi 4 and Orin counts of a fleet of 4 (the shipped device_mix's
    shape), with accuracies by end layer in the summaries; the last point failed."""
    rows = []
    for i, (pi4, orin) in enumerate([(0, 4), (2, 2), (4, 0)]):
        status = "failed" if i == 2 else "completed"
        run_dir = f"points/p{i:03d}"
        if status == "completed":
            run = write_run(path / run_dir, accuracies=(0.5, 0.6 + 0.1 * i))
            summary = json.loads((run / "summary.json").read_text())
            summary["final_accuracy_by_end_layer"] = {"server_accuracy_l3": 0.5 + 0.1 * i}
            (run / "summary.json").write_text(json.dumps(summary))
        rows.append({"point": f"p{i:03d}", "status": status, "error": "" if i < 2 else "boom",
                     "run_dir": run_dir, "devices.pi4_wifi.count": pi4,
                     "devices.orin_wifi.count": orin, "algorithm": "hetero_splitee_sequential",
                     "final_server_accuracy": 0.6 + 0.1 * i if i < 2 else None,
                     "sim_time_s": 20.0 + i})
    pd.DataFrame(rows).to_csv(path / "sweep.csv", index=False)
    return path


def test_zipped_axes_make_one_line_and_the_x_label_names_the_companion(tmp_path):
    sweep = _zipped_sweep(tmp_path / "mix")
    fig = sweep_figure(sweep, x="devices.pi4_wifi.count", y="final_server_accuracy")
    lines = _lines(fig)
    assert list(lines) == ["algorithm=hetero_splitee_sequential"]  # not a line per point
    xs, ys = lines["algorithm=hetero_splitee_sequential"]
    assert xs == [0.0, 2.0] and ys == pytest.approx([60.0, 70.0])  # in %, failed point left out
    assert fig.axes[0].get_ylabel() == "Final server accuracy (%)"
    # both axes end in "count": each is named with its group
    assert fig.axes[0].get_xlabel() == "pi4_wifi.count (with orin_wifi.count, zipped)"
    assert fig.axes[0].get_legend() is None and not fig.legends  # one line: no legend
    # a number of the points' summary.json, by its dotted path
    nested = "final_accuracy_by_end_layer.server_accuracy_l3"
    _, ys = _lines(sweep_figure(sweep, x="pi4_wifi.count", y=nested))[
        "algorithm=hetero_splitee_sequential"]
    assert ys == pytest.approx([50.0, 60.0])
    points = sweep_points(sweep, x="pi4_wifi.count", y="sim_time_s")
    assert points["drawn"].tolist() == [True, True, False]
    result = CliRunner().invoke(app, ["plot", "sweep", str(sweep), "--x", "pi4_wifi.count",
                                      "-o", str(tmp_path / "acc.png")])
    assert result.exit_code == 0, result.output
    assert "left out 1 of 3 points: p002 (failed)" in result.output
    with pytest.raises(SflsimError, match="valid: devices.pi4_wifi.count, devices.orin_wifi.count"):
        sweep_points(sweep, x="pi4_wifi", y="sim_time_s")  # the field is part of the name
    # zipped axes are one axis to draw against: --x may be left out
    assert sweep_points(sweep, y="sim_time_s").attrs["x_axis"] == "devices.pi4_wifi.count"


def test_a_categorical_axis_keeps_the_sweeps_order_and_other_axes_split_lines(tmp_path):
    path = tmp_path / "cat"
    rows = []
    for i, (scheme, slots) in enumerate([("iid", 1), ("dirichlet", 1), ("iid", 2),
                                         ("dirichlet", 2)]):
        write_run(path / f"points/p{i:03d}")
        rows.append({"point": f"p{i:03d}", "status": "completed", "error": "",
                     "run_dir": f"points/p{i:03d}", "dataset.partition.scheme": scheme,
                     "server.slots": slots, "algorithm": "fedavg", "sim_time_s": 10.0 * (i + 1)})
    pd.DataFrame(rows).to_csv(path / "sweep.csv", index=False)
    fig = sweep_figure(path, x="partition.scheme", y="sim_time_s")
    assert _lines(fig) == {"algorithm=fedavg, server.slots=1": ([0.0, 1.0], [10.0, 20.0]),
                           "algorithm=fedavg, server.slots=2": ([0.0, 1.0], [30.0, 40.0])}
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["iid", "dirichlet"]


def test_numbers_beside_null_ascend_and_null_comes_last(tmp_path):
    """A deadline axis [null, 2, 0.5] (null: no deadline) is drawn 0.5, 2, null: in the
    sweep's order, null first, the line would slope the wrong way."""
    path = tmp_path / "deadline"
    rows = []
    for i, deadline in enumerate(["null", "2", "0.5"]):
        write_run(path / f"points/p{i:03d}")
        rows.append({"point": f"p{i:03d}", "status": "completed", "error": "",
                     "run_dir": f"points/p{i:03d}", "conditions.round_deadline_s": deadline,
                     "algorithm": "fedavg", "sim_time_s": 10.0 * (i + 1)})
    pd.DataFrame(rows).to_csv(path / "sweep.csv", index=False)
    fig = sweep_figure(path, x="round_deadline_s", y="sim_time_s")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0.5", "2", "null"]
    assert _lines(fig) == {"algorithm=fedavg": ([0.0, 1.0, 2.0], [30.0, 20.0, 10.0])}


def _seeded_sweep(path: Path, missing_seed: bool = False) -> Path:
    """2 algorithms x count 1, 2 x seeds 0, 1, 2 (``config`` as ``sflsim sweep`` writes it);
    accuracy = base + 0.01 * seed."""
    rows = []
    for algorithm, base in (("fedavg", 0.5), ("splitfed_v1", 0.6)):
        for count in (1, 2):
            for seed in (0, 1, 2):
                i = len(rows)
                write_run(path / f"points/p{i:03d}")
                failed = missing_seed and (algorithm, count, seed) == ("fedavg", 2, 2)
                rows.append({"point": f"p{i:03d}", "status": "failed" if failed else "completed",
                             "error": "boom" if failed else "", "run_dir": f"points/p{i:03d}",
                             "config": f"c{len(rows) // 3}", "algorithm.name": algorithm,
                             "devices.pi4_wifi.count": count, "seed": seed,
                             "algorithm": algorithm,
                             "final_server_accuracy": base + 0.1 * count + 0.01 * seed})
    pd.DataFrame(rows).to_csv(path / "sweep.csv", index=False)
    return path


def test_seeds_are_drawn_as_their_mean_with_the_95_interval(tmp_path):
    from sflsim.metrics.stats import describe

    sweep = _seeded_sweep(tmp_path / "seeds", missing_seed=True)
    fig = sweep_figure(sweep, x="pi4_wifi.count")
    lines = _lines(fig)
    # one line per algorithm: the seed axis never splits lines
    assert list(lines) == ["algorithm=fedavg", "algorithm=splitfed_v1"]
    fedavg_2 = describe([0.7, 0.71])  # its seed 2 failed: the mean of the two that ran
    assert lines["algorithm=fedavg"][1] == pytest.approx([61.0, fedavg_2.mean * 100])
    assert lines["algorithm=splitfed_v1"][1] == pytest.approx([71.0, 81.0])
    bands = fig.axes[0].collections  # one band per line, the 95% t interval of the mean
    assert len(bands) == 2
    edges = bands[0].get_paths()[0].vertices[:, 1]  # fedavg's band, low and high edges
    assert min(edges) == pytest.approx((describe([0.6, 0.61, 0.62]).low) * 100)
    assert max(edges) == pytest.approx(fedavg_2.high * 100)
    points = sweep_points(sweep, x="pi4_wifi.count")
    assert seeds_text(points) == "each point: the mean of 2-3 seeds; band: 95% t interval of the mean"
    means = seed_means(points, "std")
    assert list(means["seeds"]) == ["0,1,2", "0,1", "0,1,2", "0,1,2"]
    assert means["high"].iloc[0] - means["y"].iloc[0] == pytest.approx(0.01)
    assert not sweep_figure(sweep, x="pi4_wifi.count", band="none").axes[0].collections
    # the seed axis aside, the sweep still has two axes of its own: --x is needed
    with pytest.raises(SflsimError, match="give --x.*2 axes: algorithm.name, "
                                          "devices.pi4_wifi.count"):
        sweep_points(sweep)
    # the seed as x draws each seed, one line per configuration
    by_seed = _lines(sweep_figure(sweep, x="seed"))
    assert len(by_seed) == 4 and all(xs == [0.0, 1.0, 2.0] or xs == [0.0, 1.0]
                                     for xs, _ in by_seed.values())


def test_a_name_axis_naming_each_seeds_run_does_not_split_lines(tmp_path):
    """A sweep that zips a ``name`` per run with ``seed`` (no ``config`` column): its
    seeds are one point, as in ``sflsim compare``."""
    sweep = _seeded_sweep(tmp_path / "named")
    table = pd.read_csv(sweep / "sweep.csv").drop(columns="config")
    table.insert(4, "name", [f"{a}-{c}.s{s}" for a, c, s in zip(
        table["algorithm"], table["devices.pi4_wifi.count"], table["seed"])])
    table.to_csv(sweep / "sweep.csv", index=False)
    lines = _lines(sweep_figure(sweep, x="pi4_wifi.count"))
    assert list(lines) == ["algorithm=fedavg", "algorithm=splitfed_v1"]
    assert lines["algorithm=fedavg"][1] == pytest.approx([61.0, 71.0])


def test_cli_band_option_prints_what_was_drawn_and_refuses_bad_values(tmp_path):
    sweep = _seeded_sweep(tmp_path / "seeds")
    runner = CliRunner()
    result = runner.invoke(app, ["plot", "sweep", str(sweep), "--x", "count", "--band", "std",
                                 "-o", str(tmp_path / "acc.png")])
    assert result.exit_code == 0, result.output
    assert "each point: the mean of 3 seeds; band: ± one sample std" in result.output
    bad = runner.invoke(app, ["plot", "sweep", str(sweep), "--x", "count", "--band", "sd",
                              "-o", str(tmp_path / "x.png")])
    assert bad.exit_code != 0 and "unknown --band 'sd'" in bad.output and "ci95" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "x.png").exists()
    other = runner.invoke(app, ["plot", "tta", str(sweep), "--band", "std"])
    assert other.exit_code != 0 and "--band applies to `sflsim plot sweep` only" in other.output
