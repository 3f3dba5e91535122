"""The command line: ``python analysis/reproduce.py TARGET --scale cpu ...``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from sflsim.text import plural

from .claims import Claim, Verdict
from .numbers import PaperNumbers
from .papers import DEFAULT_OUT, REPORT, SCALES
from .report import (
    _rel,
    claims_markdown,
    fresh_made_lines,
    host_info,
    last_finished,
    made_lines,
    scale_markdown,
    section_id,
    section_markdown,
    update_report,
)
from .runner import build_sweep, check_data, estimate, run_target
from .scales import SCALE_TABLE, Scale, preset_path
from .targets import TARGETS, Context, Target, check_refs, load_plugins


def scale_for(target: Target, name: str) -> Scale:
    from sflsim.errors import ConfigError

    valid = [s for p, s in SCALE_TABLE if p == target.paper and s in target.scales]
    if not valid:
        papers = sorted({p for p, _ in SCALE_TABLE})
        raise ConfigError(f"{target.key}: paper {target.paper!r} has no scales; papers with "
                          f"scales: {', '.join(papers)} (SCALE_TABLE): use one of them, or "
                          f"add Scale entries (paper, scale) for {target.paper!r} (README "
                          f"\"Adding a target\")")
    if name not in valid:
        raise ConfigError(f"{target.key} has no --scale {name}; valid: {', '.join(valid)}")
    return SCALE_TABLE[(target.paper, name)]


def variants(target: Target, scale: Scale) -> list[Scale]:
    """What the target runs at ``scale``: the scale itself, or at ``--scale paper`` the
    scale on each of the target's datasets, its base read from that dataset's preset."""
    if scale.name != "paper" or not target.datasets:
        return [scale]
    return [scale.on(d, target.backbone) for d in target.datasets]


def analyse_variants(target: Target, contexts: list[tuple[Scale, Context]]
                     ) -> tuple[str, list[tuple[Claim, Verdict, list[str]]]]:
    """:meth:`Target.analyse` of each variant; several (one per dataset) make one body with
    a part per dataset, and each claim is checked per dataset (``name [dataset]``)."""
    if len(contexts) == 1:
        return target.analyse(contexts[0][1])
    bodies, verdicts = [], []
    for scale, ctx in contexts:
        body, checked = target.analyse(ctx)
        bodies.append(f"#### {scale.label}\n\n{body}")
        verdicts += [(replace(claim, name=f"{claim.name} [{scale.label}]"), verdict, on_paper)
                     for claim, verdict, on_paper in checked]
    return "\n\n".join(bodies), verdicts


def list_targets() -> str:
    lines = []
    for key, target in TARGETS.items():
        scale = SCALE_TABLE.get((target.paper, "cpu"))
        lines.append(f"{key}\n    {target.title}")
        if scale and "cpu" in target.scales:
            lines.append(f"    cpu scale: {plural(len(target.points(scale)), 'configuration')} x "
                         f"{plural(scale.seeds, 'seed')}; {target.estimate.get('cpu', 'no estimate')}")
        if target.datasets and "paper" in target.scales:
            presets = ", ".join(_rel(preset_path(target.paper, d, target.backbone))
                                for d in target.datasets)
            lines.append(f"    paper scale: {', '.join(target.datasets)} ({presets})"
                         + ("" if "cpu" in target.scales else "; paper scale only"))
        for claim in target.claims():
            lines.append(f"    claim {claim.name}: {claim.statement} ({claim.source})")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python analysis/reproduce.py",
        description="Run a paper's table or figure with sflsim, print it beside the paper's "
                    "numbers, check the paper's claims, and update analysis/REPRODUCTION.md.")
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="see --list")
    parser.add_argument("--list", action="store_true", help="name the targets and their claims")
    parser.add_argument("--scale", default="cpu", choices=SCALES,
                        help="cpu: what 2 CPU cores allow (default); smoke: seconds, chance-level "
                             "numbers, checks only that the pipeline runs; paper: the papers' "
                             "settings (needs the datasets)")
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT,
                        help="runs go to OUTPUT/<scale>/<target>/ (default runs/reproduce)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="points run at once, each with cores / workers torch threads "
                             "(default: 2, or 1 on a 1-core machine); 1 runs them in this process")
    parser.add_argument("--executor", default="process", choices=("process", "ray"))
    parser.add_argument("--address", default=None, help="Ray cluster address (with --executor ray)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of a run in this process (--workers 1, --estimate; "
                             "default: torch's). On a busy machine 1 can be 10-30x faster than "
                             "2 for these small models")
    parser.add_argument("--device", default=None, metavar="cuda|cuda:N",
                        help="train the points whose algorithm can (sflsim.config.schema."
                             "CUDA_ALGORITHMS) on this torch device; the others stay on "
                             "the CPU")
    parser.add_argument("--seeds", type=int, default=None,
                        help="runs per configuration, seeds 0..K-1 (default: the scale's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="A.B=V",
                        help="override a scenario field in every point (reported as a deviation)")
    parser.add_argument("--report", type=Path, default=None,
                        help="report file (default analysis/REPRODUCTION.md; smoke: "
                             "OUTPUT/REPRODUCTION.md)")
    parser.add_argument("--no-report", action="store_true", help="print only")
    parser.add_argument("--replace", action="append", default=[], metavar="TARGET",
                        help="write TARGET's report section even when it has fewer completed "
                             "runs than the one in the report (without it that section is "
                             "kept, and the exit status is 1)")
    parser.add_argument("--dry-run", action="store_true", help="print the scale and points only")
    parser.add_argument("--made-by", default=None, metavar="COMMAND",
                        help="with --report-only: the runs are new, made on this host by "
                             "COMMAND (the section names it, with the time the last run "
                             "finished), not by the command of the section it replaces")
    parser.add_argument("--made-at", default=None, metavar="COMMIT",
                        help="with --made-by: the commit the runs were made at (default: "
                             "this checkout's)")
    parser.add_argument("--finished-at", default=None, metavar="DATETIME",
                        help="with --made-by: when the last run finished (ISO 8601, e.g. "
                             "2026-12-04T20:34+00:00), where the files' modification times "
                             "are not the runs' own (a clone or a restored copy); default: "
                             "the newest summary.json's modification time")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing; analyse the runs that exist")
    parser.add_argument("--estimate", action="store_true",
                        help="time two rounds of every configuration and extrapolate; this "
                             "trains each configuration for two rounds, so it takes minutes "
                             "at --scale cpu (a line per configuration as it goes)")
    args = parser.parse_args(argv)
    if args.workers < 1 or (args.seeds is not None and args.seeds < 1):
        parser.error("--workers and --seeds must be at least 1")
    if not args.list and not args.targets:
        parser.error("name a TARGET (see --list)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Exit status 0; 1 when a run did not complete or a report section was kept (it has
    more completed runs than this invocation found); 2 for a bad target, scale or --set;
    130 on Ctrl-C or SIGTERM (the finished runs are kept: the same command resumes; the
    points' worker processes are stopped with it)."""
    from sflsim.errors import SflsimError
    from sflsim.signals import GRACE_S, stop_on_signals

    args = parse_args(argv)

    def stuck(signum: int) -> None:  # the watcher thread: the main thread is inside torch
        print(f"{signal.Signals(signum).name}: torch did not return within {GRACE_S:g} s; "
              f"stopped without waiting for it; run the same command again to resume",
              file=sys.stderr)

    try:
        load_plugins()
        with stop_on_signals(stuck):
            return _main(args, argv)
    except SflsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; run the same command again to resume",
              file=sys.stderr)
        return 130


def _main(args: argparse.Namespace, argv: list[str] | None) -> int:
    if args.list:
        print(list_targets())
        return 0
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        print(f"error: unknown target {', '.join(unknown)}; valid: {', '.join(TARGETS)}",
              file=sys.stderr)
        return 2
    if args.made_at is not None and args.made_by is None:
        print("error: --made-at goes with --made-by (the commit of the runs it names)",
              file=sys.stderr)
        return 2
    if args.finished_at is not None:
        if args.made_by is None:
            print("error: --finished-at goes with --made-by (when the runs it names finished)",
                  file=sys.stderr)
            return 2
        try:
            dt.datetime.fromisoformat(args.finished_at)
        except ValueError:
            print(f"error: --finished-at {args.finished_at!r} is not an ISO 8601 date and "
                  f"time (e.g. 2026-12-04T20:34+00:00)", file=sys.stderr)
            return 2
    if args.made_by is not None and not args.report_only:
        print("error: --made-by names the command that made the runs a --report-only "
              "renders; add --report-only (a run names its own command)", file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch

        torch.set_num_threads(max(1, args.threads))
    if not (args.dry_run or args.report_only or args.list):
        from sflsim.metrics.results import check_output_folder

        check_output_folder(args.output / args.scale)  # SflsimError: main prints it
    numbers = PaperNumbers()
    root = args.output / args.scale
    report = args.report or (args.output / "REPRODUCTION.md" if args.scale == "smoke" else REPORT)
    command = shlex.join(["python", "analysis/reproduce.py", *(argv if argv is not None
                                                              else sys.argv[1:])])
    status = 0
    for key in args.targets:  # every target's refs and scale before anything runs
        check_refs(TARGETS[key], numbers)
        scale_for(TARGETS[key], args.scale)
    for key in args.targets:
        target = TARGETS[key]
        scale = scale_for(target, args.scale)
        seeds = args.seeds or scale.seeds
        runs_on = variants(target, scale)
        print(f"== {key} (--scale {scale.name}, {plural(seeds, 'seed')}): {target.title}")
        print(scale_markdown(scale, seeds, args.overrides, numbers, runs_on, args.device))
        if args.dry_run:
            for v in runs_on:
                if not target.points(v):
                    continue
                if v.preset is not None:
                    print(f"  -- {v.label}: {_rel(v.preset)}")
                for point in target.points(v):
                    print(f"  {point.label} (seeds 0..{seeds - 1}): {json.dumps(point.overrides)}")
                with tempfile.TemporaryDirectory() as tmp:  # validates every point
                    build_sweep(target, v, seeds, Path(tmp), args.overrides, args.device)
            continue
        if args.estimate:
            for v in runs_on:
                if v.preset is not None:
                    print(f"  -- {v.label}: {_rel(v.preset)}")
                print(estimate(target, v, seeds, args.workers, args.overrides, args.threads,
                               args.device))
            continue
        host = host_info()
        start = time.perf_counter()
        if not args.report_only:  # every dataset is read before anything runs
            for v in runs_on:
                if target.points(v):
                    with tempfile.TemporaryDirectory() as tmp:
                        sweep, _ = build_sweep(target, v, seeds, Path(tmp), args.overrides,
                                               args.device)
                    check_data(sweep, v.preset or f"{key} --scale {scale.name}", args.overrides)
        contexts = []
        for v in runs_on:
            if v.preset is not None:
                print(f"  -- {v.label}: {_rel(v.preset)}")
            contexts.append((v, run_target(target, v, seeds, root / key / v.slug, root,
                                           workers=args.workers, executor=args.executor,
                                           address=args.address, overrides=args.overrides,
                                           run=not args.report_only, device=args.device,
                                           check=False)))
        ctx = Context(scale=scale, runs=[r for _, c in contexts for r in c.runs], numbers=numbers,
                      root=root)
        incomplete = [r for r in ctx.runs if r.status != "completed"]
        if incomplete and not args.report_only:
            status = 1
            print(f"warning: {len(incomplete)} of {plural(len(ctx.runs), 'run')} did not complete; "
                  f"their numbers are missing (see the report)", file=sys.stderr)
        body, verdicts = analyse_variants(target, contexts)
        print(body)
        print(claims_markdown(verdicts, scale.name) if verdicts else "(no claims)")
        if not args.no_report:
            made = (made_lines(report, section_id(key, scale.name)) if args.report_only
                    else None)
            if args.report_only and args.made_by:
                made = fresh_made_lines(args.made_by, {**host, "load_1min": None,
                                                       "commit": args.made_at or
                                                       host["commit"]},
                                        last_finished(ctx.runs, args.finished_at))
            text = section_markdown(target, scale, seeds, body, verdicts, ctx, command, host,
                                    time.perf_counter() - start, args.overrides, runs_on,
                                    args.device, made)
            kept = update_report(report, section_id(key, scale.name), text,
                                 replace=key in args.replace)
            if kept:
                status = status or 1
                print(f"warning: {kept}; the runs are looked for under {_rel(root / key)}. "
                      f"Point -o at the folder that holds them, or add --replace {key} to "
                      f"write this section anyway", file=sys.stderr)
            else:
                print(f"wrote {report} (section {section_id(key, scale.name)})")
    return status
