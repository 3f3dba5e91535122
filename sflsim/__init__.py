"""sflsim: a discrete-event simulator of heterogeneous split federated learning.

Public API::

    from sflsim import load_scenario, run_scenario
    result = run_scenario(load_scenario("scenarios/quickstart.yaml"), "runs/quickstart")
    result.rounds  # pandas DataFrame, one row per round
"""

__version__ = "0.1.0"

from sflsim.config import Scenario, load_scenario, validate_scenario  # noqa: E402
from sflsim.errors import (  # noqa: E402
    ConfigError,
    DatasetError,
    DatasetNotFoundError,
    SflsimError,
)


def run_scenario(*args, **kwargs):  # noqa: D103  (lazy: importing torch is slow)
    from sflsim.runner import run_scenario as _run

    return _run(*args, **kwargs)


run_scenario.__doc__ = "See :func:`sflsim.runner.run_scenario`."

__all__ = [
    "ConfigError", "DatasetError", "DatasetNotFoundError", "Scenario", "SflsimError", "load_scenario",
    "run_scenario", "validate_scenario",
]
