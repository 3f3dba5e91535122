"""The server: its accelerator's slots and queue (:class:`Server`), a first-come,
first-served resource (:class:`FifoResource`) and a model that serves one job at a
time (:class:`FifoQueue`).
"""

from __future__ import annotations

import collections

import simpy

from sflsim.engine.bookings import Bookings
from sflsim.engine.simulation import Process, Simulation


def _after(start_s: float, duration_s: float) -> float:
    return start_s + duration_s


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
