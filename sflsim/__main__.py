"""``python -m sflsim``."""

from sflsim.cli.main import app

app()
