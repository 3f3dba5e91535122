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

This module names the folder's files and clears, refuses or reads its state; the
work is in :mod:`sflsim.metrics.writing` (atomic writes), :mod:`sflsim.metrics.streamed`
(the streamed tables), :mod:`sflsim.metrics.reading` (reading a folder back),
:mod:`sflsim.metrics.output` (output paths checked before any work) and
:mod:`sflsim.metrics.lock` (one writer per folder), whose names it re-exports.
"""

from __future__ import annotations

import contextlib
import json
import platform
from pathlib import Path

import pandas as pd

from sflsim.metrics.lock import LOCK_FILE, check_not_held, hold_folder
from sflsim.metrics.output import (
    PROFILES_FOLDER,
    RESULT_FILES,
    TRACEBACK_FILE,
    check_output_file,
    check_output_folder,
    refuse_writing_inputs,
)
from sflsim.metrics.reading import (
    RUN_TABLES,
    TEXT_COLUMNS,
    TIMING_ONLY_NOTE,
    clients_table_path,
    is_timing_only,
    not_a_folder_of,
    parquet_parts,
    read_result,
    read_result_csv,
    read_run_table,
    run_table_columns,
    run_table_path,
    training_rounds,
)
from sflsim.metrics.streamed import RunTables
from sflsim.metrics.writing import (
    atomic_write,
    write_json,
    write_rows,
    write_scenario,
    write_table,
    write_text,
)
from sflsim.provenance import INPUTS_FOLDER

__all__ = [
    "LOCK_FILE", "RESULT_FILES", "RUN_TABLES", "PROFILES_FOLDER", "TEXT_COLUMNS", "TIMING_ONLY_NOTE",
    "TRACEBACK_FILE", "atomic_write", "check_not_held", "check_output_file",
    "check_output_folder", "clear_results", "clients_table_path", "existing_results",
    "hold_folder", "is_timing_only", "manifest", "mark_interrupted", "not_a_folder_of",
    "parquet_parts", "read_result", "read_result_csv", "read_run_table", "refuse_existing",
    "refuse_writing_inputs", "run_table_columns", "run_table_path", "run_writes", "RunTables",
    "training_rounds", "write_json", "write_rows", "write_scenario", "write_table", "write_text",
]



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


def refuse_other_kind(out: Path, kind: str) -> None:
    """Refuse a run (``kind="run"``) into a sweep's folder, or a sweep (``"sweep"``) into a
    run's: their files would mix, and ``check`` and ``compare`` would read one and miss
    the other.

    Raises:
        SflsimError: naming the folder, what it holds and what to do.
    """
    from sflsim.errors import SflsimError

    other = {"run": ("a sweep", ("sweep.yaml", "sweep.csv", "points")),
             "sweep": ("a run's results", ("summary.json", "rounds.csv"))}[kind]
    found = [name for name in other[1] if (out / name).exists()]
    if found:
        raise SflsimError(f"{out} holds {other[0]} ({', '.join(found)}); a {kind} goes in a "
                          f"folder of its own: choose another -o")


def run_writes(resume: bool = False, rewrites_scenario: bool = True) -> tuple[str, ...]:
    """The names in a results folder that a run writes or deletes
    (:data:`RESULT_FILES`); a resume leaves ``manifest.json``, the profiles the run began
    with and the CSV tables of older runs alone, and ``scenario.yaml`` too unless it
    changes ``training.rounds`` (``rewrites_scenario``)."""
    if not resume:
        return RESULT_FILES
    kept = {"manifest.json", "clients.csv", "events.csv", PROFILES_FOLDER, INPUTS_FOLDER,
            *(() if rewrites_scenario else ("scenario.yaml",))}
    return tuple(name for name in RESULT_FILES if name not in kept)


def clear_results(out: Path) -> None:
    """Remove the result files of an earlier run from ``out`` (only those, see
    :data:`RESULT_FILES`, and their leftover temporary files); other files stay."""
    for name in RESULT_FILES:
        path = out / name
        if name == PROFILES_FOLDER:  # the profile copies: their YAML files only
            for kind in ("devices", "links", "servers"):
                for copy in (path / kind).glob("*.yaml"):
                    copy.unlink()
                with contextlib.suppress(OSError):
                    (path / kind).rmdir()
            with contextlib.suppress(OSError):  # something else is in there: it stays
                path.rmdir()
        elif name == INPUTS_FOLDER and path.is_dir():  # the input copies: inputs/<field>/
            import shutil

            for field in path.iterdir():
                if field.is_dir():
                    shutil.rmtree(field)
            with contextlib.suppress(OSError):
                path.rmdir()
        elif path.is_dir():  # a streamed table: its round files (RunTables)
            for part in [*path.glob("round-*.parquet"), *path.glob(".round-*.tmp")]:
                part.unlink()
            with contextlib.suppress(OSError):  # something else is in there: it stays
                path.rmdir()
        else:
            path.unlink(missing_ok=True)
        for tmp in out.glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def mark_interrupted(out: Path) -> None:
    """Set ``"status": "interrupted"`` in ``out/summary.json`` (a run stopped without
    reaching its own end, see :mod:`sflsim.signals`); nothing when no round finished."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return
    if summary.get("status") == "running":
        write_json(out / "summary.json", {**summary, "status": "interrupted"})


def manifest(seed: int) -> dict:
    """Versions of Python and the main libraries, the seed, the host and its CPU model and
    flags, and the git commit of sflsim's source with whether it had uncommitted changes
    (:mod:`sflsim.provenance`; null outside a checkout)."""
    import numpy
    import simpy
    import torch

    import sflsim
    from sflsim.provenance import cpu_flags, cpu_model, source_commit

    commit, dirty = source_commit()
    return {
        "sflsim": sflsim.__version__, "python": platform.python_version(),
        "torch": torch.__version__, "numpy": numpy.__version__, "simpy": simpy.__version__,
        "pandas": pd.__version__, "seed": seed, "host": platform.node(),
        "platform": platform.platform(), "cpu": cpu_model(), "cpu_flags": cpu_flags(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(), "git_commit": commit, "git_dirty": dirty,
    }
