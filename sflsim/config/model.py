"""The scenario's ``model`` section: the backbone's registered name, its width multiplier
and, for a ViT, its sizes (no torch here: :mod:`sflsim.models` builds it)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sflsim.config.base import SchemaModel as _Model
from sflsim.inputs.quantities import FROZEN


class ModelConfig(_Model):
    """The backbone: a registered model name, a width multiplier and ViT sizes.

    The ViT fields are for ``name: vit`` only; ``None`` means the builder's
    default (:data:`VIT_DEFAULTS`; ViT-B/16 is ``patch_size: 16, depth: 12,
    hidden_dim: 768, heads: 12, mlp_dim: 3072``).
    """

    model_config = FROZEN
    name: Literal["hetero_splitee_resnet", "resnet18", "vit", "small_cnn"] = "hetero_splitee_resnet"
    #: Channel multiplier (1.0 = the paper's widths); for a ViT it scales hidden_dim and mlp_dim.
    width: float = Field(1.0, gt=0, le=4)
    #: ViT patch side in pixels; the image size must be a multiple of it.
    patch_size: int | None = Field(None, ge=1)
    #: ViT encoder blocks (the model has depth + 1 stages).
    depth: int | None = Field(None, ge=1)
    #: ViT token width before ``width``; a multiple of ``heads``.
    hidden_dim: int | None = Field(None, ge=1)
    #: ViT attention heads.
    heads: int | None = Field(None, ge=1)
    #: ViT MLP width before ``width``; default 4 x hidden_dim.
    mlp_dim: int | None = Field(None, ge=1)

    VIT_FIELDS: ClassVar[tuple[str, ...]] = ("patch_size", "depth", "hidden_dim", "heads", "mlp_dim")
    #: Defaults of :func:`sflsim.models.vit.vit` (kept equal to it by a test; no torch here).
    VIT_DEFAULTS: ClassVar[dict[str, int]] = {"patch_size": 4, "depth": 6, "hidden_dim": 192,
                                               "heads": 3}

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
