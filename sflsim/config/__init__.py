"""Scenario configuration: schema, units, loading and validation."""

from sflsim.config.algorithms import AlgorithmConfig, register_algorithm_config
from sflsim.config.load import load_scenario, validate_scenario
from sflsim.config.schema import Scenario

__all__ = ["AlgorithmConfig", "Scenario", "load_scenario", "register_algorithm_config",
           "validate_scenario"]
