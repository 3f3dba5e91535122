"""A device's network link, one direction: FIFO, one transfer at a time, then the
propagation latency (:class:`Link`).
"""

from __future__ import annotations

from typing import Protocol

import simpy

from sflsim.engine.bookings import Bookings
from sflsim.engine.simulation import Process, Simulation


def transfer_time_s(payload_bytes: float, bandwidth_bps: float, latency_s: float) -> float:
    """Time for one transfer: ``latency_s + 8 * payload_bytes / bandwidth_bps``.

    Example: 524,288 bytes over 8 Mbit/s with 10 ms latency take 0.534288 s.
    """
    return latency_s + 8.0 * payload_bytes / bandwidth_bps


def serialised_s(start_s, payload_bytes, bandwidth_bps):
    """When ``payload_bytes`` serialised from ``start_s`` (s) at ``bandwidth_bps`` are all
    sent (s): ``start_s + 8 * payload_bytes / bandwidth_bps``. Floats or NumPy arrays
    alike, with the same float operations: :class:`Link` and the array booking of
    :mod:`sflsim.execution.booked` time a link with this one function."""
    return start_s + 8.0 * payload_bytes / bandwidth_bps


def arrival_s(asked_s, serialised_end_s, latency_s):
    """When a transfer asked at ``asked_s`` whose serialisation ends at
    ``serialised_end_s`` arrives (s): the latency after the last bit, as a timeout of
    that delay from ``asked_s`` ends (:meth:`Link.transfer`'s wait). Floats or NumPy
    arrays alike, as :func:`serialised_s`."""
    return asked_s + (serialised_end_s + latency_s - asked_s)


class BandwidthSchedule(Protocol):
    """Time-varying bandwidth (see :class:`sflsim.network.bandwidth_trace.BandwidthTrace`)."""

    def finish_time(self, start_s: float, bits: float) -> float: ...
    def mean_bps(self) -> float: ...


class Link:
    """One direction of a device's network link: FIFO, one transfer at a time.

    The sender holds the link for the serialisation time ``8 * bytes / bandwidth``;
    the propagation latency follows without holding it, so back-to-back
    transfers pipeline as on a real link. A lone transfer takes
    :func:`transfer_time_s`. With a ``trace`` (time-varying bandwidth, step-wise)
    the serialisation time integrates the bits over the trace's steps, and
    ``bandwidth_bps`` is the trace's time-weighted mean (for estimates only).
    """

    def __init__(self, sim: Simulation, actor: str, bandwidth_bps: float, latency_s: float,
                 trace: BandwidthSchedule | None = None):
        if bandwidth_bps <= 0:
            raise ValueError(f"bandwidth must be > 0 bit/s, got {bandwidth_bps}")
        self.sim, self.actor = sim, actor
        self.bandwidth_bps, self.latency_s = bandwidth_bps, latency_s
        self.trace = trace
        if trace is not None:
            self.bandwidth_bps = trace.mean_bps()
        #: simulated time at which the last booked serialisation ends (s)
        self.free_at_s = 0.0
        self._waiting: Bookings | None = None

    @property
    def waiting(self) -> Bookings:
        """Transfers under way, in order (:class:`Bookings`; made at the first transfer:
        a link that only books whole rounds, :meth:`book`, never needs one)."""
        if self._waiting is None:
            self._waiting = Bookings(self.sim.env)
        return self._waiting

    def transfer(self, activity: str, client_id: int, payload_bytes: int, *,
                 actor: str | None = None) -> Process:
        """Move ``payload_bytes``; returns when the last bit has arrived.

        ``actor`` overrides the actor recorded in the trace (default: the link's).

        FIFO with one transfer at a time, computed rather than queued: requests reach
        the link in simulated-time order, so a transfer asked at ``now`` starts at
        ``max(now, end of the previous serialisation)`` — what a SimPy ``Resource``
        of capacity 1 gives, in one event instead of five. Interrupted (a round
        deadline, or its client going offline), the link is free from that instant
        (or from the end of the transfer before, if it was still waiting), the
        transfers behind it move up to start from there (:class:`Bookings`), and the
        part serialised by then is recorded (``cut_off``, bytes pro rata of the
        serialisation time; all of them once only the latency is left).
        """
        env = self.sim.env
        asked = env.now
        start, done = self._serialise(payload_bytes, asked)
        booking = self.waiting.add(asked, payload_bytes, start, done, env.active_process)
        try:
            yield from self.waiting.wait(booking, self.latency_s)
        except simpy.Interrupt:
            self.free_at_s = self.waiting.cut(booking, env.now, self._end, self.free_at_s)
            start, done = booking.start_s, booking.done_s
            if env.now > start:  # serialisation had begun: the radio was busy
                sent = 1.0 if env.now >= done or done == start else (env.now - start) / (done - start)
                self.sim.record(actor=actor or self.actor, activity=activity,
                                client_id=client_id, start_s=start, end_s=self.sim.now_s,
                                queue_s=start - asked, payload_bytes=round(payload_bytes * sent),
                                cut_off=True)
            raise
        self.sim.record(actor=actor or self.actor, activity=activity, client_id=client_id,
                        start_s=booking.start_s, end_s=self.sim.now_s,
                        queue_s=booking.start_s - asked, payload_bytes=payload_bytes)

    def _serialise(self, payload_bytes: int, asked_s: float) -> tuple[float, float]:
        """Book the link for ``payload_bytes`` asked at ``asked_s``: (start, end of the
        serialisation) (s), first come, first served."""
        start = max(asked_s, self.free_at_s)
        done = self.free_at_s = self._end(start, payload_bytes)
        return start, done

    def _end(self, start_s: float, payload_bytes: int) -> float:
        """When ``payload_bytes`` serialised alone from ``start_s`` are all sent (s)."""
        if self.trace is None:
            return serialised_s(start_s, payload_bytes, self.bandwidth_bps)
        return self.trace.finish_time(start_s, 8.0 * payload_bytes)

    def book(self, activity: str, client_id: int, payload_bytes: int, asked_s: float) -> float:
        """Book a transfer of ``payload_bytes`` asked at ``asked_s`` (now or later) and
        record it; returns the simulated time its last bit arrives (s). The times are
        :meth:`transfer`'s; no event is scheduled, so only work that nothing can
        interrupt (no round deadline) and that asks this link in time order may book."""
        start, done = self._serialise(payload_bytes, asked_s)
        arrived = arrival_s(asked_s, done, self.latency_s)
        self.sim.record(self.actor, activity, client_id, start, arrived, start - asked_s,
                        payload_bytes)
        return arrived
