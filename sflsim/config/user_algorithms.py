"""Algorithms of one's own: found through ``algorithm.module`` or the ``sflsim.algorithms``
entry points, imported before a scenario's ``algorithm`` mapping is validated.

A user's module registers its algorithm as the built-in ones are registered: the
class with ``@register_algorithm("my_method")`` (:mod:`sflsim.algorithms.base`), its
configuration with ``@register_algorithm_config``
(:mod:`sflsim.config.algorithms`). sflsim finds the module in one of two ways:

- ``algorithm.module: my_package.my_method`` in the scenario: imported with
  :func:`importlib.import_module`, so it must be on Python's import path
  (``PYTHONPATH``, an installed package);
- an entry point of an installed distribution in the group ``sflsim.algorithms``, named
  after the algorithm, whose value is the module (``my_method = my_package.my_method``
  under ``[project.entry-points."sflsim.algorithms"]`` in its ``pyproject.toml``):
  loaded when a scenario names an algorithm that is not registered, and to list the
  algorithms (:func:`available_algorithms`).

Every problem (no such module, a module that registers nothing, a name taken by
another algorithm, an exception while importing) becomes one message naming the field,
the value and what to do (:func:`prepare`); what a failed import registered is
forgotten again.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import sflsim.config.algorithms as _registry
from sflsim.config.algorithms import ALGORITHM_CONFIGS, CONFIG_MODULES, IMPORTING, is_builtin
from sflsim.name_registry import DuplicateNameError

#: The entry-point group scanned for algorithms.
ENTRY_POINT_GROUP = "sflsim.algorithms"

_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: module -> "entry point NAME = VALUE of DIST VERSION" for modules imported through one
_ENTRY_POINT_MODULES: dict[str, str] = {}
#: (entry point name, value) -> the problem loading it, or None once loaded
_LOADED: dict[tuple[str, str], str | None] = {}


def _algorithm_classes() -> dict[str, type]:
    """The registry of algorithm classes if something imported it (it needs torch; a
    module that registers an algorithm has imported it), else nothing."""
    base = sys.modules.get("sflsim.algorithms.base")
    return getattr(base, "ALGORITHMS", {}) if base is not None else {}


def prepare(mapping: dict) -> tuple[str, str] | None:
    """Import what an ``algorithm`` mapping needs before it is validated.

    Imports ``mapping["module"]`` if given, then, for a ``name`` that is not
    registered, the entry points (:func:`load_entry_points`).

    Returns:
        None when the mapping can be validated; else ``(field, message)``: the field
        of the mapping in error (``module`` or ``name``) and what is wrong with it.
        An unknown name is left to validation, which lists the valid ones.
    """
    module = mapping.get("module")
    if isinstance(module, str):
        problem = import_algorithm_module(module)
        if problem is not None:
            return "module", problem
    name = mapping.get("name")
    if not isinstance(name, str):
        return None
    if name not in ALGORITHM_CONFIGS:
        problem = load_entry_points(name)
        if problem is not None:
            return "name", problem
    classes = _algorithm_classes()
    if name not in ALGORITHM_CONFIGS and name in classes:
        return "name", (f"{name!r} is registered as an algorithm ({_qualname(classes[name])}) "
                        f"but has no configuration; register one with "
                        f"@register_algorithm_config: a subclass of AlgorithmConfig with "
                        f"name: Literal[{name!r}]")
    if name in ALGORITHM_CONFIGS and not is_builtin(name) and name not in classes:
        return "name", (f"{name!r} has a configuration ({_qualname(ALGORITHM_CONFIGS[name])}) "
                        f"but no algorithm; register an Algorithm subclass with "
                        f"@register_algorithm({name!r}) (sflsim.algorithms)")
    return None


def import_algorithm_module(module: str) -> str | None:
    """Import ``module`` (a dotted name) for its registrations; None when it is imported
    and registers at least one algorithm configuration, else what went wrong.

    What the module registered before an exception ended its import is forgotten, so
    that a second try starts afresh.
    """
    if not _MODULE_NAME.fullmatch(module):
        stem = Path(module).stem if module.endswith(".py") or "/" in module else None
        hint = (f"; for the file {module} write module: {stem} and put its folder on "
                f"PYTHONPATH" if stem and _MODULE_NAME.fullmatch(stem) else "")
        return (f"{module!r} is not a Python module name: expected a dotted name such as "
                f"my_package.my_method, found on Python's import path{hint}")
    configs, classes = dict(ALGORITHM_CONFIGS), dict(_algorithm_classes())
    IMPORTING.append(module)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        _forget(configs, classes)
        missing = exc.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):
            top = module.split(".")[0]
            return (f"no module named {module!r} on Python's import path; put the folder "
                    f"that holds {top}.py (or the package {top}/) on PYTHONPATH, e.g. "
                    f"PYTHONPATH=examples, or install the package")
        return (f"importing {module!r} failed: it imports {missing!r}, which is not "
                f"installed ({exc})")
    except DuplicateNameError as exc:
        _forget(configs, classes)
        whose = "built in" if is_builtin(exc.name) or _builtin_class(exc.existing) else (
            f"registered by {CONFIG_MODULES.get(exc.name) or getattr(exc.existing, '__module__', '?')}")
        return (f"{module!r} registers {exc.kind} {exc.name!r}, a name already taken "
                f"({whose}); give its algorithm and configuration another name")
    except Exception as exc:  # noqa: BLE001  (a user's module: any error is told, once)
        _forget(configs, classes)
        # a SyntaxError's text already ends "(file, line N)"; _where says it once
        text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else exc
        return f"importing {module!r} raised {type(exc).__name__}: {text}{_where(exc)}"
    finally:
        IMPORTING.pop()
    registered = attributed(module)
    if not registered:
        # what the import registered (a class made by type() under ABCMeta says its module
        # is 'abc', so its __module__ cannot tell)
        made = [n for n in _algorithm_classes() if n not in classes]
        what = (f"algorithm {made[0]!r} but no configuration for it" if made
                else "no algorithm configuration")
        return (f"{module!r} ({module_file(module)}) registers {what}; decorate a subclass of "
                f"AlgorithmConfig (name: Literal['my_method']) with @register_algorithm_config "
                f"and the Algorithm subclass with @register_algorithm('my_method')")
    for name, cls in _algorithm_classes().items():
        if name not in classes and not _by_reference(cls):
            _forget(configs, classes)
            return (f"{module!r} ({module_file(module)}) registers algorithm {name!r} as the "
                    f"class {cls.__qualname__!r}, which cannot be found as "
                    f"{cls.__module__}.{cls.__qualname__}: a run's checkpoints keep the "
                    f"algorithm by reference to its class; define it with a class statement "
                    f"at the top level of {module!r} (not inside a function, nor made by "
                    f"type())")
    return None


def _by_reference(cls: type) -> bool:
    """Whether ``cls`` is found again as ``<its module>.<its qualified name>``, as pickle
    finds a class (a class made by ``type()`` under ``ABCMeta`` says its module is
    ``abc``; one defined inside a function has ``<locals>`` in its name)."""
    found: object = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is cls


def attributed(module: str) -> list[str]:
    """Algorithm names whose configuration is attributed to ``module`` or a submodule."""
    return [n for n, m in CONFIG_MODULES.items() if _belongs(m, module)]


def _belongs(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def _builtin_class(entry: object) -> bool:
    return str(getattr(entry, "__module__", "")).startswith("sflsim.")


def _forget(configs: dict, classes: dict) -> None:
    """Undo the registrations made since the registries held ``configs`` and ``classes``."""
    for name in [n for n in ALGORITHM_CONFIGS if n not in configs]:
        _registry.unregister_algorithm_config(name)
    registry = _algorithm_classes()
    for name in [n for n in registry if n not in classes]:
        del registry[name]


def _where(exc: BaseException) -> str:
    """`` (file:line)``: where ``exc`` was raised in the user's code (the innermost frame
    outside Python's import machinery, pydantic and sflsim), or ``""``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({_shown(exc.filename)}:{exc.lineno})"
    skip = tuple(str(Path(m.__file__).parent) + os.sep for m in _library_modules())
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and not f.filename.startswith(skip)]
    return f" ({_shown(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""


def _library_modules() -> list:
    import importlib as _importlib

    import pydantic

    import sflsim

    return [m for m in (_importlib, pydantic, sflsim) if getattr(m, "__file__", None)]


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def module_file(module: str) -> str:
    """The file an imported ``module`` came from, shown relative to the working directory
    when under it; ``"not imported"`` otherwise."""
    file = getattr(sys.modules.get(module), "__file__", None)
    return _shown(file) if file else "not imported"


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# ----------------------------------------------------------------- entry points


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _describe(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    of = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {ep.name} = {ep.value}{of}"


def _load(ep: importlib.metadata.EntryPoint) -> str | None:
    """Import the module of ``ep`` once; the problem, or None."""
    key = (ep.name, ep.value)
    if key not in _LOADED:
        problem = import_algorithm_module(ep.module)
        if problem is None and ep.attr:
            try:
                ep.load()
            except AttributeError as exc:
                problem = str(exc)
        if problem is None:
            _ENTRY_POINT_MODULES.setdefault(ep.module, _describe(ep))
        _LOADED[key] = problem
    return _LOADED[key]


def load_entry_points(name: str) -> str | None:
    """Load the entry points named ``name`` (its algorithm, by convention), then, if
    ``name`` is still unknown, every other one, so that the list of valid names is
    complete; what fails among those others is told by :func:`available_algorithms`.

    Returns:
        The problem with an entry point named ``name`` (it fails to import, or imports
        but registers no algorithm ``name``), else None.
    """
    points = _entry_points()
    for ep in (p for p in points if p.name == name):
        problem = _load(ep)
        if problem is not None:
            return f"{name!r} comes from the {_describe(ep)}, which fails: {problem}"
        if name not in ALGORITHM_CONFIGS:
            return (f"{name!r} comes from the {_describe(ep)}, whose module registers "
                    f"{', '.join(map(repr, attributed(ep.module)))} but no algorithm {name!r}")
    if name not in ALGORITHM_CONFIGS:
        for ep in points:
            _load(ep)
    return None


# ----------------------------------------------------------------- listing


@dataclass(frozen=True)
class AlgorithmInfo:
    """One algorithm a scenario can name (a row of ``sflsim validate --algorithms``).

    Attributes:
        name: the ``algorithm.name`` to write.
        source: where it comes from: ``built in``, ``module M, FILE`` or ``entry point
            NAME = VALUE of DIST VERSION`` (as in ``entry_points.txt``).
        capabilities: what it supports (keys of
            :data:`~sflsim.config.algorithms.CAPABILITIES`).
        problem: why an entry point could not be loaded ("" when it was).
    """

    name: str
    source: str
    capabilities: frozenset[str] = frozenset()
    problem: str = ""


def source_of(name: str) -> str:
    """Where the registered algorithm ``name`` comes from (:attr:`AlgorithmInfo.source`)."""
    if is_builtin(name):
        return "built in"
    module = CONFIG_MODULES.get(name, "")
    for entry_module, described in _ENTRY_POINT_MODULES.items():
        if _belongs(module, entry_module):
            return described
    return f"module {module}, {module_file(module)}"


def available_algorithms() -> list[AlgorithmInfo]:
    """Every algorithm a scenario can name, in order of registration (built-in first),
    after loading the entry points; then each entry point that failed to load, with
    its problem."""
    failed = [(ep, problem) for ep in _entry_points() if (problem := _load(ep)) is not None]
    rows = [AlgorithmInfo(name, source_of(name), frozenset(cls.capabilities_of(name)))
            for name, cls in ALGORITHM_CONFIGS.items()]
    rows += [AlgorithmInfo(ep.name, _describe(ep), problem=problem) for ep, problem in failed]
    return rows
