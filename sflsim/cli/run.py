"""``sflsim run FILE -o DIR``: simulate a scenario, show progress, write results."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, NoReturn

import typer
from rich.markup import escape

from sflsim.cli.common import (
    EXIT_FAILED,
    STRICT_HELP,
    USER_ERROR,
    as_typed,
    console,
    err_console,
    options_as_typed,
    path_option,
    print_error,
    print_table,
    print_warning,
    refuse_warnings,
    run_summary_table,
    user_errors,
)
from sflsim.cli.mlflow_log import LogTarget, MlflowProgress, check_log_options, tracking_uri
from sflsim.cli.progress_display import PlainProgress, RichProgress
from sflsim.cli.tensorboard import TensorBoardProgress, require_tensorboard
from sflsim.config import load_scenario
from sflsim.config.load import input_warnings, scenario_errors
from sflsim.config.resolve import resolve_scenario
from sflsim.config.scenario import Scenario
from sflsim.data.presence import check_dataset_files
from sflsim.errors import DivergenceError, SflsimError
from sflsim.metrics import results
from sflsim.resume import check_resume_of
from sflsim.run import input_files
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
    others_busy_cores,
    torch_threads,
)

if TYPE_CHECKING:
    from sflsim.runner import RunResult

#: The files named in the last line of a run, when it wrote them (in the order of
#: :data:`~sflsim.metrics.results.RESULT_FILES`)
TABLES_SHOWN = ("rounds.csv", "clients.parquet", "events.parquet", "clients.csv", "events.csv",
                "early_exit.csv", "summary.json")


def run(
    file: Annotated[Path, typer.Argument(
        help="Scenario YAML file, or the name of a shipped scenario (quickstart).")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", **path_option("-o"),
        help="Results directory (default: runs/<scenario name>).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a field: a.b=value (repeatable).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the interrupted run in the output directory from its "
        "last completed round.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace the results already in the output directory.")] = False,
    device: Annotated[str | None, typer.Option(
        "--device", help="Train on cpu, cuda or cuda:N (sets training.device); simulated "
        "times do not depend on it.")] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", help=f"Torch intra-op threads, 1 to {MAX_THREADS} (default: OMP_NUM_THREADS if set, "
        "else one per usable core: CPU affinity and container quota; 1 is often fastest "
        "for small models on a busy machine).")] = None,
    parallel_clients: Annotated[int | None, typer.Option(
        "--parallel-clients", help="Train this many clients at once on the host, one "
        "torch thread each (sets training.parallel_clients; the FedAvg family and "
        "Hetero-SplitEE); results are identical to --threads 1.")] = None,
    no_train: Annotated[bool, typer.Option(
        "--no-train", help="Timing only: simulate the same processes with costs from the "
        "cost table, run no torch step (sets training.timing_only).")] = False,
    tensorboard: Annotated[Path | None, typer.Option(
        "--tensorboard", **path_option("--tensorboard"),
        help="Also write each round's accuracy, loss, times, bytes, FLOPs "
        "and energy as TensorBoard scalars to this folder (needs pip install -e "
        "\".[tensorboard]\"); a resumed run writes its rounds again.")] = None,
    log: Annotated[LogTarget | None, typer.Option(
        "--log", help="Also log the run to an experiment tracker: mlflow logs the scenario "
        "as parameters, each round's rounds.csv row as metrics and the result files as "
        "artifacts (needs pip install -e \".[mlflow]\"); --resume continues its MLflow "
        "run.")] = None,
    mlflow_uri: Annotated[str | None, typer.Option(
        "--mlflow-uri", help="MLflow tracking URI of --log mlflow (default: "
        "MLFLOW_TRACKING_URI if set, else the file store ./mlruns).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help=STRICT_HELP)] = False,
) -> None:
    """Simulate a scenario and train its models; write its tables (rounds, clients, events),
    summary.json and the resolved scenario.yaml to the output directory, and a checkpoint
    after every round (continue an interrupted run with --resume). Input warnings are said
    at the start, again at the end and kept in summary.json and manifest.json, as is a
    warning for an implausible outcome (over a year of simulated time, over 1 kWh of
    client energy per device and round)."""
    started = cpu_sample()  # the load of other processes while torch loads (a note below)
    typed = _typed_options(no_train, device, parallel_clients)
    own_set = list(set_ or [])
    # the results folder is held from its first check to the run's end: a second run into
    # it is refused before either prints a word about running (results.hold_folder)
    with contextlib.ExitStack() as hold:
        with user_errors(), options_as_typed(typed):  # refused by the loader: before torch
            check_log_options(log, mlflow_uri)  # MLflow missing: refused before the scenario
            plan = _check_before_torch(file, output, own_set, typed, threads, resume,
                                       overwrite, tensorboard, hold, strict)
        if plan is None:  # already complete: nothing to resume
            return
        run_scenario = _import_runner()

        with torch_threads(plan.choice.threads), user_errors(), options_as_typed(typed):
            _announce(file, plan, started, resume)
            progress = _progress(quiet, tensorboard, log, mlflow_uri, plan, resume)
            if resume:
                note = _extension_note(plan.scenario, plan.header, plan.out)
                if note:
                    err_console.print(f"note: {note}", highlight=False)
            options = {"resume": resume, "overwrite": overwrite, "held": True,
                       "warnings": plan.warnings, "strict": strict}
            again = command_as_typed(file, plan.out, own_set, typed, threads, quiet,
                                     tensorboard, strict, log, mlflow_uri)
            result = _simulate(run_scenario, plan, progress, options, again)
    _report(result, plan.out, tensorboard)
    if log is LogTarget.mlflow:
        console.print(f"MLflow run in {escape(tracking_uri(mlflow_uri))} (experiment "
                      f"{escape(plan.scenario.name)}; mlflow ui --backend-store-uri "
                      f"{escape(tracking_uri(mlflow_uri))})", highlight=False)


def _progress(quiet: bool, tensorboard: Path | None, log: LogTarget | None,
              mlflow_uri: str | None, plan: _RunPlan, resume: bool) -> Any:
    """What follows the run's rounds: the progress display (none with ``quiet``), wrapped
    by the TensorBoard writer and the MLflow logger asked for."""
    progress = None if quiet else progress_display()
    if tensorboard is not None:
        progress = TensorBoardProgress(tensorboard, progress)
    if log is LogTarget.mlflow:
        progress = MlflowProgress(plan.out, tracking_uri(mlflow_uri), plan.scenario.name,
                                  resume, progress)
    return progress


class _RunPlan(NamedTuple):
    """What the checks before torch loads settled (:func:`_check_before_torch`)."""

    choice: ThreadChoice
    path: Path  # the scenario file (a shipped scenario's name resolved)
    scenario: Scenario
    out: Path
    header: dict  # the checkpoint's, when resuming; else empty
    set_: list[str]  # the user's --set overrides, then the options that set fields
    warnings: list[str]  # the input warnings of the scenario, its profiles and its fleet


def _typed_options(no_train: bool, device: str | None,
                   parallel_clients: int | None) -> dict[str, str]:
    """The options that set scenario fields, as overrides: assignment -> option as typed."""
    return {**({"training.timing_only=true": "--no-train"} if no_train else {}),
            **({f"training.device={device}": f"--device {device}"} if device else {}),
            **({f"training.parallel_clients={parallel_clients}":
                f"--parallel-clients {parallel_clients}"} if parallel_clients is not None else {})}


def _check_before_torch(file: Path, output: Path | None, own_set: list[str],
                        typed: dict[str, str], threads: int | None, resume: bool,
                        overwrite: bool, tensorboard: Path | None,
                        hold: contextlib.ExitStack, strict: bool = False) -> _RunPlan | None:
    """Load the scenario and refuse what cannot run, before torch loads: the options,
    its input warnings with ``strict`` (one line each; else they are said once and kept
    for the run), the output folder (held from here on in ``hold``: one in use is refused
    now, and none can be taken by another run after these checks), a checkpoint that cannot be
    resumed, a missing dataset. None: the run in the output folder is already complete
    (said so; nothing to resume)."""
    choice = choose_threads(threads)  # --threads (or OMP_NUM_THREADS) out of range: refused
    if resume and overwrite:
        raise SflsimError("--resume and --overwrite exclude each other: --resume continues "
                          "the run in the output directory, --overwrite starts it afresh")
    if tensorboard is not None:
        require_tensorboard()
    set_ = [*own_set, *typed]  # the options are overrides too
    path = scenario_path(file)
    # said once each (strict: refused below, one line each)
    say = (lambda _: None) if strict else (lambda m: print_warning(as_typed(m, typed)))
    with input_warnings(say) as said:
        scenario = load_scenario(path, set_)
    warnings = [as_typed(m, typed) for m in said]
    if strict:
        refuse_warnings(warnings)
    out = output or Path("runs") / scenario.name
    results.check_output_folder(out)
    results.refuse_other_kind(out, "run")
    if tensorboard is not None:  # as -o: a folder that cannot be made, before any round
        results.check_output_folder(tensorboard, option="--tensorboard")
    hold.enter_context(results.hold_folder(out))  # another run, sweep or export writes there
    header: dict = {}
    if resume:  # a checkpoint that cannot be resumed (another scenario, a complete run
        # included, a damaged one) is refused before the run is announced and before
        # torch loads
        header = check_resume_of(out, resolve_scenario(scenario).model_dump(mode="json"))
    # never over a file the run reads: the scenario itself, a trace, a profile
    results.refuse_writing_inputs(
        out, results.run_writes(resume, rewrites_scenario=_rounds_changed(header, scenario)),
        {"the scenario": path, **input_files.scenario_inputs(scenario)})
    if not (resume or overwrite):
        results.refuse_existing(out)  # before announcing the run
    if resume and _completed(out, scenario.training.rounds):  # one statement, no "resuming"
        console.print(f"{escape(str(out))} is already complete "
                      f"({plural(scenario.training.rounds, 'round')}); nothing to resume",
                      highlight=False)
        return None
    with scenario_errors(path, set_):  # a missing dataset, told before torch loads
        check_dataset_files(scenario)
    return _RunPlan(choice, path, scenario, out, header, set_, list(warnings))


def _import_runner() -> Callable[..., RunResult]:
    """:func:`sflsim.runner.run_scenario`, imported now (torch loads with it); Ctrl-C while
    it loads: nothing has started, exit 130."""
    try:
        from sflsim.runner import run_scenario  # torch is imported only when running
    except KeyboardInterrupt:  # Ctrl-C while torch loads: nothing has started
        err_console.print("interrupted before the run started; nothing was written",
                          highlight=False)
        raise typer.Exit(130) from None
    return run_scenario


def _announce(file: Path, plan: _RunPlan, started: CpuSample | None, resume: bool) -> None:
    """Say what runs: ignored host options, the scenario, its algorithm, clients, rounds and
    output folder, the torch threads, and notes on a busy host or a resume's threads."""
    scenario, path, out, choice = plan.scenario, plan.path, plan.out, plan.choice
    for note in host_option_notes(scenario):
        err_console.print(f"note: {note}", highlight=False)
    shipped = f" ({escape(str(path))})" if path != file else ""
    console.print(f"{'resuming' if resume else 'running'} {escape(scenario.name)}{shipped}: "
                  f"{scenario.algorithm.name}, {plural(scenario.num_clients, 'client')}, "
                  f"{plural(scenario.training.rounds, 'round')} -> {escape(str(out))}")
    console.print(thread_line(choice, scenario), highlight=False)
    notes = [busy_note(choice, others_busy_cores(started, cpu_sample())),
             *([resume_threads_note(out, choice)] if resume else [])]
    for note in filter(None, notes):
        err_console.print(f"note: {note}", highlight=False)


def _simulate(run_scenario: Callable[..., RunResult], plan: _RunPlan,
              progress: RichProgress | PlainProgress | TensorBoardProgress | MlflowProgress
              | None,
              options: dict[str, Any],
              again: list[str]) -> RunResult:
    """Run the scenario, showing ``progress``; Ctrl-C and SIGTERM keep the finished rounds
    and say how to go on (``again``: the command, as run); a divergence or a failure is
    told in one line, with what the output folder keeps."""
    scenario, out = plan.scenario, plan.out

    def stuck(signum: int) -> None:  # the watcher thread, main thread inside torch
        if progress is not None:
            progress.stop()
        results.mark_interrupted(out)
        err_console.print(f"{signal.Signals(signum).name}: torch did not return within "
                          f"{GRACE_S:g} s; stopped without waiting for it", highlight=False)
        err_console.print(_interrupted_note(scenario, out, again), highlight=False)

    # Ctrl-C and SIGTERM (kill, timeout, batch schedulers) keep the finished rounds
    try:
        with stop_on_signals(stuck), scenario_errors(plan.path, plan.set_):
            if progress is None:
                result = run_scenario(scenario, out, **options)
            else:
                with progress:
                    result = run_scenario(scenario, out, progress=progress, **options)
    except KeyboardInterrupt:
        err_console.print(_interrupted_note(scenario, out, again), highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except DivergenceError as exc:
        print_error(str(exc))
        err_console.print(_kept_note(out, "diverged"), highlight=False)
        raise typer.Exit(USER_ERROR) from None
    except SflsimError:
        raise
    except OSError as exc:
        if exc.filename is not None:  # a file or folder of the user's: user_errors says which
            raise
        _failed(exc, out)
    except Exception as exc:  # noqa: BLE001  (a defect: one line, the rest in a file)
        _failed(exc, out)
    return result


def _report(result: RunResult, out: Path, tensorboard: Path | None) -> None:
    """The run's final numbers, its warnings again (summary.json's: the input's, said at the
    start, and an implausible outcome's), and where its results (and TensorBoard scalars)
    are."""
    print_table(run_summary_table(result.summary))
    for message in result.summary.get("warnings", []):
        print_warning(message)
    shown = [name for name in results.RESULT_FILES if name in TABLES_SHOWN and (out / name).exists()]
    console.print(f"results in {escape(str(out))}/ ({', '.join(shown)})")
    if tensorboard is not None:
        console.print(f"TensorBoard scalars in {escape(str(tensorboard))}/ (tensorboard "
                      f"--logdir {escape(str(tensorboard))})", highlight=False)


def _failed(exc: Exception, out: Path) -> NoReturn:
    """A run that failed for another reason than its input: one line, the traceback in a
    file (:func:`sflsim.runner.failure_record`), exit :data:`EXIT_FAILED`."""
    print_error(f"the run failed: {type(exc).__name__}: {exc}")
    tb = out / results.TRACEBACK_FILE
    err_console.print((f"the traceback is in {escape(str(tb))}; " if tb.is_file() else "")
                      + _kept_note(out, "failed"), highlight=False)
    raise typer.Exit(EXIT_FAILED) from None


def _kept_note(out: Path, status: str) -> str:
    """What a run that ended with ``status`` left in ``out``: its completed rounds, or
    none (``summary.json``'s ``rounds_completed``)."""
    from sflsim.sweep.execute import read_summary

    summary = read_summary(out)
    if summary is None:  # it failed before its folder was written
        return f"no round completed and nothing was written to {escape(str(out))}"
    done = summary.get("rounds_completed") or 0
    kept = (f"the {plural(done, 'completed round')} {'is' if done == 1 else 'are'} kept in "
            if done else "no round completed; the record is in ")
    return f"{kept}{escape(str(out))} (summary.json: status {status})"


def thread_line(choice: ThreadChoice, scenario: Scenario) -> str:
    """``torch threads: 2 (2 usable cores)``, and how clients share them if trained at once."""
    line = choice.describe()
    training = scenario.training
    if (training.parallel_clients > 1 and not training.timing_only and not fuses_alone(scenario)
            and scenario.conditions.round_deadline_s is None):  # else ignored (a note says so)
        where = {"processes": " in worker processes",
                 "ray": " on Ray actors"}.get(training.parallel_backend, "")
        line += f"; {plural(training.parallel_clients, 'client')} at once{where}, 1 thread each"
    return line


def resume_threads_note(out: Path, choice: ThreadChoice) -> str | None:
    """A note when a resumed run uses another torch thread count than its first part did
    (``manifest.json``), which changes results in the last bits; else None."""
    try:
        before = json.loads((out / "manifest.json").read_text())["torch_threads"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if before == choice.threads:
        return None
    return (f"the rounds already in {out} ran with {plural(before, 'torch thread')}, these run "
            f"with {choice.threads}; results will differ in the last bits from an uninterrupted run "
            f"(--threads {before} matches it)")


def host_option_notes(scenario: Scenario) -> list[str]:
    """Host options the scenario sets that this run will ignore, and why; not those an
    input warning names (:func:`~sflsim.config.capability_checks.idle_settings`)."""
    training, notes = scenario.training, []
    warned = training.timing_only  # idle_settings warns of parallel_clients there
    asked = [name for name, on in (
        ("training.parallel_clients", training.parallel_clients > 1 and not warned),
        ("training.fuse_clients", training.fuse_clients)) if on]
    why = ("timing-only runs train nothing" if training.timing_only else
           "a round deadline could cut a client off in the middle of work trained ahead"
           if scenario.conditions.round_deadline_s is not None else None)
    if why:
        notes += [f"{name} is ignored: {why}" for name in asked]
    elif training.parallel_clients > 1 and fuses_alone(scenario):
        notes.append(f"training.parallel_clients is ignored: with training.fuse_clients, "
                     f"{scenario.algorithm.name}'s clients train as one batched step")
    return notes


def fuses_alone(scenario: Scenario) -> bool:
    """Whether ``training.fuse_clients`` takes the place of ``parallel_clients``: the FedAvg
    family fuses the round's clients into one batched step, on no other thread or process
    (Hetero-SplitEE runs fused groups on ``parallel_clients`` threads)."""
    from sflsim.algorithms.base import ALGORITHMS
    from sflsim.algorithms.fedavg import FedAvg

    algorithm = ALGORITHMS.get(scenario.algorithm.name)
    return (scenario.training.fuse_clients and isinstance(algorithm, type)
            and issubclass(algorithm, FedAvg))


def progress_display() -> RichProgress | PlainProgress:
    """A bar when standard output is a terminal; plain lines at a steady pace when it is
    not (a log file, a pipe), where a bar would show nothing (:mod:`sflsim.cli.progress_display`)."""
    if console.is_terminal:
        return RichProgress(console)
    return PlainProgress(lambda line: console.print(line, highlight=False))


def command_as_typed(file: str, out: Path, overrides: list[str], typed: dict[str, str],
                     threads: int | None, quiet: bool,
                     tensorboard: Path | None = None, strict: bool = False,
                     log: LogTarget | None = None, mlflow_uri: str | None = None) -> list[str]:
    """The ``sflsim run`` command as the user typed it (to repeat with ``--resume`` or
    ``--overwrite``): the file, the output folder, the user's own ``--set`` overrides, the
    options that set fields (``typed``: assignment -> option), ``--threads``, ``-q``,
    ``--tensorboard``, ``--strict``, ``--log`` and ``--mlflow-uri``."""
    return ["sflsim", "run", str(file), "-o", str(out), *(f"--set={s}" for s in overrides),
            *(word for option in typed.values() for word in option.split(" ", 1)),
            *(["--threads", str(threads)] if threads is not None else []),
            *(["-q"] if quiet else []),
            *(["--tensorboard", str(tensorboard)] if tensorboard is not None else []),
            *(["--strict"] if strict else []),
            *(["--log", log.value] if log is not None else []),
            *(["--mlflow-uri", mlflow_uri] if mlflow_uri is not None else [])]


def _interrupted_note(scenario: Scenario, out: Path, again: list[str]) -> str:
    """What an interrupted run kept and how to go on (``again``: the command, as run)."""
    if scenario.training.timing_only:
        return (f"interrupted: timing-only runs keep no checkpoint; the rounds done are in "
                f"{escape(str(out))}; run again with --overwrite")
    if not (out / "checkpoint.pkl").is_file():  # sflsim.checkpoint.CHECKPOINT
        return (f"interrupted before the first round finished: nothing to resume; start "
                f"again with: {escape(shlex.join([*again, '--overwrite']))}")
    return (f"interrupted: {_kept_note(out, 'interrupted')}; continue "
            f"with: {escape(shlex.join([*again, '--resume']))}")


def _extension_note(scenario: Scenario, header: dict, out: Path) -> str:
    """What resuming with another ``training.rounds`` does to the learning rate.

    ``header``: the checkpoint's (:func:`sflsim.resume.check_resume`). The rounds
    before are the checkpoint's; the schedule's horizon is the one the checkpoint keeps
    (the run's first ``training.rounds``), not the rewritten ``scenario.yaml``'s, which
    says the rounds of the last resume."""
    try:
        before = header["scenario"]["training"]["rounds"]
    except (KeyError, TypeError):
        return ""
    now = scenario.training.rounds
    if before == now:
        return ""
    schedule = scenario.training.schedule
    if schedule.name == "constant":
        lr = ("the learning rate is constant, so the result is that of a run started with "
              f"{plural(now, 'round')}")
    else:
        horizon = header.get("lr_horizon_rounds") or _summary_horizon(out) or before
        done = header.get("round", before)
        if now <= horizon:
            after = ", so it ends above min_lr" if now < horizon else ""
        elif done > horizon:
            after = (f": the learning rate has been at min_lr {schedule.min_lr:g} since round "
                     f"{horizon + 1} and stays there")
        else:
            after = (f": from round {horizon + 1} the learning rate stays at min_lr "
                     f"{schedule.min_lr:g}")
        lr = (f"the cosine learning-rate schedule keeps the horizon the run started with "
              f"({plural(horizon, 'round')}){after}")
    return f"training.rounds {before} -> {now}: {lr}"


def _summary_horizon(out: Path) -> int | None:
    """``lr_schedule_horizon_rounds`` of ``out``'s summary (a checkpoint of an older
    sflsim version does not keep it), None where it is missing."""
    try:
        value = json.loads((out / "summary.json").read_text()).get("lr_schedule_horizon_rounds")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def _rounds_changed(header: dict, scenario: Scenario) -> bool:
    """Whether a resume from ``header`` (the checkpoint's, :func:`sflsim.resume.check_resume`;
    empty: no resume) changes ``training.rounds``, and so rewrites ``scenario.yaml``."""
    try:
        return header["scenario"]["training"]["rounds"] != scenario.training.rounds
    except (KeyError, TypeError):
        return bool(header)


def _completed(out: Path, rounds: int) -> bool:
    """Whether ``out`` holds a completed run of ``rounds`` rounds (its summary says so)."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return summary.get("status") == "completed" and summary.get("rounds_completed") == rounds
