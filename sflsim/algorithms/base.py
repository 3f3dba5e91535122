"""What every algorithm shares: clients, the round loop's hooks, training steps with costs.

An algorithm fills in :meth:`Algorithm.train_round` (a SimPy process for one
round), optionally :meth:`Algorithm.end_round` (aggregation) and
:meth:`Algorithm.server_model_for` (for evaluation). The runner
(:mod:`sflsim.runner`) owns the loop over rounds.

The main invariant (DESIGN.md §1): every real torch step is paired with its
simulated cost in one place, :meth:`Algorithm.client_step` and
:meth:`Algorithm.server_step`, and runs at the simulated instant its work
completes.

Batches: each local epoch a client shuffles its sample indices with its own
generator and cuts them into batches of ``batch_size``; the last, shorter batch
is kept. A client with fewer samples than the batch size therefore trains on
one short batch per epoch (the partitioner guarantees at least one sample).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import simpy
import torch
from torch import nn

from sflsim.config.schema import WIRE_BYTES, OptimizerConfig, Scenario
from sflsim.data.datasets import DatasetSplit
from sflsim.engine import Link, Process, Server, Simulation
from sflsim.hardware.profiles import DeviceProfile
from sflsim.models import StagedBackbone
from sflsim.models.cost import CostTable, PieceCost

A = TypeVar("A", bound=type)
ALGORITHMS: dict[str, type[Algorithm]] = {}


def register_algorithm(name: str) -> Callable[[A], A]:
    """Register an :class:`Algorithm` subclass under ``name``; duplicates raise."""

    def wrap(cls: A) -> A:
        if name in ALGORITHMS:
            raise ValueError(f"algorithm {name!r} is already registered")
        ALGORITHMS[name] = cls  # type: ignore[assignment]
        return cls

    return wrap


@dataclass
class Client:
    """One simulated device with its data, client-side model and exit head.

    Attributes:
        client_id: 0-based id; ties in simulated time break by it.
        group: the scenario's device-group name.
        end_layer: cut layer; the client-side model holds stages 1..end_layer.
        device: hardware profile (throughput in FLOP/s, power in W).
        uplink, downlink: the device's link, one :class:`Link` per direction.
        indices: indices of the client's training samples, shape ``(n,)``.
        model: client-side model ``(B, C, H, W) -> activations``.
        exit_head: ``activations -> (B, classes)`` logits.
        optimizer: optimizer of ``model`` and ``exit_head``.
        generator: the client's batch-shuffling generator.
    """

    client_id: int
    group: str
    end_layer: int
    device: DeviceProfile
    uplink: Link
    downlink: Link
    indices: np.ndarray
    model: nn.Sequential
    exit_head: nn.Module
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None

    @property
    def actor(self) -> str:
        return f"client{self.client_id}"

    @property
    def flops_per_s(self) -> float:
        return self.device.sustained_flops.value


@dataclass
class RunContext:
    """Everything an algorithm needs, built once by the runner."""

    scenario: Scenario
    data: DatasetSplit
    backbone: StagedBackbone
    sim: Simulation
    server: Server
    clients: list[Client]
    costs: CostTable = field(default_factory=CostTable)
    #: independent child seeds of the scenario seed, by use (see sflsim.runner)
    seeds: dict[str, int] = field(default_factory=dict)
    on_batch: Callable[[], None] = lambda: None


def make_optimizer(params: Iterator[nn.Parameter] | list, cfg: OptimizerConfig,
                   lr: float) -> torch.optim.Optimizer:
    """Adam or SGD as configured, at learning rate ``lr``."""
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def make_scheduler(optimizer: torch.optim.Optimizer, scenario: Scenario
                   ) -> torch.optim.lr_scheduler.LRScheduler | None:
    """Cosine annealing over the run's rounds (stepped once per round), or none."""
    sched = scenario.training.schedule
    if sched.name == "constant":
        return None
    return torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=scenario.training.rounds, eta_min=sched.min_lr
    )


class Algorithm:
    """Base class: per-round SimPy processes that call the engine for time and torch for learning."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.sim = ctx.sim
        self.scenario = ctx.scenario
        self.loss_fn = nn.CrossEntropyLoss()
        self.wire_bytes = WIRE_BYTES[ctx.scenario.wire_dtype]
        #: (round, client_id, sim_time_s) of every server-side torch step, in order.
        self.server_steps: list[tuple[int, int, float]] = []
        #: (where, client_id, mean training loss of the batch, batch size), where is
        #: "client" (exit-head loss) or "server"; the runner summarises it per round.
        self.losses: list[tuple[str, int, float, int]] = []
        self.schedulers = [c.scheduler for c in ctx.clients if c.scheduler is not None]
        #: cut layer of each client in the current round (adaptive-split algorithms update it)
        self.cuts: dict[int, int] = {c.client_id: c.end_layer for c in ctx.clients}

    # ----- hooks -----------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        """The SimPy process of one round; returns when the round's work is done."""
        raise NotImplementedError

    def end_round(self, round_: int) -> None:
        """Work after the round's process (aggregation); default none."""

    def server_model_for(self, client: Client) -> nn.Module:
        """The server-side model that serves ``client``'s activations."""
        raise NotImplementedError

    def exit_models(self, client: Client) -> tuple[nn.Module, nn.Module, nn.Module] | None:
        """(client-side model, exit head, server-side model) for early-exit inference
        (Hetero-SplitEE Alg. 3), or None when the algorithm trains no exit heads."""
        return None

    def activated_params(self, client_id: int) -> int:
        """Client-side parameters the client trains this round (FedSGA Table 5's
        "activated parameters"); here the client-side model and exit head."""
        c = self.ctx.clients[client_id]
        return sum(p.numel() for m in (c.model, c.exit_head) for p in m.parameters())

    def batches_per_round(self) -> int:
        """Training batches in one round (for progress bars)."""
        bs = self.scenario.training.batch_size
        n = sum(math.ceil(len(c.indices) / bs) for c in self.ctx.clients)
        return n * self.scenario.training.local_epochs

    # ----- shared pieces ----------------------------------------------------------
    def batches(self, client: Client) -> Iterator[torch.Tensor]:
        """Index batches of one local epoch (short last batch kept)."""
        order = torch.randperm(len(client.indices), generator=client.generator)
        idx = torch.as_tensor(client.indices)[order]
        yield from torch.split(idx, self.scenario.training.batch_size)

    def client_cost(self, client: Client) -> PieceCost:
        """Per-sample cost of the client-side model plus exit head (forward + backward)."""
        piece = nn.Sequential(client.model, client.exit_head)
        return self.ctx.costs.cost(f"client:l{client.end_layer}", piece,
                                   self.ctx.backbone.input_shape)

    def activation_shape(self, client: Client) -> tuple[int, ...]:
        return self.ctx.costs.cost(f"client_body:l{client.end_layer}", client.model,
                                   self.ctx.backbone.input_shape, backward=False).output_shape

    def payload_bytes(self, shape: tuple[int, ...], batch: int) -> int:
        """Bytes of ``batch`` activations of per-sample ``shape`` in the wire dtype."""
        return int(np.prod(shape)) * batch * self.wire_bytes

    def client_step(self, client: Client, idx: torch.Tensor
                    ) -> Generator[simpy.Event, object, torch.Tensor]:
        """Simulate and run one client-side step on the local (exit-head) loss.

        The device is busy for the step's FLOPs over its sustained FLOP/s; then
        the real step runs. Use as ``h = yield from self.client_step(...)``.

        Returns:
            The detached activations ``(B, C, H, W)`` to send to the server.
        """
        n = len(idx)
        flops = self.client_cost(client).train_flops(n)
        yield from self.sim.compute(client.actor, "client_train", client.client_id, flops,
                                    client.flops_per_s)
        x, y = self.ctx.data.x_train[idx], self.ctx.data.y_train[idx]
        h = client.model(x)
        loss = self.loss_fn(client.exit_head(h), y)
        client.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        client.optimizer.step()
        self.losses.append(("client", client.client_id, loss.item(), n))
        self.ctx.on_batch()
        return h.detach()

    def server_step(self, client: Client, model: nn.Module, optimizer: torch.optim.Optimizer,
                    h: torch.Tensor, y: torch.Tensor, lock: simpy.Resource,
                    activity: str = "server_train", *, input_grad: bool = False,
                    objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                    ) -> Generator[simpy.Event, object, torch.Tensor | None]:
        """Queue for ``model`` and a server slot, simulate, then run one server step.

        Args:
            h: activations ``(B, ...)`` as received.
            y: labels ``(B,)``.
            lock: the model's own resource; one step at a time per model, FIFO.
            input_grad: also compute (and pay for) the gradient w.r.t. ``h``.
            objective: ``(h, y) -> loss`` to minimise instead of cross-entropy of
                ``model(h)``; it must run ``model`` on ``h`` (its cost is what is paid).

        Returns:
            The activation gradients ``(B, ...)`` when ``input_grad``, else None.
        """
        arrived = self.sim.now_s
        with lock.request() as model_req:
            yield model_req
            with self.ctx.server.request(client.client_id) as slot:
                yield slot
                flops = self.ctx.costs.cost(
                    f"server:l{self.cut_of(client)}",
                    model, tuple(h.shape[1:]), input_requires_grad=input_grad,
                ).train_flops(len(h))
                yield from self.ctx.server.run(activity, client.client_id, flops, arrived)
                h = h.detach().requires_grad_(input_grad)
                loss = objective(h, y) if objective else self.loss_fn(model(h), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                self.losses.append(("server", client.client_id, loss.item(), len(h)))
                self.server_steps.append((self.sim.round, client.client_id, self.sim.now_s))
        return h.grad if input_grad else None

    def cut_of(self, client: Client) -> int:
        """The client's cut layer this round (static algorithms: its group's end layer)."""
        return self.cuts.get(client.client_id, client.end_layer)

    def step_schedulers(self) -> None:
        for sched in self.schedulers:
            sched.step()

    # ----- evaluation -------------------------------------------------------------
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Test accuracy of every client: ``{client_id: (server_acc, client_acc)}`` in [0, 1].

        Args:
            x: test images ``(N, C, H, W)``; y: labels ``(N,)``.
        """
        return {
            c.client_id: accuracy(c.model, c.exit_head, self.server_model_for(c), x, y, batch_size)
            for c in self.ctx.clients
        }

    def run_clients(self, body: Callable[[Client], Process]) -> Process:
        """Start ``body(client)`` for every client (in id order) and wait for all."""
        env = self.sim.env
        procs = [env.process(body(c)) for c in self.ctx.clients]
        yield env.all_of(procs)


@torch.inference_mode()
def accuracy(body: nn.Module, exit_head: nn.Module, server: nn.Module, x: torch.Tensor,
             y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """(server-side, exit-head) accuracy in [0, 1] of a split model on ``x`` ``(N, C, H, W)``."""
    modules = (body, exit_head, server)
    for m in modules:
        m.eval()
    server_ok = client_ok = 0
    for xb, yb in zip(torch.split(x, batch_size), torch.split(y, batch_size)):
        h = body(xb)
        client_ok += int((exit_head(h).argmax(1) == yb).sum())
        server_ok += int((server(h).argmax(1) == yb).sum())
    for m in modules:
        m.train()
    return server_ok / len(y), client_ok / len(y)
