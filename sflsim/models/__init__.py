"""Backbones as ordered stages, split at a cut layer, with exit heads and a cost table."""

from sflsim.models import resnet as _resnet  # noqa: F401  (registers the backbone)
from sflsim.models.backbone import StagedBackbone, output_head
from sflsim.models.registry import MODELS, register_model

__all__ = ["MODELS", "StagedBackbone", "output_head", "register_model"]
