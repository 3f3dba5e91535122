"""Reading a results folder back: the result tables, a run's streamed tables, its summary.

:func:`read_result_csv` reads every CSV table as it was written (names kept as text);
:func:`read_run_table` reads ``events`` and ``clients`` from their Parquet folders, or
from the CSV files of runs written before Parquet, as the same frame.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pandas as pd

from sflsim.errors import SflsimError


def parquet_parts(path: Path) -> list[Path]:
    """The Parquet files of a table: a streamed table's round files in round order
    (:class:`~sflsim.metrics.streamed.RunTables`), or ``[path]`` for a single file."""
    return sorted(path.glob("round-*.parquet")) if path.is_dir() else [path]


def read_parquet_table(path: Path, columns: list[str] | None = None, **kwargs) -> pd.DataFrame:
    """A Parquet table, one file or a streamed folder (parts in round order), as a frame;
    ``kwargs`` as :func:`pyarrow.parquet.read_table` takes them (``filters``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = [pq.read_table(part, columns=columns, **kwargs) for part in parquet_parts(path)]
    if not parts:
        return pd.DataFrame(columns=columns or [])
    # "permissive": a round file written back by pandas (large_string for string, say)
    # joins the others rather than making the whole table unreadable
    return pa.concat_tables(parts, promote_options="permissive").to_pandas()


#: Columns of the result tables that hold names or text, read as text whatever they look like
#: (a device group named ``007`` or ``1e3`` keeps its spelling)
TEXT_COLUMNS = ("name", "group", "profile", "domain", "status", "note", "actor", "activity",
                "point", "error", "run_dir", "algorithm")


_PANDAS_MAJOR = int(pd.__version__.split(".")[0])


def read_result_csv(path: str | Path, **kwargs) -> pd.DataFrame:
    """A result table (``rounds.csv``, ``clients.csv``, ``events.csv``, ``early_exit.csv``,
    ``sweep.csv``) as it was written: the one reader for them all.

    Every cell is kept as written (a device group named ``NA``, ``null``, ``None`` or
    ``nan`` keeps its name, which pandas' default reading turns into NaN) and only an empty
    cell is a missing value (NaN; the writers write NaN and None as empty cells). The
    columns of :data:`TEXT_COLUMNS` are text; pandas infers the others (numbers stay in
    the units their column names give: ``_s``, ``_j``, ``_bytes``, ...), and every float
    reads back exactly as written (before pandas 3 that needs its round-trip parser).

    Args:
        path: the CSV file.
        **kwargs: passed on to :func:`pandas.read_csv` (``usecols``, ``nrows``, ...).

    Raises:
        SflsimError: the file is empty, not text (UTF-8), or a row has more cells than the
            header (a damaged table: rows of two runs, or of two versions of sflsim, in one
            file, or a file cut short), naming the file.
    """
    from sflsim.errors import SflsimError

    kwargs.setdefault("dtype", dict.fromkeys(TEXT_COLUMNS, str))
    if _PANDAS_MAJOR < 3:  # pandas 2's default parser can be 1 ulp off (pandas 3's is exact)
        kwargs.setdefault("float_precision", "round_trip")
    again = ("write it again with `sflsim sweep SWEEP.yaml -o DIR` (the finished points are "
             "kept)" if Path(path).name == "sweep.csv" else "run that run again")
    try:
        return pd.read_csv(path, keep_default_na=False, na_values=[""], **kwargs)
    except pd.errors.EmptyDataError:
        raise SflsimError(f"{path} is empty: the file was emptied or never written; "
                          f"{again}") from None
    except UnicodeDecodeError as exc:
        raise SflsimError(f"{path} is not a text table (byte {exc.start} is not UTF-8): the "
                          f"file is damaged or another kind of file; {again}") from None
    except pd.errors.ParserError as exc:
        detail = str(exc).removeprefix("Error tokenizing data. C error: ").strip()
        raise SflsimError(f"{path} cannot be read as a table ({detail}): its rows do not all "
                          f"have the header's columns, or the file is cut short; "
                          f"{again}") from None


#: The tables of a run that grow by a round at a time: ``<name>.parquet``, or
#: ``<name>.csv`` in a run written before Parquet (see :func:`read_run_table`)
RUN_TABLES = ("events", "clients")
#: The files a table of :data:`RUN_TABLES` is looked for in, in order
RUN_TABLE_SUFFIXES = (".parquet", ".csv")


def run_table_path(run_dir: str | Path, name: str) -> Path | None:
    """The file that holds table ``name`` of a results directory: ``<name>.parquet``, else
    ``<name>.csv`` (a run written before Parquet), else None.

    Args:
        run_dir: a results directory of ``sflsim run``.
        name: one of :data:`RUN_TABLES` (``"events"``, ``"clients"``).

    Raises:
        ValueError: ``name`` is not one of :data:`RUN_TABLES`.
    """
    if name not in RUN_TABLES:
        raise ValueError(f"unknown run table {name!r}; valid: {', '.join(RUN_TABLES)}")
    for suffix in RUN_TABLE_SUFFIXES:
        path = Path(run_dir) / f"{name}{suffix}"
        if path.is_file() or (suffix == ".parquet" and path.is_dir()):
            return path
    return None


#: the clients table's file names in a results directory, the first found is read
CLIENTS_TABLES = ("clients.parquet", "clients.csv")


def clients_table_path(path: str | Path) -> Path:
    """The clients table ``path`` names: ``path`` itself (a ``.parquet`` or ``.csv`` file) or
    the first of :data:`CLIENTS_TABLES` in the results directory ``path``.

    Raises:
        FileNotFoundError: no such file, or a directory without a clients table.
        ValueError: a file that is neither ``.parquet`` nor ``.csv``.
    """
    p = Path(path)
    if p.is_dir() and p.suffix != ".parquet":  # a results directory
        found = run_table_path(p, "clients")
        if found is None:
            raise FileNotFoundError(f"{str(path)!r} is a directory without "
                                    f"{' or '.join(CLIENTS_TABLES)} (a run's results "
                                    f"directory holds one)")
        return found
    if not p.exists():
        raise FileNotFoundError(f"{str(path)!r} does not exist (looked in {Path.cwd()})")
    if p.suffix not in (".parquet", ".csv"):
        raise ValueError(f"{str(path)!r} is neither a .parquet nor a .csv file")
    return p


def run_table_columns(run_dir: str | Path, name: str) -> list[str]:
    """The columns of table ``name`` of a results directory, in order, read from the
    file's header (Parquet: its schema) without reading its rows.

    Raises:
        SflsimError: as :func:`read_run_table`.
    """
    path = _run_table_file(run_dir, name)
    with _readable(path):
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            parts = parquet_parts(path)
            if not parts:
                return []
            return [c for c in pq.read_schema(parts[0]).names
                    if not c.startswith("__index_level_")]
        return list(read_result_csv(path, nrows=0).columns)


def read_run_table(run_dir: str | Path, name: str, columns: Sequence[str] | None = None,
                   rounds: Iterable[int] | None = None, **kwargs) -> pd.DataFrame:
    """Table ``name`` of a results directory, from ``<name>.parquet`` or, in a run written
    before Parquet, ``<name>.csv``: the same frame from either.

    The columns of :data:`TEXT_COLUMNS` come back as text (a device group named ``007``
    or ``NA`` keeps its name), with only a missing or empty value missing (NaN), as
    :func:`read_result_csv` reads them; integers as int64 (float64 where some are
    missing), ``cut_off`` as bool.

    Args:
        run_dir: a results directory of ``sflsim run``.
        name: ``"events"`` (one row per simulated activity) or ``"clients"`` (one row per
            client per round).
        columns: read only these, in this order (a large run's table holds millions of
            rows: name what you need); None: every column.
        rounds: read only the rows of these rounds (Parquet reads only their row groups).
        **kwargs: passed on to :func:`pandas.read_parquet` or :func:`read_result_csv`,
            whichever reads the file.

    Raises:
        ValueError: ``name`` is not one of :data:`RUN_TABLES`.
        SflsimError: ``run_dir`` holds neither file, the file is empty or unreadable, or
            it lacks one of ``columns``.
    """
    path = _run_table_file(run_dir, name)
    have = run_table_columns(run_dir, name)
    wanted = list(have if columns is None else columns)
    missing = [c for c in wanted if c not in have]
    if missing:
        raise SflsimError(f"{path} has no column {', '.join(missing)} (columns: "
                          f"{', '.join(have)})")
    keep = sorted(set(rounds)) if rounds is not None else None
    read = wanted if keep is None or "round" in wanted else [*wanted, "round"]
    with _readable(path):
        if path.suffix == ".parquet":
            if keep is not None:
                kwargs["filters"] = [("round", "in", keep)]
            table = read_parquet_table(path, read, **kwargs)
            for column in table.columns.intersection(TEXT_COLUMNS):
                table[column] = _as_text(table[column])
        else:
            table = read_result_csv(path, usecols=read, **kwargs)
            if keep is not None:
                table = table[table["round"].isin(keep)].reset_index(drop=True)
    return table if list(table.columns) == wanted else table[wanted].copy()


#: The dtype of the text columns :func:`read_result_csv` reads (object before pandas 3)
_TEXT_DTYPE = pd.Series([], dtype=str).dtype


def _as_text(column: pd.Series) -> pd.Series:
    """A text column read from Parquet as :func:`read_result_csv` reads one: missing and
    empty values are NaN (a CSV file writes both as an empty cell)."""
    values = column.astype(object)
    return values.where(values.notna() & (values != ""), math.nan).astype(_TEXT_DTYPE)


def _run_table_file(run_dir: str | Path, name: str) -> Path:
    path = run_table_path(run_dir, name)
    if path is None:
        raise SflsimError(f"{run_dir} has no {name}.parquet or {name}.csv")
    return path


@contextlib.contextmanager
def _readable(path: Path) -> Iterator[None]:
    """Errors reading ``path``, a table of :data:`RUN_TABLES`, as one SflsimError."""
    parquet_errors: tuple[type[Exception], ...] = ()
    if path.suffix == ".parquet":
        import pyarrow

        parquet_errors = (pyarrow.ArrowException,)
    try:
        yield
    except pd.errors.EmptyDataError:
        raise SflsimError(f"{path} is empty") from None
    except parquet_errors as exc:
        raise SflsimError(f"{path} cannot be read as Parquet: {exc}") from None


def read_result(run_dir: str | Path) -> tuple[dict, pd.DataFrame]:
    """``(summary, rounds)`` of a results directory written by ``sflsim run``.

    Raises:
        SflsimError: ``run_dir`` is not a results directory (no ``summary.json``
            or ``rounds.csv``).
    """
    from sflsim.errors import SflsimError

    run_dir = Path(run_dir)
    summary_path, rounds_path = run_dir / "summary.json", run_dir / "rounds.csv"
    if not (summary_path.is_file() and rounds_path.is_file()):
        raise SflsimError(not_a_folder_of(run_dir, "results directory", "summary.json and rounds.csv",
                                          f"sflsim run SCENARIO -o {run_dir}"))
    return read_json_object(summary_path), read_result_csv(rounds_path)


def read_json_object(path: Path) -> dict:
    """The JSON object in ``path`` (a run's ``summary.json``, ``manifest.json``).

    Raises:
        SflsimError: the file is not UTF-8, not JSON (damaged or cut short), or holds
            something other than an object.
    """
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise SflsimError(f"{path} is not UTF-8 text: the file is damaged") from None
    except ValueError as exc:
        where = f" ({exc.msg}, line {exc.lineno} column {exc.colno})" if isinstance(
            exc, json.JSONDecodeError) else ""
        raise SflsimError(f"{path} cannot be read as JSON{where}: the file is damaged or "
                          f"cut short") from None
    if not isinstance(data, dict):
        raise SflsimError(f"{path} holds {type(data).__name__}, not the JSON object "
                          f"sflsim writes: the file is damaged")
    return data


def not_a_folder_of(folder: Path, kind: str, needs: str, make: str) -> str:
    """Why ``folder`` is not a ``kind`` (``"results directory"``, ``"sweep directory"``)
    that holds ``needs``: it does not exist, is a file, is the other kind (a sweep's
    points are results directories), is a sweep without its ``sweep.csv``, or lacks the
    files (``make``: the command that makes one)."""
    if not folder.exists():
        return f"{folder} does not exist; give an sflsim {kind} (it holds {needs})"
    if not folder.is_dir():
        return f"{folder} is a file, not an sflsim {kind} (a folder that holds {needs})"
    if kind == "results directory" and (folder / "sweep.csv").is_file():
        points = sorted(p.name for p in (folder / "points").glob("p*") if p.is_dir())
        example = f", e.g. {folder / 'points' / points[0]}" if points else ""
        return (f"{folder} is a sweep directory, not one run's results; give one of its "
                f"points{example} (sweep.csv lists them)")
    if (folder / "sweep.yaml").is_file() and not (folder / "sweep.csv").exists():
        return (f"{folder} holds a sweep (sweep.yaml) without its table sweep.csv; write it "
                f"with `sflsim sweep {folder / 'sweep.yaml'} -o {folder}` (the finished "
                f"points are kept, the others run)")
    if kind == "sweep directory" and (folder / "summary.json").is_file():
        return (f"{folder} is one run's results directory, not a sweep directory (it needs "
                f"{needs})")
    if folder.parent.name == "points" and (folder.parent.parent / "sweep.csv").is_file():
        sweep = folder.parent.parent
        spec = sweep / "sweep.yaml" if (sweep / "sweep.yaml").is_file() else "SWEEP.yaml"
        return (f"{folder} is a point of the sweep {sweep} without its results (it needs "
                f"{needs}); run the sweep again to run it (`sflsim sweep {spec} -o {sweep}` "
                f"keeps the finished points)")
    return f"{folder} is not an sflsim {kind} (it needs {needs}; make one with `{make}`)"


def is_timing_only(run_dir: str | Path) -> bool:
    """Whether the run in ``run_dir`` was timing-only (``training.timing_only``, its
    ``scenario.yaml``): it trained nothing, so it has no accuracy. False when unknown."""
    import yaml

    try:
        data = yaml.safe_load((Path(run_dir) / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return False
    training = data.get("training") if isinstance(data, dict) else None
    return isinstance(training, dict) and training.get("timing_only") is True


#: why a timing-only run has no accuracy to show (what it lacks follows)
TIMING_ONLY_NOTE = "timing-only (--no-train): it trained nothing, so it has no"


def training_rounds(rounds: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``rounds.csv`` table after a round of training (``round`` >= 1):
    without round 0, the untrained model's evaluation (which has no work, bytes or
    time), for counting rounds and for means per round."""
    return rounds[rounds["round"] >= 1] if "round" in rounds else rounds
