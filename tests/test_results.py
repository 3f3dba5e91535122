"""Result files read back as written: names that pandas would take for missing values
(``NA``, ``null``, ``None``, ...) survive every reader (plots, compare, sweeps, analysis)."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sflsim.metrics import records
from sflsim.metrics.compare import compare_runs, read_sweep
from sflsim.metrics.results import read_result, read_result_csv
from sflsim.plots.inputs import client_groups
from sflsim.plots.splits import splits_figure
from sflsim.plots.timeline import timeline_figure
from sflsim.plots.tradeoff import tradeoff_figure
from sflsim.plots.tta import tta_figure
from sflsim.sweep import load_sweep, read_table, run_sweep
from tests.conftest import TINY

#: Strings pandas reads as missing by default (pandas.read_csv's ``na_values``), and names
#: that pandas would read as numbers.
NA_STRINGS = ("NA", "N/A", "n/a", "null", "NULL", "None", "nan", "NaN", "-nan", "#N/A",
              "<NA>", "1.#IND", "-1.#QNAN")
NUMBER_LIKE = ("007", "1e3", "inf")

#: The device groups of the run: the tiny scenario's three groups, renamed.
GROUPS = ("NA", "null", "None")


def test_reader_keeps_every_name_and_only_empty_cells_are_missing(tmp_path):
    names = [*NA_STRINGS, *NUMBER_LIKE]
    path = tmp_path / "clients.csv"
    pd.DataFrame({"client_id": range(len(names)), "group": names,
                  "client_accuracy": [0.5, None] * (len(names) // 2) + [0.5] * (len(names) % 2)}
                 ).to_csv(path, index=False)
    table = read_result_csv(path)
    assert table["group"].tolist() == names
    assert table["client_accuracy"].isna().tolist() == [i % 2 == 1 for i in range(len(names))]
    assert table["client_accuracy"].dtype == float
    assert pd.read_csv(path)["group"].tolist() != names  # what pandas' defaults would do


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """A sweep of two tiny runs named ``NA`` and ``null``, whose device groups are
    :data:`GROUPS`."""
    root = tmp_path_factory.mktemp("names")
    base = {**TINY, "devices": dict(zip(GROUPS, TINY["devices"].values()))}
    (root / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (root / "sweep.yaml").write_text(yaml.safe_dump({"base": "base.yaml",
                                                     "axes": {"name": ["NA", "null"]}}))
    result = run_sweep(load_sweep(root / "sweep.yaml"), root / "out")
    assert list(result.table["status"]) == ["completed", "completed"], result.table["error"]
    return root / "out"


def _labels(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels()]


def test_group_names_round_trip_through_result_readers(sweep_dir):
    run = sweep_dir / "points" / "p000"
    clients = read_result_csv(run / "clients.csv")
    assert clients["group"].tolist() == list(GROUPS)  # one round, a client per group
    assert client_groups(run) == dict(enumerate(GROUPS))
    assert read_result_csv(run / "events.csv")["actor"].notna().all()
    assert read_result(run)[1]["note"].iloc[0] == "untrained model"


def test_sweep_values_round_trip_through_sweep_and_compare_readers(sweep_dir):
    assert read_table(sweep_dir)["name"].tolist() == ["NA", "null"]
    assert read_sweep(sweep_dir)["label"].tolist() == ["name=NA", "name=null"]
    table = compare_runs([sweep_dir])
    assert table["name"].tolist() == ["NA", "null"]
    assert [r.split(" (")[1] for r in table["run"]] == ["name=NA)", "name=null)"]


def test_plots_label_rows_and_runs_with_their_names(sweep_dir):
    run = sweep_dir / "points" / "p000"
    expected = [f"C{i} {g}" for i, g in enumerate(GROUPS)]
    splits = splits_figure(run)
    timeline = timeline_figure(run)
    for fig in (splits, timeline):
        FigureCanvasAgg(fig).draw()
    assert _labels(splits.axes[0].yaxis) == expected
    assert _labels(timeline.axes[0].yaxis) == [*expected, "Server"]
    tta = tta_figure([sweep_dir])
    legend = tta.axes[0].get_legend() or tta.legends[0]
    # sweep points named by what varies, as compare names them: the names survive as text
    assert [t.get_text() for t in legend.get_texts()] == ["p000 (name=NA)", "p001 (name=null)"]
    tradeoff = tradeoff_figure([sweep_dir])
    legend = tradeoff.axes[0].get_legend() or tradeoff.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["Pareto front", "p000 (name=NA)",
                                                          "p001 (name=null)"]


def test_analysis_scripts_keep_the_names(sweep_dir, reproduce):  # reproduce: analysis/ on sys.path
    module = importlib.import_module("reproduce_fedsga_vs_multisfl")
    row = module.run_row(sweep_dir / "points" / "p000")
    assert [part.rsplit(" ", 1)[0] for part in row["mean_cut_by_group"].split(", ")] == sorted(GROUPS)
    assert row["rounds"] == 1
    rows, _ = module.sweep_rows(sweep_dir)
    assert [r["status"] for r in rows] == ["completed", "completed"]


# ----------------------------------------------------------- what the files hold, exactly

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_columns(table: str, layers: list[int]) -> list[str]:
    """The columns the README's "Results" table lists for ``table`` (its first backquoted
    list with a comma), ``<k>`` expanded per end layer: ``a_l<k>, b_l<k>`` -> ``a_l3, b_l3, ...``."""
    line = next(line for line in README.read_text().splitlines()
                if line.startswith(f"| `{table}` |"))
    listed = next(span for span in re.findall(r"`([^`]*)`", line) if "," in span)
    names = [n.strip() for n in listed.split(",")]
    fixed = [n for n in names if "<k>" not in n]
    per_layer = [n for n in names if "<k>" in n]
    return fixed + [n.replace("<k>", str(k)) for k in layers for n in per_layer]


@pytest.mark.parametrize("table", ["rounds.csv", "clients.csv", "events.csv", "early_exit.csv"])
def test_readme_lists_the_columns_each_table_has(tiny_run, table):
    written = list(read_result_csv(tiny_run / table, nrows=1).columns)
    layers = sorted(g["end_layer"] for g in TINY["devices"].values())
    assert readme_columns(table, layers) == written


def test_fractions_are_written_without_float_noise(tiny_run):
    """Means of accuracies, and exit ratios, are written as 0.7775, not 0.7775000000000001."""
    assert records.fraction(sum([0.8, 0.755]) / 2) == 0.7775
    assert repr(records.percent(0.57)) == "57.0"  # 100 * 0.57 is 56.99999999999999
    row = records.round_row(1, [], [], 0.0, 1.0, 1.0, {0: (0.8, 0.1), 1: (0.755, 0.2)},
                            {0: 3, 1: 3})
    assert repr(row["server_accuracy"]) == "0.7775" and repr(row["server_accuracy_l3"]) == "0.7775"
    columns = {"rounds.csv": r"accuracy", "clients.csv": r"accuracy$",
               "early_exit.csv": r"^(accuracy|exit_ratio)$"}
    for table, pattern in columns.items():
        frame = read_result_csv(tiny_run / table)
        shown = frame.filter(regex=pattern).stack().tolist()
        assert shown, table
        noisy = [x for x in shown if x != round(x, records.FRACTION_DECIMALS)]
        assert not noisy, (table, noisy[:3])
    summary, _ = read_result(tiny_run)
    final = [summary["final_server_accuracy"], summary["final_client_accuracy"],
             *summary["final_accuracy_by_end_layer"].values()]
    assert all(x == round(x, records.FRACTION_DECIMALS) for x in final)
