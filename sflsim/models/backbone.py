"""A backbone as an ordered list of named stages, split at a cut layer by slicing.

A cut layer ``l`` is a stage boundary (sflsim's one name for it: ``cut_layer`` in code
and tables; a scenario's device group gives its clients' first one as ``end_layer``, the
Hetero-SplitEE paper's term, where the client-side model ends): the client-side model runs
stages ``1..l``, the server-side model runs stages ``l+1..L`` and the output
layer. Every client-side prefix can carry an exit head (for CNNs pool + flatten +
linear, as in Hetero-SplitEE, arXiv 2512.09313, Table I "Client OutputLayer";
each backbone may bring its own, e.g. LayerNorm + CLS token + linear for a ViT).
A client-side prefix can also carry client-private prompt tokens
(:mod:`sflsim.models.prompts`), inserted right after stage 1.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from sflsim.models.prompts import PromptInjection, PromptTokens
from sflsim.text import valid_range


def output_head(in_channels: int, num_classes: int) -> nn.Sequential:
    """Pool + flatten + linear: ``(B, C, H, W) -> (B, num_classes)`` logits."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes))


@dataclass
class StagedBackbone:
    """Stages of a network plus the metadata needed to split it.

    Attributes:
        name: registry name of the backbone.
        stages: the ``L`` stages in order; stage ``k`` (1-based) is ``stages[k-1]``.
        stage_channels: output channels (CNN) or token width (ViT) of each stage,
            length ``L``.
        num_classes: width of the output layers.
        input_shape: per-sample input shape ``(C, H, W)``.
        head: the server output layer ``activations after stage L -> (B, num_classes)``.
        seed: initialisation seed; exit heads are drawn from it too.
        exit_head_factory: ``(stage output dim, num_classes) -> exit head``; the
            default is :func:`output_head` (CNN feature maps).
        prompt_insertion: ``PromptTokens -> module`` put after stage 1 by
            :meth:`client_model`; the default injects prompts into a feature map.
    """

    name: str
    stages: nn.ModuleList
    stage_channels: list[int]
    num_classes: int
    input_shape: tuple[int, int, int]
    head: nn.Module
    seed: int = 0
    exit_head_factory: Callable[[int, int], nn.Module] = output_head
    prompt_insertion: Callable[[PromptTokens], nn.Module] = PromptInjection

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def prompt_dim(self) -> int:
        """Dimension ``d`` of prompt tokens for this backbone (the output dim of stage 1)."""
        return self.stage_channels[0]

    def stage_output_dim(self, end_layer: int) -> int:
        """Channels (CNN) or token width (ViT) of the activations after ``end_layer``."""
        return self.stage_channels[end_layer - 1]

    def check_end_layer(self, end_layer: int) -> None:
        """Raise ValueError unless ``1 <= end_layer < L`` (the server needs a stage)."""
        if not 1 <= end_layer < self.num_stages:
            raise ValueError(
                f"end layer {end_layer} is outside this {self.num_stages}-stage model; "
                f"{valid_range('end layer', 1, self.num_stages - 1)}"
            )

    def client_model(self, end_layer: int, prompts: PromptTokens | None = None) -> nn.Sequential:
        """A copy of stages ``1..end_layer``: ``(B, C, H, W) -> activations``.

        Args:
            end_layer: the cut layer.
            prompts: client-private prompt tokens; when given, a prompt-insertion
                module holding them (by reference, not copied) is placed right
                after stage 1, under the name ``"prompts"``. The stages keep the
                names ``"0"``, ``"1"``, ... they have without prompts, so their
                ``state_dict`` keys match a prompt-free client model.

        Raises:
            ValueError: ``end_layer`` is not a valid cut layer, or the prompt
                dimension is not :attr:`prompt_dim`.
        """
        self.check_end_layer(end_layer)
        stages = copy.deepcopy(list(self.stages[:end_layer]))
        if prompts is None:
            return nn.Sequential(*stages)
        if prompts.dim != self.prompt_dim:
            raise ValueError(f"prompt tokens of dimension {prompts.dim} do not fit {self.name}, "
                             f"whose stage 1 outputs dimension {self.prompt_dim}")
        children = [("0", stages[0]), ("prompts", self.prompt_insertion(prompts))]
        children += [(str(k), stage) for k, stage in enumerate(stages) if k > 0]
        return nn.Sequential(OrderedDict(children))

    def exit_head(self, end_layer: int) -> nn.Module:
        """The exit head for activations after ``end_layer``; the same weights for
        every call with the same end layer (seeded from ``seed`` and ``end_layer``), on the
        device of the backbone's stages (initialised on the CPU, so every device starts
        from the same weights)."""
        # drawn once per end layer and copied after (seeding torch costs ~3 ms a call, as
        # it seeds every accelerator too: 1,000 clients took seconds)
        drawn = self.__dict__.setdefault("_drawn_exit_heads", {})
        if end_layer not in drawn:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed * 1000 + end_layer)
                drawn[end_layer] = self.exit_head_factory(self.stage_output_dim(end_layer),
                                                          self.num_classes)
        head = copy.deepcopy(drawn[end_layer])
        param = next(self.stages.parameters(), None)
        return head if param is None else head.to(param.device)

    def server_model(self, end_layer: int) -> nn.Sequential:
        """Copies of stages ``end_layer+1..L`` followed by a copy of the output layer.

        The returned Sequential's child ``k`` (0-based) is stage ``end_layer+1+k``;
        the last child is the server output layer.
        """
        self.check_end_layer(end_layer)
        return nn.Sequential(*copy.deepcopy([*self.stages[end_layer:], self.head]))
