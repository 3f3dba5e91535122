"""Backbones as ordered stages, split at a cut layer, with exit heads and a cost table."""

from sflsim.models import resnet as _resnet  # noqa: F401  (registers the backbones)
from sflsim.models import resnet18 as _resnet18  # noqa: F401
from sflsim.models import small_cnn as _small_cnn  # noqa: F401
from sflsim.models import vgg5 as _vgg5  # noqa: F401
from sflsim.models import vit as _vit  # noqa: F401
from sflsim.models import zoo as _zoo  # noqa: F401
from sflsim.models.backbone import StagedBackbone
from sflsim.models.prompts import PromptTokens
from sflsim.models.registry import MODELS

__all__ = ["MODELS", "PromptTokens", "StagedBackbone"]
