"""Registry of backbones that can be named in a scenario (``model.name``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

MODELS: dict[str, Callable] = {}


def register_model(name: str) -> Callable[[F], F]:
    """Register a backbone builder under ``name``; a second use of a name raises."""

    def wrap(builder: F) -> F:
        if name in MODELS:
            raise ValueError(f"model {name!r} is already registered")
        MODELS[name] = builder
        return builder

    return wrap
