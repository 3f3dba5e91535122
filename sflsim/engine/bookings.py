"""Bookings: the transfers or jobs under way on a one-at-a-time resource, first come,
first served, whose times are computed when they are asked for (:class:`Bookings`).

A :class:`~sflsim.engine.Link` and a :class:`~sflsim.engine.FifoQueue` book their work
here, so one scheduled event serves each transfer or job, and the ones behind a
transfer or job cut short move up.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import simpy

from sflsim.engine.simulation import Process


class Booking:
    """One transfer or job of a :class:`Bookings` queue: asked at ``asked_s``, of
    ``size`` (bytes, or seconds of work), served from ``start_s`` to ``done_s`` (s), by
    ``process``, which waits for it."""

    __slots__ = ("asked_s", "size", "start_s", "done_s", "process")

    def __init__(self, asked_s: float, size: float, start_s: float, done_s: float,
                 process: simpy.Process | None):
        self.asked_s, self.size, self.start_s, self.done_s = asked_s, size, start_s, done_s
        self.process = process


#: the cause of the interrupt that tells a waiting :class:`Booking` its times moved
RETIMED = "retimed"


class Bookings:
    """The transfers (or jobs) under way on a one-at-a-time resource whose times are
    computed at request (:class:`~sflsim.engine.Link`, :class:`~sflsim.engine.FifoQueue`), in order.

    Their start and end are booked when they are asked for, first come, first served,
    so nothing is scheduled but each one's end. When one is cut short (an interrupt),
    those behind it move up: each starts at ``max(asked, end of the one before)``
    from the instant the cut one frees the resource, and its process, waiting in
    :meth:`wait`, is told (an interrupt with cause :data:`RETIMED`) and waits for its
    new end. A SimPy ``Resource`` of one slot gives the same times.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.queue: collections.deque[Booking] = collections.deque()

    def add(self, asked_s: float, size: float, start_s: float, done_s: float,
            process: simpy.Process | None) -> Booking:
        booking = Booking(asked_s, size, start_s, done_s, process)
        self.queue.append(booking)
        return booking

    def wait(self, booking: Booking, after_s: float = 0.0) -> Process:
        """Wait until ``after_s`` past the booking's end (a link's latency), following
        it when it moves up; then it leaves the queue."""
        env = self.env
        while True:
            try:
                # (the first wait as a timeout from the asking instant, as before Bookings)
                yield env.timeout(booking.done_s + after_s - booking.asked_s
                                  if env.now == booking.asked_s
                                  else booking.done_s + after_s - env.now)
                break
            except simpy.Interrupt as stop:
                if stop.cause != RETIMED:
                    raise  # cut short: the caller calls cut()
        self._leave(booking)

    def _leave(self, booking: Booking) -> None:
        if self.queue and self.queue[0] is booking:
            self.queue.popleft()
        elif booking in self.queue:
            self.queue.remove(booking)

    def cut(self, booking: Booking, now_s: float, end: Callable[[float, float], float],
            free_at_s: float) -> float:
        """``booking`` stops at ``now_s``: the bookings behind it move up (``end(start,
        size)`` gives a booking's end); returns the resource's new free time (s)."""
        queue = list(self.queue)
        self._leave(booking)
        if now_s >= booking.done_s:  # served already (a link's latency was left): no change
            return free_at_s
        behind = queue[queue.index(booking) + 1:] if booking in queue else []
        free = max(booking.start_s, now_s)  # waiting: the one before ends at its start
        for b in behind:
            start = max(b.asked_s, free)
            done = end(start, b.size)
            if (start, done) != (b.start_s, b.done_s):
                b.start_s, b.done_s = start, done
                if b.process is not None and b.process.is_alive \
                        and b.process is not self.env.active_process:
                    b.process.interrupt(RETIMED)
            free = done
        return free
