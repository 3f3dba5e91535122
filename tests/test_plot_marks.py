"""What the figures write on themselves: runs whose curves coincide stay visible, the time
to the target and the exit thresholds are on the figure, legends name swept fields and
algorithms, and a timeline without a queue draws none."""

from __future__ import annotations

import io
import re
from pathlib import Path

import matplotlib
import matplotlib.colors
import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from sflsim.plots import timeline_figure, tradeoff_figure, tradeoff_points, tta_figure
from sflsim.plots.style import PALETTE
from sflsim.plots.tradeoff import MAX_THRESHOLD_LABELS
from tests.test_plots import write_run

matplotlib.use("Agg")  # no display: figures render off screen


def _pixels_of(fig, color: str, dpi: int = 200) -> int:
    """How many pixels of ``fig``, rendered at ``dpi``, are within a small distance of
    ``color`` (anti-aliased edges excluded)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    image = matplotlib.image.imread(buffer)[..., :3]
    target = np.array(matplotlib.colors.to_rgb(color))
    return int((np.abs(image - target).max(axis=-1) < 0.12).sum())


def test_runs_whose_curves_coincide_both_show(tmp_path):
    """Two runs with the same accuracy at the same times: the second line is drawn over
    the first, and both colours still show (its dashes leave gaps, its markers are hollow
    and smaller)."""
    same = [write_run(tmp_path / "seq"), write_run(tmp_path / "avg", "hetero_splitee_averaging")]
    fig = tta_figure(same)
    first, second = fig.axes[0].get_lines()[:2]
    assert list(first.get_xdata()) == list(second.get_xdata())
    assert list(first.get_ydata()) == list(second.get_ydata())
    alone = _pixels_of(tta_figure(same[:1]), PALETTE[0])
    under = _pixels_of(fig, PALETTE[0])  # the first run's colour, under the second run
    assert _pixels_of(fig, PALETTE[1]) > 200
    # dashes on top leave about a quarter of it; a solid line with filled markers, 6%
    assert under > 0.15 * alone, (under, alone)


def test_tta_writes_each_runs_time_to_the_target(tmp_path):
    runs = [write_run(tmp_path / "seq", round_time_s=9.07),
            write_run(tmp_path / "avg", "hetero_splitee_averaging", (0.4, 0.6, 0.65), 8.0)]
    fig = tta_figure(runs, target=0.7)
    legend = fig.axes[0].get_legend() or fig.legends[0]
    # seq reaches 72% at the end of round 2: 2 x 9.07 s
    assert [t.get_text() for t in legend.get_texts()] == ["seq: 70% at 18.14 s",
                                                          "avg: 70% not reached"]
    without = tta_figure(runs)
    assert [t.get_text() for t in (without.axes[0].get_legend() or without.legends[0])
            .get_texts()] == ["seq", "avg"]


def _threshold_labels(fig) -> list[tuple[float, float, float, str]]:
    """``(tau, x, y, colour)`` of each ``τ=`` annotation of the figure."""
    out = []
    for text in fig.axes[0].texts:
        match = re.fullmatch("τ=(.+)", text.get_text())
        if match:
            tau = float(match.group(1).replace("\N{MINUS SIGN}", "-"))
            out.append((tau, *map(float, text.xy), matplotlib.colors.to_hex(text.get_color())))
    return out


def test_tradeoff_points_say_their_exit_threshold(tmp_path):
    runs = [write_run(tmp_path / "seq"), write_run(tmp_path / "avg", "hetero_splitee_averaging")]
    table = pd.read_csv(runs[1] / "early_exit.csv")
    table["latency_s_mean"] *= 2  # avg: slower at every threshold, a curve of its own
    table.to_csv(runs[1] / "early_exit.csv", index=False)
    fig = tradeoff_figure(runs, x="latency_s_mean")
    points = tradeoff_points(runs, "latency_s_mean")
    labels = _threshold_labels(fig)
    for series, color in zip(["seq", "avg"], PALETTE):
        mine = points[points["series"] == series].sort_values("threshold")
        said = [label for label in labels if label[3] == color.lower()]
        assert 2 <= len(said) <= MAX_THRESHOLD_LABELS
        taus = [tau for tau, *_ in said]  # the first and last threshold, then spread
        assert min(taus) == mine["threshold"].min() and max(taus) == mine["threshold"].max()
        for tau, x, y, _ in said:  # each label sits at its own point (ms, %)
            row = mine[mine["threshold"] == tau].iloc[0]
            assert (x, y) == pytest.approx((1e3 * row["x"], 100 * row["accuracy"]))
    # without early-exit x there is no threshold, and nothing is written
    assert not _threshold_labels(tradeoff_figure(runs))


def test_coinciding_tradeoff_curves_share_their_threshold_labels(tmp_path):
    runs = [write_run(tmp_path / "seq"), write_run(tmp_path / "avg", "hetero_splitee_averaging")]
    labels = _threshold_labels(tradeoff_figure(runs, x="latency_s_mean"))
    assert labels and len({(tau, x, y) for tau, x, y, _ in labels}) == len(labels)
    assert {color for *_, color in labels} == {matplotlib.colors.to_hex("0.25")}


def _sweep_of_end_layers(path: Path) -> Path:
    rows = []
    for i, (pi4, orin) in enumerate([(1, 5), (3, 5)]):
        write_run(path / f"points/p{i:03d}", accuracies=(0.5, 0.6 + 0.05 * i))
        rows.append({"point": f"p{i:03d}", "status": "completed", "run_dir": f"points/p{i:03d}",
                     "devices.pi4_wifi.end_layer": pi4, "devices.orin_wifi.end_layer": orin,
                     "algorithm": "hetero_splitee_sequential"})
    pd.DataFrame(rows).to_csv(path / "sweep.csv", index=False)
    return path


def test_legends_name_the_swept_field_and_the_algorithm(tmp_path):
    sweep = _sweep_of_end_layers(tmp_path / "layers")
    fig = tta_figure([sweep])
    texts = [t.get_text().replace("\n", " ")  # long entries wrap to keep the column width
             for t in (fig.axes[0].get_legend() or fig.legends[0]).get_texts()]
    assert texts == [
        "p000 (pi4_wifi.end_layer=1, orin_wifi.end_layer=5, algorithm=hetero_splitee_sequential)",
        "p001 (pi4_wifi.end_layer=3, orin_wifi.end_layer=5, algorithm=hetero_splitee_sequential)"]
    assert not any("pi4_wifi=" in t for t in texts)  # "pi4_wifi=1" reads as a count


def test_a_timeline_without_waiting_jobs_has_no_queue_panel(tmp_path):
    waited = write_run(tmp_path / "waited", accuracies=(0.6,))  # its server jobs queue
    assert len(timeline_figure(waited).axes) == 2
    calm = write_run(tmp_path / "calm", accuracies=(0.6,))
    events = pd.read_csv(calm / "events.csv").assign(queue_s=0.0)
    events.to_csv(calm / "events.csv", index=False)
    fig = timeline_figure(calm)
    assert len(fig.axes) == 1  # the Gantt chart alone
    gantt = fig.axes[0]
    assert gantt.get_xlabel() == "Simulated time (s)"
    assert gantt.get_title(loc="left") == "Round 1: no job waited for the server"
    assert "Server" in [t.get_text() for t in gantt.get_yticklabels()]
