"""User-facing errors: one clear message, no traceback from the CLI."""

from __future__ import annotations

from pydantic import ValidationError


class SflsimError(Exception):
    """Base class of errors caused by user input; the CLI prints the message only."""


class ConfigError(SflsimError):
    """A scenario or profile is invalid: names the field, the value and what is valid."""


class DatasetNotFoundError(SflsimError):
    """Dataset files are missing: says where they were looked for and how to get them."""


def format_validation_error(exc: ValidationError, where: str) -> str:
    """Render a pydantic error as ``where: field.path: message (got value)`` lines."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        got = err.get("input")
        shown = "" if err["type"] in ("missing",) or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{loc}: {msg}{shown}")
    return f"{where}: " + ("\n  ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines))
