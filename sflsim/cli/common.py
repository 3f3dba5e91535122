"""Shared CLI helpers: user errors become one message and a non-zero exit status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from sflsim.cli.progress_display import fmt
from sflsim.errors import SflsimError

# soft_wrap: long lines (paths) are not broken at 80 columns when output is not a terminal
# emoji=False: rich would turn ":b:" in a user's value ("a:b:c") into an emoji
console = Console(soft_wrap=True, emoji=False)
err_console = Console(stderr=True, soft_wrap=True, emoji=False)

#: Exit status for user mistakes (bad scenario, missing data).
USER_ERROR = 2
#: exit status of a run that failed for another reason than its input (a defect, the host)
EXIT_FAILED = 1


def print_table(table: Table, target: Console | None = None) -> None:
    """Print a rich table: fitted to the terminal, or, written to a file or a pipe, at its
    natural width, so that no cell is cut short ("devi…") to fit 80 columns."""
    target = target or console
    if target.is_terminal:
        target.print(table)
        return
    table.expand = False
    width = Measurement.get(target, target.options.update(width=1_000_000), table).maximum
    saved = target.width
    target.width = max(width, saved)  # Console.print(width=) cannot exceed the console's
    try:
        target.print(table)
    finally:
        target.width = saved


def print_error(message: str) -> None:
    """Print ``error: <message>`` to stderr, exactly as written (no markup, no wrapping)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True,
                      soft_wrap=True)


def print_warning(message: str) -> None:
    """Print ``warning: <message>`` to stderr, exactly as written (no markup, no wrapping)."""
    err_console.print(f"warning: {escape(message)}", highlight=False, soft_wrap=True)


def refuse_warnings(found: list[str]) -> None:
    """``--strict``: refuse the input warnings ``found``, one ``error:`` line each, exit
    status 2 (:data:`USER_ERROR`), before anything runs; nothing when there are none."""
    from sflsim.config.input_warnings import STRICT_NOTE

    if not found:
        return
    for message in found:
        print_error(f"{message} {STRICT_NOTE}")
    raise typer.Exit(USER_ERROR)


#: help text of ``--strict`` (``sflsim run``, ``sflsim sweep``)
STRICT_HELP = ("Refuse input warnings as errors (a bare number far outside real hardware, "
               "such as uplink_bps: 10, read as 10 bit/s): one line each, exit status 2, "
               "before anything runs.")


def path_option(option: str, what: str = "folder") -> dict[str, Any]:
    """``typer.Option`` settings (``typer.Option("-o", **path_option("-o"))``) for an
    option that names a path: an empty one (``-o ''``, which would mean the current
    folder) is refused when the command line is read, before anything runs.

    Args:
        option: the option as shown in the message (``-o``, ``--tensorboard``).
        what: ``"folder"`` or ``"file"``, what the option names.
    """

    def path(value: str) -> Path:
        if not str(value).strip():
            print_error(f"{option} {value!r}: an empty path; give a {what} name, or leave out "
                        f"{option}")
            raise typer.Exit(USER_ERROR)
        return Path(value)

    return {"parser": path, "metavar": "<path>"}  # <path> as typer shows a Path option


@contextlib.contextmanager
def options_as_typed(aliases: dict[str, str]) -> Iterator[None]:
    """Errors about a field that a command-line option set (``--device cuda`` sets
    ``training.device=cuda``) name the option as the user typed it, not a ``--set`` the
    user never typed.

    Args:
        aliases: ``{"training.device=cuda": "--device cuda"}``.
    """
    try:
        yield
    except SflsimError as exc:
        message = as_typed(str(exc), aliases)
        if message == str(exc):
            raise
        raise type(exc)(message) from None


def as_typed(message: str, aliases: dict[str, str]) -> str:
    """``message`` (an error or a warning) with each ``--set`` that an option made named
    as the option was typed (:func:`options_as_typed`)."""
    for assignment, typed in aliases.items():
        message = message.replace(f"--set {assignment}", typed)
    return message


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Print :class:`SflsimError` messages without a traceback and exit with status 2.

    File-system errors that name a file (an output directory that cannot be created, a
    file that cannot be written) are user errors too.
    """
    try:
        yield
    except SflsimError as exc:
        print_error(str(exc))
        raise typer.Exit(USER_ERROR) from None
    except OSError as exc:
        if exc.filename is None:
            raise
        print_error(f"cannot use {exc.filename}: {exc.strerror or exc}")
        raise typer.Exit(USER_ERROR) from None


def run_summary_table(summary: dict) -> Table:
    """A short table of a run's final numbers (its ``summary.json``), as ``sflsim run``
    ends."""
    table = Table(title=f"{escape(summary['name'])} ({summary['algorithm']})", show_header=False)
    by_layer = summary["final_accuracy_by_end_layer"]
    for key in sorted(k for k in by_layer if k.startswith("server_accuracy_l")):
        layer = key.rsplit("_l", 1)[1]
        table.add_row(f"end layer {layer} accuracy (server / client)",
                      f"{fmt(by_layer[key])} / {fmt(by_layer[f'client_accuracy_l{layer}'])}")
    if summary["final_server_accuracy"] is None:
        table.add_row("final accuracy", "not evaluated (timing only)")
    else:
        table.add_row("final accuracy (server / client)",
                      f"{fmt(summary['final_server_accuracy'])} / "
                      f"{fmt(summary['final_client_accuracy'])}")
    table.add_row("simulated time", f"{summary['sim_time_s']:.2f} s")
    table.add_row("wall time", f"{summary['wall_time_s']:.1f} s")
    table.add_row("bytes up / down", f"{summary['bytes_up']:.3e} / {summary['bytes_down']:.3e}")
    table.add_row("FLOPs client / server",
                  f"{summary['client_flops']:.3e} / {summary['server_flops']:.3e}")
    table.add_row("client energy", f"{summary['client_energy_j']:.1f} J")
    return table
