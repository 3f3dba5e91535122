"""The six-stage ResNet-18 of Hetero-SplitEE (arXiv 2512.09313, Table I).

Followed as printed in Table I:

* Layer1 (stem): for inputs of at most 32x32 (CIFAR, Fashion-MNIST) a 3x3
  conv with stride 1 and padding 1, BatchNorm, ReLU and no max-pool; for
  larger inputs (Table I's "Other": STL-10 96x96, and here Tiny-ImageNet and
  DomainNet) a 7x7 stride-2 conv with padding 3, BatchNorm, ReLU and a 3x3
  stride-2 max-pool. The table gives the max-pool no padding; we use 1, as
  torchvision's ResNet stem does (96x96 inputs become 24x24 after the stem, as
  with torchvision; padding 0 would give 23x23).
* Layer2-Layer6: two torchvision ``BasicBlock`` each, with 64, 64, 128, 256 and
  512 output channels and strides 1, 1, 2, 2, 2.
* Server output layer: AdaptiveAvgPool2d(1), Flatten, Linear(512, classes).

Note that Table I has one more 64-channel stage than torchvision's ResNet-18
(which has four stages of two blocks after the stem); we keep the table's six
stages so that end layers 3, 4 and 5 mean what they mean in the paper.
Channel counts are multiplied by ``width`` (rounded, at least 1) for CPU runs.

:func:`staged_resnet` builds any "stem + stages of two BasicBlocks" network; the
standard ResNet-18 (:mod:`sflsim.models.resnet18`) is another setting of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, conv1x1

from sflsim.models.backbone import StagedBackbone, output_head
from sflsim.models.registry import register_model

TABLE_I_CHANNELS = (64, 64, 64, 128, 256, 512)
TABLE_I_STRIDES = (1, 1, 2, 2, 2)


def _blocks(inplanes: int, planes: int, stride: int) -> nn.Sequential:
    """Two BasicBlocks ``(B, inplanes, H, W) -> (B, planes, H/stride, W/stride)``."""
    downsample = None
    if stride != 1 or inplanes != planes:
        downsample = nn.Sequential(conv1x1(inplanes, planes, stride), nn.BatchNorm2d(planes))
    return nn.Sequential(
        BasicBlock(inplanes, planes, stride, downsample), BasicBlock(planes, planes)
    )


def _stem(in_channels: int, out_channels: int, image_size: int) -> nn.Sequential:
    """CIFAR stem (3x3 conv, no max-pool) for ``image_size <= 32``, else the ImageNet
    stem (7x7 stride-2 conv, 3x3 stride-2 max-pool) of He et al. 2016."""
    if image_size <= 32:
        return nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, 1, 1, bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True), nn.Identity(),
        )
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 7, 2, 3, bias=False),
        nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
    )


def staged_resnet(
    name: str, channels: Sequence[int], strides: Sequence[int], *, in_channels: int,
    image_size: int, num_classes: int, width: float, seed: int,
) -> StagedBackbone:
    """A stem followed by stages of two BasicBlocks, weights drawn from ``seed``.

    Args:
        name: registry name stored on the backbone.
        channels: output channels of the stem and of each block stage (before ``width``).
        strides: stride of each block stage; ``len(strides) == len(channels) - 1``.
        in_channels, image_size, num_classes, width, seed: as in
            :func:`hetero_splitee_resnet`.

    Raises:
        ValueError: ``width`` is not positive.
    """
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    ch = [max(1, round(c * width)) for c in channels]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        stem = _stem(in_channels, ch[0], image_size)
        stages = [stem] + [_blocks(ch[k], ch[k + 1], s) for k, s in enumerate(strides)]
        for module in nn.ModuleList(stages).modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        head = output_head(ch[-1], num_classes)
    return StagedBackbone(
        name=name,
        stages=nn.ModuleList(stages),
        head=head,
        stage_channels=ch,
        num_classes=num_classes,
        input_shape=(in_channels, image_size, image_size),
        seed=seed,
    )


@register_model("hetero_splitee_resnet")
def hetero_splitee_resnet(
    *, in_channels: int, image_size: int, num_classes: int, width: float = 1.0, seed: int = 0
) -> StagedBackbone:
    """Build Table I's six-stage ResNet-18 with initial weights drawn from ``seed``.

    Args:
        in_channels: input channels (1 for Fashion-MNIST, 3 for CIFAR).
        image_size: input height = width in pixels; <= 32 selects the CIFAR stem.
        num_classes: number of classes of the output layers.
        width: channel multiplier (1.0 is the paper's model).
        seed: seed of the weight initialisation; all clients start from the same
            weights (paper §III-B2).

    Returns:
        A :class:`StagedBackbone` with stages ``(B, in_channels, S, S) -> ... ->
        (B, 512*width, S/8, S/8)`` for the CIFAR stem.

    Raises:
        ValueError: ``width`` is not positive.
    """
    return staged_resnet(
        "hetero_splitee_resnet", TABLE_I_CHANNELS, TABLE_I_STRIDES, in_channels=in_channels,
        image_size=image_size, num_classes=num_classes, width=width, seed=seed,
    )
