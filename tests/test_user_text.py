"""What users read speaks of sflsim and cites papers by title, venue and arXiv id: no
notes of the people who built it (issue numbers, plans) and no paths to files a user of
sflsim does not have (the papers' texts, design notes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: what a user must never read
FORBIDDEN = re.compile(r"\bissues? ?#?\d|\bissues? §|DESIGN\.md|shared/papers|\b00[01]_[0-9a-f.*]"
                       r"|next cpu-scale|the team\b|\bthe issue\b|\bhelper run|\bwas lent\b"
                       r"|\bno GPU (?:was )?lent", re.IGNORECASE)
#: files users read: the package (docstrings, messages), docs, scenarios, profiles, the
#: analysis scripts (their output and the report they write), benchmarks, CI scripts
USER_FILES = sorted(
    p for pattern in ("sflsim/**/*.py", "README.md", "docs/**/*.md", "docs/*.py", "mkdocs.yml",
                      "scenarios/**/*.yaml",
                      "device_profiles/**/*.yaml", "analysis/**/*.py", "analysis/*.md",
                      "analysis/investigation/*.yaml", "benchmarks/*", ".ci/*")
    for p in REPO.glob(pattern) if p.is_file())
#: a magazine's issue number is a citation, not a note
ALLOWED = {("device_profiles/devices/rpi4.yaml", "MagPi issue 88")}


def offending_lines(text: str, rel: str) -> list[str]:
    return [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if FORBIDDEN.search(line) and not any(rel == f and ok in line for f, ok in ALLOWED)]


@pytest.mark.parametrize("path", USER_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_user_text_has_no_team_notes_or_private_paths(path: Path) -> None:
    rel = path.relative_to(REPO).as_posix()
    assert not offending_lines(path.read_text(errors="replace"), rel)


def test_reproduce_output_has_no_team_notes(reproduce, capsys) -> None:
    """``--dry-run`` of every target (the scale tables the report also prints)."""
    reproduce.load_plugins()
    for key, target in list(reproduce.TARGETS.items()):
        if "cpu" not in target.scales:
            continue
        assert reproduce.main([key, "--scale", "cpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not offending_lines(out, "--dry-run")
    for title in reproduce.PAPER_TITLES.values():
        assert re.search(r"arXiv \d{4}\.\d{5}", title) and '"' in title


def _commands(command, path=("sflsim",)):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_help_text_is_shown_as_written() -> None:
    """Every option's help reaches ``--help`` whole: brackets (``".[tensorboard]"``) are
    text, not markup that a help renderer would swallow."""
    import typer
    from typer.testing import CliRunner

    from sflsim.cli.main import app

    runner = CliRunner()
    checked = 0
    for path, command in _commands(typer.main.get_command(app)):
        shown = " ".join(runner.invoke(app, [*path[1:], "--help"]).output.split())
        for param in command.params:
            help_text = " ".join((getattr(param, "help", None) or "").split())
            for token in re.findall(r"\S*\[[^\]]*\]\S*", help_text):
                assert token in shown, f"{' '.join(path)} --{param.name}: {token!r} not in help"
                checked += 1
    assert checked >= 2  # run's and sweep's --tensorboard install hint at least
