"""The round loop of a run (:func:`run_rounds`): each round's conditions and participants,
its simulation, its aggregation and evaluation, and its rows, kept and written round by
round with the checkpoint; ``summary.json`` when the loop ends, however it ends.

Round 0: before round 1 a fresh run evaluates the untrained models, on the same test
subset and in the same way as after a round, and records them as the first row of
``rounds.csv`` (``round`` 0, ``sim_time_s`` 0, no work, bytes or energy, ``note``
"untrained model"), so a time-to-accuracy curve starts at time 0. Evaluation changes
no model (``tests/test_evaluation_side_effects.py``), so training is as without it.
Timing-only runs record the row without accuracies. Round 0 is not a completed round:
``rounds_completed`` and the progress callback count rounds from 1, and
the clients and events tables start at round 1.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from sflsim import checkpoint
from sflsim.algorithms.base import Algorithm, RoundConditions, RunContext
from sflsim.algorithms.early_exit import run_early_exit, sweeps_early_exit, test_passes
from sflsim.availability import read_availability
from sflsim.errors import DivergenceError
from sflsim.execution.workers import close_workers
from sflsim.metrics import records, results
from sflsim.run.host import gc_paused
from sflsim.run.participation import draw_conditions, draw_participants, wait_for_clients
from sflsim.run.progress import Progress, batches_per_round, start_progress
from sflsim.run.result import RunResult
from sflsim.run.seeds import child_seeds
from sflsim.run.summary import Totals, failure_record, summarize
from sflsim.signals import uninterrupted


def run_rounds(state: checkpoint.RunState, out: Path | None, progress: Progress | None,
               wall_start: float) -> RunResult:
    """The round loop from ``state.round + 1`` (see :func:`~sflsim.run.entry.run_scenario`)."""
    return RoundLoop(state, out, progress, wall_start).run()


def evaluation_samples(ctx: RunContext, seeds: dict[str, int]) -> tuple:
    """The evaluation's test samples: uint8 images, normalised a batch at a time; at most
    ``evaluation.max_test_samples`` of them, drawn with the ``test_subset`` seed."""
    cfg = ctx.scenario
    keep, n_test = None, len(ctx.data.y_test)
    if cfg.evaluation.max_test_samples and cfg.evaluation.max_test_samples < n_test:
        keep = np.sort(np.random.default_rng(seeds["test_subset"]).permutation(n_test)
                       [: cfg.evaluation.max_test_samples])
    return ctx.data.test_subset(keep)


class RoundLoop:
    """A run's rounds from ``state.round + 1``: what they share, set up once, and the steps
    of a round; :meth:`run` runs them."""

    def __init__(self, state: checkpoint.RunState, out: Path | None,
                 progress: Progress | None, wall_start: float) -> None:
        ctx, cfg = state.ctx, state.ctx.scenario
        self.state, self.out, self.progress, self.wall_start = state, out, progress, wall_start
        self.ctx, self.algorithm, self.sim, self.cfg = ctx, state.algorithm, ctx.sim, cfg
        self.seeds = child_seeds(cfg)
        self.x_test, self.y_test = evaluation_samples(ctx, self.seeds)
        self.end_layers = {c.client_id: c.end_layer for c in ctx.clients}
        self.reporter = start_progress(progress, state)
        self.round_started = getattr(progress, "round_started", None)  # optional (see Progress)
        self.evaluating = getattr(progress, "evaluating", None)  # optional (see Progress)

        self.round_rows = state.round_rows
        self.totals = Totals(self.round_rows)  # summary.json's sums, kept as rounds are added
        self.timing_only = ctx.timing_only
        self.availability = read_availability(cfg.conditions.availability, cfg.client_groups()) \
            if cfg.conditions.availability else None
        # who takes part is decided each round only with sampling or availability
        self.participation = (self.availability is not None
                              or cfg.training.clients_per_round is not None)
        self.table = records.ClientTable(ctx.clients, cfg.energy)  # energy rules: EnergyConfig
        # with a results directory each round's rows go to disk and leave memory
        self.tables = results.RunTables(out) if out is not None else None
        self.client_columns: list[dict] = []
        # activities of the completed rounds (resumed: before too)
        self.events_done = self.sim.trace.dropped
        if self.tables is not None:
            self.tables.keep_rounds(state.round)  # resumed: rounds after the checkpoint are redone
            self.tables.write_rounds(self.round_rows)
        self.passes = None  # the last round's test passes, for the early-exit sweep
        self.early_exit, self.early_exit_note = None, None
        self._activated: dict[int, int] | None = None  # see activated_params

    def run(self) -> RunResult:
        """Every round still to run, then the early-exit sweep; ``summary.json`` says how
        the loop ended (see :func:`~sflsim.run.entry.run_scenario`)."""
        status, note, failure = "interrupted", None, {}
        try:
            if not self.round_rows:  # a fresh run: round 0, the untrained model at simulated time 0
                self.round_zero()
            for r in range(self.state.round + 1, self.cfg.training.rounds + 1):
                row = self.one_round(r)
                if self.progress is not None:
                    self.progress.round_done(row)
            self.sweep_early_exit()
            status = "completed"
        except DivergenceError as exc:
            status, note = "diverged", str(exc)
            raise
        except Exception as exc:  # a defect or a broken host, not the user: keep what finished
            status, failure = "failed", failure_record(exc, self.sim.round, self.out)
            raise
        finally:
            close_workers(self.algorithm)  # training.parallel_backend: processes or ray
            summary = self.finish(status, note, failure)
        return RunResult(
            scenario=self.cfg, round_rows=self.round_rows, client_columns=self.client_columns,
            trace=self.sim.trace, summary=summary, output_dir=self.out,
            algorithm=self.algorithm, early_exit=self.early_exit,
        )

    def round_zero(self) -> None:
        """Round 0: the untrained models evaluated at simulated time 0 (see the module
        docstring)."""
        sim, cfg = self.sim, self.cfg
        accs = None if self.timing_only else self.algorithm.evaluate(self.x_test, self.y_test,
                                                                     cfg.evaluation.batch_size)
        if self.reporter is not None:
            self.reporter.flush()  # test batches of host threads
        self.round_rows.append(records.round_row(0, [], [], sim.now_s, sim.now_s,
                                                 time.perf_counter() - self.wall_start, accs,
                                                 self.end_layers))
        self.totals.add(self.round_rows[-1])

    def one_round(self, r: int) -> dict:
        """Round ``r``, simulated, trained, evaluated and kept; returns its ``rounds.csv`` row."""
        sim, algorithm = self.sim, self.algorithm
        sim.round, start_s, first_event = r, sim.now_s, len(sim.trace)
        if self.round_started is not None:
            self.round_started(r, batches_per_round(algorithm), lambda: sim.now_s)
        first_loss = len(algorithm.steps.losses)
        self.conditions = self.round_conditions(r, start_s)
        with gc_paused():  # a round makes millions of short-lived objects, no cycles to keep
            sim.run_until(algorithm.run_round(r, self.conditions))
        accs = None if self.timing_only else self.end_round(r)
        events, c_cols, row = self.round_record(r, start_s, first_event, first_loss, accs)
        self.keep(r, row, c_cols, events)
        return row

    def round_conditions(self, r: int, start_s: float) -> RoundConditions:
        """Round ``r``'s conditions: who drops out or slows down, and, with sampling or
        availability, who takes part (after waiting, from ``start_s``, for a client to
        come online if none is), and the round's deadline."""
        cfg, n = self.cfg, len(self.ctx.clients)
        dropped, slowdowns = draw_conditions(self.state.conditions_rng, cfg, n)
        deadline_s = cfg.conditions.round_deadline_s  # counts from start_s, the wait too
        if not self.participation:
            return RoundConditions(dropped=frozenset(dropped), slowdowns=slowdowns,
                                   deadline_s=deadline_s, start_s=start_s)
        # the round starts by waiting for an online client, if none is
        drawn = draw_participants(
            cfg, self.availability, self.seeds["sampling"], r,
            wait_for_clients(self.sim, self.availability, start_s,
                             None if deadline_s is None else start_s + deadline_s))
        return RoundConditions(
            dropped=frozenset(dropped) | frozenset(drawn.absent), slowdowns=slowdowns,
            absent=drawn.absent, offline_at=drawn.offline_at,
            # over-commitment: the first to finish are kept (ties: in drawn.order)
            keep_first=cfg.training.participants(n) if cfg.training.over_commit > 1 else None,
            sampling_order=tuple(drawn.order), deadline_s=deadline_s, start_s=start_s)

    def end_round(self, r: int) -> dict | None:
        """After round ``r``'s simulation of a trained run: aggregate, check the parameters,
        step the schedulers and evaluate when due; returns the accuracies, None when the
        round is not evaluated."""
        cfg, algorithm, x_test, y_test = self.cfg, self.algorithm, self.x_test, self.y_test
        accs = None
        if len(self.conditions.dropped) < len(self.ctx.clients):  # nothing to aggregate otherwise
            algorithm.end_round(r)
        algorithm.steps.check_parameters()
        algorithm.steps.step_schedulers()
        evaluate_now = r % cfg.evaluation.every_rounds == 0 or r == cfg.training.rounds
        if evaluate_now and self.evaluating is not None:
            self.evaluating(r, len(y_test))
        if r == cfg.training.rounds and sweeps_early_exit(algorithm):
            # the early-exit sweep reuses these passes over the test set
            accs, self.passes = test_passes(algorithm, x_test, y_test,
                                            cfg.evaluation.batch_size)
        elif evaluate_now:
            accs = algorithm.evaluate(x_test, y_test, cfg.evaluation.batch_size)
        if self.reporter is not None:
            self.reporter.flush()  # test batches of host threads
        return accs

    def round_record(self, r: int, start_s: float, first_event: int, first_loss: int,
                     accs: dict | None) -> tuple[dict, dict, dict]:
        """Round ``r``'s events (in time order), its clients-table columns and its
        ``rounds.csv`` row."""
        sim, algorithm, table = self.sim, self.algorithm, self.table
        sim.trace.sort_from(first_event)
        events = sim.trace.columns(first_event)
        losses = records.mean_losses(algorithm.steps.losses[first_loss:])
        c_cols = records.client_round_columns(
            r, events, table, start_s, sim.now_s, accs, losses, algorithm.cost_model.cut_layers,
            self.activated_params(), algorithm.protocol.status, self.conditions.slowdowns)
        extra = algorithm.client_columns(r)
        if extra:
            names = list(dict.fromkeys(k for cols in extra.values() for k in cols))
            nan = float("nan")
            for name in names:
                c_cols[name] = [extra.get(i, {}).get(name, nan) for i in table.ids]
        row = records.round_row(r, events, c_cols, start_s, sim.now_s,
                                time.perf_counter() - self.wall_start, accs, self.end_layers,
                                losses)
        growth = records.loss_growth_note(self.round_rows, row)
        if growth:
            row["note"] = "; ".join(n for n in (row["note"], growth) if n)
        return events, c_cols, row

    def activated_params(self) -> dict[int, int]:
        """Each client's activated parameters this round (``Algorithm.activated_params``).
        The base rule counts a client's own model and exit head, which a run never
        replaces: asked once per run; an algorithm with its own rule (a cut that changes,
        a frozen head) is asked every round."""
        algorithm = self.algorithm
        fixed = type(algorithm).activated_params is Algorithm.activated_params
        if fixed and self._activated is not None:
            return self._activated
        counts = {c.client_id: algorithm.activated_params(c.client_id) for c in self.ctx.clients}
        if fixed:
            self._activated = counts
        return counts

    def keep(self, r: int, row: dict, c_cols: dict, events: dict) -> None:
        """Keep round ``r``: its rows in memory or on disk, then the checkpoint and a
        ``summary.json`` that says "running"."""
        state, tables, out = self.state, self.tables, self.out
        with uninterrupted():  # Ctrl-C/SIGTERM wait until the round is on disk
            self.round_rows.append(row)
            self.totals.add(row)
            self.events_done += len(events["seq"])
            state.round, state.wall_time_s = r, time.perf_counter() - self.wall_start
            if tables is None:
                self.client_columns.append(c_cols)
            else:
                tables.add_round(r, c_cols, events)
                self.sim.trace.drop()
                # a trained round's tables go to disk at once, before the checkpoint
                # lists it; a timing-only run's rounds share a file (RunTables)
                if not self.timing_only or tables.due():
                    tables.flush(self.round_rows)
                    if not self.timing_only:  # the checkpoint: the truth on resume
                        checkpoint.save_checkpoint(out / checkpoint.CHECKPOINT, state)
                    # "running" until the run ends: a run killed outright says how far it got
                    results.write_json(out / "summary.json", summarize(
                        self.cfg, self.totals, "running", state.wall_time_s))

    def sweep_early_exit(self) -> None:
        """The early-exit sweep, after the last round, so training results are untouched
        (:mod:`sflsim.algorithms.early_exit`), written to ``early_exit.csv``."""
        if not self.timing_only:
            self.early_exit, self.early_exit_note = run_early_exit(
                self.algorithm, self.x_test, self.y_test, self.passes)
        if self.out is not None and self.early_exit is not None:
            results.write_table(self.out / "early_exit.csv", self.early_exit)

    def finish(self, status: str, note: str | None, failure: dict) -> dict:
        """``summary.json`` of the loop that ended with ``status``, written with the rows
        still held; returns it."""
        summary = summarize(self.cfg, self.totals, status, time.perf_counter() - self.wall_start)
        summary["events"] = self.events_done
        if self.state.rounds_before:  # resumed with another training.rounds
            summary["rounds_before"] = self.state.rounds_before
            summary["lr_schedule_horizon_rounds"] = self.algorithm.steps.schedule_horizon_rounds()
        if note is not None:
            summary["diverged"] = note
        if status == "failed":
            summary["error"] = failure
        if self.early_exit_note is not None:
            summary["early_exit"] = self.early_exit_note
        if self.out is not None:
            with uninterrupted():
                self.tables.flush(self.round_rows)  # the rounds held, if any, and rounds.csv
                results.write_json(self.out / "summary.json", summary)
        return summary
