"""Datasets (embedded Fashion-MNIST subset and user-supplied files) and partitioners.

The names below load on first use (PEP 562), so that :mod:`sflsim.data.presence`, which
tells a missing dataset before torch loads, imports without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# the partitioners need no torch; imported here so that the function ``partition``, not
# the module of that name, is ``sflsim.data.partition``
from sflsim.data.partition import label_skew, partition

_EXPORTS = {"DATASETS": "sflsim.data.datasets", "load_dataset": "sflsim.data.datasets",
            "DatasetSplit": "sflsim.data.split"}

__all__ = ["DATASETS", "DatasetSplit", "label_skew", "load_dataset", "partition"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sflsim.data' has no attribute {name!r}")
