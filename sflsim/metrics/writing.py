"""Result files written atomically: a temporary file beside the target, renamed into place.

Every file of a results folder but ``rounds.csv``'s appended lines goes through
:func:`atomic_write`, so a reader never sees half a file; CSV rows are written as
``DataFrame.to_csv`` writes them, JSON strictly (NaN and infinities as null).
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO

import pandas as pd
import yaml


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


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_table(path: Path, frame: pd.DataFrame) -> None:
    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_json(path: Path, data: dict) -> None:
    """Strict JSON: NaN and infinities (not JSON) become null."""
    write_text(path, json.dumps(_strict(data), indent=2, allow_nan=False) + "\n")


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
