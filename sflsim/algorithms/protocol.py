"""The round protocol: the SimPy processes of a round, and what cuts them short.

:meth:`RoundProtocol.run_round` runs the algorithm's ``train_round`` under the round's
conditions: clients that sit the round out, straggler slowdowns, a round deadline,
participants going offline mid-round and over-commitment (``training.over_commit``:
the first ``keep_first`` clients to finish are kept, exactly that many; clients that
finish at the same instant are kept in the order they were sampled). Every cut-off
waits for :func:`~sflsim.engine.cut_off_at`, the one rule for the instant: work that
ends at the cut or before counts, work that ends after it is cut off. An algorithm
starts its clients' work with :meth:`RoundProtocol.run_clients` or :meth:`RoundProtocol.spawn`
and the server's own with :meth:`RoundProtocol.spawn_server`, so the cut-offs reach it.

:class:`RoundProtocol` is one part of :class:`~sflsim.algorithms.base.Algorithm` (its
``protocol``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import simpy

from sflsim.algorithms.context import SERVER_ID, Client
from sflsim.engine import Process, Simulation, cut_off_at


@dataclass(frozen=True)
class RoundConditions:
    """One round's conditions, drawn by the runner (:mod:`sflsim.run.loop`) and passed to
    :meth:`RoundProtocol.run_round`.

    Attributes:
        dropped: clients that sit the round out (dropouts, and the :attr:`absent`).
        slowdowns: ``{client_id: factor}``, each straggler's compute slowdown (>= 1;
            a client not named runs at 1).
        absent: ``{client_id: "not_sampled" | "offline"}``, clients not sampled or
            offline at the round's start (also in :attr:`dropped`).
        offline_at: ``{client_id: s}``, participants that go offline during the round
            and the simulated instant (s) they do.
        keep_first: over-commitment (``training.over_commit``): the clients kept, the
            first to finish their round's work; None: every participant.
        sampling_order: the round's participants in the order they were sampled;
            over-commitment keeps clients that finish at the same instant in this
            order, clients not in it after it, in id order (empty: id order).
        deadline_s: the round deadline (s), counted from :attr:`start_s`; None: none.
        start_s: the instant (s of simulated time) the deadline counts from; the
            runner passes the instant before it waits for a client to come online
            (:func:`sflsim.run.participation.wait_for_clients`), so the wait is part of
            the deadline. None: the round's start.
    """

    dropped: frozenset[int] = frozenset()
    slowdowns: Mapping[int, float] = field(default_factory=dict)
    absent: Mapping[int, str] = field(default_factory=dict)
    offline_at: Mapping[int, float] = field(default_factory=dict)
    keep_first: int | None = None
    sampling_order: tuple[int, ...] = ()
    deadline_s: float | None = None
    start_s: float | None = None


class RoundProtocol:
    """The processes of one round and its cut-offs (deadline, offline, over-commitment).

    Given the simulation, the clients, the algorithm's ``train_round`` (the round's
    process) and its ``leave_out`` hook (what over-commitment forgets); owns the round's
    conditions (:attr:`conditions`, set by :meth:`run_round`), each client's status of
    the round (:attr:`status`) and the round's bookkeeping.

    Attributes:
        conditions: the conditions of the round running or last run.
        status: per client this round: "trained", "dropped", "late" (cut off by the
            deadline), "offline" (went offline, or was offline at the start),
            "not_sampled" or "over_committed" (stopped, or its finished work left out,
            once ``conditions.keep_first`` others had finished).
    """

    def __init__(self, sim: Simulation, clients: list[Client],
                 train_round: Callable[[int], Process], leave_out: Callable[[int], None]):
        self.sim = sim
        self.clients = clients
        self._train_round = train_round
        self._leave_out = leave_out
        self.conditions = RoundConditions()
        self.status: dict[int, str] = {}
        self._round_procs: list[tuple[int, simpy.Process]] = []
        #: the processes that wait for this round's availability and over-commitment
        #: cut-offs (:meth:`_cut_off`); stopped when the round ends first
        self._cutters: list[simpy.Process] = []
        #: over-commitment's bookkeeping of the round (:meth:`_kept`): the clients kept;
        #: those whose work ended at the instant being settled; the event they wait on,
        #: triggered once the instant is settled; each client's place in the sampling order
        self._kept_ids: set[int] = set()
        self._finishing: list[int] = []
        self._settled: simpy.Event | None = None
        self._sampling_rank: dict[int, int] = {}

    def active_clients(self) -> list[Client]:
        """The clients that take part in this round (not in ``conditions.dropped``), in
        id order."""
        dropped = self.conditions.dropped
        return [c for c in self.clients if c.client_id not in dropped]

    def run_clients(self, body: Callable[[Client], Process]) -> Process:
        """Start ``body(client)`` for every client that did not drop out this round and
        was not cut off earlier in it (in id order, at its slowdown) and wait for all.

        A body cut off by the round deadline ends there (see :meth:`run_round`). A round
        that runs its clients twice (FedBABU's personalisation after its last round's
        training) leaves out the second time the clients whose first work was cut off
        or not kept (status "offline" or "over_committed"): they take no further part.
        """
        procs, cond = [], self.conditions
        for c in self.clients:
            if c.client_id in cond.dropped or self.status.get(c.client_id, "trained") != "trained":
                continue
            c.slowdown = cond.slowdowns.get(c.client_id, 1.0)
            work = body(c) if cond.keep_first is None else self._kept(c.client_id, body(c))
            procs.append(self.spawn(c, work))
        yield self.sim.env.all_of(procs)

    def _kept(self, client_id: int, work: Process) -> Process:
        """``work``, then over-commitment's count (``conditions.keep_first``): the client waits
        until everything else of the instant its work ended has happened, and the
        clients whose work ended at that instant are counted together
        (:meth:`_settle`): kept while fewer than :attr:`keep_first` are, in sampling
        order; the others are "over_committed" and what their work left is forgotten."""
        yield from work
        self._finishing.append(client_id)
        settled = self._settled
        if settled is None:  # the first to finish at this instant
            settled = self._settled = self.sim.env.event()
            self._cutters.append(self.sim.env.process(self._settle_at(self.sim.now_s)))
        try:
            yield settled
        except simpy.Interrupt:
            # a cut-off of this instant (the deadline, going offline) came first; the work
            # ended at it, so it counts (the inclusive rule): settle the instant now
            self._settle()

    def _settle_at(self, at_s: float) -> Process:
        """:meth:`_settle` at ``at_s`` (s), after everything else of that instant
        (:func:`~sflsim.engine.cut_off_at`), unless the round ends first."""
        try:
            yield cut_off_at(self.sim.env, at_s)
        except simpy.Interrupt:  # the round ended first
            return
        self._settle()

    def _settle(self) -> None:
        """Over-commitment's count of the clients whose work ended at this instant
        (:attr:`_finishing`), after everything else of the instant: in the round's
        sampling order (:attr:`sampling_order`; an exact tie is broken by it, never by
        the order of events), each is kept while fewer than :attr:`keep_first` clients
        are; the others get the status "over_committed" and the algorithm forgets what
        their work left (:meth:`leave_out`): over-commitment keeps a count, exactly
        :attr:`keep_first` clients, the first to finish. Once the count is reached,
        every other client's work of the round still running stops at this instant
        (status "over_committed"; the server's own work goes on). Then the clients
        waiting for the instant (:meth:`_kept`) go on."""
        settled, self._settled = self._settled, None
        finishing, self._finishing = self._finishing, []
        kept, keep, rank = self._kept_ids, self.conditions.keep_first, self._sampling_rank
        was_full = len(kept) >= keep
        for cid in sorted(finishing, key=lambda c: (rank.get(c, len(rank)), c)):
            if cid in kept:  # kept before (a round that runs its clients twice)
                continue
            if len(kept) < keep:
                kept.add(cid)
            else:
                self.status[cid] = "over_committed"
                self._leave_out(cid)
        if settled is not None and not settled.triggered:
            settled.succeed()
        if was_full or len(kept) < keep:
            return
        running = self.sim.env.active_process  # a process cannot interrupt itself
        for owner, proc in self._round_procs:
            if (owner not in kept and owner != SERVER_ID and proc.is_alive
                    and proc is not running):
                proc.interrupt(OVER_COMMITTED)

    def _start_cut_off(self, at_s: float, cause: str, stops: Callable[[int], bool]) -> None:
        """Start :meth:`_cut_off` as a process of this round (stopped if the round ends
        first)."""
        self._cutters.append(self.sim.env.process(self._cut_off(at_s, cause, stops)))

    def _cut_off(self, at_s: float, cause: str, stops: Callable[[int], bool]) -> Process:
        """At ``at_s`` (s), interrupt with ``cause`` every process of this round still
        running whose owner (a client id, :data:`SERVER_ID`) ``stops``.

        Every cut-off of the round protocol (the deadline in :meth:`run_round`, a client
        going offline, over-commitment's count in :meth:`_settle`) waits for
        :func:`~sflsim.engine.cut_off_at`, the one rule for the instant: work that ends
        at ``at_s`` or before counts, work that ends after it is cut off."""
        procs = self._round_procs  # this round's (a new list each round)
        try:
            yield cut_off_at(self.sim.env, at_s)
        except simpy.Interrupt:  # the round ended first
            return
        for owner, proc in procs:
            if stops(owner) and proc.is_alive:
                proc.interrupt(cause)

    @property
    def interruptible(self) -> bool:
        """Whether something may cut this round's work short: a round deadline, a
        participant going offline, or over-commitment (then work is simulated step by
        step, never planned or trained ahead)."""
        cond = self.conditions
        return cond.deadline_s is not None or bool(cond.offline_at) or (
            cond.keep_first is not None)

    def spawn(self, client: Client, work: Process) -> simpy.Process:
        """Start ``work`` done for ``client`` as a process of this round; at the round
        deadline (or when the client goes offline) it is interrupted, its unfinished
        work discarded and the client marked late (offline)."""
        if not self.interruptible:  # nothing will interrupt it
            return self.sim.env.process(work)
        proc = self.sim.env.process(self._until_deadline(client.client_id, work))
        self._round_procs.append((client.client_id, proc))
        return proc

    def spawn_server(self, work: Process) -> simpy.Process:
        """Start ``work`` the server does on its own as a process of this round (e.g.
        further steps on activations already received); at the round deadline it is
        interrupted and its unfinished work discarded, and no client is marked late."""
        if not self.interruptible:
            return self.sim.env.process(work)
        proc = self.sim.env.process(_until_interrupted(work))
        self._round_procs.append((SERVER_ID, proc))
        return proc

    def _round_until_deadline(self, round_: int) -> Process:
        try:
            yield from self._train_round(round_)
        except simpy.Interrupt:
            pass

    def _until_deadline(self, client_id: int, work: Process) -> Process:
        try:
            yield from work
        except simpy.Interrupt as stop:
            self.status[client_id] = {OFFLINE: "offline", OVER_COMMITTED: "over_committed"}.get(
                stop.cause, "late")

    def _take_offline(self) -> None:
        """Cut each participant off when it goes offline (``conditions.offline_at``): one
        :meth:`_cut_off` per instant, for the clients that go offline then."""
        offline_at = self.conditions.offline_at
        for t in sorted(set(offline_at.values())):
            self._start_cut_off(t, OFFLINE, lambda owner, t=t: offline_at.get(owner) == t)

    def run_round(self, round_: int, conditions: RoundConditions) -> Process:
        """The algorithm's ``train_round`` under ``conditions``; returns when it is done
        or, with ``conditions.deadline_s``, at ``conditions.start_s +
        conditions.deadline_s``, whichever comes first.

        Raises:
            ValueError: the deadline is before now (the runner never waits past it).

        At the deadline every process still running for a client (started by
        :meth:`run_clients` or :meth:`spawn`) is interrupted: work in progress is
        recorded up to the cut as ``cut_off``, nothing after it runs, and the client is
        "late". Then the round process itself is interrupted, so work it does on its
        own (e.g. the centralized baseline's server steps) stops too. Work that ends
        exactly at the deadline counts (:func:`~sflsim.engine.cut_off_at`, the rule of
        every cut-off of the round, also a client going offline and over-commitment's
        count; a client whose work ends at the deadline is counted by over-commitment as
        every client that ends then, :meth:`_settle`).
        """
        env = self.sim.env
        self.conditions = cond = conditions
        status = self.status = dict.fromkeys([c.client_id for c in self.clients], "trained")
        for cid in cond.dropped:
            if cid in status:
                status[cid] = "dropped"
        for cid, why in cond.absent.items():
            if why and cid in status:
                status[cid] = why
        self._round_procs, self._cutters = [], []
        self._kept_ids, self._finishing, self._settled = set(), [], None
        self._sampling_rank = {cid: i for i, cid in enumerate(cond.sampling_order)}
        try:
            deadline = None if cond.deadline_s is None else cut_off_at(
                env, (env.now if cond.start_s is None else cond.start_s) + cond.deadline_s)
            self._take_offline()
            proc = env.process(self._round_until_deadline(round_))
            if deadline is None:
                yield proc
                return
            yield proc | deadline
            if not proc.is_alive:
                return
            for _cid, p in self._round_procs:
                if p.is_alive:
                    p.interrupt("round deadline")
            proc.interrupt("round deadline")
            yield env.timeout(0)  # let the interrupted processes unwind at the deadline
        finally:
            for cutter in self._cutters:  # the round ended first
                if cutter.is_alive:
                    cutter.interrupt("round over")
            for c in self.clients:
                c.slowdown = 1.0
            self._round_procs, self._cutters = [], []
            self._finishing, self._settled = [], None  # nothing of the round left pending


#: the cause of the interrupt that stops a client going offline mid-round
OFFLINE = "offline"
#: the cause of the interrupt that stops a client once enough others finished
#: (``training.over_commit``)
OVER_COMMITTED = "over_committed"


def _until_interrupted(work: Process) -> Process:
    """``work``, ending quietly when interrupted (the round deadline)."""
    try:
        yield from work
    except simpy.Interrupt:
        pass
