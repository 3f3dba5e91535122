"""Algorithm configurations: their base class, the registry of names, what each supports.

A scenario's ``algorithm`` mapping is validated by the configuration class registered
under its ``name``: a discriminated union on ``name`` that stays open, so that a class
registered at run time joins it. The built-in classes (:mod:`sflsim.config.schema`)
and a user's are registered the same way, with :func:`register_algorithm_config`;
a user's module is found through ``algorithm.module`` or the ``sflsim.algorithms``
entry points (:mod:`sflsim.config.user_algorithms`), before the mapping is validated.

What an algorithm supports beyond a trained run on the CPU is data on its
configuration class (:attr:`AlgorithmConfig.capabilities`, :data:`CAPABILITIES`): a
scenario that asks for something its algorithm does not list is refused, naming the
setting and the algorithms that have it (:func:`algorithms_with`).

No torch here: scenarios are checked before torch is imported.
"""

from __future__ import annotations

import functools
import re
import typing
from typing import Annotated, ClassVar, Literal, TypeVar, Union

from pydantic import Field, TypeAdapter

from sflsim.config.schema_model import SchemaModel
from sflsim.name_registry import DuplicateNameError

#: What an algorithm can declare in :attr:`AlgorithmConfig.capabilities`, and what each
#: lets a scenario ask for. A scenario asking for one its algorithm lacks is refused.
CAPABILITIES: dict[str, str] = {
    "timing_only": "training.timing_only (--no-train): the simulated timeline does not "
                   "depend on what training computes, so a run without torch steps gives the "
                   "trained run's events",
    "fuse_clients": "training.fuse_clients: the clients' client-side steps (client-side model "
                    "and exit head on the local loss, with a proximal term from proximal() but "
                    "no penalty() of its own) may be fused across clients",
    "parallel_clients": "training.parallel_clients > 1: a client's steps within a round depend "
                        "only on its own model, optimizer and batches, so clients may train "
                        "ahead of the simulated round on host threads",
    "parallel_processes": "training.parallel_backend: processes or ray: the clients' local "
                          "training is FedAvg's whole-model step (FedAvg.start_in_workers: its "
                          "sgd_step, train_batch, penalty, local_optimizer and round_optimizer), "
                          "which worker processes or Ray actors repeat from the model, batches "
                          "and learning rate sent",
    "cuda": "training.device: cuda: every model is built from the backbone, so moving the "
            "backbone moves them all",
    "whole_model": "the whole model trains on the device, so a device group's end_layer may "
                   "be the model's last stage",
    "array_booking": "timing-only rounds booked as arrays, without a SimPy process per client "
                     "(the same timeline, faster): each client's round is its algorithm's "
                     "as shipped (FedAvg's download, local steps over its batches in the "
                     "standard order and upload, FedAvg.book_round; SplitFed's and "
                     "Hetero-SplitEE's split steps, MergeSFL's merged steps, "
                     "sflsim.execution.booked_return and booked_split); an algorithm that "
                     "changes a client's round or its batching does not declare it",
}

#: Registered configuration classes by algorithm name, in order of registration (a class
#: whose ``name`` allows several values is there under each).
ALGORITHM_CONFIGS: dict[str, type[AlgorithmConfig]] = {}
#: Algorithm name -> the module its configuration is attributed to: the module being
#: imported for ``algorithm.module`` or an entry point when it was registered, else the
#: class's own module.
CONFIG_MODULES: dict[str, str] = {}
#: Modules being imported by :mod:`sflsim.config.user_algorithms`, innermost last.
IMPORTING: list[str] = []

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
BUILTIN_MODULE = "sflsim.config.schema"


class AlgorithmConfig(SchemaModel):
    """Base of every algorithm's configuration: the scenario's ``algorithm`` mapping.

    A subclass names its algorithm with ``name: Literal["my_method"]`` (one class may
    take several names, as SplitFed's ``splitfed_v1`` and ``splitfed_v2``), adds its
    hyperparameters as fields (with units in their names and ``Field`` bounds; the
    algorithm reads them as ``self.scenario.algorithm.<field>``), lists what it supports
    in :attr:`capabilities`, and is registered with :func:`register_algorithm_config`.
    Like every scenario model it is frozen and refuses unknown keys.
    """

    #: The algorithm's name, as registered with ``@register_algorithm``.
    name: str
    #: A Python module to import before this mapping is validated, e.g. the one that
    #: registers the algorithm (``my_package.my_method``): a dotted module name found on
    #: Python's import path (``PYTHONPATH``, installed packages), not a file path.
    module: str | None = None

    #: What the algorithm supports, names from :data:`CAPABILITIES`; none by default, so a
    #: scenario asking for timing-only runs, fused or parallel clients, CUDA or an end
    #: layer at the model's last stage is refused until the algorithm says it can.
    capabilities: ClassVar[frozenset[str]] = frozenset()
    #: Added to the message for a ``name`` that no class is registered under.
    unknown_name_hint: ClassVar[str] = (
        "; an algorithm of your own is found through algorithm.module (the Python module that "
        "registers it) or an installed entry point in the group 'sflsim.algorithms'")

    def supports(self, capability: str) -> bool:
        """Whether the algorithm declares ``capability`` (a key of :data:`CAPABILITIES`)."""
        return capability in type(self).capabilities_of(self.name)

    @classmethod
    def capabilities_of(cls, name: str) -> frozenset[str]:
        """The capabilities of the algorithm ``name`` (one of this class's names): its
        :attr:`capabilities`; a class that holds several names may tell them apart."""
        return cls.capabilities

    @classmethod
    def union_members(cls) -> list[type[AlgorithmConfig]]:
        """The registered configuration classes, each once, in order of registration:
        the members of the union a scenario's ``algorithm`` is validated as (error
        messages list their names and fields, :mod:`sflsim.inputs.messages`)."""
        return list(dict.fromkeys(ALGORITHM_CONFIGS.values()))


C = TypeVar("C", bound=type[AlgorithmConfig])


def config_names(cls: type[AlgorithmConfig]) -> tuple[str, ...]:
    """The values of ``cls``'s ``name: Literal[...]`` field; () when it has none."""
    info = cls.model_fields.get("name")
    annotation = info.annotation if info is not None else None
    if typing.get_origin(annotation) is not Literal:
        return ()
    return tuple(typing.get_args(annotation))


def register_algorithm_config(cls: C) -> C:
    """Register an algorithm's configuration class under every name its ``name`` allows.

    Use as a class decorator, next to ``@register_algorithm("my_method")`` on the
    algorithm itself (:mod:`sflsim.algorithms.base`); the built-in algorithms register
    theirs the same way.

    Raises:
        TypeError: ``cls`` does not derive from :class:`AlgorithmConfig`, or its ``name``
            is not a ``Literal`` of names.
        ValueError: a name is not a letter followed by letters, digits and ``_``; or
            :attr:`~AlgorithmConfig.capabilities` holds a name not in :data:`CAPABILITIES`.
        DuplicateNameError: a name is already registered (a ``ValueError``; nothing of
            ``cls`` is registered then).
    """
    if not (isinstance(cls, type) and issubclass(cls, AlgorithmConfig)):
        raise TypeError(f"@register_algorithm_config: {cls!r} must be a subclass of "
                        f"sflsim.config.algorithms.AlgorithmConfig")
    names = config_names(cls)
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"@register_algorithm_config: {cls.__qualname__} needs a field "
                        f"name: Literal['my_method'] naming its algorithm")
    for name in names:
        if not _NAME.fullmatch(name):
            raise ValueError(f"@register_algorithm_config: algorithm name {name!r} of "
                             f"{cls.__qualname__} must be a letter followed by letters, "
                             f"digits and '_'")
        if name in ALGORITHM_CONFIGS:
            raise DuplicateNameError("algorithm configuration", name, ALGORITHM_CONFIGS[name])
    unknown = sorted(set(cls.capabilities) - set(CAPABILITIES))
    if unknown:
        raise ValueError(f"@register_algorithm_config: {cls.__qualname__}.capabilities: "
                         f"{', '.join(map(repr, unknown))} unknown; valid: "
                         f"{', '.join(CAPABILITIES)}")
    module = IMPORTING[-1] if IMPORTING else cls.__module__
    for name in names:
        ALGORITHM_CONFIGS[name] = cls
        CONFIG_MODULES[name] = module
    _adapter.cache_clear()
    return cls


def unregister_algorithm_config(name: str) -> None:
    """Forget ``name``'s configuration (a failed import is rolled back with it); no-op
    for a name not registered."""
    ALGORITHM_CONFIGS.pop(name, None)
    CONFIG_MODULES.pop(name, None)
    _adapter.cache_clear()


def is_builtin(name: str) -> bool:
    """Whether ``name`` is one of sflsim's own algorithms."""
    return CONFIG_MODULES.get(name) == BUILTIN_MODULE


def algorithms_with(capability: str) -> tuple[str, ...]:
    """Names of the registered algorithms (built-in and user's) that support
    ``capability`` (a key of :data:`CAPABILITIES`), in order of registration."""
    return tuple(n for n, cls in ALGORITHM_CONFIGS.items() if capability in cls.capabilities_of(n))


@functools.cache
def _adapter() -> TypeAdapter:
    members = AlgorithmConfig.union_members()
    union = members[0] if len(members) == 1 else Union[tuple(members)]  # noqa: UP007
    return TypeAdapter(Annotated[union, Field(discriminator="name")])
