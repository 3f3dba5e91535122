"""Algorithms: one module each, registered by the name used in scenarios.

A method of one's own registers the same way (README "Your own algorithm"): an
:class:`Algorithm` subclass with ``@register_algorithm("my_method")`` and its
configuration, an :class:`AlgorithmConfig` subclass with ``name:
Literal["my_method"]``, with ``@register_algorithm_config``.
"""

from sflsim.algorithms import centralized as _centralized  # noqa: F401  (registers)
from sflsim.algorithms import fedas as _fedas  # noqa: F401  (registers)
from sflsim.algorithms import fedavg as _fedavg  # noqa: F401  (registers)
from sflsim.algorithms import fedbabu as _fedbabu  # noqa: F401  (registers)
from sflsim.algorithms import fedgh as _fedgh  # noqa: F401  (registers)
from sflsim.algorithms import fedmut as _fedmut  # noqa: F401  (registers)
from sflsim.algorithms import fedprox as _fedprox  # noqa: F401  (registers)
from sflsim.algorithms import fedsga as _fedsga  # noqa: F401  (registers)
from sflsim.algorithms import hetero_splitee as _hetero_splitee  # noqa: F401  (registers)
from sflsim.algorithms import mergesfl as _mergesfl  # noqa: F401  (registers)
from sflsim.algorithms import mu_splitfed as _mu_splitfed  # noqa: F401  (registers)
from sflsim.algorithms import multisfl as _multisfl  # noqa: F401  (registers)
from sflsim.algorithms import splitfed as _splitfed  # noqa: F401  (registers)
from sflsim.algorithms.base import ALGORITHMS, SERVER_ID, Algorithm, RunContext, register_algorithm
from sflsim.config.algorithms import AlgorithmConfig, register_algorithm_config

__all__ = ["ALGORITHMS", "SERVER_ID", "Algorithm", "AlgorithmConfig", "RunContext",
           "register_algorithm", "register_algorithm_config"]
