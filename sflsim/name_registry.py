"""Name registries for what scenarios name in YAML (models, algorithms, partitioners).

Like torchvision's ``@register_model()``: a decorator that adds an entry under a
name and refuses a second entry with the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class DuplicateNameError(ValueError):
    """A second entry under a name a registry already holds.

    Attributes:
        kind: what the registry holds ("algorithm", "model", ...).
        name: the name asked for.
        existing: the entry registered first.
    """

    def __init__(self, kind: str, name: str, existing: object):
        self.kind, self.name, self.existing = kind, name, existing
        where = getattr(existing, "__module__", None)
        qualname = getattr(existing, "__qualname__", None)
        origin = f" ({where}.{qualname})" if where and qualname else ""
        super().__init__(f"{kind} {name!r} is already registered{origin}; choose another name")


def registrar(registry: dict[str, T], kind: str,
              check: Callable[[str, T], None] | None = None) -> Callable[[str], Callable[[T], T]]:
    """A ``@register(name)`` decorator factory for ``registry``; ``check(name, entry)``,
    if given, raises on an entry the registry cannot use.

    Raises (from the decorator):
        DuplicateNameError: ``name`` is already registered (a ``ValueError``).
        TypeError: what ``check`` raises.
    """

    def register(name: str) -> Callable[[T], T]:
        def wrap(entry: T) -> T:
            if name in registry:
                raise DuplicateNameError(kind, name, registry[name])
            if check is not None:
                check(name, entry)
            registry[name] = entry
            return entry

        return wrap

    return register
