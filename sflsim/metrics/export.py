"""CSV copies of a run's Parquet tables, for tools that read only CSV (``sflsim export``).

``events.parquet`` and ``clients.parquet`` become ``events.csv`` and ``clients.csv`` in
the text runs wrote before Parquet: a header, then one line per row through the stdlib
``csv`` writer (floats by ``repr``, so every number reads back exactly; a missing value
is an empty cell), each file written atomically
(:func:`~sflsim.metrics.results.atomic_write`). :func:`~sflsim.metrics.results.read_run_table`
reads a copy as it reads the table.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sflsim.errors import SflsimError
from sflsim.metrics.results import RUN_TABLES, parquet_parts, write_rows

#: Files that make a directory a results directory of ``sflsim run`` for :func:`results_dirs`.
MARKERS = ("summary.json", "rounds.csv", *(f"{name}.parquet" for name in RUN_TABLES))
#: Rows converted at a time (a large run's table does not fit in memory as Python objects).
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class Copy:
    """One table of :func:`export_csv`: its Parquet file, its CSV copy, and whether the copy
    was written (False: it was already newer than the table)."""

    table: Path
    csv: Path
    written: bool


def results_dirs(root: str | Path) -> list[Path]:
    """``root`` if it is a results directory (it holds one of :data:`MARKERS`), else every
    results directory below it (a sweep's ``points/<id>/``), in path order.

    Raises:
        SflsimError: ``root`` is not a directory, or holds no results.
    """
    root = Path(root)
    if not root.is_dir():
        raise SflsimError(f"{root} is not a directory")
    found = sorted(Path(d) for d, _, files in os.walk(root) if any(m in files for m in MARKERS))
    if not found:
        raise SflsimError(f"{root} holds no sflsim results (no {', '.join(MARKERS)} in it or "
                          f"below it); make some with `sflsim run SCENARIO -o {root}`")
    return [root] if root in found else found


def export_csv(root: str | Path, to: str | Path | None = None) -> Iterator[Copy]:
    """Write ``<name>.csv`` beside each ``<name>.parquet`` of every results directory of
    ``root`` (see :func:`results_dirs`), skipping a copy already newer than its table.

    Args:
        root: a results directory, or a directory holding some (a sweep).
        to: write the copies under this directory instead, at the same paths relative to
            ``root``; None: beside the tables.

    Yields:
        A :class:`Copy` per Parquet table, as it is written or skipped.

    Raises:
        SflsimError: ``root`` holds no results, or a table is not readable Parquet.
    """
    root = Path(root)
    for run_dir in results_dirs(root):
        out = run_dir if to is None else Path(to) / run_dir.relative_to(root)
        for name in RUN_TABLES:
            table, csv = run_dir / f"{name}.parquet", out / f"{name}.csv"
            if not table.exists():
                continue
            newest = max((part.stat().st_mtime_ns for part in parquet_parts(table)), default=0)
            fresh = csv.is_file() and csv.stat().st_mtime_ns >= newest
            if not fresh:
                out.mkdir(parents=True, exist_ok=True)
                write_csv_copy(table, csv)
            yield Copy(table, csv, written=not fresh)


def write_csv_copy(table: Path, csv: Path) -> None:
    """Write the Parquet table ``table`` as the CSV file ``csv`` (see the module docstring).

    Raises:
        SflsimError: ``table`` is not readable Parquet.
    """
    import pyarrow
    import pyarrow.parquet as pq

    try:
        files = [pq.ParquetFile(part) for part in parquet_parts(table)]
        names = [n for n in files[0].schema_arrow.names
                 if not n.startswith("__index_level_")] if files else []

        def rows() -> Iterator[tuple]:
            for batch in (b for f in files for b in f.iter_batches(batch_size=BATCH_ROWS,
                                                                     columns=names)):
                # NaN is written empty, as the tables' writer did (NaN != NaN); None is too
                columns = [[v if v == v else "" for v in batch.column(i).to_pylist()]
                           for i in range(batch.num_columns)]
                yield from zip(*columns)

        write_rows(csv, names, rows())
    except pyarrow.ArrowException as exc:
        raise SflsimError(f"{table} cannot be read as Parquet: {exc}") from None
