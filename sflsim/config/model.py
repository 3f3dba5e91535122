"""The scenario's ``model`` section: the backbone's registered name, its width multiplier
and, for a ViT, its sizes (no torch here: :mod:`sflsim.models` builds it)."""

from __future__ import annotations

import typing
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sflsim.config.schema_model import SchemaModel as _Model
from sflsim.inputs.quantities import FROZEN


class ModelConfig(_Model):
    """The backbone: a registered model name, a width multiplier and ViT sizes.

    The names and their stages and cut layers are listed in the documentation's
    "Models and their cut layers" page (``docs/reference/models.md``); torchvision's
    architectures are built by :mod:`sflsim.models.zoo`, ARES's VGG5 by
    :mod:`sflsim.models.vgg5`. The ViT fields are for ``name: vit`` only (``vit_b_16``
    has ViT-B/16's sizes); ``None`` means the builder's
    default (:data:`VIT_DEFAULTS`; ViT-B/16 is ``patch_size: 16, depth: 12,
    hidden_dim: 768, heads: 12, mlp_dim: 3072``).
    """

    model_config = FROZEN
    #: The backbone by name; its stages and cut layers: ``docs/reference/models.md``.
    name: Literal["hetero_splitee_resnet", "resnet18", "vit", "small_cnn", "resnet34", "resnet50",
                  "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
                  "shufflenet_v2_x1_0", "vgg11", "vit_b_16", "vgg5"] = "hetero_splitee_resnet"
    #: Channel multiplier (1.0 = the paper's widths); for a ViT it scales hidden_dim and mlp_dim.
    #: Must be 1.0 for resnet34, resnet50, shufflenet_v2_x1_0, vgg11 and vgg5 (no multiplier).
    width: float = Field(1.0, gt=0, le=4)
    #: ViT patch side in pixels; the image size must be a multiple of it.
    patch_size: int | None = Field(None, ge=1, le=1024)
    #: ViT encoder blocks (the model has depth + 1 stages).
    depth: int | None = Field(None, ge=1, le=1000)
    #: ViT token width before ``width``; a multiple of ``heads``.
    hidden_dim: int | None = Field(None, ge=1, le=65_536)
    #: ViT attention heads.
    heads: int | None = Field(None, ge=1, le=1024)
    #: ViT MLP width before ``width``; default 4 x hidden_dim.
    mlp_dim: int | None = Field(None, ge=1, le=262_144)

    VIT_FIELDS: ClassVar[tuple[str, ...]] = ("patch_size", "depth", "hidden_dim", "heads", "mlp_dim")
    #: Defaults of :func:`sflsim.models.vit.vit` (kept equal to it by a test; no torch here).
    VIT_DEFAULTS: ClassVar[dict[str, int]] = {"patch_size": 4, "depth": 6, "hidden_dim": 192,
                                               "heads": 3}

    #: Models without a width multiplier (kept equal to :data:`sflsim.models.zoo.FIXED_WIDTH`
    #: by a test; no torch here).
    FIXED_WIDTH: ClassVar[tuple[str, ...]] = ("resnet34", "resnet50", "shufflenet_v2_x1_0",
                                              "vgg11", "vgg5")

    @model_validator(mode="after")
    def _check_width(self) -> ModelConfig:
        if self.name in self.FIXED_WIDTH and self.width != 1.0:
            valid = [n for n in typing.get_args(type(self).model_fields["name"].annotation)
                     if n not in self.FIXED_WIDTH]
            raise ValueError(f"model.width: {self.width:g} is not valid with model.name "
                             f"{self.name}, which has no width multiplier; valid: 1.0, or a "
                             f"model with one: {', '.join(sorted(valid))}")
        return self

    @model_validator(mode="after")
    def _check_vit_fields(self) -> ModelConfig:
        given = [f for f in self.VIT_FIELDS if getattr(self, f) is not None]
        if given and self.name != "vit":
            raise ValueError(f"model.{given[0]} applies only to name: vit, not to {self.name}; "
                             f"remove {', '.join('model.' + f for f in given)}")
        hidden = self.hidden_dim or self.VIT_DEFAULTS["hidden_dim"]
        heads = self.heads or self.VIT_DEFAULTS["heads"]
        if self.name == "vit" and hidden % heads:
            raise ValueError(f"model.hidden_dim ({hidden}) must be divisible by model.heads "
                             f"({heads})")
        return self

    def builder_kwargs(self) -> dict[str, int]:
        """Extra keyword arguments of the model builder: the ViT fields that are set."""
        return {f: getattr(self, f) for f in self.VIT_FIELDS if getattr(self, f) is not None}
