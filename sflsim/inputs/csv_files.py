"""The shape of a CSV table a user wrote (a fleet file), checked before pandas reads it."""

from __future__ import annotations

import csv
from pathlib import Path

from sflsim.errors import ConfigError
from sflsim.text import plural


def check_csv_shape(p: Path, where: str, needs: str) -> None:
    """Refuse a CSV file that is empty, whose header names a column twice, or with a row
    whose cells are more or fewer than the header's (pandas would say "No columns to
    parse from file", or shift cells into other columns or drop them without a word).

    Args:
        p: the file.
        where: what leads each message (``"fleet: fleet.csv"``).
        needs: what an empty file should hold, as the message says it.

    Raises:
        ConfigError: naming the file, the row (the header is row 1) and the counts.
    """
    with open(p, newline="", encoding="utf-8-sig") as f:
        rows = csv.reader(f, skipinitialspace=True)
        header = [c.strip() for c in next(rows, [])]
        if not any(header):
            raise ConfigError(f"{where} is empty; valid: {needs}")
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            raise ConfigError(f"{where} row 1: column {twice[0]!r} appears more than once; give "
                              f"each column once")
        for number, row in enumerate(rows, start=2):
            if row and len(row) != len(header):
                raise ConfigError(f"{where} row {number} has {plural(len(row), 'cell')} and the "
                                  f"header {len(header)} ({', '.join(header)}); give every row "
                                  f"one cell per column (empty cells are fine)")
