"""A small two-convolution CNN, the classic FedAvg / Flower-tutorial workload.

Layout (channels before ``width``), for an ``S x S`` input with ``C`` channels:

* Stage 1: 3x3 conv ``C -> 16`` (padding 1), ReLU, 2x2 max-pool: ``(16, S/2, S/2)``.
* Stage 2: 3x3 conv ``16 -> 32`` (padding 1), ReLU, 2x2 max-pool: ``(32, S/4, S/4)``.
* Server output layer: Flatten, Linear(``32 * (S/4)^2``, classes) (``S/4`` rounded down).

On 28x28 Fashion-MNIST at width 1 that is 160 + 4,640 + 15,690 = 20,490 parameters.
The only cut layer is 1 (between the two stages); its exit head is the default
pool + flatten + linear of :func:`sflsim.models.backbone.output_head`. Channel
counts are multiplied by ``width`` (rounded, at least 1). Weights use PyTorch's
default initialisation, drawn from ``seed``.
"""

from __future__ import annotations

import torch
from torch import nn

from sflsim.models.backbone import StagedBackbone
from sflsim.models.registry import register_model

SMALL_CNN_CHANNELS = (16, 32)


def _conv_stage(in_channels: int, out_channels: int) -> nn.Sequential:
    """3x3 conv (padding 1), ReLU, 2x2 max-pool: ``(B, in, H, W) -> (B, out, H/2, W/2)``."""
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2))


@register_model("small_cnn")
def small_cnn(
    *, in_channels: int, image_size: int, num_classes: int, width: float = 1.0, seed: int = 0,
    **kwargs: object,
) -> StagedBackbone:
    """Build the small CNN as ``[conv1 stage, conv2 stage]`` + flatten/linear head.

    Args:
        in_channels: input channels (1 for Fashion-MNIST, 3 for CIFAR).
        image_size: input height = width in pixels, at least 4.
        num_classes: number of classes of the output layers.
        width: channel multiplier (1.0 is 16 and 32 channels).
        seed: seed of the weight initialisation.
        **kwargs: builder options of other backbones; none applies here.

    Returns:
        A :class:`StagedBackbone` with stages ``(B, in_channels, S, S) -> (B, 16w, S/2, S/2)
        -> (B, 32w, S/4, S/4)`` and head ``-> (B, num_classes)``.

    Raises:
        ValueError: ``width`` is not positive, the image is smaller than 4x4, or an
            unknown option is given.
    """
    if kwargs:
        raise ValueError(f"small_cnn takes no options {sorted(kwargs)}")
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    if image_size < 4:
        raise ValueError(f"small_cnn needs images of at least 4x4 pixels, got {image_size}")
    ch = [max(1, round(c * width)) for c in SMALL_CNN_CHANNELS]
    side = image_size // 4
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        stages = nn.ModuleList([_conv_stage(in_channels, ch[0]), _conv_stage(ch[0], ch[1])])
        head = nn.Sequential(nn.Flatten(), nn.Linear(ch[1] * side * side, num_classes))
    return StagedBackbone(
        name="small_cnn",
        stages=stages,
        head=head,
        stage_channels=ch,
        num_classes=num_classes,
        input_shape=(in_channels, image_size, image_size),
        seed=seed,
    )
