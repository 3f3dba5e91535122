"""The ``sflsim`` command: a thin layer over the library API (one module per command)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from sflsim import __version__
from sflsim.cli import calibrate as calibrate_cmd
from sflsim.cli import check as check_cmd
from sflsim.cli import compare as compare_cmd
from sflsim.cli import export as export_cmd
from sflsim.cli import fleet as fleet_cmd
from sflsim.cli import plot as plot_cmd
from sflsim.cli import profile_host as profile_host_cmd
from sflsim.cli import profiles as profiles_cmd
from sflsim.cli import run as run_cmd
from sflsim.cli import sweep as sweep_cmd
from sflsim.cli import validate as validate_cmd
from sflsim.cli.common import EXIT_FAILED, USER_ERROR, print_error
from sflsim.config.load import set_option_problem


class SflsimGroup(TyperGroup):
    """The ``sflsim`` command: a failure to import torch or torchvision, in any of its
    commands, is told in one line that says how to fix it
    (:func:`~sflsim.cli.install.install_problem`), exit status 1, not as a traceback."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except typer.Exit:
            raise
        except Exception as exc:
            _exit_if_install_problem(exc)
            raise


def _exit_if_install_problem(exc: BaseException) -> None:
    """Print the one line of a broken torch or torchvision install and exit with
    :data:`~sflsim.cli.common.EXIT_FAILED`; nothing for any other error."""
    from sflsim.cli.install import install_problem

    problem = install_problem(exc)
    if problem is not None:
        print_error(problem)
        raise typer.Exit(EXIT_FAILED) from None


app = typer.Typer(
    cls=SflsimGroup,
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is shown as written: ".[tensorboard]" stays
    help="Simulate heterogeneous split federated learning on simulated IoT hardware.",
)


def _print_version(value: bool) -> None:
    """sflsim's version, then torch's (its build, CPU capability and whether CUDA works
    here) and torchvision's (:func:`~sflsim.cli.install.version_lines`); a torch that
    cannot be imported is told in one line, exit status 1."""
    if value:
        from sflsim.cli.install import version_lines

        typer.echo(f"sflsim {__version__}")
        try:
            lines = version_lines()
        except Exception as exc:
            _exit_if_install_problem(exc)
            raise
        for line in lines:
            typer.echo(line)
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the versions of sflsim, torch (its build, CPU capability and whether "
        "CUDA works here) and torchvision, and exit.")] = False,
) -> None:
    """Simulate heterogeneous split federated learning on simulated IoT hardware."""


class SetCommand(TyperCommand):
    """A command with ``--set a.b=value``: a ``--set`` written ``a.b value`` is told in
    one line (:func:`~sflsim.config.load.set_option_problem`), not as the "unexpected
    extra argument" the value would otherwise be."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        typed = list(args)  # the parser consumes the list it is given
        problem = set_option_problem(typed)
        if problem is None:
            try:
                return super().parse_args(ctx, args)
            except Exception as exc:  # click's UsageError (typer carries its own click)
                if "unexpected extra argument" not in str(exc):
                    raise
                problem = set_option_problem(typed, extra_argument=True)
                if problem is None:
                    raise
        print_error(problem)
        raise typer.Exit(USER_ERROR)


app.command("run", cls=SetCommand)(run_cmd.run)
app.command("validate", cls=SetCommand)(validate_cmd.validate)
app.command("sweep", cls=SetCommand)(sweep_cmd.sweep)
app.command("plot")(plot_cmd.plot)
app.command("compare")(compare_cmd.compare)
app.command("export")(export_cmd.export)
app.command("check")(check_cmd.check)
app.add_typer(profiles_cmd.app, name="profiles")
app.add_typer(fleet_cmd.app, name="fleet")
app.command("profile-host")(profile_host_cmd.profile_host)
app.command("calibrate")(calibrate_cmd.calibrate)


def __getattr__(name: str):
    """``cli``: the click command Typer builds from ``app``, for the documentation only
    (mkdocs-click, ``docs/reference/cli.md``, documents a click command, not a Typer app);
    built when asked for, so the ``sflsim`` script, which runs ``app``, never builds it."""
    if name == "cli":
        return typer.main.get_command(app)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # pragma: no cover
    app()
