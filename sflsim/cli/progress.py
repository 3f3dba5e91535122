"""What ``sflsim run`` shows while a run trains: a bar on a terminal, plain lines elsewhere;
and the heartbeat of ``sflsim sweep`` (:class:`SweepHeartbeat`).

:class:`RichProgress` and :class:`PlainProgress` implement
:class:`sflsim.runner.Progress` (and its optional ``round_started``) and print the same
line when a round ends. On a terminal :class:`RichProgress` draws one bar over all
training batches. When standard output is not a terminal (``sflsim run ... > log``, a
pipe, a batch scheduler, CI) a bar shows nothing, so :class:`PlainProgress` prints a
line at a steady pace instead: one when :data:`INTERVAL_S` seconds of wall time or a
:data:`STEP` of the round's batches have passed since the last line, whichever comes
first, but those lines for batches no closer than :data:`MIN_GAP_S` (a round of a few
seconds needs only its own line)::

    round 2/4  batch 300/750 (40%)  sim 31.2 s  elapsed 4 min 02 s  ETA 6 min 40 s
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sflsim.text import plural

#: a plain progress line once this many seconds of wall time passed since the last line ...
INTERVAL_S = 30.0
#: ... or this fraction of the round's batches trained since, whichever comes first ...
STEP = 0.1
#: ... but the latter not before this many seconds (s)
MIN_GAP_S = 5.0


def round_line(row: dict, rounds: int) -> str:
    """The line printed when a round ends (a ``rounds.csv`` row; rich markup escaped).

    A row the runner reports again from the checkpoint of a resumed run (``row
    ["from_checkpoint"]``) is marked ``(from checkpoint)``: it was trained before."""
    acc = row["server_accuracy"]
    shown = "not evaluated" if math.isnan(acc) else (
        f"server acc {acc:.3f}  client acc {fmt(row['client_accuracy'], 3)}")
    return (f"round {row['round']}/{rounds}  sim {row['sim_time_s']:.1f} s  "
            f"wall {row['wall_time_s']:.0f} s  {shown}"
            + (f"  note: {escape(row['note'])}" if row.get("note") else "")
            + ("  (from checkpoint)" if row.get("from_checkpoint") else ""))


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


class RichProgress:
    """Draws the runner's progress on a terminal: one bar over all training batches, a
    line per round. Use as a context manager around the run."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True)
        self.task: Any = None
        self.rounds = 0

    def __enter__(self) -> RichProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def stop(self) -> None:
        """Stop drawing (the run is being ended from another thread)."""
        self.bar.stop()

    def start(self, total_batches: int, rounds: int) -> None:
        self.rounds = rounds
        self.task = self.bar.add_task(f"round 1/{rounds}", total=total_batches)

    def advance(self) -> None:
        self.bar.advance(self.task)

    def round_done(self, row: dict) -> None:
        r = row["round"]
        self.bar.console.print(round_line(row, self.rounds), highlight=False)
        self.bar.update(self.task, description=f"round {min(r + 1, self.rounds)}/{self.rounds}")


class PlainProgress:
    """The runner's progress as plain lines, for output that is not a terminal (see the
    module docstring): round r/R, batches done of the round's, simulated time, wall time
    since the run started here, and the time left for the run, extrapolated from the
    batches done so far (the evaluations after each round included pro rata, once one
    has run).

    Args:
        print_line: where lines go (one string each, without markup).
        interval_s: a line when this much wall time passed since the last line (s;
            default :data:`INTERVAL_S`) ...
        step: ... or this fraction of the round's batches trained since (default
            :data:`STEP`), whichever comes first ...
        min_gap_s: ... but the latter not before this much time (s; default
            :data:`MIN_GAP_S`).
        clock: wall clock in seconds (``time.monotonic``; tests pass their own).
    """

    def __init__(self, print_line: Callable[[str], None], *, interval_s: float | None = None,
                 step: float | None = None, min_gap_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.print_line, self.clock = print_line, clock
        # None: the module's settings as they are now (tests set them for the CLI)
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.step = STEP if step is None else step
        self.min_gap_s = MIN_GAP_S if min_gap_s is None else min_gap_s
        self.total = self.done = self.rounds = 0
        self.round, self.round_total, self.round_done_batches = 0, 0, 0
        self.batches_since_line = 0  # training batches since the last line printed
        self.sim_time_s: Callable[[], float] | None = None
        self.started = self.last_line = clock()
        self.training_started: float | None = None  # when the first round began, here
        self.warm: tuple[float, int] | None = None  # (when, batches done) after the first

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def stop(self) -> None:
        """Nothing to stop: lines are printed as they come."""

    def start(self, total_batches: int, rounds: int) -> None:
        self.total, self.rounds, self.done = total_batches, rounds, 0
        self.started = self.last_line = self.clock()
        self.training_started = self.warm = None

    def round_started(self, round_: int, batches: int, sim_time_s: Callable[[], float]) -> None:
        self.round, self.round_total, self.round_done_batches = round_, batches, 0
        self.batches_since_line, self.sim_time_s = 0, sim_time_s
        if self.training_started is None:
            self.training_started = self.clock()

    def advance(self) -> None:
        self.done += 1
        self.round_done_batches += 1
        self.batches_since_line += 1
        now = self.clock()
        if self.warm is None:  # the first batch warms up torch (kernels, cost counting)
            self.warm = (now, self.done)
        since = now - self.last_line
        stepped = self.batches_since_line >= self.step * self.round_total - 1e-9
        if since >= self.interval_s or (stepped and since >= self.min_gap_s):
            self.print_line(self.line(now))
            self.last_line, self.batches_since_line = now, 0

    def evaluating(self, round_: int, test_samples: int) -> None:
        """A line as the round's evaluation begins: on a slow CPU it takes a while."""
        sim = f"  sim {self.sim_time_s():.1f} s" if self.sim_time_s is not None else ""
        self.print_line(f"round {round_}/{self.rounds}  evaluating on "
                        f"{plural(test_samples, 'test image')}{sim}  elapsed "
                        f"{duration(self.clock() - self.started)}")
        self.last_line, self.batches_since_line = self.clock(), 0

    def round_done(self, row: dict) -> None:
        self.print_line(round_line(row, self.rounds))
        self.last_line, self.batches_since_line = self.clock(), 0

    def line(self, now: float) -> str:
        """The progress line at wall time ``now``; the time left is extrapolated from the
        batches after the first one (loading, the untrained model's evaluation and the
        first batch, which warms torch up, happen once, so they are left out; until a
        second batch is done it reads ``estimating``)."""
        elapsed = now - self.started
        if self.warm is not None and self.done > self.warm[1] and self.total >= self.done:
            per_batch = (now - self.warm[0]) / (self.done - self.warm[1])
            eta = duration(per_batch * (self.total - self.done))
        else:
            eta = "estimating"
        share = (f" ({100 * self.round_done_batches / self.round_total:.0f}%)"
                 if self.round_total else "")
        sim = f"  sim {self.sim_time_s():.1f} s" if self.sim_time_s is not None else ""
        return (f"round {self.round}/{self.rounds}  batch {self.round_done_batches}/"
                f"{self.round_total}{share}{sim}  elapsed {duration(elapsed)}  ETA {eta}")


#: while a sweep's points run, a line saying how far it is at least this often (s)
HEARTBEAT_S = 30.0


class SweepHeartbeat:
    """While a sweep's points run, a line at least every ``interval_s`` seconds without
    another line: points finished, the rounds each running point has completed (from its
    ``points/<id>/summary.json``, where this machine can read it: not with Ray), the
    time elapsed and the time left, extrapolated from the points and rounds done::

        [1/4 points done] running: p001 round 3/4; elapsed 6 min 10 s; ETA 12 min 20 s

    A thread prints it; every other line of the sweep goes through :meth:`say`, so lines
    never interleave and each one resets the wait. :meth:`stop` ends the thread.

    Args:
        print_line: where lines go.
        out: the sweep directory; None: running points are not shown.
        interval_s: the longest silence (s; default :data:`HEARTBEAT_S`).
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
        """Print ``line`` (not while the heartbeat prints) and restart the wait."""
        with self.lock:
            self.print_line(line)
            self.last_line = time.monotonic()

    def stop(self) -> None:
        """End the heartbeat thread (it prints nothing more)."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def _beat(self) -> None:
        while not self.stopped.wait(min(self.interval_s, 1.0)):
            if time.monotonic() - self.last_line >= self.interval_s:
                self.say(self.line())

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
