"""Results directories in either format of the per-round tables (``events``, ``clients``):
``<name>.parquet``, as ``sflsim run`` writes them, or ``<name>.csv``, as runs written
before Parquet hold them."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sflsim.metrics.results import RUN_TABLES, TEXT_COLUMNS, read_result_csv

#: The formats a results directory's ``events`` and ``clients`` tables come in.
FORMATS = ("csv", "parquet")


def arrow_table(frame: pd.DataFrame, empty_text: tuple[str, ...] = ("domain",)) -> pa.Table:
    """``frame`` with the column types of the Parquet tables: text as strings (missing
    values null, empty strings in ``empty_text``, as the records hold them), integers
    int64, floats float64, ``cut_off`` bool."""
    arrays, names = [], []
    for name in frame.columns:
        column = frame[name]
        if name in TEXT_COLUMNS or not (pd.api.types.is_numeric_dtype(column)
                                        or pd.api.types.is_bool_dtype(column)):
            fill = "" if name in empty_text else None
            values = [fill if isinstance(v, float) and math.isnan(v) else str(v)
                      for v in column.astype(object)]
            arrays.append(pa.array(values, pa.string()))
        elif pd.api.types.is_bool_dtype(column):
            arrays.append(pa.array(column.tolist(), pa.bool_()))
        elif pd.api.types.is_integer_dtype(column):
            arrays.append(pa.array(column.tolist(), pa.int64()))
        else:
            arrays.append(pa.array(column.astype(float).tolist(), pa.float64()))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def write_parquet(path: Path, frame: pd.DataFrame) -> None:
    """Write ``frame`` as a Parquet table with one row group per round."""
    table = arrow_table(frame)
    with pq.ParquetWriter(path, table.schema) as writer:
        if "round" not in frame or frame.empty:
            writer.write_table(table)
        for r in dict.fromkeys(frame.get("round", [])):
            writer.write_table(table.filter(pa.compute.equal(table["round"], r)))


def to_parquet(run_dir: Path) -> Path:
    """Rewrite ``run_dir``'s ``events.csv`` and ``clients.csv`` as ``events.parquet`` and
    ``clients.parquet`` and delete the CSV files, so that a reader can only read the
    Parquet ones (tables already in Parquet stay)."""
    for name in RUN_TABLES:
        csv = run_dir / f"{name}.csv"
        if csv.is_file():
            write_parquet(run_dir / f"{name}.parquet", read_result_csv(csv))
            csv.unlink()
    return run_dir


def to_csv(run_dir: Path) -> Path:
    """Rewrite ``run_dir``'s Parquet tables as the CSV files of a run written before
    Parquet (``sflsim export``'s copies) and delete the Parquet files."""
    from sflsim.metrics.export import write_csv_copy

    for name in RUN_TABLES:
        table = run_dir / f"{name}.parquet"
        if table.exists():  # a streamed folder (as sflsim run writes it) or one file
            write_csv_copy(table, run_dir / f"{name}.csv")
            shutil.rmtree(table) if table.is_dir() else table.unlink()
    return run_dir


def as_format(root: Path, fmt: str) -> Path:
    """Every results directory under ``root`` (a run, or a sweep's points) with its tables
    in ``fmt`` (one of :data:`FORMATS`), in place."""
    convert = to_parquet if fmt == "parquet" else to_csv
    runs = {p.parent for suffix in (".csv", ".parquet") for p in root.rglob(f"events{suffix}")}
    for run_dir in sorted(runs):
        convert(run_dir)
    return root


def copy_run(run_dir: Path, to: Path, fmt: str) -> Path:
    """A copy of the results directory ``run_dir`` at ``to``, its tables in ``fmt`` (one
    of :data:`FORMATS`; the other format's files are gone)."""
    shutil.copytree(run_dir, to)
    return as_format(to, fmt)
