"""The event trace: one row per simulated activity (:class:`TraceEvent`, :class:`Trace`).

Every activity of the engine is recorded as one row (who, what, start, end, bytes,
FLOPs), from which timelines, per-client times and energy are derived. An activity
interrupted part-way (a round deadline) is recorded up to the interrupt, marked
``cut_off``, with its FLOPs and bytes pro rata of the time it ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class TraceEvent(NamedTuple):
    """One simulated activity (a named tuple: millions are made in large timing runs).

    Attributes:
        round: training round (1-based) the activity belongs to.
        actor: ``"client3"``, ``"client3:uplink"``, ``"client3:downlink"`` or ``"server"``.
        activity: what was done (``"client_train"``, ``"send_activations"``, ...).
        client_id: the client the work is for, or -1 for none.
        start_s: simulated start, after any queueing (s).
        end_s: simulated end (s).
        queue_s: time spent waiting for the resource before ``start_s`` (s).
        payload_bytes: bytes moved (transfers) else 0.
        flops: FLOPs computed (compute) else 0.
        seq: order in which the activity completed (ties broken by SimPy order).
        cut_off: the activity was interrupted at ``end_s`` (a round deadline); its
            ``flops`` and ``payload_bytes`` are the part done by then, pro rata of
            its duration (of the serialisation time, for transfers).
    """

    round: int
    actor: str
    activity: str
    client_id: int
    start_s: float
    end_s: float
    queue_s: float = 0.0
    payload_bytes: int = 0
    flops: float = 0.0
    seq: int = 0
    cut_off: bool = False


#: :class:`TraceEvent` fields as a :class:`Trace` stores them (``seq`` is the row's place)
_STORED = tuple(f for f in TraceEvent._fields if f != "seq")


class Trace:
    """The event trace: one row per simulated activity, in the order the activities
    completed, held as plain tuples (millions are made in large timing-only runs; a
    :class:`TraceEvent` is built only when a row is read), or as blocks of columns
    (:meth:`add_columns`: a whole round booked at once, built as arrays).

    ``seq`` is a row's place in the whole trace. The runner writes each finished round
    to disk and may then :meth:`drop` its rows; :attr:`dropped` counts them, so ``seq``
    and :attr:`recorded` still count from the run's first activity.

    Reading: ``len(trace)`` rows held, ``trace[i]`` (or a slice) and iteration give
    :class:`TraceEvent`; :meth:`columns` gives the held rows from ``start`` as columns.
    """

    __slots__ = ("rows", "dropped", "blocks", "in_blocks")

    def __init__(self) -> None:
        #: held rows after the last block: ``TraceEvent`` fields without ``seq``,
        #: ``cut_off`` last (:meth:`Simulation.record` appends here)
        self.rows: list[tuple] = []
        self.dropped = 0
        #: held rows before :attr:`rows`, as blocks of columns (``_STORED`` fields, each
        #: a NumPy array or another sequence that takes an index array, such as a
        #: ``pandas.Categorical``), and how many rows they hold
        self.blocks: list[dict[str, Sequence]] = []
        self.in_blocks = 0

    @property
    def recorded(self) -> int:
        """Activities recorded since the run began (held and dropped)."""
        return self.dropped + len(self)

    def __len__(self) -> int:
        return self.in_blocks + len(self.rows)

    def add_columns(self, columns: dict[str, Sequence]) -> None:
        """Append rows given as columns (every ``TraceEvent`` field but ``seq``, of one
        length: NumPy arrays, lists, or ``pandas.Categorical`` for text), in the order
        they were recorded (:meth:`sort_from` orders them by their ends)."""
        if not len(columns["end_s"]):  # no rows (every client sat the round out)
            return
        self._close_rows()
        self.blocks.append({f: columns[f] for f in _STORED})
        self.in_blocks += len(columns["end_s"])

    def _close_rows(self) -> None:
        """Move :attr:`rows` into a block of columns (before a block is appended)."""
        if self.rows:
            self.blocks.append(_tuple_columns(self.rows))
            self.in_blocks += len(self.rows)
            self.rows = []

    def _event(self, i: int) -> TraceEvent:
        if i >= self.in_blocks:
            r = self.rows[i - self.in_blocks]
            return TraceEvent(*r[:9], seq=self.dropped + i, cut_off=r[9])
        at = i
        for block in self.blocks:
            n = len(block["end_s"])
            if at < n:
                values = [_item(block[f][at]) for f in _STORED]
                return TraceEvent(*values[:9], seq=self.dropped + i, cut_off=values[9])
            at -= n
        raise IndexError(i)

    def __getitem__(self, i: int | slice) -> TraceEvent | list[TraceEvent]:
        if isinstance(i, slice):
            return [self._event(k) for k in range(*i.indices(len(self)))]
        return self._event(range(len(self))[i])

    def __iter__(self):
        return (self._event(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, Trace)):
            return list(self) == list(other)
        return NotImplemented

    def sort_from(self, start: int) -> None:
        """Put the rows from ``start`` in order of completion (``end_s``; ties keep the
        order they were recorded in): rows recorded ahead of their end (a
        :meth:`Simulation.record` of work whose times are known in advance) take
        their place. Rows recorded as they end are in this order already."""
        if start >= self.in_blocks:
            tail = self.rows[start - self.in_blocks:]
            if any(a[5] > b[5] for a, b in zip(tail, tail[1:])):
                tail.sort(key=_end_s)
                self.rows[start - self.in_blocks:] = tail
            return
        self._close_rows()
        before, tail_blocks = self._split_blocks(start)
        tail = tail_blocks[0] if len(tail_blocks) == 1 else _join(tail_blocks)
        end = np.asarray(tail["end_s"], dtype=float)
        if len(end) > 1 and (end[1:] < end[:-1]).any():
            order = np.argsort(end, kind="stable")
            tail = {f: _take(values, order) for f, values in tail.items()}
        self.blocks = [*before, tail]

    def _split_blocks(self, start: int) -> tuple[list[dict], list[dict]]:
        """The blocks cut at held row ``start``: (those before it, those from it)."""
        before, after, at = [], [], start
        for block in self.blocks:
            n = len(block["end_s"])
            if at >= n:
                before.append(block)
            elif at > 0:
                before.append({f: v[:at] for f, v in block.items()})
                after.append({f: v[at:] for f, v in block.items()})
            else:
                after.append(block)
            at = max(0, at - n)
        return before, after

    def columns(self, start: int = 0) -> dict[str, Sequence]:
        """The held rows from ``start`` as ``{field: values}`` in :class:`TraceEvent`
        field order: lists for rows recorded one by one, the block's own columns for
        rows added as columns (:meth:`add_columns`); ``seq`` an int64 array."""
        first = self.dropped + start
        seq = np.arange(first, first + len(self) - start, dtype=np.int64)
        if not self.blocks:
            cols = list(zip(*self.rows[start:])) or [()] * len(_STORED)
            out = dict(zip(_STORED, map(list, cols)))
        else:
            parts, at = [], start
            for block in self.blocks:
                n = len(block["end_s"])
                if at < n:
                    parts.append(block if at == 0 else {f: v[at:] for f, v in block.items()})
                at = max(0, at - n)
            if self.rows:
                parts.append(_tuple_columns(self.rows[at:]))
            if not parts:  # nothing held from start
                parts.append(dict(zip(_STORED, [[] for _ in _STORED])))
            out = parts[0] if len(parts) == 1 else _join(parts)
        return {f: seq if f == "seq" else out[f] for f in TraceEvent._fields}

    def drop(self) -> None:
        """Forget the held rows (written to disk); ``seq`` goes on counting."""
        self.dropped += len(self)
        self.rows, self.blocks, self.in_blocks = [], [], 0


def _end_s(row: tuple) -> float:
    return row[5]


def _tuple_columns(rows: list[tuple]) -> dict[str, list]:
    cols = list(zip(*rows)) or [()] * len(_STORED)
    return dict(zip(_STORED, map(list, cols)))


def _item(value: object) -> object:
    """A NumPy scalar as the Python number a row recorded one by one holds."""
    return value.item() if isinstance(value, np.generic) else value


def _take(values: Sequence, order: np.ndarray) -> Sequence:
    """``values`` reordered by the index array ``order``."""
    if isinstance(values, list):
        return [values[i] for i in order.tolist()]
    return values[order]  # type: ignore[index]


def _join(parts: list[dict[str, Sequence]]) -> dict[str, Sequence]:
    """Blocks of columns end to end: arrays of one kind joined as arrays, anything else
    as a list of Python values."""
    out = {}
    for f in _STORED:
        pieces = [p[f] for p in parts]
        if all(isinstance(v, np.ndarray) for v in pieces):
            out[f] = np.concatenate(pieces)
        else:
            out[f] = [_item(x) for v in pieces for x in (v if isinstance(v, list) else list(v))]
    return out
