"""Tables written to a file or a pipe are printed whole: no cell is cut to fit 80 columns."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from sflsim.cli.common import print_table
from sflsim.cli.main import app


def test_a_wide_table_is_not_cut_when_not_on_a_terminal():
    out = io.StringIO()
    target = Console(file=out, width=80, force_terminal=False)
    table = Table(title="sweep")
    names = [f"devices.group_{i}.count" for i in range(6)]
    for name in names:
        table.add_column(name)
    table.add_row(*(f"client_value_{i}" for i in range(6)))
    print_table(table, target)
    text = out.getvalue()
    assert "…" not in text
    assert all(name in text for name in names) and "client_value_5" in text


def test_cli_tables_in_a_pipe_are_not_cut():
    """``sflsim profiles list`` and ``show`` (the CLI runner's output is not a terminal)."""
    for args in (["profiles", "list"], ["profiles", "show", "rpi4"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "…" not in result.output, result.output
