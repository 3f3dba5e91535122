"""What a checkpoint may name when it is unpickled, and nothing else.

A checkpoint (:mod:`sflsim.checkpoint`) pickles the run's object graph, so it names the
classes and functions that graph is rebuilt with; a checkpoint from someone else could
name ``os.system`` instead, and its checksum would not tell (it finds damage, not
forgery). :class:`CheckpointUnpickler` builds only:

- sflsim's own classes (defined in a module under ``sflsim.``, but for the modules that
  write files, start processes or drive the command line, :data:`NEVER_HELD`) and the
  functions of ``sflsim.models`` that build model parts (an exit head's factory);
- the classes, and functions, of the modules that registered the scenario's own
  algorithm, model or partitioner (``algorithm.module``, an entry point): imported
  already by the scenario, never imported here;
- what torch's ``weights_only`` unpickler builds (tensors, storages, dtypes, ``Size``,
  ``device``, the ``torch._utils._rebuild_*`` functions, and whatever
  ``torch.serialization.add_safe_globals`` added): the same table
  (``torch._weights_only_unpickler``), not a copy; and torch's random generator, the
  layers of ``torch.nn`` and torchvision (``nn.Module`` classes) and the
  ``torch.optim`` optimizers and learning-rate schedulers (classes only);
- numpy arrays, scalars, dtypes and random generators;
- data of the standard library: builtin containers and numbers, ``collections``'
  ``OrderedDict``, ``defaultdict``, ``deque`` and ``Counter``, ``datetime``'s types;
- ``getattr`` only as pickle uses it for a bound method of the run's algorithm (a split
  policy keeps the algorithm's estimate of a round's time): a public method of an
  :class:`~sflsim.algorithms.base.Algorithm`, nothing else.

Anything else (``os.system``, ``builtins.eval``, ``subprocess.Popen``, an sflsim
function that writes files) raises :class:`~sflsim.inputs.pickles.ForbiddenGlobal`
before it is imported or called. The list was taken from the checkpoints of every
algorithm, model and network sflsim ships; a class a new feature keeps in the run's
state is covered by the rules above, and a run that keeps something they leave out is
refused on resume by name (the resume tests of every algorithm find it).
"""

from __future__ import annotations

import collections
import datetime
import functools
import importlib
import inspect
import sys
from collections.abc import Callable

from sflsim.inputs.pickles import AllowlistUnpickler, ForbiddenGlobal, builtin

#: builtins a checkpoint holds: data (containers and numbers), never ``eval`` or ``open``
BUILTIN_DATA = frozenset({"dict", "list", "tuple", "set", "frozenset", "int", "float",
                          "complex", "str", "bytes", "bytearray", "bool", "slice", "range"})
#: standard-library data types a checkpoint holds, by dotted name
LIBRARY_DATA: dict[str, object] = {
    f"{kind.__module__}.{kind.__name__}": kind
    for kind in (collections.OrderedDict, collections.defaultdict, collections.deque,
                 collections.Counter, datetime.datetime, datetime.date, datetime.time,
                 datetime.timedelta, datetime.timezone)}
#: sflsim modules (and their submodules) whose classes no checkpoint holds: they write
#: result files, start worker processes or drive the command line
NEVER_HELD = ("sflsim.cli", "sflsim.metrics", "sflsim.sweep", "sflsim.plots",
              "sflsim.execution.workers", "sflsim.execution.worker_process",
              "sflsim.execution.ray_workers",
              "sflsim.__main__", "sflsim.signals", "sflsim.threads")
#: the sflsim functions a checkpoint holds outside ``sflsim.models``
SFLSIM_FUNCTIONS = frozenset({"sflsim.checkpoint._cpu_storage"})


class CheckpointUnpickler(AllowlistUnpickler):
    """An unpickler that builds what a checkpoint holds (module docstring) and refuses
    everything else by name (:class:`~sflsim.inputs.pickles.ForbiddenGlobal`)."""

    def allowed(self, module: str, name: str) -> object | None:
        full = f"{module}.{name}"
        if module == "builtins":
            return _method_of_algorithm if name == "getattr" else builtin(
                module, name, BUILTIN_DATA)
        for table in (LIBRARY_DATA, _torch_globals(), _torch_user_globals(), _numpy_globals()):
            if full in table:
                return table[full]
        top = module.split(".")[0]
        if top == "sflsim":
            return _sflsim_object(module, name)
        if top in ("torch", "torchvision"):
            return _torch_class(module, name)
        if top == "numpy":
            return None
        return _user_object(module, name)


def _defined_in(module: str, name: str, *, load: bool) -> object | None:
    """``module.name`` if it is a class or function defined in ``module`` itself (not
    imported into it: ``sflsim.x.Path`` is pathlib's, ``sflsim.x.os`` a module); the
    module is imported when ``load`` and not imported yet."""
    found = sys.modules.get(module)
    if found is None and load:
        try:
            found = importlib.import_module(module)
        except ImportError:
            return None
    obj = getattr(found, name, None)
    if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == module:
        return obj
    return None


def _sflsim_object(module: str, name: str) -> object | None:
    """An sflsim class (not of :data:`NEVER_HELD`), a function of ``sflsim.models`` or
    one of :data:`SFLSIM_FUNCTIONS`."""
    if any(module == m or module.startswith(m + ".") for m in NEVER_HELD):
        return None
    obj = _defined_in(module, name, load=True)
    if inspect.isclass(obj):
        return obj
    if obj is not None and (module.startswith("sflsim.models.")
                            or f"{module}.{name}" in SFLSIM_FUNCTIONS):
        return obj
    return None


def _user_object(module: str, name: str) -> object | None:
    """A class or function of a module that registered the scenario's own algorithm,
    model or partitioner (or of a submodule of one), already imported."""
    modules = _user_modules()
    if not any(module == m or module.startswith(m + ".") for m in modules):
        return None
    return _defined_in(module, name, load=False)


def _user_modules() -> set[str]:
    """The modules outside sflsim that registered an algorithm, its configuration, a
    model or a partitioner (those a scenario's ``algorithm.module`` or an entry point
    imported)."""
    from sflsim.algorithms.base import ALGORITHMS
    from sflsim.config.algorithms import ALGORITHM_CONFIGS, CONFIG_MODULES
    from sflsim.data.partition import PARTITIONERS
    from sflsim.models.registry import MODELS

    entries = [*ALGORITHMS.values(), *ALGORITHM_CONFIGS.values(), *MODELS.values(),
               *PARTITIONERS.values()]
    names = {*CONFIG_MODULES.values(), *(getattr(e, "__module__", "") or "" for e in entries)}
    return {m for m in names if m and m != "sflsim" and not m.startswith("sflsim.")}


@functools.cache
def _torch_globals() -> dict[str, object]:
    """torch's ``weights_only`` table (tensors, storages, dtypes, the rebuild functions),
    with what ``torch.serialization.add_safe_globals`` added, and torch's generator."""
    import torch

    table: dict[str, object] = {"torch.Generator": torch.Generator,
                                "torch._C.Generator": torch.Generator}
    try:
        from torch import _weights_only_unpickler as weights_only
    except ImportError:  # pragma: no cover (torch >= 2.2 has it)
        return table
    table.update(weights_only._get_allowed_globals())
    return table


def _torch_user_globals() -> dict[str, object]:
    """What ``torch.serialization.add_safe_globals`` added (read at each look-up)."""
    try:
        from torch import _weights_only_unpickler as weights_only

        return weights_only._get_user_allowed_globals()
    except (ImportError, AttributeError):  # pragma: no cover (torch < 2.4)
        return {}


def _torch_class(module: str, name: str) -> object | None:
    """A ``torch.nn`` or torchvision module class (``nn.Module``), a ``torch.optim``
    optimizer or learning-rate scheduler."""
    import torch

    families: tuple[tuple[str, tuple[type, ...]], ...] = (
        ("torch.nn.", (torch.nn.Module,)), ("torchvision.", (torch.nn.Module,)),
        ("torch.optim.", (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)))
    for prefix, bases in families:
        if module.startswith(prefix):
            obj = _defined_in(module, name, load=True)
            return obj if inspect.isclass(obj) and issubclass(obj, bases) else None
    return None


@functools.cache
def _numpy_globals() -> dict[str, object]:
    """numpy's arrays, scalars, dtypes and random generators, by the names their
    pickles give (numpy 1's ``numpy.core`` and numpy 2's ``numpy._core`` alike)."""
    import numpy as np
    import numpy.random._pickle as random_pickle
    from numpy.random import bit_generator

    try:
        import numpy._core as core
    except ImportError:  # pragma: no cover (numpy < 2)
        import numpy.core as core  # type: ignore[no-redef]
    table: dict[str, object] = {"numpy.dtype": np.dtype, "numpy.ndarray": np.ndarray}
    for prefix in ("numpy._core", "numpy.core"):
        table[f"{prefix}.multiarray._reconstruct"] = core.multiarray._reconstruct
        table[f"{prefix}.multiarray.scalar"] = core.multiarray.scalar
        table[f"{prefix}.numeric._frombuffer"] = core.numeric._frombuffer
    for ctor in ("__generator_ctor", "__bit_generator_ctor", "__randomstate_ctor"):
        if hasattr(random_pickle, ctor):
            table[f"numpy.random._pickle.{ctor}"] = getattr(random_pickle, ctor)
    for kind in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox,
                 np.random.SFC64, np.random.Generator, np.random.RandomState,
                 bit_generator.SeedSequence):
        table[f"{kind.__module__}.{kind.__name__}"] = kind
    unpickle_seed = getattr(bit_generator, "__pyx_unpickle_SeedSequence", None)
    if unpickle_seed is not None:
        table["numpy.random.bit_generator.__pyx_unpickle_SeedSequence"] = unpickle_seed
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25: a class per dtype
    for kind_name in dir(dtypes) if dtypes is not None else ():
        kind = getattr(dtypes, kind_name)
        if inspect.isclass(kind) and issubclass(kind, np.dtype):
            table[f"numpy.dtypes.{kind_name}"] = kind
    return table


def _method_of_algorithm(obj: object, name: object) -> Callable:
    """``getattr`` as a checkpoint uses it: the bound method ``obj.name`` when ``obj`` is
    the run's algorithm and ``name`` one of its public methods.

    Raises:
        ForbiddenGlobal: anything else (``getattr(f, '__globals__')``, a method of a
            path or of a class).
    """
    from sflsim.algorithms.base import Algorithm

    shown = f"builtins.getattr({type(obj).__name__}, {name!r})"
    if not (isinstance(obj, Algorithm) and isinstance(name, str) and name.isidentifier()
            and not name.startswith("_")):
        raise ForbiddenGlobal(shown)
    method = getattr(obj, name, None)
    if not (inspect.ismethod(method) and method.__self__ is obj):
        raise ForbiddenGlobal(shown)
    return method
