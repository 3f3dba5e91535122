"""A configurable Vision Transformer (Dosovitskiy et al. 2021) as ``depth + 1`` stages.

FedSGA ("When Is Shallow Enough? Adaptive Split Federated Learning with
Client-Specific Sufficiency Estimation", CIKM 2026, arXiv 2608.15639, §4.1.1) uses
ViT-B/16 (:data:`VIT_B16`); the builder's
defaults are a small ViT for CPU runs (patch 4, depth 6, width 192, 3 heads).

* Stage 1 (patch embedding): a ``patch_size``-strided conv projects patches to
  ``D`` channels, the CLS token is put first and a learned positional embedding
  is added (dropout 0): ``(B, C, S, S) -> (B, 1+P, D)`` with ``P = (S/p)^2``.
* Stages 2 to ``depth + 1``: one torchvision ``EncoderBlock`` each (pre-norm
  multi-head self-attention + MLP), ``(B, T, D) -> (B, T, D)``.
* Server output layer: the encoder's final LayerNorm, the CLS token, Linear:
  ``(B, T, D) -> (B, classes)``. Exit heads have the same form.

Cut layers are the block boundaries ``1..depth``. Because every stage after the
first is indifferent to the sequence length ``T``, prompt tokens prepended after
stage 1 (``T = 1+m+P``; :class:`~sflsim.models.prompts.PromptPrepend`) pass
through the server unchanged.

Deviations from torchvision's ``VisionTransformer``: any number of input
channels; the output layer is randomly initialised (torchvision zeroes it, as
Dosovitskiy et al. do for fine-tuning); the final LayerNorm sits in the output
layer instead of the encoder. ``width`` scales ``hidden_dim`` (rounded to a
multiple of ``heads``) and ``mlp_dim``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torchvision.models.vision_transformer import EncoderBlock

from sflsim.models.backbone import StagedBackbone
from sflsim.models.prompts import PromptPrepend
from sflsim.models.registry import register_model

#: ViT-B/16 (Dosovitskiy et al. 2021, Table 1): about 86M parameters at 224x224.
VIT_B16 = dict(patch_size=16, depth=12, hidden_dim=768, heads=12, mlp_dim=3072)

_LN_EPS = 1e-6  # torchvision's (and the original ViT's) LayerNorm epsilon


class PatchEmbedding(nn.Module):
    """Patches to tokens, CLS token first, positional embedding added.

    ``(B, C, S, S) -> (B, 1+P, D)``; Dosovitskiy et al. 2021, eq. 1.
    """

    def __init__(self, in_channels: int, image_size: int, patch_size: int, hidden_dim: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        num_patches = (image_size // patch_size) ** 2
        self.conv_proj = nn.Conv2d(in_channels, hidden_dim, patch_size, patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, 1 + num_patches, hidden_dim))
        self.dropout = nn.Dropout(dropout)
        # initialisation as in torchvision's VisionTransformer and Encoder
        fan_in = in_channels * patch_size * patch_size
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        nn.init.normal_(self.pos_embedding, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x)  # (B, D, S/p, S/p)
        x = x.flatten(2).transpose(1, 2)  # (B, P, D)
        cls = self.class_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        return self.dropout(torch.cat([cls, x], dim=1) + self.pos_embedding)  # (B, 1+P, D)


class ClsToken(nn.Module):
    """Take the CLS token: ``(B, T, D) -> (B, D)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


def cls_head(hidden_dim: int, num_classes: int) -> nn.Sequential:
    """LayerNorm + CLS token + linear: ``(B, T, D) -> (B, num_classes)`` logits."""
    return nn.Sequential(
        nn.LayerNorm(hidden_dim, eps=_LN_EPS), ClsToken(), nn.Linear(hidden_dim, num_classes)
    )


def scaled_hidden_dim(hidden_dim: int, heads: int, width: float) -> int:
    """``hidden_dim * width`` rounded to a multiple of ``heads`` (at least ``heads``)."""
    return max(1, round(hidden_dim * width / heads)) * heads


@register_model("vit")
def vit(
    *, in_channels: int, image_size: int, num_classes: int, width: float = 1.0, seed: int = 0,
    patch_size: int = 4, depth: int = 6, hidden_dim: int = 192, heads: int = 3,
    mlp_dim: int | None = None,
) -> StagedBackbone:
    """Build a ViT as ``[patch embedding, block 1, ..., block depth]`` from ``seed``.

    Args:
        in_channels: input channels.
        image_size: input height = width in pixels; a multiple of ``patch_size``.
        num_classes: number of classes of the output layers.
        width: multiplier of ``hidden_dim`` and ``mlp_dim`` (1.0 = as given).
        seed: seed of the weight initialisation.
        patch_size: side ``p`` of the square patches.
        depth: number of encoder blocks (``depth + 1`` stages).
        hidden_dim: token width ``D`` before ``width``; a multiple of ``heads``.
        heads: attention heads per block.
        mlp_dim: hidden width of each block's MLP before ``width``; default ``4 D``.

    Returns:
        A :class:`StagedBackbone` with stages ``(B, in_channels, S, S) -> (B, 1+P, D)
        -> ... -> (B, 1+P, D)``, ``P = (S/p)^2``; ``stage_channels`` is ``D`` for
        every stage.

    Raises:
        ValueError: a size is not positive, ``hidden_dim`` is not a multiple of
            ``heads``, or ``image_size`` is not a multiple of ``patch_size``.
    """
    sizes = dict(width=width, patch_size=patch_size, depth=depth, hidden_dim=hidden_dim,
                 heads=heads, mlp_dim=1 if mlp_dim is None else mlp_dim)
    bad = [f"{k}={v}" for k, v in sizes.items() if v <= 0]
    if bad:
        raise ValueError(f"ViT sizes must be > 0, got {', '.join(bad)}")
    if hidden_dim % heads:
        raise ValueError(f"ViT hidden_dim ({hidden_dim}) must be divisible by heads ({heads})")
    if image_size % patch_size:
        raise ValueError(f"ViT image_size ({image_size}) must be a multiple of patch_size "
                         f"({patch_size})")
    dim = scaled_hidden_dim(hidden_dim, heads, width)
    mlp = 4 * dim if mlp_dim is None else max(1, round(mlp_dim * width))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        stages = [PatchEmbedding(in_channels, image_size, patch_size, dim)]
        stages += [EncoderBlock(heads, dim, mlp, dropout=0.0, attention_dropout=0.0)
                   for _ in range(depth)]
        head = cls_head(dim, num_classes)
    return StagedBackbone(
        name="vit",
        stages=nn.ModuleList(stages),
        head=head,
        stage_channels=[dim] * (depth + 1),
        num_classes=num_classes,
        input_shape=(in_channels, image_size, image_size),
        seed=seed,
        exit_head_factory=cls_head,
        prompt_insertion=PromptPrepend,
    )
