"""The ``sflsim`` command: a thin layer over the library API (one module per command)."""

from __future__ import annotations

from typing import Annotated

import typer

from sflsim import __version__
from sflsim.cli import check as check_cmd
from sflsim.cli import compare as compare_cmd
from sflsim.cli import export as export_cmd
from sflsim.cli import plot as plot_cmd
from sflsim.cli import profile_host as profile_host_cmd
from sflsim.cli import profiles as profiles_cmd
from sflsim.cli import run as run_cmd
from sflsim.cli import sweep as sweep_cmd
from sflsim.cli import validate as validate_cmd

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is shown as written: ".[tensorboard]" stays
    help="Simulate heterogeneous split federated learning on simulated IoT hardware.",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"sflsim {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """Simulate heterogeneous split federated learning on simulated IoT hardware."""


app.command("run")(run_cmd.run)
app.command("validate")(validate_cmd.validate)
app.command("sweep")(sweep_cmd.sweep)
app.command("plot")(plot_cmd.plot)
app.command("compare")(compare_cmd.compare)
app.command("export")(export_cmd.export)
app.command("check")(check_cmd.check)
app.add_typer(profiles_cmd.app, name="profiles")
app.command("profile-host")(profile_host_cmd.profile_host)

if __name__ == "__main__":  # pragma: no cover
    app()
