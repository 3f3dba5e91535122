"""Shared CLI helpers: user errors become one message and a non-zero exit status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer
from rich.console import Console

from sflsim.errors import SflsimError

console = Console()
err_console = Console(stderr=True)

#: Exit status for user mistakes (bad scenario, missing data).
USER_ERROR = 2


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Print :class:`SflsimError` messages without a traceback and exit with status 2."""
    try:
        yield
    except SflsimError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        raise typer.Exit(USER_ERROR) from None
