"""``sflsim sweep SWEEP.yaml``: run every point of a sweep; one table of all of them."""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sflsim.cli.common import console, err_console, user_errors
from sflsim.cli.progress import duration
from sflsim.errors import SflsimError
from sflsim.shipped import scenario_path
from sflsim.signals import EXIT_INTERRUPTED, GRACE_S, stop_on_signals
from sflsim.text import plural

if TYPE_CHECKING:
    import pandas as pd


class ExecutorName(str, Enum):
    process = "process"
    ray = "ray"


#: while points run, a line saying how far the sweep is at least this often (s of wall time)
HEARTBEAT_S = 30.0


class PrintProgress:
    """One line per finished point (id, status, accuracy, times), and while points run,
    a line at least every :data:`HEARTBEAT_S` seconds: points finished, the rounds the
    running points have completed (from their ``summary.json``, where this machine can
    read it: not with Ray), time elapsed and the time left, extrapolated.

    Use as a context manager: the heartbeat thread stops when the block ends.

    Args:
        out: the sweep directory (its ``points/<id>/summary.json`` show the running points).
        interval_s: heartbeat period (s; default :data:`HEARTBEAT_S`).
    """

    def __init__(self, out: Path | None = None, interval_s: float | None = None) -> None:
        self.out = out
        self.interval_s = HEARTBEAT_S if interval_s is None else interval_s
        self.total = self.done = self.to_run = self.finished = 0
        self.start_s = self.last_line = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> PrintProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def start(self, total: int, skipped: int) -> None:
        self.total, self.done, self.to_run = total, skipped, total - skipped
        self.start_s = self.last_line = time.monotonic()
        if skipped:
            self._print(f"{skipped} of {plural(total, 'point')} already finished; skipping them")
        if self.to_run and self.thread is None:
            self.thread = threading.Thread(target=self._beat, name="sflsim-sweep-heartbeat",
                                           daemon=True)
            self.thread.start()

    def point_done(self, row: dict) -> None:
        self.done += 1
        self.finished += 1
        status = row["status"]
        colour = {"completed": "green", "failed": "red"}.get(status, "yellow")
        if status == "completed":
            detail = (f"server acc {_num(row['final_server_accuracy'])}  client acc "
                      f"{_num(row['final_client_accuracy'])}  sim {_num(row['sim_time_s'], '.1f')} s  "
                      f"wall {_num(row['wall_time_s'], '.0f')} s")
        else:
            detail = escape(row["error"])
        self._print(f"[{self.done}/{self.total}] {row['point']} [{colour}]{status}[/]  {detail}")

    def _print(self, line: str) -> None:
        with self.lock:
            console.print(line, highlight=False, soft_wrap=True)
            self.last_line = time.monotonic()

    def _beat(self) -> None:
        while not self.stopped.wait(min(self.interval_s, 1.0)):
            if time.monotonic() - self.last_line >= self.interval_s:
                self._print(self.heartbeat())

    def heartbeat(self) -> str:
        """``[2/6 points] running: p002 round 3/4; elapsed 5 min 02 s; ETA 14 min 30 s``."""
        running = self._running()
        shown = ", ".join(f"{p} round {done}/{planned}" for p, done, planned in running)
        progress = self.finished + sum(done / planned for _, done, planned in running if planned)
        elapsed = time.monotonic() - self.start_s
        eta = (duration(elapsed * (self.to_run - progress) / progress)
               if 0 < progress <= self.to_run else "unknown")
        return (f"[{self.done}/{plural(self.total, 'point')}] "
                f"{'running: ' + shown if shown else 'points running'}; "
                f"elapsed {duration(elapsed)}; ETA {eta}")

    def _running(self) -> list[tuple[str, int, int]]:
        """(point, rounds completed, rounds planned) of the points whose run has written a
        round since the sweep started and is still running."""
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


def _mark_points_interrupted(out: Path) -> None:
    """Points whose runs were still going say so: the sweep stopped them."""
    from sflsim.metrics import results

    for run_dir in sorted((out / "points").glob("*")):
        results.mark_interrupted(run_dir)


def _num(value: object, spec: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def sweep(
    file: Annotated[Path, typer.Argument(
        help="Sweep YAML file (a base scenario plus axes), or the name of a shipped sweep "
             "(device_mix).")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Sweep directory (default: runs/sweeps/<sweep name>).")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", "-w", min=1,
        help="Points run at once: local processes (1: in this process); with --executor ray "
             "the CPUs of a local Ray (default: all).")] = 1,
    executor: Annotated[ExecutorName, typer.Option(
        "--executor", help="process: local processes; ray: a Ray cluster.")] = ExecutorName.process,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address, e.g. ray://head:10001 or auto; "
                          "'local' or none starts a local Ray.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Fixed override of every point: a.b=value (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Expand and validate the points, list them, run nothing.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace points of another sweep (other scenarios) found in the "
        "output directory.")] = False,
) -> None:
    """Run every point of a sweep (each a normal run in DIR/points/<id>/) and write one
    table of all points, DIR/sweep.csv. Re-running the same sweep skips finished points;
    a failing point is recorded with its error and the others go on."""
    from sflsim.sweep import load_sweep, run_sweep
    from sflsim.sweep.execute import point_threads
    from sflsim.sweep.run import axis_column
    from sflsim.sweep.spec import describe_values

    with user_errors():
        if address is not None and executor is not ExecutorName.ray:
            raise SflsimError(f"--address {address}: a cluster address needs --executor ray")
        loaded = load_sweep(scenario_path(file, sweeps=True), set_ or [])
        out = output or Path("runs") / "sweeps" / loaded.name
        console.print(f"sweep {loaded.name}: {plural(len(loaded.points), 'point')} ({loaded.spec.mode} of "
                      f"{', '.join(loaded.spec.axes)}) -> {out}", highlight=False)
        console.print(point_threads(workers, executor.value).describe("point"), highlight=False)
        if dry_run:
            for point in loaded.points:
                console.print(f"  {point.point_id}  {escape(describe_values(point.values))}",
                              highlight=False)
            return
        note = (f"interrupted: finished points are kept in {escape(str(out))}; run the same "
                f"command again to resume")

        def stuck(signum: int) -> None:  # the watcher thread, a point inside torch
            _mark_points_interrupted(out)
            err_console.print(f"{signal.Signals(signum).name}: torch did not return within "
                              f"{GRACE_S:g} s; stopped without waiting for it", highlight=False)
            err_console.print(note, highlight=False)

        try:
            with stop_on_signals(stuck), PrintProgress(out) as progress:
                result = run_sweep(loaded, out, workers=workers, executor=executor.value,
                                   address=address, progress=progress, overwrite=overwrite)
        except KeyboardInterrupt:
            _mark_points_interrupted(out)
            err_console.print(note, highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    table = result.table
    console.print(summary_table(table, [axis_column(a) for a in loaded.spec.axes]))
    failed = table[table.status != "completed"]
    console.print(f"table in {out / 'sweep.csv'}; runs in {out / 'points'}/", highlight=False)
    if len(failed):
        err_console.print(f"{len(failed)} of {plural(len(table), 'point')} did not complete: "
                          f"{', '.join(failed.point)} (errors in sweep.csv and "
                          f"points/<id>/error.txt)", highlight=False)
        raise typer.Exit(1)


def summary_table(table: pd.DataFrame, axis_columns: list[str]) -> Table:
    """The final table: one row per point, its axis values and final numbers."""
    shown = Table(title="sweep")
    by_algorithm = not any(c.startswith("algorithm") for c in axis_columns)
    names = ["point", "status", *axis_columns, *(["algorithm"] if by_algorithm else []),
             "server acc", "client acc", "sim time (s)", "wall (s)"]
    for name in names:
        shown.add_column(name, no_wrap=name in ("point", "status"))
    for _, row in table.iterrows():
        shown.add_row(row["point"], row["status"], *(escape(str(row[c])) for c in axis_columns),
                      *([row["algorithm"]] if by_algorithm else []),
                      _num(row["final_server_accuracy"]),
                      _num(row["final_client_accuracy"]), _num(row["sim_time_s"], ".1f"),
                      _num(row["wall_time_s"], ".0f"))
    return shown
