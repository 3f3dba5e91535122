"""``sflsim sweep SWEEP.yaml``: run every point of a sweep; one table of all of them."""

from __future__ import annotations

import contextlib
import math
import signal
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sflsim.cli.common import (
    STRICT_HELP,
    console,
    err_console,
    path_option,
    print_table,
    print_warning,
    refuse_warnings,
    user_errors,
)
from sflsim.cli.mlflow_log import LogTarget, MlflowSweepLog, check_log_options, tracking_uri
from sflsim.cli.progress_display import PointChecks, SweepHeartbeat, sim_seconds
from sflsim.cli.tensorboard import require_tensorboard, write_run
from sflsim.config.load import input_warnings
from sflsim.errors import SflsimError
from sflsim.metrics.results import check_not_held, check_output_folder, hold_folder
from sflsim.shipped import scenario_path
from sflsim.signals import EXIT_INTERRUPTED, GRACE_S, stop_on_signals
from sflsim.text import plural
from sflsim.threads import (
    MAX_THREADS,
    CpuSample,
    ThreadChoice,
    busy_note,
    choose_threads,
    cpu_sample,
    measured_busy_cores,
    omp_num_threads_set,
)

if TYPE_CHECKING:
    import pandas as pd

    from sflsim.sweep import Sweep, SweepResult


class ExecutorName(str, Enum):
    process = "process"
    ray = "ray"


class PrintProgress:
    """One line per finished point (id, status, accuracy, times), and while points run a
    heartbeat line (:class:`~sflsim.cli.progress_display.SweepHeartbeat`). Use as a context
    manager: the heartbeat stops when the block ends.

    Args:
        out: the sweep directory (its ``points/<id>/summary.json`` show the running points).
        tensorboard: write each finished point's rounds (its ``rounds.csv``) as
            TensorBoard scalars to ``tensorboard/<point id>/``
            (:mod:`sflsim.cli.tensorboard`); None: no TensorBoard.
        mlflow: log each finished point as an MLflow run (:mod:`sflsim.cli.mlflow_log`);
            None: no MLflow.
    """

    def __init__(self, out: Path | None = None, tensorboard: Path | None = None,
                 mlflow: MlflowSweepLog | None = None) -> None:
        self.beat = SweepHeartbeat(
            lambda line: console.print(line, highlight=False, soft_wrap=True), out)
        self.out, self.tensorboard, self.mlflow = out, tensorboard, mlflow
        self.total = self.done = 0

    def __enter__(self) -> PrintProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.beat.stop()

    def start(self, total: int, skipped: int) -> None:
        self.total, self.done = total, skipped
        if skipped:
            self.beat.say(f"{skipped} of {plural(total, 'point')} already finished; skipping them")
        self.beat.start(total, skipped)

    def point_done(self, row: dict) -> None:
        self.done += 1
        status = row["status"]
        colour = {"completed": "green", "failed": "red"}.get(status, "yellow")
        if status == "completed":
            detail = (f"server acc {_num(row['final_server_accuracy'])}  client acc "
                      f"{_num(row['final_client_accuracy'])}  sim {_sim(row['sim_time_s'])} s  "
                      f"wall {_sim(row['wall_time_s'])} s")
        else:  # "interrupted" says it all; a failure's error says what
            detail = escape(row["error"]) if row["error"] != status else ""
        self.beat.point_done()
        self.beat.say(f"[{self.done}/{self.total}] {row['point']} [{colour}]{status}[/]  "
                      f"{detail}".rstrip())
        if self.tensorboard is not None and self.out is not None:
            write_run(self.out / "points" / row["point"], self.tensorboard / row["point"])
        if self.mlflow is not None and self.out is not None:
            self.mlflow.point_done(self.out / "points" / row["point"], row["point"])


def _points_without_data(points: list) -> list[tuple[str, str]]:
    """``(point id, message)`` of the points whose dataset files are missing (each distinct
    dataset is looked for once; no torch)."""
    from sflsim.data.presence import check_dataset_files
    from sflsim.errors import DatasetNotFoundError

    seen: dict[str, str | None] = {}
    out = []
    for point in points:
        key = point.scenario.dataset.model_dump_json()
        if key not in seen:
            try:
                check_dataset_files(point.scenario)
                seen[key] = None
            except DatasetNotFoundError as exc:
                seen[key] = str(exc)
        if seen[key] is not None:
            out.append((point.point_id, seen[key]))
    return out


def _mark_points_interrupted(out: Path) -> None:
    """Points whose runs were still going say so: the sweep stopped them."""
    from sflsim.metrics import results

    for run_dir in sorted((out / "points").glob("*")):
        results.mark_interrupted(run_dir)


def _num(value: object, spec: str = ".3f") -> str:
    """``value`` formatted, or "n/a" (as ``sflsim run`` says) when there is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return format(value, spec)


def _sim(value: object) -> str:
    """Simulated seconds as a run's progress shows them (:func:`sim_seconds`), or "n/a"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return sim_seconds(float(value))  # type: ignore[arg-type]


STRICT_SWEEP_HELP = (STRICT_HELP + " Recommended: a warning at the start of a long sweep is "
                     "easily missed.")


def sweep(
    file: Annotated[Path, typer.Argument(
        help="Sweep YAML file (a base scenario plus axes), or the name of a shipped sweep "
             "(device_mix).")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", **path_option("-o"),
        help="Sweep directory (default: runs/sweeps/<sweep name>).")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", "-w", min=1,
        help="Points run at once: local processes (1: in this process); with --executor ray "
             "the CPUs of a local Ray (default: all).")] = 1,
    executor: Annotated[ExecutorName, typer.Option(
        "--executor", help="process: local processes; ray: a Ray cluster.")] = ExecutorName.process,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address, e.g. ray://head:10001 or auto; "
                          "'local' or none starts a local Ray.")] = None,
    cpus_per_point: Annotated[float, typer.Option(
        "--cpus-per-point", help="CPUs each point's Ray task asks for (--executor ray; "
        "fractions allowed; a torch thread per CPU).")] = 1.0,
    gpus_per_point: Annotated[float, typer.Option(
        "--gpus-per-point", help="GPUs each point's Ray task asks for (--executor ray; "
        "fractions allowed: 0.25 puts four points on a GPU); set training.device: cuda "
        "in the points too.")] = 0.0,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Fixed override of every point: a.b=value (repeatable).")] = None,
    seeds: Annotated[str | None, typer.Option(
        "--seeds", help="Run every configuration once per seed: 0-4 (a range), 0,1,2 (a "
        "list) or both; replaces the sweep file's seeds. sweep.csv gets seed and config "
        "columns; sflsim compare gives mean ± std over them.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Expand and validate the points, list them, run nothing.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace points of another sweep (other scenarios) found in the "
        "output directory.")] = False,
    tensorboard: Annotated[Path | None, typer.Option(
        "--tensorboard", **path_option("--tensorboard"),
        help="Write each point's rounds as TensorBoard scalars to "
        "DIR/<point id>/ when the point ends (needs pip install -e \".[tensorboard]\").")] = None,
    log: Annotated[LogTarget | None, typer.Option(
        "--log", help="Also log each point, when it ends, to an experiment tracker: mlflow "
        "makes one MLflow run per point in an experiment named after the sweep (needs pip "
        "install -e \".[mlflow]\").")] = None,
    mlflow_uri: Annotated[str | None, typer.Option(
        "--mlflow-uri", help="MLflow tracking URI of --log mlflow (default: "
        "MLFLOW_TRACKING_URI if set, else the file store ./mlruns).")] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", help=f"Torch intra-op threads of each point, 1 to {MAX_THREADS} (default: "
        "OMP_NUM_THREADS if set, else the usable cores divided by --workers; 1 is often "
        "fastest for small models on a busy machine). Local points only: with --executor "
        "ray, --cpus-per-point sets them.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help=STRICT_SWEEP_HELP)] = False,
) -> None:
    """Run every point of a sweep (each a normal run in DIR/points/ID/) and write one
    table of all points, DIR/sweep.csv. Re-running the same sweep skips finished points;
    a failing point is recorded with its error and the others go on. Input warnings are
    said at the start and again at the end (--strict refuses them)."""
    import sflsim.sweep  # noqa: F401  (the sweep modules load before the CPU sample below)

    started = cpu_sample()  # the load of other processes while the sweep loads (a note below)
    # the sweep's folder is held from its first check to the end (not by a dry run): a
    # second sweep or run into it is refused before either announces anything
    with contextlib.ExitStack() as hold, user_errors():
        choice = _check_options(executor, address, cpus_per_point, gpus_per_point, threads,
                                workers, tensorboard)
        check_log_options(log, mlflow_uri)
        loaded, out, missing, warnings = _load_points(file, output, set_, executor, dry_run,
                                                      overwrite, tensorboard, hold, strict,
                                                      seeds)
        _announce(loaded, out, missing, choice, started, workers, executor, cpus_per_point)
        if dry_run:
            _list_points(loaded)
            return
        _preload_torch(executor)
        store = tracking_uri(mlflow_uri) if log is LogTarget.mlflow else None
        result = _run_points(loaded, out, workers=workers, executor=executor, address=address,
                             overwrite=overwrite, cpus_per_point=cpus_per_point,
                             gpus_per_point=gpus_per_point, tensorboard=tensorboard,
                             threads=threads, mlflow=store and MlflowSweepLog(store, loaded.name))
    _report(result, loaded, out, warnings, store)


def _preload_torch(executor: ExecutorName) -> None:
    """Local points: torch loads here first, so a broken install is told in one line
    (:mod:`sflsim.cli.install`), not as the same failure of every point."""
    if executor is ExecutorName.process:
        import sflsim.runner  # noqa: F401


def _list_points(loaded: Sweep) -> None:
    """A dry run's listing: each point's id and the values it sets."""
    from sflsim.sweep.spec import describe_values

    for point in loaded.points:
        console.print(f"  {point.point_id}  {escape(describe_values(point.values))}",
                      highlight=False)


def _check_options(executor: ExecutorName, address: str | None, cpus_per_point: float,
                   gpus_per_point: float, threads: int | None, workers: int,
                   tensorboard: Path | None) -> ThreadChoice | None:
    """Refuse options that do not go together, before anything loads; the threads of each
    local point (None: on Ray, where --cpus-per-point sets them)."""
    from sflsim.sweep.run import check_executor_options

    if address is not None and executor is not ExecutorName.ray:
        raise SflsimError(f"--address {address}: a cluster address needs --executor ray")
    check_executor_options(executor.value, cpus_per_point, gpus_per_point)
    if threads is not None and executor is ExecutorName.ray:
        raise SflsimError(f"--threads {threads}: sets the threads of local points; with "
                          f"--executor ray each point gets one per CPU its task asks for "
                          f"(--cpus-per-point)")
    # --threads (or OMP_NUM_THREADS) out of range: refused before anything loads
    choice = choose_threads(threads, workers) if executor is ExecutorName.process else None
    if tensorboard is not None:
        require_tensorboard()
    return choice


def _load_points(file: Path, output: Path | None, set_: list[str] | None,
                 executor: ExecutorName, dry_run: bool, overwrite: bool,
                 tensorboard: Path | None, hold: contextlib.ExitStack, strict: bool = False,
                 seeds: str | None = None
                 ) -> tuple[Sweep, Path, list[tuple[str, str]], list[str]]:
    """Load and expand the sweep, and refuse what the run would refuse before a point runs:
    with ``strict``, an input warning (one line each; else each is said once), the output
    folder (one in use; but for a dry run, held from here on in ``hold``), inputs it would
    write over, points of another sweep (a dry run), no point with its
    dataset, a device not on this host; ``seeds`` is ``--seeds`` as typed. Returns the
    sweep, its directory, the points without their dataset
    (:func:`_points_without_data`) and the input warnings."""
    from sflsim.sweep import load_sweep
    from sflsim.sweep.run import check_point_devices, check_sweep_inputs, refuse_other_points
    from sflsim.sweep.spec import parse_seeds

    seed_list = parse_seeds(seeds) if seeds is not None else None  # before the file loads
    try:  # said once loaded, with the points they concern
        with input_warnings(lambda _: None) as said, PointChecks(err_console) as checks:
            loaded = load_sweep(scenario_path(file, sweeps=True), set_ or [], seed_list,
                                on_point=checks)
    except Exception:
        for message in [] if strict else said:
            print_warning(message)
        raise
    warnings = [_from_points(message, loaded.points) for message in said]
    if strict:
        refuse_warnings(warnings)
    for message in warnings:
        print_warning(message)
    out = output or Path("runs") / "sweeps" / loaded.name
    check_output_folder(out)  # a dry run says what the run would refuse, too
    if tensorboard is not None:  # as -o: before the first point runs
        check_output_folder(tensorboard, option="--tensorboard")
    if dry_run:  # writes nothing: holds nothing
        check_not_held(out)  # another sweep, run or export writes there now
    else:
        hold.enter_context(hold_folder(out))
    check_sweep_inputs(loaded, out)  # never over the sweep file, its base, a trace
    if dry_run and not overwrite:
        refuse_other_points(out, loaded)
    missing = _points_without_data(loaded.points)  # before torch loads
    if missing and len(missing) == len(loaded.points) and not dry_run:
        raise SflsimError(f"{file}: no point can run: {missing[0][1]}")
    if executor is ExecutorName.process:  # on Ray the points run on the cluster's nodes
        check_point_devices(loaded)
    return loaded, out, missing, list(warnings)


def _from_points(message: str, points: list) -> str:
    """An input warning of a sweep with the points it concerns (``p000, p002: ...``;
    ``every point: ...``)."""
    ids = [p.point_id for p in points if message in p.warnings]
    if not ids or len(ids) == len(points):
        return f"every point: {message}" if ids and len(points) > 1 else message
    shown = ", ".join(ids[:6]) + (f", ... ({len(ids) - 6} more)" if len(ids) > 6 else "")
    return f"{shown}: {message}"


def _announce(loaded: Sweep, out: Path, missing: list[tuple[str, str]],
              choice: ThreadChoice | None, started: CpuSample | None, workers: int,
              executor: ExecutorName, cpus_per_point: float) -> None:
    """Warn of the points without their dataset, say what runs (points, axes, directory)
    and with how many threads, and note a busy host."""
    from sflsim.sweep.execute import point_threads

    by_message: dict[str, list[str]] = {}
    for point_id, message in missing:
        by_message.setdefault(message, []).append(point_id)
    for message, ids in by_message.items():
        which = ("no point can run here" if len(ids) == len(loaded.points)
                 else f"{plural(len(ids), 'point')} ({', '.join(ids)}) cannot run here")
        err_console.print(f"warning: {which}: {escape(message)}", highlight=False)
    seeds = loaded.spec.seeds
    shape = (f"{loaded.spec.mode} of {', '.join(loaded.spec.axes)}" if loaded.spec.axes
             else "the base scenario")
    if seeds is not None:
        shape += f", each at {plural(len(seeds), 'seed')}"
    console.print(f"sweep {loaded.name}: {plural(len(loaded.points), 'point')} ({shape}) -> {out}",
                  highlight=False)
    console.print((choice or point_threads(workers, executor.value, cpus_per_point))
                  .describe("point"), highlight=False)
    if choice is not None and not choice.explicit:  # others busy: `sflsim run`'s note
        busy = busy_note(choice, measured_busy_cores(started), workers=workers)
        if busy is not None:
            err_console.print(f"note: {busy}", highlight=False)


def _run_points(loaded: Sweep, out: Path, *, workers: int, executor: ExecutorName,
                address: str | None, overwrite: bool, cpus_per_point: float,
                gpus_per_point: float, tensorboard: Path | None,
                threads: int | None, mlflow: MlflowSweepLog | None = None) -> SweepResult:
    """Run the points not finished yet, a line per point as it ends; Ctrl-C and SIGTERM
    keep the finished points and mark the running ones interrupted."""
    from sflsim.sweep import run_sweep

    note = (f"interrupted: finished points are kept in {escape(str(out))}; run the same "
            f"command again to resume")

    def stuck(signum: int) -> None:  # the watcher thread, a point inside torch
        _mark_points_interrupted(out)
        err_console.print(f"{signal.Signals(signum).name}: torch did not return within "
                          f"{GRACE_S:g} s; stopped without waiting for it", highlight=False)
        err_console.print(note, highlight=False)

    try:
        # --threads reaches the points as OMP_NUM_THREADS (their threads follow it)
        with stop_on_signals(stuck), PrintProgress(out, tensorboard, mlflow) as progress, \
                omp_num_threads_set(threads):
            result = run_sweep(loaded, out, workers=workers, executor=executor.value,
                               address=address, progress=progress, overwrite=overwrite,
                               cpus_per_point=cpus_per_point,
                               gpus_per_point=gpus_per_point, held=True)
            if tensorboard is not None:  # points finished before: unless written then
                for point_id in result.table.point:
                    if point_id not in result.ran and not (tensorboard / point_id).exists():
                        write_run(out / "points" / point_id, tensorboard / point_id)
            if mlflow is not None:  # points finished before: unless logged then
                for point_id in result.table.point:
                    if point_id not in result.ran and not mlflow.logged(out / "points" / point_id):
                        mlflow.point_done(out / "points" / point_id, point_id)
    except KeyboardInterrupt:
        _mark_points_interrupted(out)
        err_console.print(note, highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    return result


def _report(result: SweepResult, loaded: Sweep, out: Path, warnings: list[str],
            mlflow_store: str | None = None) -> None:
    """Where the MLflow runs are (``mlflow_store``: --log mlflow's store), the table of all
    points, the input warnings again, where the table and the runs are, and the points
    that did not complete (then exit 1)."""
    from sflsim.sweep.execute import read_summary
    from sflsim.sweep.run import table_axes

    if mlflow_store is not None:
        console.print(f"MLflow runs in {escape(mlflow_store)} (experiment "
                      f"{escape(loaded.name)})", highlight=False)
    table = result.table
    print_table(summary_table(table, table_axes(loaded)))
    for message in warnings:
        print_warning(message)
    for point in table.point:
        for message in (read_summary(out / "points" / point) or {}).get("warnings", []):
            if message.startswith("implausible outcome"):
                print_warning(f"{point}: {message}")
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
    from sflsim.metrics.compare import axis_value_labels

    labels = {c: axis_value_labels(table[c]) for c in axis_columns}  # as compare shows them
    for i, (_, row) in enumerate(table.iterrows()):
        shown.add_row(row["point"], row["status"],
                      *(escape(str(labels[c].iloc[i])) for c in axis_columns),
                      *([row["algorithm"]] if by_algorithm else []),
                      _num(row["final_server_accuracy"]),
                      _num(row["final_client_accuracy"]), _sim(row["sim_time_s"]),
                      _sim(row["wall_time_s"]))
    return shown
