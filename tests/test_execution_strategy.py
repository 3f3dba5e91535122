"""The runner's choice of how rounds execute (:func:`sflsim.execution.strategy.choose_execution`):
from the capabilities the algorithm's configuration declares and the training settings,
never from the algorithm's class or methods."""

from __future__ import annotations

import copy

import pytest

from sflsim.config import validate_scenario
from sflsim.execution.strategy import Execution, choose_execution


def _scenario(tiny: dict, algorithm: str, **training) -> object:
    data = copy.deepcopy(tiny)
    data["algorithm"] = {"name": algorithm}
    data["training"].update(training)
    return validate_scenario(data)


@pytest.mark.parametrize(("algorithm", "training", "timing_only", "expected"), [
    ("fedavg", {}, True, Execution(array_booking=True)),
    ("splitfed_v2", {}, True, Execution(array_booking=True)),
    ("splitfed_v1", {}, True, Execution(array_booking=True)),
    ("mergesfl", {}, True, Execution(array_booking=True)),
    ("mu_splitfed", {}, True, Execution()),  # declares no array_booking
    ("hetero_splitee_sequential", {}, True, Execution(array_booking=True)),
    ("hetero_splitee_averaging", {}, True, Execution(array_booking=True)),
    ("distributed", {}, True, Execution(array_booking=True)),
    ("hetero_splitee_averaging", {}, False, Execution()),
    ("fedavg", {}, False, Execution()),
    ("fedavg", {"fuse_clients": True}, False, Execution(ahead="fused")),
    ("fedavg", {"fuse_clients": True, "parallel_clients": 2}, False,
     Execution(ahead="fused", threads=2)),
    ("fedavg", {"parallel_clients": 2}, False, Execution(ahead="threads", threads=2)),
    ("fedavg", {"parallel_clients": 2, "parallel_backend": "processes"}, False,
     Execution(ahead="processes", threads=2)),
    ("hetero_splitee_sequential", {"parallel_clients": 2}, False,
     Execution(ahead="threads", threads=2)),
    ("splitfed_v1", {"fuse_clients": True}, False, Execution(ahead="fused")),
    ("fedgh", {"parallel_clients": 3}, False, Execution(ahead="threads", threads=3)),
    ("fedavg", {"parallel_clients": 2}, True, Execution(array_booking=True, threads=2)),
])
def test_the_execution_follows_the_declared_capabilities(tiny, algorithm, training, timing_only,
                                                         expected):
    assert choose_execution(_scenario(tiny, algorithm, **training), timing_only) == expected


def test_an_algorithm_that_declares_nothing_runs_client_by_client(tiny, monkeypatch):
    """A configuration whose algorithm declares none of the capabilities asked for gets the
    plain strategy (the scenario validator refuses such settings before a run)."""
    scenario = _scenario(tiny, "fedavg", parallel_clients=2, fuse_clients=True)
    monkeypatch.setattr(type(scenario.algorithm), "supports", lambda self, capability: False)
    assert choose_execution(scenario, False) == Execution(threads=2)
    assert choose_execution(scenario, True) == Execution(threads=2)
