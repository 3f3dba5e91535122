"""The results directory: resolved scenario, tables, summary and manifest, written atomically.

Layout of ``-o DIR``::

    scenario.yaml   the resolved scenario (units in SI)
    rounds.csv      one row per round, after round 0: the untrained model at time 0
    clients.parquet/  one row per client per round (Parquet, a file per round or rounds)
    events.parquet/   one row per simulated activity: the event trace (likewise)
    early_exit.csv  early-exit accuracy, exit ratio, latency, bytes per threshold
                    and end layer (algorithms with exit heads)
    summary.json    final numbers and the run's status
    manifest.json   versions, seed, host
    checkpoint.pkl  state after the last completed round (``sflsim run --resume``)

Every file is written to a temporary name in the same folder and renamed, so a
reader never sees half a file, but for ``rounds.csv``, which gets one line per
round appended (rewritten whole only when its columns change or a run resumes).
The two large tables stream: as each round ends its client rows and events go to
disk as one Parquet file per table (``clients.parquet/round-000001.parquet``, ...;
a timing-only run's rounds share files, :class:`RunTables`), so memory does not grow
with the rounds, and
``pandas.read_parquet("DIR/events.parquet")`` reads a folder as one table; then
``rounds.csv`` gets the round's row and ``summary.json`` is updated, so the rounds
listed in ``rounds.csv`` are complete in both tables. A resumed run removes the
files of rounds after its checkpoint and goes on. Runs written by earlier versions
have ``clients.csv`` and ``events.csv`` instead; every reader takes either
(:func:`read_run_table`), and ``sflsim export DIR --csv`` writes CSV copies of the
Parquet tables. Read every other table with :func:`read_result_csv`.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pandas as pd
import yaml

from sflsim.errors import SflsimError

if TYPE_CHECKING:
    from sflsim.config.schema import Scenario

#: every file ``sflsim run`` writes into its results directory
#: the traceback of a run that failed (``summary.json``: ``"status": "failed"``)
TRACEBACK_FILE = "traceback.txt"
RESULT_FILES = ("scenario.yaml", "rounds.csv", "clients.parquet", "events.parquet", "clients.csv",
                "events.csv", "early_exit.csv", "summary.json", "manifest.json", "checkpoint.pkl",
                TRACEBACK_FILE)


def existing_results(out: Path) -> list[str]:
    """Names of result files (see :data:`RESULT_FILES`) already in ``out``."""
    return [name for name in RESULT_FILES if (out / name).exists()]


def refuse_existing(out: Path) -> None:
    """Refuse to write into ``out`` when it already holds results.

    Raises:
        SflsimError: naming the directory, what is there and the two ways on.
    """
    from sflsim.errors import SflsimError

    found = existing_results(out)
    if found:
        raise SflsimError(f"{out} already holds results ({', '.join(found)}); pass --overwrite to "
                          f"replace them, --resume to continue the run, or choose another -o")


def check_output_folder(out: Path, option: str = "-o") -> None:
    """Refuse an output folder that cannot be made or written, before any work: ``out``
    is a file, a folder on its way is a file, the deepest folder of it that exists is
    not writable by this user, or the file system will not create the first missing
    folder (``/proc/x``, a read-only mount: it is made and removed again to find out);
    or ``out`` is, or lies inside, a run's streamed table (``events.parquet/``,
    ``clients.parquet/``: every file there is read as part of the table, so a figure or
    a profile written there would break it).

    Raises:
        SflsimError: naming ``option``, the path and what is in the way.
    """
    from sflsim.errors import SflsimError

    out = Path(out)
    refuse_table_folder(out, option)
    if out.exists() and not out.is_dir():
        raise SflsimError(f"{option} {out} is a file, not a folder; choose a folder for the results")
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing != out and not existing.is_dir():
        raise SflsimError(f"{option} {out} cannot be made: {existing} is a file, not a folder; "
                          f"choose another path")
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        raise SflsimError(f"{option} {out} cannot be written: {existing} is not writable by this "
                          f"user; choose a folder you can write to")
    if existing == out:
        return
    first = out
    while first.parent != existing:
        first = first.parent
    try:
        os.mkdir(first)
    except FileExistsError:  # made by someone else meanwhile: it can be made
        return
    except OSError as exc:
        raise SflsimError(f"{option} {out} cannot be made: creating {first} fails "
                          f"({exc.strerror or exc}); choose another path") from None
    with contextlib.suppress(OSError):
        os.rmdir(first)


#: the file in a results folder (a run's, a sweep's) that its holder locks
#: (:func:`hold_folder`); it names the holder while held and is removed when let go
LOCK_FILE = ".sflsim.lock"
#: tries to lock a lock file that its last holder removes meanwhile (:func:`hold_folder`)
LOCK_ATTEMPTS = 20


@contextlib.contextmanager
def hold_folder(folder: str | Path, option: str = "-o") -> Iterator[Path]:
    """Hold ``folder`` for the block: one run, sweep or export writes into a results
    folder at a time.

    The hold is an OS file lock (``flock`` through the ``filelock`` library) on
    :data:`LOCK_FILE` in ``folder``, which also names the holder (pid, host, command,
    since when). The operating system lets go of it when the holding process ends,
    however it ends (SIGKILL included): a lock file left behind by a killed process holds
    nothing, and the next run takes the folder. On a file system that cannot lock files
    (some network mounts) the folder is not held. The folder is made if missing (and
    removed again, with the folders made on its way, if nothing was written in it).
    Holds do not nest: a second hold of the same folder, in this process or another, is
    refused.

    Args:
        folder: the results folder.
        option: how the user named ``folder`` (``-o``, ``--to``; ``""``: the path alone),
            for the messages.

    Yields:
        ``folder`` as a Path.

    Raises:
        SflsimError: another process holds ``folder`` (naming it, :func:`holder_text`),
            or ``folder`` cannot be made or written (:func:`check_output_folder`).
    """
    folder = Path(folder)
    check_output_folder(folder, option=option or "the folder")
    made = []  # the folders this hold makes, outermost first
    missing = folder
    while not missing.exists() and missing != missing.parent:
        made.insert(0, missing)
        missing = missing.parent
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = None
    try:
        fd = _lock(path, option)
        if fd is not None:
            record = {"pid": os.getpid(), "host": platform.node(), "command": _command_line(),
                      "since": time.strftime("%Y-%m-%d %H:%M:%S %z")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        yield folder
    finally:
        if fd is not None:
            _let_go(path, fd)
        for made_folder in reversed(made):  # nothing was written: leave no empty folder
            try:
                made_folder.rmdir()
            except OSError:
                break


def check_not_held(folder: str | Path, option: str = "-o") -> None:
    """Refuse ``folder`` now if another process holds it (:func:`hold_folder`), without
    holding it: so that a command says so before it announces its work. A lock file
    that nobody holds (its holder was killed) is no refusal.

    Raises:
        SflsimError: naming the holder (:func:`holder_text`).
    """
    from filelock import lock_descriptor, unlock_descriptor

    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # no lock file (nobody holds the folder), or one this user cannot lock
        return
    try:
        try:
            locked = lock_descriptor(fd, blocking=False)
        except OSError as exc:  # a file system that cannot lock files: no holds there
            if exc.errno not in _NO_LOCKS:
                raise
            return
        if not locked:
            raise SflsimError(in_use(Path(folder), _holder(fd), option))
        unlock_descriptor(fd)
    finally:
        os.close(fd)


def in_use(folder: Path, holder: dict | None, option: str = "-o") -> str:
    """The refusal of ``folder``, held by ``holder`` (its lock file's record)."""
    named = f"{option} {folder}" if option else str(folder)
    other = f", or choose another {option}" if option else ""
    return (f"{named} is in use: {holder_text(holder)}; sflsim writes a results folder from "
            f"one run, sweep or export at a time: wait until that one ends{other}")


def holder_text(holder: dict | None) -> str:
    """``pid 4242 on host node1, running `sflsim run s.yaml -o out`, since 2025-06-01
    10:00:03 +0200``; for a holder that has not written its record yet, says so."""
    if not isinstance(holder, dict) or "pid" not in holder:
        return "another sflsim process holds it (it has not written its pid yet)"
    return (f"pid {holder.get('pid')} on host {holder.get('host') or 'unknown'}, running "
            f"`{holder.get('command') or 'sflsim'}`, since {holder.get('since') or 'unknown'}")


#: errors of a file system that cannot lock files (some network mounts): no hold there
_NO_LOCKS = {getattr(errno, name) for name in ("ENOSYS", "ENOLCK", "EOPNOTSUPP", "ENOTSUP")
             if hasattr(errno, name)}


def _lock(path: Path, option: str) -> int | None:
    """An open descriptor of ``path`` with its lock held (see :func:`hold_folder`); None
    on a file system that cannot lock files (the folder is then not held).

    Raises:
        SflsimError: another process holds the lock.
    """
    from filelock import lock_descriptor, unlock_descriptor

    for _ in range(LOCK_ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        try:
            try:
                locked = lock_descriptor(fd, blocking=False)
            except OSError as exc:
                if exc.errno not in _NO_LOCKS:
                    raise
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()
                return None
            if not locked:
                raise SflsimError(in_use(path.parent, _holder(fd), option))
            try:  # the last holder removes the file as it lets go: then lock the new one
                if os.path.samestat(os.stat(path), os.fstat(fd)):
                    return fd
            except FileNotFoundError:
                pass
            unlock_descriptor(fd)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise SflsimError(f"cannot lock {path}: other processes keep replacing it; try again")


def _let_go(path: Path, fd: int) -> None:
    """Remove the lock file (still ours) and let go of its lock."""
    from filelock import unlock_descriptor

    try:
        with contextlib.suppress(OSError):
            if os.path.samestat(os.stat(path), os.fstat(fd)):
                path.unlink()
        with contextlib.suppress(OSError):
            unlock_descriptor(fd)
    finally:
        os.close(fd)


def _holder(fd: int) -> dict | None:
    """The record a holder wrote in its lock file (None while it has not)."""
    try:
        record = json.loads(os.pread(fd, 65536, 0).decode())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _command_line() -> str:
    """This process's command line, as a user would type it (``sflsim run s.yaml``)."""
    import shlex
    import sys

    argv = list(sys.argv) or [""]
    head = Path(argv[0]).name
    if head == "__main__.py" and Path(argv[0]).parent.name == "sflsim":  # python -m sflsim
        head = "sflsim"
    elif head in ("-c", "-m", "-", "") or head.endswith(".py"):
        head = " ".join(filter(None, (Path(sys.executable).name, argv[0])))
    return " ".join([head, *(shlex.quote(a) for a in argv[1:])])


def run_writes(resume: bool = False, rewrites_scenario: bool = True) -> tuple[str, ...]:
    """The names in a results folder that a run writes or deletes
    (:data:`RESULT_FILES`); a resume leaves ``manifest.json`` and the CSV tables of
    older runs alone, and ``scenario.yaml`` too unless it changes ``training.rounds``
    (``rewrites_scenario``)."""
    if not resume:
        return RESULT_FILES
    kept = {"manifest.json", "clients.csv", "events.csv",
            *(() if rewrites_scenario else ("scenario.yaml",))}
    return tuple(name for name in RESULT_FILES if name not in kept)


def scenario_inputs(scenario: Scenario) -> dict[str, Path]:
    """The files a run of ``scenario`` reads, besides its scenario file and dataset, by
    the field that names them: ``network.traces.<name>``, ``conditions.availability``, ``fleet``,
    ``algorithm.split_schedule`` (the clients table it reads) and the profile files of
    the devices, links and server (``devices.<group>.profile``, ...), where they exist."""
    from sflsim.hardware.profiles import profile_path
    from sflsim.shipped import trace_path

    found: dict[str, Path] = {}
    for name, trace in scenario.network.traces.items():
        found[f"network.traces.{name}"] = trace_path(trace)
    if scenario.conditions.availability:
        found["conditions.availability"] = trace_path(scenario.conditions.availability)
    if scenario.fleet is not None:
        found["fleet"] = trace_path(scenario.fleet)
    schedule = getattr(scenario.algorithm, "split_schedule", None)
    if schedule:
        try:
            found["algorithm.split_schedule"] = clients_table_path(schedule)
        except (OSError, ValueError):  # none there: the run says so itself
            pass
    profiles = [(f"devices.{g}.profile", "devices", group.profile)
                for g, group in scenario.devices.items()]
    profiles += [(f"devices.{g}.link", "links", group.link) for g, group in scenario.devices.items()]
    profiles += [("server.profile", "servers", scenario.server.profile)]
    for ap_name, ap in scenario.network.access_points.items():
        profiles.append((f"network.access_points.{ap_name}.link", "links", ap.link))
        if ap.backhaul:
            profiles.append((f"network.access_points.{ap_name}.backhaul", "links", ap.backhaul))
    for field, kind, name in profiles:
        path = profile_path(kind, name)
        if path is not None:
            found[field] = path
    return found


def refuse_writing_inputs(out: str | Path, names: Iterable[str], inputs: Mapping[str, Any],
                          option: str = "-o", writer: str = "the run") -> None:
    """Refuse an output folder where a writer would write over or delete one of its
    input files: sflsim never replaces a file it reads (with or without ``--overwrite``).

    Args:
        out: the output folder.
        names: what the writer writes or deletes there, by path relative to ``out``
            (a folder: everything in it).
        inputs: ``{what it is: path}`` of the files the writer reads (``"the scenario"``,
            ``"conditions.availability"``; a folder of Parquet files counts as a file).
        option: how the user named ``out`` (``-o``).
        writer: what writes (``the run``, ``the sweep``), for the message.

    Raises:
        SflsimError: naming the input, its path and the ways on.
    """
    out = Path(out)
    sources = [(what, Path(path)) for what, path in inputs.items() if path is not None]
    if not sources:
        return
    for name in names:
        target = out / name
        for what, path in sources:
            if _covers(target, path):
                t, f = os.path.realpath(target), os.path.realpath(path)
                inside = ("" if t == f else f" (it is inside {target}, which {writer} rewrites)"
                          if f.startswith(t.rstrip(os.sep) + os.sep) else
                          f" (the same file as {target})")
                raise SflsimError(
                    f"{option} {out}: {writer} would write over or delete {what} {path}, a "
                    f"file it reads{inside}; sflsim never replaces its input files, with or "
                    f"without --overwrite: choose another {option}, or keep the file outside "
                    f"{out}")


def _covers(target: Path, path: Path) -> bool:
    """Whether writing or deleting ``target`` (a file, or a folder and all in it) would
    write over or delete ``path``."""
    t, p = os.path.realpath(target), os.path.realpath(path)
    if p == t or p.startswith(t.rstrip(os.sep) + os.sep):
        return True
    try:
        return os.path.samefile(target, path)  # a hard link: the same file by two names
    except OSError:
        return False


def clear_results(out: Path) -> None:
    """Remove the result files of an earlier run from ``out`` (only those, see
    :data:`RESULT_FILES`, and their leftover temporary files); other files stay."""
    for name in RESULT_FILES:
        path = out / name
        if path.is_dir():  # a streamed table: its round files (RunTables)
            for part in [*path.glob("round-*.parquet"), *path.glob(".round-*.tmp")]:
                part.unlink()
            with contextlib.suppress(OSError):  # something else is in there: it stays
                path.rmdir()
        else:
            path.unlink(missing_ok=True)
        for tmp in out.glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)


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
    ``pandas.read_parquet`` (or :func:`read_run_table`) reads a folder as one table, in
    round order. :meth:`add_round` holds a round's rows; :meth:`flush` writes the held
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
        return pa.table({col: pa.array(values, type=schema.field(col).type)
                         for col, values in columns.items()}, schema=schema)


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


def parquet_parts(path: Path) -> list[Path]:
    """The Parquet files of a table: a streamed table's round files in round order
    (:class:`RunTables`), or ``[path]`` for a single file."""
    return sorted(path.glob("round-*.parquet")) if path.is_dir() else [path]


def read_parquet_table(path: Path, columns: list[str] | None = None, **kwargs) -> pd.DataFrame:
    """A Parquet table, one file or a streamed folder (parts in round order), as a frame;
    ``kwargs`` as :func:`pyarrow.parquet.read_table` takes them (``filters``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = [pq.read_table(part, columns=columns, **kwargs) for part in parquet_parts(path)]
    if not parts:
        return pd.DataFrame(columns=columns or [])
    return pa.concat_tables(parts, promote_options="default").to_pandas()


def _write_csv_rows(f: IO[str], rows: Iterable[Sequence[object]]) -> None:
    # the stdlib writer formats like DataFrame.to_csv (floats by repr, minimal quoting)
    # at about twice its speed, which counts at 10,000 clients a round
    csv.writer(f, lineterminator="\n").writerows(rows)


def write_rows(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Write ``header`` and ``rows`` as a CSV file, atomically (see :func:`atomic_write`)."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            _write_csv_rows(f, [header])
            _write_csv_rows(f, rows)
    atomic_write(path, write)


def append_rows(path: Path, rows: Sequence[Sequence[object]]) -> None:
    """Append ``rows`` to the CSV file ``path`` (no header)."""
    if rows:
        with open(path, "a", newline="") as f:
            _write_csv_rows(f, rows)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``.

    Raises:
        OSError: as the file system raises it, naming ``path`` (not the temporary file).
    """
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; result files are for sharing
        write(Path(tmp))
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename in (None, str(path)) or exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def refuse_table_folder(out: Path, option: str = "-o") -> None:
    """Refuse ``out`` when it is, or lies inside, a run's streamed table
    (``events.parquet/``, ``clients.parquet/``): every file there is read as part of the
    table, so anything written there would break it.

    Raises:
        SflsimError: naming ``option``, the path and the table.
    """
    for folder in (out, *out.parents):
        if folder.name in TABLE_FOLDERS and folder.is_dir():
            raise SflsimError(f"{option} {out}: {folder} is a run's {folder.stem} table (a "
                              f"folder of Parquet files, every file of which is read as part "
                              f"of the table); writing there would break it: choose a path "
                              f"outside it (in {folder.parent}, say)")


def check_output_file(path: Path, option: str = "-o") -> None:
    """Refuse an output file path before any work: a run's table folder or a path in one
    (:func:`refuse_table_folder`), a folder, or a path whose folder cannot be made or
    written (:func:`check_output_folder`).

    Raises:
        SflsimError: naming ``option``, the path and what is in the way.
    """
    from sflsim.errors import SflsimError

    refuse_table_folder(Path(path), option)
    if path.is_dir():
        raise SflsimError(f"{option} {path} is a folder; give a file name, e.g. "
                          f"{path / 'compare.csv'}")
    check_output_folder(path.parent, option=f"{option} {path}: the folder")


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_table(path: Path, frame: pd.DataFrame) -> None:
    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_json(path: Path, data: dict) -> None:
    """Strict JSON: NaN and infinities (not JSON) become null."""
    write_text(path, json.dumps(_strict(data), indent=2, allow_nan=False) + "\n")


def mark_interrupted(out: Path) -> None:
    """Set ``"status": "interrupted"`` in ``out/summary.json`` (a run stopped without
    reaching its own end, see :mod:`sflsim.signals`); nothing when no round finished."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return
    if summary.get("status") == "running":
        write_json(out / "summary.json", {**summary, "status": "interrupted"})


def _strict(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # NumPy scalars
        value = value.item()  # type: ignore[union-attr]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_scenario(path: Path, scenario_data: dict) -> None:
    write_text(path, yaml.safe_dump(scenario_data, sort_keys=False))


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
        pandas.errors.EmptyDataError: the file is empty.
        SflsimError: a row has more cells than the header (a damaged table: rows of two
            runs, or of two versions of sflsim, in one file), naming the file.
    """
    from sflsim.errors import SflsimError

    kwargs.setdefault("dtype", dict.fromkeys(TEXT_COLUMNS, str))
    if _PANDAS_MAJOR < 3:  # pandas 2's default parser can be 1 ulp off (pandas 3's is exact)
        kwargs.setdefault("float_precision", "round_trip")
    try:
        return pd.read_csv(path, keep_default_na=False, na_values=[""], **kwargs)
    except pd.errors.ParserError as exc:
        detail = str(exc).removeprefix("Error tokenizing data. C error: ").strip()
        raise SflsimError(f"{path} cannot be read as a table ({detail}): its rows do not all "
                          f"have the header's columns; run that run again") from None


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
    return json.loads(summary_path.read_text()), read_result_csv(rounds_path)


def not_a_folder_of(folder: Path, kind: str, needs: str, make: str) -> str:
    """Why ``folder`` is not a ``kind`` (``"results directory"``, ``"sweep directory"``)
    that holds ``needs``: it does not exist, is a file, is the other kind (a sweep's
    points are results directories), or lacks the files (``make``: the command that
    makes one)."""
    if not folder.exists():
        return f"{folder} does not exist; give an sflsim {kind} (it holds {needs})"
    if not folder.is_dir():
        return f"{folder} is a file, not an sflsim {kind} (a folder that holds {needs})"
    if kind == "results directory" and (folder / "sweep.csv").is_file():
        points = sorted(p.name for p in (folder / "points").glob("p*") if p.is_dir())
        example = f", e.g. {folder / 'points' / points[0]}" if points else ""
        return (f"{folder} is a sweep directory, not one run's results; give one of its "
                f"points{example} (sweep.csv lists them)")
    if kind == "sweep directory" and (folder / "summary.json").is_file():
        return (f"{folder} is one run's results directory, not a sweep directory (it needs "
                f"{needs})")
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


def manifest(seed: int) -> dict:
    """Versions of Python and the main libraries, the seed and the host."""
    import numpy
    import simpy
    import torch

    import sflsim

    return {
        "sflsim": sflsim.__version__, "python": platform.python_version(),
        "torch": torch.__version__, "numpy": numpy.__version__, "simpy": simpy.__version__,
        "pandas": pd.__version__, "seed": seed, "host": platform.node(),
        "platform": platform.platform(), "torch_threads": torch.get_num_threads(),
    }
