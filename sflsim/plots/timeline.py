"""Timeline of one round from the event trace: devices, links and the server (a Gantt chart).

Each client gets one row with three lanes: on-device compute (top, tall),
uplink and downlink transfers (below, thin). Rows are grouped by device group
(``pi4_wifi``, ...) and labelled ``C<i> <group>``; with more clients than
:data:`ALL_ROW_LABELS` the first row of each group keeps that label, other rows
``C<i>`` every few rows, and a thin line parts the groups, so the groups are named at
any number of clients. The server gets one lane per job
running at once (its slots in use), labelled ``Server 1``, ``Server 2``, ... (one
lane: ``Server``). Bars are coloured by activity. A lower panel draws the number
of jobs waiting for the server (arrived, not yet started: ``queue_s`` before each
server job's start) as a step line, ticked at every integer up to
:data:`ALL_INTEGER_TICKS` jobs; a round in which no job waited has no such panel
(its title says so when the server ran jobs) rather than an empty one. Waits that
add up to less than a visible width (one of :data:`QUEUE_BINS` parts of the round)
are not drawn either: a band a point wide would claim jobs waited that long, so the
legend says how many jobs waited and how briefly instead. A round of many changes is
drawn binned: the mean number of waiting jobs per bin, and a band of the most that
waited, only in bins where jobs waited at least :data:`BAND_MIN_SHARE` of the bin. Thin dotted
lines mark the round's start and end, and the time axis extends :data:`TIME_MARGIN`
of the round past both, so a bar that ends with the round is seen to end there.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sflsim.errors import SflsimError
from sflsim.metrics.results import read_result, run_table_path
from sflsim.plots.options import FigureOptions, finish_figure
from sflsim.plots.result_files import client_groups, read_input
from sflsim.plots.style import (
    PALETTE,
    count_ticks,
    new_figure,
    output_paths,
    paper_style,
    save_figure,
)

EVENT_COLUMNS = ("round", "actor", "activity", "client_id", "start_s", "end_s", "queue_s")

#: Colours of the activities the algorithms record; others take the fallback cycle.
ACTIVITY_COLORS = {
    "client_train": "#0072B2", "client_forward": "#56B4E9", "client_backward": "#0072B2",
    "observe": "#CC79A7", "calibration_probe": "#CC79A7", "replay_forward": "#882255",
    "send_activations": "#E69F00", "send_probe_activations": "#F0E442",
    "send_replay_activations": "#AA4499", "upload_model": "#D55E00",
    "send_gradients": "#009E73", "download_model": "#332288", "download_replay_model": "#117733",
    "server_train": "#333333", "server_replay": "#888888", "central_train": "#333333",
    "server_infer": "#666666",
}
FALLBACK = ("#999933", "#88CCEE", "#661100", "#6699CC", "#AA4466", "#332288")

#: ``(top, height)`` of each lane inside a client's row (row i spans i-0.5 .. i+0.5, y down).
LANES = {"device": (-0.42, 0.42), "uplink": (0.02, 0.19), "downlink": (0.23, 0.19)}
LANE_NAMES = {"device": "device", "uplink": "uplink", "downlink": "downlink", "server": "server"}

#: Up to this many waiting jobs, the waiting-jobs axis ticks at every integer.
ALL_INTEGER_TICKS = 10

#: Space left on the time axis before the round's start and after its end, as a fraction
#: of the round.
TIME_MARGIN = 0.02

#: The least height (in) of a labelled server lane; denser lanes label every k-th lane.
SERVER_LABEL_IN = 0.1


def lane_of(actor: str) -> str:
    """``client3`` -> device, ``client3:uplink`` -> uplink, ``server`` -> server."""
    if actor == "server":
        return "server"
    for suffix in ("uplink", "downlink"):
        if actor.endswith(f":{suffix}"):
            return suffix
    return "device"


def server_lanes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A lane per server job so that jobs in one lane never overlap (first free lane)."""
    lane_end: list[float] = []
    lanes = np.zeros(len(starts), dtype=int)
    for i in np.argsort(starts, kind="stable"):
        free = [k for k, end in enumerate(lane_end) if end <= starts[i] + 1e-12]
        k = free[0] if free else len(lane_end)
        if k == len(lane_end):
            lane_end.append(ends[i])
        lane_end[k] = ends[i]
        lanes[i] = k
    return lanes


def queue_steps(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(t, n)``: jobs waiting for the server from ``t[j]`` until ``t[j+1]`` is ``n[j]``."""
    server = events[(events["actor"] == "server") & (events["queue_s"] > 0)]
    begins = (server["start_s"] - server["queue_s"]).to_numpy(float)
    ends = server["start_s"].to_numpy(float)
    if not len(begins):
        return np.array([]), np.array([])
    t = np.concatenate([begins, ends])
    step = np.concatenate([np.ones(len(begins)), -np.ones(len(ends))])
    order = np.lexsort((step, t))  # at equal times, a start leaves before the next arrival
    return t[order], np.cumsum(step[order])


#: Most steps of the waiting-jobs curve drawn as they are; beyond, the curve is binned
#: (a figure column cannot show more changes, and a curve that changes faster than that
#: fills its panel as one solid block).
QUEUE_BINS = 200
#: The tallest figure (inches); a round of more clients packs their rows closer.
MAX_HEIGHT_IN = 9.0
#: A bin of the binned waiting-jobs curve shows its peak only when jobs waited at least
#: this share of it; the band would otherwise claim a wait of the whole bin.
BAND_MIN_SHARE = 0.1
#: Up to this many clients every row is labelled with its id and device group.
ALL_ROW_LABELS = 16


def binned_queue(t: np.ndarray, waiting: np.ndarray, t0: float, t1: float,
                 bins: int = QUEUE_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(edges, mean, most)`` of the step curve ``waiting`` (``n[j]`` from ``t[j]`` to
    ``t[j+1]``, 0 outside) over ``bins`` equal bins of ``[t0, t1]``: per bin, the
    time-weighted mean and the maximum number of waiting jobs."""
    edges = np.linspace(t0, t1, bins + 1)
    knots = np.union1d(edges, np.clip(t, t0, t1))
    # value on each piece [knots[k], knots[k+1]): the last step at or before its start
    idx = np.searchsorted(t, knots[:-1], side="right") - 1
    value = np.where(idx >= 0, waiting[np.clip(idx, 0, None)], 0.0)
    width = np.diff(knots)
    which = np.clip(np.searchsorted(edges, knots[:-1], side="right") - 1, 0, bins - 1)
    span = np.diff(edges)
    mean = np.bincount(which, weights=value * width, minlength=bins) / np.where(span > 0, span, 1)
    most = np.zeros(bins)
    np.maximum.at(most, which, value)
    return edges, mean, most


def plot_timeline(run_dir: str | Path, out: str | Path, round_: int = 1,
                  formats: list[str] | None = None,
                  options: FigureOptions | None = None) -> list[Path]:
    """Gantt chart of round ``round_`` of a run, from its event trace (``events.parquet``,
    or ``events.csv``).

    Args:
        run_dir: a results directory of ``sflsim run``.
        out: output path: a prefix, or a file name whose extension is the one format.
        round_: the round to draw (1-based).
        formats: figure formats to write (see :func:`~sflsim.plots.style.output_paths`).
        options: labels (an activity's legend entry, by its text or its name such as
            ``client_train``; a device group, ``pi4_wifi``), axis labels, title and
            width (:class:`~sflsim.plots.options.FigureOptions`).

    Returns:
        The written files.

    Raises:
        SflsimError: not a results directory, no ``events`` table, or no events in
            ``round_``; a ``--label`` names nothing of the figure; a bad output path or
            format.
    """
    paths = output_paths(out, formats)
    with paper_style():
        return save_figure(timeline_figure(run_dir, round_, options), paths)


def timeline_figure(run_dir: str | Path, round_: int = 1,
                    options: FigureOptions | None = None) -> Figure:
    """The figure of :func:`plot_timeline`, not saved (arguments and errors as there)."""
    options = options or FigureOptions()
    run_dir = Path(run_dir)
    ev = read_input(run_dir, "events", EVENT_COLUMNS, rounds=[round_])
    if ev.empty:
        have = sorted(read_input(run_dir, "events", ("round",))["round"].unique())
        raise SflsimError(f"{run_table_path(run_dir, 'events')} has no events in round {round_} "
                          f"(rounds recorded: {_ranges(have) or 'none'})")
    ev["lane"] = ev["actor"].map(lane_of)
    ev["client"] = [_client_of(a, c) for a, c in zip(ev["actor"], ev["client_id"])]
    groups = {c: options.label(g) for c, g in client_groups(run_dir).items()}
    clients = _group_order(sorted(ev.loc[ev["lane"] != "server", "client"].unique()), groups)
    row = {c: i for i, c in enumerate(clients)}
    server = ev[ev["lane"] == "server"]
    lanes = server_lanes(server["start_s"].to_numpy(float), server["end_s"].to_numpy(float))
    n_server = int(lanes.max()) + 1 if len(lanes) else 0
    colors = _activity_colors(ev)
    t0, t1 = _round_span(run_dir, round_, ev)

    n = len(clients)
    t, waiting, unseen = _waiting(ev, t0, t1)
    most = int(waiting.max()) if len(t) else 0
    row_in = max(0.05, min(0.16, 3.2 / max(n, 1)))
    # no job waited: no waiting-jobs panel (an empty one would suggest a queue)
    queue_in = (0.0 if not len(t) else max(0.55, 0.12 * (most + 1))
                if most <= ALL_INTEGER_TICKS else 1.4)
    # the figure is at most MAX_HEIGHT_IN tall: the Gantt panel gives way, not the queue's
    gantt_in = min(row_in * n + 0.13 * n_server + 0.25, MAX_HEIGHT_IN - queue_in - 0.7)
    with paper_style():
        fig = new_figure(gantt_in + queue_in + 0.7, options.width)
        if queue_in:
            gantt, queue = fig.subplots(2, 1, sharex=True,
                                        gridspec_kw={"height_ratios": [gantt_in, queue_in]})
        else:
            gantt, queue = fig.add_subplot(), None
        for (lane, activity), group in ev[ev["lane"] != "server"].groupby(["lane", "activity"]):
            offset, height = LANES[lane]
            for client, bars in group.groupby("client"):
                _bars(gantt, bars, row[client] + offset, height, colors[activity])
        for k in range(n_server):
            jobs = server[lanes == k]
            for activity, bars in jobs.groupby("activity"):
                _bars(gantt, bars, _server_y(n, k) - 0.275, 0.55, colors[activity])
        _client_axis(gantt, groups, clients, n, n_server, gantt_in)
        pad = TIME_MARGIN * (t1 - t0)
        gantt.set_xlim(t0 - pad, t1 + pad)
        for ax in (gantt, queue) if queue is not None else (gantt,):  # the round's bounds
            for edge in (t0, t1):
                ax.axvline(edge, color="0.55", lw=0.5, ls=":", zorder=0)
        gantt.grid(axis="y", visible=False)
        gantt.set_title(f"Round {round_}" if queue is not None or not n_server or unseen else
                        f"Round {round_}: no job waited for the server", loc="left", fontsize=8)

        binned: list = []  # the binned curve's entries of the figure's legend
        if queue is None:
            gantt.set_xlabel("Simulated time (s)")
        else:
            binned = _queue_panel(queue, t, waiting, t0, t1)

        handles = [Patch(facecolor=colors[a], label=options.label(_activity_label(a, ev), a))
                   for a in _legend_order(ev)] + binned
        if unseen:
            handles.append(Patch(facecolor="none", edgecolor="none", label=unseen))
        fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=6.5,
                   handlelength=1.2, columnspacing=1.0)
        return finish_figure(fig, options, x_ax=queue if queue is not None else gantt,
                             y_ax=gantt, title_ax=gantt, max_height_in=MAX_HEIGHT_IN)


def _waiting(ev: pd.DataFrame, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray, str]:
    """The round's waiting jobs as steps ``(t, waiting)`` (:func:`queue_steps`), and the
    legend's text instead of them where every wait together is shorter than one bin (a
    panel would suggest a queue that is not there): then ``t`` and ``waiting`` are empty."""
    t, waiting = queue_steps(ev)
    waited = ev.loc[(ev["lane"] == "server") & (ev["queue_s"] > 0), "queue_s"]
    if len(t) and float(np.sum(np.diff(t)[waiting[:-1] > 0])) < (t1 - t0) / QUEUE_BINS:
        unseen = (f"Waiting for the server: {len(waited)} job{'s' * (len(waited) != 1)}, "
                  f"{_duration(waited.mean())} each on average (longest "
                  f"{_duration(waited.max())}): too short to draw")
        return np.array([]), np.array([]), unseen
    return t, waiting, ""


def _queue_panel(queue, t: np.ndarray, waiting: np.ndarray, t0: float, t1: float) -> list:
    """Draw the waiting jobs on ``queue``: binned (the mean per bin, and the most per bin
    where jobs waited at least :data:`BAND_MIN_SHARE` of it) when there are too many
    changes to draw one by one, else step by step; returns the binned curve's legend
    entries (empty when drawn step by step)."""
    binned: list = []
    most = int(waiting.max()) if len(t) else 0
    if len(t) > 2 * QUEUE_BINS and t1 > t0:  # too many changes to draw one by one
        edges, mean, peak = binned_queue(t, waiting, t0, t1)
        share = binned_queue(t, (waiting > 0).astype(float), t0, t1)[1]
        brief = (peak > 0) & (share < BAND_MIN_SHARE)  # a band there would claim more
        peak = np.where(brief, 0.0, peak)
        width = f"{(t1 - t0) / QUEUE_BINS:.3g} s"
        where = f" (bins with ≥{100 * BAND_MIN_SHARE:g}% waiting)" if brief.any() else ""
        binned.append(queue.fill_between(
            edges, np.append(peak, peak[-1]), step="post", color="#D55E00", alpha=0.18,
            lw=0, label=f"Waiting jobs, most per {width}{where}"))
        binned += queue.step(edges, np.append(mean, mean[-1]), where="post",
                             color="#D55E00", lw=0.8, label=f"Waiting jobs, mean per {width}")
    elif len(t):
        t = np.concatenate([[t0], t, [t1]])
        waiting = np.concatenate([[0], waiting, [0]])
        queue.fill_between(t, waiting, step="post", color="#D55E00", alpha=0.25, lw=0)
        queue.step(t, waiting, where="post", color="#D55E00", lw=0.8)
    top = max(1, most)
    queue.set_ylim(bottom=0, top=top + 0.3 if top <= ALL_INTEGER_TICKS else top * 1.1)
    count_ticks(queue.yaxis, most, all_up_to=ALL_INTEGER_TICKS)
    queue.set_ylabel("Waiting\njobs")
    queue.set_xlabel("Simulated time (s)")
    return binned


def _duration(seconds: float) -> str:
    """``2.5`` -> ``2.5 s``; ``0.00014`` -> ``0.14 ms``; ``2e-6`` -> ``2 µs``."""
    if abs(seconds) >= 0.1:
        return f"{seconds:.3g} s"
    if abs(seconds) >= 1e-4:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _group_order(clients: list[int], groups: dict[int, str]) -> list[int]:
    """``clients`` with each device group's rows together, the groups in the order of
    their first client, clients by id within a group (clients without a group by id)."""
    first: dict[str, int] = {}
    for c in clients:
        first.setdefault(groups.get(c, f"\0{c}"), c)
    return sorted(clients, key=lambda c: (first[groups.get(c, f"\0{c}")], c))


def _server_y(n_clients: int, lane: int) -> float:
    """Centre of server lane ``lane`` below ``n_clients`` client rows."""
    return n_clients + 0.35 + 0.7 * lane


def _bars(ax, bars: pd.DataFrame, ymin: float, height: float, color: str) -> None:
    """Bars from ``start_s`` to ``end_s`` spanning ``ymin`` .. ``ymin + height``."""
    start = bars["start_s"].to_numpy(float)
    width = (bars["end_s"] - bars["start_s"]).to_numpy(float)
    # An edge in the face colour keeps sub-pixel jobs (a few ms of server work) visible.
    ax.broken_barh(list(zip(start, width)), (ymin, height),
                   facecolors=color, edgecolors=color, linewidth=0.25)


def _client_axis(ax, groups: dict[int, str], clients: list[int], n: int, n_server: int,
                 gantt_in: float) -> None:
    """Client rows labelled ``C<i> <group>`` (every row up to :data:`ALL_ROW_LABELS`
    clients; beyond, the first row of each group, other rows ``C<i>`` every few rows,
    and a line between groups), then the server lanes (``Server``, or ``Server 1``,
    ``Server 2``, ... for several, every k-th when they are too thin to label each);
    y grows downward."""
    ticks, labels = _row_ticks(clients, groups, n)
    if n > ALL_ROW_LABELS:
        for i in range(1, n):
            if groups.get(clients[i]) != groups.get(clients[i - 1]):
                ax.axhline(i - 0.5, color="0.75", lw=0.4, zorder=0)
    bottom = _server_y(n, max(n_server - 1, 0)) + 0.45 if n_server else n - 0.45
    if n_server == 1:
        ticks.append(_server_y(n, 0))
        labels.append("Server")
    elif n_server:
        lane_in = 0.7 * gantt_in / (bottom + 0.55)  # the axis spans -0.55 .. bottom
        every = max(1, int(np.ceil(SERVER_LABEL_IN / lane_in)))
        for k in range(0, n_server, every):
            ticks.append(_server_y(n, k))
            labels.append(f"Server {k + 1}")
    if n_server:
        ax.axhline(n - 0.45, color="0.6", lw=0.5)
    ax.set_yticks(ticks, labels, fontsize=6 if n > 8 or n_server > 4 else 7)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(bottom, -0.55)


def _row_ticks(clients: list[int], groups: dict[int, str], n: int
               ) -> tuple[list[float], list[str]]:
    """Where the client rows are labelled and how (see :func:`_client_axis`)."""
    def named(i: int) -> str:
        return f"C{clients[i]}" + (f" {groups[clients[i]]}" if clients[i] in groups else "")

    if n <= ALL_ROW_LABELS:
        return list(range(n)), [named(i) for i in range(n)]
    step = max(1, int(np.ceil(n / 24)))
    starts = [i for i in range(n) if i == 0 or groups.get(clients[i]) != groups.get(clients[i - 1])]
    every = max(1, int(np.ceil(len(starts) / 24)))  # too many groups: every k-th one named
    starts = starts[::every]
    ticks: list[float] = []
    labels: list[str] = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else n
        ticks.append(start)
        labels.append(named(start))
        for i in range(start + step, end - step // 2, step):  # within the group: ids
            ticks.append(i)
            labels.append(f"C{clients[i]}")
    return ticks, labels


def _round_span(run_dir: Path, round_: int, ev: pd.DataFrame) -> tuple[float, float]:
    """Start and end (s) of the round: from rounds.csv, else the trace."""
    t0, t1 = float(ev["start_s"].min()), float(ev["end_s"].max())
    rounds = read_result(run_dir)[1]
    if {"round", "sim_time_s", "round_time_s"} <= set(rounds.columns):
        row = rounds[rounds["round"] == round_]
        if len(row):
            end, length = float(row["sim_time_s"].iloc[0]), float(row["round_time_s"].iloc[0])
            t0, t1 = min(t0, end - length), max(t1, end)
    return t0, t1 if t1 > t0 else t0 + 1.0


def _client_of(actor: str, client_id: int) -> int:
    match = re.match(r"client(\d+)", actor)
    return int(match.group(1)) if match else int(client_id)


def _activity_colors(ev: pd.DataFrame) -> dict[str, str]:
    colors, spare = {}, iter(FALLBACK * 4 + PALETTE)
    for activity in _legend_order(ev):
        colors[activity] = ACTIVITY_COLORS.get(activity) or next(spare)
    return colors


def _legend_order(ev: pd.DataFrame) -> list[str]:
    """Activities by lane (device, uplink, downlink, server), then first appearance."""
    rank = {"device": 0, "uplink": 1, "downlink": 2, "server": 3}
    first = ev.sort_values("start_s").drop_duplicates("activity")
    return sorted(first["activity"], key=lambda a: rank[first.set_index("activity").at[a, "lane"]])


def _activity_label(activity: str, ev: pd.DataFrame) -> str:
    lanes = sorted(set(ev.loc[ev["activity"] == activity, "lane"]))
    text = activity.replace("_", " ").capitalize()
    return f"{text} ({', '.join(LANE_NAMES[lane] for lane in lanes)})"


def _ranges(values: list[int]) -> str:
    return f"{values[0]}-{values[-1]}" if len(values) > 1 else ", ".join(map(str, values))
