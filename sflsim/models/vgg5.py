"""VGG5, the small VGG of the ARES split-learning testbed (Jetson Nano, Raspberry Pi).

Samikwa, Di Maio and Braun, "ARES: Adaptive Resource-Aware Split Learning for Internet
of Things", Computer Networks 218 (2022) 109380, doi:10.1016/j.comnet.2022.109380;
code: github.com/ricsamikwa/RES-Things (``configurations.py``: ``model_cfg['VGG5']``,
``nn_model.py``: ``VGG``). On CIFAR-10 (3x32x32, 10 classes) its seven layers are:

1. conv 3->32, 3x3, padding 1, BatchNorm, ReLU: ``(32, 32, 32)``
2. max-pool 2x2, stride 2: ``(32, 16, 16)``
3. conv 32->64, 3x3, padding 1, BatchNorm, ReLU: ``(64, 16, 16)``
4. max-pool 2x2, stride 2: ``(64, 8, 8)``
5. conv 64->64, 3x3, padding 1, BatchNorm, ReLU: ``(64, 8, 8)``
6. flatten, linear 4096->128: ``(128,)``
7. linear 128->10.

There is no ReLU between the two linear layers: ARES's ``VGG._make_layers`` puts a
bare ``nn.Linear`` for each dense layer into one ``nn.Sequential``, and its forward
applies that after flattening (read from the repository's ``nn_model.py``).

Stages and cut layers: each of layers 1-6 is a stage and layer 7 is the server output
layer, so the cut layers (end layers) are 1 to 5, after layers 1 to 5. ARES cuts with
a 0-based ``split_layer``: the device runs layers ``0..split_layer``
(``cfg[:split_layer+1]``), the server the rest; its logs use split layers 0 to 6 (6:
no offloading, ``model_len = 7``). sflsim end layer ``l`` is ARES ``split_layer = l -
1``: ARES's split layers 1, 3 and 4 are end layers 2, 4 and 5, and cuts after the
1-based layers 1, 3 and 4 are end layers 1, 3 and 4; both readings are cut layers
here. Making layer 6 a stage (rather than part of the output layer) is what keeps
ARES's split layer 4 (the server runs only the two linear layers) a cut layer. ARES's
split layer 5 (the server runs only the last linear) is not one: sflsim's server
always keeps at least one stage. Stage 6 views its 128 features as a ``(128, 1, 1)``
map (a no-op reshape, undone by the output layer's flatten), so every stage ends in a
feature map and carries the default pool + linear exit head.

Other inputs: ``in_channels`` feeds the first conv and the flatten width follows the
input, ``64 * (S // 4)^2`` (3136 at 28x28). Weights are initialised as ARES does
(conv: Kaiming normal, fan-out, zero bias; BatchNorm 1 and 0; linear: normal(0, 0.01),
zero bias), drawn from ``seed``. ARES has no width multiplier, and neither has this.
"""

from __future__ import annotations

import torch
from torch import nn

from sflsim.models.backbone import StagedBackbone
from sflsim.models.registry import register_model
from sflsim.models.zoo import check_width

#: ARES's VGG5 layers: channels of the three convs and width of the hidden linear layer
VGG5_CHANNELS = (32, 64, 64)
VGG5_HIDDEN = 128


def _conv(in_channels: int, out_channels: int) -> nn.Sequential:
    """3x3 conv (padding 1), BatchNorm, ReLU: ``(B, in, H, W) -> (B, out, H, W)``."""
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1),
                         nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True))


def _init_as_ares(module: nn.Module) -> None:
    """ARES's ``VGG._initialize_weights``, over ``module.modules()`` in order."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


@register_model("vgg5")
def vgg5(*, in_channels: int, image_size: int, num_classes: int, width: float = 1.0,
         seed: int = 0) -> StagedBackbone:
    """Build ARES's VGG5 as six stages (its layers 1-6) + its last linear layer.

    Args:
        in_channels: input channels (3 in ARES; 1 for Fashion-MNIST).
        image_size: input height = width in pixels, at least 4.
        num_classes: number of classes (10 in ARES).
        width: must be 1.0 (ARES's VGG5 has no width multiplier).
        seed: seed of the weight initialisation.

    Returns:
        A :class:`StagedBackbone` with stages ``(B, C, S, S) -> (B, 32, S, S) -> (B, 32,
        S/2, S/2) -> (B, 64, S/2, S/2) -> (B, 64, S/4, S/4) -> (B, 64, S/4, S/4) -> (B, 128,
        1, 1)`` (``S/2``, ``S/4`` rounded down) and output layer ``-> (B, num_classes)``;
        cut layers 1 to 5.

    Raises:
        ValueError: ``width`` is not 1.0, or the image is smaller than 4x4.
    """
    check_width("vgg5", width, multiplier=False)
    if image_size < 4:
        raise ValueError(f"vgg5 needs images of at least 4x4 pixels, got {image_size}")
    c1, c2, c3 = VGG5_CHANNELS
    side = image_size // 2 // 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        stages = nn.ModuleList([
            _conv(in_channels, c1),                      # (B, 32, S, S)
            nn.Sequential(nn.MaxPool2d(2, 2)),           # (B, 32, S/2, S/2)
            _conv(c1, c2),                               # (B, 64, S/2, S/2)
            nn.Sequential(nn.MaxPool2d(2, 2)),           # (B, 64, S/4, S/4)
            _conv(c2, c3),                               # (B, 64, S/4, S/4)
            nn.Sequential(nn.Flatten(), nn.Linear(c3 * side * side, VGG5_HIDDEN),
                          nn.Unflatten(1, (VGG5_HIDDEN, 1, 1))),  # (B, 128, 1, 1)
        ])
        head = nn.Sequential(nn.Flatten(), nn.Linear(VGG5_HIDDEN, num_classes))
        _init_as_ares(stages)
        _init_as_ares(head)
    return StagedBackbone(
        name="vgg5",
        stages=stages,
        head=head,
        stage_channels=[c1, c1, c2, c2, c3, VGG5_HIDDEN],
        num_classes=num_classes,
        input_shape=(in_channels, image_size, image_size),
        seed=seed,
    )
