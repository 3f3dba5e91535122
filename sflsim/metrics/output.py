"""Output paths checked before any work: a folder or file that can be made and written,
outside a run's table folders, and never over a file the writer reads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sflsim.errors import SflsimError
from sflsim.metrics.streamed import TABLE_FOLDERS
from sflsim.provenance import INPUTS_FOLDER

#: every file ``sflsim run`` writes into its results directory
#: the traceback of a run that failed (``summary.json``: ``"status": "failed"``)
TRACEBACK_FILE = "traceback.txt"
#: the device, link and server profile files the run read, copied as they were
#: (``profiles/{devices,links,servers}/<name>.yaml``): ``sflsim check`` reads them first
PROFILES_FOLDER = "profiles"
#: INPUTS_FOLDER (:mod:`sflsim.provenance`): the other input files the run read, copied
#: as they were (``inputs/<field>/<file>``); a stored scenario finds them there when the
#: paths it names are gone
RESULT_FILES = ("scenario.yaml", "rounds.csv", "clients.parquet", "events.parquet", "clients.csv",
                "events.csv", "early_exit.csv", "summary.json", "manifest.json", "checkpoint.pkl",
                TRACEBACK_FILE, PROFILES_FOLDER, INPUTS_FOLDER)


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


def check_output_file(path: Path, option: str = "-o", example: str = "compare.csv",
                      reads: Mapping[str, str | Path | None] | None = None) -> None:
    """Refuse an output file path before any work: a run's table folder or a path in one
    (:func:`refuse_table_folder`), a file of a run's or a sweep's results
    (:func:`refuse_results_file`), one of the files the command reads (``reads``:
    ``{what it is: path}``), a folder (the message suggests ``example`` in it), or a path
    whose folder cannot be made or written (:func:`check_output_folder`).

    Raises:
        SflsimError: naming ``option``, the path and what is in the way.
    """
    path = Path(path)
    refuse_table_folder(path, option)
    if path.is_dir():
        raise SflsimError(f"{option} {path} is a folder; give a file name, e.g. "
                          f"{path / example}")
    refuse_results_file(path, option, example)
    for what, read in (reads or {}).items():
        if read is not None and _same_file(path, Path(read)):
            raise SflsimError(f"{option} {path} is {what}, a file this command reads; sflsim "
                              f"never replaces its input files: choose another {option}")
    # told as sflsim run tells it (``-o f/x.csv cannot be made: f is a file``); a path
    # not there yet is made and removed again to find out, as a folder would be
    check_output_folder(path.parent if path.exists() else path, option=option)


#: what a sweep writes at the top of its folder, beside ``points/``
SWEEP_WRITES = ("sweep.csv", "sweep.yaml", "points")


def refuse_results_file(path: Path, option: str = "-o", example: str = "compare.csv") -> None:
    """Refuse an output file that is, or lies in, a file a run or a sweep wrote in its
    results folder (``rounds.csv``, ``summary.json``, ``scenario.yaml``, ``profiles/``,
    ``sweep.csv``, ...: :data:`RESULT_FILES`,
    :data:`SWEEP_WRITES`): a table, a profile or a trace written there would replace
    what the run wrote, and the run could no longer be read or checked.

    Raises:
        SflsimError: naming ``option``, the path, the folder and a path beside it.
    """
    path = Path(path)
    for folder in path.parents:
        name = path.relative_to(folder).parts[0]
        is_run = sum((folder / f).is_file()  # two of a run's first files
                     for f in ("scenario.yaml", "rounds.csv", "summary.json")) >= 2
        is_sweep = (folder / "sweep.csv").is_file() or (
            (folder / "sweep.yaml").is_file() and (folder / "points").is_dir())
        kind = ("run's results" if is_run and name in RESULT_FILES else
                "sweep" if is_sweep and name in SWEEP_WRITES else None)
        if kind is not None:
            raise SflsimError(f"{option} {path}: {folder / name} belongs to the {kind} in "
                              f"{folder}, which sflsim reads; writing there would replace it: "
                              f"choose a path outside it (e.g. {folder.parent / example})")


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (the same path, or a hard or soft link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    a_id = _file_id(a)
    return a_id is not None and a_id == _file_id(b)


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
    # each input resolved and its file identity taken once (a sweep names thousands of
    # targets): a target covers an input that is it, is inside it, or is the same file
    # by another name (a hard link)
    sources = [(what, Path(path), os.path.realpath(path), _file_id(path))
               for what, path in inputs.items() if path is not None]
    if not sources:
        return
    for name in names:
        target = out / name
        t, t_id = os.path.realpath(target), _file_id(target)
        for what, path, f, f_id in sources:
            inside = f.startswith(t.rstrip(os.sep) + os.sep)
            if f == t or inside or (t_id is not None and t_id == f_id):
                why = (f" (it is inside {target}, which {writer} rewrites)" if inside else
                       "" if f == t else f" (the same file as {target})")
                raise SflsimError(
                    f"{option} {out}: {writer} would write over or delete {what} {path}, a "
                    f"file it reads{why}; sflsim never replaces its input files, with or "
                    f"without --overwrite: choose another {option}, or keep the file outside "
                    f"{out}")


def _file_id(path: str | Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path``, None where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
