"""The cost model by operation in a run (``hardware.cost_model: operators``).

:class:`StageOperators` counts the operators of each stage of the run's backbone and
of each exit head once (:func:`sflsim.models.ops.count_ops`) and prices them on a
device (:mod:`sflsim.hardware.operator_cost`): the seconds a client's forward,
backward, optimizer update and exit head take, stage by stage, as a measured
``stage_latency`` table would give them. :func:`operator_rate` is the
FLOP/s at which the FLOPs of a whole-model training step take as long as the cost model
says: the rate of the steps an algorithm prices by FLOPs alone (FedAvg's whole-model
steps, FedSGA's probes, MultiSFL's assistants).
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from sflsim.hardware.operator_cost import (
    OperatorParams,
    Workload,
    counted_flops,
    effective_flops_per_s,
    optimizer_kind,
    pass_seconds,
    update_seconds,
)
from sflsim.hardware.profiles import SourcedFlops
from sflsim.models import StagedBackbone
from sflsim.models.ops import PieceOps, count_ops


class StageOperators:
    """The operators of a backbone's stages and exit heads, priced per device.

    Args:
        backbone: the run's backbone (its stages are counted, never run).
        optimizer: ``training.optimizer.name`` ("sgd" or "adam").
        momentum: ``training.optimizer.momentum``.
    """

    def __init__(self, backbone: StagedBackbone, optimizer: str, momentum: float = 0.0) -> None:
        self.backbone = backbone
        self.optimizer = optimizer_kind(optimizer, momentum)
        self._stages: list[PieceOps] = []
        self._heads: dict[int, PieceOps] = {}
        #: (id of the device's operator_costs, end layer, batch, directions) -> seconds
        self._seconds: dict[tuple, float] = {}
        self._params: dict[int, tuple[object, OperatorParams]] = {}

    def stage(self, k: int) -> PieceOps:
        """The operators of stage ``k`` (1-based) at its input in the backbone."""
        while len(self._stages) < k:
            j = len(self._stages)  # 0-based stage to count next
            shape = (self.backbone.input_shape if j == 0
                     else self._stages[j - 1].output_shape)
            # stage 1's input (the images) needs no gradient; later stages' inputs do
            self._stages.append(count_ops(self.backbone.stages[j], tuple(shape),
                                          input_requires_grad=j > 0))
        return self._stages[k - 1]

    def head(self, end_layer: int) -> PieceOps:
        """The operators of the exit head after ``end_layer``."""
        ops = self._heads.get(end_layer)
        if ops is None:
            head: nn.Module = self.backbone.exit_head(end_layer)
            ops = self._heads[end_layer] = count_ops(
                head, tuple(self.stage(end_layer).output_shape), input_requires_grad=True)
        return ops

    def device_seconds(self, costs, end_layer: int, batch: int,
                       directions: tuple[str, ...]) -> float:
        """:meth:`seconds` for a device's ``operator_costs`` (a profile's
        :class:`~sflsim.hardware.profiles.OperatorCosts`), computed once per (device
        kind, end layer, batch, directions)."""
        key = (id(costs), end_layer, batch, tuple(directions))
        t = self._seconds.get(key)
        if t is None:
            t = self._seconds[key] = self.seconds(self._device_params(costs), end_layer, batch,
                                                  directions)
        return t

    def device_inference_seconds(self, costs, end_layer: int, batch: int) -> float:
        """Seconds of an inference batch of ``batch`` samples through stages
        ``1..end_layer`` and the exit head after it (forward only, with the per-batch
        cost; the training forward's operators) on a device with ``costs``."""
        key = (id(costs), end_layer, batch, "inference")
        t = self._seconds.get(key)
        if t is None:
            params = self._device_params(costs)
            t = self._seconds[key] = (self.seconds(params, end_layer, batch, ("forward",))
                                      + pass_seconds(params, self.head(end_layer).forward, batch))
        return t

    def _device_params(self, costs) -> OperatorParams:
        held = self._params.get(id(costs))
        if held is None:  # the profile is kept with its parameters: its id stays its own
            held = self._params[id(costs)] = (costs, costs.params())
        return held[1]

    def seconds(self, params: OperatorParams, end_layer: int, batch: int,
                directions: tuple[str, ...]) -> float:
        """Seconds of stages ``1..end_layer`` on a device with ``params`` for a batch of
        ``batch``, summed over ``directions``: "forward" (with the device's per-batch
        cost: a client step starts at stage 1), "backward", "update" (the optimizer
        update of the stages' parameters) and "exit_head" (the exit head after
        ``end_layer``: forward, backward, update)."""
        stages = [self.stage(k) for k in range(1, end_layer + 1)]
        total = 0.0
        for direction in directions:
            if direction == "forward":
                total += params.per_batch_s + sum(pass_seconds(params, s.forward, batch)
                                                  for s in stages)
            elif direction == "backward":
                total += sum(pass_seconds(params, s.backward, batch) for s in stages)
            elif direction == "update":
                total += update_seconds(params, sum(s.params for s in stages),
                                        sum(s.param_tensors for s in stages), self.optimizer)
            elif direction == "exit_head":
                h = self.head(end_layer)
                total += (pass_seconds(params, h.forward, batch)
                          + pass_seconds(params, h.backward, batch)
                          + update_seconds(params, h.params, h.param_tensors, self.optimizer))
            else:
                raise ValueError(f"unknown direction {direction!r}; valid: forward, backward, "
                                 f"update, exit_head")
        return total

    def whole_model(self, batch: int) -> tuple[Workload, float]:
        """A whole-model training step at ``batch`` as a workload, and its counted FLOPs
        (the FLOP counter's: convolutions and matrix multiplies, forward and backward)."""
        whole = count_ops(nn.Sequential(*self.backbone.stages, self.backbone.head),
                          tuple(self.backbone.input_shape))
        work = Workload(forward=whole.forward, backward=whole.backward,
                        trained_params=whole.params, param_tensors=whole.param_tensors,
                        batch=batch, optimizer=self.optimizer)
        return work, counted_flops(work)


def operator_rate(costs, operators: StageOperators, batch: int) -> SourcedFlops:
    """The cost model's FLOP/s on a device with ``costs`` (its profile's
    ``operator_costs``): the counted FLOPs of a whole-model training step of ``batch``
    samples over the step's predicted seconds."""
    work, flops = operators.whole_model(batch)
    return SourcedFlops(
        value=effective_flops_per_s(costs.params(), work, flops), basis="derived",
        source=f"cost model by operation: a whole {operators.backbone.name} training step at "
               f"batch {batch}, counted FLOPs / predicted seconds")


def with_rate(device, rate: SourcedFlops):
    """``device`` (a profile, or a fleet row's device) with ``sustained_flops = rate``."""
    if hasattr(device, "model_copy"):  # a DeviceProfile
        return device.model_copy(update={"sustained_flops": rate})
    return replace(device, sustained_flops=rate)  # a fleet row's FleetDevice
