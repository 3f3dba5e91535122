"""The base of every scenario model: frozen, unknown keys refused, numbers read as written.

:class:`SchemaModel` is what :mod:`sflsim.config.schema` builds on, and what an
algorithm's configuration (:class:`sflsim.config.algorithms.AlgorithmConfig`) inherits.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated

from pydantic import BaseModel, model_validator

from sflsim.inputs.quantities import FROZEN, whole_number


def _plain(annotation: object) -> object:
    """``int | None`` -> ``int`` (other annotations unchanged)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


class SchemaModel(BaseModel):
    """Base of the schema models: a YAML ``true``/``yes`` is not taken for the number 1, and
    an integer field takes an integral float (``rounds: 1e3``) as the whole number it is."""

    model_config = FROZEN

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
            return str(value).lower()
        return whole_number(value) if annotation is int else value
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and isinstance(value, list):
        return [_number_for(args[0], v) for v in value]
    if origin is dict and isinstance(value, dict):
        return {k: _number_for(args[1], v) for k, v in value.items()}
    return value
