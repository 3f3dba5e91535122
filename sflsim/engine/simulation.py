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
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Generator, Sequence
from typing import NamedTuple, Protocol

import numpy as np
import simpy

Process = Generator[simpy.Event, object, None]


def transfer_time_s(payload_bytes: float, bandwidth_bps: float, latency_s: float) -> float:
    """Time for one transfer: ``latency_s + 8 * payload_bytes / bandwidth_bps``.

    Example: 524,288 bytes over 8 Mbit/s with 10 ms latency take 0.534288 s.
    """
    return latency_s + 8.0 * payload_bytes / bandwidth_bps


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
    env.schedule(event, CUT_OFF_PRIORITY, delay_to(now, at_s))  # type: ignore[arg-type]
    return event


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


class BandwidthSchedule(Protocol):
    """Time-varying bandwidth (see :class:`sflsim.network.trace.BandwidthTrace`)."""

    def finish_time(self, start_s: float, bits: float) -> float: ...
    def mean_bps(self) -> float: ...


def _after(start_s: float, duration_s: float) -> float:
    return start_s + duration_s


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
    computed at request (:class:`Link`, :class:`FifoQueue`), in order.

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
        #: transfers under way, in order (:class:`Bookings`)
        self.waiting = Bookings(sim.env)

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
            return start_s + 8.0 * payload_bytes / self.bandwidth_bps
        return self.trace.finish_time(start_s, 8.0 * payload_bytes)

    def book(self, activity: str, client_id: int, payload_bytes: int, asked_s: float) -> float:
        """Book a transfer of ``payload_bytes`` asked at ``asked_s`` (now or later) and
        record it; returns the simulated time its last bit arrives (s). The times are
        :meth:`transfer`'s; no event is scheduled, so only work that nothing can
        interrupt (no round deadline) and that asks this link in time order may book."""
        start, done = self._serialise(payload_bytes, asked_s)
        arrived = asked_s + (done + self.latency_s - asked_s)  # as a timeout from asked_s ends
        self.sim.record(self.actor, activity, client_id, start, arrived, start - asked_s,
                        payload_bytes)
        return arrived


class FifoResource:
    """``capacity`` slots served first come, first served: ``simpy.Resource`` semantics
    (``with res.request() as req: yield req``), but a free slot is taken at once and a
    release hands the slot straight to the next waiter, so an uncontended request costs
    no scheduled event (``simpy.Resource`` schedules one for the request and one for
    the release). Waiting requests are granted in request order; a request abandoned
    while waiting (an interrupt) leaves the queue.

    Attributes:
        capacity: slots; users: slots held; queue: waiting requests, oldest first.
    """

    def __init__(self, env: simpy.Environment, capacity: int = 1):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.env, self.capacity = env, capacity
        self.users = 0
        self.queue: collections.deque[FifoRequest] = collections.deque()

    @property
    def count(self) -> int:
        return self.users

    def request(self) -> FifoRequest:
        return FifoRequest(self)


class FifoRequest(simpy.Event):
    """A request of a :class:`FifoResource`; yield it to wait for the slot, leave the
    ``with`` block to release it (or to give up waiting)."""

    def __init__(self, resource: FifoResource):
        super().__init__(resource.env)
        self.resource = resource
        if resource.users < resource.capacity and not resource.queue:
            resource.users += 1
            self._ok, self._value = True, None
            self.callbacks = None  # already processed: yielding it goes on at once
        else:
            resource.queue.append(self)

    def __enter__(self) -> FifoRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        res = self.resource
        if not self.triggered:  # still waiting: give up the place in the queue
            res.queue.remove(self)
        elif res.queue:  # the slot goes straight to the next in line
            res.queue.popleft().succeed()
        else:
            res.users -= 1


class FifoQueue:
    """A model that serves one job at a time, first come first served, whose jobs are
    the server's only work (e.g. Hetero-SplitEE Sequential's one shared server-side
    model, whose steps hold it one at a time): jobs queue for the model alone, not
    for it and then a server slot (see :meth:`Server.run_queued`).

    Computed rather than queued, as :meth:`Link.transfer`: jobs reach the model in
    simulated-time order, so a job that arrives at ``now`` starts at
    ``max(now, end of the job before)`` (what a FIFO resource of one slot gives) and
    costs one scheduled event, however long the queue. A job that is interrupted
    (a round deadline, or its client going offline) frees the model at that instant,
    and the jobs behind it move up (:class:`Bookings`).

    Attributes:
        free_at_s: simulated time at which the last booked job ends (s).
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.free_at_s = 0.0
        #: jobs under way, in order (:class:`Bookings`)
        self.waiting = Bookings(env)

    def book(self, duration_s: float, arrived_s: float | None = None) -> tuple[float, float]:
        """Book a job of ``duration_s`` arriving at ``arrived_s`` (default now); returns
        its (start, end) (s). Jobs must be booked in order of arrival."""
        now = self.env.now if arrived_s is None else arrived_s
        start = max(now, self.free_at_s)
        self.free_at_s = start + duration_s
        return start, now + (self.free_at_s - now)  # as a timeout from the arrival ends


class Server:
    """The server accelerator: ``slots`` concurrent jobs and a queue.

    Each job runs at ``flops_per_s`` (the sustained throughput of one job).

    Queue discipline: ``"fifo"`` (default) serves waiting jobs in order of
    request. ``"priority"`` serves the waiting job with the lowest priority
    number first, ties in order of request; a running job is never pre-empted.
    A job's priority is the ``priority`` passed to :meth:`request`, else
    ``priorities[client_id]``, else 0 (so without either, priority is FIFO).
    """

    def __init__(self, sim: Simulation, flops_per_s: float, slots: int = 1,
                 queue: str = "fifo", priorities: dict[int, int] | None = None):
        if queue not in ("fifo", "priority"):
            raise ValueError(f"queue must be 'fifo' or 'priority', got {queue!r}")
        self.sim, self.flops_per_s, self.queue = sim, flops_per_s, queue
        self.priorities = dict(priorities or {})
        self.resource: simpy.Resource | FifoResource = (
            simpy.PriorityResource(sim.env, capacity=slots)
                                         if queue == "priority"
                                         else FifoResource(sim.env, capacity=slots))

    def request(self, client_id: int | None = None, *, priority: int | None = None
                ) -> simpy.resources.resource.Request | FifoRequest:
        """A slot request (use as a context manager); see the class for priorities."""
        if self.queue == "fifo":
            return self.resource.request()
        if priority is None:
            priority = self.priorities.get(client_id, 0) if client_id is not None else 0
        return self.resource.request(priority=priority)  # type: ignore[call-arg]

    def run_queued(self, activity: str, client_id: int, flops: float, queue: FifoQueue) -> Process:
        """Wait for ``queue``'s model behind the jobs that came before, then compute
        ``flops`` on it; returns when the job is done. Records the wait as ``queue_s``.

        Interrupted (round deadline), the model is free from that instant (from the end
        of the job before, if this one was still waiting) and the part computed is
        recorded (``cut_off``).
        """
        env = self.sim.env
        arrived = env.now
        start = max(arrived, queue.free_at_s)
        duration = flops / self.flops_per_s
        done = queue.free_at_s = start + duration
        booking = queue.waiting.add(arrived, duration, start, done, env.active_process)
        try:
            yield from queue.waiting.wait(booking)
        except simpy.Interrupt:
            queue.free_at_s = queue.waiting.cut(booking, env.now, _after, queue.free_at_s)
            start = booking.start_s
            if env.now > start:
                self.sim.record("server", activity, client_id, start, env.now, start - arrived,
                                flops=flops * (env.now - start) / duration, cut_off=True)
            raise
        self.sim.record("server", activity, client_id, booking.start_s, env.now,
                        booking.start_s - arrived, flops=flops)

    def run(self, activity: str, client_id: int, flops: float, queued_since_s: float) -> Process:
        """Compute ``flops`` on an already-held slot; records queue wait since
        ``queued_since_s`` (interrupted: the part computed, ``cut_off``)."""
        yield from self.sim.busy("server", activity, client_id, flops, flops / self.flops_per_s,
                                 self.sim.now_s - queued_since_s)
