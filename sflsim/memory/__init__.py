"""Memory of a run, checked before training starts (refuse the impossible up front).

:func:`estimate_memory` (:mod:`sflsim.memory.estimate`, where the formula and its
sources are) adds up, in bytes, what a run keeps in memory at its peak, without building
the per-client models. :func:`check_fits` (:mod:`sflsim.memory.refusal`) refuses a run
whose estimate exceeds :func:`available_memory_bytes` (:mod:`sflsim.memory.available`; of
the GPU, for a run on one). The runner calls, right after the backbone is built and
before any client is::

    check_fits(estimate_memory(scenario, backbone, data), available_memory_bytes(device), where)
"""

from sflsim.memory.available import LIMIT_ENV, available_memory_bytes
from sflsim.memory.estimate import MemoryEstimate, estimate_memory
from sflsim.memory.refusal import check_fits

__all__ = [ "LIMIT_ENV", "MemoryEstimate",
    "available_memory_bytes", "check_fits",
    "estimate_memory",
]
