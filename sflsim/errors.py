"""User-facing errors: one clear message, no traceback from the CLI."""

from __future__ import annotations


class SflsimError(Exception):
    """Base class of errors caused by user input; the CLI prints the message only."""


class ConfigError(SflsimError):
    """A scenario or profile is invalid: names the field, the value and what is valid."""


class DatasetError(SflsimError):
    """Dataset files are unusable: names the file and what is wrong with it (for a bad
    label, the first bad index)."""


class DatasetNotFoundError(DatasetError):
    """Dataset files are missing: says where they were looked for and how to get them."""


class DivergenceError(SflsimError):
    """Training diverged: a loss or parameter became NaN or infinite.

    Attributes:
        algorithm: the algorithm's name; round: the 1-based round; client_id: the
        client whose step or model diverged (-1: a model no single client owns).
    """

    def __init__(self, message: str, algorithm: str = "", round: int = 0, client_id: int = -1):
        super().__init__(message, algorithm, round, client_id)
        self.algorithm, self.round, self.client_id = algorithm, round, client_id

    def __str__(self) -> str:
        return str(self.args[0])
