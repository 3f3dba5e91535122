"""Scenario configuration: schema, units, loading and validation. The public names are
:mod:`sflsim`'s (``from sflsim import load_scenario, Scenario``)."""

from sflsim.config.load import load_scenario, validate_scenario

__all__ = ["load_scenario", "validate_scenario"]
