"""Progress counts every kind of work a run does (``sflsim/work.py``): training batches,
server steps and test batches, each with the simulated instant its work completes; the
time left is estimated from the host time of each kind, so it includes the server's
steps and the evaluations, and the simulated time shown advances during a round."""

from __future__ import annotations

import re
import threading
from collections import Counter

import pytest

from sflsim.cli.progress_display import PlainProgress
from sflsim.config import validate_scenario
from sflsim.runner import run_scenario
from sflsim.work import BATCH, SERVER, TEST, Reporter, WorkMeter, WorkPlan


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A progress display that records every call, on a clock that advances one second
    per unit of work (bookkeeping between units takes no time)."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.meter = WorkMeter(self.clock)
        self.events: list[tuple] = []  # ("work", kind, at_s, round) and phase marks
        self.round = 0
        self.plan_given: WorkPlan | None = None
        self.sim_now = None
        self.at_client_phase_end: tuple[float, float] | None = None  # (remaining, share)

    def start(self, total_batches: int, rounds: int) -> None:
        self.total_batches = total_batches

    def plan(self, plan: WorkPlan) -> None:
        self.plan_given = plan
        self.meter.start(plan)

    def advance(self) -> None:  # never called: work_done is there
        raise AssertionError("advance called although work_done exists")

    def round_started(self, round_: int, batches: int, sim_time_s) -> None:
        self.round, self.sim_now = round_, sim_time_s
        self.events.append(("start", round_, sim_time_s()))
        self.meter.round_started(round_)

    def work_done(self, kind: str | None, sim_time_s: float, units: int = 1) -> None:
        if kind is not None:
            self.clock.now += units
        self.meter.done(kind, sim_time_s, units)
        self.events.extend([("work", kind, sim_time_s, self.round)] * units)
        expected = self.meter.expected_per_round().get(BATCH, 0)
        if (self.round == 1 and kind == BATCH and self.meter.in_round[BATCH] == expected
                and self.at_client_phase_end is None):
            self.at_client_phase_end = (self.meter.remaining_s(), self.meter.run_share())

    def evaluating(self, round_: int, test_samples: int) -> None:
        self.events.append(("evaluating", round_, self.sim_now()))
        self.meter.evaluating()

    def round_done(self, row: dict) -> None:
        self.events.append(("done", row["round"], row["sim_time_s"]))
        self.meter.round_done(row["round"])

    def units(self, round_: int) -> Counter:
        return Counter(e[1] for e in self.events if e[0] == "work" and e[3] == round_
                       and e[1] is not None)


def _run(tiny: dict, algorithm: str, rounds: int = 2) -> Recorder:
    tiny["algorithm"] = {"name": algorithm}
    tiny["training"]["rounds"] = rounds
    recorder = Recorder()
    run_scenario(validate_scenario(tiny), progress=recorder)
    return recorder


def test_the_time_left_at_the_end_of_the_client_phase_counts_server_and_test_work(tiny):
    """Hetero-SplitEE Sequential books its clients' steps first, then the server's: at
    the last training batch of round 1 of 2 the old count (training batches only) was
    half done, with 15 batches left. Every unit takes 1 s here: what is left is round
    1's 15 server steps and 3 test batches, then round 2's 15 + 15 + 3 units."""
    rec = _run(tiny, "hetero_splitee_sequential")
    plan = rec.plan_given
    assert plan.per_round == {BATCH: 15, SERVER: 15}  # 3 clients x 80 samples / batch 16
    assert plan.evaluated_rounds == (0, 1, 2)
    assert rec.units(0) == {TEST: 3}  # the untrained model: 3 clients x 1 test batch
    assert rec.units(1) == rec.units(2) == {BATCH: 15, SERVER: 15, TEST: 3}
    remaining, share = rec.at_client_phase_end
    assert remaining == pytest.approx(15 + 3 + 15 + 15 + 3)
    old_share = 15 / 30  # training batches done of the run's, as counted before
    assert share == pytest.approx(18 / 69)
    assert share < old_share - 0.2
    assert rec.meter.finished and rec.meter.remaining_s() == 0.0


def test_the_simulated_time_reported_grows_during_the_round(tiny):
    """The simulated clock at the last unit of work, not at the round's end: with the
    round booked ahead of the clock (the runner's clock stays at the round's start until
    the round ends) the units report the instants their work completes."""
    rec = _run(tiny, "hetero_splitee_sequential", rounds=1)
    start = next(e for e in rec.events if e[0] == "start")[2]
    end = next(e for e in rec.events if e[0] == "done")[2]
    during = [e[2] for e in rec.events if e[0] == "work" and e[3] == 1 and e[1] != TEST]
    assert start == 0.0 and end > 0.0
    mid = [t for t in during if start < t < end]
    assert len(set(mid)) > 10  # many distinct instants strictly inside the round
    assert max(during) == pytest.approx(end)
    # a display shows the clock reached so far: it grows, and never goes back
    shown, reached = [], 0.0
    for t in during:
        reached = max(reached, t)
        shown.append(reached)
    assert shown[len(shown) // 2] > start and shown == sorted(shown)


@pytest.mark.parametrize("algorithm", [
    "fedavg", "fedgh", "splitfed_v1", "mu_splitfed", "mergesfl", "fedsga", "centralized",
    "hetero_splitee_averaging"])
def test_every_family_reports_the_work_it_plans(tiny, algorithm):
    """The first round's expected units are the units the round reports (a time left
    that is right before any round has been seen), and every evaluation reports its
    test batches."""
    rec = _run(tiny, algorithm, rounds=1)
    assert rec.units(1) - Counter({TEST: rec.units(1)[TEST]}) == Counter(rec.plan_given.per_round)
    assert rec.units(0)[TEST] > 0 and rec.units(1)[TEST] == rec.units(0)[TEST]
    server_work = algorithm not in ("fedavg", "centralized")  # (FedGH trains a header)
    assert (SERVER in rec.plan_given.per_round) == server_work


def test_multisfl_server_steps_include_the_replay():
    """MultiSFL's replay adds server steps the plan does not know before the round: the
    meter expects the counts of the last round for the next ones."""
    meter = WorkMeter(Clock())
    meter.start(WorkPlan(rounds=3, per_round={BATCH: 10, SERVER: 10}, evaluated_rounds=()))
    meter.round_started(1)
    for kind, n in ((BATCH, 10), (SERVER, 12)):
        for _ in range(n):
            meter.done(kind, 1.0)
    meter.round_done(1)
    assert meter.expected_per_round() == {BATCH: 10, SERVER: 12}


def test_the_meter_charges_bookkeeping_and_leaves_out_the_warm_up():
    clock = Clock()
    meter = WorkMeter(clock)
    meter.start(WorkPlan(rounds=2, per_round={BATCH: 4, SERVER: 4}, evaluated_rounds=(0, 1, 2),
                         per_evaluation=0))
    for _ in range(2):  # the untrained model: 2 test batches, 3 s each (the first 10 s)
        clock.now += 10.0 if not meter.units[TEST] else 3.0
        meter.done(TEST)
    assert meter.remaining_s() is None  # no training batch measured yet
    meter.round_started(1)
    for t in (20.0, 2.0, 2.0, 2.0):  # the first batch warms torch up
        clock.now += t
        meter.done(BATCH, 1.5)
    assert meter.rate_s(BATCH) == pytest.approx(2.0)
    assert meter.rate_s(SERVER) == pytest.approx(2.0)  # not measured: the training kinds'
    # round 1: 4 server steps, 2 test batches; round 2: 4 + 4 units and 2 test batches
    assert meter.remaining_s() == pytest.approx(4 * 2 + 2 * 3 + 8 * 2 + 2 * 3)
    for _ in range(4):
        clock.now += 5.0
        meter.done(SERVER, 3.0)
    clock.now += 7.0  # aggregation
    meter.evaluating()
    for _ in range(2):
        clock.now += 3.0
        meter.done(TEST)
    clock.now += 1.0  # tables and checkpoint
    meter.round_done(1)
    assert meter.sim_time_s == 3.0
    # round 2: 4 batches at 2 s, 4 server steps at 5 s (the first one is left out), 2
    # test batches at 3 s, 8 s of bookkeeping
    assert meter.remaining_s() == pytest.approx(4 * 2 + 4 * 5 + 2 * 3 + 8)
    meter.round_started(2)
    assert [c[:3] for c in meter.round_counts()] == [(BATCH, 0, 4), (SERVER, 0, 4),
                                                     (TEST, 0, 2)]


def test_reports_from_other_threads_are_handed_on_from_the_run_thread():
    got: list[tuple[str | None, float, int, int]] = []
    reporter = Reporter(lambda kind, at, units=1: got.append(
        (kind, at, units, threading.get_ident())), None, lambda: 4.0)
    worker = threading.Thread(target=lambda: [reporter(TEST) for _ in range(3)])
    worker.start()
    worker.join()
    assert got == []  # held
    reporter(SERVER, 2.5)
    assert [g[:3] for g in got] == [(TEST, 4.0, 3), (SERVER, 2.5, 1)]
    assert {g[3] for g in got} == {threading.get_ident()}
    # held units share the wall time since the last report: the first one, left out of
    # the rate as torch's warm-up, is not the whole evaluation
    clock = Clock()
    meter = WorkMeter(clock)
    clock.now = 12.0
    meter.done(TEST, None, units=4)
    clock.now = 15.0
    meter.done(TEST, None)
    assert meter.rate_s(TEST) == pytest.approx((12.0 - 3.0 + 3.0) / 4)
    # a display of the simple kind gets advance() for training batches only
    batches = []
    simple = Reporter(None, lambda: batches.append(1), lambda: 0.0)
    for kind in (BATCH, SERVER, TEST, None, BATCH):
        simple(kind)
    assert len(batches) == 2


SIM = re.compile(r"  sim ([\d.]+) s  ")


def test_plain_lines_show_the_simulated_time_advancing_within_a_round(tiny):
    """Before, every line of a booked round said ``sim 0.0 s`` until the round's end."""
    lines: list[str] = []
    tiny["training"]["rounds"] = 1
    plain = PlainProgress(lines.append, interval_s=0.0, min_gap_s=0.0)
    run_scenario(validate_scenario(tiny), progress=plain)
    inside = [line for line in lines if line.startswith("round 1/1 (")]
    shown = [float(SIM.search(line)[1]) for line in inside]
    assert len(set(shown)) >= 3 and shown == sorted(shown)
    assert any(" server 15/15 " in line for line in inside)
    assert any(" test 3/3 " in line for line in inside)


def test_the_bar_follows_the_estimated_work_of_the_run(tiny):
    import io

    from rich.console import Console

    from sflsim.cli.progress_display import RichProgress

    tiny["training"]["rounds"] = 1
    shown = RichProgress(Console(file=io.StringIO(), width=200))
    descriptions: list[str] = []
    redraw = shown.redraw

    def record() -> None:
        redraw()
        if shown.task is not None:
            descriptions.append(shown.bar.tasks[0].description)

    shown.redraw = record
    with shown:
        run_scenario(validate_scenario(tiny), progress=shown)
    assert shown.bar.tasks[0].completed == pytest.approx(1000)
    assert any(re.search(r"round 1/1 \(\d+%\)  batch \d+/15  server \d+/15  test \d+/3  sim ", d)
               for d in descriptions), descriptions


def test_test_batches_of_host_threads_reach_the_display_together_from_the_run_thread(tiny):
    """FedAvg evaluates its test batches on host threads with ``parallel_clients`` > 1:
    the display gets them from the run's thread, at once, as one call."""
    tiny["evaluation"]["batch_size"] = 10  # 40 test images: 4 test batches
    tiny["training"]["parallel_clients"] = 2
    calls: list[tuple] = []

    class Calls(Recorder):
        def work_done(self, kind, sim_time_s, units=1):
            calls.append((kind, units, threading.get_ident(), self.round))
            super().work_done(kind, sim_time_s, units)

    tiny["algorithm"] = {"name": "fedavg"}
    rec = Calls()
    run_scenario(validate_scenario(tiny), progress=rec)
    tests = [(units, r) for kind, units, _, r in calls if kind == TEST]
    assert tests == [(4, 0), (4, 1)]
    assert {c[2] for c in calls} == {threading.get_ident()}
    assert rec.meter.expected_per_evaluation() == 4


def test_a_booked_timing_only_round_reports_its_batches_at_once(tiny):
    """A FedAvg-family timing-only round is booked for every client at once
    (:mod:`sflsim.execution.booked`): its batches are reported together, as many as the
    plan expects, done at the instant the last of them ends."""
    tiny["training"]["timing_only"] = True
    rec = _run(tiny, "fedavg", rounds=2)
    for round_ in (1, 2):
        assert rec.units(round_) == Counter(rec.plan_given.per_round)
    work = [e for e in rec.events if e[0] == "work" and e[3] == 1]
    assert len({e[2] for e in work}) == 1  # one report of 15 units
    done = next(e for e in rec.events if e[0] == "done" and e[1] == 1)[2]
    assert 0.0 < work[0][2] < done  # the last batch ends before the last upload arrives
