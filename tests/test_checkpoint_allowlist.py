"""A checkpoint from someone else cannot run code on ``--resume``: its checksum finds
damage, not forgery, so the checkpoint (and its header) is read with only the classes
and functions a checkpoint holds (``sflsim/checkpoint_globals.py``), and one naming
anything else is refused by name before anything of it is built or run."""

from __future__ import annotations

import copy
import io
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from sflsim.checkpoint import CHECKPOINT, CHECKSUM, _Pickler, checksum
from sflsim.checkpoint_globals import CheckpointUnpickler
from sflsim.cli.common import USER_ERROR
from sflsim.cli.main import app
from sflsim.config.scenario import Scenario
from sflsim.errors import SflsimError
from sflsim.inputs.pickles import ForbiddenGlobal
from sflsim.runner import run_scenario
from tests.conftest import TINY
from tests.test_resilience import StopAfter

REFUSAL = ("names {name}, which a checkpoint never holds: refusing to load it (a checkpoint "
           "from someone else can run code when loaded)")


# ------------------------------------------------------------- pickles written by hand


def _text(value: str) -> bytes:
    raw = value.encode()
    return pickle.BINUNICODE + len(raw).to_bytes(4, "little") + raw


def _global(module: str, name: str) -> bytes:
    return _text(module) + _text(name) + pickle.STACK_GLOBAL


def _call(function: bytes, *args: bytes) -> bytes:
    return function + pickle.MARK + b"".join(args) + pickle.TUPLE + pickle.REDUCE


def _pickle(body: bytes) -> bytes:
    return pickle.PROTO + bytes([4]) + body + pickle.STOP


def payloads(marker: Path) -> dict[str, tuple[str, bytes]]:
    """Pickles that would create ``marker`` (or open the way to code) if unpickled
    freely: the name the refusal gives, and the pickle."""
    touch = _text(f"touch {marker}")
    code = _text(f"open({str(marker)!r}, 'w').close()")
    return {
        "os.system": ("posix.system", _pickle(_call(_global("posix", "system"), touch))),
        "os.system by its module": ("os.system", _pickle(_call(_global("os", "system"), touch))),
        "eval": ("builtins.eval", _pickle(_call(_global("builtins", "eval"), code))),
        "exec": ("builtins.exec", _pickle(_call(_global("builtins", "exec"), code))),
        "subprocess": ("subprocess.Popen",
                       _pickle(_call(_global("subprocess", "Popen"), touch))),
        # a function's globals hold its module's imports: a way to any of them
        "getattr gadget": ("builtins.getattr(function, '__globals__')", _pickle(_call(
            _global("builtins", "getattr"), _global("sflsim.checkpoint", "_cpu_storage"),
            _text("__globals__")))),
        # a name reached through a module sflsim imports
        "dotted name": ("sflsim.checkpoint.pickle.loads",
                        _pickle(_call(_global("sflsim.checkpoint", "pickle.loads"), touch))),
        "a class imported into sflsim": ("sflsim.checkpoint.Path", _pickle(_call(
            _global("sflsim.checkpoint", "Path"), _text(str(marker))))),
        "an sflsim function that writes files": ("sflsim.metrics.results.write_scenario",
                                                 _pickle(_call(_global(
                                                     "sflsim.metrics.results", "write_scenario"),
                                                     _text(str(marker)), pickle.EMPTY_DICT))),
        "torch.load": ("torch.load", _pickle(_call(_global("torch", "load"),
                                                   _text(str(marker))))),
        "a torchvision builder (downloads weights)": (
            "torchvision.models.resnet.resnet18",
            _pickle(_call(_global("torchvision.models.resnet", "resnet18")))),
    }


# ------------------------------------------------------------- a checkpoint to forge


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> tuple[dict, Path]:
    """The tiny scenario stopped after round 1 of 2: its data and results folder."""
    data = copy.deepcopy(TINY)
    data["training"]["rounds"] = 2
    out = tmp_path_factory.mktemp("interrupted") / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(Scenario.model_validate(data), out, progress=StopAfter(1))
    return data, out


def forged(interrupted: tuple[dict, Path], tmp_path: Path, *, payload: bytes | None = None,
           head: bytes | None = None) -> tuple[Scenario, Path]:
    """A copy of the interrupted run whose checkpoint holds ``payload`` after its own
    header, written as :func:`sflsim.checkpoint.save_checkpoint` writes one (the header's
    SHA-256 recomputed, so the file is not "damaged"), or ``head`` in place of the
    header."""
    data, source = interrupted
    out = tmp_path / "run"
    shutil.copytree(source, out)
    path = out / CHECKPOINT
    stream = io.BytesIO(path.read_bytes())
    header = pickle.load(stream)  # our own file: safe to read freely here
    body = stream.read() if payload is None else payload
    header[CHECKSUM] = checksum(header, body)
    path.write_bytes((head or pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)) + body)
    return Scenario.model_validate(data), out


@pytest.mark.parametrize("case", list(payloads(Path("x"))))
def test_a_forged_checkpoint_with_a_valid_checksum_is_refused_and_nothing_runs(
        interrupted, tmp_path, case):
    marker = tmp_path / "ran"
    name, payload = payloads(marker)[case]
    scenario, out = forged(interrupted, tmp_path, payload=payload)
    rounds = (out / "rounds.csv").read_text()
    with pytest.raises(SflsimError) as info:
        run_scenario(scenario, out, resume=True)
    message = str(info.value)
    assert message.startswith(f"{out / CHECKPOINT} {REFUSAL.format(name=name)}"), message
    assert "\n" not in message and "Traceback" not in message
    assert not marker.exists()
    assert (out / "rounds.csv").read_text() == rounds  # the run's files as they were


def test_a_forged_header_is_refused_before_its_checksum_is_read(interrupted, tmp_path):
    """The header is unpickled first (to find the checksum): it is read with plain data
    only, so one that names os.system is refused, by the command line too."""
    from sflsim.resume import check_resume, resumable

    marker = tmp_path / "ran"
    _, evil = payloads(marker)["os.system"]
    scenario, out = forged(interrupted, tmp_path, head=evil)
    path = out / CHECKPOINT
    data = scenario.model_dump(mode="json")
    with pytest.raises(SflsimError, match=REFUSAL.format(name="posix.system").replace("(", r"\(")
                       .replace(")", r"\)")):
        check_resume(path, data)
    assert not resumable(path, data)  # a sweep's look at it refuses it too
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(interrupted[0], sort_keys=False))
    result = CliRunner().invoke(app, ["run", str(scenario_file), "-o", str(out), "-q",
                                      "--resume"])
    assert result.exit_code == USER_ERROR, result.output
    line = " ".join(result.output.split())
    assert REFUSAL.format(name="posix.system") in line and "Traceback" not in result.output
    assert "resuming" not in result.output  # refused before the run is announced
    assert not marker.exists()


def test_cli_refuses_a_forged_checkpoint_in_one_line(interrupted, tmp_path):
    marker = tmp_path / "ran"
    _, evil = payloads(marker)["os.system"]
    _, out = forged(interrupted, tmp_path, payload=evil)
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(interrupted[0], sort_keys=False))
    result = CliRunner().invoke(app, ["run", str(scenario_file), "-o", str(out), "-q",
                                      "--resume"])
    assert result.exit_code == USER_ERROR, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "names posix.system" in " ".join(result.output.split())
    assert "Traceback" not in result.output and not marker.exists()


def test_the_checkpoint_as_written_still_resumes(interrupted, tmp_path):
    """The same file with its payload untouched (re-hashed as the forgeries are) resumes
    and completes: the allowlist holds everything the run keeps."""
    scenario, out = forged(interrupted, tmp_path)
    result = run_scenario(scenario, out, resume=True)
    assert result.summary["status"] == "completed" and result.summary["rounds_completed"] == 2
    assert json.loads((out / "summary.json").read_text())["rounds_completed"] == 2


# ------------------------------------------------------------- the allowlist itself


def _load(blob: bytes) -> object:
    return CheckpointUnpickler(io.BytesIO(blob)).load()


def test_what_a_checkpoint_holds_is_built():
    """Tensors, parameters, torch modules and optimizers, numpy arrays and generators,
    and the standard library's data come back as they were."""
    from collections import OrderedDict, defaultdict, deque

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(1, 1, 4, 4)).sum().backward()
    optimizer.step()
    things = {"model": model, "optimizer": optimizer, "tensor": torch.arange(6).reshape(2, 3),
              "generator": torch.Generator().manual_seed(3), "array": np.arange(4.0),
              "rng": np.random.default_rng(5), "scalar": np.float32(2.5),
              "seq": np.random.SeedSequence(7), "ordered": OrderedDict(a=1),
              "default": defaultdict(list, a=[1]), "queue": deque([1, 2]),
              "set": {1, 2}, "bytes": bytearray(b"ab"), "complex": 1 + 2j, "range": range(3)}
    written = io.BytesIO()
    _Pickler(written, None, None).dump(things)  # as save_checkpoint pickles
    back = _load(written.getvalue())
    assert torch.equal(back["model"][3].weight, model[3].weight)
    assert torch.equal(back["tensor"], things["tensor"])
    assert back["optimizer"].state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]
    assert back["generator"].initial_seed() == 3
    assert back["rng"].random() == np.random.default_rng(5).random()
    assert np.array_equal(back["array"], things["array"]) and back["scalar"] == 2.5
    assert back["default"]["b"] == [] and back["queue"] == deque([1, 2])
    assert back["range"] == range(3) and back["complex"] == 1 + 2j
    # torch's own pickling of a storage calls torch.load on bytes (weights_only off):
    # never in a checkpoint, which writes storages as raw bytes
    with pytest.raises(ForbiddenGlobal, match="torch.storage._load_from_bytes"):
        _load(pickle.dumps(torch.zeros(2), protocol=pickle.HIGHEST_PROTOCOL))


class NotSafe:
    """A class outside sflsim that no registered module defines."""

    def __init__(self, value: int = 0):
        self.value = value


def test_other_classes_are_refused_unless_torch_s_allowlist_has_them():
    """A class of no module the scenario registered is refused; added with
    ``torch.serialization.safe_globals`` (torch's own allowlist, which the checkpoint
    reader shares), it is built."""
    blob = pickle.dumps(NotSafe(4), protocol=pickle.HIGHEST_PROTOCOL)
    with pytest.raises(ForbiddenGlobal, match=f"{__name__}.NotSafe"):
        _load(blob)
    with torch.serialization.safe_globals([NotSafe]):
        assert _load(blob).value == 4


def test_a_bound_method_of_the_algorithm_is_the_only_getattr():
    """Pickle writes a bound method as getattr(obj, name): a public method of the
    algorithm is built (a split policy keeps one), nothing else is."""
    from sflsim.algorithms.fedavg import FedAvg

    algorithm = FedAvg.__new__(FedAvg)
    method = _load(pickle.dumps(algorithm.evaluate, protocol=pickle.HIGHEST_PROTOCOL))
    assert method.__func__ is FedAvg.evaluate and isinstance(method.__self__, FedAvg)
    for target, name in ((np.random.default_rng(0).random, "builtins.getattr(Generator, 'random')"),
                         (FedAvg.mro, "builtins.getattr("),  # of a class, not an instance
                         (Path("x").touch, "pathlib.PosixPath")):
        with pytest.raises(ForbiddenGlobal) as info:
            _load(pickle.dumps(target, protocol=pickle.HIGHEST_PROTOCOL))
        assert info.value.name.startswith(name), info.value.name


def test_a_user_algorithm_checkpoint_resumes(tmp_path, monkeypatch):
    """The classes of the module that registered the scenario's own algorithm (imported
    by the scenario already) are built: a run of examples/fedavgm.py resumes."""
    from sflsim.config import load_scenario
    from tests.test_user_algorithms import EXAMPLE, EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    scenario = load_scenario(EXAMPLE, ["training.rounds=2", "dataset.fraction=0.02",
                                       "evaluation.max_test_samples=40"])
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, tmp_path / "cut", progress=StopAfter(1))
    result = run_scenario(scenario, tmp_path / "cut", resume=True)
    assert result.summary["status"] == "completed" and result.summary["rounds_completed"] == 2
