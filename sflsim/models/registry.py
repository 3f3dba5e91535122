"""Registry of backbones that can be named in a scenario (``model.name``)."""

from __future__ import annotations

from collections.abc import Callable

from sflsim.name_registry import registrar

MODELS: dict[str, Callable] = {}

#: ``@register_model(name)``: register a backbone builder; a second use of a name raises.
register_model = registrar(MODELS, "model")
