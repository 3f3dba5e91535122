"""Per-round and per-client records derived from the event trace, and energy.

Energy, per device and round: compute energy = busy time x
active power; the rest of the round the device draws idle power; radio energy =
uplink time x transmit power + downlink time x receive power, counted as extra
draw on top of whatever the device is doing (profiles state radio power that
way, see ``device_profiles/README.md``). Transfers may overlap compute, since
activations are streamed while the next batch trains. The three parts are
reported apart (``compute_energy_j``, ``radio_energy_j``, ``idle_energy_j``;
``energy_j`` is their sum). A dropped client draws idle power all round; work cut
off by the round deadline leaves no event, so its device counts as idle then.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from sflsim.engine import TraceEvent


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


def client_round_rows(
    round_: int, events: Iterable[TraceEvent], clients: list, round_start_s: float,
    round_end_s: float, accuracies: dict[int, tuple[float, float]] | None,
    losses: dict[tuple[str, int], float] | None = None, cuts: dict[int, int] | None = None,
    activated_params: dict[int, int] | None = None, status: dict[int, str] | None = None,
    slowdowns: dict[int, float] | None = None,
) -> list[dict]:
    """One row per client for ``round_``: cut layer used this round, times (s), bytes,
    FLOPs, energy (J) by part, losses and accuracy, and the round's conditions:
    ``status`` ("trained", "dropped", or "late": cut off by the deadline, its unfinished
    work discarded) and ``slowdown`` (compute took that many times longer)."""
    compute = defaultdict(float)
    flops = defaultdict(float)
    up = defaultdict(float)
    down = defaultdict(float)
    up_bytes = defaultdict(int)
    down_bytes = defaultdict(int)
    queue = defaultdict(float)
    for e in events:
        actor = e.actor
        if actor == "server":
            queue[e.client_id] += e.queue_s
        elif actor.endswith(":uplink"):
            up[e.client_id] += e.end_s - e.start_s
            up_bytes[e.client_id] += e.payload_bytes
        elif actor.endswith(":downlink"):
            down[e.client_id] += e.end_s - e.start_s
            down_bytes[e.client_id] += e.payload_bytes
        elif actor == f"client{e.client_id}":
            compute[e.client_id] += e.end_s - e.start_s
            flops[e.client_id] += e.flops
    round_s = round_end_s - round_start_s
    rows = []
    nan = float("nan")
    accuracies, losses, cuts = accuracies or {}, losses or {}, cuts or {}
    status, slowdowns, activated_params = status or {}, slowdowns or {}, activated_params or {}
    powers: dict[int, tuple[float, float, float, float]] = {}  # per device profile object, W
    for c in clients:
        i, dev = c.client_id, c.device
        power = powers.get(id(dev))
        if power is None:
            power = powers[id(dev)] = (dev.active_power_w.value, dev.radio_tx_power_w.value,
                                        dev.radio_rx_power_w.value, dev.idle_power_w.value)
        idle = max(0.0, round_s - compute[i])
        compute_j = compute[i] * power[0]
        radio_j = up[i] * power[1] + down[i] * power[2]
        idle_j = idle * power[3]
        server_acc, client_acc = accuracies.get(i, (nan, nan))
        rows.append({
            "round": round_, "client_id": i, "group": c.group, "profile": dev.name,
            "domain": getattr(c, "domain", None) or "",
            "end_layer": c.end_layer, "cut_layer": cuts.get(i, c.end_layer),
            "samples": len(c.indices),
            "status": status.get(i, "trained"),
            "slowdown": slowdowns.get(i, 1.0),
            "activated_params": activated_params.get(i, 0),
            "compute_s": compute[i], "uplink_s": up[i], "downlink_s": down[i], "idle_s": idle,
            "server_queue_s": queue[i], "client_flops": flops[i],
            "bytes_up": up_bytes[i], "bytes_down": down_bytes[i],
            "energy_j": compute_j + radio_j + idle_j, "compute_energy_j": compute_j,
            "radio_energy_j": radio_j, "idle_energy_j": idle_j,
            "client_loss": losses.get(("client", i), nan),
            "server_loss": losses.get(("server", i), nan),
            "server_accuracy": fraction(server_acc), "client_accuracy": fraction(client_acc),
        })
    return rows


def round_row(
    round_: int, events: list[TraceEvent], client_rows: list[dict], round_start_s: float,
    round_end_s: float, wall_time_s: float, accuracies: dict[int, tuple[float, float]] | None,
    end_layers: dict[int, int], losses: dict[tuple[str, int], float] | None = None,
) -> dict:
    """The ``rounds.csv`` row: simulated/wall time (s), accuracies, mean training losses
    (cross-entropy, nats), bytes, FLOPs, energy (J).

    ``server_accuracy`` and ``client_accuracy`` are means over clients;
    ``server_accuracy_l<k>`` and ``client_accuracy_l<k>`` are means over the
    clients at end layer ``k`` (paper Table IV), rounded by :func:`fraction`. NaN in
    rounds without evaluation.
    ``server_queue_mean_s`` / ``server_queue_max_s`` summarise the wait for a server
    slot of the round's ``server_jobs`` jobs (each job's wait is ``queue_s`` in events.csv).
    ``clients_trained`` / ``clients_dropped`` / ``clients_late`` count the clients' statuses;
    ``note`` says why a round is special ("every client dropped", "deadline: N late",
    "untrained model" for round 0, the evaluation before training; the runner adds
    :func:`loss_growth_note`), else "".
    """
    statuses = [r.get("status", "trained") for r in client_rows]
    counts = {k: statuses.count(k) for k in ("trained", "dropped", "late")}
    notes = ["untrained model"] if round_ == 0 else []
    if client_rows and counts["dropped"] == len(client_rows):
        notes.append("every client dropped")
    if counts["late"]:
        notes.append(f"deadline: {counts['late']} late")
    server_events = [e for e in events if e.actor == "server"]
    row: dict = {
        "round": round_,
        "sim_time_s": round_end_s,
        "round_time_s": round_end_s - round_start_s,
        "wall_time_s": wall_time_s,
        "server_accuracy": float("nan"),
        "client_accuracy": float("nan"),
        "client_loss": (losses or {}).get(("client", -1), float("nan")),
        "server_loss": (losses or {}).get(("server", -1), float("nan")),
        "bytes_up": sum(r["bytes_up"] for r in client_rows),
        "bytes_down": sum(r["bytes_down"] for r in client_rows),
        "client_flops": sum(r["client_flops"] for r in client_rows),
        "client_flops_mean": _mean(r["client_flops"] for r in client_rows),
        "activated_params_mean": _mean(r["activated_params"] for r in client_rows),
        "server_flops": sum(e.flops for e in server_events),
        "server_busy_s": sum(e.end_s - e.start_s for e in server_events),
        "server_queue_mean_s": (sum(e.queue_s for e in server_events) / len(server_events)
                                if server_events else 0.0),
        "server_queue_max_s": max((e.queue_s for e in server_events), default=0.0),
        "server_jobs": len(server_events),
        "client_energy_j": sum(r["energy_j"] for r in client_rows),
        "client_compute_energy_j": sum(r["compute_energy_j"] for r in client_rows),
        "client_radio_energy_j": sum(r["radio_energy_j"] for r in client_rows),
        "client_idle_energy_j": sum(r["idle_energy_j"] for r in client_rows),
        "clients_trained": counts["trained"],
        "clients_dropped": counts["dropped"],
        "clients_late": counts["late"],
        "note": "; ".join(notes),
    }
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
    return row


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
