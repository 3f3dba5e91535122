"""Scenario configuration: schema, units, loading and validation."""

from sflsim.config.load import load_scenario, validate_scenario
from sflsim.config.schema import Scenario

__all__ = ["Scenario", "load_scenario", "validate_scenario"]
