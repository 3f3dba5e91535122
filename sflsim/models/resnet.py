"""The six-stage ResNet-18 of Hetero-SplitEE (arXiv 2512.09313, Table I).

Followed as printed in Table I:

* Layer1 (stem): for inputs of at most 32x32 (CIFAR, Fashion-MNIST) a 3x3
  conv with stride 1 and padding 1, BatchNorm, ReLU and no max-pool; for
  larger inputs (STL-10) a 7x7 stride-2 conv with padding 3, BatchNorm, ReLU
  and a 3x3 stride-2 max-pool.
* Layer2-Layer6: two torchvision ``BasicBlock`` each, with 64, 64, 128, 256 and
  512 output channels and strides 1, 1, 2, 2, 2.
* Server output layer: AdaptiveAvgPool2d(1), Flatten, Linear(512, classes).

Note that Table I has one more 64-channel stage than torchvision's ResNet-18
(which has four stages of two blocks after the stem); we keep the table's six
stages so that end layers 3, 4 and 5 mean what they mean in the paper.
Channel counts are multiplied by ``width`` (rounded, at least 1) for CPU runs.
"""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, conv1x1

from sflsim.models.backbone import StagedBackbone, output_head
from sflsim.models.registry import register_model

TABLE_I_CHANNELS = (64, 64, 64, 128, 256, 512)
TABLE_I_STRIDES = (1, 1, 2, 2, 2)


def _blocks(inplanes: int, planes: int, stride: int) -> nn.Sequential:
    downsample = None
    if stride != 1 or inplanes != planes:
        downsample = nn.Sequential(conv1x1(inplanes, planes, stride), nn.BatchNorm2d(planes))
    return nn.Sequential(
        BasicBlock(inplanes, planes, stride, downsample), BasicBlock(planes, planes)
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
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    ch = [max(1, round(c * width)) for c in TABLE_I_CHANNELS]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if image_size <= 32:
            stem = nn.Sequential(
                nn.Conv2d(in_channels, ch[0], 3, 1, 1, bias=False),
                nn.BatchNorm2d(ch[0]), nn.ReLU(inplace=True), nn.Identity(),
            )
        else:
            stem = nn.Sequential(
                nn.Conv2d(in_channels, ch[0], 7, 2, 3, bias=False),
                nn.BatchNorm2d(ch[0]), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
            )
        stages = [stem] + [
            _blocks(ch[k], ch[k + 1], TABLE_I_STRIDES[k]) for k in range(5)
        ]
        for module in nn.ModuleList(stages).modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        head = output_head(ch[-1], num_classes)
    return StagedBackbone(
        name="hetero_splitee_resnet",
        stages=nn.ModuleList(stages),
        head=head,
        stage_channels=ch,
        num_classes=num_classes,
        input_shape=(in_channels, image_size, image_size),
        seed=seed,
    )
