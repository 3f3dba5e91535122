"""Result files read back as written: names that pandas would take for missing values
(``NA``, ``null``, ``None``, ...) survive every reader (plots, compare, sweeps, analysis),
from the Parquet tables and from the CSV tables of runs written before them."""

from __future__ import annotations

import importlib
import importlib.util
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sflsim.errors import SflsimError
from sflsim.metrics import records
from sflsim.metrics.compare import compare_runs, read_sweep
from sflsim.metrics.results import (
    RUN_TABLES,
    read_result,
    read_result_csv,
    read_run_table,
    run_table_columns,
    run_table_path,
)
from sflsim.plots.result_files import client_groups
from sflsim.plots.splits import splits_figure
from sflsim.plots.timeline import timeline_figure
from sflsim.plots.tradeoff import tradeoff_figure
from sflsim.plots.tta import tta_figure
from sflsim.sweep import load_sweep, read_table, run_sweep
from tests.conftest import TINY
from tests.table_files import FORMATS, as_format, copy_run, write_parquet

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


def test_a_table_with_rows_of_two_layouts_names_the_file(tmp_path):
    """Rows of another run appended under a header of fewer columns (a table written
    over by hand or by a copy) are one message naming the file, not a parser trace."""
    path = tmp_path / "rounds.csv"
    path.write_text("round,sim_time_s\n1,2.0\n2,4.0,0.5,7\n")
    with pytest.raises(SflsimError, match=r"rounds\.csv cannot be read as a table \(Expected 2 "
                                          r"fields in line 3, saw 4\).*run that run again"):
        read_result_csv(path)


@pytest.fixture(scope="module")
def csv_sweep_dir(tmp_path_factory) -> Path:
    """A sweep of two tiny runs named ``NA`` and ``null``, whose device groups are
    :data:`GROUPS`."""
    root = tmp_path_factory.mktemp("names")
    base = {**TINY, "devices": dict(zip(GROUPS, TINY["devices"].values()))}
    (root / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (root / "sweep.yaml").write_text(yaml.safe_dump({"base": "base.yaml",
                                                     "axes": {"name": ["NA", "null"]}}))
    result = run_sweep(load_sweep(root / "sweep.yaml"), root / "out")
    assert list(result.table["status"]) == ["completed", "completed"], result.table["error"]
    return as_format(root / "out", "csv")


@pytest.fixture(scope="module", params=FORMATS)
def sweep_dir(request, csv_sweep_dir, tmp_path_factory) -> Path:
    """:func:`csv_sweep_dir` with its points' tables in each format."""
    if request.param == "csv":
        return csv_sweep_dir
    copy = tmp_path_factory.mktemp("names_parquet") / "out"
    shutil.copytree(csv_sweep_dir, copy)
    return as_format(copy, "parquet")


def _labels(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels()]


def test_group_names_round_trip_through_result_readers(sweep_dir):
    run = sweep_dir / "points" / "p000"
    clients = read_run_table(run, "clients")
    assert clients["group"].tolist() == list(GROUPS)  # one round, a client per group
    assert read_run_table(run, "clients", ["group"])["group"].tolist() == list(GROUPS)
    assert client_groups(run) == dict(enumerate(GROUPS))
    assert read_run_table(run, "events")["actor"].notna().all()
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
    # sweep points named by what varies, as compare names them, and their algorithm: the
    # names survive as text
    points = ["p000 (name=NA, algorithm=hetero_splitee_sequential)",
              "p001 (name=null, algorithm=hetero_splitee_sequential)"]
    assert [t.get_text() for t in legend.get_texts()] == points
    tradeoff = tradeoff_figure([sweep_dir])
    legend = tradeoff.axes[0].get_legend() or tradeoff.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["Pareto front", *points]


def test_analysis_scripts_keep_the_names(sweep_dir, reproduce):  # reproduce: analysis/ on sys.path
    module = importlib.import_module("reproduction.fedsga_vs_multisfl")
    row = module.run_row(sweep_dir / "points" / "p000")
    assert [part.rsplit(" ", 1)[0] for part in row["mean_cut_by_group"].split(", ")] == sorted(GROUPS)
    assert row["rounds"] == 1
    rows, _ = module.sweep_rows(sweep_dir)
    assert [r["status"] for r in rows] == ["completed", "completed"]
    spent = module.time_breakdown(sweep_dir / "points" / "p000")  # from the event trace
    assert spent["round time"] > 0 and spent.drop("round time").gt(0).any()


# ----------------------------------------------------------- what the files hold, exactly
# (their columns: tests/test_result_columns.py)


def test_fractions_are_written_without_float_noise(tiny_run):
    """Means of accuracies, and exit ratios, are written as 0.7775, not 0.7775000000000001."""
    assert records.fraction(sum([0.8, 0.755]) / 2) == 0.7775
    assert repr(records.percent(0.57)) == "57.0"  # 100 * 0.57 is 56.99999999999999
    row = records.round_row(1, [], [], 0.0, 1.0, 1.0, {0: (0.8, 0.1), 1: (0.755, 0.2)},
                            {0: 3, 1: 3})
    assert repr(row["server_accuracy"]) == "0.7775" and repr(row["server_accuracy_l3"]) == "0.7775"
    columns = {"rounds.csv": r"accuracy", "clients": r"accuracy$",
               "early_exit.csv": r"^(accuracy|exit_ratio)$"}
    for table, pattern in columns.items():
        frame = (read_result_csv(tiny_run / table) if table.endswith(".csv")
                 else read_run_table(tiny_run, table))
        shown = frame.filter(regex=pattern).stack().tolist()
        assert shown, table
        noisy = [x for x in shown if x != round(x, records.FRACTION_DECIMALS)]
        assert not noisy, (table, noisy[:3])
    summary, _ = read_result(tiny_run)
    final = [summary["final_server_accuracy"], summary["final_client_accuracy"],
             *summary["final_accuracy_by_end_layer"].values()]
    assert all(x == round(x, records.FRACTION_DECIMALS) for x in final)


# ------------------------------------------- the events and clients tables, either format


@pytest.fixture(params=FORMATS)
def run_in(request, tiny_run, tmp_path) -> Path:
    """A copy of ``tiny_run`` with its ``events`` and ``clients`` tables in each format (the
    other format's files are gone)."""
    return copy_run(tiny_run, tmp_path / "run", request.param)


def test_run_tables_read_the_same_from_parquet_and_csv(tiny_run, tmp_path):
    parquet = copy_run(tiny_run, tmp_path / "run", "parquet")
    tiny_run = copy_run(tiny_run, tmp_path / "older", "csv")
    assert not (parquet / "events.csv").exists() and (parquet / "events.parquet").is_dir()
    for name in RUN_TABLES:
        from_csv, from_parquet = read_run_table(tiny_run, name), read_run_table(parquet, name)
        assert len(from_csv) > 0
        pd.testing.assert_frame_equal(from_parquet, from_csv, check_exact=True, obj=name)
        assert run_table_columns(parquet, name) == run_table_columns(tiny_run, name)
        assert run_table_path(parquet, name) == parquet / f"{name}.parquet"
        assert run_table_path(tiny_run, name) == tiny_run / f"{name}.csv"
    events = read_run_table(parquet, "events")
    assert events["cut_off"].dtype == bool and events["seq"].dtype == "int64"
    assert events["flops"].dtype == "float64"


def test_run_tables_read_only_the_columns_and_rounds_asked_for(run_in):
    events = read_run_table(run_in, "events", ["end_s", "actor", "round"])
    assert list(events.columns) == ["end_s", "actor", "round"]  # in the order asked for
    assert len(events) == len(read_run_table(run_in, "events", ["seq"]))
    assert read_run_table(run_in, "events", ["seq"], rounds=[2]).empty  # one round: 1
    one = read_run_table(run_in, "events", ["actor"], rounds=[1])
    assert list(one.columns) == ["actor"] and len(one) == len(events)
    assert list(one.index) == list(range(len(one)))
    clients = read_run_table(run_in, "clients", ("client_id", "group"), rounds=range(1, 3))
    assert clients["group"].tolist() == [g for g in TINY["devices"]]


@pytest.mark.parametrize("fmt", FORMATS)
def test_run_tables_keep_every_name_and_only_empty_values_are_missing(tmp_path, fmt):
    names = [*NA_STRINGS, *NUMBER_LIKE, ""]
    frame = pd.DataFrame({"round": 1, "client_id": range(len(names)), "group": names,
                          "profile": "rpi4", "domain": "", "status": "trained",
                          "cut_layer": [3] * (len(names) - 1) + [None],
                          "client_accuracy": [0.5, math.nan] * (len(names) // 2)
                          + [0.5] * (len(names) % 2)})
    if fmt == "csv":
        frame.to_csv(tmp_path / "clients.csv", index=False)
    else:
        write_parquet(tmp_path / "clients.parquet", frame)
    table = read_run_table(tmp_path, "clients")
    assert table["group"].tolist()[:-1] == names[:-1] and pd.isna(table["group"].iloc[-1])
    assert table["domain"].isna().all()  # empty: missing, as a CSV file writes it
    assert table["cut_layer"].dtype == float and table["cut_layer"].isna().tolist()[-1]
    assert table["client_accuracy"].isna().tolist() == [i % 2 == 1 for i in range(len(names))]
    for column in ("group", "profile", "domain", "status"):
        assert table[column].dtype == pd.Series([], dtype=str).dtype, column  # as read_csv


def test_run_tables_of_both_formats_have_one_dtype_per_column(tmp_path):
    frame = pd.DataFrame({"round": [1, 1, 2], "actor": ["client0", "007", "NA"],
                          "activity": ["a", "b", "c"], "client_id": [0, 1, 2],
                          "start_s": [0.0, 0.1, 0.2], "cut_off": [False, True, False]})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    frame.to_csv(tmp_path / "a" / "events.csv", index=False)
    write_parquet(tmp_path / "b" / "events.parquet", frame)
    a, b = (read_run_table(tmp_path / d, "events") for d in "ab")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert a["actor"].tolist() == ["client0", "007", "NA"]
    pd.testing.assert_frame_equal(*(read_run_table(tmp_path / d, "events", ["actor"], rounds=[2])
                                    for d in "ab"))


def test_run_tables_prefer_parquet_and_name_what_is_missing(tmp_path, tiny_run):
    tiny_run = copy_run(tiny_run, tmp_path / "older", "csv")
    tmp_path = tmp_path / "run"
    tmp_path.mkdir()
    with pytest.raises(SflsimError, match=r"has no events\.parquet or events\.csv"):
        read_run_table(tmp_path, "events")
    with pytest.raises(ValueError, match="unknown run table 'rounds'"):
        read_run_table(tiny_run, "rounds")
    with pytest.raises(SflsimError, match=r"events\.csv has no column speed_mps \(columns: round,"):
        read_run_table(tiny_run, "events", ["round", "speed_mps"])
    shutil.copy(tiny_run / "events.csv", tmp_path / "events.csv")
    write_parquet(tmp_path / "events.parquet", pd.DataFrame({"round": [7], "actor": ["x"]}))
    assert read_run_table(tmp_path, "events")["round"].tolist() == [7]  # Parquet first
    with pytest.raises(SflsimError, match=r"events\.parquet has no column seq"):
        read_run_table(tmp_path, "events", ["seq"])
    (tmp_path / "events.parquet").write_bytes(b"PAR1 not a table")
    with pytest.raises(SflsimError, match=r"events\.parquet cannot be read as Parquet"):
        read_run_table(tmp_path, "events")
    (tmp_path / "events.parquet").unlink()
    (tmp_path / "events.csv").write_text("")
    with pytest.raises(SflsimError, match=r"events\.csv is empty"):
        read_run_table(tmp_path, "events")


def test_result_files_know_both_formats(tmp_path):
    from sflsim.metrics.results import RESULT_FILES, clear_results, existing_results

    for name in RUN_TABLES:
        assert {f"{name}.parquet", f"{name}.csv"} <= set(RESULT_FILES)
    (tmp_path / "events.parquet").write_bytes(b"")
    (tmp_path / ".clients.parquet.x1.tmp").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("mine")
    assert existing_results(tmp_path) == ["events.parquet"]
    clear_results(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_round_file_written_back_by_pandas_joins_the_others(tmp_path):
    """One round file of a streamed table rewritten with pandas' default writer (text
    as large_string) is read with the others, not refused as unmergeable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sflsim.metrics.reading import read_parquet_table

    folder = tmp_path / "events.parquet"
    folder.mkdir()
    pq.write_table(pa.table({"round": [1], "actor": pa.array(["client0"], pa.string())}),
                   folder / "round-000001.parquet")
    pq.write_table(pa.table({"round": [2], "actor": pa.array(["server"], pa.large_string())}),
                   folder / "round-000002.parquet")
    table = read_parquet_table(folder)
    assert table["actor"].tolist() == ["client0", "server"]
    assert table["round"].tolist() == [1, 2]
