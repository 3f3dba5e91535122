"""A torch or torchvision that cannot be imported is told in one line with its fix, not
as a traceback; ``sflsim --version`` says torch's build. The failures are simulated:
an import that raises what a broken install raises, from torchvision's own module code
where the real one raises it."""

from __future__ import annotations

import builtins
import copy

import pytest
import torch
import torchvision
import yaml
from typer.testing import CliRunner

import sflsim
from sflsim.cli.common import EXIT_FAILED
from sflsim.cli.install import REINSTALL, install_problem, mismatch_message
from sflsim.cli.main import app
from tests.conftest import TINY

NMS = "operator torchvision::nms does not exist"


def raise_in_module(package_module: str, exc: BaseException) -> None:
    """Raise ``exc`` from module-level code of ``package_module`` (``torchvision._meta``),
    as an error in a package's own import is raised."""
    exec(compile("raise exc", f"<{package_module}>", "exec"),
         {"__name__": package_module, "exc": exc})


def failing_import(monkeypatch, names: tuple[str, ...], fail) -> None:
    """Make ``import X`` (``from X import ...``) call ``fail()`` for each X in ``names``."""
    real = builtins.__import__

    def fake(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name in names:
            fail()
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", fake)


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"sflsim {' '.join(args)} raised {result.exception!r}"
    return result


@pytest.fixture
def scenario(tmp_path):
    data = copy.deepcopy(TINY)
    data["training"]["timing_only"] = True
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_torchvision_built_for_another_torch_is_one_line(scenario, tmp_path, monkeypatch):
    def fail():
        raise_in_module("torchvision._meta_registrations", RuntimeError(NMS))

    failing_import(monkeypatch, ("sflsim.runner",), fail)  # torch(vision) load with it
    result = invoke("run", str(scenario), "-q", "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_FAILED, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert line == f"error: {mismatch_message()}"
    assert line.startswith(f"error: torchvision {torchvision.__version__.split('+')[0]} was "
                           f"built for another torch than the torch ")
    assert line.endswith(f"reinstall them together, {REINSTALL}")
    assert "Traceback" not in result.output and NMS not in result.output


def test_the_mismatch_is_told_wherever_the_error_is_raised():
    """The message alone says it (raised in torch's registration code, not torchvision's)."""
    assert install_problem(RuntimeError(NMS)) == mismatch_message()


def test_torch_missing_is_one_line(scenario, tmp_path, monkeypatch):
    def fail():
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    failing_import(monkeypatch, ("sflsim.runner",), fail)
    result = invoke("run", str(scenario), "-q", "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_FAILED, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: torch is not installed for this "
                                                     "Python"), result.output
    assert "pip install torch torchvision" in errors[0]


def test_a_library_torch_cannot_load_is_one_line_naming_it(scenario, tmp_path, monkeypatch):
    def fail():
        raise_in_module("torch._C", OSError("libcudnn.so.9: cannot open shared object file: "
                                            "No such file or directory"))

    failing_import(monkeypatch, ("sflsim.runner",), fail)
    result = invoke("run", str(scenario), "-q", "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_FAILED, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert line.startswith("error: torch ") and "cannot be imported (OSError: libcudnn.so.9: " \
        "cannot open shared object file: No such file or directory)" in line
    assert line.endswith(REINSTALL) and "Traceback" not in result.output


def test_other_errors_are_not_taken_for_an_install_problem():
    assert install_problem(RuntimeError("CUDA out of memory")) is None
    assert install_problem(ModuleNotFoundError("No module named 'ray'", name="ray")) is None
    assert install_problem(ModuleNotFoundError("x", name="torchaudio")) is None
    with pytest.raises(OSError) as raised:  # raised by sflsim's own module code
        raise_in_module("sflsim.fake", OSError("disk full"))
    assert install_problem(raised.value) is None


def test_version_says_torch_its_build_and_torchvision():
    result = invoke("--version")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"sflsim {sflsim.__version__}"
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else \
        f"ROCm {torch.version.hip}" if getattr(torch.version, "hip", None) else "cpu"
    cuda = "yes" if torch.cuda.is_available() else "no"
    assert lines[1].startswith(
        f"torch {torch.__version__} (build: {build}; CPU capability: "
        f"{torch.backends.cpu.get_cpu_capability()}; CUDA available: {cuda}")
    assert lines[2] == f"torchvision {torchvision.__version__}"
    assert len(lines) == 3


def test_version_with_a_broken_torchvision_is_one_line(monkeypatch):
    def fail():
        raise_in_module("torchvision._meta_registrations", RuntimeError(NMS))

    failing_import(monkeypatch, ("torchvision",), fail)
    result = invoke("--version")
    assert result.exit_code == EXIT_FAILED, result.output
    assert result.output.splitlines() == [f"sflsim {sflsim.__version__}",
                                          f"error: {mismatch_message()}"]
