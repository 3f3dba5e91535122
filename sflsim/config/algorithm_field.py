"""The type of a scenario's ``algorithm`` field: a mapping validated with the
configuration class registered under its ``name`` (:mod:`sflsim.config.algorithms`),
after importing what it asks for (:mod:`sflsim.config.user_algorithms`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    SerializeAsAny,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from sflsim.config.algorithms import ALGORITHM_CONFIGS, AlgorithmConfig, _adapter


def _validate(value: Any, handler: ValidatorFunctionWrapHandler) -> AlgorithmConfig:
    """Validate an ``algorithm`` mapping with the class registered under its ``name``,
    after importing what it asks for (:func:`sflsim.config.user_algorithms.prepare`).
    An instance of a registered class is taken as it is."""
    if isinstance(value, AlgorithmConfig):
        if ALGORITHM_CONFIGS.get(value.name) is type(value):
            return value
        value = value.model_dump()
    if isinstance(value, dict):
        from sflsim.config.user_algorithms import prepare

        problem = prepare(value)
        name = value.get("name")
        if problem is None and isinstance(name, str) and name not in ALGORITHM_CONFIGS:
            # an unknown name beside a misspelt module: the module was never imported
            import difflib

            typo = next((k for k in value if k != "module"
                         and difflib.get_close_matches(str(k), ["module"], cutoff=0.75)), None)
            if typo is not None:
                problem = (str(typo), f"unknown field; did you mean 'module'? (the module "
                                      f"that registers {name!r} was not imported)")
        if problem is not None:
            field, message = problem
            raise ValidationError.from_exception_data("algorithm", [InitErrorDetails(
                type=PydanticCustomError("algorithm_source", "{message}", {"message": message}),
                loc=(field,), input=value.get(field))])
    return _adapter().validate_python(value)


#: The type of ``Scenario.algorithm``: any registered configuration, chosen by ``name``,
#: dumped with its own fields.
AlgorithmField = Annotated[SerializeAsAny[AlgorithmConfig], WrapValidator(_validate)]
