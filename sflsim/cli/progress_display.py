"""What ``sflsim run`` shows while a run trains: a bar on a terminal, plain lines elsewhere;
and the heartbeat of ``sflsim sweep`` (:class:`SweepHeartbeat`).

:class:`RichProgress` and :class:`PlainProgress` implement
:class:`sflsim.runner.Progress` (with its optional ``round_started``, ``evaluating``,
``plan`` and ``work_done``) and print the same line when a round ends. Both count every
kind of work the run reports (:mod:`sflsim.work`: training batches, server steps, test
batches) and estimate the time left from the host time each kind has taken so far
(:class:`~sflsim.work.WorkMeter`); the simulated time shown is the simulated clock at the
last unit of work done, so it advances as the round does. On a terminal
:class:`RichProgress` draws one bar over the run's estimated work. When standard output
is not a terminal (``sflsim run ... > log``, a pipe, a batch scheduler, CI) a bar shows
nothing, so :class:`PlainProgress` prints a line at a steady pace instead: one when
:data:`INTERVAL_S` seconds of wall time or a :data:`STEP` of the round's estimated work
have passed since the last line, whichever comes first, but those lines for work no
closer than :data:`MIN_GAP_S` (a round of a few seconds needs only its own line)::

    round 2/4 (40%)  batch 300/756  server 120/756  sim 31.2 s  elapsed 4 min 02 s  ETA 6 min 40 s

``(40%)`` is the estimated share of the round's host time done; ``batch``, ``server`` and
``test`` count the units of the round done of those expected (a test count while the
round has an evaluation to come).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from sflsim.text import plural
from sflsim.work import BATCH, WorkMeter, WorkPlan, counts_text

#: a plain progress line once this many seconds of wall time passed since the last line ...
INTERVAL_S = 30.0
#: ... or this fraction of the round's estimated work done since, whichever comes first ...
STEP = 0.1
#: ... but the latter not before this many seconds (s)
MIN_GAP_S = 5.0
#: the bar's line is redrawn at most this often (s)
REDRAW_S = 0.2


def round_line(row: dict, rounds: int) -> str:
    """The line printed when a round ends (a ``rounds.csv`` row; rich markup escaped).

    A row the runner reports again from the checkpoint of a resumed run (``row
    ["from_checkpoint"]``) is marked ``(from checkpoint)``: it was trained before."""
    acc = row["server_accuracy"]
    shown = "not evaluated" if math.isnan(acc) else (
        f"server acc {acc:.3f}  client acc {fmt(row['client_accuracy'], 3)}")
    return (f"round {row['round']}/{rounds}  sim {sim_seconds(row['sim_time_s'])} s  "
            f"wall {sim_seconds(row['wall_time_s'])} s  {shown}"
            + (f"  note: {escape(row['note'])}" if row.get("note") else "")
            + ("  (from checkpoint)" if row.get("from_checkpoint") else ""))


#: simulated seconds from which progress lines write them in scientific notation
HUGE_S = 1e15


def sim_seconds(seconds: float) -> str:
    """Simulated seconds as every progress line (and ``sflsim sweep``'s line per point)
    shows them: 3 significant digits, whole seconds from 100 s on, rounded half up as
    the number is written in decimal, trailing zeros dropped down to one decimal:
    ``0.25`` -> ``0.25`` (not ``0.2``), ``0.3125`` -> ``0.313``, ``7.5`` -> ``7.5``,
    ``31.25`` -> ``31.3``, ``1.0`` -> ``1.0``, ``1234.5`` -> ``1235``; from
    :data:`HUGE_S` on in scientific notation, ``1e30`` -> ``1.000e+30``."""
    if not math.isfinite(seconds):
        return str(seconds)
    if abs(seconds) >= HUGE_S:  # 31 million years: more digits than any float holds
        return f"{seconds:.3e}"
    exact = Decimal(repr(float(seconds)))
    if exact == 0:
        return "0.0"
    decimals = max(0, 2 - exact.adjusted())
    rounded = exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    if abs(rounded) >= 100:
        return f"{rounded.quantize(Decimal(1), rounding=ROUND_HALF_UP):f}"
    text = f"{rounded:f}"
    if "." in text:
        text = text.rstrip("0")
        text += "0" if text.endswith(".") else ""
    return text


def fmt(value: float | None, digits: int = 4) -> str:
    """``value`` with ``digits`` decimals; "n/a" for None or NaN (no exit heads)."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def duration(seconds: float) -> str:
    """``42 s``, ``4 min 05 s`` or ``2 h 07 min`` (``seconds`` rounded to the unit shown)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min"


class _Shown:
    """What both displays track: the rounds, the meter, the simulated clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.meter = WorkMeter(clock)
        self.rounds = self.round = 0
        self.planned = False  # a WorkPlan came (else one is made from the batches)
        self.sim_time_s: Callable[[], float] | None = None

    def start(self, total_batches: int, rounds: int) -> None:
        self.rounds, self.round, self.planned = rounds, 0, False
        self.meter.start(WorkPlan(rounds=rounds))

    def plan(self, plan: WorkPlan) -> None:
        """The run's expected work (:class:`sflsim.work.WorkPlan`), right after start."""
        self.rounds, self.planned = plan.rounds, True
        self.meter.start(plan)

    def round_started(self, round_: int, batches: int, sim_time_s: Callable[[], float]) -> None:
        if not self.planned:  # training batches only, as counted by the runner
            plan = self.meter.plan
            if not plan.per_round:
                plan.first_round, plan.per_round = round_, {BATCH: batches}
        self.round, self.sim_time_s = round_, sim_time_s
        self.meter.round_started(round_)

    def evaluating(self, round_: int, test_samples: int) -> None:
        self.meter.evaluating()

    def round_done(self, row: dict) -> None:
        if not row.get("from_checkpoint"):
            self.meter.round_done(int(row["round"]))

    def now_sim_s(self) -> float | None:
        """The simulated time (s) reached: the clock at the last unit of work done (or
        the runner's clock, if later); None before a round has started."""
        if self.sim_time_s is None:
            return None
        return max(self.meter.sim_time_s, self.sim_time_s())

    def share(self) -> float | None:
        """Share in [0, 1] of the round in progress done: of its estimated host time, or
        of its units of work until the host time per unit is known."""
        if not self.meter.in_progress:
            return None
        share = self.meter.round_share()
        if share is not None:
            return share
        counts = self.meter.round_counts()
        if not counts or any(n is None for _, _, n in counts):
            return None
        expected = sum(n for _, _, n in counts)
        return min(1.0, sum(d for _, d, _ in counts) / expected) if expected else None

    def status(self) -> str:
        """``round 2/4 (40%)  batch 300/756  server 120/756  sim 31.2 s``."""
        share = self.share()
        text = f"round {self.round}/{self.rounds}"  # 0: the untrained model's evaluation
        if share is not None:
            text += f" ({100 * share:.0f}%)"
        counts = counts_text(self.meter.round_counts())
        sim = self.now_sim_s()
        return (text + (f"  {counts}" if counts else "")
                + (f"  sim {sim_seconds(sim)} s" if sim is not None else ""))

    def eta(self) -> str:
        left = self.meter.remaining_s()
        return "estimating" if left is None else duration(left)


class RichProgress(_Shown):
    """Draws the runner's progress on a terminal: one bar over the run's estimated work
    (every kind, :mod:`sflsim.work`), the round's counts, the simulated time and the time
    left, and a line per round. Use as a context manager around the run.

    Args:
        console: where the bar is drawn.
        clock: wall clock in seconds (``time.monotonic``; tests pass their own).
    """

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                            TextColumn("ETA {task.fields[eta]}"), console=console,
                            transient=True)
        self.task: Any = None
        self.drawn = -math.inf

    def __enter__(self) -> RichProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def stop(self) -> None:
        """Stop drawing (the run is being ended from another thread)."""
        self.bar.stop()

    def start(self, total_batches: int, rounds: int) -> None:
        super().start(total_batches, rounds)
        self.task = self.bar.add_task(f"round 1/{rounds}", total=1000, eta="estimating")

    def plan(self, plan: WorkPlan) -> None:
        super().plan(plan)
        self.redraw()

    def round_started(self, round_: int, batches: int, sim_time_s: Callable[[], float]) -> None:
        super().round_started(round_, batches, sim_time_s)
        self.redraw()

    def evaluating(self, round_: int, test_samples: int) -> None:
        super().evaluating(round_, test_samples)
        self.redraw()

    def advance(self) -> None:
        self.work_done(BATCH, None)

    def work_done(self, kind: str | None, sim_time_s: float | None, units: int = 1) -> None:
        """``units`` units of ``kind`` done (None: the simulated clock only), their work
        complete at simulated time ``sim_time_s`` (s)."""
        self.meter.done(kind, sim_time_s, units)
        if self.clock() - self.drawn >= REDRAW_S:
            self.redraw()

    def round_done(self, row: dict) -> None:
        super().round_done(row)
        self.bar.console.print(round_line(row, self.rounds), highlight=False)
        if not row.get("from_checkpoint"):
            self.round = min(int(row["round"]) + 1, self.rounds)
        self.redraw()

    def redraw(self) -> None:
        """Show the meter's state now."""
        if self.task is None:
            return
        self.drawn = self.clock()
        share = self.meter.run_share()
        self.bar.update(self.task, description=self.status(), eta=self.eta(),
                        **({} if share is None else {"completed": 1000 * share}))


class PlainProgress(_Shown):
    """The runner's progress as plain lines, for output that is not a terminal (see the
    module docstring): round r/R with the estimated share of it done, the units of work
    of each kind done in the round of those expected, the simulated time reached, the
    wall time since the run started here, and the time left for the run, estimated from
    the host time each kind of work has taken (:class:`~sflsim.work.WorkMeter`: its
    first unit, which warms torch up, left out; ``estimating`` until it can say).

    Args:
        print_line: where lines go (one string each, without markup).
        interval_s: a line when this much wall time passed since the last line (s;
            default :data:`INTERVAL_S`) ...
        step: ... or this fraction of the round's estimated work done since (default
            :data:`STEP`), whichever comes first ...
        min_gap_s: ... but the latter not before this much time (s; default
            :data:`MIN_GAP_S`).
        clock: wall clock in seconds (``time.monotonic``; tests pass their own).
    """

    def __init__(self, print_line: Callable[[str], None], *, interval_s: float | None = None,
                 step: float | None = None, min_gap_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self.print_line = print_line
        # None: the module's settings as they are now (tests set them for the CLI)
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.step = STEP if step is None else step
        self.min_gap_s = MIN_GAP_S if min_gap_s is None else min_gap_s
        self.started = self.last_line = clock()
        self.share_at_line = 0.0  # the round's share done at the last line

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def stop(self) -> None:
        """Nothing to stop: lines are printed as they come."""

    def start(self, total_batches: int, rounds: int) -> None:
        super().start(total_batches, rounds)
        self.started = self.last_line = self.clock()

    def round_started(self, round_: int, batches: int, sim_time_s: Callable[[], float]) -> None:
        super().round_started(round_, batches, sim_time_s)
        self.share_at_line = 0.0

    def advance(self) -> None:
        self.work_done(BATCH, None)

    def work_done(self, kind: str | None, sim_time_s: float | None, units: int = 1) -> None:
        """``units`` units of ``kind`` done (None: the simulated clock only), their work
        complete at simulated time ``sim_time_s`` (s)."""
        self.meter.done(kind, sim_time_s, units)
        if kind is None or self.meter.finished:
            return
        now = self.clock()
        since = now - self.last_line
        if since >= self.interval_s:
            self._line(now)
        elif since >= self.min_gap_s:
            share = self.share()
            if share is not None and share - self.share_at_line >= self.step - 1e-9:
                self._line(now, share)

    def _line(self, now: float, share: float | None = None) -> None:
        self.print_line(self.line(now))
        self.last_line = now
        share = self.share() if share is None else share
        self.share_at_line = share if share is not None else self.share_at_line

    def evaluating(self, round_: int, test_samples: int) -> None:
        """A line as the round's evaluation begins: on a slow CPU it takes a while."""
        super().evaluating(round_, test_samples)
        sim = self.now_sim_s()
        shown = f"  sim {sim_seconds(sim)} s" if sim is not None else ""
        self.print_line(f"round {round_}/{self.rounds}  evaluating on "
                        f"{plural(test_samples, 'test image')}{shown}  elapsed "
                        f"{duration(self.clock() - self.started)}  ETA {self.eta()}")
        self.last_line = self.clock()

    def round_done(self, row: dict) -> None:
        super().round_done(row)
        self.print_line(round_line(row, self.rounds))
        self.last_line = self.clock()

    def line(self, now: float) -> str:
        """The progress line at wall time ``now`` (module docstring)."""
        return f"{self.status()}  elapsed {duration(now - self.started)}  ETA {self.eta()}"


#: while a sweep's points run, a line saying how far it is at least this often (s)
HEARTBEAT_S = 30.0


class SweepHeartbeat:
    """While a sweep's points run, a line every ``interval_s`` seconds, among the lines of
    the points that finish (however fast they come): points finished, the rounds each
    running point has completed (from its
    ``points/<id>/summary.json``, where this machine can read it: not with Ray), the
    time elapsed and the time left, extrapolated from the points and rounds done::

        [1/4 points done] running: p001 round 3/4; elapsed 6 min 10 s; ETA 12 min 20 s

    A thread prints it; every other line of the sweep goes through :meth:`say`, so lines
    never interleave. :meth:`stop` ends the thread.

    Args:
        print_line: where lines go.
        out: the sweep directory; None: running points are not shown.
        interval_s: the time between two heartbeat lines (s; default :data:`HEARTBEAT_S`).
    """

    def __init__(self, print_line: Callable[[str], None], out: Path | None = None,
                 interval_s: float | None = None) -> None:
        self.print_line, self.out = print_line, out
        self.interval_s = HEARTBEAT_S if interval_s is None else interval_s
        self.total = self.done = self.to_run = self.finished = 0
        self.start_s = self.last_line = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, total: int, skipped: int) -> None:
        """The sweep has ``total`` points, ``skipped`` finished before: beat for the rest."""
        self.total, self.done, self.to_run = total, skipped, total - skipped
        self.start_s = self.last_line = time.monotonic()
        if self.to_run and self.thread is None:
            self.thread = threading.Thread(target=self._beat, name="sflsim-sweep-heartbeat",
                                           daemon=True)
            self.thread.start()

    def point_done(self) -> None:
        """A point finished (however it ended)."""
        self.done += 1
        self.finished += 1

    def say(self, line: str) -> None:
        """Print ``line`` (not while the heartbeat prints)."""
        with self.lock:
            self.print_line(line)

    def stop(self) -> None:
        """End the heartbeat thread (it prints nothing more)."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def _beat(self) -> None:
        while not self.stopped.wait(min(self.interval_s, 1.0)):
            if time.monotonic() - self.last_line >= self.interval_s:
                self.say(self.line())
                self.last_line = time.monotonic()

    def line(self) -> str:
        """The heartbeat line now."""
        running = self._running()
        shown = ", ".join(f"{p} round {done}/{planned}" for p, done, planned in running)
        progress = self.finished + sum(done / planned for _, done, planned in running if planned)
        elapsed = time.monotonic() - self.start_s
        eta = (duration(elapsed * (self.to_run - progress) / progress)
               if 0 < progress <= self.to_run else "unknown")
        return (f"[{self.done}/{plural(self.total, 'point')} done] "
                f"running{': ' + shown if shown else ''}; elapsed {duration(elapsed)}; ETA {eta}")

    def _running(self) -> list[tuple[str, int, int]]:
        """(point, rounds completed, rounds planned) of the points still running whose run
        has written ``summary.json`` since the sweep started."""
        if self.out is None:
            return []
        found = []
        since = time.time() - (time.monotonic() - self.start_s)
        for summary_path in sorted((self.out / "points").glob("*/summary.json")):
            try:
                if summary_path.stat().st_mtime < since:
                    continue
                summary = json.loads(summary_path.read_text())
            except (OSError, ValueError):
                continue
            if summary.get("status") == "running":
                found.append((summary_path.parent.name, int(summary.get("rounds_completed", 0)),
                              int(summary.get("rounds_planned", 0))))
        return found


#: a sweep of at least this many points shows the checks of its points (about 10 ms each)
CHECKS_SHOWN_FROM = 500


class PointChecks:
    """Progress of the checks of a large sweep's points, each validated as a scenario
    (about 10 ms a point, so 100,000 points take minutes): from :data:`CHECKS_SHOWN_FROM`
    points, a line saying how many, then on a terminal a bar that goes when they are done.

    Pass it as :func:`sflsim.sweep.load_sweep`'s ``on_point``, inside a ``with`` block,
    so that a point refused midway stops the bar.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: Progress | None = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        """``done`` of the sweep's ``total`` points are checked."""
        if total < CHECKS_SHOWN_FROM:
            return
        if self.bar is None:
            self.console.print(f"checking the {plural(total, 'point', spec=',')} of the "
                               f"sweep ...", highlight=False)
            self.bar = Progress(BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                                TimeElapsedColumn(), console=self.console, transient=True,
                                disable=not self.console.is_terminal)
            self.bar.start()
            self.task = self.bar.add_task("", total=total)
        self.bar.update(self.task, completed=done)

    def __enter__(self) -> PointChecks:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

