"""Collaborative early-exit inference (Hetero-SplitEE Alg. 3), swept over thresholds.

Paper: "Split Learning of Neural Networks with Early Exits for Heterogeneous IoT
Devices", arXiv 2512.09313, §III-C, Alg. 3, §IV-D, Fig. 2.

Per test sample, client ``i`` runs its client-side model and exit head, takes the
softmax ``p`` of the exit logits, its entropy ``H = -sum_j p_j log p_j`` (nats) and
the confidence ``C = -H``. If ``C > tau`` (strict, as Alg. 3) the sample exits on the
device with the exit head's prediction; otherwise its activations go to the server
and the server-side model's prediction is final. A larger ``tau`` is more
conservative: fewer exits, more accuracy on hard tasks, more latency and bytes.
Since ``C <= 0``, ``tau >= 0`` sends every sample to the server, and ``tau`` below
every confidence keeps every sample on the device. The sweep runs ``tau`` from
``evaluation.early_exit.tau_min`` to ``tau_max`` (default -4 to 0 in steps of 0.05,
i.e. entropy thresholds ``-tau`` from 4 down to 0, the paper's range).

Which algorithms: those whose clients train exit heads, i.e. Hetero-SplitEE
Sequential and Averaging, the distributed baseline (each client's model and its
server-side model) and the centralized baseline (the centralized model of each end
layer, deployed on every client of that layer). Others have no exit heads and are
skipped with a note in ``summary.json``.

**Accuracy and exit ratio** come from one forward pass of the evaluation test set
(the one ``rounds.csv`` reports on, ``evaluation.max_test_samples``) through every
client's client-side model, exit head and server-side model, in eval mode under
``torch.inference_mode`` after the last round (training results are untouched);
every ``tau`` is then a mask ``exit = C > tau``. So at the all-exit end the accuracy
is the exit head's accuracy and at the no-exit end the server's, as in ``rounds.csv``.

**Latency** is simulated in a fresh :class:`~sflsim.engine.Simulation` per distinct
exit pattern (thresholds that exit the same samples share one). Each client infers
``samples_per_client`` test samples (a seeded draw without replacement from the
test set, per client) in a closed loop, all clients starting at time 0: a batch of
``batch_size`` samples (default 1) is computed on the device (forward FLOPs of the
client-side model and exit head / the device's sustained FLOP/s; under
``hardware.cost_model: operators`` the cost model's forward of those operators and the
device's per-batch cost); its exiting
samples finish there; the rest go up the client's link as one payload (activation
bytes of the real shape in the wire dtype), queue FIFO for one of the server's
slots (the scenario's server: same FLOP/s and slots as in training), run the
server-side model's forward FLOPs, and return their predictions down the link,
:data:`PREDICTION_BYTES` per sample (the int64 class index). The next batch starts
when the whole batch is done. A client's link carries only its own, one-at-a-time
transfers here, so only the server queue needs simulating; device, transfer and
server times are computed from the same rules (:func:`~sflsim.engine.transfer_time_s`),
and the simulation is skipped when, without queueing, the server never holds more
jobs than slots (then it would find no queue). Ties at the server break by client
id. The per-sample latency is ``device + transfer + server queue + server`` seconds.

``early_exit.csv`` has one row per (threshold, end layer): the clients of that end
layer pooled. To aggregate over end layers, weight by ``samples`` (accuracy, exit
ratio, bytes) or ``latency_samples`` (latency columns). Columns:

    threshold            tau on C = -H
    entropy_threshold    -tau: a sample exits when its entropy is below it
    end_layer, clients   the group and its number of clients
    samples              test inferences behind accuracy, exit_ratio and bytes
    accuracy             final-prediction accuracy in [0, 1] (rounded to 10 decimals)
    exit_ratio           share of samples that exit on the device (the same)
    latency_samples      simulated inferences behind the latency columns
    latency_s_mean       mean seconds per sample = the next four added up
    device_s_mean, transfer_s_mean, server_queue_s_mean, server_s_mean
    bytes_per_sample     bytes_up_per_sample + bytes_down_per_sample
    bytes_up_per_sample, bytes_down_per_sample   means over all samples (exits send 0)

Deviations from the paper: the paper reports accuracy and client adoption ratio
(Fig. 2), not latency; the latency and bytes model here is the simulator's. The
paper states the thresholds as 0.0 to 4.0 for ``C = -H``, which would exit nothing;
we read them as entropy thresholds, i.e. ``tau`` from -4 to 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from sflsim.algorithms.base import Algorithm, Client
from sflsim.config.schema import EarlyExitConfig
from sflsim.engine import Server, Simulation, transfer_time_s
from sflsim.execution.host_threads import eval_mode
from sflsim.metrics.records import fraction

#: Bytes of one server prediction sent back to the device (an int64 class index).
PREDICTION_BYTES = 8

COLUMNS = [
    "threshold", "entropy_threshold", "end_layer", "clients", "samples", "accuracy",
    "exit_ratio", "latency_samples", "latency_s_mean", "device_s_mean", "transfer_s_mean",
    "server_queue_s_mean", "server_s_mean", "bytes_per_sample", "bytes_up_per_sample",
    "bytes_down_per_sample",
]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of ``softmax(logits)``, ``(N, K) -> (N,)``.

    Stable: computed from ``log_softmax``; a class with probability 0 (a ``-inf``
    logit, or one far below the others) adds 0, so the result is finite.
    Example: logits ``[0, 0, -inf]`` give ``ln 2 = 0.6931``.
    """
    logp = torch.log_softmax(logits, dim=-1)
    plogp = torch.where(logp > -torch.inf, logp.exp() * logp, torch.zeros_like(logp))
    return -plogp.sum(dim=-1)


def entropy_from_probs(p: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of probabilities ``(N, K) -> (N,)``; ``0 log 0`` counts as 0.

    Example: ``[0, 0.5, 0.5]`` gives ``ln 2 = 0.6931``.
    """
    return -torch.special.xlogy(p, p).sum(dim=-1)


def thresholds(cfg: EarlyExitConfig) -> np.ndarray:
    """``tau_min, tau_min + tau_step, ...`` up to ``tau_max`` (included when on the grid)."""
    count = int(np.floor((cfg.tau_max - cfg.tau_min) / cfg.tau_step + 1e-9)) + 1
    taus = np.round(cfg.tau_min + cfg.tau_step * np.arange(count), 12)
    return taus + 0.0  # no -0.0


def exit_models(algorithm: Algorithm, client: Client
                ) -> tuple[nn.Module, nn.Module, nn.Module] | None:
    """(client-side model, exit head, server-side model) serving ``client``, or None
    when the algorithm trains no exit heads (see :meth:`Algorithm.exit_models`)."""
    return algorithm.exit_models(client)


@dataclass
class Inference:
    """One client's test-set pass: per sample ``(N,)`` arrays."""

    confidence: np.ndarray  # C = -H of the exit head (float64)
    client_correct: np.ndarray  # exit head right (bool)
    server_correct: np.ndarray  # server-side model right (bool)


@torch.inference_mode()
def infer(body: nn.Module, exit_head: nn.Module, server: nn.Module,
          batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> Inference:
    """Run ``batches`` of (float32 images ``(B, C, H, W)``, normalised, labels ``(B,)``)
    (:meth:`~sflsim.data.DatasetSplit.batches`) through the split model once, in eval
    mode (:func:`~sflsim.execution.host_threads.eval_mode`: every module's own mode restored)."""
    conf, client_ok, server_ok = [], [], []
    with eval_mode(body, exit_head, server):
        for xb, yb in batches:
            h = body(xb)
            logits = exit_head(h)
            conf.append(-entropy_from_logits(logits.double()))
            client_ok.append(logits.argmax(1) == yb)
            server_ok.append(server(h).argmax(1) == yb)
    return Inference(torch.cat(conf).cpu().numpy(), torch.cat(client_ok).cpu().numpy(),
                     torch.cat(server_ok).cpu().numpy())


@dataclass(frozen=True)
class InferenceCosts:
    """What one client's inference costs, per sample, and its hardware."""

    device_flops: float  # client-side model + exit head forward
    server_flops: float  # server-side model forward
    activation_bytes: int  # activations of one sample on the wire
    device_flops_per_s: float
    uplink_bps: float
    uplink_latency_s: float
    downlink_bps: float
    downlink_latency_s: float
    #: seconds of a device batch of ``n`` samples (client-side model + exit head forward)
    #: under ``hardware.cost_model: operators``; None: ``device_flops / device_flops_per_s``
    device_seconds: Callable[[int], float] | None = None

    def device_batch_s(self, sizes: np.ndarray) -> np.ndarray:
        """Seconds of each device batch of ``sizes`` samples."""
        if self.device_seconds is None:
            return sizes * self.device_flops / self.device_flops_per_s
        per = {int(n): self.device_seconds(int(n)) for n in np.unique(sizes)}
        return np.array([per[int(n)] for n in sizes], dtype=np.float64)


def inference_costs(algorithm: Algorithm, client: Client,
                    models: tuple[nn.Module, nn.Module, nn.Module]) -> InferenceCosts:
    body, head, server = models
    costs, input_shape, end = algorithm.ctx.costs, algorithm.ctx.backbone.input_shape, client.end_layer
    client_cost = costs.cost(f"client:l{end}", nn.Sequential(body, head), input_shape)
    shape = costs.cost(f"client_body:l{end}", body, input_shape, backward=False).output_shape
    server_cost = costs.cost(f"server:l{end}", server, shape)  # training's key: counted already
    operators, op_costs = algorithm.ctx.operators, getattr(client.device, "operator_costs", None)
    seconds = None
    if operators is not None and op_costs is not None:
        def seconds(n: int) -> float:
            return operators.device_inference_seconds(op_costs, end, n)
    return InferenceCosts(
        device_flops=client_cost.forward_flops, server_flops=server_cost.forward_flops,
        activation_bytes=algorithm.cost_model.payload_bytes(shape, 1),
        device_flops_per_s=client.flops_per_s,
        uplink_bps=client.uplink.bandwidth_bps, uplink_latency_s=client.uplink.latency_s,
        downlink_bps=client.downlink.bandwidth_bps, downlink_latency_s=client.downlink.latency_s,
        device_seconds=seconds,
    )


@dataclass
class LatencyTotals:
    """Sums over one client's simulated samples (seconds)."""

    samples: int
    device_s: float
    transfer_s: float
    server_queue_s: float
    server_s: float

    @property
    def latency_s(self) -> float:
        return self.device_s + self.transfer_s + self.server_queue_s + self.server_s


def _batches(exits: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(samples, offloaded samples) per device batch of a client's exit mask."""
    starts = np.arange(0, len(exits), batch_size)
    sizes = np.diff(np.append(starts, len(exits)))
    offloaded = np.add.reduceat((~exits).astype(np.int64), starts) if len(exits) else sizes
    return sizes, offloaded


def simulate_latency(costs: list[InferenceCosts], exits: list[np.ndarray], batch_size: int,
                     server_flops_per_s: float, server_slots: int, *, shortcut: bool = True
                     ) -> list[LatencyTotals]:
    """Simulate every client's closed inference loop at once; one exit mask per client.

    Device, transfer and server times per batch follow from the costs; the FIFO
    queue for the server's slots, shared by all clients, is simulated with the
    engine's :class:`~sflsim.engine.Server` in a fresh :class:`~sflsim.engine.Simulation`.
    With ``shortcut``, the simulation is skipped when the schedule without any
    queueing never has more server jobs at once than slots (then nobody queues and
    the simulation would reproduce that schedule); jobs that merely touch count as
    overlapping, so any doubt goes to the simulation.
    """
    totals: list[LatencyTotals] = []
    plans = []
    for c, mask in zip(costs, exits):
        sizes, off = _batches(mask, batch_size)
        device = c.device_batch_s(sizes)  # each batch's time, which its samples all wait
        up = np.where(off > 0, transfer_time_s(off * c.activation_bytes, c.uplink_bps,
                                               c.uplink_latency_s), 0.0)
        down = np.where(off > 0, transfer_time_s(off * PREDICTION_BYTES, c.downlink_bps,
                                                 c.downlink_latency_s), 0.0)
        serve = off * c.server_flops / server_flops_per_s
        totals.append(LatencyTotals(
            samples=int(sizes.sum()), device_s=float((sizes * device).sum()),
            transfer_s=float((off * (up + down)).sum()), server_queue_s=0.0,
            server_s=float((off * serve).sum()),
        ))
        plans.append((sizes, off, device, up, down))
    if shortcut and not _server_overloaded(plans, costs, server_flops_per_s, server_slots):
        return totals
    sim = Simulation()
    server = Server(sim, server_flops_per_s, server_slots)
    env = sim.env
    queue_s = [0.0] * len(costs)

    def client_loop(k: int):
        sizes, off, device, up, down = plans[k]
        pending = 0.0  # time until the next server request that needs no queue
        for b in range(len(sizes)):
            if off[b] == 0:
                pending += device[b]
                continue
            yield env.timeout(pending + device[b] + up[b])
            arrived = sim.now_s
            with server.request() as slot:
                yield slot
                queue_s[k] += int(off[b]) * (sim.now_s - arrived)
                yield from server.run("server_infer", k, int(off[b]) * costs[k].server_flops,
                                      arrived)
            pending = down[b]

    for k in range(len(costs)):  # started in client order: ties break by client id
        env.process(client_loop(k))
    env.run()
    for k, t in enumerate(totals):
        t.server_queue_s = queue_s[k]
    return totals


def _server_overloaded(plans: list, costs: list[InferenceCosts], server_flops_per_s: float,
                       slots: int) -> bool:
    """Whether the no-queue schedule ever has more than ``slots`` server jobs at once."""
    begins, ends = [], []
    for (_sizes, off, device, up, down), c in zip(plans, costs):
        serve = off * c.server_flops / server_flops_per_s
        took = device + np.where(off > 0, up + serve + down, 0.0)
        arrive = np.concatenate([[0.0], np.cumsum(took)[:-1]]) + device + up
        begins.append(arrive[off > 0])
        ends.append((arrive + serve)[off > 0])
    begin, end = np.concatenate(begins), np.concatenate(ends)
    if len(begin) <= slots:
        return False
    end = end + 1e-9 * (1.0 + np.abs(end))  # touching or nearly touching jobs overlap
    times = np.concatenate([begin, end])
    steps = np.concatenate([np.ones(len(begin)), -np.ones(len(end))])
    order = np.lexsort((-steps, times))  # at equal times, a start before an end
    return bool(np.cumsum(steps[order]).max() > slots)


Passes = dict[tuple[int, int, int], Inference]


def test_passes(algorithm: Algorithm, x: torch.Tensor, y: torch.Tensor, batch_size: int
                ) -> tuple[dict[int, tuple[float, float]], Passes]:
    """Every client's test pass (:func:`infer`) over uint8 test images ``x`` ``(N, C, H, W)``
    and labels ``y`` (normalised a batch at a time), once per distinct model triple, and the
    accuracies :meth:`Algorithm.evaluate` would give from the same forward passes:
    ``({client_id: (server_acc, client_acc)}, passes)``. The runner evaluates the last
    round with it, so the early-exit sweep costs no second pass over the test set.

    Raises:
        ValueError: the algorithm has no exit heads.
    """
    passes: Passes = {}
    accs = {}
    for c in algorithm.ctx.clients:
        m = exit_models(algorithm, c)
        if m is None:
            raise ValueError(f"{algorithm.scenario.algorithm.name} has no exit heads")
        key = tuple(map(id, m))  # clients that share all three models share the pass
        if key not in passes:
            passes[key] = infer(*m, algorithm.steps.test_batches(x, y, batch_size))
        run = passes[key]
        accs[c.client_id] = (int(run.server_correct.sum()) / len(y),
                             int(run.client_correct.sum()) / len(y))
    return accs, passes


def early_exit_table(algorithm: Algorithm, x: torch.Tensor, y: torch.Tensor,
                     batch_size: int, cfg: EarlyExitConfig, passes: Passes | None = None
                     ) -> pd.DataFrame:
    """Sweep the thresholds of ``cfg`` on uint8 test images ``x`` ``(N, C, H, W)``, labels ``y``.

    Args:
        passes: the test passes of :func:`test_passes` for the current models, if
            already made.

    Returns:
        One row per (threshold, end layer), columns :data:`COLUMNS`.

    Raises:
        ValueError: the algorithm has no exit heads.
    """
    clients = algorithm.ctx.clients
    if passes is None:
        passes = test_passes(algorithm, x, y, batch_size)[1]
    models = [exit_models(algorithm, c) for c in clients]
    runs = [passes[tuple(map(id, m))] for m in models]  # type: ignore[arg-type]
    costs = [inference_costs(algorithm, c, m) for c, m in zip(clients, models)]

    n_test = len(y)
    per_client = min(cfg.samples_per_client or n_test, n_test)
    seed = algorithm.scenario.stream_seeds.partition  # which test samples: the data stream
    picks = [np.random.default_rng([seed, c.client_id]).permutation(n_test)
             [:per_client] for c in clients]
    server = algorithm.ctx.server
    slots = server.resource.capacity
    taus = thresholds(cfg)
    exits = [run.confidence[None, :] > taus[:, None] for run in runs]  # (T, N) per client
    correct = [np.where(e, run.client_correct, run.server_correct) for e, run in zip(exits, runs)]

    cache: dict[bytes, list[LatencyTotals]] = {}
    rows = []
    layers = sorted({c.end_layer for c in clients})
    for t, tau in enumerate(taus):
        masks = [e[t][pick] for e, pick in zip(exits, picks)]
        key = b"".join(np.packbits(m).tobytes() for m in masks)
        if key not in cache:
            cache[key] = simulate_latency(costs, masks, cfg.batch_size, server.flops_per_s, slots)
        lat = cache[key]
        for layer in layers:
            group = [k for k, c in enumerate(clients) if c.end_layer == layer]
            samples = n_test * len(group)
            offloaded = sum(int((~exits[k][t]).sum()) for k in group)
            up = sum(int((~exits[k][t]).sum()) * costs[k].activation_bytes for k in group)
            down = offloaded * PREDICTION_BYTES
            n_lat = sum(lat[k].samples for k in group)
            rows.append({
                "threshold": float(tau), "entropy_threshold": float(-tau) + 0.0,
                "end_layer": layer, "clients": len(group), "samples": samples,
                # fractions as every result file writes them (10 decimals; not 1 - x)
                "accuracy": fraction(sum(int(correct[k][t].sum()) for k in group) / samples),
                "exit_ratio": fraction((samples - offloaded) / samples),
                "latency_samples": n_lat,
                "latency_s_mean": sum(lat[k].latency_s for k in group) / n_lat,
                "device_s_mean": sum(lat[k].device_s for k in group) / n_lat,
                "transfer_s_mean": sum(lat[k].transfer_s for k in group) / n_lat,
                "server_queue_s_mean": sum(lat[k].server_queue_s for k in group) / n_lat,
                "server_s_mean": sum(lat[k].server_s for k in group) / n_lat,
                "bytes_per_sample": (up + down) / samples,
                "bytes_up_per_sample": up / samples,
                "bytes_down_per_sample": down / samples,
            })
    return pd.DataFrame(rows, columns=COLUMNS)


def sweeps_early_exit(algorithm: Algorithm) -> bool:
    """Whether :func:`run_early_exit` will sweep thresholds (enabled, exit heads)."""
    return (algorithm.scenario.evaluation.early_exit.enabled
            and all(exit_models(algorithm, c) is not None for c in algorithm.ctx.clients))


def run_early_exit(algorithm: Algorithm, x: torch.Tensor, y: torch.Tensor,
                   passes: Passes | None = None) -> tuple[pd.DataFrame | None, str]:
    """The runner's hook after the last round: ``(table or None, note for summary.json)``;
    ``passes`` as in :func:`early_exit_table`."""
    scenario = algorithm.scenario
    cfg = scenario.evaluation.early_exit
    if not cfg.enabled:
        return None, "disabled (evaluation.early_exit.enabled: false)"
    if any(exit_models(algorithm, c) is None for c in algorithm.ctx.clients):
        return None, f"not applicable: {scenario.algorithm.name} has no exit heads"
    table = early_exit_table(algorithm, x, y, scenario.evaluation.batch_size, cfg, passes)
    layers = sorted(set(table.end_layer))
    return table, (f"early_exit.csv: {table.threshold.nunique()} thresholds x end layers "
                   f"{', '.join(map(str, layers))}")
