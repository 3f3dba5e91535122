"""Recorded split schedules: the cut layer every client used in every round of a run.

A finished run's clients table (one row per client and round: ``round``,
``client_id``, ``cut_layer``, ``status``, ...) records the cuts its split policy
chose. A timing-only run of the same scenario can follow them
(``algorithm.split_schedule`` of FedSGA) where the policy itself needs training.
The table is read from a results directory (``clients.parquet``, one file or a
streamed folder, or ``clients.csv``) or from the table itself (:func:`read_clients_table`). No torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from sflsim.errors import ConfigError
from sflsim.metrics.reading import (
    clients_table_path,
    parquet_parts,
    read_parquet_table,
    read_result_csv,
)
from sflsim.text import plural

#: columns a split schedule needs
SCHEDULE_COLUMNS = ("round", "client_id", "cut_layer")


def table_columns(path: str | Path) -> list[str]:
    """The column names of the clients table ``path`` names (:func:`clients_table_path`).

    Raises:
        FileNotFoundError / ValueError: see :func:`clients_table_path`; ValueError also
            for a file that cannot be read as a table.
    """
    p = clients_table_path(path)
    try:
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(parquet_parts(p)[0]).names)
        return list(read_result_csv(p, nrows=0).columns)
    except Exception as exc:  # pyarrow's and pandas' own errors: a damaged or foreign file
        raise ValueError(f"{str(p)!r} cannot be read as a table: {exc}") from None


def read_clients_table(path: str | Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A run's clients table, from its results directory or the file itself.

    Args:
        path: a results directory holding ``clients.parquet`` or ``clients.csv``, or a
            ``.parquet`` or ``.csv`` file of that table.
        columns: read only these (all when None).

    Raises:
        FileNotFoundError / ValueError: see :func:`clients_table_path`; ValueError also
            for a table without one of ``columns`` (naming them) or one that cannot be read.
    """
    p = clients_table_path(path)
    head = table_columns(p)
    missing = [c for c in columns or () if c not in head]
    if missing:
        raise ValueError(f"{str(p)!r} has no column {', '.join(missing)} (it has "
                         f"{', '.join(head)})")
    cols = list(columns) if columns is not None else None
    if p.suffix == ".parquet":
        return read_parquet_table(p, cols)
    return read_result_csv(p, usecols=cols)


def read_split_schedule(path: str | Path, *, rounds: int, num_clients: int,
                        candidates: Sequence[int], field: str = "algorithm.split_schedule"
                        ) -> dict[int, dict[int, int]]:
    """The cuts of rounds ``1..rounds`` recorded in a run's clients table, checked.

    Every client ``0..num_clients - 1`` needs one row in each of these rounds (rounds
    after ``rounds`` are ignored). A client that trained in a round (``status``
    "trained", or every row when the table has no ``status``) must have used one of
    ``candidates``; a client that dropped out or was cut off by the deadline may show
    the cut it held before (it may not have reached a decision).

    Args:
        path: see :func:`read_clients_table`.
        rounds: the run's ``training.rounds``.
        num_clients: the scenario's clients.
        candidates: the valid cut layers.
        field: the scenario field that named ``path``, for the error messages.

    Returns:
        ``{round: {client_id: cut layer}}`` for rounds ``1..rounds``.

    Raises:
        ConfigError: naming ``field``, the path, what is wrong and what is valid: no
            such table, a missing column, a missing or repeated (round, client) row, a
            client id that is not in the scenario, a trained client's cut that is not
            a candidate.
    """
    where = f"{field}: {str(path)!r}"
    cols = [*SCHEDULE_COLUMNS]
    try:
        has_status = "status" in table_columns(path)
        table = read_clients_table(path, [*cols, *(["status"] if has_status else [])])
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigError(f"{field}: {exc}; valid: a run's results directory or its "
                          f"clients table (columns {', '.join(SCHEDULE_COLUMNS)})") from None
    for col in cols:
        if not pd.api.types.is_integer_dtype(table[col]):
            raise ConfigError(f"{where}: column {col} holds {table[col].dtype} values, "
                              f"not whole numbers; valid: a clients table as a run writes it")
    recorded = sorted(set(table["round"]))
    table = table[(table["round"] >= 1) & (table["round"] <= rounds)]
    valid_ids = f"valid: 0 to {num_clients - 1}, one row per client and round"
    foreign = sorted(set(table["client_id"]) - set(range(num_clients)))
    if foreign:
        raise ConfigError(f"{where}: client ids {_some(foreign)} are not clients of this "
                          f"scenario ({plural(num_clients, 'client')}); it records another "
                          f"scenario's run; {valid_ids}")
    repeated = table[table.duplicated(["round", "client_id"])]
    if len(repeated):
        r, cid = int(repeated["round"].iloc[0]), int(repeated["client_id"].iloc[0])
        rows = int(((table["round"] == r) & (table["client_id"] == cid)).sum())
        raise ConfigError(f"{where}: round {r} has {rows} rows for client {cid}; {valid_ids}")
    schedule: dict[int, dict[int, int]] = {r: {} for r in range(1, rounds + 1)}
    for r, cid, cut in zip(table["round"], table["client_id"], table["cut_layer"]):
        schedule[int(r)][int(cid)] = int(cut)
    for r, cuts in schedule.items():
        if len(cuts) < num_clients:
            absent = sorted(set(range(num_clients)) - set(cuts))
            what = "no rows" if not cuts else f"no row for clients {_some(absent)}"
            held = (f"rounds {recorded[0]} to {recorded[-1]}" if recorded else "no round")
            raise ConfigError(f"{where}: round {r} has {what} (the table holds {held}); "
                              f"the schedule must cover rounds 1 to {rounds} "
                              f"(training.rounds) with a cut for every client; {valid_ids}")
    trained = table if not has_status else table[table["status"] == "trained"]
    allowed = set(candidates)
    bad = trained[~trained["cut_layer"].isin(allowed)]
    if len(bad):
        r, cid, cut = (int(bad[c].iloc[0]) for c in ("round", "client_id", "cut_layer"))
        raise ConfigError(f"{where}: client {cid} trained at cut_layer {cut} in round {r}, "
                          f"which is not a candidate cut; valid: "
                          f"{', '.join(map(str, sorted(allowed)))}")
    return schedule


def _some(values: Sequence[int], most: int = 5) -> str:
    """``values`` joined, the first ``most`` of them and a count of the rest."""
    shown = ", ".join(map(str, values[:most]))
    return shown if len(values) <= most else f"{shown} and {len(values) - most} more"
