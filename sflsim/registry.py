"""Name registries for what scenarios name in YAML (models, algorithms, partitioners).

Like torchvision's ``@register_model()``: a decorator that adds an entry under a
name and refuses a second entry with the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def registrar(registry: dict[str, T], kind: str) -> Callable[[str], Callable[[T], T]]:
    """A ``@register(name)`` decorator factory for ``registry``.

    Raises (from the decorator):
        ValueError: ``name`` is already registered.
    """

    def register(name: str) -> Callable[[T], T]:
        def wrap(entry: T) -> T:
            if name in registry:
                raise ValueError(f"{kind} {name!r} is already registered")
            registry[name] = entry
            return entry

        return wrap

    return register
