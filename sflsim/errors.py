"""User-facing errors: one clear message, no traceback from the CLI."""

from __future__ import annotations


class SflsimError(Exception):
    """Base class of errors caused by user input; the CLI prints the message only."""


class ConfigError(SflsimError):
    """A scenario or profile is invalid: names the field, the value and what is valid."""


class DatasetNotFoundError(SflsimError):
    """Dataset files are missing: says where they were looked for and how to get them."""
