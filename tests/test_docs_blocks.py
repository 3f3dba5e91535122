"""The documentation's code blocks run, at the smallest size.

- Python blocks: each page's blocks, joined in order, run in a fresh interpreter from the
  checkout's root, with ``analysis/`` and ``examples/`` on the path (the pages say to run
  them from there). Scenarios they load are shrunk to one round on 2% of the data at
  width 1/16 (:data:`SMALLEST`), so a block that trains finishes in seconds.
- ``sflsim run`` commands: their scenario and ``--set`` overrides through ``sflsim
  validate`` (what ``run`` checks before it trains).
- ``sflsim sweep`` commands: with ``--dry-run`` (expand and validate every point).
- ``sflsim check``, ``export``, ``compare`` and ``plot`` on a run's results folder: on a
  finished 2-round tiny run copied under each folder name the command gives; on a sweep's
  folder (``runs/sweeps/<name>``): on that sweep, run by name at the smallest size.
- ``sflsim fleet from-fedscale``: on FedScale-shaped traces under the names it gives.
- ``python analysis/...``: the reproduction harness with ``--dry-run``, the table scripts
  on finished runs.

Install, test and build commands (``pip install``, ``pytest``, ``mkdocs build``) are what
``.ci/run`` runs; ``ray start`` needs a cluster of machines and is not run.

Commands on the reader's own files (:data:`PLACEHOLDERS`) are not run.

``tests/test_docs.py`` runs ``validate``, ``profiles`` and ``--help`` as written and
checks that every command names a real subcommand.
"""

from __future__ import annotations

import copy
import os
import pickle
import random
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.cli.main import app
from tests.conftest import TINY
from tests.test_docs import COMMANDS, PAGES

ROOT = Path(__file__).resolve().parents[1]

#: overrides that shrink a scenario a Python block loads to seconds of work
SMALLEST = ["training.rounds=1", "dataset.fraction=0.02", "dataset.test_fraction=0.02",
            "model.width=0.0625"]
#: file names the pages use for the reader's own files (placeholders, not in the repository)
PLACEHOLDERS = {"SWEEP.yaml", "my_fedsga.yaml"}


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def python_pages() -> list[tuple[str, str]]:
    """(page, its Python blocks joined in order) for every page that has one."""
    found = []
    for page in PAGES:
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
        if blocks:
            found.append((_rel(page), "\n".join(blocks)))
    return found


#: run before a page's blocks: every scenario loaded through ``sflsim.load_scenario`` is
#: shrunk by :data:`SMALLEST`
PREAMBLE = textwrap.dedent(f"""
    import sflsim
    _load = sflsim.load_scenario
    def _smallest(path, overrides=()):
        return _load(path, [*overrides, *{SMALLEST!r}])
    sflsim.load_scenario = _smallest
""")


@pytest.mark.parametrize(("page", "code"), python_pages(), ids=[p for p, _ in python_pages()])
def test_python_blocks_run(page, code):
    paths = [str(ROOT / "analysis"), str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p),
           "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", PREAMBLE + code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{page}:\n{done.stdout}\n{done.stderr}"


def sflsim_commands() -> list[tuple[str, str]]:
    """(page, command) for every ``sflsim`` command in a bash block (as ``tests/test_docs.py``
    reads them)."""
    return COMMANDS


def _words(command: str) -> tuple[dict[str, str], list[str]]:
    """(the leading ``VAR=value`` assignments, the command's words from ``sflsim`` on)."""
    prefix = re.match(r"((?:\w+=\S+\s+)*)", command).group(1)
    return dict(re.findall(r"(\w+)=(\S+)", prefix)), shlex.split(command[len(prefix):])


def _subcommand(command: str) -> str | None:
    words = _words(command)[1]
    return words[1] if len(words) > 1 else None


#: ``sflsim run`` options that set a scenario field, as ``--set`` gives them to validate
RUN_FIELDS = {"--device": "training.device", "--parallel-clients": "training.parallel_clients"}


def _sets(words: list[str]) -> list[str]:
    """The command's ``--set`` overrides, and its ``sflsim run`` options that set a field
    (``--device``, ``--parallel-clients``, ``--no-train``) written as overrides."""
    out = []
    for i, word in enumerate(words):
        if word == "--set":
            out += ["--set", words[i + 1]]
        elif word in RUN_FIELDS:
            out += ["--set", f"{RUN_FIELDS[word]}={words[i + 1]}"]
        elif word == "--no-train":
            out += ["--set", "training.timing_only=true"]
    return out


def _placeholder(words: list[str]) -> bool:
    return any(w in PLACEHOLDERS for w in words)


def _missing_data_root(words: list[str]) -> bool:
    roots = [w.split("=", 1)[1] for w in words if w.startswith("dataset.data_root=")]
    return any(not (ROOT / r).is_dir() or not any((ROOT / r).iterdir()) for r in roots)


def _check_outcome(page: str, command: str, code: int, output: str) -> None:
    """Exit status 0, but for what this machine lacks: a paper's dataset under a
    ``data_root`` that is not here (named, exit status 2, or 0 with a warning for a
    dry run) or a CUDA GPU (exit status 2, saying so)."""
    import torch

    words = _words(command)[1]
    lacking = [why for why, lacks in (
        ("does not exist", _missing_data_root(words)),
        ("CUDA", "cuda" in " ".join(words) and not torch.cuda.is_available())) if lacks]
    if lacking:
        assert code in (0, 2) and any(why in output for why in lacking), f"{page}: {command}\n{output}"
    else:
        assert code == 0, f"{page}: {command}\n{output}"


@pytest.fixture
def invoke(user_modules):
    """``invoke(env, args)``: the CLI in this process, with the command's leading
    ``VAR=value`` assignments (a user module on PYTHONPATH: on sys.path here, forgotten
    afterwards; see ``user_modules``)."""
    def run(env: dict[str, str], args: list[str]) -> tuple[int, str]:
        user_modules(env)
        result = CliRunner().invoke(app, args)
        return result.exit_code, result.output

    return run


RUNS = [(p, c) for p, c in sflsim_commands()
        if _subcommand(c) == "run" and "--help" not in c and not _placeholder(_words(c)[1])]


@pytest.mark.parametrize(("page", "command"), RUNS, ids=[c for _, c in RUNS])
def test_run_commands_validate(page, command, monkeypatch, invoke):
    monkeypatch.chdir(ROOT)
    env, words = _words(command)
    code, output = invoke(env, ["validate", words[2], *_sets(words)])
    _check_outcome(page, command, code, output)


SWEEPS = [(p, c) for p, c in sflsim_commands()
          if _subcommand(c) == "sweep" and "--help" not in c
          and not _placeholder(_words(c)[1])]


@pytest.mark.parametrize(("page", "command"), SWEEPS, ids=[c for _, c in SWEEPS])
def test_sweep_commands_expand(page, command, monkeypatch, tmp_path, invoke):
    monkeypatch.chdir(ROOT)
    env, words = _words(command)
    args = words[1:] + ([] if "--dry-run" in words else ["--dry-run"])
    code, output = invoke(env, args)
    _check_outcome(page, command, code, output)


#: subcommands that read a finished run's results folder
READERS = ("check", "export", "compare", "plot")


def _run_folders(words: list[str]) -> list[str]:
    return [w for w in words if w.startswith("runs/") and not w.startswith("runs/sweeps/")
            and not w.endswith(".json")]


def _sweep_folders(words: list[str]) -> list[str]:
    return [w for w in words if w.startswith("runs/sweeps/")]


READS = [(p, c) for p, c in sflsim_commands()
         if _subcommand(c) in READERS and "--help" not in c
         and _run_folders(_words(c)[1]) and not _sweep_folders(_words(c)[1])]
SWEEP_READS = [(p, c) for p, c in sflsim_commands()
               if _subcommand(c) in READERS and "--help" not in c and _sweep_folders(_words(c)[1])]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 2-round run of the tests' tiny scenario (pages plot round 2)."""
    from sflsim.config import validate_scenario
    from sflsim.runner import run_scenario

    data = copy.deepcopy(TINY)
    data["training"]["rounds"] = 2
    out = tmp_path_factory.mktemp("docs_run") / "run"
    run_scenario(validate_scenario(data), out)
    return out


@pytest.mark.parametrize(("page", "command"), READS, ids=[c for _, c in READS])
def test_commands_on_a_run_folder_run(page, command, monkeypatch, tmp_path, finished_run,
                                      invoke):
    monkeypatch.chdir(tmp_path)
    env, words = _words(command)
    for folder in _run_folders(words):
        shutil.copytree(finished_run, tmp_path / folder)
    (tmp_path / "figs").mkdir()
    code, output = invoke(env, words[1:])
    assert code == 0, f"{page}: {command}\n{output}"


@pytest.fixture(scope="module")
def finished_sweeps(tmp_path_factory):
    """A folder holding ``runs/sweeps/<name>`` for every sweep the pages read, each run
    by name as the pages run it, at the smallest size (:data:`SMALLEST`)."""
    where = tmp_path_factory.mktemp("docs_sweeps")
    names = sorted({f.split("/")[2] for _, c in SWEEP_READS for f in _sweep_folders(_words(c)[1])})
    sets = [arg for s in SMALLEST for arg in ("--set", s)]
    before = Path.cwd()
    os.chdir(where)
    try:
        for name in names:
            result = CliRunner().invoke(app, ["sweep", name, "--workers", "1", *sets])
            assert result.exit_code == 0, result.output
    finally:
        os.chdir(before)
    return where


@pytest.mark.parametrize(("page", "command"), SWEEP_READS, ids=[c for _, c in SWEEP_READS])
def test_commands_on_a_sweep_folder_run(page, command, monkeypatch, tmp_path, finished_sweeps,
                                        invoke):
    env, words = _words(command)
    for folder in _sweep_folders(words):
        shutil.copytree(finished_sweeps / folder, tmp_path / folder)
    (tmp_path / "figs").mkdir()
    monkeypatch.chdir(tmp_path)
    code, output = invoke(env, words[1:])
    assert code == 0, f"{page}: {command}\n{output}"


FLEETS = [(p, c) for p, c in sflsim_commands() if _subcommand(c) == "fleet" and "--help" not in c]


@pytest.mark.parametrize(("page", "command"), FLEETS, ids=[c for _, c in FLEETS])
def test_fleet_commands_run(page, command, monkeypatch, tmp_path, invoke):
    """``sflsim fleet from-fedscale`` on FedScale-shaped traces of 1,200 clients, under the
    file names the page gives (FedScale's ``client_device_capacity`` and
    ``client_behave_trace``: pickled {client id: {...}})."""
    env, words = _words(command)

    def option(flag: str) -> str:
        return words[words.index(flag) + 1]

    rng = random.Random(0)
    capacity = {i: {"computation": rng.uniform(5, 100), "communication": rng.uniform(500, 50_000)}
                for i in range(1, 1201)}
    behaviour = {i: {"duration": 3600, "active": [0, 2400], "inactive": [1800, 3600],
                     "finish_time": 3600, "model": "Pixel 3"} for i in range(1, 1201)}
    (tmp_path / option("--capacity")).write_bytes(pickle.dumps(capacity))
    (tmp_path / option("--behaviour")).write_bytes(pickle.dumps(behaviour))
    monkeypatch.chdir(tmp_path)
    code, output = invoke(env, words[1:])
    assert code == 0, f"{page}: {command}\n{output}"
    fleet = pd.read_csv(tmp_path / option("-o"))
    if "--clients" in words:
        assert len(fleet) == int(option("--clients"))


def python_commands() -> list[tuple[str, str]]:
    """(page, command) for every ``python analysis/...`` command in a bash block."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if line.startswith("python analysis/"):
                    out.append((_rel(page), line))
    return out


ANALYSIS = python_commands()
#: the algorithm of each run folder the table scripts read, as the pages' run commands make it
FOLDER_ALGORITHMS = {"sequential": "hetero_splitee_sequential",
                     "averaging": "hetero_splitee_averaging", "distributed": "distributed",
                     "fedsga": "fedsga", "multisfl": "multisfl"}


@pytest.fixture(scope="module")
def runs_by_algorithm(tmp_path_factory):
    """A finished 1-round tiny run of each algorithm of :data:`FOLDER_ALGORITHMS`."""
    from sflsim.config import validate_scenario
    from sflsim.runner import run_scenario

    where = tmp_path_factory.mktemp("docs_algorithm_runs")
    for name in sorted(set(FOLDER_ALGORITHMS.values())):
        data = copy.deepcopy(TINY)
        data["algorithm"] = {"name": name}
        run_scenario(validate_scenario(data), where / name)
    return where


@pytest.mark.parametrize(("page", "command"), ANALYSIS, ids=[c for _, c in ANALYSIS])
def test_analysis_commands_run(page, command, tmp_path, runs_by_algorithm):
    """The harness as ``--dry-run`` (its points, scales and deviations; nothing trained);
    a table script on finished tiny runs of the algorithm each folder holds
    (:data:`FOLDER_ALGORITHMS`; a ``*`` pattern as FedSGA's and MultiSFL's)."""
    words = shlex.split(command)
    if words[1] == "analysis/reproduce.py" and "--list" not in words:
        words.append("--dry-run")
    args = [str(ROOT / words[1])]
    for word in words[2:]:
        if word.startswith("runs/"):
            folders = ([f"{word[:-1]}{name}" for name in ("fedsga", "multisfl")]
                       if word.endswith("/*") else [word])
            for folder in folders:
                algorithm = FOLDER_ALGORITHMS[folder.rsplit("/", 1)[1]]
                shutil.copytree(runs_by_algorithm / algorithm, tmp_path / folder)
                args.append(str(tmp_path / folder))
        else:
            args.append(word)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{page}: {command}\n{done.stdout}\n{done.stderr}"


def test_the_pages_have_blocks_of_each_kind():
    """The lists above are not empty by a parsing slip."""
    assert len(python_pages()) >= 3 and len(RUNS) >= 10 and len(SWEEPS) >= 5 and len(READS) >= 4
    assert len(SWEEP_READS) >= 3 and FLEETS and len(ANALYSIS) >= 5
