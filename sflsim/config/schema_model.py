"""The base of every scenario model: frozen, unknown keys refused, numbers read as written.

:class:`SchemaModel` is what :mod:`sflsim.config.schema` builds on, and what an
algorithm's configuration (:class:`sflsim.config.algorithms.AlgorithmConfig`) inherits.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated

import annotated_types
from pydantic import BaseModel, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sflsim.inputs.quantities import FROZEN, FlagText, whole_number


def _plain(annotation: object) -> object:
    """``int | None`` -> ``int`` (other annotations unchanged)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


#: The largest integer (in magnitude) a field without bounds of its own takes, its
#: items included: a count beyond it is a typo, and would overflow NumPy's integers.
MAX_INTEGER = 2**31 - 1


class SchemaModel(BaseModel):
    """Base of the schema models: a YAML ``true``/``yes`` is not taken for the number 1, an
    integer field takes an integral float (``rounds: 1e3``) as the whole number it is, and
    an integer without a bound of its field is at most :data:`MAX_INTEGER`."""

    model_config = FROZEN

    @field_validator("*", mode="after")
    @classmethod
    def _bounded_integers(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name in _unbounded_integer_fields(cls):
            where, item = _largest_integer(value)
            if abs(item) > MAX_INTEGER:
                # ``item``: where in a list or mapping, for the message to name it
                raise PydanticCustomError("less_than_equal",
                                          "Input should be from {ge} to {le}",
                                          {"ge": -MAX_INTEGER, "le": MAX_INTEGER,
                                           "item": where, "item_input": item})
        return value

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data: object) -> object:
        """Pass ``true`` to number fields as the text ``'true'`` so that they refuse it, and
        ``1e3`` (text in YAML 1.1) or ``1000.0`` to integer fields as ``1000``."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, info in cls.model_fields.items():
            if name in out:
                out[name] = _number_for(_plain(info.annotation), out[name])
        return out


def _number_for(annotation: object, value: object) -> object:
    """``value`` prepared for a field of ``annotation`` (see :meth:`SchemaModel._plain_numbers`);
    lists and mappings of integers are prepared item by item."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if annotation in (int, float):
        if isinstance(value, bool):
            return FlagText(str(value).lower())
        return whole_number(value) if annotation is int else value
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and isinstance(value, list):
        return [_number_for(args[0], v) for v in value]
    if origin is dict and isinstance(value, dict):
        return {k: _number_for(args[1], v) for k, v in value.items()}
    return value


def _largest_integer(value: object) -> tuple[tuple, int]:
    """The integer of largest magnitude in ``value``, its lists' and mappings' items
    included, and where it is (a path of indices and keys, ``()`` for ``value`` itself);
    ``((), 0)`` when there is none."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (), value
    items = (enumerate(value) if isinstance(value, (list, tuple))
             else value.items() if isinstance(value, dict) else ())
    best: tuple[tuple, int] = ((), 0)
    for key, item in items:
        where, found = _largest_integer(item)
        if abs(found) > abs(best[1]):
            best = ((key, *where), found)
    return best


@functools.cache
def _unbounded_integer_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` that hold integers (alone, in lists or as mapping values)
    and have no upper bound of their own."""
    def holds_int(annotation: object) -> bool:
        return annotation is int or any(holds_int(a) for a in typing.get_args(annotation))

    return frozenset(name for name, info in model.model_fields.items()
                     if holds_int(info.annotation) and not any(
                         isinstance(m, (annotated_types.Le, annotated_types.Lt))
                         for m in info.metadata))
