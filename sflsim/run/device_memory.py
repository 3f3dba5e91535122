"""The refusal of a device whose client-side model cannot train in its memory, for each
device group or fleet row, before anything is built per client."""

from __future__ import annotations

import numpy as np
from torch import nn

from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.hardware import profiles
from sflsim.hardware.profiles import DeviceProfile
from sflsim.models import StagedBackbone
from sflsim.text import plural


def check_devices(scenario: Scenario, backbone: StagedBackbone) -> None:
    """Refuse a device group whose client-side model cannot train in its device's memory
    (:func:`check_memory` for each group), before anything is built per client and
    before the host's memory is checked.

    Raises:
        ConfigError: the first group that does not fit.
    """
    if scenario.fleet is not None:
        check_fleet_memory(scenario, backbone)
    for group_name, group in scenario.devices.items():
        end = min(group.end_layer, backbone.num_stages - 1)
        # the backbone's own stages (a view, not a copy) and the group's exit head
        check_memory(backbone.stages[:end], backbone.exit_head(end),
                     profiles.device_profile(group.profile), backbone.input_shape,
                     scenario.training.batch_size, group_name, group.end_layer)


def check_fleet_memory(scenario: Scenario, backbone: StagedBackbone) -> None:
    """Refuse the first fleet row whose client-side model cannot train in its memory
    (the estimate of :func:`check_memory`, once per end layer).

    Raises:
        ConfigError: naming the file, the row, the estimate and the memory.
    """
    from sflsim.fleet import load_fleet

    fleet = load_fleet(scenario.fleet)
    ends = fleet.end_layers(scenario.fleet_end_layer or 1)
    memory = fleet.figures["memory_bytes"]
    batch = scenario.training.batch_size
    for end_layer in np.unique(ends).tolist():
        end = min(end_layer, backbone.num_stages - 1)
        need = memory_need_bytes(backbone.stages[:end], backbone.exit_head(end),
                                 backbone.input_shape, batch)
        short = np.flatnonzero((ends == end_layer) & (memory < need))
        if len(short):
            i = int(short[0])
            raise ConfigError(
                f"fleet: {scenario.fleet} row {fleet.row(i)}, memory_bytes: training the "
                f"client-side model at end layer {end_layer} with batch {batch} needs about "
                f"{need / 2**20:.0f} MiB but the device has {memory[i] / 2**20:.0f} MiB "
                f"({plural(len(short), 'row')} short); valid: at least {need:.0f} bytes, or "
                f"lower training.batch_size, model.width or the end layer")


def memory_need_bytes(model: nn.Module, exit_head: nn.Module, input_shape: tuple[int, ...],
                      batch_size: int) -> float:
    """Bytes to train ``model`` and ``exit_head`` on one batch (:func:`check_memory`)."""
    from sflsim.models.cost import count_flops

    params = sum(p.numel() for m in (model, exit_head) for p in m.parameters())
    # shapes only, from the FLOP counter (on the meta device, cached): counted as the
    # client-side model's cost will count them, stage by stage
    shape, needs_grad, act_numel = tuple(input_shape), False, 0
    for stage in model:
        cost = count_flops(stage, shape, input_requires_grad=needs_grad)
        shape, act_numel = cost.output_shape, act_numel + cost.output_numel
        needs_grad = needs_grad or any(p.requires_grad for p in stage.parameters())
    return 4 * 4 * params + 4 * 4 * act_numel * batch_size


def check_memory(model: nn.Module, exit_head: nn.Module, device: DeviceProfile,
                 input_shape: tuple[int, ...], batch_size: int, group_name: str,
                 end_layer: int) -> None:
    """Refuse a client-side model that cannot train in its device's memory.

    Estimate (bytes, fp32): parameters x 4 (weights, gradients, two Adam moments)
    plus the activations of one batch kept for backward (each stage output x 4,
    for the tensors inside its blocks).

    Raises:
        ConfigError: naming the device group, the estimate and the memory.
    """
    need = memory_need_bytes(model, exit_head, input_shape, batch_size)
    memory = device.memory_bytes.value
    if need > memory:
        raise ConfigError(
            f"devices.{group_name}: training the client-side model at end layer "
            f"{end_layer} with batch {batch_size} needs about {need / 2**20:.0f} MiB "
            f"but {device.name} has {memory / 2**20:.0f} MiB; lower training.batch_size, "
            f"model.width or devices.{group_name}.end_layer"
        )
