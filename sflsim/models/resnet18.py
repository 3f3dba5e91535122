"""The standard ResNet-18 (He et al. 2016) as five stages, for FedSGA's CNN experiments.

FedSGA ("When Is Shallow Enough? Adaptive Split Federated Learning with
Client-Specific Sufficiency Estimation", CIKM 2026, arXiv 2608.15639, §4.1.1) uses
ResNet-18 and ViT-B/16. Here ResNet-18 is
torchvision's layout split at its named stages:

* Stage 1 (stem): for inputs of at most 32x32 the CIFAR stem (3x3 conv, stride
  1, BatchNorm, ReLU, no max-pool); for larger inputs torchvision's 7x7 stride-2
  conv, BatchNorm, ReLU and 3x3 stride-2 max-pool.
* Stages 2-5 (``layer1``-``layer4``): two torchvision ``BasicBlock`` each, with
  64, 128, 256 and 512 output channels and strides 1, 2, 2, 2.
* Server output layer: AdaptiveAvgPool2d(1), Flatten, Linear(512, classes).

Cut layers 1 to 4 are the stage boundaries. Channel counts are multiplied by
``width`` (rounded, at least 1) for CPU runs. Prompt tokens are injected into the
stem output (see :mod:`sflsim.models.prompts`).
"""

from __future__ import annotations

from sflsim.models.backbone import StagedBackbone
from sflsim.models.registry import register_model
from sflsim.models.resnet import staged_resnet

RESNET18_CHANNELS = (64, 64, 128, 256, 512)
RESNET18_STRIDES = (1, 2, 2, 2)


@register_model("resnet18")
def resnet18(
    *, in_channels: int, image_size: int, num_classes: int, width: float = 1.0, seed: int = 0
) -> StagedBackbone:
    """Build ResNet-18 as ``[stem, layer1, layer2, layer3, layer4]`` from ``seed``.

    Args:
        in_channels: input channels (1 for Fashion-MNIST, 3 for CIFAR).
        image_size: input height = width in pixels; <= 32 selects the CIFAR stem.
        num_classes: number of classes of the output layers.
        width: channel multiplier (1.0 is the standard model).
        seed: seed of the weight initialisation.

    Returns:
        A :class:`StagedBackbone` with stages ``(B, in_channels, S, S) -> (B, 64w, S, S)
        -> (B, 64w, S, S) -> (B, 128w, S/2, S/2) -> (B, 256w, S/4, S/4) ->
        (B, 512w, S/8, S/8)`` for the CIFAR stem (``w = width``; the ImageNet stem
        divides ``S`` by a further 4).

    Raises:
        ValueError: ``width`` is not positive.
    """
    return staged_resnet(
        "resnet18", RESNET18_CHANNELS, RESNET18_STRIDES, in_channels=in_channels,
        image_size=image_size, num_classes=num_classes, width=width, seed=seed,
    )
