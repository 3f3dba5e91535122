"""``sflsim export DIR --csv``: CSV copies of the Parquet tables, in the text runs wrote
before Parquet, read back as the tables themselves."""

from __future__ import annotations

import math
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.errors import SflsimError
from sflsim.metrics.export import export_csv, results_dirs
from sflsim.metrics.results import RUN_TABLES, read_result_csv, read_run_table
from tests.table_files import copy_run


def test_copies_are_the_csv_tables_a_run_wrote_before_parquet(tiny_run, tmp_path):
    older = copy_run(tiny_run, tmp_path / "older", "csv")
    run = copy_run(older, tmp_path / "run", "parquet")
    copies = list(export_csv(run))
    assert [(c.table.name, c.csv.name, c.written) for c in copies] == [
        ("events.parquet", "events.csv", True), ("clients.parquet", "clients.csv", True)]
    for name in RUN_TABLES:
        csv, table = run / f"{name}.csv", read_run_table(run, name)
        assert csv.read_text() == (older / f"{name}.csv").read_text()  # byte for byte
        assert csv.read_text() == table.to_csv(index=False)  # floats by repr, NaN empty
        pd.testing.assert_frame_equal(read_result_csv(csv), table, check_exact=True, obj=name)
    assert not list(run.glob(".*.tmp"))  # written atomically: nothing left over


def test_missing_values_are_empty_cells_and_numbers_read_back_exactly(tmp_path):
    table = pa.table({"round": pa.array([1, 1, 2], pa.int64()), "client_id": [0, 1, 2],
                      "group": ["007", None, "NA"], "domain": ["", "", "sketch"],
                      "cut_layer": pa.array([3, None, 2], pa.int64()),
                      "client_loss": [0.1 + 0.2, math.nan, 1e-300], "cut_off": [True, False, True]})
    pq.write_table(table, tmp_path / "clients.parquet")
    (copy,) = export_csv(tmp_path)
    assert copy.csv.read_text().splitlines() == [
        "round,client_id,group,domain,cut_layer,client_loss,cut_off",
        "1,0,007,,3,0.30000000000000004,True", "1,1,,,,,False", "2,2,NA,sketch,2,1e-300,True"]
    parquet = read_run_table(tmp_path, "clients")
    (tmp_path / "clients.parquet").unlink()
    pd.testing.assert_frame_equal(read_run_table(tmp_path, "clients"), parquet, check_exact=True)


def test_a_copy_newer_than_its_table_is_kept(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run", "parquet")
    assert all(c.written for c in export_csv(run))
    assert not any(c.written for c in export_csv(run))
    part = max((run / "events.parquet").glob("round-*.parquet"))  # as sflsim run writes it
    # the table changed after its copy was written (however long writing it took)
    later = (run / "events.csv").stat().st_mtime_ns + 10**9
    os.utime(part, ns=(later, later))
    assert [c.csv.name for c in export_csv(run) if c.written] == ["events.csv"]


@pytest.fixture
def sweep(tiny_run, tmp_path):
    """A sweep directory of two points, Parquet tables, and one point of an older run with
    CSV tables only."""
    root = tmp_path / "sweep"
    for point, fmt in (("p000", "parquet"), ("p001", "parquet"), ("p002", "csv")):
        copy_run(tiny_run, root / "points" / point, fmt)
    (root / "sweep.csv").write_text("point,status,error,run_dir\n")
    return root


def test_cli_writes_every_points_copies_one_line_per_file(sweep):
    result = CliRunner().invoke(app, ["export", str(sweep), "--csv"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"wrote {sweep / 'points' / p / n}" for p in ("p000", "p001")
                                          for n in ("events.csv", "clients.csv")]
    again = CliRunner().invoke(app, ["export", str(sweep), "--csv"])
    assert again.exit_code == 0 and again.output == (
        "nothing to write: the CSV copies are newer than the tables\n")
    assert results_dirs(sweep) == [sweep / "points" / p for p in ("p000", "p001", "p002")]
    assert results_dirs(sweep / "points" / "p001") == [sweep / "points" / "p001"]


def test_cli_writes_the_copies_elsewhere_with_to(sweep, tmp_path):
    out = tmp_path / "csv"
    result = CliRunner().invoke(app, ["export", str(sweep), "--csv", "--to", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                  if p.is_file()) == [f"points/{p}/{n}" for p in ("p000", "p001")
                                      for n in ("clients.csv", "events.csv")]
    assert not (sweep / "points" / "p000" / "events.csv").exists()
    pd.testing.assert_frame_equal(read_run_table(out / "points" / "p000", "events"),
                                  read_run_table(sweep / "points" / "p000", "events"))


def test_to_a_file_is_refused_before_any_copy(sweep, tmp_path):
    (tmp_path / "f").write_text("x")
    for to, said in ((tmp_path / "f", f"--to {tmp_path / 'f'} is a file, not a folder"),
                     (tmp_path / "f" / "sub", f"--to {tmp_path / 'f' / 'sub'} cannot be made: "
                                              f"{tmp_path / 'f'} is a file")):
        result = CliRunner().invoke(app, ["export", str(sweep), "--csv", "--to", str(to)])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
    assert not list(sweep.rglob("*.csv.*.tmp")) and "wrote" not in result.output


def test_cli_says_when_there_is_nothing_to_export(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "older", "csv")
    older = CliRunner().invoke(app, ["export", str(run), "--csv"])
    assert older.exit_code == 0 and "no Parquet tables in" in older.output
    (tmp_path / "empty" / "deep").mkdir(parents=True)
    for args, message in (([str(tmp_path / "empty"), "--csv"], "holds no sflsim results"),
                          ([str(tmp_path / "nowhere"), "--csv"], "is not a directory"),
                          ([str(run)], "name the format to write: --csv")):
        result = CliRunner().invoke(app, ["export", *args])
        assert result.exit_code == USER_ERROR, result.output
        assert result.output.count("error:") == 1 and message in result.output
        assert "Traceback" not in result.output


def test_an_unreadable_table_is_a_user_error(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run", "csv")
    text = (run / "events.csv").read_text()
    (run / "events.parquet").write_bytes(b"PAR1 cut short")
    with pytest.raises(SflsimError, match=r"events\.parquet cannot be read as Parquet"):
        list(export_csv(run))
    assert (run / "events.csv").read_text() == text  # the copy there is left alone
