"""A named model's training (or inference) step as operators: the work that
``sflsim calibrate`` fits and the cost model by operation prices
(:mod:`sflsim.hardware.operator_cost`)."""

from __future__ import annotations

from functools import cache

from torch import nn

from sflsim.errors import ConfigError
from sflsim.hardware.operator_cost import Workload
from sflsim.hardware.steps_csv import StepRow
from sflsim.models.ops import PieceOps, count_ops
from sflsim.models.registry import MODELS
from sflsim.text import did_you_mean


@cache
def model_ops(model: str, width: float, input_shape: tuple[int, ...], classes: int,
              vit: tuple[tuple[str, int], ...] = (), backward: bool = True) -> PieceOps:
    """The operators of the whole model ``model`` (stages and output layer), per sample.

    Args:
        model: a registered model name (``model.name`` of a scenario).
        width: its width multiplier.
        input_shape: per-sample input ``(C, H, W)``; ``H`` must equal ``W``.
        classes: output classes.
        vit: a ViT's sizes as ``(field, value)`` pairs (``model: vit`` only).
        backward: count the backward pass too (a training step).

    Raises:
        ConfigError: unknown model, a non-square input, or sizes the builder refuses.
    """
    import sflsim.models  # noqa: F401  (registers the backbones)

    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}{did_you_mean(model, sorted(MODELS))} "
                          f"(valid: {', '.join(sorted(MODELS))})")
    channels, height, width_px = input_shape
    if height != width_px:
        raise ConfigError(f"model {model}: input {channels}x{height}x{width_px} is not square; "
                          f"sflsim's models take square images (CxSxS)")
    if vit and model != "vit":
        raise ConfigError(f"model {model}: ViT sizes ({', '.join(k for k, _ in vit)}) apply only "
                          f"to model vit")
    try:
        backbone = MODELS[model](in_channels=channels, image_size=height, num_classes=classes,
                                 width=width, seed=0, **dict(vit))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"model {model}: {exc}") from None
    whole = nn.Sequential(*backbone.stages, backbone.head)
    return count_ops(whole, tuple(input_shape), backward=backward)


def row_workload(row: StepRow) -> Workload:
    """The :class:`~sflsim.hardware.operator_cost.Workload` of one measured step."""
    train = row.phase == "train"
    ops = model_ops(row.model, row.width, tuple(row.input_shape), row.classes,
                    tuple(sorted(row.vit.items())), backward=train)
    return Workload(forward=ops.forward, backward=ops.backward,
                    trained_params=ops.params if train else 0,
                    param_tensors=ops.param_tensors if train else 0,
                    batch=row.batch, optimizer=row.optimizer)
