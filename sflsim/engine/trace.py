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
    :class:`TraceEvent` is built only when a row is read).

    ``seq`` is a row's place in the whole trace. The runner writes each finished round
    to disk and may then :meth:`drop` its rows; :attr:`dropped` counts them, so ``seq``
    and :attr:`recorded` still count from the run's first activity.

    Reading: ``len(trace)`` rows held, ``trace[i]`` (or a slice) and iteration give
    :class:`TraceEvent`; :meth:`columns` gives the held rows from ``start`` as columns.
    """

    __slots__ = ("rows", "dropped")

    def __init__(self) -> None:
        #: held rows: ``TraceEvent`` fields without ``seq``, ``cut_off`` last
        self.rows: list[tuple] = []
        self.dropped = 0

    @property
    def recorded(self) -> int:
        """Activities recorded since the run began (held and dropped)."""
        return self.dropped + len(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def _event(self, i: int) -> TraceEvent:
        r = self.rows[i]
        return TraceEvent(*r[:9], seq=self.dropped + i, cut_off=r[9])

    def __getitem__(self, i: int | slice) -> TraceEvent | list[TraceEvent]:
        if isinstance(i, slice):
            return [self._event(k) for k in range(*i.indices(len(self.rows)))]
        return self._event(range(len(self.rows))[i])

    def __iter__(self):
        return (self._event(i) for i in range(len(self.rows)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, Trace)):
            return list(self) == list(other)
        return NotImplemented

    def sort_from(self, start: int) -> None:
        """Put the rows from ``start`` in order of completion (``end_s``; ties keep the
        order they were recorded in): rows recorded ahead of their end (a
        :meth:`Simulation.record` of work whose times are known in advance) take
        their place. Rows recorded as they end are in this order already."""
        tail = self.rows[start:]
        if any(a[5] > b[5] for a, b in zip(tail, tail[1:])):
            tail.sort(key=_end_s)
            self.rows[start:] = tail

    def columns(self, start: int = 0) -> dict[str, Sequence]:
        """The held rows from ``start`` as ``{field: values}`` (lists; ``seq`` an int64
        array) in :class:`TraceEvent` field order."""
        cols = list(zip(*self.rows[start:])) or [()] * len(_STORED)
        out = dict(zip(_STORED, map(list, cols)))
        first = self.dropped + start
        seq = np.arange(first, first + len(self.rows) - start, dtype=np.int64)
        return {f: seq if f == "seq" else out[f] for f in TraceEvent._fields}

    def drop(self) -> None:
        """Forget the held rows (written to disk); ``seq`` goes on counting."""
        self.dropped += len(self.rows)
        self.rows = []


def _end_s(row: tuple) -> float:
    return row[5]
