"""MU-SplitFed: SplitFed with unbalanced server updates and zeroth-order clients.

Paper: Liang, Zhang, Chen, Li, Li, Yang, "Towards Straggler-Resilient Split
Federated Learning: An Unbalanced Update Approach", NeurIPS 2025 (arXiv
2510.21155, https://arxiv.org/abs/2510.21155; OpenReview MOAmJKj2Uc). Its full
text was not at hand here, only its abstract: the split server performs ``tau``
local updates per client round (the "unbalanced update"), the algorithm works
"in zeroth-order optimization", and converges at ``O(sqrt(d / (tau T)))``. The
authors' code (github.com/Johnny-Zip/MU-SplitFed) could not be read here; its
README names a zeroth-order estimator from CeZO-FL, whose
``RandomGradientEstimator`` (github.com/ZidongLiu/DeComFL,
``cezo_fl/random_gradient_estimator.py``) was read, and so was a third-party
reimplementation by the HO-SFL authors (HKU-WILL-Lab/HO-SFL,
``HO_SFL_CV/src/runner/mu_splitfed_runner.py``). The rest is this module's
reading, written down below.

Per batch of a client (SplitFed V1 otherwise: per-client server-side copies,
all averaged with the client-side copies at round end):

1. **Client.** With ``client_gradient: zeroth_order`` (default) the client runs
   forward passes only: the activations ``h = f(x; w_c)`` and, for ``P =
   zo_perturbations`` Gaussian directions ``u_p ~ N(0, I)`` over its parameters
   (drawn from its own generator), the perturbed activations ``f(x; w_c + mu
   u_p)`` and ``f(x; w_c - mu u_p)`` (``zo_difference: central``) or only the
   ``+`` ones (``forward``); it sends them all up in one transfer (``1 + 2P`` or
   ``1 + P`` activation tensors). With ``first_order`` it is SplitFed's client
   (activations up, activation gradients down, backpropagation).
2. **Server feedback.** Zeroth order: the server evaluates the loss of its
   model on every perturbed activation (forward only, activity
   ``server_zo_losses``), and sends back ``P`` scalars, the differences
   ``L(w_c + mu u_p) - L(w_c - mu u_p)`` (central) or ``L(w_c + mu u_p) -
   L(w_c)`` (forward), 4 bytes each (activity ``send_losses``). The client
   forms the estimate ``g = (1/P) sum_p u_p (L+ - L-) / (2 mu)`` (central) or
   ``(1/P) sum_p u_p (L+ - L) / mu`` (forward), the estimator of CeZO-FL's
   ``RandomGradientEstimator``, and steps its optimizer with it as the gradient.
   First order: the activation gradients of the server's first step.
3. **Unbalanced update.** The server takes ``tau`` steps on each received batch
   ``(h, y)`` with its copy for that client. The feedback of step 2 is computed
   at the copy as the batch finds it and sent before the further steps, which
   then run while the client works (queued FIFO on that client's copy, so the
   client's next batch meets the copy after all ``tau`` steps). So the server
   makes ``tau`` times the progress per client round of SplitFed, and the
   client never waits for the extra steps.

With ``tau: 1`` and ``client_gradient: first_order`` every step is SplitFed
V1's, so the run equals ``splitfed_v1`` bit for bit (tested).

Readings and deviations:

* Server updates are first order (backpropagation). The paper's rate in the
  whole model's dimension ``d`` and the HO-SFL authors' reimplementation suggest
  zeroth-order server updates too; not implemented (a server accelerator has no
  memory reason to avoid backpropagation: the server is first order with
  ``tau`` steps, and ``client_gradient`` switches only the client's order).
* When the feedback is computed: here at the server copy before its ``tau``
  steps, sent at once. The HO-SFL reimplementation instead evaluates the
  client's losses after the ``tau`` steps (the client waits for them); not
  chosen because at ``tau = 1`` it would not reduce to SplitFed.
* Rounds: the paper's round (one client update, ``tau`` server updates, then
  aggregation) is one batch here; aggregation (sample-weighted FedAvg of client-
  and server-side copies, as SplitFed V1) happens once per sflsim round, after
  ``local_epochs`` passes. The reimplementation's global step size on the
  averaged update (``lr_g``) is 1 here. ``tau`` is fixed (the paper also tunes it
  adaptively against stragglers).
* Defaults: ``tau = 2`` (the reimplementation's default), ``P = 1``, ``mu =
  1e-3``, central differences and a learning rate of ``1e-4`` for the
  zeroth-order client (``zo_client_lr``): CeZO-FL's defaults (DeComFL's
  ``experiment_helper/cli_parser.py``: ``lr`` 1e-4, ``mu`` 1e-3, ``num_pert``
  1, central). The paper trains the client and the server at separate rates;
  the server copies keep ``training.optimizer.lr``, and the client uses
  ``training.optimizer``'s kind at ``zo_client_lr``, on the run's schedule
  scaled by ``zo_client_lr / training.optimizer.lr``.
* ``zo_client_lr: null`` gives the client the server's rate, the one reading
  of earlier sflsim releases. It is decisive: one Gaussian direction over the
  client's ``d`` parameters gives an estimate about ``sqrt(d)`` times as long
  as the gradient, so at a first-order rate each step moves the client's
  weights far along a random direction; the server copies follow each
  client's drifting features while training, but the averaged client-side
  model's features match none of them. On the FedSGA paper's CPU-scale
  protocol (ResNet-18 at width 0.125, SGD 0.1, 20 clients, IID, seed 2), test
  accuracy after 6 rounds: 18.2% at ``zo_client_lr: null`` (it stayed near
  chance every round while the training loss fell), 72.8% at ``1e-4`` and at
  ``1e-3``, 73.4% with ``client_gradient: first_order``.
* The perturbed forward passes (client and server) leave BatchNorm's running
  statistics as they were (saved and restored); the unperturbed client pass
  updates them as a first-order step's forward does.
* Costs: the client pays ``1 + 2P`` (or ``1 + P``) forward passes and no
  backward; the server pays a forward pass per perturbed activation plus ``tau``
  training steps. Drawing directions and forming the estimate are element-wise
  work, not counted (as optimizer updates are not: :mod:`sflsim.models.cost`).
* Losses: ``server_loss`` is the loss of the first of the ``tau`` steps on each
  batch (the loss at arrival, as SplitFed's); the further steps' losses are kept
  apart (``where = "server_extra"`` in :attr:`Algorithm.losses`).

``training.parallel_clients`` above 1 is refused: a client's steps wait for the
server's feedback, so they cannot be trained ahead of the simulated round.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Sequence

import numpy as np
import simpy
import torch
from torch import nn

from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.splitfed import SplitFed
from sflsim.engine import FifoResource, Process
from sflsim.execution.local_steps import make_optimizer
from sflsim.models.cost import PieceCost
from sflsim.work import BATCH, SERVER

#: bytes of one loss difference sent back to a client (fp32)
LOSS_WIRE_BYTES = 4


# ----- the zeroth-order estimator -------------------------------------------------------
def gaussian_directions(params: Sequence[torch.Tensor], count: int, generator: torch.Generator
                        ) -> list[list[torch.Tensor]]:
    """``count`` directions ``u_p ~ N(0, I)``, one tensor per parameter (its shape, dtype
    and device), drawn on the CPU from ``generator``."""
    return [[torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device) for p in params]
            for _ in range(count)]


def zo_points(count: int, mu: float, difference: str) -> list[tuple[int, float]]:
    """(direction, scale) of every perturbed point: ``+mu`` and ``-mu`` along each
    direction (``central``) or ``+mu`` only (``forward``)."""
    signs = (1.0, -1.0) if difference == "central" else (1.0,)
    return [(p, s * mu) for p in range(count) for s in signs]


def loss_differences(losses: Sequence[float], base: float | None, difference: str) -> list[float]:
    """Per direction ``L+ - L-`` (central: ``losses`` in :func:`zo_points` order) or
    ``L+ - base`` (forward)."""
    if difference == "central":
        return [losses[2 * p] - losses[2 * p + 1] for p in range(len(losses) // 2)]
    assert base is not None
    return [v - base for v in losses]


def zo_gradient(directions: list[list[torch.Tensor]], differences: Sequence[float], mu: float,
                difference: str) -> list[torch.Tensor]:
    """The estimate ``(1/P) sum_p u_p * diff_p / (2 mu)`` (central) or ``/ mu`` (forward),
    one tensor per parameter."""
    step = 2 * mu if difference == "central" else mu
    grads = [torch.zeros_like(u) for u in directions[0]]
    for direction, diff in zip(directions, differences):
        for g, u in zip(grads, direction):
            g.add_(u, alpha=diff / step / len(directions))
    return grads


@contextlib.contextmanager
def perturbed(params: Sequence[torch.Tensor], direction: Sequence[torch.Tensor], scale: float
              ) -> Iterator[None]:
    """``params`` moved by ``scale * direction`` in the block, exactly restored after."""
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, u in zip(params, direction):
            p.add_(u, alpha=scale)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)


@contextlib.contextmanager
def kept_buffers(module: nn.Module) -> Iterator[None]:
    """``module``'s buffers (BatchNorm running statistics) restored on leaving the block."""
    saved = [b.detach().clone() for b in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, s in zip(module.buffers(), saved):
                b.copy_(s)


@torch.no_grad()
def zo_estimate(params: Sequence[torch.Tensor], loss: Callable[[], torch.Tensor], *, mu: float,
                count: int, generator: torch.Generator, difference: str = "central"
                ) -> list[torch.Tensor]:
    """The zeroth-order estimate of ``loss``'s gradient w.r.t. ``params`` (the module
    docstring's estimator in one place, as MU-SplitFed's client and server compute it
    between them)."""
    directions = gaussian_directions(params, count, generator)
    base = float(loss()) if difference == "forward" else None
    values = []
    for p, scale in zo_points(count, mu, difference):
        with perturbed(params, directions[p], scale):
            values.append(float(loss()))
    return zo_gradient(directions, loss_differences(values, base, difference), mu, difference)


# ----- the algorithm --------------------------------------------------------------------
@register_algorithm("mu_splitfed")
class MUSplitFed(SplitFed):
    """MU-SplitFed: ``tau`` server steps per batch, zeroth-order clients (module docstring)."""

    shared_server = False  # SplitFed V1: one server-side copy per client

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.cfg = ctx.scenario.algorithm
        self.tau = self.cfg.tau
        #: server-side training steps per activation upload (see tests/test_delivered_data)
        self.server_steps_per_upload = self.tau
        self.zeroth_order = self.cfg.client_gradient == "zeroth_order"
        seed = ctx.seeds.get("split", 0)
        #: per client, the generator of its perturbation directions
        self.zo_generators = {
            c.client_id: torch.Generator().manual_seed(int(np.random.SeedSequence(
                seed, spawn_key=(3, c.client_id)).generate_state(1)[0]))
            for c in ctx.clients}
        self.pending: list[simpy.Process] = []

    def client_optimizer(self, params, round_: int) -> torch.optim.Optimizer:
        """A zeroth-order client's optimizer at ``zo_client_lr``, on the run's schedule
        scaled by ``zo_client_lr / training.optimizer.lr``; SplitFed's otherwise."""
        lr = self.cfg.zo_client_lr
        if not self.zeroth_order or lr is None:
            return super().client_optimizer(params, round_)
        training = self.scenario.training
        return make_optimizer(params, training.optimizer,
                              self.lr_for_round(round_) * lr / training.optimizer.lr)

    def work_per_round(self) -> dict[str, float]:
        """``tau`` server steps per training batch."""
        batches = self.batches_per_round()
        return {BATCH: batches, SERVER: batches * self.tau}

    def train_round(self, round_: int) -> Process:
        self.pending = []
        yield from super().train_round(round_)
        if self.pending:  # the server's last further steps
            yield self.sim.env.all_of(self.pending)

    def end_round(self, round_: int) -> None:
        super().end_round(round_)
        self.pending = []

    def server_updates(self, client: Client, server: nn.Module, optimizer: torch.optim.Optimizer,
                       lock: FifoResource, h: torch.Tensor, y: torch.Tensor, first: int) -> Process:
        """Server steps ``first + 1 .. tau`` (1-based) on the received batch ``(h, y)``."""
        for k in range(first, self.tau):
            yield from self.steps.server_step(client, server, optimizer, h, y, lock,
                                        "server_train" if k == 0 else "server_extra_train")
            if k > 0 and not self.ctx.timing_only:
                # the step recorded it as "server": keep the loss at arrival apart
                _, cid, loss, n = self.steps.losses[-1]
                self.steps.losses[-1] = ("server_extra", cid, loss, n)

    def serve(self, client: Client, server: nn.Module, server_optimizer: torch.optim.Optimizer,
              h: torch.Tensor, y: torch.Tensor, lock: FifoResource, *,
              objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
              ) -> Generator[simpy.Event, object, torch.Tensor | None]:
        """First-order clients: SplitFed's server step, then the further steps in the
        background."""
        grad = yield from super().serve(client, server, server_optimizer, h, y, lock,
                                        objective=objective)
        if self.tau > 1:
            self.pending.append(self.protocol.spawn_server(
                self.server_updates(client, server, server_optimizer, lock, h, y, first=1)))
        return grad

    def split_step(self, client: Client, idx: torch.Tensor, body: nn.Module,
                   optimizer: torch.optim.Optimizer, cost: PieceCost, server: nn.Module,
                   server_optimizer: torch.optim.Optimizer, lock: FifoResource, *,
                   objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                   after_server: Callable[[], None] | None = None) -> Process:
        """SplitFed's step (first-order clients) or :meth:`zo_split_step`."""
        if not self.zeroth_order:
            yield from super().split_step(client, idx, body, optimizer, cost, server,
                                          server_optimizer, lock, objective=objective,
                                          after_server=after_server)
            return
        yield from self.zo_split_step(client, idx, body, optimizer, cost, server,
                                      server_optimizer, lock)

    def zo_split_step(self, client: Client, idx: torch.Tensor, body: nn.Module,
                      optimizer: torch.optim.Optimizer, cost: PieceCost, server: nn.Module,
                      server_optimizer: torch.optim.Optimizer, lock: FifoResource) -> Process:
        """One client step with a zeroth-order estimate (module docstring, steps 1-3)."""
        cid, n, cut = client.client_id, len(idx), self.cost_model.cut_layers[client.client_id]
        mu, count, difference = self.cfg.zo_smoothing, self.cfg.zo_perturbations, self.cfg.zo_difference
        points = zo_points(count, mu, difference)
        passes = 1 + len(points)
        seconds = self.cost_model.compute_seconds(client, cut, n, ("forward",))
        yield from self.sim.compute(client.actor, "client_forward", cid,
                                    cost.forward_flops * n * passes, client.flops_per_s,
                                    seconds=None if seconds is None else seconds * passes)
        timing = self.ctx.timing_only
        if timing:  # shapes only: no direction is drawn, no pass runs
            h, y = self.cost_model.meta_tensor((n, *cost.output_shape)), None
            outputs = [h] * len(points)
        else:
            x, y = self.steps.train_batch(idx, cid)
            params = [p for p in body.parameters() if p.requires_grad]
            directions = gaussian_directions(params, count, self.zo_generators[cid])
            with torch.no_grad():
                h = body(x)  # (B, ...) activations for the server's updates
                with kept_buffers(body):
                    outputs = []
                    for p, scale in points:
                        with perturbed(params, directions[p], scale):
                            outputs.append(body(x))
        yield from client.uplink.transfer("send_activations", cid,
                                          self.cost_model.payload_bytes(tuple(h.shape[1:]), n) * passes)
        differences = yield from self.server_losses(client, server, lock, h, outputs, y)
        self.pending.append(self.protocol.spawn_server(
            self.server_updates(client, server, server_optimizer, lock, h, y, first=0)))
        yield from client.downlink.transfer("send_losses", cid, LOSS_WIRE_BYTES * count)
        seconds = self.cost_model.compute_seconds(client, cut, n, ("update",))
        if seconds:
            yield from self.sim.compute(client.actor, "client_update", cid, 0.0,
                                        client.flops_per_s, seconds=seconds)
        if not timing:
            optimizer.zero_grad(set_to_none=True)
            for p, g in zip(params, zo_gradient(directions, differences, mu, difference)):
                p.grad = g
            optimizer.step()
        self.ctx.on_batch()

    def server_losses(self, client: Client, server: nn.Module, lock: FifoResource,
                      h: torch.Tensor, outputs: list[torch.Tensor], y: torch.Tensor
                      ) -> Process:
        """Queue for the client's server copy and a slot, run it forward on the perturbed
        activations (``outputs``, each ``(B, ...)``; forward differences also on ``h``),
        and return the loss differences (one per direction; None in timing-only runs)."""
        cid, cut = client.client_id, self.cost_model.cut_layers[client.client_id]
        forward = self.cfg.zo_difference == "forward"
        rows = len(h) * (len(outputs) + forward)
        cost = self.ctx.costs.cost(f"server:l{cut}", server, tuple(h.shape[1:]), backward=False)
        yield from self.steps.run_on_server("server_zo_losses", cid, cost.infer_flops(rows), lock)
        if self.ctx.timing_only:
            return None
        with torch.no_grad(), kept_buffers(server):
            losses = [float(self.steps.loss_fn(server(o), y)) for o in outputs]
            base = float(self.steps.loss_fn(server(h), y)) if forward else None
        return loss_differences(losses, base, self.cfg.zo_difference)
