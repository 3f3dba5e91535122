"""sflsim: a discrete-event simulator of heterogeneous split federated learning.

The public Python API (documented in the docs' "Python API" page)::

    from sflsim import load_scenario, run_scenario
    result = run_scenario(load_scenario("scenarios/quickstart.yaml"), "runs/quickstart")
    result.rounds  # pandas DataFrame, one row per round

- running: :func:`load_scenario`, :func:`validate_scenario`, :class:`Scenario`,
  :func:`run_scenario`, :class:`RunResult`;
- an algorithm of one's own: :class:`Algorithm`, :func:`register_algorithm`,
  :class:`AlgorithmConfig`, :func:`register_algorithm_config`;
- errors: :class:`SflsimError` and its kinds :class:`ConfigError`, :class:`DatasetError`,
  :class:`DatasetNotFoundError`.

``run_scenario``, ``RunResult``, ``Algorithm`` and ``register_algorithm`` import torch,
so they are loaded on first use: ``import sflsim`` stays fast.
"""

__version__ = "0.1.0"

from sflsim.config.algorithms import AlgorithmConfig, register_algorithm_config  # noqa: E402
from sflsim.config.load import load_scenario, validate_scenario  # noqa: E402
from sflsim.config.scenario import Scenario  # noqa: E402
from sflsim.errors import (  # noqa: E402
    ConfigError,
    DatasetError,
    DatasetNotFoundError,
    SflsimError,
)

#: the names that import torch, by the module that defines them (loaded on first use)
_LAZY = {"run_scenario": "sflsim.run.entry", "RunResult": "sflsim.run.result",
         "Algorithm": "sflsim.algorithms.base", "register_algorithm": "sflsim.algorithms.base"}

__all__ = [
    "Algorithm", "AlgorithmConfig", "ConfigError", "DatasetError", "DatasetNotFoundError",
    "RunResult", "Scenario", "SflsimError", "load_scenario", "register_algorithm",
    "register_algorithm_config", "run_scenario", "validate_scenario",
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sflsim' has no attribute {name!r}")
