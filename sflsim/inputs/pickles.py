"""Pickles read with only the classes and functions a file of their kind holds.

A pickle names the classes and functions it is rebuilt with, and unpickling calls them:
a pickle from someone else can name ``os.system`` and run any command the moment it is
loaded (the Python documentation's warning on :mod:`pickle`). :class:`AllowlistUnpickler`
looks a name up only when its :meth:`~AllowlistUnpickler.allowed` says a file of its kind
holds it, and refuses any other by name (:class:`ForbiddenGlobal`) before it is imported
or called. Its readers:

- FedScale's traces (:mod:`sflsim.fedscale`) and a checkpoint's header
  (:mod:`sflsim.resume`): plain builtin containers and numbers (:data:`PLAIN`), the
  default;
- a checkpoint (:mod:`sflsim.checkpoint`): sflsim's own classes, torch tensors, modules
  and optimizers, numpy arrays and generators, and data types of the standard library.
"""

from __future__ import annotations

import builtins
import pickle

#: builtins that are plain data: containers and numbers (nothing that runs or imports)
PLAIN = frozenset({"dict", "list", "tuple", "set", "frozenset", "int", "float", "str",
                   "bool", "bytes", "complex"})


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle names a class or function its reader does not build.

    Attributes:
        name: what the pickle names, as a dotted name (``posix.system``).
    """

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class AllowlistUnpickler(pickle.Unpickler):
    """An unpickler that builds only what :meth:`allowed` returns; any other class or
    function named in the pickle (``os.system``, ``builtins.eval``, a name reached through
    another, ``sflsim.x.os.system``) raises :class:`ForbiddenGlobal` before anything is
    looked up, and a name that is no Python name at all (a text file read as pickle
    opcodes) raises :class:`pickle.UnpicklingError`."""

    def allowed(self, module: str, name: str) -> object | None:
        """The object ``module.name`` when a file of this kind holds it, else None
        (refused). ``name`` is one Python name (no dots). Default: :data:`PLAIN`."""
        return builtin(module, name, PLAIN)

    def find_class(self, module: str, name: str) -> object:
        if not all(part.isidentifier() for part in (*module.split("."), *name.split("."))):
            raise pickle.UnpicklingError(f"no class or function is named {module!r}.{name!r}")
        found = None if "." in name else self.allowed(module, name)
        if found is None:
            raise ForbiddenGlobal(f"{module}.{name}")
        return found


def builtin(module: str, name: str, allowed: frozenset[str]) -> object | None:
    """The builtin ``name`` if ``module`` is ``builtins`` and ``name`` is in ``allowed``,
    else None."""
    return getattr(builtins, name) if module == "builtins" and name in allowed else None
