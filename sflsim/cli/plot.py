"""``sflsim plot KIND DIR...``: draw a paper figure from result files (no simulation is re-run)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sflsim.cli.common import console, path_option, user_errors
from sflsim.errors import SflsimError
from sflsim.text import did_you_mean

KIND_HELP = (
    "tradeoff: accuracy vs simulated time (or --x latency_s_mean) across sweep points or runs, "
    "Pareto front marked; tta: accuracy vs simulated time per run; timeline: Gantt chart of "
    "devices, links and the server in one round; early-exit: accuracy and exit ratio vs "
    "threshold (Hetero-SplitEE Fig. 2), from tau = -ln(number of classes) by default; splits: "
    "cut layer per client over rounds; sweep: a metric (--y) of a sweep's points against one "
    "of its axes (--x), one line per algorithm and combination of the other axes."
)

LABEL_HELP = ("Rename a legend entry: NAME=TEXT, NAME being what the legend shows without it "
              "(a run by its name, results folder, scenario name or sweep point id, p003; a "
              "sweep line, algorithm=fedavg; an end layer, Layer-3; an activity, client_train; "
              "a device group, pi4_wifi). Repeatable: --label seq=Sequential --label "
              "avg=Averaging.")

BAND_HELP = ("sweep: around the mean of a configuration's seeds (a sweep with seeds), the 95% t "
             "interval of the mean (ci95), ± one sample std (std) or nothing (none). Default: "
             "ci95.")


def plot(
    kind: Annotated[str, typer.Argument(help=KIND_HELP, show_default=False)],
    dirs: Annotated[list[Path], typer.Argument(
        help="Results directories of `sflsim run` (tradeoff and tta also take sweep "
             "directories; sweep takes one sweep directory).",
        show_default=False)],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", **path_option("-o", "file or folder"),
        help="Output path: a prefix (figs/tta -> figs/tta.png, figs/tta.pdf), a file name whose "
             "extension .png, .pdf or .svg is the one format written, or an existing folder to "
             "write the default names in (default: KIND in the current directory; timeline: "
             "timeline_round<R>; sweep: sweep_<Y>).")] = None,
    formats: Annotated[str | None, typer.Option(
        "--format", help="Comma-separated: png, pdf, svg. Default: the extension of -o, else "
                         "png,pdf.")] = None,
    target: Annotated[float | None, typer.Option(
        help="tta: mark this target accuracy (a fraction, e.g. 0.7) and each run's time to it, "
             "and print those times.")] = None,
    x: Annotated[str | None, typer.Option(
        "--x", help="tradeoff: x axis, a run total (sim_time_s, wall_time_s, bytes_total, "
                    "client_energy_j, ...) or an early_exit.csv column (latency_s_mean, ...); "
                    "default: sim_time_s. sweep: the sweep axis to draw against, as its "
                    "sweep.csv column (devices.pi4_wifi.count) or short name "
                    "(pi4_wifi.count); default: the sweep's only axis.")] = None,
    y: Annotated[str | None, typer.Option(
        "--y", help="sweep: the metric to draw, a column of sweep.csv (final_server_accuracy, "
                    "sim_time_s, client_energy_j, bytes_total, ...) or a number in the points' "
                    "summary.json (nested keys by dotted path). Default: "
                    "final_server_accuracy.")] = None,
    round_: Annotated[int | None, typer.Option(
        "--round", help="timeline: the round to draw. Default: 1.")] = None,
    tau_min: Annotated[float | None, typer.Option(
        "--tau-min", help="early-exit: where the threshold axis starts. Default: -ln(number of "
                          "classes of the run's dataset), below which every sample exits.")
                       ] = None,
    band: Annotated[str | None, typer.Option("--band", metavar="ci95|std|none",
                                             help=BAND_HELP)] = None,
    label: Annotated[list[str] | None, typer.Option(
        "--label", metavar="NAME=TEXT", help=LABEL_HELP, show_default=False)] = None,
    xlabel: Annotated[str | None, typer.Option(
        "--xlabel", help="The x-axis label (the bottom panel's), instead of the figure's own.")
                      ] = None,
    ylabel: Annotated[str | None, typer.Option(
        "--ylabel", help="The y-axis label (the top panel's), instead of the figure's own.")
                      ] = None,
    title: Annotated[str | None, typer.Option(
        "--title", help="A title over the (top) axes. Default: none (timeline: Round R).")
                     ] = None,
    width: Annotated[float | None, typer.Option(
        "--width", metavar="INCHES", help="The figure's width in inches (3.4: one column; 7.0: two). Legends "
                        "shrink and wrap to fit it; a figure that cannot fit grows, and the "
                        "command says so.")] = None,
) -> None:
    """Draw a figure one column wide from result files and write it (PNG and PDF by default).

    tta with --target prints each run's time to the target; tradeoff prints the Pareto front;
    sweep prints the points it leaves out (not completed, or without the metric). Every kind
    takes --label, --xlabel, --ylabel, --title and --width, with the same meaning.
    """
    with user_errors():
        from sflsim import plots  # matplotlib is imported only when plotting

        if kind not in plots.KINDS:
            raise SflsimError(f"unknown figure kind {kind!r}{did_you_mean(kind, plots.KINDS)} "
                              f"(valid: {', '.join(plots.KINDS)})")
        _check_option_kinds(kind, target=target, x=x, y=y, round_=round_, tau_min=tau_min,
                            band=band)
        options = figure_options(label, xlabel, ylabel, title, width)
        fmts = plots.parse_formats(formats) if formats is not None else None
        round_ = 1 if round_ is None else round_
        y = y or "final_server_accuracy"
        out = _output_path(kind, output, round_, y)
        plots.output_paths(out, fmts)  # a bad output path fails before any reading
        paths, report = _draw(kind, dirs, out, fmts, options, target=target, x=x, y=y,
                              round_=round_, tau_min=tau_min, band=band or "ci95")
    if report:
        console.print(report, highlight=False, soft_wrap=True, markup=False)
    for path in paths:
        console.print(str(path), highlight=False, soft_wrap=True)


def figure_options(label: list[str] | None, xlabel: str | None, ylabel: str | None,
                   title: str | None, width: float | None):
    """The options every figure kind takes, as one
    :class:`~sflsim.plots.options.FigureOptions`.

    Raises:
        SflsimError: a ``--label`` without ``=``, or a ``--width`` not above 0.
    """
    from sflsim.plots.options import FigureOptions, parse_labels

    return FigureOptions(labels=parse_labels(label), xlabel=xlabel, ylabel=ylabel, title=title,
                         width_in=width)


def _check_option_kinds(kind: str, *, target: float | None, x: str | None, y: str | None,
                        round_: int | None, tau_min: float | None,
                        band: str | None = None) -> None:
    """Refuse an option given to a figure kind it does not apply to."""
    for flag, value, owners in (("--target", target, ("tta",)),
                                ("--x", x, ("tradeoff", "sweep")),
                                ("--y", y, ("sweep",)), ("--band", band, ("sweep",)),
                                ("--round", round_, ("timeline",)),
                                ("--tau-min", tau_min, ("early-exit",))):
        if value is not None and kind not in owners:
            raise SflsimError(f"{flag} applies to "
                              f"{' and '.join(f'`sflsim plot {o}`' for o in owners)} only")


def _output_path(kind: str, output: Path | None, round_: int, y: str) -> Path:
    """The figure's output path (a prefix or a file name): ``-o``, the kind's default name
    in the folder ``-o`` names, or that name in the current directory."""
    name = Path(f"timeline_round{round_}" if kind == "timeline" else
                f"sweep_{y}" if kind == "sweep" else kind)
    return name if output is None else output / name if output.is_dir() else output


def _draw(kind: str, dirs: list[Path], out: Path, fmts: list[str] | None, options, *,
          target: float | None, x: str | None, y: str, round_: int,
          tau_min: float | None, band: str = "ci95") -> tuple[list[Path], str]:
    """Draw the figure of ``kind`` with ``options`` and write it; returns the files written
    and what to print besides (the points left out, the Pareto front, times to target,
    where the thresholds start, a figure grown past its width), or ""."""
    from sflsim import plots
    from sflsim.plots.options import figure_notes
    from sflsim.plots.style import paper_style, save_figure

    report = ""
    if kind == "sweep":
        if len(dirs) != 1:
            raise SflsimError(f"`sflsim plot sweep` takes one sweep directory, got {len(dirs)}")
        points = plots.sweep_points(dirs[0], x, y)  # a bad --x or --y fails before drawing
        fig = plots.sweep_figure(dirs[0], x, y, options, band)
        report = "\n".join(t for t in (plots.seeds_text(points, band),
                                       plots.left_out_text(points)) if t)
    elif kind == "tradeoff":
        fig = plots.tradeoff_figure(dirs, x or "sim_time_s", options)
        report = plots.front_text(plots.tradeoff_points(dirs, x or "sim_time_s", options),
                                  x or "sim_time_s")
    elif kind == "tta":
        fig = plots.tta_figure(dirs, target, options)
        if target is not None:
            report = plots.time_to_target_text(dirs, target, options)
    else:
        if len(dirs) != 1:
            raise SflsimError(f"`sflsim plot {kind}` takes one results directory, got {len(dirs)}")
        if kind == "timeline":
            fig = plots.timeline_figure(dirs[0], round_, options)
        elif kind == "early-exit":
            fig = plots.early_exit_figure(dirs[0], tau_min, options)
            start = plots.default_tau_min(dirs[0]) if tau_min is None else None
            if start is not None:
                report = (f"thresholds from tau = -ln(number of classes) = {start:.2f}: "
                          f"below it every sample exits (--tau-min to show them)")
        else:
            fig = plots.splits_figure(dirs[0], options)
    with paper_style():
        paths = save_figure(fig, plots.output_paths(out, fmts))
    report = "\n".join(filter(None, [report, *figure_notes(fig)]))
    return paths, report
