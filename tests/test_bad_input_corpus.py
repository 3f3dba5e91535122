"""A corpus of bad input as files a user could have written, plus a fuzz of the schema.

``tests/corpus/scenarios/*.yaml`` are scenario files; ``tests/corpus/profiles/<case>/``
each hold one hardware profile (in ``devices/``, ``links/`` or ``servers/``) and a
``scenario.yaml`` that uses it, validated with ``$SFLSIM_PROFILE_PATH`` pointing at
the case folder. Each file says what ``sflsim validate`` must print in header lines
``# expect: <fragment>`` (``# exit: 0`` marks a file that must be accepted); files
that cannot hold a comment (empty, binary) are listed in ``tests/corpus/expected.yaml``.
Scenario files run with ``tests/corpus/scenarios`` as the working directory, so that
their relative paths (bandwidth traces, missing dataset folders) resolve there.

The property test mutates the shipped scenarios at random (deleted, misspelled and
unknown keys, values of every wrong type, wrong nesting) and checks that loading and
validating gives a :class:`Scenario` or one :class:`SflsimError`, never another
exception.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config import load_scenario, validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.errors import SflsimError
from sflsim.hardware import profiles

CORPUS = Path(__file__).resolve().parent / "corpus"
SCENARIOS = CORPUS / "scenarios"
PROFILE_CASES = CORPUS / "profiles"
EXPECTED: dict[str, list[str]] = yaml.safe_load((CORPUS / "expected.yaml").read_text())

#: Cases that still fail for a reason outside this test's reach (see the reason).
KNOWN_BUGS: dict[str, str] = {}


def expectations(path: Path) -> tuple[int, list[str]]:
    """The exit code and message fragments a corpus file asks for (header or expected.yaml)."""
    rel = path.relative_to(CORPUS).as_posix()
    if rel in EXPECTED:
        return USER_ERROR, EXPECTED[rel]
    text = path.read_bytes().decode("utf-8").lstrip("\ufeff")
    code, fragments = USER_ERROR, []
    for line in text.splitlines():
        if line.startswith("# exit:"):
            code = int(line.split(":", 1)[1])
        elif line.startswith("# expect:"):
            fragments.append(line.split(":", 1)[1].strip())
    return code, fragments


def case_param(path: Path, rel: str) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[rel])] if rel in KNOWN_BUGS else []
    return pytest.param(path, id=rel, marks=marks)


SCENARIO_FILES = sorted(SCENARIOS.glob("*.yaml"))
PROFILE_DIRS = sorted(d for d in PROFILE_CASES.iterdir() if d.is_dir())

runner = CliRunner()


def validate_cli(target: str) -> tuple[int, str]:
    """``sflsim validate TARGET``: the exit code and stdout + stderr; fails on a raised exception."""
    result = runner.invoke(app, ["validate", target])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"sflsim validate {target} raised {result.exception!r}")
    out = result.stdout + (result.stderr if result.stderr_bytes is not None else "")
    return result.exit_code, out


def check_output(path: Path, code: int, out: str) -> None:
    want_code, fragments = expectations(path)
    assert fragments, f"{path}: no '# expect:' lines and no entry in expected.yaml"
    assert code == want_code, f"exit {code}, expected {want_code}:\n{out}"
    assert "Traceback" not in out, out
    if want_code == USER_ERROR:
        assert out.count("error:") == 1, out
        assert len(out.strip().splitlines()) == 1, f"one mistake should give one line:\n{out}"
    for part in fragments:
        assert part in out, f"{part!r} not in output:\n{out}"


@pytest.fixture
def clean_profiles(monkeypatch: pytest.MonkeyPatch):
    """No user profile folders; the profile cache cleared before and after."""
    monkeypatch.delenv("SFLSIM_PROFILE_PATH", raising=False)
    profiles.load_profile.cache_clear()
    yield monkeypatch
    profiles.load_profile.cache_clear()


@pytest.mark.parametrize("path", [case_param(p, p.relative_to(CORPUS).as_posix())
                                  for p in SCENARIO_FILES])
def test_scenario_corpus(path: Path, clean_profiles: pytest.MonkeyPatch) -> None:
    clean_profiles.chdir(SCENARIOS)
    code, out = validate_cli(path.name)
    check_output(path, code, out)
    if code == USER_ERROR:  # found by the loader or when validate builds the run (data, memory)
        assert path.name in out, f"the message should name the file:\n{out}"


@pytest.mark.parametrize("cap", ["1", str(2**50)])
@pytest.mark.parametrize("rel", ["scenarios/92_device_memory.yaml",
                                 "profiles/07_device_memory_too_small/scenario.yaml"])
def test_device_memory_is_told_whatever_the_host_has(rel: str, cap: str,
                                                     clean_profiles: pytest.MonkeyPatch) -> None:
    """A device that cannot hold its client-side model is the more specific error: it is
    reported whether the host has no memory to spare or plenty."""
    path = CORPUS / rel
    clean_profiles.setenv("SFLSIM_MEMORY_LIMIT_BYTES", cap)
    if rel.startswith("profiles/"):
        clean_profiles.setenv("SFLSIM_PROFILE_PATH", str(path.parent))
    clean_profiles.chdir(path.parent)
    code, out = validate_cli(path.name)
    check_output(path, code, out)
    assert "memory: this run needs" not in out


@pytest.mark.parametrize("case", [case_param(d, d.relative_to(CORPUS).as_posix())
                                  for d in PROFILE_DIRS])
def test_profile_corpus(case: Path, clean_profiles: pytest.MonkeyPatch) -> None:
    clean_profiles.setenv("SFLSIM_PROFILE_PATH", str(case))
    clean_profiles.chdir(case)
    code, out = validate_cli("scenario.yaml")
    check_output(case / "scenario.yaml", code, out)


def test_corpus_is_complete() -> None:
    """At least 40 bad files, every file has expectations, expected.yaml names real files."""
    bad = [p for p in SCENARIO_FILES if expectations(p)[0] == USER_ERROR]
    assert len(bad) + len(PROFILE_DIRS) >= 40
    assert len(PROFILE_DIRS) >= 10
    for rel in EXPECTED:
        assert (CORPUS / rel).is_file(), rel
    for path in [*SCENARIO_FILES, *(d / "scenario.yaml" for d in PROFILE_DIRS)]:
        assert expectations(path)[1], f"{path} lists no expected fragments"
    for d in PROFILE_DIRS:
        assert any((d / kind).is_dir() for kind in profiles.KINDS), d


def test_python_tags_do_nothing(clean_profiles: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The !!python/object/apply corpus files are refused before anything runs."""
    marker = tmp_path / "pwned"
    for path in (SCENARIOS / "59_python_object_tag.yaml",
                 PROFILE_CASES / "12_device_python_tag" / "devices" / "myboard.yaml"):
        text = path.read_text().replace("echo pwned", f"touch {marker}")
        target = tmp_path / "devices" / "myboard.yaml" if "devices" in path.parts else None
        if target is None:
            target = tmp_path / "s.yaml"
            target.write_text(text)
            validate_cli(str(target))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            clean_profiles.setenv("SFLSIM_PROFILE_PATH", str(tmp_path))
            profiles.load_profile.cache_clear()
            validate_cli(str(PROFILE_CASES / "12_device_python_tag" / "scenario.yaml"))
        assert not marker.exists()


# ------------------------------------------------------------ property test (fuzz)


def _shipped() -> list[dict[str, Any]]:
    """The shipped scenarios that validate as they are (quickstart must be one)."""
    out = []
    for path in sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        try:
            validate_scenario(copy.deepcopy(data))
        except SflsimError:
            continue  # another test owns the shipped scenarios
        out.append(data)
    return out


SEEDS = _shipped()

ODD_TEXT = ["nan", "NaN Mbps", ".inf", "-5 Mbps", "0 Mbps", "5 Mbs", "1e400", "1e-3", "-1",
            "0", "yes", "no", "", " ", "20 Mbps", "35 ms", "4 GiB", "-3 ms", "rpi44", "6g",
            "dirichlet", "vit", "resnet18", "resource", "static", "splitfed_v1", "fedsga",
            "multisfl", "fedavg", "shared_access", "priority", "../escape", "[/]x", "{", "\t"]
VALUES = st.one_of(
    st.integers(min_value=-10, max_value=10),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.just(10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(ODD_TEXT),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-3, max_value=8), max_size=3),
    st.dictionaries(st.sampled_from(["name", "value", "x", "count", "alpha"]),
                    st.integers(min_value=-2, max_value=3), max_size=2),
)
UNKNOWN_KEYS = st.one_of(st.sampled_from(["bogus", "colour", "roundz", "endlayer", "lr_",
                                          "name", "value", "split", "alpha", "slots"]),
                         st.integers(min_value=0, max_value=9), st.booleans())


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a nested dict/list (lists by index)."""
    out = []
    items = node.items() if isinstance(node, dict) else (
        enumerate(node) if isinstance(node, list) else [])
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


def _parent(data: Any, path: tuple) -> Any:
    for key in path[:-1]:
        data = data[key]
    return data


def _typo(word: str, i: int) -> str:
    if not word:
        return "x"
    i %= len(word)
    return [word[:i] + word[i + 1:] or "x", word[:i] + word[i] + word[i:],
            word[:i] + "z" + word[i + 1:], word.upper()][i % 4]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(data)
        op = draw(st.sampled_from(["delete", "typo", "value", "value", "insert", "nest",
                                   "key_type"]))
        if not paths:
            op = "insert"
        path = draw(st.sampled_from(paths)) if paths else ()
        parent = _parent(data, path) if path else data
        key = path[-1] if path else None
        if op == "delete":
            del parent[key]
        elif op == "typo" and isinstance(parent, dict):
            parent[_typo(str(key), draw(st.integers(0, 20)))] = parent.pop(key)
        elif op == "value":
            parent[key] = draw(VALUES)
        elif op == "insert":
            target = parent[key] if path else data
            if not isinstance(target, dict):
                target = data
            target[draw(UNKNOWN_KEYS)] = draw(VALUES)
        elif op == "nest":
            value = parent[key]
            parent[key] = draw(st.sampled_from([{"value": value}, [value], {str(key): value}]))
        elif op == "key_type" and isinstance(parent, dict):
            parent[draw(st.one_of(st.integers(0, 9), st.booleans(), st.none()))] = parent.pop(key)
    return data


def _accepts_or_one_error(run) -> None:
    try:
        result = run()
    except SflsimError as exc:
        msg = str(exc)
        assert msg and "Traceback" not in msg
        return
    assert isinstance(result, Scenario)


@settings(max_examples=500, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated())
def test_mutated_scenario_validates_or_gives_config_error(data: dict[str, Any]) -> None:
    assert any(s.get("name") == "quickstart" for s in SEEDS)
    _accepts_or_one_error(lambda: validate_scenario(data, where="fuzz.yaml"))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated(), cut=st.integers(min_value=0, max_value=4000),
       junk=st.sampled_from(["", "\t", ":", "- ", "{", "]", "!!python/name:os.system ", "&a ",
                             "*a", "? ", "\x00", "'", "%", "@"]))
def test_mutated_scenario_file_loads_or_gives_config_error(data: dict[str, Any], cut: int,
                                                           junk: str) -> None:
    """The same through a file, with YAML damage spliced into the text."""
    text = yaml.safe_dump(data, sort_keys=False)
    cut %= len(text) + 1
    text = text[:cut] + junk + text[cut:]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(text)
        _accepts_or_one_error(lambda: load_scenario(path))
