"""Every figure kind has readable axes whatever the data: nearly equal, equal and single values.

Read back from the drawn figure (not its pixels): each tick label says its own value (no
offset such as "+9.07" beside the axis), labels are distinct and do not overlap, an axis
of measured values spans at least ``MIN_RELATIVE_SPAN`` of its magnitude, rounds and
job counts tick at integers only (every integer when there are few), and every marker
is whole inside its axes. Time-to-accuracy curves start at time 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import STEP_LOOKUP_MAP
from matplotlib.ticker import ScalarFormatter

from sflsim.metrics.results import read_run_table
from sflsim.plots import KINDS
from sflsim.plots.early_exit import early_exit_figure
from sflsim.plots.splits import splits_figure
from sflsim.plots.style import MIN_RELATIVE_SPAN
from sflsim.plots.timeline import TIME_MARGIN, timeline_figure
from sflsim.plots.tradeoff import tradeoff_figure
from sflsim.plots.tta import tta_figure
from tests.test_plots import write_run

#: The data shapes every kind is drawn with.
SHAPES = ("nearly-equal", "equal", "single")


def visible_ticks(fig: Figure, axis) -> list[tuple[float, str, object]]:
    """``(location, label, bounding box)`` of each labelled major tick inside the view."""
    renderer = fig.canvas.get_renderer()
    lo, hi = sorted(axis.get_view_interval())
    eps = 1e-9 * max(abs(lo), abs(hi), 1.0)
    out = []
    for tick in axis.get_major_ticks():
        if lo - eps <= tick.get_loc() <= hi + eps:
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text():
                    out.append((tick.get_loc(), label.get_text(), label.get_window_extent(renderer)))
    return out


def check_readable(fig: Figure, spans: tuple[tuple[int, str], ...] = ()) -> None:
    """Assert every labelled axis of ``fig`` is readable; ``spans`` names the
    ``(axes index, "x"/"y")`` of measured values that must keep the minimum span."""
    FigureCanvasAgg(fig).draw()
    for i, ax in enumerate(fig.axes):
        for axis in (ax.xaxis, ax.yaxis):
            where = f"axes {i} {axis.axis_name}"
            ticks = visible_ticks(fig, axis)
            labels = [text for _, text, _ in ticks]
            assert len(set(labels)) == len(labels), f"{where}: repeated labels {labels}"
            boxes = [box for *_, box in ticks]
            for a, b in zip(boxes, boxes[1:]):
                assert not a.overlaps(b), f"{where}: labels overlap {labels}"
            formatter = axis.get_major_formatter()
            if isinstance(formatter, ScalarFormatter):
                assert formatter.offset == 0, f"{where}: offset notation"
                scale_text = axis.get_offset_text().get_text()  # "1e6" from 1e6 up, else ""
                scale = _number(scale_text) if scale_text else 1.0
                assert math.log10(scale).is_integer(), f"{where}: offset {scale_text!r}"
                for loc, text, _ in ticks:  # the label is the value itself (times the scale)
                    assert _number(text) * scale == pytest.approx(loc, rel=1e-9, abs=1e-12), (
                        f"{where}: label {text!r} at {loc}")
    for i, name in spans:
        lo, hi = getattr(fig.axes[i], f"get_{name}lim")()
        assert hi - lo >= MIN_RELATIVE_SPAN * abs(lo + hi) / 2 * (1 - 1e-9), (i, name, lo, hi)
        assert len(visible_ticks(fig, getattr(fig.axes[i], f"{name}axis"))) >= 2, (i, name)


def check_markers_inside(fig: Figure) -> None:
    """Assert every marker of every line (each data point of a line drawn with markers) lies
    whole inside its axes: at least the marker's radius from each edge."""
    FigureCanvasAgg(fig).draw()
    for i, ax in enumerate(fig.axes):
        box = ax.get_window_extent()
        for line in ax.get_lines():
            if line.get_marker() in ("None", None, "", " ") or not len(line.get_xdata()):
                continue
            radius = (line.get_markersize() + line.get_markeredgewidth()) / 2 * fig.dpi / 72
            points = ax.transData.transform(line.get_xydata())
            for (px, py), (x, y) in zip(points, line.get_xydata()):
                assert box.x0 + radius <= px + 0.5 and px - 0.5 <= box.x1 - radius, (
                    f"axes {i}: marker at x={x} clipped (axis {ax.get_xlim()})")
                assert box.y0 + radius <= py + 0.5 and py - 0.5 <= box.y1 - radius, (
                    f"axes {i}: marker at y={y} clipped (axis {ax.get_ylim()})")


def drawn_path(line) -> tuple[list[float], list[float]]:
    """The vertices of ``line`` as drawn (its drawstyle applied: steps make corners)."""
    x, y = STEP_LOOKUP_MAP[line.get_drawstyle()](line.get_xdata(), line.get_ydata())
    return list(map(float, x)), list(map(float, y))


def first_reach(line, level: float) -> float:
    """The first x at which the drawn ``line`` reaches ``level`` (segments are straight)."""
    x, y = drawn_path(line)
    if y[0] >= level:
        return x[0]
    for x0, y0, x1, y1 in zip(x, y, x[1:], y[1:]):
        if y1 >= level > y0:
            return x0 + (x1 - x0) * (level - y0) / (y1 - y0)
    return math.nan


def _number(label: str) -> float:
    """``\N{MINUS SIGN}1.5`` (a tick label, matplotlib's minus sign) -> -1.5."""
    return float(label.replace("\N{MINUS SIGN}", "-"))


def labels(fig: Figure, axis) -> list[str]:
    return [text for _, text, _ in visible_ticks(fig, axis)]


def _set_summary(run: Path, sim_time_s: float, accuracy: float) -> Path:
    summary = json.loads((run / "summary.json").read_text())
    summary.update(sim_time_s=sim_time_s, final_server_accuracy=accuracy)
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def _values(shape: str, base: float, step: float) -> list[float]:
    return {"nearly-equal": [base, base + step], "equal": [base, base], "single": [base]}[shape]


def test_every_kind_is_covered():
    assert set(KINDS) == {"tradeoff", "tta", "timeline", "early-exit", "splits", "sweep"}


@pytest.mark.parametrize("shape", SHAPES)
def test_tradeoff(tmp_path, shape):
    # the case: Sequential, Averaging and Distributed 0.0004 s apart at 9.07 s
    algorithms = ("hetero_splitee_sequential", "hetero_splitee_averaging", "distributed")
    times = _values(shape, 9.0697, 0.0004)
    accuracies = _values(shape, 0.61, 0.0001)
    runs = [_set_summary(write_run(tmp_path / a, a), t, acc)
            for a, t, acc in zip(algorithms, times, accuracies)]
    fig = tradeoff_figure(runs)
    check_readable(fig, spans=((0, "x"), (0, "y")))
    check_markers_inside(fig)
    if shape == "nearly-equal":  # short labels: the axis is wide enough for 2 decimals
        assert all(len(text) <= 4 for text in labels(fig, fig.axes[0].xaxis))


@pytest.mark.parametrize("shape", SHAPES)
def test_tradeoff_large_values(tmp_path, shape):
    """Energies of 1.2 MJ: a shared power of ten ("1e6" at the axis end), never an offset."""
    runs = [write_run(tmp_path / a, a) for a in ("fedavg", "distributed")[: len(_values(shape, 0, 1))]]
    for run, energy in zip(runs, _values(shape, 1.2345e6, 100.0)):
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "client_energy_j": energy}))
    fig = tradeoff_figure(runs, x="client_energy_j")
    check_readable(fig, spans=((0, "x"), (0, "y")))
    assert fig.axes[0].xaxis.get_offset_text().get_text() == "1e6"


@pytest.mark.parametrize("shape", SHAPES)
def test_tradeoff_early_exit_latency(tmp_path, shape):
    run = write_run(tmp_path / "run")
    table = pd.read_csv(run / "early_exit.csv")
    taus = sorted(table["threshold"].unique())[: len(_values(shape, 0, 1))]
    table = table[table["threshold"].isin(taus)].copy()
    for k, tau in enumerate(taus):
        rows = table["threshold"] == tau
        table.loc[rows, "latency_s_mean"] = _values(shape, 2.5, 1e-5)[k]
        table.loc[rows, "accuracy"] = _values(shape, 0.8, 1e-4)[k]
    table.to_csv(run / "early_exit.csv", index=False)
    fig = tradeoff_figure([run], x="latency_s_mean")
    check_readable(fig, spans=((0, "x"), (0, "y")))
    check_markers_inside(fig)


@pytest.mark.parametrize("target", [None, 0.7])
@pytest.mark.parametrize("shape", SHAPES)
def test_tta(tmp_path, shape, target):
    accuracies = tuple(_values(shape, 0.61, 0.0001))
    untrained = None if shape == "single" else 0.61  # single: one point per run
    runs = [write_run(tmp_path / "a", accuracies=accuracies, round_time_s=9.0697,
                      untrained=untrained),
            write_run(tmp_path / "b", "distributed", accuracies=accuracies, round_time_s=9.0701,
                      untrained=untrained)]
    fig = tta_figure(runs, target=target)
    check_readable(fig, spans=((0, "x"), (0, "y")))
    check_markers_inside(fig)


def test_tta_curves_start_at_time_zero_with_the_untrained_accuracy(tmp_path):
    fig = tta_figure([write_run(tmp_path / "a", untrained=0.1),
                      write_run(tmp_path / "old", "distributed", untrained=None)])
    new, old = fig.axes[0].lines[:2]
    assert (new.get_xdata()[0], new.get_ydata()[0]) == (0.0, pytest.approx(10.0))
    assert list(new.get_xdata()) == [0.0, 10.0, 20.0, 30.0]
    assert old.get_xdata()[0] == 10.0  # results without round 0 start at round 1
    left, right = fig.axes[0].get_xlim()
    assert -0.05 * right < left < 0  # from time 0, with room for its marker
    check_markers_inside(fig)
    fig = tta_figure([write_run(tmp_path / "old", "distributed", untrained=None)])
    assert fig.axes[0].get_xlim()[0] == 0.0  # no point at time 0: the axis starts there


def _timeline_run(tmp_path: Path, shape: str) -> Path:
    """One round of a run whose events span ``shape``: 0.4 ms at 9.07 s, zero length, or
    one event."""
    run = write_run(tmp_path / shape, accuracies=(0.6,))
    start, end = {"nearly-equal": (9.0697, 9.0701), "equal": (9.07, 9.07),
                  "single": (9.07, 9.5)}[shape]
    n = 1 if shape == "single" else 3
    events = [(1, f"client{k}", "client_forward", k, start + (end - start) * k / n,
               start + (end - start) * (k + 1) / n, 0.0, 0, 1e8, k) for k in range(n)]
    if shape == "nearly-equal":
        events.append((1, "server", "server_train", 0, 9.0699, 9.0700, 0.0001, 0, 1e8, n))
    pd.DataFrame(events, columns=["round", "actor", "activity", "client_id", "start_s", "end_s",
                                  "queue_s", "payload_bytes", "flops", "seq"]
                 ).to_csv(run / "events.csv", index=False)
    pd.DataFrame({"round": [0, 1], "sim_time_s": [0.0, end], "round_time_s": [0.0, end - start],
                  "server_accuracy": [0.1, 0.6]}).to_csv(run / "rounds.csv", index=False)
    return run


@pytest.mark.parametrize("shape", SHAPES)
def test_timeline(tmp_path, shape):
    fig = timeline_figure(_timeline_run(tmp_path, shape))
    check_readable(fig)  # x: the round itself, however short
    if shape != "nearly-equal":  # no job waited: no waiting-jobs panel
        assert len(fig.axes) == 1 and len(labels(fig, fig.axes[0].xaxis)) >= 2
        return
    gantt, queue = fig.axes
    assert len(labels(fig, queue.xaxis)) >= 2
    assert all(text.isdigit() for text in labels(fig, queue.yaxis))  # jobs: integers
    if shape == "nearly-equal":  # the round, and a margin on each side
        pad = TIME_MARGIN * 0.0004
        assert gantt.get_xlim() == pytest.approx((9.0697 - pad, 9.0701 + pad), rel=0, abs=1e-9)


@pytest.mark.parametrize("shape", SHAPES)
def test_early_exit(tmp_path, shape):
    run = write_run(tmp_path / "run")
    taus = _values(shape, -1.0, -1e-4)
    rows = [{"threshold": tau, "end_layer": layer, "accuracy": acc, "exit_ratio": ratio,
             "samples": 100}
            for layer in (3, 4) for tau, acc, ratio in zip(taus, _values(shape, 0.6, 1e-4),
                                                           _values(shape, 0.5, 1e-4))]
    pd.DataFrame(rows).to_csv(run / "early_exit.csv", index=False)
    fig = early_exit_figure(run)
    check_readable(fig, spans=((0, "y"), (1, "x")))
    check_markers_inside(fig)


@pytest.mark.parametrize("rounds", [1, 2, 7])
@pytest.mark.parametrize("cuts", ["equal", "varied"])
def test_splits_rounds_are_integers(tmp_path, rounds, cuts):
    run = write_run(tmp_path / "run", accuracies=(0.6,) * rounds)
    if cuts == "equal":
        clients = pd.read_csv(run / "clients.csv").assign(cut_layer=3)
        clients.to_csv(run / "clients.csv", index=False)
    fig = splits_figure(run)
    check_readable(fig)
    ticks = labels(fig, fig.axes[0].xaxis)
    assert ticks and all(text.isdigit() for text in ticks), ticks
    assert ticks[0] == "1" if rounds < 7 else int(ticks[0]) >= 1
    if rounds == 1:
        assert ticks == ["1"]


# --- what the figures say: each drawn mark means what its rule says (issue 15) ---


@pytest.mark.parametrize("target", [0.4, 0.72, 0.1, 0.95])
def test_tta_target_marker_sits_where_the_drawn_line_reaches_the_target(tmp_path, target):
    """The issue's case: untrained 10% at 0 s, 50% after round 1 at 9.07 s. A straight line
    from 0 s would cross 40% at 6.8 s; accuracy holds until the next evaluation, so the
    drawn line reaches it at 9.07 s, where the time-to-target drop line stands."""
    run = write_run(tmp_path / "run", accuracies=(0.5, 0.72, 0.8), round_time_s=9.07,
                    untrained=0.1)
    fig = tta_figure([run], target=target)
    ax = fig.axes[0]
    line = ax.get_lines()[0]
    drops = [x for c in ax.collections for seg in c.get_segments() for x in seg[:, 0]]
    reach = first_reach(line, 100 * target)
    if math.isnan(reach):  # 95%: never reached, no drop line
        assert not drops
        return
    assert drops and all(x == pytest.approx(reach) for x in drops), (drops, reach)
    assert reach == pytest.approx({0.4: 9.07, 0.72: 18.14, 0.1: 0.0}[target])
    check_markers_inside(fig)


def test_tta_markers_are_at_the_evaluations(tmp_path):
    fig = tta_figure([write_run(tmp_path / "run", round_time_s=9.07)])
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == pytest.approx([0, 9.07, 18.14, 27.21])
    x, y = drawn_path(line)  # between evaluations the accuracy holds: flat, then a jump
    assert x[:4] == pytest.approx([0, 9.07, 9.07, 18.14]) and y[:3] == pytest.approx([10, 10, 50])


def _queue_run(tmp_path: Path, waiting: int, rounds: int = 1, parallel: int = 1) -> Path:
    """A run whose rounds each have ``waiting`` jobs queued at once for a one-slot server,
    after ``parallel`` server jobs that run at the same time."""
    run = write_run(tmp_path / f"q{waiting}-{parallel}", accuracies=(0.6,) * rounds)
    events = []
    for r in range(1, rounds + 1):
        t = 10.0 * (r - 1)
        events += [(r, f"client{c}", "client_forward", c, t, t + 1.0, 0.0) for c in range(3)]
        events += [(r, "server", "server_train", k % 3, t + 1.0, t + 2.0, 0.0)
                   for k in range(parallel)]
        events += [(r, "server", "server_train", j % 3, t + 2.0 + 0.5 * j, t + 2.5 + 0.5 * j,
                    0.5 * j) for j in range(waiting + 1)]  # all arrive at t + 2
    frame = pd.DataFrame(events, columns=["round", "actor", "activity", "client_id", "start_s",
                                          "end_s", "queue_s"])
    frame.assign(payload_bytes=0, flops=0.0, seq=range(len(frame))).to_csv(
        run / "events.csv", index=False)
    return run


@pytest.mark.parametrize("waiting", [1, 2, 3, 5, 7, 10])
def test_timeline_waiting_jobs_tick_at_every_integer(tmp_path, waiting):
    fig = timeline_figure(_queue_run(tmp_path, waiting))
    check_readable(fig)
    assert labels(fig, fig.axes[1].yaxis) == [str(k) for k in range(waiting + 1)]


def test_timeline_many_waiting_jobs_tick_at_integers(tmp_path):
    fig = timeline_figure(_queue_run(tmp_path, 25))
    check_readable(fig)
    ticks = labels(fig, fig.axes[1].yaxis)
    assert len(ticks) >= 3 and all(text.isdigit() for text in ticks)


@pytest.mark.parametrize("round_", [1, 2, 3])
@pytest.mark.parametrize("parallel", [1, 2, 4])
def test_timeline_labels_every_server_lane_in_every_round(tmp_path, round_, parallel):
    fig = timeline_figure(_queue_run(tmp_path, 1, rounds=3, parallel=parallel), round_)
    check_readable(fig)
    server = [text for text in labels(fig, fig.axes[0].yaxis) if text.startswith("Server")]
    assert server == (["Server"] if parallel == 1 else
                      [f"Server {k}" for k in range(1, parallel + 1)])


def test_timeline_labels_of_many_thin_server_lanes_do_not_overlap(tmp_path):
    fig = timeline_figure(_queue_run(tmp_path, 1, parallel=40))
    check_readable(fig)
    server = [text for text in labels(fig, fig.axes[0].yaxis) if text.startswith("Server")]
    assert server[0] == "Server 1" and len(server) >= 3


def test_timeline_leaves_room_after_the_round_end(tmp_path):
    run = write_run(tmp_path / "run")
    fig = timeline_figure(run, round_=2)
    events = read_run_table(run, "events", ["start_s", "end_s"], rounds=[2])
    lo, hi = fig.axes[0].get_xlim()
    start, end = 10.0, 20.0  # the round, from rounds.csv
    assert lo < min(start, events["start_s"].min()) and hi > max(end, events["end_s"].max())
    assert hi - end == pytest.approx(TIME_MARGIN * (end - start))
    vertical = [line.get_xdata() for line in fig.axes[0].get_lines()
                if len(set(line.get_xdata())) == 1]
    assert sorted(float(x[0]) for x in vertical) == [start, end]  # the round's bounds marked


@pytest.mark.parametrize(("dataset", "tau_min", "start"), [
    ("fashion_mnist", None, -math.log(10)),  # every sample exits below -ln 10
    ("cifar100", None, -4.0),  # -ln 100 < -4: the whole sweep
    (None, None, -4.0),  # classes unknown: the whole sweep
    ("fashion_mnist", -4.0, -4.0),  # asked for
    ("fashion_mnist", -1.0, -1.0),
])
def test_early_exit_threshold_axis_starts_where_exits_begin_to_change(tmp_path, dataset,
                                                                      tau_min, start):
    fig = early_exit_figure(write_run(tmp_path / "run", dataset=dataset), tau_min=tau_min)
    check_readable(fig, spans=((0, "y"), (1, "x")))
    check_markers_inside(fig)
    lo, hi = fig.axes[1].get_xlim()
    pad = 0.02 * (0 - start)
    assert lo == pytest.approx(start - pad) and hi == pytest.approx(pad)
    drawn = [x for ax in fig.axes for line in ax.get_lines() for x in line.get_xdata()]
    assert min(drawn) >= start - 1e-9


def test_tradeoff_early_exit_points_start_at_minus_ln_classes(tmp_path):
    from sflsim.plots.tradeoff import tradeoff_points
    points = tradeoff_points([write_run(tmp_path / "run", dataset="fashion_mnist")],
                             x="latency_s_mean")
    assert points["threshold"].min() == pytest.approx(-2.0)  # the sweep's first above -ln 10
