"""The host work a run reports as it goes, and the time left estimated from it.

An algorithm reports every unit of work it does on the host through the run's
callback (``RunContext.on_batch(kind, at_s, units=1)``, :class:`Reporter`), one call
per unit (or per ``units`` units done together: a round booked as arrays reports its
batches at once), naming its kind:

* :data:`BATCH`: a training batch: a client-side step (exit-head or local loss, a
  FedAvg local step, the client part of a split step), or Centralized's
  whole-model step; what ``training batches`` always counted;
* :data:`SERVER`: a server-side step on a client's activations (or a merged batch);
* :data:`TEST`: a test batch through one model (evaluation, the early-exit passes);
* ``None``: no work, only the simulated clock: the step at ``at_s`` has been
  reached (work trained ahead of the simulation, or booked rather than simulated
  step by step, reports its simulated instant this way).

``at_s`` is the simulated instant (s) at which the unit's work completes; by default
the simulated clock now. Work that is not reported (aggregation, a probe, writing
tables) is not lost: its host time goes to the next unit reported (or to the round's
bookkeeping, :class:`WorkMeter`).

:class:`WorkMeter` turns the reports into the time left: host seconds per unit of
each kind, measured as the run goes (the first unit of each kind, which warms torch
up and counts FLOPs, left out), times the units still to come (the round's
expected units from the algorithm's
:meth:`~sflsim.algorithms.base.Algorithm.work_per_round` until a round has been
seen, then the counts of the last round; the test batches of the last evaluation),
plus the per-round bookkeeping measured between the units.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

#: a training batch (a client-side step; Centralized's whole-model step)
BATCH = "batch"
#: a server-side step on a client's activations
SERVER = "server"
#: a test batch through one model (evaluation)
TEST = "test"
#: the kinds in the order progress lines show them
KINDS = (BATCH, SERVER, TEST)


def ignore_work(kind: str | None = BATCH, at_s: float | None = None, units: int = 1) -> None:
    """A work callback that reports nothing (a run without a progress display)."""


@dataclass
class WorkPlan:
    """The work a run expects to do from here on, for progress displays.

    Attributes:
        rounds: the run's rounds (``training.rounds``).
        first_round: the first round trained here (1, or the one after a checkpoint).
        per_round: expected units of each kind in one training round (the clients
            taking part), e.g. ``{"batch": 756, "server": 756}``; an estimate, which
            :class:`WorkMeter` replaces by the counts of each round once it is done.
        evaluated_rounds: the rounds evaluated from here on (0: the untrained model,
            before round 1), in order.
        per_evaluation: expected test batches of one evaluation; 0: unknown until one
            has run.
    """

    rounds: int
    first_round: int = 1
    per_round: dict[str, float] = field(default_factory=dict)
    evaluated_rounds: tuple[int, ...] = ()
    per_evaluation: float = 0.0


class Reporter:
    """The run's work callback (``RunContext.on_batch``): passes every unit on to
    ``work_done(kind, at_s)``, and training batches to ``advance()`` when there is no
    ``work_done`` (a :class:`sflsim.runner.Progress` of the simple kind).

    Calls from another thread (test batches evaluated on host threads) are held and
    handed on from the thread that made the reporter, at its next call or at
    :meth:`flush`, together (``work_done(kind, at_s, units=n)``: the wall time since the
    last report is theirs), so a display is only ever called from the run's thread.

    Args:
        work_done: ``work_done(kind, at_s, units=1)`` of the display, or None.
        advance: ``advance()`` of the display, or None.
        now_s: the simulated clock (s), for reports without ``at_s``.
    """

    def __init__(self, work_done: Callable[..., None] | None,
                 advance: Callable[[], None] | None, now_s: Callable[[], float]) -> None:
        self.work_done, self.advance, self.now_s = work_done, advance, now_s
        self.thread = threading.get_ident()
        self.lock = threading.Lock()
        self.held: Counter[str | None] = Counter()

    def __call__(self, kind: str | None = BATCH, at_s: float | None = None,
                 units: int = 1) -> None:
        if threading.get_ident() != self.thread:
            with self.lock:
                self.held[kind] += units
            return
        if self.held:
            self.flush()
        self.hand_on(kind, self.now_s() if at_s is None else at_s, units)

    def flush(self) -> None:
        """Hand on the reports held from other threads (on the run's thread)."""
        with self.lock:
            held, self.held = self.held, Counter()
        now = self.now_s()
        for kind, count in held.items():
            self.hand_on(kind, now, count)

    def hand_on(self, kind: str | None, at_s: float, units: int = 1) -> None:
        if self.work_done is not None:
            if units == 1:
                self.work_done(kind, at_s)
            else:
                self.work_done(kind, at_s, units=units)
        elif kind == BATCH and self.advance is not None:
            for _ in range(units):
                self.advance()


class WorkMeter:
    """Host time per kind of work and the time left, from the reports of a run.

    Call :meth:`start` when the run starts (its plan), :meth:`round_started` as each
    round begins, :meth:`done` for every unit, :meth:`evaluating` when a round's
    evaluation begins and :meth:`round_done` when a round ends. Each unit is charged
    the wall time since the report before it; the time before ``round_started``,
    ``evaluating`` and ``round_done`` is the round's bookkeeping (aggregation, tables,
    checkpoint). Per kind, the host seconds of a unit are the mean over its units but
    the first (torch warms up); a kind with fewer than two units takes the mean of the
    training kinds measured so far.

    Args:
        clock: wall clock in seconds (``time.monotonic``; tests pass their own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.start(WorkPlan(rounds=0))

    # ----- what happens -----------------------------------------------------------
    def start(self, plan: WorkPlan) -> None:
        """The run starts (now) with ``plan``."""
        self.plan = plan
        self.started = self.last = self.clock()
        #: the round in progress, or the last one done (0: the untrained model's
        #: evaluation, or nothing yet)
        self.round = 0
        #: whether :attr:`round` is in progress (False between rounds)
        self.in_progress = 0 in plan.evaluated_rounds
        self.finished = False
        self.units: Counter[str] = Counter()  # per kind, this run
        self.seconds: Counter[str] = Counter()
        self.first_s: dict[str, float] = {}  # per kind, the first unit's seconds
        self.in_round: Counter[str] = Counter()  # units of the round in progress
        self.round_seconds = 0.0  # host seconds of the round in progress so far
        self.per_round: dict[str, float] | None = None  # the last training round's counts
        self.per_evaluation: float | None = None  # the last evaluation's test batches
        self.overhead_s = 0.0  # bookkeeping of the round in progress
        self.overhead_total_s, self.overhead_rounds = 0.0, 0
        self.evaluating_now = self.in_progress
        self.sim_time_s = 0.0

    def round_started(self, round_: int) -> None:
        """Round ``round_`` (1-based) begins."""
        self._gap()  # drawing the round's conditions: nothing to speak of
        if self.round == 0 and self.in_round[TEST]:
            self.per_evaluation = float(self.in_round[TEST])  # the untrained model's
        self.round, self.in_progress = round_, True
        self.in_round, self.round_seconds = Counter(), 0.0
        self.overhead_s, self.evaluating_now = 0.0, False

    def evaluating(self) -> None:
        """The round's training is done; its evaluation begins."""
        gap = self._gap()
        self.overhead_s += gap
        self.round_seconds += gap
        self.evaluating_now = True

    def done(self, kind: str | None, sim_time_s: float | None = None, units: int = 1) -> None:
        """``units`` units of ``kind`` are done (None: none, only the simulated clock),
        their work complete at simulated time ``sim_time_s`` (s); the wall time since
        the last report is shared among them."""
        if sim_time_s is not None and sim_time_s > self.sim_time_s:
            self.sim_time_s = sim_time_s
        if kind is None or units <= 0:
            return
        gap = self._gap()
        if kind not in self.first_s:
            self.first_s[kind] = gap / units
        self.units[kind] += units
        self.seconds[kind] += gap
        self.in_round[kind] += units
        self.round_seconds += gap

    def round_done(self, round_: int) -> None:
        """Round ``round_`` ends (its row is written)."""
        self.overhead_s += self._gap()
        self.overhead_total_s += self.overhead_s
        self.overhead_rounds += 1
        trained = {k: float(n) for k, n in self.in_round.items() if k != TEST}
        if trained:  # (a round every client sat out says nothing about the next)
            self.per_round = trained
        if self.in_round[TEST]:
            self.per_evaluation = float(self.in_round[TEST])
        self.round, self.in_progress = round_, False
        self.in_round, self.round_seconds = Counter(), 0.0
        self.overhead_s, self.evaluating_now = 0.0, False
        self.finished = round_ >= self.plan.rounds

    def _gap(self) -> float:
        now = self.clock()
        gap, self.last = now - self.last, now
        return gap

    # ----- what is known ------------------------------------------------------------
    def rate_s(self, kind: str) -> float | None:
        """Host seconds per unit of ``kind`` (its first unit left out), or the mean over
        the training kinds when ``kind`` has fewer than two units; None when nothing
        has been measured yet."""
        n = self.units[kind]
        if n >= 2:
            return (self.seconds[kind] - self.first_s[kind]) / (n - 1)
        kinds = [k for k in self.units if k != TEST and self.units[k] >= 2]
        count = sum(self.units[k] - 1 for k in kinds)
        if not count:
            return None
        return sum(self.seconds[k] - self.first_s[k] for k in kinds) / count

    def expected_per_round(self) -> dict[str, float]:
        """Units of each training kind a round makes: the last round's counts, else the
        plan's."""
        return dict(self.per_round if self.per_round is not None else self.plan.per_round)

    def expected_per_evaluation(self) -> float:
        """Test batches of one evaluation: the last one's, else the plan's."""
        return self.per_evaluation if self.per_evaluation is not None \
            else self.plan.per_evaluation

    def round_counts(self) -> list[tuple[str, int, int | None]]:
        """(kind, units done, units expected or None when not known) in the round in
        progress, for the kinds it has work of, in :data:`KINDS` order (then any other)."""
        if not self.in_progress:
            return []
        expected = self.expected_per_round() if self.round >= 1 else {}
        if self.evaluating_now or self._round_evaluates(self.round):
            expected[TEST] = self.expected_per_evaluation()
        kinds = [k for k in KINDS if expected.get(k) or self.in_round[k]]
        kinds += sorted(k for k in {*expected, *self.in_round}
                        if k not in KINDS and (expected.get(k) or self.in_round[k]))
        return [(k, self.in_round[k], round(expected[k]) if expected.get(k) else None)
                for k in kinds]

    def _round_evaluates(self, round_: int) -> bool:
        return round_ in self.plan.evaluated_rounds

    def _left_in_round(self) -> float | None:
        """Host seconds left in the round in progress (None: not known yet)."""
        if self.finished or not self.in_progress:
            return 0.0
        left = 0.0
        if self.round >= 1:
            for kind, n in self.expected_per_round().items():
                rest = n - self.in_round[kind]
                if rest > 0:
                    rate = self.rate_s(kind)
                    if rate is None:
                        return None
                    left += rest * rate
            if self.overhead_rounds:
                left += max(0.0, self.overhead_total_s / self.overhead_rounds - self.overhead_s)
        if self._round_evaluates(self.round):
            rest = self.expected_per_evaluation() - self.in_round[TEST]
            if rest > 0:
                rate = self.rate_s(TEST)
                if rate is None:
                    return None
                left += rest * rate
        return left

    def _left_after_round(self) -> float | None:
        """Host seconds of the rounds after the one in progress (None: not known yet)."""
        if self.finished:
            return 0.0
        later = [r for r in range(max(self.round + 1, self.plan.first_round),
                                  self.plan.rounds + 1)]
        if not later:
            return 0.0
        per_round = 0.0
        for kind, n in self.expected_per_round().items():
            if n > 0:
                rate = self.rate_s(kind)
                if rate is None:
                    return None
                per_round += n * rate
        if self.overhead_rounds:
            per_round += self.overhead_total_s / self.overhead_rounds
        left = per_round * len(later)
        evaluations = sum(1 for r in later if self._round_evaluates(r))
        per_eval = self.expected_per_evaluation()
        if evaluations and per_eval > 0:
            rate = self.rate_s(TEST)
            if rate is None:
                return None
            left += evaluations * per_eval * rate
        return left

    def remaining_s(self) -> float | None:
        """Estimated wall seconds until the run's last round is done; None until the
        units measured allow an estimate."""
        now, after = self._left_in_round(), self._left_after_round()
        if now is None or after is None:
            return None
        return now + after

    def round_share(self) -> float | None:
        """Estimated share in [0, 1] of the round in progress done (host time), None
        when not known."""
        if self.round == 0 and not self.expected_per_evaluation():
            return None  # the first evaluation: its size is not known yet
        left = self._left_in_round()
        if left is None:
            return None
        total = self.round_seconds + left
        return 1.0 if total <= 0 else self.round_seconds / total

    def run_share(self) -> float | None:
        """Estimated share in [0, 1] of the run done since :meth:`start` (wall time),
        None when not known."""
        left = self.remaining_s()
        if left is None:
            return None
        elapsed = self.clock() - self.started
        return 1.0 if elapsed + left <= 0 else elapsed / (elapsed + left)


def counts_text(counts: Iterable[tuple[str, int, int | None]]) -> str:
    """``batch 300/756  server 120/756  test 0/48``: units done of those expected (only
    the units done where that is not known: ``test 12``)."""
    return "  ".join(f"{kind} {done}" + ("" if expected is None else f"/{expected}")
                     for kind, done, expected in counts)
