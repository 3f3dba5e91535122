"""torchvision's classification networks, cut into stages at their natural boundaries.

Each builder calls torchvision's own builder (``torchvision.models.resnet34(weights=None,
num_classes=...)`` and so on; never pretrained weights) under ``torch.manual_seed(seed)``
inside ``torch.random.fork_rng(devices=[])``, so the weights are torchvision's
initialisation drawn from ``seed``, and then hands the model's own module objects out
as stages and a server output layer. The stages chained and the output layer compute
exactly the torchvision model's forward: with the same seed and input (eval mode) the
logits equal torchvision's bit for bit (``tests/test_model_zoo.py``). Stages end
where the resolution halves (``S`` = input side, ``/k`` = ``S/k``, rounded up by the
padded strided convolutions, down by VGG's max-pools from 32x32 up):

* ``resnet34``, ``resnet50``: stem (conv1, bn1, relu, maxpool; /4), layer1 (/4),
  layer2 (/8), layer3 (/16), layer4 (/32); output layer avgpool, flatten, fc.
* ``mobilenet_v2``, ``mobilenet_v3_small``, ``efficientnet_b0``: torchvision's
  ``features`` blocks, a new stage starting at every block with a stride-2
  convolution (/2, /4, /8, /16, /32); the last stage ends with the final 1x1 conv.
  Output layer: average pool, flatten, ``classifier`` (dropout and linear layers).
* ``shufflenet_v2_x1_0``: conv1 + maxpool (/4), stage2 (/8), stage3 (/16), stage4 +
  conv5 (/32); output layer: spatial mean (torchvision's ``x.mean([2, 3])``), fc.
* ``vgg11``: one stage per max-pool block (/2 ... /32); output layer avgpool (to
  7x7), flatten, classifier.
* ``vit_b_16``: sflsim's own :func:`~sflsim.models.vit.vit` at ViT-B/16's sizes.

Deviations from torchvision (none at 3x224x224 and width 1, where each model *is*
torchvision's):

* ``in_channels != 3``: the first convolution is replaced by one with ``in_channels``
  inputs, drawn right after the model (every other weight is the one torchvision
  draws) with the model's own rule (Kaiming normal, fan-out; PyTorch's default for
  ShuffleNet, which has no init of its own).
* ``vgg11`` on inputs under 32x32 (Fashion-MNIST's 28x28): torchvision's five
  floor-mode max-pools would shrink the map to 0x0, so every pool there uses
  ``ceil_mode=True`` (28 -> 14 -> 7 -> 4 -> 2 -> 1). From 32x32 up the pools are
  torchvision's. The other models run on any input of 1x1 or more.
* ``width``: only where torchvision's builder has a width multiplier
  (``mobilenet_v2``, ``mobilenet_v3_small``: ``width_mult``; ``efficientnet_b0``:
  the ``width_mult`` of torchvision's EfficientNet configuration, the B-family's
  width scaling) or sflsim's ViT does (``vit_b_16``); elsewhere a width other than
  1.0 raises ValueError (:func:`check_width`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torchvision
from torch import nn

from sflsim.models.backbone import StagedBackbone
from sflsim.models.registry import register_model
from sflsim.models.vit import VIT_B16, vit

#: registered models built at one width only (torchvision's builder has no multiplier)
FIXED_WIDTH = ("resnet34", "resnet50", "shufflenet_v2_x1_0", "vgg11", "vgg5")
#: the registered models that take a ``width`` other than 1.0
WIDTH_MODELS = ("efficientnet_b0", "hetero_splitee_resnet", "mobilenet_v2",
                "mobilenet_v3_small", "resnet18", "small_cnn", "vit", "vit_b_16")


def check_width(name: str, width: float, multiplier: bool) -> None:
    """Refuse a ``width`` that model ``name`` cannot be built at.

    Args:
        name: registry name of the model (named in the message).
        width: the scenario's ``model.width``.
        multiplier: whether the model has a width multiplier.

    Raises:
        ValueError: ``width`` is not positive, or is not 1.0 and ``multiplier`` is False.
    """
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    if width != 1.0 and not multiplier:
        raise ValueError(f"model.width: {width:g} is not valid with model.name {name}, which "
                         f"has no width multiplier; valid: 1.0, or a model with one: "
                         f"{', '.join(WIDTH_MODELS)}")


class SpatialMean(nn.Module):
    """Global average over the spatial axes as ShuffleNet V2 writes it: ``(B, C, H, W)
    -> (B, C)`` by ``x.mean([2, 3])``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean([2, 3])


def draw(build: Callable[[], nn.Module], *, seed: int, in_channels: int,
         kaiming: bool = True) -> nn.Module:
    """A torchvision model drawn from ``seed``, fit to ``in_channels`` input channels.

    Args:
        build: makes the model (torchvision's builder with ``weights=None``); called
            under ``torch.manual_seed(seed)``, the global RNG state restored after.
        seed: seed of the weight initialisation.
        in_channels: input channels; when not 3 the first convolution is replaced by one
            with ``in_channels`` inputs, drawn after the model.
        kaiming: initialise that convolution as torchvision's CNNs do (Kaiming normal,
            fan-out, zero bias); False keeps PyTorch's default (ShuffleNet's).

    Returns:
        The model, in training mode.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
        if in_channels != 3:
            name, old = next((n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d))
            new = nn.Conv2d(in_channels, old.out_channels, old.kernel_size, old.stride,
                            old.padding, old.dilation, old.groups, old.bias is not None)
            if kaiming:
                nn.init.kaiming_normal_(new.weight, mode="fan_out", nonlinearity="relu")
                if new.bias is not None:
                    nn.init.zeros_(new.bias)
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, new)
    return model


def out_channels(stage: nn.Module) -> int:
    """Output channels of a stage: those of its last convolution."""
    return [m for m in stage.modules() if isinstance(m, nn.Conv2d)][-1].out_channels


def staged(name: str, stages: list[nn.Module], head: nn.Module, *, in_channels: int,
           image_size: int, num_classes: int, seed: int,
           channels: list[int] | None = None) -> StagedBackbone:
    """A :class:`StagedBackbone` of ``stages`` + ``head``; ``channels`` default to each
    stage's last convolution's output channels."""
    return StagedBackbone(
        name=name, stages=nn.ModuleList(stages), head=head,
        stage_channels=channels or [out_channels(s) for s in stages],
        num_classes=num_classes, input_shape=(in_channels, image_size, image_size), seed=seed,
    )


def _resnet(name: str, *, in_channels: int, image_size: int, num_classes: int,
            width: float, seed: int) -> StagedBackbone:
    check_width(name, width, multiplier=False)
    builder = getattr(torchvision.models, name)
    m = draw(lambda: builder(weights=None, num_classes=num_classes), seed=seed,
             in_channels=in_channels)
    stem = nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool)  # (B, 64, S/4, S/4)
    head = nn.Sequential(m.avgpool, nn.Flatten(), m.fc)  # (B, C, h, w) -> (B, classes)
    return staged(name, [stem, m.layer1, m.layer2, m.layer3, m.layer4], head,
                  in_channels=in_channels, image_size=image_size, num_classes=num_classes,
                  seed=seed)


@register_model("resnet34")
def resnet34(*, in_channels: int, image_size: int, num_classes: int, width: float = 1.0,
             seed: int = 0) -> StagedBackbone:
    """torchvision's ResNet-34 as ``[stem, layer1, layer2, layer3, layer4]``.

    He, Zhang, Ren and Sun, "Deep Residual Learning for Image Recognition", CVPR 2016,
    arXiv 1512.03385. Stages ``(B, C_in, S, S) -> (B, 64, S/4, S/4) -> (B, 64, S/4, S/4)
    -> (B, 128, S/8, S/8) -> (B, 256, S/16, S/16) -> (B, 512, S/32, S/32)`` (BasicBlocks
    3, 4, 6, 3); output layer ``-> (B, num_classes)``. Cut layers 1 to 4. Unlike
    sflsim's ``resnet18`` the stem is torchvision's at every input size.

    Args:
        in_channels: input channels (1 for Fashion-MNIST, 3 for RGB).
        image_size: input height = width in pixels.
        num_classes: number of classes of the output layers.
        width: must be 1.0 (torchvision's ResNet-34 has no width multiplier).
        seed: seed of torchvision's weight initialisation.

    Raises:
        ValueError: ``width`` is not 1.0.
    """
    return _resnet("resnet34", in_channels=in_channels, image_size=image_size,
                   num_classes=num_classes, width=width, seed=seed)


@register_model("resnet50")
def resnet50(*, in_channels: int, image_size: int, num_classes: int, width: float = 1.0,
             seed: int = 0) -> StagedBackbone:
    """torchvision's ResNet-50 as ``[stem, layer1, layer2, layer3, layer4]``.

    He et al., CVPR 2016, arXiv 1512.03385. Stages as :func:`resnet34` with Bottleneck
    blocks (3, 4, 6, 3) and 256, 512, 1024, 2048 output channels after the 64-channel
    stem; output layer ``(B, 2048, S/32, S/32) -> (B, num_classes)``. Cut layers 1 to 4.

    Args:
        in_channels, image_size, num_classes, seed: as in :func:`resnet34`.
        width: must be 1.0 (torchvision's ResNet-50 has no width multiplier).

    Raises:
        ValueError: ``width`` is not 1.0.
    """
    return _resnet("resnet50", in_channels=in_channels, image_size=image_size,
                   num_classes=num_classes, width=width, seed=seed)


def _by_stride(name: str, m: nn.Module, *, in_channels: int, image_size: int,
               num_classes: int, seed: int) -> StagedBackbone:
    """``m.features`` cut before every block holding a stride-2 convolution (block 0
    aside); output layer: pool, flatten, ``m.classifier``."""
    groups: list[list[nn.Module]] = []
    for k, block in enumerate(m.features):
        if k == 0 or any(isinstance(c, nn.Conv2d) and c.stride == (2, 2)
                         for c in block.modules()):
            groups.append([])
        groups[-1].append(block)
    # MobileNetV2 pools with F.adaptive_avg_pool2d(x, (1, 1)) in its forward, not a module
    pool = m.avgpool if hasattr(m, "avgpool") else nn.AdaptiveAvgPool2d((1, 1))
    head = nn.Sequential(pool, nn.Flatten(), m.classifier)  # (B, C, h, w) -> (B, classes)
    return staged(name, [nn.Sequential(*g) for g in groups], head, in_channels=in_channels,
                  image_size=image_size, num_classes=num_classes, seed=seed)


@register_model("mobilenet_v2")
def mobilenet_v2(*, in_channels: int, image_size: int, num_classes: int, width: float = 1.0,
                 seed: int = 0) -> StagedBackbone:
    """torchvision's MobileNetV2 as five stages of its ``features`` blocks.

    Sandler, Howard, Zhu, Zhmoginov and Chen, "MobileNetV2: Inverted Residuals and
    Linear Bottlenecks", CVPR 2018, arXiv 1801.04381. Stages (``features`` indices):
    [0-1] ``-> (B, 16, S/2, S/2)``, [2-3] ``-> (B, 24, S/4, S/4)``, [4-6] ``-> (B, 32,
    S/8, S/8)``, [7-13] ``-> (B, 96, S/16, S/16)``, [14-18] ``-> (B, 1280, S/32, S/32)``
    (channels at width 1); output layer pool, flatten, dropout 0.2, linear. Cut layers 1-4.

    Args:
        in_channels, image_size, num_classes, seed: as in :func:`resnet34`.
        width: torchvision's ``width_mult`` (channels rounded to multiples of 8; the last
            conv keeps 1280 channels for widths below 1).

    Raises:
        ValueError: ``width`` is not positive.
    """
    check_width("mobilenet_v2", width, multiplier=True)
    m = draw(lambda: torchvision.models.mobilenet_v2(weights=None, num_classes=num_classes,
                                                     width_mult=width),
             seed=seed, in_channels=in_channels)
    return _by_stride("mobilenet_v2", m, in_channels=in_channels, image_size=image_size,
                      num_classes=num_classes, seed=seed)


@register_model("mobilenet_v3_small")
def mobilenet_v3_small(*, in_channels: int, image_size: int, num_classes: int,
                       width: float = 1.0, seed: int = 0) -> StagedBackbone:
    """torchvision's MobileNetV3-Small as five stages of its ``features`` blocks.

    Howard et al., "Searching for MobileNetV3", ICCV 2019, arXiv 1905.02244. Stages
    (``features`` indices): [0] ``-> (B, 16, S/2, S/2)``, [1] ``-> (B, 16, S/4, S/4)``,
    [2-3] ``-> (B, 24, S/8, S/8)``, [4-8] ``-> (B, 48, S/16, S/16)``, [9-12] ``-> (B, 576,
    S/32, S/32)`` (width 1); output layer pool, flatten, linear 1024, hardswish, dropout
    0.2, linear. Cut layers 1 to 4.

    Args:
        in_channels, image_size, num_classes, seed: as in :func:`resnet34`.
        width: torchvision's ``width_mult`` (channels rounded to multiples of 8).

    Raises:
        ValueError: ``width`` is not positive.
    """
    check_width("mobilenet_v3_small", width, multiplier=True)
    m = draw(lambda: torchvision.models.mobilenet_v3_small(
        weights=None, num_classes=num_classes, width_mult=width), seed=seed,
        in_channels=in_channels)
    return _by_stride("mobilenet_v3_small", m, in_channels=in_channels,
                      image_size=image_size, num_classes=num_classes, seed=seed)


def _efficientnet_b0(num_classes: int, width: float) -> nn.Module:
    """torchvision's builder at width 1; else its B0 configuration at ``width_mult=width``
    (what the builder does at 1.0; the builder itself fixes the width)."""
    if width == 1.0:
        return torchvision.models.efficientnet_b0(weights=None, num_classes=num_classes)
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    setting, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=width,
                                               depth_mult=1.0)
    return EfficientNet(setting, 0.2, last_channel=last_channel, num_classes=num_classes)


@register_model("efficientnet_b0")
def efficientnet_b0(*, in_channels: int, image_size: int, num_classes: int,
                    width: float = 1.0, seed: int = 0) -> StagedBackbone:
    """torchvision's EfficientNet-B0 as five stages of its ``features`` blocks.

    Tan and Le, "EfficientNet: Rethinking Model Scaling for Convolutional Neural
    Networks", ICML 2019, arXiv 1905.11946. Stages (``features`` indices): [0-1]
    ``-> (B, 16, S/2, S/2)``, [2] ``-> (B, 24, S/4, S/4)``, [3] ``-> (B, 40, S/8, S/8)``,
    [4-5] ``-> (B, 112, S/16, S/16)``, [6-8] ``-> (B, 1280, S/32, S/32)`` (width 1);
    output layer pool, flatten, dropout 0.2, linear. Stochastic depth (0.2) acts in
    training mode, as in torchvision. Cut layers 1 to 4.

    Args:
        in_channels, image_size, num_classes, seed: as in :func:`resnet34`.
        width: the width multiplier of EfficientNet's compound scaling (channels rounded
            to multiples of 8; depth stays B0's).

    Raises:
        ValueError: ``width`` is not positive.
    """
    check_width("efficientnet_b0", width, multiplier=True)
    m = draw(lambda: _efficientnet_b0(num_classes, width), seed=seed, in_channels=in_channels)
    return _by_stride("efficientnet_b0", m, in_channels=in_channels, image_size=image_size,
                      num_classes=num_classes, seed=seed)


@register_model("shufflenet_v2_x1_0")
def shufflenet_v2_x1_0(*, in_channels: int, image_size: int, num_classes: int,
                       width: float = 1.0, seed: int = 0) -> StagedBackbone:
    """torchvision's ShuffleNet V2 1.0x as ``[conv1 + maxpool, stage2, stage3, stage4 +
    conv5]``.

    Ma, Zhang, Zheng and Sun, "ShuffleNet V2: Practical Guidelines for Efficient CNN
    Architecture Design", ECCV 2018, arXiv 1807.11164. Stages ``-> (B, 24, S/4, S/4) ->
    (B, 116, S/8, S/8) -> (B, 232, S/16, S/16) -> (B, 1024, S/32, S/32)``; output layer
    spatial mean and linear. Cut layers 1 to 3.

    Args:
        in_channels, image_size, num_classes, seed: as in :func:`resnet34`.
        width: must be 1.0 (torchvision has separate 0.5x, 1.5x and 2.0x models, not a
            multiplier).

    Raises:
        ValueError: ``width`` is not 1.0.
    """
    check_width("shufflenet_v2_x1_0", width, multiplier=False)
    m = draw(lambda: torchvision.models.shufflenet_v2_x1_0(weights=None,
                                                           num_classes=num_classes),
             seed=seed, in_channels=in_channels, kaiming=False)
    stages = [nn.Sequential(m.conv1, m.maxpool), m.stage2, m.stage3,
              nn.Sequential(m.stage4, m.conv5)]
    c = m._stage_out_channels  # [24, 116, 232, 464, 1024]: stages concatenate two branches
    return staged("shufflenet_v2_x1_0", stages, nn.Sequential(SpatialMean(), m.fc),
                  in_channels=in_channels, image_size=image_size, num_classes=num_classes,
                  seed=seed, channels=[c[0], c[1], c[2], c[4]])


@register_model("vgg11")
def vgg11(*, in_channels: int, image_size: int, num_classes: int, width: float = 1.0,
          seed: int = 0) -> StagedBackbone:
    """torchvision's VGG-11 (configuration A, no BatchNorm), one stage per max-pool block.

    Simonyan and Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
    Recognition", ICLR 2015, arXiv 1409.1556. Stages ``-> (B, 64, S/2, S/2) -> (B, 128,
    S/4, S/4) -> (B, 256, S/8, S/8) -> (B, 512, S/16, S/16) -> (B, 512, S/32, S/32)``;
    output layer: adaptive average pool to 7x7, flatten, linear 4096, ReLU, dropout,
    linear 4096, ReLU, dropout, linear (about 120M of its 129M parameters at 10 classes,
    at any input).
    Cut layers 1 to 4. Below 32x32 every pool uses ``ceil_mode=True`` (module docstring).

    Args:
        in_channels, image_size, num_classes, seed: as in :func:`resnet34`.
        width: must be 1.0 (torchvision's VGG has no width multiplier).

    Raises:
        ValueError: ``width`` is not 1.0.
    """
    check_width("vgg11", width, multiplier=False)
    m = draw(lambda: torchvision.models.vgg11(weights=None, num_classes=num_classes),
             seed=seed, in_channels=in_channels)
    stages: list[nn.Module] = []
    block: list[nn.Module] = []
    for layer in m.features:
        block.append(layer)
        if isinstance(layer, nn.MaxPool2d):
            layer.ceil_mode = image_size < 32  # torchvision's floor mode would reach 0x0
            stages.append(nn.Sequential(*block))
            block = []
    head = nn.Sequential(m.avgpool, nn.Flatten(), m.classifier)  # (B, 512, h, w) -> (B, classes)
    return staged("vgg11", stages, head, in_channels=in_channels, image_size=image_size,
                  num_classes=num_classes, seed=seed)


@register_model("vit_b_16")
def vit_b_16(*, in_channels: int, image_size: int, num_classes: int, width: float = 1.0,
             seed: int = 0) -> StagedBackbone:
    """ViT-B/16 built by sflsim's own :func:`~sflsim.models.vit.vit` at :data:`VIT_B16`'s
    sizes (patch 16, depth 12, hidden 768, 12 heads, MLP 3072), not by torchvision's
    ``vit_b_16``, so it keeps sflsim's prompt-token support (prompts prepended after the
    patch embedding) and the ViT's documented deviations from torchvision (any input
    channels, a randomly initialised output layer, the final LayerNorm in it).

    Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image
    Recognition at Scale", ICLR 2021, arXiv 2010.11929. Stages: patch embedding ``(B,
    C_in, S, S) -> (B, 1+P, 768)``, ``P = (S/16)^2``, then 12 encoder blocks; cut layers 1
    to 12.

    Args:
        in_channels, num_classes, seed: as in :func:`resnet34`.
        image_size: input side, a multiple of 16.
        width: multiplier of the hidden and MLP widths (as for ``vit``).

    Raises:
        ValueError: ``width`` is not positive, or ``image_size`` is not a multiple of 16.
    """
    backbone = vit(in_channels=in_channels, image_size=image_size, num_classes=num_classes,
                   width=width, seed=seed, **VIT_B16)
    return dataclasses.replace(backbone, name="vit_b_16")
