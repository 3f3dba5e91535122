"""Algorithms: one module each, registered by the name used in scenarios."""

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
from sflsim.algorithms.base import ALGORITHMS, Algorithm, Client, RunContext, register_algorithm

__all__ = ["ALGORITHMS", "Algorithm", "Client", "RunContext", "register_algorithm"]
