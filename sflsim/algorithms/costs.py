"""The cost model: what a training step costs in FLOPs, seconds and bytes.

A client-side step costs the FLOPs of the client-side model and exit head (forward
and backward, :class:`~sflsim.models.cost.CostTable`) over the device's sustained
FLOP/s this round, or the time of the device's measured per-stage latency table
(:mod:`sflsim.hardware.latency`) where its profile has one; a server-side step costs
the FLOPs of the server-side model at the client's cut layer; activations on the wire
cost their elements times the wire dtype's bytes. Also the parameters a client trains
(FedSGA Table 5's "activated parameters").

Timing-only runs (``training.timing_only``) pass shapes instead of activations:
tensors on torch's ``meta`` device (:meth:`CostModel.meta_tensor`).

:class:`CostModel` is one part of :class:`~sflsim.algorithms.base.Algorithm` (its
``cost_model``).
"""

from __future__ import annotations

import math
import weakref

import torch
from torch import nn

from sflsim.algorithms.context import Client, RunContext
from sflsim.config.schema import WIRE_BYTES
from sflsim.hardware.latency import stage_time_s
from sflsim.models.cost import PieceCost

#: what a client-side step on the local loss runs (:meth:`CostModel.compute_seconds`)
CLIENT_STEP = ("forward", "backward", "update", "exit_head")


class CostModel:
    """Simulated costs of the algorithm's steps, each computed once per shape and cached.

    Given the run context (its clients, ``costs``, ``backbone.input_shape``, the
    scenario's model and wire dtype); owns the per-step costs (:meth:`client_cost`,
    :meth:`client_step_cost`, :meth:`server_step_flops`, :meth:`compute_seconds`),
    activation shapes and sizes (:meth:`activation_shape`, :meth:`payload_bytes`,
    :meth:`meta_tensor`), their caches, and each client's cut layer this round
    (:attr:`cut_layers`, :meth:`cut_layer_of`).

    Attributes:
        cut_layers: ``{client_id: cut layer}`` this round (adaptive-split algorithms update it;
            static ones keep each client's end layer).
        wire_bytes: bytes per activation element on the wire (``wire_dtype``).
    """

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.wire_bytes = WIRE_BYTES[ctx.scenario.wire_dtype]
        self.cut_layers: dict[int, int] = {c.client_id: c.end_layer for c in ctx.clients}
        #: per end layer: client-side step cost, activation shape (looked up per batch)
        self._client_costs: dict[int, PieceCost] = {}
        self._activation_shapes: dict[int, tuple[int, ...]] = {}
        #: (cut layer, activation shape, input gradient?) -> server-side step cost
        self._server_costs: dict[tuple, PieceCost] = {}
        self._meta: dict[tuple[int, ...], torch.Tensor] = {}

    def cut_layer_of(self, client: Client) -> int:
        """The client's cut layer this round (static algorithms: its group's end layer)."""
        return self.cut_layers.get(client.client_id, client.end_layer)

    def client_cost(self, client: Client) -> PieceCost:
        """Per-sample cost of the client-side model plus exit head (forward + backward)."""
        cost = self._client_costs.get(client.end_layer)
        if cost is None:
            cost = self._client_costs[client.end_layer] = self.ctx.costs.cost(
                f"client:l{client.end_layer}", nn.Sequential(client.model, client.exit_head),
                self.ctx.backbone.input_shape)
        return cost

    def activation_shape(self, client: Client) -> tuple[int, ...]:
        """Per-sample shape of the client-side model's output (cached per end layer)."""
        shape = self._activation_shapes.get(client.end_layer)
        if shape is None:
            shape = self._activation_shapes[client.end_layer] = self.ctx.costs.cost(
                f"client_body:l{client.end_layer}", client.model, self.ctx.backbone.input_shape,
                backward=False).output_shape
        return shape

    def meta_tensor(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A float32 tensor of ``shape`` on torch's ``meta`` device (a shape, no memory),
        one per shape: what timing-only runs pass where a trained run passes activations
        or their gradients (only ``len`` and ``.shape`` are read)."""
        t = self._meta.get(shape)
        if t is None:
            t = self._meta[shape] = torch.empty(shape, device="meta")
        return t

    def payload_bytes(self, shape: tuple[int, ...], batch: int) -> int:
        """Bytes of ``batch`` activations of per-sample ``shape`` in the wire dtype."""
        return math.prod(shape) * batch * self.wire_bytes

    def compute_seconds(self, client: Client, end_layer: int, batch: int,
                        directions: tuple[str, ...]) -> float | None:
        """Seconds of stages ``1..end_layer`` on ``client``'s device, summed over
        ``directions`` ("forward", "backward", "update" = optimizer, "exit_head" = the
        exit head after ``end_layer``) and scaled by the client's slowdown: from its
        measured per-stage latency table (:mod:`sflsim.hardware.latency`), else, under
        ``hardware.cost_model: operators``, from the cost model by operation
        (:mod:`sflsim.algorithms.operator_times`) where the profile has
        ``operator_costs``; ``None`` otherwise (the caller then uses the FLOPs rule)."""
        total = self._table_seconds(client, end_layer, batch, directions)
        if total is None:
            costs = getattr(client.device, "operator_costs", None)
            if costs is None or self.ctx.operators is None:
                return None
            total = self.ctx.operators.device_seconds(costs, end_layer, batch, directions)
        return total * getattr(client, "slowdown", 1.0)

    def _table_seconds(self, client: Client, end_layer: int, batch: int,
                       directions: tuple[str, ...]) -> float | None:
        """:meth:`compute_seconds` from the profile's measured latency table, unscaled;
        ``None`` when it has none for this model, width and input."""
        if not client.device.stage_latency:
            return None
        m = self.ctx.scenario.model
        total = 0.0
        for direction in directions:
            stages = [end_layer] if direction == "exit_head" else range(1, end_layer + 1)
            t = stage_time_s(client.device, m.name, m.width, self.ctx.backbone.input_shape,
                             stages, batch, direction)  # type: ignore[arg-type]
            if t is None:
                return None
            total += t
        return total

    def client_step_cost(self, client: Client, batch: int) -> tuple[float, float]:
        """(FLOPs, seconds) of one client-side step of ``batch`` samples on the local
        (exit-head) loss: the per-stage latency table's time when the profile has one,
        else FLOPs over the device's sustained FLOP/s this round."""
        flops = self.client_cost(client).train_flops(batch)
        seconds = self.compute_seconds(client, client.end_layer, batch, CLIENT_STEP)
        return flops, flops / client.flops_per_s if seconds is None else seconds

    def server_step_flops(self, client: Client, model: nn.Module, h: torch.Tensor,
                          input_grad: bool = False) -> float:
        """FLOPs of one server-side step of ``model`` on activations ``h`` ``(B, ...)``
        (with the gradient w.r.t. ``h`` when ``input_grad``)."""
        key = (self.cut_layer_of(client), h.shape[1:], input_grad)
        cost = self._server_costs.get(key)
        if cost is None:
            cost = self._server_costs[key] = self.ctx.costs.cost(
                f"server:l{key[0]}", model, tuple(key[1]), input_requires_grad=input_grad)
        return cost.train_flops(len(h))


_PARAM_COUNTS: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


def param_count(module: nn.Module) -> int:
    """Parameters of ``module`` (cached: architectures do not change during a run)."""
    count = _PARAM_COUNTS.get(module)
    if count is None:
        count = _PARAM_COUNTS[module] = sum(p.numel() for p in module.parameters())
    return count
