"""The streamed tables of a run: events and clients written a round at a time as Parquet parts.

``events.parquet/`` and ``clients.parquet/`` are folders of Parquet files, one per
round or group of rounds (:class:`RunTables`), so memory does not grow with the
rounds; ``rounds.csv`` is written after the parts, so every round it lists is complete
in both tables.
"""

from __future__ import annotations

import time
from pathlib import Path

from sflsim.metrics.writing import append_rows, atomic_write, write_rows

#: the Parquet type of each known column of the streamed tables (others: float64, or
#: text when every value is a string)
COLUMN_TYPES = {
    "round": "int64", "actor": "string", "activity": "string", "client_id": "int64",
    "start_s": "float64", "end_s": "float64", "queue_s": "float64", "payload_bytes": "int64",
    "flops": "float64", "seq": "int64", "cut_off": "bool",
    "group": "string", "profile": "string", "domain": "string", "end_layer": "int64",
    "cut_layer": "int64", "samples": "int64", "status": "string", "activated_params": "int64",
    "bytes_up": "int64", "bytes_down": "int64",
}

#: the tables streamed a round at a time, as folders of Parquet files (:class:`RunTables`)
STREAMED_TABLES = ("events", "clients")
#: the folders of :data:`STREAMED_TABLES` in a results folder
TABLE_FOLDERS = tuple(f"{name}.parquet" for name in STREAMED_TABLES)


#: rows (of the larger table) held in memory before they go to disk as one part file,
#: when no checkpoint asks for them sooner: enough that a small fleet's rounds share a
#: file, few enough that memory stays flat (about 10 MB of events)
PART_ROWS = 100_000

#: seconds of wall time after which held rows go to disk whatever their number
PART_WAIT_S = 30.0


def part_name(round_: int) -> str:
    """The file of the part whose first round is ``round_`` in a streamed table's folder
    (sorts in round order)."""
    return f"round-{round_:06d}.parquet"


class RunTables:
    """Writes a run's tables as its rounds finish (see the module docstring).

    ``events.parquet/`` and ``clients.parquet/`` are folders of Parquet files, each
    holding the rounds from the one in its name (``round-000001.parquet``) to the next
    file's, written atomically, so memory does not grow with rounds;
    ``pandas.read_parquet`` (or :func:`~sflsim.metrics.reading.read_run_table`) reads a
    folder as one table, in round order. :meth:`add_round` holds a round's rows; :meth:`flush` writes the held
    rounds as one file per table, then ``rounds.csv``, so every round that
    ``rounds.csv`` lists is complete in both tables. The runner flushes before every
    checkpoint (a trained run: every round, so a run stopped at any instant keeps
    every round it finished), and otherwise (a timing-only run, whose rounds take
    milliseconds) once :data:`PART_ROWS` rows or :data:`PART_WAIT_S` seconds are
    held, and when the run ends, stopped or not.
    """

    def __init__(self, out: Path):
        self.out = out
        self.schemas: dict[str, object] = {}
        #: ``rounds.csv``'s columns and rows as last written (none yet)
        self.rounds_header: list[str] = []
        self.rounds_written = 0
        #: rounds added and not yet written: (first round, {table: [arrow table, ...]})
        self.held: dict[str, list] = {name: [] for name in STREAMED_TABLES}
        self.held_from: int | None = None
        self.held_rows = 0
        self.flushed_at = time.perf_counter()

    def keep_rounds(self, completed: int) -> None:
        """Remove the rows of rounds after ``completed`` (a resumed run redoes them):
        part files that start later go, one that spans ``completed`` is cut there."""
        import pyarrow.parquet as pq

        for name in STREAMED_TABLES:
            folder = self.out / f"{name}.parquet"
            for part in folder.glob("round-*.parquet") if folder.is_dir() else ():
                if int(part.stem.split("-")[1]) > completed:
                    part.unlink()
                    continue
                rounds = pq.read_table(part, columns=["round"]).column("round")
                if len(rounds) and max(rounds.to_pylist()) > completed:
                    kept = pq.read_table(part, filters=[("round", "<=", completed)])
                    atomic_write(part, lambda tmp, kept=kept: pq.write_table(kept, tmp))

    def write_round(self, round_: int, clients: dict[str, list], events: dict[str, list],
                    round_rows: list[dict]) -> None:
        """:meth:`add_round`, then :meth:`flush`: ``round_``'s tables on disk now."""
        self.add_round(round_, clients, events)
        self.flush(round_rows)

    def add_round(self, round_: int, clients: dict[str, list], events: dict[str, list]) -> None:
        """Hold ``round_``'s client rows and events (columns, lists or arrays) as Arrow
        tables until :meth:`flush`."""
        if self.held_from is None:
            self.held_from = round_
        for name, columns in (("clients", clients), ("events", events)):
            table = self._arrow(name, columns)
            self.held[name].append(table)
        self.held_rows += max(len(t) for t in (self.held["clients"][-1],
                                                self.held["events"][-1]))

    def due(self) -> bool:
        """Whether the held rows should go to disk now (:data:`PART_ROWS`,
        :data:`PART_WAIT_S`)."""
        return (self.held_rows >= PART_ROWS
                or time.perf_counter() - self.flushed_at >= PART_WAIT_S)

    def flush(self, round_rows: list[dict]) -> None:
        """Write the held rounds as one part file per table (named by the first), then
        ``rounds.csv`` with ``round_rows``."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.held_from is not None:
            folder_name = part_name(self.held_from)
            for name, tables in self.held.items():
                table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
                folder = self.out / f"{name}.parquet"
                folder.mkdir(exist_ok=True)
                # dictionary pages for text only: numbers rarely repeat, and encoding them
                # takes most of the write
                text = [f.name for f in table.schema if f.type == pa.string()]
                atomic_write(folder / folder_name, lambda tmp, t=table, text=text: pq.write_table(
                    t, tmp, use_dictionary=text))
                tables.clear()
            self.held_from, self.held_rows = None, 0
        self.flushed_at = time.perf_counter()
        self.write_rounds(round_rows)

    def write_rounds(self, round_rows: list[dict]) -> None:
        """Write ``rounds.csv`` (as ``DataFrame.to_csv`` writes it: NaN empty, floats by
        repr; columns in order of first appearance): the rows after those this writer
        wrote are appended while the columns stay the same, else the file is rewritten
        atomically (the first call, a resumed run)."""
        if not round_rows:
            return
        header = list(dict.fromkeys(k for row in round_rows for k in row))
        done = self.rounds_written
        if header == self.rounds_header and 0 < done <= len(round_rows):
            append_rows(self.out / "rounds.csv",
                        [[_cell(row.get(k)) for k in header] for row in round_rows[done:]])
        else:
            write_rows(self.out / "rounds.csv", header,
                       [[_cell(row.get(k)) for k in header] for row in round_rows])
        self.rounds_header, self.rounds_written = header, len(round_rows)

    def _arrow(self, name: str, columns: dict[str, list]) -> object:
        """``columns`` as an Arrow table of the table's schema (fixed by its first round)."""
        import pyarrow as pa

        schema = self.schemas.get(name)
        if schema is None:
            schema = self.schemas[name] = pa.schema(
                [(col, _arrow_type(col, values)) for col, values in columns.items()])
        return pa.table({col: _arrow_array(values, schema.field(col).type)
                         for col, values in columns.items()}, schema=schema)


def _arrow_array(values: object, type_: object) -> object:
    """``values`` as an Arrow array of ``type_``: a ``pandas.Categorical`` (a booked
    round's text columns) through its codes, its names converted once."""
    import pyarrow as pa

    if hasattr(values, "categories") and hasattr(values, "codes"):
        dtype = values.dtype
        held = _CATEGORY_NAMES.get(id(dtype))
        if held is None or held[0] is not dtype:
            if len(_CATEGORY_NAMES) > 8:
                _CATEGORY_NAMES.clear()
            held = _CATEGORY_NAMES[id(dtype)] = (
                dtype, pa.array(list(dtype.categories), type=pa.string()))
        return pa.DictionaryArray.from_arrays(pa.array(values.codes), held[1]).cast(type_)
    return pa.array(values, type=type_)


#: the names of a categorical type as an Arrow array, by ``id`` (with the type, so the
#: ``id`` is not reused while held): a booked run's blocks share their types
_CATEGORY_NAMES: dict[int, tuple[object, object]] = {}


def _cell(value: object) -> object:
    """A CSV cell as pandas writes it: NaN and None empty."""
    return "" if value is None or value != value else value


def _arrow_type(column: str, values: object) -> object:
    import pyarrow as pa

    known = COLUMN_TYPES.get(column)
    if known is not None:
        return {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
                "bool": pa.bool_()}[known]
    seq = values.tolist() if hasattr(values, "tolist") else list(values)  # type: ignore[union-attr]
    if seq and all(isinstance(v, str) for v in seq):
        return pa.string()
    return pa.float64()
