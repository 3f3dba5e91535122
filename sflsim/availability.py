"""Client availability over simulated time, replayed from a CSV trace.

A trace (``conditions.availability: FILE``) has a header row and one row per interval
in which a device is online::

    device,online_from_s,online_until_s
    weak,0,120
    weak,300,inf
    4,0,45.5

``device`` is a device group of the scenario (every client of the group) or a client id
(clients are numbered from 0 in the order of ``devices``); a value that is both is
refused. Times are simulated seconds from the start of the run (bare, or with their unit:
``500 ms``, ``2 h``); ``online_until_s``
may be ``inf``. A device is online from ``online_from_s`` (included) to
``online_until_s`` (excluded); its intervals may overlap or touch (they are merged).
A client that no row names is always online; intervals of one client, from rows of
its group and of its id, are merged (their union). A relative path is looked for in the
working directory, then among the shipped scenarios (``scenarios/traces/`` holds an
example); the resolved scenario stores the absolute path.

In the round loop (:func:`sflsim.runner.round_participants`) a client offline at a
round's start is not sampled and sits the round out (status ``offline``); one that
goes offline during the round stops at that instant, as at a round deadline: work
finished by then is recorded (work that ends exactly at that instant counts, the rule
of every cut-off: :func:`sflsim.engine.cut_off_at`), the work in progress is recorded
as ``cut_off`` and discarded, and its status is ``offline``. This is how FedScale replays device
availability (Lai et al., "FedScale: Benchmarking Model and System Performance of
Federated Learning at Scale", ICML 2022, arXiv:2105.11367).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from pathlib import Path

from sflsim.errors import ConfigError
from sflsim.shipped import input_file
from sflsim.text import as_written, plural

#: the trace's columns, in order
COLUMNS = ("device", "online_from_s", "online_until_s")
#: the latest finite time a trace may name (s): about 317 years of simulated time
MAX_TIME_S = 1e10


class AvailabilityTrace:
    """Online intervals per client (see the module docstring).

    Args:
        intervals: ``{client_id: [(from_s, until_s), ...]}``, any order, may overlap.
        num_clients: clients of the scenario; ids not in ``intervals`` are always online.
    """

    def __init__(self, intervals: dict[int, list[tuple[float, float]]], num_clients: int):
        self.num_clients = num_clients
        #: per listed client: merged, sorted interval starts and ends (s)
        self.starts: dict[int, list[float]] = {}
        self.ends: dict[int, list[float]] = {}
        for cid, spans in intervals.items():
            merged: list[list[float]] = []
            for a, b in sorted(spans):
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            self.starts[cid] = [a for a, _ in merged]
            self.ends[cid] = [b for _, b in merged]

    def online(self, client_id: int, t_s: float) -> bool:
        """Whether ``client_id`` is online at ``t_s``."""
        return self.offline_at(client_id, t_s) is not None

    def offline_at(self, client_id: int, t_s: float) -> float | None:
        """The end of the online interval that holds ``t_s`` (``inf`` for one that never
        ends, and for a client that no row names), or None when offline at ``t_s``."""
        starts = self.starts.get(client_id)
        if starts is None:
            return math.inf
        k = bisect.bisect_right(starts, t_s) - 1
        if k >= 0 and t_s < self.ends[client_id][k]:
            return self.ends[client_id][k]
        return None

    def next_online_after(self, t_s: float) -> float | None:
        """The first instant after ``t_s`` at which a client that is offline at ``t_s``
        comes online, or None if none ever does."""
        later = [s for cid, starts in self.starts.items() for s in starts if s > t_s]
        return min(later, default=None)

    def gaps(self, until_s: float) -> list[tuple[float, float]]:
        """The spans before ``until_s`` (s of simulated time) in which no client is online,
        as ``(from_s, to_s)`` in time order (``to_s`` at most ``until_s``); none when
        some client is online at every instant (a client that no row names is always
        online)."""
        if len(self.starts) < self.num_clients:
            return []
        spans = sorted((a, b) for cid in self.starts
                       for a, b in zip(self.starts[cid], self.ends[cid]))
        gaps, reached = [], 0.0
        for a, b in spans:
            if a > reached:
                gaps.append((reached, min(a, until_s)))
            reached = max(reached, b)
            if reached >= until_s:
                break
        if reached < until_s:
            gaps.append((reached, until_s))
        return [(a, b) for a, b in gaps if b > a]


def read_availability(path: str | Path, groups: dict[str, Sequence[int]],
                      field: str = "conditions.availability") -> AvailabilityTrace:
    """Read and check an availability trace.

    Args:
        path: the CSV file (see the module docstring).
        groups: ``{device group: its client ids}`` of the scenario.
        field: the scenario field that names the file (for messages).

    Raises:
        ConfigError: the file is missing or unreadable, a column is missing or unknown,
            the file has no rows, a device is neither a group nor a client id, a time is
            not a number, is negative, NaN or over :data:`MAX_TIME_S`, or an interval does
            not end after it starts; each message names the file, the row and what would
            be valid.
    """
    import csv

    p = input_file(field, path, f"a CSV with columns {', '.join(COLUMNS)}")
    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" starts with a byte-order mark
        with open(p, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{field}: cannot read {path}: {exc}") from None
    header = [h.strip() for h in rows[0]] if rows else []
    if header != list(COLUMNS):
        raise ConfigError(f"{field}: {path} must have the header {','.join(COLUMNS)}, "
                          f"got {','.join(header) or 'an empty file'}")
    if not any(cell.strip() for row in rows[1:] for cell in row):
        raise ConfigError(f"{field}: {path} has a header and no rows; valid: at least one "
                          f"row (a device not named is always online: without rows the trace "
                          f"changes nothing, so leave {field} out)")
    num_clients = sum(len(ids) for ids in groups.values())
    intervals: dict[int, list[tuple[float, float]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{field}: {path} row {line}"
        if len(row) != len(COLUMNS):
            raise ConfigError(f"{where}: {plural(len(row), 'cell')}, expected {len(COLUMNS)} "
                              f"({', '.join(COLUMNS)})")
        device = row[0].strip()
        start, until = (_time(cell, f"{where}, {name}") for cell, name in zip(row[1:], COLUMNS[1:]))
        if math.isinf(start):
            raise ConfigError(f"{where}, online_from_s: {as_written(row[1])} is out of range; "
                              f"valid: a time from 0 s to {MAX_TIME_S:,.0f} s (inf only for "
                              f"online_until_s)")
        if until <= start:
            raise ConfigError(f"{where}: online_until_s ({until:g}) must be after "
                              f"online_from_s ({start:g})")
        for cid in _clients(device, groups, num_clients, where):
            intervals.setdefault(cid, []).append((start, until))
    return AvailabilityTrace(intervals, num_clients)


def _time(text: str, where: str) -> float:
    """A cell in seconds: bare, ``inf``, or with its unit (``500 ms``, ``2 h``)."""
    from sflsim.units import number_or_quantity

    try:
        value = number_or_quantity(text, "time")
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}; a bare number is seconds") from None
    if math.isnan(value) or value < 0 or (math.isfinite(value) and value > MAX_TIME_S):
        raise ConfigError(f"{where}: {as_written(text)} is out of range; valid: a time from "
                          f"0 s to {MAX_TIME_S:,.0f} s (about 317 years), or inf for a device that stays "
                          f"online")
    return value


def _clients(device: str, groups: dict[str, Sequence[int]], num_clients: int,
             where: str) -> Sequence[int]:
    is_id = device.isdigit()
    if device in groups:
        if is_id and int(device) < num_clients:
            raise ConfigError(f"{where}, device: {device!r} is both a device group and a client "
                              f"id; rename the group")
        return groups[device]
    if is_id and int(device) < num_clients:
        return [int(device)]
    raise ConfigError(f"{where}, device: {device!r} is neither a device group "
                      f"({', '.join(groups)}) nor a client id (0 to {num_clients - 1})")
