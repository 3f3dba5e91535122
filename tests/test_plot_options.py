"""What the author controls in every figure (labels, axis labels, title, width), and figures
that keep their promises: the promised width, threshold labels apart, device groups named
at any number of clients, and a waiting-jobs panel that draws only waits it can show."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import matplotlib
import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.errors import SflsimError
from sflsim.plots import (
    FigureOptions,
    early_exit_figure,
    figure_notes,
    plot_early_exit,
    plot_splits,
    plot_sweep,
    plot_timeline,
    plot_tradeoff,
    plot_tta,
    splits_figure,
    sweep_figure,
    timeline_figure,
    tradeoff_figure,
    tta_figure,
)
from sflsim.plots.options import WIDTH_TOL_IN, parse_labels
from sflsim.plots.timeline import QUEUE_BINS
from tests.test_plot_marks import _sweep_of_end_layers
from tests.test_plot_sweep import _zipped_sweep
from tests.test_plots import write_run, write_sweep

matplotlib.use("Agg")  # no display: figures render off screen


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    return {"seq": write_run(tmp_path / "seq"),
            "avg": write_run(tmp_path / "avg", "hetero_splitee_averaging", (0.4, 0.6, 0.65), 8.0),
            "sweep": write_sweep(tmp_path / "sweep"),
            "layers": _sweep_of_end_layers(tmp_path / "layers"),
            "mix": _zipped_sweep(tmp_path / "mix")}


#: kind -> (figure function of (runs, options), a legend entry's name, its text by default)
FIGURES = {
    "tradeoff": (lambda r, o: tradeoff_figure([r["seq"], r["avg"]], options=o), "avg", "avg"),
    "tradeoff-latency": (lambda r, o: tradeoff_figure([r["seq"], r["avg"]], "latency_s_mean", o),
                         "seq", "seq"),
    "tta": (lambda r, o: tta_figure([r["seq"], r["avg"]], options=o), "seq", "seq"),
    "timeline": (lambda r, o: timeline_figure(r["seq"], 1, o), "client_forward",
                 "Client forward (device)"),
    "early-exit": (lambda r, o: early_exit_figure(r["seq"], options=o), "Layer-4", "Layer-4"),
    "splits": (lambda r, o: splits_figure(r["seq"], o), "pi4_wifi", None),
    "sweep": (lambda r, o: sweep_figure(r["layers"], "pi4_wifi.end_layer", "sim_time_s", o),
              "algorithm=hetero_splitee_sequential", None),
}


def _texts(fig) -> list[str]:
    """Every text of the figure: legends, tick labels, axis labels, titles."""
    out = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    for ax in fig.axes:
        if ax.get_legend():
            out += [t.get_text() for t in ax.get_legend().get_texts()]
        out += [t.get_text() for t in ax.get_yticklabels()]
        out += [ax.get_xlabel(), ax.get_ylabel(), ax.get_title(loc="left"), ax.get_title()]
    return out


@pytest.mark.parametrize("kind", list(FIGURES))
def test_every_kind_takes_the_same_options(kind, runs):
    draw, name, default = FIGURES[kind]
    plain = draw(runs, None)
    if default is not None:
        assert default in _texts(plain)
    options = FigureOptions(labels={name: "Renamed"}, xlabel="My x", ylabel="My y",
                            title="My title", width_in=5.0)
    fig = draw(runs, options)
    texts = _texts(fig)
    assert "Renamed" in " ".join(texts) and (default is None or default not in texts)
    bottom = max(fig.axes[:2] if kind != "splits" else fig.axes[:1],
                 key=lambda ax: -ax.get_position().y0)
    assert bottom.get_xlabel() == "My x"
    assert "My y" in [ax.get_ylabel() for ax in fig.axes]
    assert "My title" in [ax.get_title(loc="left") for ax in fig.axes]
    assert fig.get_figwidth() == pytest.approx(5.0)
    with pytest.raises(SflsimError, match="no legend entry of this figure is named 'nobody'"):
        draw(runs, FigureOptions(labels={"nobody": "x"}))


def test_a_run_is_relabelled_by_its_folder_scenario_or_point(runs):
    fig = tta_figure([runs["sweep"]], options=FigureOptions(labels={"p001": "two slots"}))
    texts = [t.get_text() for t in (fig.axes[0].get_legend() or fig.legends[0]).get_texts()]
    assert texts[1] == "two slots" and texts[0].startswith("p000")


def test_cli_labels_every_kind_and_refuses_bad_options(runs, tmp_path):
    result = CliRunner().invoke(app, [
        "plot", "tta", str(runs["seq"]), str(runs["avg"]), "--target", "0.7",
        "--label", "seq=Sequential", "--label", "avg=Averaging", "--title", "Fig. 3",
        "--xlabel", "Time (s)", "-o", str(tmp_path / "tta")])
    assert result.exit_code == 0, result.output
    assert "Sequential" in result.output and "Averaging" in result.output  # the times table
    for args in (["timeline", str(runs["seq"]), "--label", "pi4_wifi=Pi 4"],
                 ["early-exit", str(runs["seq"]), "--label", "Layer-3=Head 3"],
                 ["splits", str(runs["seq"]), "--width", "7"],
                 ["sweep", str(runs["mix"]), "--x", "pi4_wifi.count", "--ylabel", "Acc."],
                 ["tradeoff", str(runs["layers"]), "--label", "p000=one"]):
        result = CliRunner().invoke(app, ["plot", *args, "-o", str(tmp_path / "f.png")])
        assert result.exit_code == 0, (args, result.output)
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), "--label", "seq"])
    assert result.exit_code == 2 and "write NAME=TEXT" in result.output
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), "--label", "x=y"])
    assert result.exit_code == 2 and "named 'x'" in result.output and "entries: seq" in result.output
    for width in ("0", "0.5", "100"):
        result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), "--width", width])
        assert result.exit_code == 2 and f"--width {width}" in result.output
        assert "valid: 1.5 to 40" in result.output
    assert parse_labels(["a=b=c", " p0 =x"]) == {"a": "b=c", "p0": "x"}


def _saved_width_in(path: Path) -> float:
    """The width of a written figure: PNG pixels at 300 dpi, or the PDF page in points."""
    if path.suffix == ".png":
        return matplotlib.image.imread(path).shape[1] / 300
    box = re.search(rb"/MediaBox \[ *0 0 ([\d.]+) ([\d.]+) *\]", path.read_bytes())
    assert box, path
    return float(box.group(1)) / 72


#: kind -> a writer of (runs, out, options); the long sweep-point names of ``layers`` made
#: the tradeoff legend 4.35 in wide in a 3.4 in column
WRITERS = {
    "tradeoff": lambda r, out, o: plot_tradeoff([r["layers"], r["sweep"]], out, options=o),
    "tradeoff-latency": lambda r, out, o: plot_tradeoff([r["seq"], r["avg"]], out,
                                                        "latency_s_mean", options=o),
    "tta": lambda r, out, o: plot_tta([r["layers"]], out, target=0.7, options=o),
    "timeline": lambda r, out, o: plot_timeline(r["seq"], out, 2, options=o),
    "early-exit": lambda r, out, o: plot_early_exit(r["seq"], out, options=o),
    "splits": lambda r, out, o: plot_splits(r["seq"], out, options=o),
    "sweep": lambda r, out, o: plot_sweep(r["mix"], out, "pi4_wifi.count", options=o),
}


@pytest.mark.parametrize("width", [None, 5.0])
@pytest.mark.parametrize("kind", list(WRITERS))
def test_saved_figures_keep_the_promised_width(kind, width, runs, tmp_path):
    """Saved as the CLI saves them (bbox_inches="tight"), PNG and PDF are as wide as
    promised: legends fit inside it rather than widening the figure."""
    options = FigureOptions(width_in=width)
    paths = WRITERS[kind](runs, tmp_path / kind, options)
    assert len(paths) == 2
    for path in paths:
        saved = _saved_width_in(path)
        assert options.width - 0.35 <= saved <= options.width + WIDTH_TOL_IN + 0.01, (path, saved)


def test_a_figure_that_cannot_fit_grows_and_says_so(runs, tmp_path):
    fig = tradeoff_figure([runs["layers"]], options=FigureOptions(width_in=1.5))
    notes = figure_notes(fig)
    assert len(notes) == 1 and "does not fit in 1.5 in" in notes[0]
    said = float(re.search(r"it is ([\d.]+) in wide", notes[0]).group(1))
    assert said > 1.6
    result = CliRunner().invoke(app, ["plot", "tradeoff", str(runs["layers"]), "--width", "1.5",
                                      "-o", str(tmp_path / "narrow.png")])
    assert result.exit_code == 0 and "does not fit in 1.5 in" in result.output
    assert _saved_width_in(tmp_path / "narrow.png") == pytest.approx(said, abs=0.05)
    assert not figure_notes(tradeoff_figure([runs["layers"]]))  # 3.4 in: it fits


def test_threshold_labels_never_overlap_on_a_dense_curve(tmp_path):
    """Three runs of 40 thresholds each, nearly on top of one another: the labels written
    overlap neither one another nor the axes' edges."""
    dirs = []
    for i in range(3):
        run = write_run(tmp_path / f"r{i}")
        taus = np.linspace(-2.3, 0, 40)
        ratio = np.clip(-taus / 2.3, 0, 1)
        pd.DataFrame({"threshold": taus, "end_layer": 3, "accuracy": 0.6 + 0.3 * (1 - ratio),
                      "exit_ratio": ratio, "latency_s_mean": 0.01 + 0.05 * (1 - ratio) + 1e-3 * i,
                      "samples": 100}).to_csv(run / "early_exit.csv", index=False)
        dirs.append(run)
    fig = tradeoff_figure(dirs, x="latency_s_mean")
    ax = fig.axes[0]
    fig.draw_without_rendering()
    notes = [t for t in ax.texts if t.get_text().startswith("τ=")]
    assert len(notes) >= 4
    boxes = [t.get_window_extent() for t in notes]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    inside = ax.get_window_extent()
    assert all(inside.x0 <= b.x0 and b.x1 <= inside.x1 and inside.y0 <= b.y0
               and b.y1 <= inside.y1 for b in boxes)


def _fleet_run(path: Path, n: int, waits: np.ndarray | None = None,
               round_time_s: float = 10.0) -> Path:
    """A one-round run of ``n`` clients in groups pi4_wifi, nano_lte, orin_wifi (by id mod 3,
    interleaved), each computing once, and a server job per entry of ``waits`` (its
    ``queue_s``; none by default)."""
    run = write_run(path, accuracies=(0.5,), round_time_s=round_time_s)
    groups = ["pi4_wifi", "nano_lte", "orin_wifi"]
    pd.DataFrame({"round": 1, "client_id": range(n), "group": [groups[c % 3] for c in range(n)],
                  "cut_layer": 2}).to_csv(run / "clients.csv", index=False)
    rows = [(1, f"client{c}", "client_train", c, 0.0, 1.0, 0.0) for c in range(n)]
    waits = np.array([]) if waits is None else waits
    starts = np.linspace(1.0, round_time_s - 0.1, len(waits)) if len(waits) else []
    rows += [(1, "server", "server_train", i % n, s, s + 0.01, w)
             for i, (s, w) in enumerate(zip(starts, waits))]
    frame = pd.DataFrame(rows, columns=["round", "actor", "activity", "client_id", "start_s",
                                        "end_s", "queue_s"])
    frame.assign(payload_bytes=0, flops=1e6, seq=range(len(frame))).to_csv(
        run / "events.csv", index=False)
    return run


@pytest.mark.parametrize("n", [20, 24, 300])
def test_timeline_names_device_groups_at_any_client_count(n, tmp_path):
    fig = timeline_figure(_fleet_run(tmp_path / "fleet", n))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    for group in ("pi4_wifi", "nano_lte", "orin_wifi"):
        named = [label for label in labels if label.endswith(group)]
        assert len(named) >= 1, (group, labels)
    # each group's rows lie together, so one label names the whole group
    rows = {int(t.get_text().split()[0][1:]): t.get_position()[1]
            for t in fig.axes[0].get_yticklabels() if t.get_text().startswith("C")}
    pi4 = sorted(y for c, y in rows.items() if c % 3 == 0)
    orin = sorted(y for c, y in rows.items() if c % 3 == 2)
    assert max(pi4) < min(orin)


def test_timeline_does_not_draw_waits_too_short_to_see(tmp_path):
    """37 jobs waiting 0.14 ms in a 1,000 s round: no band claiming seconds of waiting,
    and the legend says what happened."""
    run = _fleet_run(tmp_path / "brief", 3, waits=np.full(37, 0.14e-3), round_time_s=1000.0)
    fig = timeline_figure(run)
    assert len(fig.axes) == 1  # no waiting-jobs panel
    legend = " ".join(t.get_text().replace("\n", " ") for t in fig.legends[0].get_texts())
    assert "37 jobs, 0.14 ms each on average" in legend and "too short to draw" in legend
    assert "no job waited" not in fig.axes[0].get_title(loc="left")


def test_timeline_binned_band_only_where_jobs_waited(tmp_path):
    """A busy first tenth of the round (long waits) and many 0.1 ms waits after it: the
    band of the most waiting jobs stands only over the busy bins; the mean is drawn
    everywhere."""
    busy = np.full(300, 0.5)  # 300 jobs in [1, 100) s, each waiting 0.5 s
    brief = np.full(600, 1e-4)
    run = _fleet_run(tmp_path / "mixed", 3, waits=np.concatenate([busy, brief]),
                     round_time_s=1000.0)
    events = pd.read_csv(run / "events.csv")
    server = events["actor"] == "server"
    starts = np.concatenate([np.linspace(1.0, 100.0, 300), np.linspace(200.0, 990.0, 600)])
    events.loc[server, "start_s"] = starts
    events.loc[server, "end_s"] = starts + 0.01
    events.to_csv(run / "events.csv", index=False)
    fig = timeline_figure(run)
    queue = fig.axes[1]
    band = queue.collections[0].get_paths()[0].vertices  # the fill of the peak per bin
    width = 1000.0 / QUEUE_BINS
    after = band[(band[:, 0] > 200.0 + width) & (band[:, 0] < 990.0 - width)]
    before = band[(band[:, 0] > 1.0 + width) & (band[:, 0] < 100.0 - width)]
    assert after[:, 1].max() == 0  # brief waits: no band
    assert before[:, 1].max() >= 1
    labels = [t.get_text().replace("\n", " ") for t in fig.legends[0].get_texts()]
    assert any("bins with ≥10% waiting" in label for label in labels)
