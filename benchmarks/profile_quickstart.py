"""Where the time of a quickstart run goes: cProfile of ``run_scenario``, by category.

Runs :func:`sflsim.runner.run_scenario` on ``scenarios/quickstart.yaml`` (shrink it with
``--rounds`` / ``--fraction``) under :mod:`cProfile`, with the CLI's progress bar
(``--no-progress`` to leave it out), one torch thread, results in a temporary folder,
and splits the run's time into: torch forward / backward / optimizer of the training
steps (client- and server-side, from the callers of those calls in
``Algorithm.client_step`` / ``server_step``), the rest of the training-step code, the
SimPy engine and sflsim's bookkeeping around the steps, per-round evaluation, the
early-exit sweep, FLOP counting (``sflsim.models.cost.count_flops``), the per-round
records, result files (CSV/JSON/YAML), the per-round checkpoint, the progress bar,
building the run (data load, partition, models) and the rest.

cProfile adds a per-call overhead to Python code, so the Python-heavy categories
(SimPy, bookkeeping) come out a little larger than they are without it; the total
wall time without the profiler is printed for comparison with ``--compare``.

    python benchmarks/profile_quickstart.py                         # 1 round, ~2 min on 2 cores
    python benchmarks/profile_quickstart.py --rounds 2 --fraction 0.5 --top 30
    python benchmarks/profile_quickstart.py --pstats /tmp/q.pstats  # keep the raw profile
    pyinstrument benchmarks/profile_quickstart.py --no-cprofile     # a pyinstrument tree instead
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time

import torch

from sflsim.config.load import load_scenario
from sflsim.runner import run_scenario


def _match(func: tuple[str, int, str], file_part: str, name: str | None = None) -> bool:
    filename, _, fname = func
    return file_part in filename and (name is None or fname == name)


def _cum(stats: dict, file_part: str, name: str | None = None) -> float:
    """Cumulative seconds of the (outermost) functions matching ``file_part`` / ``name``."""
    return sum(v[3] for f, v in stats.items() if _match(f, file_part, name))


def _cum_from(stats: dict, callee: tuple[str, str | None], callers: list[tuple[str, str]]) -> float:
    """Cumulative seconds of ``callee`` when called directly from one of ``callers``."""
    total = 0.0
    for f, v in stats.items():
        if not _match(f, *callee):
            continue
        for caller, cv in v[4].items():
            if any(_match(caller, fp, n) for fp, n in callers):
                total += cv[3]
    return total


#: the modules of the results folder's writers (sflsim.metrics.results and what it re-exports)
RESULTS_MODULES = tuple(f"sflsim/metrics/{name}.py" for name in (
    "results", "writing", "streamed", "reading", "output", "lock"))


def categorize(stats: dict, total: float) -> list[tuple[str, float]]:
    steps = [("sflsim/algorithms/steps.py", "client_step"), ("sflsim/algorithms/steps.py", "server_step")]
    # the torch calls of a client step sit in Algorithm.local_step where it exists
    torch_callers = [*steps, ("sflsim/algorithms/steps.py", "local_step")]
    fwd = _cum_from(stats, ("torch/nn/modules/module.py", "_wrapped_call_impl"), torch_callers)
    bwd = _cum_from(stats, ("torch/_tensor.py", "backward"), torch_callers)
    opt = (_cum_from(stats, ("torch/optim/lr_scheduler.py", "wrapper"), torch_callers)
           + _cum_from(stats, ("torch/optim/optimizer.py", "wrapper"), torch_callers)
           + _cum_from(stats, ("torch/_compile.py", None), torch_callers)  # zero_grad wrapper
           + _cum_from(stats, ("torch/optim/optimizer.py", "zero_grad"), torch_callers))
    item = _cum_from(stats, ("sflsim/algorithms/steps.py", "record_loss"), steps)
    cost = _cum(stats, "sflsim/models/cost.py", "count_flops")
    cost_in_steps = _cum_from(stats, ("sflsim/models/cost.py", "cost"),
                              [("sflsim/algorithms/costs.py", "client_cost"),
                               ("sflsim/algorithms/steps.py", "server_step")])
    step_total = sum(_cum(stats, fp, n) for fp, n in steps)
    simulate = _cum(stats, "sflsim/engine/simulation.py", "run_until")
    evaluation = _cum(stats, "sflsim/algorithms/steps.py", "evaluate")
    early = _cum(stats, "sflsim/algorithms/early_exit.py", "run_early_exit")
    ckpt = _cum(stats, "sflsim/checkpoint.py", "save_checkpoint")
    files = sum(_cum_from(stats, (module, None), [("sflsim/run/", None)]) for module in RESULTS_MODULES)
    records = sum(_cum(stats, "sflsim/metrics/records.py", n)
                  for n in ("mean_losses", "client_round_columns", "round_row"))
    progress = (_cum(stats, "sflsim/cli/progress_display.py", "work_done")
                + _cum(stats, "sflsim/cli/progress_display.py", "round_done"))
    check = _cum(stats, "sflsim/algorithms/steps.py", "check_parameters")
    sched = _cum(stats, "sflsim/algorithms/steps.py", "step_schedulers")
    build = _cum(stats, "sflsim/run/build.py", "build")
    # FLOP counting happens inside the steps the first time a piece is seen
    other_step = step_total - fwd - bwd - opt - item - cost_in_steps
    engine = simulate - step_total - (cost - cost_in_steps)  # the rest of the FLOP counting
    rows = [
        ("training: torch forward + loss (client and server steps)", fwd),
        ("training: torch backward", bwd),
        ("training: optimizer step + zero_grad", opt),
        ("training: loss.item() + record_loss", item),
        ("training: rest of client_step/server_step (indexing, costs lookup, sim calls)", other_step),
        ("SimPy engine + sflsim processes around the steps", engine),
        ("FLOP counting (cost.count_flops, first use of each piece)", cost),
        ("evaluation (Algorithm.evaluate, every round)", evaluation),
        ("early-exit sweep after the last round (run_early_exit)", early),
        ("checkpoint pickling (save_checkpoint, every round)", ckpt),
        ("result files (CSV/JSON/YAML writes)", files),
        ("records (rows per round)", records),
        ("progress bar (work_done + round_done, main thread)", progress),
        ("check_parameters + step_schedulers", check + sched),
        ("build (data load, partition, models, memory check)", build),
    ]
    rows.append(("other", total - sum(v for _, v in rows)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="scenarios/quickstart.yaml")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-cprofile", action="store_true", help="just run (e.g. under pyinstrument)")
    ap.add_argument("--compare", action="store_true", help="also time one run without the profiler")
    ap.add_argument("--pstats", help="write the raw cProfile stats here")
    ap.add_argument("--top", type=int, default=20, help="functions by own time to list")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    scenario = load_scenario(args.scenario, [f"training.rounds={args.rounds}",
                                             f"dataset.fraction={args.fraction}", *args.overrides])

    def once(profiler: cProfile.Profile | None) -> float:
        out = tempfile.mkdtemp(prefix="sflsim_profile_")
        progress = None
        if not args.no_progress:
            from sflsim.cli.common import console
            from sflsim.cli.progress_display import RichProgress
            progress = RichProgress(console)
        try:
            t0 = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            if progress is None:
                run_scenario(scenario, out, overwrite=True)
            else:
                with progress:
                    run_scenario(scenario, out, overwrite=True, progress=progress)
            if profiler is not None:
                profiler.disable()
            return time.perf_counter() - t0
        finally:
            shutil.rmtree(out, ignore_errors=True)

    if args.no_cprofile:
        print(f"wall {once(None):.2f} s")
        return
    prof = cProfile.Profile()
    wall = once(prof)
    if args.pstats:
        prof.dump_stats(args.pstats)
    st = pstats.Stats(prof)
    total = _cum(st.stats, "sflsim/run/entry.py", "run_scenario")  # type: ignore[attr-defined]
    print(f"\n{args.scenario}: rounds {args.rounds}, fraction {args.fraction}, "
          f"{args.threads} torch thread(s), progress {'off' if args.no_progress else 'on'}")
    print(f"wall under cProfile {wall:.2f} s (run_scenario {total:.2f} s)")
    for name, secs in categorize(st.stats, total):  # type: ignore[attr-defined]
        print(f"  {secs:8.2f} s {100 * secs / total:5.1f}%  {name}")
    print(f"\ntop {args.top} functions by own time:")
    st.sort_stats("tottime").print_stats(args.top)
    if args.compare:
        print(f"wall without profiler: {once(None):.2f} s")


if __name__ == "__main__":
    main()
