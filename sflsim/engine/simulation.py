"""The discrete-event engine: SimPy processes for compute, links and the server.

Knows nothing of torch or of learning. Time is in seconds of simulated time.
Every activity is recorded as one :class:`TraceEvent` (who, what, start, end,
bytes, FLOPs), from which timelines, per-client times and energy are derived.
An activity interrupted part-way (a round deadline) is recorded up to the
interrupt, marked ``cut_off``, with its FLOPs and bytes pro rata of the time it ran:
the work was done (busy time, energy) even though its result is discarded.

Ties: events at the same simulated instant run in SimPy's insertion order;
algorithms start client processes in client-id order, so ties break by client
id and the same seed gives the same schedule. A cut-off (:func:`cut_off_at`: a round
deadline, a client going offline, over-commitment) comes after every other event of
its instant, so work that ends exactly at a cut-off counts and work ending after it
is cut off.

This module holds the simulation and the cut-off rule; the trace is
:mod:`sflsim.engine.trace`, links :mod:`sflsim.engine.link`, the server and its queues
:mod:`sflsim.engine.server`, the booked queues behind both :mod:`sflsim.engine.bookings`
(each imports this module, never the reverse; :mod:`sflsim.engine` gathers their names).
"""

from __future__ import annotations

import math
from collections.abc import Generator

import simpy

from sflsim.engine.trace import Trace

__all__ = ["CUT_OFF_PRIORITY", "Process", "Simulation", "cut_off_at", "delay_to"]

Process = Generator[simpy.Event, object, None]


class Simulation:
    """A SimPy environment plus the trace of everything that happened in it."""

    def __init__(self) -> None:
        self.env = simpy.Environment(initial_time=0.0)  # times are floats from the start
        self.trace = Trace()
        self.round = 0

    @property
    def now_s(self) -> float:
        return float(self.env.now)

    def record(self, actor: str, activity: str, client_id: int, start_s: float, end_s: float,
               queue_s: float = 0.0, payload_bytes: int = 0, flops: float = 0.0,
               cut_off: bool = False) -> None:
        """Append one activity of the current round to the trace (fields as
        :class:`TraceEvent`). An activity may be recorded before it ends, when
        nothing can change its times (the runner orders each round's rows by
        ``end_s`` when the round is over, :meth:`Trace.sort_from`)."""
        self.trace.rows.append((self.round, actor, activity, client_id, start_s, end_s, queue_s,
                                payload_bytes, flops, cut_off))

    def busy(self, actor: str, activity: str, client_id: int, flops: float, duration_s: float,
             queue_s: float = 0.0) -> Process:
        """Hold ``actor`` for ``duration_s`` computing ``flops`` (from now); record it, or,
        interrupted, the part done (``cut_off``, FLOPs pro rata) before re-raising."""
        env = self.env
        start = env.now
        try:
            yield env.timeout(duration_s)
        except simpy.Interrupt:
            ran = env.now - start
            if ran > 0:
                self.record(actor, activity, client_id, start, env.now, queue_s,
                            flops=flops * ran / duration_s, cut_off=True)
            raise
        self.trace.rows.append((self.round, actor, activity, client_id, start, env.now, queue_s,
                                0, flops, False))

    def compute(
        self, actor: str, activity: str, client_id: int, flops: float, flops_per_s: float,
        *, seconds: float | None = None,
    ) -> Process:
        """Busy ``actor`` for ``flops / flops_per_s`` seconds (or ``seconds`` if given)."""
        return self.busy(actor, activity, client_id, flops,
                         flops / flops_per_s if seconds is None else seconds)

    def run_until(self, process: Process) -> None:
        """Run the simulation until ``process`` has finished."""
        self.env.run(until=self.env.process(process))


#: SimPy priority of a cut-off event: after SimPy's URGENT (0) and NORMAL (1), so it is
#: the last event of its instant (:func:`cut_off_at`)
CUT_OFF_PRIORITY = 2


def cut_off_at(env: simpy.Environment, at_s: float) -> simpy.Event:
    """An event for a cut-off at ``at_s`` (s of simulated time): yield it, then interrupt
    the work to be cut off.

    This is the one rule for every cut-off (a round deadline, a client going offline,
    over-commitment; :mod:`sflsim.algorithms.base`): the cut is inclusive. The event is
    processed at exactly ``at_s``, after every other event of that instant, including
    those scheduled at ``at_s`` while the instant is processed (SimPy orders events of
    one instant by priority before insertion order; this one has
    :data:`CUT_OFF_PRIORITY`). So work that ends at ``at_s`` or before it completes and
    counts; work that ends after ``at_s`` is under way at the cut and is cut off; work
    that would start at ``at_s`` is cut before it has done anything.

    Raises:
        ValueError: ``at_s`` is before the current simulated time, or NaN.
    """
    now = env.now
    if not at_s >= now:
        raise ValueError(f"a cut-off at {at_s!r} s is not at or after now ({now!r} s)")
    event = simpy.Event(env)
    event._ok, event._value = True, None  # triggered, as simpy.Timeout is at creation
    delay = delay_to(now, at_s)
    if now + delay == at_s:
        env.schedule(event, CUT_OFF_PRIORITY, delay)  # type: ignore[arg-type]
    else:  # no float delay reaches at_s from now: scheduled from nearer (wait_until)
        def schedule_nearer() -> Process:
            yield env.timeout(delay_to(env.now, 0.75 * at_s))
            env.schedule(event, CUT_OFF_PRIORITY, at_s - env.now)  # type: ignore[arg-type]
        env.process(schedule_nearer())
    return event


def wait_until(env: simpy.Environment, at_s: float) -> Process:
    """Wait until ``at_s`` (s of simulated time) exactly, as the processes of booked work
    would have ended there (booked rounds). One timeout of :func:`delay_to` where a delay
    reaches ``at_s`` from now; where none does (``now + delay`` rounds past ``at_s`` for
    every float delay: ``now`` below ``at_s / 2`` with the wrong last bit), first a timeout
    to about three quarters of ``at_s``, from where ``at_s - now`` is exact (Sterbenz's
    lemma: ``now`` is within a factor 2 of ``at_s``) and so lands on it."""
    delay = delay_to(env.now, at_s)
    if env.now + delay != at_s:
        yield env.timeout(delay_to(env.now, 0.75 * at_s))
        delay = at_s - env.now
    yield env.timeout(delay)


def delay_to(now_s: float, at_s: float) -> float:
    """The delay (s) of an event scheduled at ``now_s`` that fires at ``at_s`` exactly:
    SimPy fires it at ``now_s + delay``, and ``now_s + (at_s - now_s)`` may miss ``at_s``
    by an ulp. For work booked ahead whose end must be the instant its processes would
    have ended (:func:`cut_off_at`, booked rounds); ``at_s`` before ``now_s`` gives 0."""
    delay = max(at_s - now_s, 0.0)
    for _ in range(4):
        landed = now_s + delay
        if landed == at_s or (delay == 0.0 and landed > at_s):
            break
        delay = math.nextafter(delay, math.inf if landed < at_s else 0.0)
    return delay
