"""``run_scenario``: the one public entry point that builds and runs a simulation.

It checks the results folder before the (slow) build, holds it while the run works
(one run, sweep or export at a time), builds a fresh run (:mod:`sflsim.run.build`) or
resumes one from its checkpoint (:mod:`sflsim.checkpoint`), and runs its rounds
(:mod:`sflsim.run.loop`) with torch's deterministic algorithms (:mod:`sflsim.run.host`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sflsim import checkpoint
from sflsim.algorithms.base import RunContext
from sflsim.checks import check_if_asked
from sflsim.config.input_warnings import kept_warnings, run_warnings
from sflsim.config.resolve import resolve_scenario
from sflsim.config.scenario import Scenario
from sflsim.errors import SflsimError
from sflsim.execution.strategy import choose_execution
from sflsim.metrics import results
from sflsim.run import input_files
from sflsim.run.build import build, run_data
from sflsim.run.host import deterministic_torch, fewer_gc_passes
from sflsim.run.loop import run_rounds
from sflsim.run.progress import Progress
from sflsim.run.result import RunResult
from sflsim.run.seeds import child_seeds
from sflsim.work import ignore_work


def run_scenario(scenario: Scenario, output_dir: str | Path | None = None, *,
                 progress: Progress | None = None, resume: bool = False,
                 overwrite: bool = False, held: bool = False, warnings: Sequence[str] = (),
                 strict: bool = False) -> RunResult:
    """Simulate ``scenario`` and train its models; write results to ``output_dir`` if given.

    After every completed round the tables and a checkpoint (:mod:`sflsim.checkpoint`)
    are written atomically, so a run stopped at any point, even by SIGKILL, can be
    continued with ``resume=True`` and then gives the same ``rounds.csv`` as an
    uninterrupted run (apart from wall-clock columns). Torch runs with deterministic
    algorithms where they exist.

    Args:
        resume: continue the run in ``output_dir`` from its checkpoint (the scenario
            must be the one it was started with).
        overwrite: replace the results already in ``output_dir`` (only sflsim's own
            files are removed, and only once the scenario has been built).
        held: the caller holds ``output_dir`` already
            (:func:`sflsim.metrics.results.hold_folder`), as ``sflsim run`` does from
            before it announces the run, so that a second run into the folder is refused
            before it prints anything; the run then does not hold it again.
        warnings: the input warnings said when ``scenario`` was loaded (collect them
            with :func:`sflsim.config.input_warnings.input_warnings` around
            :func:`~sflsim.config.load_scenario`); with those of the build they are kept
            in ``summary.json``'s and ``manifest.json``'s ``warnings``
            (:func:`~sflsim.config.input_warnings.run_warnings`), and ``summary.json``
            adds one for an implausible outcome (:mod:`sflsim.run.summary`).
        strict: refuse the run if there is an input warning, given or said while it is
            built, before anything is written.

    Returns:
        A :class:`RunResult` whose ``scenario`` is the resolved one (as in
        ``scenario.yaml``: run-time defaults filled in); on KeyboardInterrupt the
        results directory keeps every completed round (``summary.json`` says
        ``"status": "interrupted"``) and the interrupt is re-raised.

    Raises:
        ConfigError / DatasetNotFoundError: the scenario cannot be built, or, ``strict``,
            an input warning (:func:`~sflsim.config.input_warnings.run_warnings`).
        SflsimError: ``output_dir`` already holds results (without ``overwrite`` or
            ``resume``), another run, sweep or export holds it
            (:func:`sflsim.metrics.results.hold_folder`: one at a time), the run would
            write over or delete a file it reads (a trace, a profile, a split schedule:
            :func:`sflsim.metrics.results.refuse_writing_inputs`, with ``overwrite``
            too), or there is no matching, undamaged checkpoint to resume.
        TypeError: ``scenario`` is not a :class:`~sflsim.config.scenario.Scenario`.
        DivergenceError: a loss or parameter became NaN or infinite; the completed
            rounds are kept and ``summary.json`` says ``"status": "diverged"``.
        Exception: anything else raised during the rounds is re-raised after the
            completed rounds are written; ``summary.json`` says ``"status": "failed"``
            with ``"error"`` (type, message, round; see :func:`failure_record`) and the
            traceback is in ``traceback.txt``. Only KeyboardInterrupt (Ctrl-C, SIGTERM)
            leaves ``"interrupted"``.
    """
    if not isinstance(scenario, Scenario):
        raise TypeError(f"run_scenario takes a Scenario (from sflsim.load_scenario or "
                        f"validate_scenario), got {type(scenario).__name__}")
    out = Path(output_dir) if output_dir is not None else None
    # what the run uses, written to scenario.yaml and compared on resume
    scenario = resolve_scenario(scenario)
    check_results_folder(scenario, out, resume=resume, overwrite=overwrite, held=held)
    # one run, sweep or export at a time in a results folder (results.hold_folder); the
    # input warnings are kept for summary.json and manifest.json (strict: refused)
    with run_warnings(warnings, strict=strict), deterministic_torch(), fewer_gc_passes(), \
            results.hold_folder(out) if out is not None and not held \
            else contextlib.nullcontext():
        if resume:
            state, wall_start = resumed_state(scenario, out)
        else:
            wall_start = time.perf_counter()
            ctx, algorithm = build(scenario)  # bad input fails here, before anything is written
            state = checkpoint.RunState(
                round=0, ctx=ctx, algorithm=algorithm, round_rows=[],
                conditions_rng=np.random.default_rng(child_seeds(scenario)["conditions"]),
                wall_time_s=0.0)
            if out is not None:
                start_results(scenario, ctx, out, overwrite=overwrite)
        result = run_rounds(state, out, progress, wall_start)
    check_if_asked(result)  # SFLSIM_CHECK_RESULTS=1 (the tests): physics and bookkeeping
    return result


def check_results_folder(scenario: Scenario, out: Path | None, *, resume: bool,
                         overwrite: bool, held: bool = False) -> None:
    """Refuse, before the (slow) build, a results folder the run cannot use: none to
    resume, one in use (unless the caller ``held`` it), one holding a file the run reads,
    one with results already (without ``resume`` or ``overwrite``).

    Raises:
        SflsimError: as :func:`run_scenario`.
    """
    if resume and out is None:
        raise SflsimError("resume needs the results directory of the run to continue")
    if out is not None:  # before the (slow) build: a folder in use, a file the run reads
        if not held:
            results.check_not_held(out)
        results.refuse_writing_inputs(out, results.run_writes(resume, rewrites_scenario=False),
                                      input_files.scenario_inputs(scenario))
    if out is not None and not (resume or overwrite):
        results.refuse_existing(out)  # before the (slow) build


def resumed_state(scenario: Scenario, out: Path) -> tuple[checkpoint.RunState, float]:
    """The run in ``out`` as its checkpoint left it, with ``scenario`` (the resolved one)
    in place of the checkpoint's, and the ``perf_counter`` instant its wall-clock time
    counts from (its earlier wall time included)."""
    state = checkpoint.load_checkpoint(
        out / checkpoint.CHECKPOINT, scenario.model_dump(mode="json"),  # type: ignore[operator]
        run_data(scenario), ignore_work)  # the run's reporter replaces it
    # equal to the checkpoint's scenario but for host-only fields (parallel clients)
    # and training.rounds (a run extended: sflsim.checkpoint.load_checkpoint)
    if state.ctx.scenario.training.rounds != scenario.training.rounds:
        results.write_scenario(out / "scenario.yaml", scenario.model_dump(mode="json"))
    input_files.write_profiles(out, scenario)
    state.ctx.scenario = state.algorithm.scenario = scenario
    # host-only fields (parallel clients, backend) may differ: the runner chooses again
    state.ctx.execution = choose_execution(scenario, state.ctx.timing_only)
    (out / results.TRACEBACK_FILE).unlink(missing_ok=True)  # of an earlier failure
    return state, time.perf_counter() - state.wall_time_s


def start_results(scenario: Scenario, ctx: RunContext, out: Path, *, overwrite: bool) -> None:
    """A fresh run's results folder, held: its earlier results cleared (refused without
    ``overwrite``), ``scenario.yaml`` and ``manifest.json`` written (with the input
    warnings of the run and its build: :func:`~sflsim.config.input_warnings.kept_warnings`)."""
    out.mkdir(parents=True, exist_ok=True)
    if not overwrite:  # held now: results another run wrote meanwhile stay
        results.refuse_existing(out)
    results.clear_results(out)
    results.write_scenario(out / "scenario.yaml", scenario.model_dump(mode="json"))
    input_files.write_profiles(out, scenario)
    from sflsim.provenance import keep_inputs

    inputs = keep_inputs(out, input_files.scenario_inputs(scenario))
    results.write_json(out / "manifest.json", {
        **results.manifest(scenario.seed),
        #: every file the run read but its dataset: where, its SHA-256 and its copy here
        "inputs": inputs,
        "seeds": scenario.stream_seeds._asdict(),
        # what the files gave where the scenario leaves it open (image_folder:
        # image_size and channels null follow the images)
        "dataset": {"train_samples": len(ctx.data.y_train),
                    "test_samples": len(ctx.data.y_test),
                    "num_classes": ctx.data.num_classes,
                    "channels": ctx.data.in_channels,
                    "image_size": ctx.data.image_size},
        "warnings": kept_warnings()})
