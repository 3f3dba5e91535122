"""Shared fixtures: tiny scenarios that train in seconds on 2 CPU cores."""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from sflsim.hardware import profiles

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine
# spinning threads slow them down many times over. OMP_NUM_THREADS gives the CLI's runs
# and sweep points (sflsim.threads) the same one thread; tests of the rule set their own.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# No test outcome may depend on what the host has free: every run's memory check
# (sflsim.memory.check_fits) compares against this fixed budget, not MemAvailable.
# Tests of the check itself set or remove it.
os.environ["SFLSIM_MEMORY_LIMIT_BYTES"] = str(64 * 2**30)
# Every run a test finishes (run_scenario, the CLI, sweep points in their own processes)
# is checked against the simulator's physics and bookkeeping (sflsim.checks) and
# fails with ResultCheckError on a violation. Tests of the check itself unset it.
os.environ["SFLSIM_CHECK_RESULTS"] = "1"
# FLOP counts on disk (sflsim.models.cost.DiskCounts) in a folder of this session's own:
# a test never reads counts another session left, and the user's cache is untouched
os.environ["SFLSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="sflsim-test-cache-")

TINY = {
    "name": "tiny",
    "seed": 0,
    "dataset": {"name": "fashion_mnist", "fraction": 0.02, "partition": {"scheme": "iid"}},
    "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
    "devices": {
        "weak": {"profile": "rpi4", "count": 1, "end_layer": 3, "link": "wifi"},
        "mid": {"profile": "jetson_nano", "count": 1, "end_layer": 4, "link": "lte"},
        "strong": {"profile": "jetson_orin_nano", "count": 1, "end_layer": 5, "link": "wifi"},
    },
    "server": {"profile": "a100"},
    "algorithm": {"name": "hetero_splitee_sequential"},
    "training": {"rounds": 1, "local_epochs": 1, "batch_size": 16,
                 "optimizer": {"name": "adam", "lr": 1e-3}},
    "evaluation": {"max_test_samples": 40},
}


@pytest.fixture
def tiny() -> dict:
    """A fresh copy of a 3-client scenario dict (240 training samples, width 1/16)."""
    return copy.deepcopy(TINY)


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    """A profile folder searched before the shipped ones; returns a writer function."""
    root = tmp_path / "profiles"
    for kind in profiles.KINDS:
        (root / kind).mkdir(parents=True)
    monkeypatch.setenv("SFLSIM_PROFILE_PATH", str(root))
    profiles.load_profile.cache_clear()

    def write(kind: str, name: str, text: str) -> None:
        (root / kind / f"{name}.yaml").write_text(text)
        profiles.load_profile.cache_clear()

    yield write
    profiles.load_profile.cache_clear()


def sourced(value: str) -> dict:
    return {"value": value, "basis": "nominal", "source": "test"}


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A finished 1-round run of the tiny scenario (with ``early_exit.csv``), written by
    :func:`sflsim.runner.run_scenario`, shared by the tests that only read it."""
    from sflsim.config import validate_scenario
    from sflsim.runner import run_scenario

    out = tmp_path_factory.mktemp("tiny_run") / "run"
    run_scenario(validate_scenario(copy.deepcopy(TINY)), out)
    return out


@pytest.fixture
def tv_checks(monkeypatch):
    """torchvision insists on the real archives' MD5 sums: accept files that exist (the
    tiny datasets of ``tests/dataset_files.py``)."""
    import torchvision.datasets.cifar as tv_cifar
    import torchvision.datasets.stl10 as tv_stl10

    def present(self) -> bool:
        files = [f for f, _ in self.train_list + self.test_list]
        if isinstance(self, tv_stl10.STL10):
            files = [f for f in files if "unlabeled" not in f]  # not written here
        return all((Path(self.root) / self.base_folder / f).is_file() for f in files)

    monkeypatch.setattr(tv_cifar.CIFAR10, "_check_integrity", present)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(tv_stl10.STL10, "_check_integrity", present)


def load_reproduce():
    """``analysis/reproduce.py`` as the module ``reproduce``, loaded once per session (it
    puts ``analysis/`` on ``sys.path``, so the other analysis scripts import after it)."""
    if "reproduce" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "reproduce", Path(__file__).resolve().parents[1] / "analysis" / "reproduce.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["reproduce"] = module
        spec.loader.exec_module(module)
    return sys.modules["reproduce"]


@pytest.fixture(scope="module")
def reproduce():
    """The ``analysis/reproduce.py`` module (:func:`load_reproduce`)."""
    return load_reproduce()


@pytest.fixture
def user_modules(monkeypatch):
    """Run a documented ``VAR=value sflsim ...`` command in this process: call with the
    assignments (paths relative to the repository root). ``PYTHONPATH`` folders go first
    on ``sys.path`` (what a new interpreter would search), other variables into the
    environment. Afterwards the algorithm registries are as they were and the modules
    imported from those folders are forgotten, as if the command had had a process of
    its own (which costs seconds of imports)."""
    from sflsim.algorithms import base
    from sflsim.config import algorithms as registry
    from sflsim.config import user_algorithms

    targets = (registry.ALGORITHM_CONFIGS, registry.CONFIG_MODULES, base.ALGORITHMS,
               user_algorithms._ENTRY_POINT_MODULES, user_algorithms._LOADED)
    saved = [dict(t) for t in targets]
    folders: list[str] = []
    root = Path(__file__).resolve().parents[1]

    def use(env: dict[str, str]) -> None:
        for name, value in env.items():
            if name == "PYTHONPATH":
                for folder in reversed(value.split(os.pathsep)):
                    folders.append(str(root / folder))
                    monkeypatch.syspath_prepend(str(root / folder))
            else:
                monkeypatch.setenv(name, str(root / value))

    yield use
    for target, before in zip(targets, saved):
        target.clear()
        target.update(before)
    registry._adapter.cache_clear()
    for name, module in list(sys.modules.items()):
        if folders and (getattr(module, "__file__", None) or "").startswith(tuple(folders)):
            del sys.modules[name]
