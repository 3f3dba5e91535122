"""Per-round and per-client records derived from the event trace: the clients table's
rows (:func:`client_round_columns`) and ``rounds.csv``'s row (:func:`round_row`).

Energy follows the scenario's ``energy`` rules, as :mod:`sflsim.metrics.energy` states
them; the clients as the records read them are :class:`ClientTable`
(:mod:`sflsim.metrics.client_table`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from sflsim.engine import TraceEvent
from sflsim.metrics.client_table import ClientTable, actor_codes
from sflsim.metrics.energy import idle_s, radio_on_until, union_per_client

__all__ = [
    "FRACTION_DECIMALS", "LOSS_GROWTH_FACTOR", "ClientTable", "client_round_columns",
    "client_round_rows", "fraction", "loss_growth_note", "mean_losses", "percent", "round_row",
    "rows_of",
]


def mean_losses(losses: Iterable[tuple[str, int, float, int]]) -> dict[tuple[str, int], float]:
    """Sample-weighted mean training loss per ``(where, client_id)``, plus ``(where, -1)``
    over everything of that kind."""
    sums: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
    for where, cid, loss, n in losses:
        for key in ((where, cid), (where, -1)):
            sums[key][0] += loss * n
            sums[key][1] += n
    return {k: total / n for k, (total, n) in sums.items()}


#: a round's mean training loss this many times the lowest of an earlier round is noted
#: ("grows by orders of magnitude"): a run on its way to diverging while still finite
LOSS_GROWTH_FACTOR = 100.0


def loss_growth_note(earlier: list[dict], row: dict, factor: float = LOSS_GROWTH_FACTOR) -> str:
    """A note when ``row``'s ``client_loss`` or ``server_loss`` (nats) is at least ``factor``
    times the lowest value of that loss in the ``earlier`` rounds.csv rows, else ""."""
    notes = []
    for key in ("client_loss", "server_loss"):
        value = row.get(key, float("nan"))
        best = min(((r[key], r["round"]) for r in earlier
                    if math.isfinite(r.get(key, float("nan"))) and r[key] > 0), default=None)
        if best is not None and math.isfinite(value) and value >= factor * best[0]:
            notes.append(f"{key.replace('_', ' ')} {value:.3g} is {value / best[0]:.0f}x its "
                         f"round-{best[1]} low ({best[0]:.3g}): diverging? (lower the learning "
                         f"rate)")
    return "; ".join(notes)


def client_round_columns(
    round_: int, events: dict[str, list], table: ClientTable, round_start_s: float,
    round_end_s: float, accuracies: dict[int, tuple[float, float]] | None,
    losses: dict[tuple[str, int], float] | None = None, cut_layers: dict[int, int] | None = None,
    activated_params: dict[int, int] | None = None, status: dict[int, str] | None = None,
    slowdowns: dict[int, float] | None = None,
) -> dict[str, list | np.ndarray]:
    """The clients table's rows of ``round_`` as columns (one entry per client of ``table``):
    cut layer used this round, times (s), bytes, FLOPs, energy (J) by part (rules:
    :mod:`sflsim.metrics.energy`), losses and accuracy, and the round's conditions:
    ``status`` ("trained", "dropped", "late":
    cut off by the deadline, its unfinished work discarded, "offline": offline at the
    start or gone offline during the round, "not_sampled", or "over_committed": drawn but
    not kept, stopped when enough others had finished or finished at the same instant as
    the last one kept but after it in the sampling order) and ``slowdown`` (compute
    took that many times longer).

    Args:
        events: the round's trace as columns (:meth:`sflsim.engine.Trace.columns`).
    """
    n, ids = table.n, table.ids
    cid = np.asarray(events["client_id"], dtype=np.int64)
    codes = actor_codes(events["actor"], table)
    kind, owner = (a[codes] for a in table.kind_arrays)
    start = np.asarray(events["start_s"], dtype=float)
    end = np.asarray(events["end_s"], dtype=float)
    span = end - start
    ok = cid >= 0

    def per_client(mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
        m = mask & ok
        return np.bincount(cid[m], weights=weights[m], minlength=n)[ids] if n else np.zeros(0)

    payload = np.asarray(events["payload_bytes"], dtype=float)
    compute_mask = (kind == 3) & (owner == cid)
    compute = per_client(compute_mask, span)
    flops = per_client(compute_mask, np.asarray(events["flops"], dtype=float))
    radio_end = radio_on_until(events, table, codes=codes) if n else end
    up = union_per_client(kind == 1, cid, start, radio_end, n)[ids] if n else np.zeros(0)
    down = union_per_client(kind == 2, cid, start, radio_end, n)[ids] if n else np.zeros(0)
    up_bytes = per_client(kind == 1, payload).astype(np.int64)
    down_bytes = per_client(kind == 2, payload).astype(np.int64)
    queue = per_client(kind == 0, np.asarray(events["queue_s"], dtype=float))
    accuracies, losses, cut_layers = accuracies or {}, losses or {}, cut_layers or {}
    status, slowdowns, activated_params = status or {}, slowdowns or {}, activated_params or {}

    def per(values: dict, default: object, transform=None) -> list:
        if not values:  # nothing recorded this round (timing-only runs): one constant
            return [default] * len(ids)
        got = [values.get(i, default) for i in ids]
        return got if transform is None else [transform(v) for v in got]

    statuses = per(status, "trained")
    idle = idle_s(table, statuses, cid, end, round_start_s, round_end_s) - compute
    idle = np.maximum(0.0, idle)
    compute_j = compute * table.active_w
    radio_j = up * table.tx_w + down * table.rx_w
    idle_j = idle * table.idle_w
    nan = float("nan")
    accs = [accuracies.get(i, (nan, nan)) for i in ids] if accuracies else None
    return {
        "round": [round_] * len(ids), "client_id": ids, "group": table.group,
        "profile": table.profile, "domain": table.domain, "end_layer": table.end_layer,
        "cut_layer": [cut_layers.get(i, e) for i, e in zip(ids, table.end_layer)] if cut_layers
        else table.end_layer,
        "samples": table.samples,
        "status": statuses,
        "slowdown": per(slowdowns, 1.0),
        "activated_params": per(activated_params, 0),
        "compute_s": compute, "uplink_s": up, "downlink_s": down, "idle_s": idle,
        "server_queue_s": queue, "client_flops": flops,
        "bytes_up": up_bytes, "bytes_down": down_bytes,
        "energy_j": compute_j + radio_j + idle_j, "compute_energy_j": compute_j,
        "radio_energy_j": radio_j, "idle_energy_j": idle_j,
        "client_loss": [losses.get(("client", i), nan) for i in ids] if losses else [nan] * len(ids),
        "server_loss": [losses.get(("server", i), nan) for i in ids] if losses else [nan] * len(ids),
        "server_accuracy": [fraction(a[0]) for a in accs] if accs else [nan] * len(ids),
        "client_accuracy": [fraction(a[1]) for a in accs] if accs else [nan] * len(ids),
    }


def client_round_rows(round_: int, events: Iterable[TraceEvent], clients: list,
                      round_start_s: float, round_end_s: float,
                      accuracies: dict[int, tuple[float, float]] | None, *,
                      energy: object | None = None, **kwargs) -> list[dict]:
    """:func:`client_round_columns` as one dict per client, from events as
    :class:`~sflsim.engine.TraceEvent` (``energy``: the scenario's energy rules, None the
    defaults; other keyword arguments as there)."""
    events = list(events)
    cols = {f: [getattr(e, f) for e in events] for f in TraceEvent._fields}
    columns = client_round_columns(round_, cols, ClientTable(clients, energy), round_start_s,
                                   round_end_s, accuracies, **kwargs)
    return rows_of(columns)


def rows_of(columns: dict[str, list | np.ndarray]) -> list[dict]:
    """Columns as one dict per row (NumPy numbers as Python ones)."""
    names = list(columns)
    lists = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in columns.values()]
    return [dict(zip(names, values)) for values in zip(*lists)]


def round_row(
    round_: int, events: dict[str, list] | Iterable[TraceEvent],
    clients: dict[str, list | np.ndarray] | list[dict], round_start_s: float,
    round_end_s: float, wall_time_s: float, accuracies: dict[int, tuple[float, float]] | None,
    end_layers: dict[int, int], losses: dict[tuple[str, int], float] | None = None,
) -> dict:
    """The ``rounds.csv`` row: simulated/wall time (s), accuracies, mean training losses
    (cross-entropy, nats), bytes, FLOPs, energy (J).

    ``events`` is the round's trace as columns (:meth:`sflsim.engine.Trace.columns`) or
    as :class:`~sflsim.engine.TraceEvent`; ``clients`` its clients-table rows as
    columns (:func:`client_round_columns`) or as dicts.

    ``server_accuracy`` and ``client_accuracy`` are means over clients;
    ``server_accuracy_l<k>`` and ``client_accuracy_l<k>`` are means over the
    clients at end layer ``k`` (paper Table IV), rounded by :func:`fraction`. NaN in
    rounds without evaluation.
    ``server_queue_mean_s`` / ``server_queue_max_s`` summarise the wait for a server
    slot of the round's ``server_jobs`` jobs (each job's wait is ``queue_s`` in the event trace).
    ``clients_trained`` / ``clients_dropped`` / ``clients_late`` / ``clients_offline`` /
    ``clients_not_sampled`` / ``clients_over_committed`` count the clients' statuses;
    ``note`` says why a round is special ("every client dropped", "deadline: N late",
    "untrained model" for round 0, the evaluation before training; the runner adds
    :func:`loss_growth_note`), else "".
    """
    events, clients = _as_columns(events, clients)

    def col(name: str) -> list:
        values = clients.get(name, [])
        return values.tolist() if isinstance(values, np.ndarray) else list(values)

    statuses = col("status")
    counts = {k: statuses.count(k) for k in ("trained", "dropped", "late", "offline",
                                              "not_sampled", "over_committed")}
    client_flops = col("client_flops")
    row: dict = {
        "round": round_,
        "sim_time_s": round_end_s,
        "round_time_s": round_end_s - round_start_s,
        "wall_time_s": wall_time_s,
        "server_accuracy": float("nan"),
        "client_accuracy": float("nan"),
        "client_loss": (losses or {}).get(("client", -1), float("nan")),
        "server_loss": (losses or {}).get(("server", -1), float("nan")),
        "bytes_up": sum(col("bytes_up")),
        "bytes_down": sum(col("bytes_down")),
        "client_flops": sum(client_flops),
        "client_flops_mean": _mean(client_flops),
        "activated_params_mean": _mean(col("activated_params")),
        **_server_columns(events),
        "client_energy_j": sum(col("energy_j")),
        "client_compute_energy_j": sum(col("compute_energy_j")),
        "client_radio_energy_j": sum(col("radio_energy_j")),
        "client_idle_energy_j": sum(col("idle_energy_j")),
        "clients_trained": counts["trained"],
        "clients_dropped": counts["dropped"],
        "clients_late": counts["late"],
        "clients_offline": counts["offline"],
        "clients_not_sampled": counts["not_sampled"],
        "clients_over_committed": counts["over_committed"],
        "note": _round_note(round_, statuses, counts),
    }
    _add_accuracies(row, accuracies, end_layers)
    return row


def _as_columns(events: dict[str, list] | Iterable[TraceEvent],
                clients: dict[str, list | np.ndarray] | list[dict],
                ) -> tuple[dict[str, list], dict[str, list | np.ndarray]]:
    """A round's events and clients-table rows as columns, whichever way they came
    (:func:`round_row`)."""
    if not isinstance(events, dict):
        events = list(events)
        events = {f: [getattr(e, f) for e in events] for f in TraceEvent._fields}
    if isinstance(clients, list):
        clients = {k: [r[k] for r in clients] for k in (clients[0] if clients else ())}
    return events, clients


def _round_note(round_: int, statuses: list[str], counts: dict[str, int]) -> str:
    """Why a round is special, from its clients' statuses and their ``counts``, else ""
    (the ``note`` of :func:`round_row`)."""
    notes = ["untrained model"] if round_ == 0 else []
    if statuses and counts["dropped"] == len(statuses):
        notes.append("every client dropped")
    elif statuses and counts["trained"] + counts["late"] == 0 and round_ != 0:
        notes.append("no client took part")
    if counts["late"]:
        notes.append(f"deadline: {counts['late']} late")
    if counts["offline"]:
        notes.append(f"{counts['offline']} offline")
    return "; ".join(notes)


def _server_columns(events: dict[str, list]) -> dict:
    """The server's work in a round: FLOPs, busy time (s), the wait of its jobs for a
    slot (``queue_s``, mean and max) and their number (:func:`round_row`)."""
    actor = events["actor"]
    if hasattr(actor, "categories"):  # a booked block (pandas.Categorical): no loop
        server = np.flatnonzero(np.asarray(actor == "server")) \
            if "server" in actor.categories else np.zeros(0, dtype=np.int64)
        column = lambda name: np.asarray(events[name], dtype=float)[server]  # noqa: E731
    else:
        server = [i for i, a in enumerate(actor) if a == "server"]
        column = lambda name: np.array([events[name][i] for i in server], dtype=float)  # noqa: E731
    s_flops, s_queue = column("flops"), column("queue_s")
    s_busy = column("end_s") - column("start_s")
    return {  # sums added left to right, as Python's sum adds
        "server_flops": _sum(s_flops),
        "server_busy_s": _sum(s_busy),
        "server_queue_mean_s": _sum(s_queue) / len(s_queue) if len(s_queue) else 0.0,
        "server_queue_max_s": float(s_queue.max()) if len(s_queue) else 0.0,
        "server_jobs": len(server),
    }


def _sum(values: np.ndarray) -> float:
    """``sum(values)`` as Python adds it, left to right from 0 (not NumPy's pairwise
    sum, whose last bits differ), at NumPy's speed."""
    return float(np.add.accumulate(values)[-1]) if len(values) else 0


def _add_accuracies(row: dict, accuracies: dict[int, tuple[float, float]] | None,
                    end_layers: dict[int, int]) -> None:
    """Set ``row``'s accuracies: means over clients, and over the clients at each end
    layer (paper Table IV), without float noise (:func:`fraction`); NaN without
    evaluation."""
    layers = sorted(set(end_layers.values()))
    for layer in layers:
        row[f"server_accuracy_l{layer}"] = float("nan")
        row[f"client_accuracy_l{layer}"] = float("nan")
    if accuracies:  # means over clients, without float noise (fraction)
        row["server_accuracy"] = fraction(_mean(a[0] for a in accuracies.values()))
        row["client_accuracy"] = fraction(_mean(a[1] for a in accuracies.values()))
        for layer in layers:
            accs = [a for cid, a in accuracies.items() if end_layers[cid] == layer]
            row[f"server_accuracy_l{layer}"] = fraction(_mean(a[0] for a in accs))
            row[f"client_accuracy_l{layer}"] = fraction(_mean(a[1] for a in accs))


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else float("nan")


#: decimals that :func:`fraction` keeps
FRACTION_DECIMALS = 10


def fraction(value: float) -> float:
    """A fraction in [0, 1] (an accuracy, a share of clients) as written to the result
    files: rounded to :data:`FRACTION_DECIMALS` decimals, which drops the float noise of a
    mean (``0.7775000000000001`` is written ``0.7775``) and is far finer than any
    accuracy's resolution (one test sample in 10^5 is 1e-5). NaN stays NaN."""
    return round(value, FRACTION_DECIMALS)


def percent(value: float) -> float:
    """A fraction as a percentage, as precise as :func:`fraction` and as free of float
    noise (``100 * 0.57`` is ``56.99999999999999``; this gives ``57.0``)."""
    return round(100 * value, FRACTION_DECIMALS - 2)
