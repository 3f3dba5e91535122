"""A backbone as an ordered list of named stages, split at a cut layer by slicing.

A cut layer (end layer) ``l`` is a stage boundary: the client-side model runs
stages ``1..l``, the server-side model runs stages ``l+1..L`` and the output
layer. Every client-side prefix can carry an exit head (pool + flatten +
linear), as in Hetero-SplitEE (arXiv 2512.09313, Table I "Client OutputLayer").
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn


def output_head(in_channels: int, num_classes: int) -> nn.Sequential:
    """Pool + flatten + linear: ``(B, C, H, W) -> (B, num_classes)`` logits."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes))


@dataclass
class StagedBackbone:
    """Stages of a network plus the metadata needed to split it.

    Attributes:
        name: registry name of the backbone.
        stages: the ``L`` stages in order; stage ``k`` (1-based) is ``stages[k-1]``.
        stage_channels: output channels of each stage, length ``L``.
        num_classes: width of the output layers.
        input_shape: per-sample input shape ``(C, H, W)``.
        head: the server output layer ``(B, C_L, H, W) -> (B, num_classes)``.
        seed: initialisation seed; exit heads are drawn from it too.
    """

    name: str
    stages: nn.ModuleList
    stage_channels: list[int]
    num_classes: int
    input_shape: tuple[int, int, int]
    head: nn.Module
    seed: int = 0

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def check_end_layer(self, end_layer: int) -> None:
        """Raise ValueError unless ``1 <= end_layer < L`` (the server needs a stage)."""
        if not 1 <= end_layer < self.num_stages:
            raise ValueError(
                f"end layer {end_layer} is outside this {self.num_stages}-stage model; "
                f"valid end layers are 1 to {self.num_stages - 1}"
            )

    def client_model(self, end_layer: int) -> nn.Sequential:
        """A copy of stages ``1..end_layer``: ``(B, C, H, W) -> activations``."""
        self.check_end_layer(end_layer)
        return nn.Sequential(*copy.deepcopy(list(self.stages[:end_layer])))

    def exit_head(self, end_layer: int) -> nn.Sequential:
        """The exit head for activations after ``end_layer``; the same weights for
        every call with the same end layer (seeded from ``seed`` and ``end_layer``)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed * 1000 + end_layer)
            return output_head(self.stage_channels[end_layer - 1], self.num_classes)

    def server_model(self, end_layer: int) -> nn.Sequential:
        """Copies of stages ``end_layer+1..L`` followed by a copy of the output layer.

        The returned Sequential's child ``k`` (0-based) is stage ``end_layer+1+k``;
        the last child is the server output layer.
        """
        self.check_end_layer(end_layer)
        return nn.Sequential(*copy.deepcopy([*self.stages[end_layer:], self.head]))
