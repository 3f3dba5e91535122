"""The shipped profiles and scenarios: found from a checkout and from a built wheel, and
named on the command line instead of a path (``sflsim run quickstart``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sflsim
from sflsim import shipped
from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.errors import ConfigError
from sflsim.hardware.profiles import SHIPPED_PROFILES, profile_dirs
from tests.cli_probes import probe_commands

ROOT = Path(__file__).resolve().parents[1]
#: what the wheel is built from (all that pyproject.toml reads)
BUILD_INPUTS = ("pyproject.toml", "README.md", "sflsim", "device_profiles", "scenarios")


def test_a_checkout_uses_its_own_profiles_and_scenarios():
    assert SHIPPED_PROFILES == ROOT / "device_profiles"
    assert profile_dirs()[-1] == SHIPPED_PROFILES
    assert shipped.scenarios_dir() == ROOT / "scenarios"
    assert shipped.scenarios_dir(sweeps=True) == ROOT / "scenarios" / "sweeps"
    assert {"quickstart", "bench_fedavg_cnn"} <= set(shipped.shipped_names())
    assert "device_mix" in shipped.shipped_names(sweeps=True)


def test_a_copy_inside_the_package_wins(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "sflsim"
    (package / "device_profiles").mkdir(parents=True)
    monkeypatch.setattr(shipped, "PACKAGE", package)
    assert shipped.profiles_dir() == package / "device_profiles"
    assert shipped.scenarios_dir() == tmp_path / "site-packages" / "scenarios"  # no copy: beside


@pytest.mark.parametrize("arg", ["quickstart", "quickstart.yaml", "quickstart.yml"])
def test_a_bare_name_means_a_shipped_scenario(arg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shipped.scenario_path(arg) == ROOT / "scenarios" / "quickstart.yaml"


def test_a_file_here_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("quickstart.yaml").write_text("name: mine\n")
    assert shipped.scenario_path("quickstart.yaml") == Path("quickstart.yaml")
    assert shipped.scenario_path(Path("quickstart.yaml")) == Path("quickstart.yaml")


@pytest.mark.parametrize("arg", ["missing.yaml", "sub/quickstart", "sub/quickstart.yaml",
                                 "quickstart.json"])
def test_other_missing_paths_are_left_to_the_loader(arg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shipped.scenario_path(arg) == Path(arg)


@pytest.mark.parametrize(("arg", "sweeps", "said"), [
    ("scenarios/quickstart.yaml", False, "under the name quickstart; give its name instead: "
                                         "quickstart"),
    ("scenarios/papers/fedsga/cifar100_resnet18.yaml", False,
     "under the name papers/fedsga/cifar100_resnet18; give its name instead: "
     "papers/fedsga/cifar100_resnet18"),
    ("scenarios/sweeps/device_mix.yaml", True, "under the name device_mix; give its name "
                                               "instead: device_mix"),
    ("scenarios/sweeps/device_mix.yaml", False,
     "under the name device_mix; it is a sweep: sflsim sweep device_mix"),
    ("scenarios/quickstart.yaml", True,
     "under the name quickstart; it is a scenario: sflsim run quickstart"),
])
def test_the_checkout_path_typed_elsewhere_names_the_shipped_file(arg, sweeps, said, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        shipped.scenario_path(arg, sweeps=sweeps)
    assert str(err.value) == (f"{'sweep' if sweeps else 'scenario'} file {arg!r} does not exist "
                              f"(relative to {tmp_path}); it is shipped with sflsim {said}")
    # a path under scenarios/ that ships nothing is left to the loader
    assert shipped.scenario_path("scenarios/mine.yaml") == Path("scenarios/mine.yaml")


def test_the_python_api_takes_shipped_names_too(tmp_path, monkeypatch):
    from sflsim.config import load_scenario

    monkeypatch.chdir(tmp_path)
    assert load_scenario("quickstart", ["training.rounds=1"]).training.rounds == 1
    assert load_scenario("papers/fedsga/cifar100_resnet18").dataset.name == "cifar100"
    with pytest.raises(ConfigError, match="'quickstar' is neither a file .* Did you mean "
                                          "'quickstart'"):
        load_scenario("quickstar")


def test_an_unknown_name_lists_the_shipped_scenarios(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        shipped.scenario_path("quickstrat")
    message = str(err.value)
    assert "'quickstrat' is neither a file" in message
    assert "Did you mean 'quickstart'?" in message
    assert "bench_fedavg_cnn" in message and str(ROOT / "scenarios") in message


def test_sweep_names_resolve_among_the_shipped_sweeps(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shipped.scenario_path("device_mix", sweeps=True) == \
        ROOT / "scenarios" / "sweeps" / "device_mix.yaml"
    with pytest.raises(ConfigError, match="Shipped sweeps: device_mix, sequential_vs_averaging"):
        shipped.scenario_path("quickstart", sweeps=True)


def test_cli_validates_a_shipped_scenario_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["validate", "bench_fedavg_cnn"])
    assert result.exit_code == 0, result.output
    assert f"ok {ROOT / 'scenarios' / 'bench_fedavg_cnn.yaml'}" in " ".join(result.output.split())


def test_cli_unknown_scenario_name_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["run", "nosuch"], ["validate", "nosuch"], ["sweep", "nosuch", "--dry-run"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == USER_ERROR, (command, result.output)
        assert "is neither a file" in result.output


def test_cli_sweep_dry_run_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["sweep", "device_mix", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sweep device_mix: 5 points" in result.output


def test_version_is_the_package_version():
    """The first line is sflsim's version; torch's and torchvision's follow
    (``tests/test_install_problems.py``)."""
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == f"sflsim {sflsim.__version__}"
    assert sflsim.__version__.count(".") >= 2


def test_cli_starts_without_importing_torch():
    """``sflsim --help`` takes a second, not the seconds torch takes (``--version`` imports
    torch: it says torch's build)."""
    code = ("import sys, sflsim.cli.main; "
            "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "[]"


def test_readme_setup_commands():
    """The quickstart installs what a run needs, no more; the test command is CI's."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    assert blocks[0].strip() == "pip install -e . && sflsim run scenarios/quickstart.yaml"
    assert blocks[1].strip() == 'pip install -e ".[dev]" && pytest'
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"# README: {blocks[1].strip()}" in ci
    assert 'pip install -e ".[dev]"\n' in ci and "\npytest\n" in ci


#: commands that need no training, and so no torch (``tiny_run`` is a finished run)
NO_TORCH_COMMANDS = {
    "help": (["--help"], 0),
    "validate a bad scenario": (["validate", "{bad}"], USER_ERROR),
    "validate an override's typo": (["validate", "{good}", "--set", "training.round=2"], USER_ERROR),
    "run a bad scenario": (["run", "{bad}", "-o", "{tmp}/out"], USER_ERROR),
    "validate a misspelled profile": (["validate", "{good}", "--set", "devices.weak.profile=rpi_four"],
                                      USER_ERROR),
    "profiles list": (["profiles", "list"], 0),
    "compare": (["compare", "{run}", "{run2}"], 0),
    "export": (["export", "{run2}", "--csv", "--to", "{tmp}/csv"], 0),
    "plot tta": (["plot", "tta", "{run}", "-o", "{tmp}/tta"], 0),
    "plot timeline": (["plot", "timeline", "{run}", "-o", "{tmp}/timeline"], 0),
    "plot tradeoff": (["plot", "tradeoff", "{run}", "{run2}", "-o", "{tmp}/tradeoff"], 0),
}


#: runs the CLI on ``args`` as ``sflsim`` does (tests/cli_probes.py: the commands share an
#: interpreter, each checked for torch once it has ended, as if it ran in one of its own)
NO_TORCH_CALL = """
from sflsim.cli.main import app
try:
    app(args)
except SystemExit as e:
    return e.code or 0
return 0
"""


@pytest.fixture(scope="module")
def no_torch_results(tiny_run, tmp_path_factory) -> dict[str, dict]:
    """Every command of :data:`NO_TORCH_COMMANDS` run once, each in a folder of its own."""
    runs = []
    for i, (name, (args, _)) in enumerate(NO_TORCH_COMMANDS.items()):
        tmp = tmp_path_factory.mktemp(f"no_torch{i}")
        run2 = tmp / "run2"
        shutil.copytree(tiny_run, run2)
        bad = tmp / "bad.yaml"
        bad.write_text("name: bad\ntraining: {roundz: 2}\n")
        good = tiny_run / "scenario.yaml"  # a valid scenario: the run's own
        runs.append((name, [a.format(bad=bad, good=good, run=tiny_run, run2=run2, tmp=tmp)
                            for a in args], tmp))
    return probe_commands(NO_TORCH_CALL, runs)


@pytest.mark.parametrize("name", list(NO_TORCH_COMMANDS))
def test_commands_that_train_nothing_do_not_import_torch(name, no_torch_results):
    """Each as in a fresh interpreter: a mistake in a scenario is told in a second, not
    after the seconds torch takes to load."""
    status = NO_TORCH_COMMANDS[name][1]
    done = no_torch_results[name]
    assert done["code"] == status, done["stdout"] + done["stderr"]
    assert done["torch"] is False, done["stdout"] + done["stderr"]
    if status == USER_ERROR:
        assert done["stderr"].count("error:") == 1 and "Traceback" not in done["stderr"]


# ------------------------------------------------------------------------------ the wheel


def _expected_data_files() -> set[str]:
    """Wheel paths of every profile, scenario and embedded data file in the checkout."""
    files = {f"sflsim/device_profiles/{p.relative_to(ROOT / 'device_profiles').as_posix()}"
             for p in (ROOT / "device_profiles").rglob("*") if p.suffix in (".yaml", ".md")}
    files |= {f"sflsim/scenarios/{p.relative_to(ROOT / 'scenarios').as_posix()}"
              for p in (ROOT / "scenarios").rglob("*.yaml")}
    files |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "sflsim" / "data" / "embedded").iterdir()
              if p.suffix in (".npz", ".md")}
    return files


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the build inputs (offline: no build isolation)."""
    pytest.importorskip("setuptools")
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, src / name)
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(dist), str(src)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    (path,) = dist.glob("sflsim-*.whl")
    return path


def test_wheel_carries_every_module_profile_and_scenario(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "sflsim").rglob("*.py")}
    data = _expected_data_files()
    assert len([n for n in data if n.startswith("sflsim/device_profiles/servers/")]) >= 3
    assert "sflsim/scenarios/quickstart.yaml" in data
    assert modules - names == set(), "modules missing from the wheel (pyproject.toml packages)"
    assert data - names == set(), "data files missing from the wheel"
    # one copy, inside the package: nothing lands at the top of site-packages
    assert {n.split("/")[0] for n in names} == {"sflsim", wheel.name.split("-py")[0] + ".dist-info"}
    assert wheel.name.startswith(f"sflsim-{sflsim.__version__}-")


def test_unpacked_wheel_runs_a_shipped_scenario_by_name(wheel, tmp_path):
    """The wheel's own files, not the checkout's: profiles and scenarios come from inside it."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    env.pop("SFLSIM_PROFILE_PATH", None)
    check = subprocess.run(
        [sys.executable, "-c", "import sflsim, sflsim.hardware.profiles as p; "
         "print(sflsim.__file__); print(p.SHIPPED_PROFILES)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert check == [str(site / "sflsim" / "__init__.py"), str(site / "sflsim" / "device_profiles")]
    result = subprocess.run([sys.executable, "-m", "sflsim", "validate", "quickstart"],
                            cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"ok {site / 'sflsim' / 'scenarios' / 'quickstart.yaml'}" in " ".join(result.stdout.split())


# ------------------------------------------------------------------------------ paper presets


@pytest.mark.parametrize("arg, sweeps, expected", [
    ("papers/fedsga/cifar100_resnet18", False, "papers/fedsga/cifar100_resnet18.yaml"),
    ("papers/hetero_splitee/stl10.yaml", False, "papers/hetero_splitee/stl10.yaml"),
    ("papers/fedsga/sweeps/table2_cifar10_resnet18", True,
     "papers/fedsga/sweeps/table2_cifar10_resnet18.yaml"),
    ("sweeps/device_mix", True, "sweeps/device_mix.yaml"),
])
def test_a_name_with_folders_means_a_file_under_the_shipped_scenarios(arg, sweeps, expected,
                                                                      tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shipped.scenario_path(arg, sweeps=sweeps) == ROOT / "scenarios" / expected
    Path("papers/fedsga").mkdir(parents=True)  # a file of that name here wins
    Path("papers/fedsga/cifar100_resnet18.yaml").write_text("name: mine\n")
    assert shipped.scenario_path("papers/fedsga/cifar100_resnet18.yaml") == \
        Path("papers/fedsga/cifar100_resnet18.yaml")
    for outside in ("../scenarios/quickstart", str(ROOT / "scenarios" / "papers" / "nosuch")):
        assert shipped.scenario_path(outside) == Path(outside)


def test_an_unknown_name_points_to_the_paper_presets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"the papers' presets by folder, e\.g\. papers/fedsga/"):
        shipped.scenario_path("nosuch")
    with pytest.raises(ConfigError, match=r"e\.g\. papers/fedsga/sweeps/"):
        shipped.scenario_path("nosuch", sweeps=True)


def test_cli_names_a_paper_preset_and_its_sweep_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["sweep", "papers/hetero_splitee/sweeps/table3_stl10",
                                      "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sweep hetero_splitee_table3_stl10: 12 points" in result.output
    # validating needs the data: without it, the message says where it looked
    result = CliRunner().invoke(app, ["validate", "papers/hetero_splitee/stl10"])
    assert result.exit_code == USER_ERROR
    message = " ".join(result.output.split())
    assert str(ROOT / "scenarios" / "papers" / "hetero_splitee" / "stl10.yaml") in message
    assert "stl10_binary" in message and "download" in message


def test_the_readme_scenario_example_validates():
    """README "Scenario files": its example is a scenario as printed, resolved as the
    comments say (Sequential's server lr divides by the clients per round)."""
    import yaml

    from sflsim.config.load import validate_scenario
    from sflsim.config.resolve import resolve_scenario

    section = (ROOT / "docs" / "reference" / "scenario-files.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    scenario = validate_scenario(yaml.safe_load(block))
    assert scenario.num_clients == 8
    assert resolve_scenario(scenario).algorithm.server_lr_divisor == 8
