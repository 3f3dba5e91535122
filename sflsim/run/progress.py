"""What a run reports while it works (:class:`Progress`, drawn by the CLI): the training
batches and units of work of each kind a round is expected to make, and the reporter that
hands the run's work on."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from sflsim.algorithms.base import Algorithm
from sflsim.work import Reporter, WorkPlan, ignore_work

if TYPE_CHECKING:
    from sflsim.checkpoint import RunState


class Progress(Protocol):
    """What the runner reports while it works (the CLI draws it).

    ``start`` comes first, with the training batches of the rounds still to run and the
    rounds of the run; ``advance`` after each training batch; ``round_done`` with each
    round's ``rounds.csv`` row as the round ends. A resumed run first reports the rows
    of the rounds in its checkpoint, each a copy with ``"from_checkpoint": True``.

    Optional: a ``round_started(round_, batches, sim_time_s)`` method, if the object has
    one, is called as each round begins, with the round (1-based), its training batches
    and a function that returns the simulated time (s) (``sflsim.cli.progress_display`` prints it);
    an ``evaluating(round_, test_samples)`` method is called when a round's training is done
    and its evaluation on ``test_samples`` test images begins.

    Every kind of work (:mod:`sflsim.work`): a ``plan(plan)`` method is called right after
    ``start`` with the run's :class:`~sflsim.work.WorkPlan` (the units of each kind a round
    is expected to make, the rounds evaluated); an object with a ``work_done(kind,
    sim_time_s, units=1)`` method gets every unit of work the run reports instead of
    ``advance``: training batches, server steps and test batches, each with the simulated
    time (s) at which its work completes (``kind`` None: no work, the simulated clock
    only; ``units`` > 1: units done on other threads, handed on together). Every call
    comes from the thread that called :func:`run_scenario`.
    """

    def start(self, total_batches: int, rounds: int) -> None: ...
    def advance(self) -> None: ...
    def round_done(self, row: dict) -> None: ...


def start_progress(progress: Progress | None, state: RunState) -> Reporter | None:
    """Hand the work of the run in ``state`` to ``progress``: sets ``ctx.on_batch``, starts
    ``progress`` with the training batches of the rounds still to run and the run's
    :class:`~sflsim.work.WorkPlan`, and reports the rounds in the checkpoint again.

    Returns:
        The run's :class:`~sflsim.work.Reporter`, None without ``progress`` (the work is
        then ignored).
    """
    ctx, algorithm, cfg, sim = state.ctx, state.algorithm, state.ctx.scenario, state.ctx.sim
    reporter: Reporter | None = None
    ctx.on_batch = ignore_work
    if progress is not None:
        reporter = Reporter(getattr(progress, "work_done", None), progress.advance,
                            lambda: sim.now_s)
        ctx.on_batch = reporter
        progress.start(batches_per_round(algorithm) * (cfg.training.rounds - state.round),
                       cfg.training.rounds)
        plan = getattr(progress, "plan", None)  # optional (see Progress)
        if plan is not None:
            plan(work_plan(algorithm, state.round, fresh=not state.round_rows))
        for row in state.round_rows:
            if row["round"] >= 1:  # round 0 is the untrained model, not a round done
                progress.round_done({**row, "from_checkpoint": True})
    return reporter


def batches_per_round(algorithm: Algorithm) -> int:
    """Training batches of a round, for progress bars: the algorithm's count for all
    clients, scaled to the clients sampled each round (``training.clients_per_round``)."""
    training, n = algorithm.scenario.training, len(algorithm.ctx.clients)
    return math.ceil(algorithm.batches_per_round() * training.participants(n) / max(n, 1))


def work_per_round(algorithm: Algorithm) -> dict[str, float]:
    """Units of work of each kind (:mod:`sflsim.work`) expected in a round: the
    algorithm's :meth:`~sflsim.algorithms.base.Algorithm.work_per_round` for all
    clients, scaled to the clients sampled each round (``training.clients_per_round``)."""
    training, n = algorithm.scenario.training, len(algorithm.ctx.clients)
    share = training.participants(n) / max(n, 1)
    return {kind: math.ceil(units * share) for kind, units in algorithm.work_per_round().items()
            if units}


def work_plan(algorithm: Algorithm, rounds_done: int, *, fresh: bool) -> WorkPlan:
    """The :class:`~sflsim.work.WorkPlan` of a run with ``rounds_done`` rounds in its
    checkpoint (0: none); ``fresh``: the untrained model is evaluated first (round 0).
    A timing-only run evaluates nothing."""
    cfg = algorithm.scenario
    rounds, every = cfg.training.rounds, cfg.evaluation.every_rounds
    evaluated: tuple[int, ...] = ()
    if not algorithm.ctx.timing_only:
        evaluated = ((0,) if fresh else ()) + tuple(
            r for r in range(rounds_done + 1, rounds + 1) if r % every == 0 or r == rounds)
    return WorkPlan(rounds=rounds, first_round=rounds_done + 1,
                    per_round=work_per_round(algorithm), evaluated_rounds=evaluated)
