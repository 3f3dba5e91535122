"""The documentation: the README front page, the generated scenario field reference, and the
``sflsim`` commands the pages show.

The site itself is built by ``mkdocs build --strict`` in CI (``.ci/run``); these tests need
no MkDocs and run in seconds.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.main import get_command
from typer.testing import CliRunner

from sflsim.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]


@functools.cache
def docs_module(name: str):
    """``docs/<name>.py``, a generator the MkDocs hook (``docs/hooks.py``) runs."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass of it looks itself up there
    spec.loader.exec_module(module)
    return module


def _gen_reference():
    """``docs/gen_reference.py``: the scenario field reference."""
    return docs_module("gen_reference")


#: the pages the hook generates: they exist only in the built site
GENERATED = {(DOCS / docs_module(name).PAGE).resolve()
             for name in ("gen_reference", "gen_columns", "gen_profiles")}


# ------------------------------------------------------------------------- the README


def test_readme_is_a_short_front_page():
    assert len(README.read_text().splitlines()) <= 200


def test_readme_names_the_cpu_only_torch_before_any_other_install():
    lines = README.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert ("pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu"
            in lines[first])
    assert any("CPU-only" in line for line in lines[:first + 1])


def test_readme_keeps_the_setup_and_test_commands_ci_runs():
    text = README.read_text()
    assert 'pip install -e ".[dev]" && pytest' in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"\n' in ci and "\npytest\n" in ci
    assert 'mkdocs build --strict --site-dir "$(mktemp -d)"' in ci
    assert "mkdocs serve" in text


def _local_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve_to_files(page):
    """Links work on GitHub too: every relative link names a file in the checkout (the
    generated ``reference/scenario-fields.md``, ``reference/result-columns.md`` and
    ``reference/profile-library.md`` only in the built site)."""
    missing = []
    for target in _local_links(page):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        generated = path in GENERATED
        if not (path.is_file() or generated):
            missing.append(target)
        if page == README:
            assert target.startswith("docs/") and not generated, target
    assert not missing


# ------------------------------------------------------------ generated field reference


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def _all_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted field path of ``model``, recursively (mapping values as ``<name>``)."""
    out = []
    for name, info in model.model_fields.items():
        path = prefix + name
        out.append(path)
        if name == "algorithm" and not prefix:
            continue
        dict_of = typing.get_origin(info.annotation) is dict
        for nested in _models_in(info.annotation):
            out += _all_fields(nested, f"{path}.<name>." if dict_of else f"{path}.")
    return out


def test_every_scenario_field_is_in_the_generated_reference():
    from sflsim.config.algorithms import AlgorithmConfig
    from sflsim.config.scenario import Scenario

    page = _gen_reference().scenario_fields_markdown()
    expected = _all_fields(Scenario)
    for config in AlgorithmConfig.union_members():
        expected += _all_fields(config, "algorithm.")
        for name in typing.get_args(config.model_fields["name"].annotation):
            assert f"`{name}`" in page
    assert len(expected) > 150
    missing = [path for path in expected if f"| `{path}` |" not in page]
    assert not missing
    assert "| `training.rounds` | int | required |" in page


def test_the_hook_adds_the_generated_page():
    text = (DOCS / "hooks.py").read_text()
    assert "scenario_fields_markdown" in text and "File.generated" in text
    assert "reference/scenario-fields.md" in (ROOT / "mkdocs.yml").read_text()


# ---------------------------------------------------------------- commands in the pages


def _bash_commands() -> list[tuple[str, str]]:
    """(page, command) of every ``sflsim`` command in a fenced ``bash`` block: continuation
    lines joined, comments and leading ``VAR=value`` assignments kept apart."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                for part in re.split(r"\s*&&\s*", line):
                    if re.match(r"(\w+=\S+\s+)*sflsim\b", part):
                        out.append((page.relative_to(ROOT).as_posix(), part))
    return out


COMMANDS = _bash_commands()


def test_the_pages_show_commands():
    assert len(COMMANDS) > 40


def test_every_sflsim_command_names_a_real_subcommand():
    click_app = get_command(app)
    wrong = []
    for page, command in COMMANDS:
        words = [w for w in shlex.split(command) if not re.match(r"\w+=", w)]
        assert words[0] == "sflsim"
        if len(words) < 2 or words[1].startswith("-"):
            assert words[1:] in ([], ["--version"], ["--help"]), (page, command)
            continue
        sub = click_app.commands.get(words[1])
        if sub is None:
            wrong.append((page, command))
        elif hasattr(sub, "commands") and not set(words[2:3]) <= set(sub.commands) | {"--help"}:
            wrong.append((page, command))
    assert not wrong


#: names of what the reader makes first (a profile written by ``sflsim profile-host``)
READERS_OWN = {"myhost"}


def _runnable(command: str) -> bool:
    words = shlex.split(command)
    words = [w for w in words if not re.match(r"\w+=", w)]
    if READERS_OWN & set(words):
        return False
    return (words[1] in ("validate", "profiles")
            or (words[1] == "run" and ("--dry-run" in words or "--help" in words)))


RUNNABLE = [(page, command) for page, command in COMMANDS if _runnable(command)]


def _missing_data_root(words: list[str]) -> bool:
    roots = [w.split("=", 1)[1] for w in words if w.startswith("dataset.data_root=")]
    return any(not (ROOT / r).is_dir() or not any((ROOT / r).iterdir()) for r in roots)


@pytest.mark.parametrize(("page", "command"), RUNNABLE, ids=[c for _, c in RUNNABLE])
def test_documented_commands_run(page, command, monkeypatch, user_modules):
    """``sflsim validate``, ``sflsim profiles`` and ``sflsim run --help`` as the pages show
    them, from the checkout's root. A paper preset whose ``dataset.data_root`` is not on
    this machine may only fail on the missing dataset (exit status 2, naming it)."""
    monkeypatch.chdir(ROOT)
    # a user module on PYTHONPATH: on sys.path here, forgotten afterwards (user_modules)
    user_modules(dict(re.findall(r"^(\w+)=(\S+)\s", command)))
    words = [w for w in shlex.split(command) if not re.match(r"\w+=", w)]
    result = CliRunner().invoke(app, words[1:])
    code, output = result.exit_code, result.output
    if _missing_data_root(words):
        assert code == 2 and "does not exist" in output, output
    else:
        assert code == 0, output
