"""``sflsim plot KIND DIR...``: draw a paper figure from result files (no simulation is re-run)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sflsim.cli.common import console, user_errors
from sflsim.errors import SflsimError

KIND_HELP = (
    "tradeoff: accuracy vs simulated time (or --x latency_s_mean) across sweep points or runs, "
    "Pareto front marked; tta: accuracy vs simulated time per run; timeline: Gantt chart of "
    "devices, links and the server in one round; early-exit: accuracy and exit ratio vs "
    "threshold (Hetero-SplitEE Fig. 2); splits: cut layer per client over rounds."
)


def plot(
    kind: Annotated[str, typer.Argument(help=KIND_HELP, show_default=False)],
    dirs: Annotated[list[Path], typer.Argument(
        help="Results directories of `sflsim run` (tradeoff and tta also take sweep directories).",
        show_default=False)],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Output path without extension (default: KIND in the current "
                               "directory; timeline: timeline_round<R>).")] = None,
    formats: Annotated[str, typer.Option("--format", help="Comma-separated: png, pdf, svg.")
                       ] = "png,pdf",
    target: Annotated[float | None, typer.Option(
        help="tta: mark this target accuracy (a fraction, e.g. 0.7) and each run's time to it.")
                      ] = None,
    x: Annotated[str | None, typer.Option(
        "--x", help="tradeoff: x axis, a run total (sim_time_s, wall_time_s, bytes_total, "
                    "client_energy_j, ...) or an early_exit.csv column (latency_s_mean, ...). "
                    "Default: sim_time_s.")] = None,
    round_: Annotated[int | None, typer.Option(
        "--round", help="timeline: the round to draw. Default: 1.")] = None,
) -> None:
    """Draw a figure one column wide from result files and write it as PNG and PDF."""
    with user_errors():
        from sflsim import plots  # matplotlib is imported only when plotting

        if kind not in plots.KINDS:
            raise SflsimError(f"unknown figure kind {kind!r}; choose from {', '.join(plots.KINDS)}")
        for flag, value, owner in (("--target", target, "tta"), ("--x", x, "tradeoff"),
                                   ("--round", round_, "timeline")):
            if value is not None and kind != owner:
                raise SflsimError(f"{flag} applies to `sflsim plot {owner}` only")
        fmts = plots.parse_formats(formats)
        round_ = 1 if round_ is None else round_
        out = output or Path(f"timeline_round{round_}" if kind == "timeline" else kind)
        if kind == "tradeoff":
            paths = plots.plot_tradeoff(dirs, out, x=x or "sim_time_s", formats=fmts)
        elif kind == "tta":
            paths = plots.plot_tta(dirs, out, target=target, formats=fmts)
        else:
            if len(dirs) != 1:
                raise SflsimError(f"`sflsim plot {kind}` takes one results directory, got {len(dirs)}")
            if kind == "timeline":
                paths = plots.plot_timeline(dirs[0], out, round_=round_, formats=fmts)
            elif kind == "early-exit":
                paths = plots.plot_early_exit(dirs[0], out, formats=fmts)
            else:
                paths = plots.plot_splits(dirs[0], out, formats=fmts)
    for path in paths:
        console.print(str(path), highlight=False, soft_wrap=True)
