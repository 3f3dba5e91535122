"""The reference pages generated from the code: the profile library (``docs/gen_profiles.py``,
from the files under ``device_profiles/``) and the command line (``docs/reference/cli.md``,
whose ``::: mkdocs-click`` block mkdocs-click fills from the click command Typer builds).

Neither needs MkDocs; CI builds the site itself (``.ci/run``).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from sflsim.cli.main import app
from sflsim.hardware.profiles import KINDS, SHIPPED_PROFILES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _docs_module(name: str):
    """``docs/<name>.py``, a generator the MkDocs hook (``docs/hooks.py``) runs."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------- the profile library

PROFILE_FILES = sorted(path for kind in KINDS for path in (SHIPPED_PROFILES / kind).glob("*.yaml"))


@pytest.fixture(scope="module")
def library_page() -> str:
    return _docs_module("gen_profiles").profile_library_markdown()


def test_the_library_has_every_kind_of_profile():
    assert {path.parent.name for path in PROFILE_FILES} == set(KINDS)
    assert len(PROFILE_FILES) >= 19


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_library_page_lists_every_number_of_every_profile(library_page, path):
    """Read with plain PyYAML, not the generator's reader: every field of the file but its
    description is a row of its profile with the value as written, its basis and source."""
    data = yaml.safe_load(path.read_text())
    name = path.stem
    assert f"| `{name}` | " in library_page  # the description table
    numbers = {k: v for k, v in data.items() if k != "description"}
    assert numbers
    for field, entry in numbers.items():
        if field == "operator_costs":  # one row per entry
            for sub, value in entry.items():
                sub_rows = [line for line in library_page.splitlines()
                            if line.startswith(f"| `{name}` | `{field}.{sub}` | ")]
                assert sub_rows, (name, field, sub)
                if isinstance(value, dict) and "value" in value:
                    assert f"| `{value['value']}` | {value['basis']} | " in sub_rows[0], \
                        sub_rows[0]
            continue
        rows = [line for line in library_page.splitlines()
                if line.startswith(f"| `{name}` | `{field}` | ")]
        assert rows, (name, field)
        if isinstance(entry, dict):
            row = rows[0]
            assert f"| `{entry['value']}` | {entry['basis']} | " in row, row
            first_words = " ".join(entry["source"].split()[:4])
            assert first_words.replace("|", "\\|").replace("*", "\\*") in row, row
        elif field == "stage_latency":
            assert len(rows) == len(entry)
        else:
            assert rows[0].startswith(f"| `{name}` | `{field}` | `{entry}` |"), rows[0]


def test_the_library_page_has_one_numbers_table_per_kind(library_page):
    for kind in KINDS:
        assert f"### Numbers of the {kind}" in library_page
        assert f"{len(list((SHIPPED_PROFILES / kind).glob('*.yaml')))} profiles in " \
               f"`device_profiles/{kind}/`" in library_page


def test_the_library_page_shows_measured_per_stage_times(tmp_path):
    """A ``stage_latency`` table (none is shipped) is shown too, one row per table."""
    gen = _docs_module("gen_profiles")
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        for path in (SHIPPED_PROFILES / kind).glob("*.yaml"):
            (tmp_path / kind / path.name).write_text(path.read_text())
    (tmp_path / "devices" / "rpi4.yaml").write_text(
        (SHIPPED_PROFILES / "devices" / "rpi4.yaml").read_text()
        + "stage_latency:\n- model: hetero_splitee_resnet\n  width: 0.25\n"
          "  input: [1, 28, 28]\n  batch_size: 16\n  forward_s: [0.0006, 0.0077]\n"
          "  backward_s: [0.0006, 0.0093]\n  basis: measured\n  source: a host run\n")
    page = gen.profile_library_markdown(tmp_path)
    row = next(line for line in page.splitlines() if line.startswith("| `rpi4` | `stage_latency`"))
    assert "`hetero_splitee_resnet`" in row and "[0.0006, 0.0077]" in row
    assert "| measured | a host run |" in row


def test_the_hook_adds_the_library_page():
    gen = _docs_module("gen_profiles")
    assert "gen_profiles.profile_library_markdown()" in (DOCS / "hooks.py").read_text()
    mkdocs_yml = (ROOT / "mkdocs.yml").read_text()
    assert gen.PAGE in mkdocs_yml
    assert not (DOCS / gen.PAGE).exists()  # generated only: a file would clash with it
    assert f"]({Path(gen.PAGE).name})" in (DOCS / "reference" / "profiles.md").read_text()


# ----------------------------------------------------------------------- the command line


def _directive() -> dict[str, str]:
    """The options of the ``::: mkdocs-click`` block of the command line page."""
    text = (DOCS / "reference" / "cli.md").read_text()
    match = re.search(r"^::: mkdocs-click\n((?:    :\w+: .*\n?)+)", text, flags=re.M)
    assert match, "docs/reference/cli.md has no ::: mkdocs-click block"
    return dict(re.findall(r":(\w+): (.*)", match.group(1)))


def _tree(command) -> dict:
    """A click command's subcommands, recursively, by name."""
    return {name: _tree(sub) for name, sub in getattr(command, "commands", {}).items()}


def test_the_cli_page_documents_the_command_typer_builds():
    options = _directive()
    assert options["prog_name"] == "sflsim"
    assert options["list_subcommands"] == "true"
    command = getattr(importlib.import_module(options["module"]), options["command"])
    # a click command (Typer's own click: mkdocs-click takes any object with context_class)
    assert hasattr(command, "context_class") and hasattr(command, "get_params")
    assert _tree(command) == _tree(get_command(app))
    assert {"run", "validate", "sweep", "plot", "compare", "check", "export", "profiles",
            "profile-host", "fleet"} <= set(command.commands)


def test_mkdocs_click_is_enabled_and_installed_with_the_docs():
    assert "  - mkdocs-click\n" in (ROOT / "mkdocs.yml").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    dev = re.search(r"^dev = \[(.*?)\]\n", pyproject, flags=re.M | re.S).group(1)
    assert '"mkdocs-click' in dev
