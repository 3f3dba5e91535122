"""``run_sweep``: run every point of a sweep, keep one table of all of them, resume.

Layout of the sweep's output directory::

    sweep.yaml          the sweep as run (name filled in, base as an absolute path, or
                        relative when it lies in the sweep directory)
    sweep.csv           one row per finished point, rewritten atomically after each
    points/<id>/        each point's normal results directory (``sflsim run``'s files;
                        ``error.txt`` with the traceback when the point failed)

``sweep.csv`` columns: ``point, status, error, run_dir`` (relative to the sweep
directory), one column per axis named by its dotted path (mappings and lists as
JSON; the ``algorithm`` axis is ``algorithm_config``), then ``algorithm,
final_server_accuracy, final_client_accuracy, sim_time_s, wall_time_s, bytes_up,
bytes_down, client_flops, server_flops, client_energy_j`` from each point's
``summary.json`` (per-end-layer accuracies are in each point's ``summary.json``
and ``rounds.csv``). Every column between ``run_dir`` and ``algorithm`` is an
axis. ``status`` is ``completed``, ``failed`` or ``interrupted``. A sweep with
``seeds`` has a ``config`` column after ``run_dir`` (``c000``, ...: the points of one
configuration at different seeds share it) and a ``seed`` column after the axes;
:func:`sflsim.metrics.compare.aggregate_seeds` makes one row per configuration of it.

Resume: a point whose ``points/<id>/summary.json`` says ``completed`` and whose
``scenario.yaml`` equals the point's scenario is not run again; failed and
interrupted points are.

A sweep holds its directory while it runs (each point's run holds its own folder):
a second sweep, run or export there is refused, naming the holder
(:func:`sflsim.metrics.results.hold_folder`). A directory where the sweep would write
over a file it reads (the sweep file, its base scenario, a trace) is refused
(:func:`check_sweep_inputs`).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import pandas as pd
import yaml

from sflsim.config.load import scenario_differences
from sflsim.config.resolve import resolve_scenario, resolved_dump
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError, SflsimError
from sflsim.metrics import results
from sflsim.metrics.columns import (
    SWEEP_CONFIG_COLUMN,
    SWEEP_LEAD_COLUMNS,
    SWEEP_SUMMARY_COLUMNS,
    sweep_axis_column,
)
from sflsim.run import input_files
from sflsim.sweep.execute import (
    PointJob,
    PointOutcome,
    check_ray_address,
    point_threads,
    read_summary,
    require_ray,
    run_processes,
    run_ray,
    run_serial,
    write_result_files,
)
from sflsim.sweep.spec import Sweep, SweepPoint, format_value

#: Columns taken from each point's ``summary.json``.
SUMMARY_COLUMNS = SWEEP_SUMMARY_COLUMNS
#: Columns every sweep table starts with.
LEAD_COLUMNS = SWEEP_LEAD_COLUMNS
#: The column of a sweep with ``seeds`` that names the configuration whatever the seed.
CONFIG_COLUMN = SWEEP_CONFIG_COLUMN

Executor = Literal["process", "ray"]


class SweepProgress(Protocol):
    """What :func:`run_sweep` reports while it works (the CLI prints it)."""

    def start(self, total: int, skipped: int) -> None: ...
    def point_done(self, row: dict) -> None: ...


@dataclass
class SweepResult:
    """The sweep table and where it was written."""

    output_dir: Path
    table: pd.DataFrame
    #: Points run this time (the others were finished before and skipped).
    ran: list[str]


def table_axes(sweep: Sweep) -> list[str]:
    """The axis columns of the sweep's table, in order: one per axis, then ``seed`` for a
    sweep with ``seeds``."""
    return [*(sweep_axis_column(p) for p in sweep.spec.axes),
            *(["seed"] if sweep.spec.seeds is not None else [])]


def check_executor_options(executor: str, cpus_per_point: float = 1.0,
                           gpus_per_point: float = 0.0) -> None:
    """Refuse what no executor can do with these options (before anything loads).

    Raises:
        ValueError: ``executor`` is not ``process`` or ``ray``.
        SflsimError: ``cpus_per_point`` not a finite number > 0, ``gpus_per_point`` not a
            finite number >= 0, or either set without the Ray executor; naming the option
            and the value.
    """
    if executor not in ("process", "ray"):
        raise ValueError(f"executor must be 'process' or 'ray', not {executor!r}")
    if not (math.isfinite(cpus_per_point) and cpus_per_point > 0):
        raise SflsimError(f"--cpus-per-point {cpus_per_point:g}: must be a number > 0 "
                          f"(fractions allowed, e.g. 0.5)")
    if not (math.isfinite(gpus_per_point) and gpus_per_point >= 0):
        raise SflsimError(f"--gpus-per-point {gpus_per_point:g}: must be a number >= 0 "
                          f"(fractions allowed, e.g. 0.25 puts four points on a GPU)")
    for option, value in (("--cpus-per-point", cpus_per_point),
                          ("--gpus-per-point", gpus_per_point)):
        if round(value, 4) != value:
            raise SflsimError(f"{option} {value:g}: Ray counts resources to 4 decimal places; "
                              f"give at most 4 (e.g. 0.0625)")
    if gpus_per_point > 1 and gpus_per_point != int(gpus_per_point):
        raise SflsimError(f"--gpus-per-point {gpus_per_point:g}: more than one GPU must be a "
                          f"whole number (Ray's rule); valid: a fraction up to 1 (0.5: two "
                          f"points per GPU) or 1, 2, ...")
    if executor != "ray" and (cpus_per_point, gpus_per_point) != (1.0, 0.0):
        raise SflsimError("--cpus-per-point and --gpus-per-point are what a Ray task asks "
                          "for: they need --executor ray")


def check_point_devices(sweep: Sweep) -> None:
    """Refuse a sweep run on this machine (not on Ray's nodes) whose points ask for a
    ``training.device`` this machine cannot give them (CUDA without a GPU, a GPU index it
    lacks, an algorithm that cannot run there), before any point runs: ``sflsim run``'s
    message (:func:`sflsim.runner.torch_device`) with the advice a sweep takes.

    Raises:
        ConfigError: naming the points, the device and how to change it.
    """
    from sflsim.runner import torch_device

    advice = ("leave CUDA out of the training.device axis" if "training.device" in sweep.spec.axes
              else "--set training.device=cpu")
    seen: dict[str, str | None] = {}
    failing: dict[str, list[str]] = {}
    for point in sweep.points:
        scenario = point.scenario
        key = (f"{scenario.training.device} {scenario.training.timing_only} "
               f"{scenario.algorithm.model_dump_json()}")
        if key not in seen and scenario.training.device == "cpu":
            seen[key] = None  # nothing to check (and no torch to load)
        if key not in seen:
            try:
                torch_device(scenario, cpu_advice=advice)
                seen[key] = None
            except ConfigError as exc:
                seen[key] = str(exc)
        if seen[key] is not None:
            failing.setdefault(seen[key], []).append(point.point_id)
    if not failing:
        return
    message, ids = next(iter(failing.items()))
    which = ("every point" if len(ids) == len(sweep.points) else
             f"{'point' if len(ids) == 1 else 'points'} {', '.join(ids[:5])}"
             f"{', ...' if len(ids) > 5 else ''}")
    raise ConfigError(f"sweep {sweep.name}, {which}: {message}")


def run_sweep(sweep: Sweep, output_dir: str | Path | None = None, *, workers: int = 1,
              executor: Executor = "process", address: str | None = None,
              progress: SweepProgress | None = None, overwrite: bool = False,
              cpus_per_point: float = 1.0, gpus_per_point: float = 0.0,
              held: bool = False) -> SweepResult:
    """Run the points of ``sweep`` that are not finished yet; write the sweep table.

    Args:
        sweep: from :func:`sflsim.sweep.load_sweep` (every point already validated).
        output_dir: default ``runs/sweeps/<sweep name>``.
        workers: points run at once: local processes for ``process`` (1: in this
            process); CPUs of a local Ray for ``ray`` (None/1 there: all cores). Worker
            processes are spawned, so a script that calls this with ``workers > 1``
            needs the ``if __name__ == "__main__":`` guard.
        executor: ``process`` or ``ray``.
        address: Ray cluster address (``ray``); None or ``"local"``: start a local Ray.
        progress: told about each finished point.
        cpus_per_point, gpus_per_point: what each point's Ray task asks for (``ray``
            only; fractions allowed; :func:`~sflsim.sweep.execute.run_ray`).
        overwrite: replace point directories that hold runs of other scenarios (a
            changed sweep); without it they are refused.
        held: the caller holds ``output_dir`` already
            (:func:`sflsim.metrics.results.hold_folder`), as ``sflsim sweep`` does from
            before it announces the sweep; it is not held again.

    Returns:
        The table as written to ``sweep.csv``.

    Raises:
        KeyboardInterrupt: after recording the points that finished (re-run the same
            sweep to resume).
        SflsimError: see :func:`check_executor_options`; the Ray executor cannot start
            (an address that does not answer is refused before anything is written) or
            no node of the cluster can run a point (then the points stay ``pending``),
            the points ask for a device this machine lacks (local executor,
            :func:`check_point_devices`), (without ``overwrite``) the output directory
            holds points of another sweep, another run, sweep or export holds it
            (:func:`sflsim.metrics.results.hold_folder`: one at a time), or the sweep
            would write over one of its input files (:func:`check_sweep_inputs`, with
            ``overwrite`` too).
    """
    check_executor_options(executor, cpus_per_point, gpus_per_point)
    if executor == "ray":
        if not require_ray().is_initialized():  # an address that does not answer: now
            check_ray_address(address)
    else:
        check_point_devices(sweep)
    out = Path(output_dir) if output_dir is not None else Path("runs") / "sweeps" / sweep.name
    if not held:
        results.check_not_held(out)
    check_sweep_inputs(sweep, out)
    results.refuse_other_kind(out, "sweep")
    if not overwrite:
        refuse_other_points(out, sweep)
    # one run, sweep or export at a time in a folder (each point's run holds its own)
    with results.hold_folder(out) if not held else contextlib.nullcontext():
        return _run_points(sweep, out, workers=workers, executor=executor, address=address,
                           progress=progress, cpus_per_point=cpus_per_point,
                           gpus_per_point=gpus_per_point)


def _run_points(sweep: Sweep, out: Path, *, workers: int, executor: Executor,
                address: str | None, progress: SweepProgress | None, cpus_per_point: float,
                gpus_per_point: float) -> SweepResult:
    """:func:`run_sweep` in ``out``, checked and held."""
    (out / "points").mkdir(parents=True, exist_ok=True)
    text = sweep_yaml(sweep, out)
    if _read_text(out / "sweep.yaml") != text:  # the same sweep again: the file stays
        results.write_text(out / "sweep.yaml", text)
    by_id = {p.point_id: p for p in sweep.points}
    rows: dict[str, dict] = {}
    jobs: list[PointJob] = []
    for point in sweep.points:
        run_dir = out / "points" / point.point_id
        summary = finished_summary(run_dir, point.scenario)
        if summary is not None:
            rows[point.point_id] = table_row(point, "completed", "", summary)
        else:
            prepare_run_dir(run_dir)
            jobs.append(PointJob(point.point_id, point.scenario.model_dump(mode="json"), run_dir,
                                 point.warnings))
    write_table(out / "sweep.csv", sweep, rows)
    if progress is not None:
        progress.start(len(sweep.points), len(rows))

    def on_done(outcome: PointOutcome) -> None:
        point, run_dir = by_id[outcome.point_id], out / "points" / outcome.point_id
        write_result_files(run_dir, outcome.files)  # a Ray task's files, tables included
        if outcome.traceback:
            results.write_text(run_dir / "error.txt", outcome.traceback)
        summary = outcome.summary if outcome.summary is not None else read_summary(run_dir)
        row = table_row(point, outcome.status, outcome.error, summary)
        rows[outcome.point_id] = row
        write_table(out / "sweep.csv", sweep, rows)
        if progress is not None:
            progress.point_done(row)

    threads = point_threads(workers).threads  # from --workers, not from the points left
    if jobs and executor == "ray":
        run_ray(jobs, on_done, address, workers if workers > 1 else None,
                cpus_per_point=cpus_per_point, gpus_per_point=gpus_per_point)
    elif workers > 1 and len(jobs) > 1:
        run_processes(jobs, on_done, min(workers, len(jobs)), threads)
    elif jobs:
        run_serial(jobs, on_done, threads)
    return SweepResult(output_dir=out, table=read_table(out), ran=[j.point_id for j in jobs])


def sweep_yaml(sweep: Sweep, out: Path) -> str:
    """The text of the sweep directory ``out``'s ``sweep.yaml``: the sweep as run
    (:meth:`~sflsim.sweep.spec.Sweep.resolved`)."""
    return yaml.safe_dump(sweep.resolved(out), sort_keys=False)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def sweep_inputs(sweep: Sweep) -> dict[str, Path]:
    """The files a sweep reads, by what they are: the sweep file, its base scenario and
    the files each point's run reads (:func:`sflsim.run.input_files.scenario_inputs`;
    a field whose file differs between points is named with the point)."""
    found: dict[str, Path] = {}
    if sweep.path is not None:
        found["the sweep file"] = sweep.path
    found["the base scenario"] = sweep.base_path
    for point in sweep.points:
        for field, path in input_files.scenario_inputs(point.scenario).items():
            key = field if found.get(field, path) == path else f"{field} of {point.point_id}"
            found.setdefault(key, path)
    return found


def check_sweep_inputs(sweep: Sweep, out: Path) -> None:
    """Refuse a sweep directory ``out`` where the sweep would write over or delete a
    file it reads (the sweep file as ``sweep.yaml``, a base scenario or trace among the
    files of a point it runs): sflsim never replaces its input files, with or without
    ``--overwrite``. ``sweep.yaml`` counts only when its text would change (a sweep run
    again from the ``sweep.yaml`` it wrote leaves it as it is), a point only when it
    will run (it is not finished).

    Raises:
        SflsimError: naming the file and what it is
            (:func:`sflsim.metrics.results.refuse_writing_inputs`).
    """
    names = ["sweep.csv"]
    if _read_text(out / "sweep.yaml") != sweep_yaml(sweep, out):
        names.append("sweep.yaml")
    for point in sweep.points:
        run_dir = out / "points" / point.point_id
        if finished_summary(run_dir, point.scenario) is None:
            names += [f"points/{point.point_id}/{name}"
                      for name in (*results.RESULT_FILES, "error.txt")]
    results.refuse_writing_inputs(out, names, sweep_inputs(sweep), writer="the sweep")


def refuse_other_points(out: Path, sweep: Sweep) -> None:
    """Refuse a sweep directory whose point directories hold runs of other scenarios.

    Raises:
        SflsimError: naming the points and the first differences.
    """
    clashes = []
    for point in sweep.points:
        path = out / "points" / point.point_id / "scenario.yaml"
        try:
            done = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue  # nothing there (or nothing readable) to lose
        # runs write their scenario resolved (server.slots filled in, ...): compare resolved
        done = (resolved_dump(done, stored=True) if isinstance(done, dict) else None) or done
        now = resolve_scenario(point.scenario).model_dump(mode="json")
        if done != now:
            diffs = scenario_differences(done, now) or ["device groups in another order"]
            clashes.append(f"{point.point_id} ({', '.join(diffs[:4])}"
                           f"{', ...' if len(diffs) > 4 else ''})")
    if clashes:
        raise SflsimError(f"{out} holds points of another sweep: {'; '.join(clashes[:3])}"
                          f"{' ...' if len(clashes) > 3 else ''}; pass --overwrite to replace "
                          f"them or choose another -o")


def finished_summary(run_dir: Path, scenario: Scenario) -> dict | None:
    """The summary of a completed run of exactly ``scenario`` in ``run_dir``, else None."""
    summary = read_summary(run_dir)
    if summary is None or summary.get("status") != "completed":
        return None
    try:
        done = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    # runs write their scenario resolved (server.slots filled in, ...): compare resolved
    same = (isinstance(done, dict)
            and resolved_dump(done, stored=True) == resolve_scenario(scenario).model_dump(mode="json"))
    return summary if same else None


def prepare_run_dir(run_dir: Path) -> None:
    """Make ``run_dir`` and drop the status files of an earlier attempt, so that a run
    stopped before it writes its own is never taken for finished."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "error.txt"):
        if (run_dir / name).exists():
            os.unlink(run_dir / name)


def table_row(point: SweepPoint, status: str, error: str, summary: dict | None) -> dict:
    """One ``sweep.csv`` row: status, axis values, the run's final numbers (empty unless
    the run completed: an interrupted or failed run's numbers are not final)."""
    summary = (summary or {}) if status == "completed" else {}
    row: dict = {"point": point.point_id, "status": status, "error": error,
                 "run_dir": f"points/{point.point_id}", CONFIG_COLUMN: point.config_id}
    for path, value in point.values.items():
        row[sweep_axis_column(path)] = format_value(value)
    row["algorithm"] = point.scenario.algorithm.name
    for key in SUMMARY_COLUMNS:
        row[key] = summary.get(key)
    return row


def write_table(path: Path, sweep: Sweep, rows: dict[str, dict]) -> None:
    """Write ``sweep.csv``: one row per point, in point order; a point that has not
    run (yet) is ``pending``."""
    ordered = [rows.get(p.point_id) or table_row(p, "pending", "", None) for p in sweep.points]
    config = [CONFIG_COLUMN] if sweep.spec.seeds is not None else []
    columns = [*LEAD_COLUMNS, *config, *table_axes(sweep), "algorithm", *SUMMARY_COLUMNS]
    for column in table_axes(sweep):
        if _ambiguous([row[column] for row in ordered]):
            # 1 (one client) and 1.0 (all of them) must not both become 1.0: as written
            ordered = [{**row, column: None if row[column] is None else str(row[column])}
                       for row in ordered]
    frame = pd.DataFrame(ordered, columns=columns)
    for column in columns:  # whole numbers stay whole beside empty cells (not 105369600.0)
        present = [row[column] for row in ordered if row.get(column) is not None]
        if (present and len(present) < len(ordered)
                and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                        for v in present)):
            frame[column] = pd.array([row.get(column) for row in ordered], dtype="Int64")
    results.write_table(path, frame)


def _ambiguous(values: list) -> bool:
    """Whether axis values hold an int and a float of the same value (``1``, ``1.0``),
    which a numeric column shows alike."""
    ints = {v for v in values if isinstance(v, int) and not isinstance(v, bool)}
    return any(isinstance(v, float) and v in ints for v in values)


def read_table(output_dir: str | Path) -> pd.DataFrame:
    """``sweep.csv`` of a sweep directory (error cells as text, empty as "").

    Raises:
        ConfigError: the directory has no ``sweep.csv``.
    """
    path = Path(output_dir) / "sweep.csv"
    if not path.is_file():
        raise ConfigError(results.not_a_folder_of(Path(output_dir), "sweep directory",
                                                  "sweep.csv",
                                                  f"sflsim sweep SWEEP.yaml -o {output_dir}"))
    table = results.read_result_csv(path)
    table["error"] = table["error"].astype(object).fillna("").astype(str)
    axes = [c for c in table.columns[len(LEAD_COLUMNS):] if c not in SUMMARY_COLUMNS
            and c not in ("algorithm", CONFIG_COLUMN)]
    if axes:  # an axis written as text because it mixes 1 and 1.0 (write_table) stays text
        text = results.read_result_csv(path, usecols=axes, dtype=str)
        for column in axes:
            written = text[column].dropna()
            if written.nunique() > pd.to_numeric(written, errors="coerce").nunique(dropna=False):
                table[column] = text[column]
    return table
