"""No result changes: every algorithm's reference run hashes as recorded.

``benchmarks/identity.py`` runs each algorithm on the tests' tiny scenario (3 clients,
2 rounds, one torch thread) and hashes what it produced; ``tests/identity_reference.json``
holds the hashes recorded before the package was restructured. A refactor or a speed-up
that changes any number fails here, naming the algorithm.

- timing-only runs hash ``rounds.csv`` and the events table: arithmetic on the simulated
  hardware, equal on every CPU, compared everywhere;
- trained runs hash the final weights of every model and ``rounds.csv``: torch's CPU
  kernels differ with the instruction set, so they are compared where the reference holds
  this machine's fingerprint (torch version, CPU vendor, instruction set), and skipped,
  saying so, where it does not. ``python benchmarks/identity.py --record`` adds a
  machine's entry. A change meant to change an algorithm's results records it again on
  the machine it was made on and removes it from the other machines' entries, where it
  is skipped until recorded there.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent


def _identity():
    spec = importlib.util.spec_from_file_location("sflsim_identity", REPO / "benchmarks" / "identity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


identity = _identity()
REFERENCE = json.loads(identity.REFERENCE.read_text())
#: every algorithm with a trained reference on some machine
TRAINED = sorted(set().union(*REFERENCE["trained"].values()))


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_reference_covers_every_algorithm():
    from sflsim.algorithms.base import ALGORITHMS

    assert sorted(REFERENCE["timing_only"]) == identity.timing_only_algorithms()
    assert sorted(TRAINED) == sorted(ALGORITHMS)  # each recorded on some machine


@pytest.mark.parametrize("name", sorted(REFERENCE["timing_only"]))
def test_timing_only_run_is_unchanged(name, one_thread):
    assert identity.run_one(name, [], timing_only=True) == REFERENCE["timing_only"][name]


@pytest.mark.parametrize("name", TRAINED)
def test_trained_run_is_unchanged(name, one_thread):
    recorded = REFERENCE["trained"].get(identity.fingerprint())
    if recorded is None:
        pytest.skip(f"no trained reference for this machine ({identity.fingerprint()}); "
                    f"recorded: {', '.join(REFERENCE['trained'])}")
    if name not in recorded:  # its results changed on purpose, on another kind of CPU
        pytest.skip(f"no trained reference for {name} on this machine "
                    f"({identity.fingerprint()}) since its results last changed")
    assert identity.run_one(name, []) == recorded[name]
