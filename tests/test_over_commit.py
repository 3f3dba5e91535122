"""Over-commitment (``training.over_commit``) keeps a count: exactly ``clients_per_round``
clients, the first to finish; clients that finish at the same instant are kept in the
round's sampling order (:func:`sflsim.run.participation.draw_participants`)."""

from __future__ import annotations

import pytest

from sflsim.algorithms import fedavg, hetero_splitee, splitfed
from sflsim.algorithms.base import ALGORITHMS
from sflsim.algorithms.protocol import RoundProtocol
from sflsim.config import validate_scenario
from sflsim.run.participation import draw_participants
from sflsim.runner import child_seeds, run_scenario
from tests.test_conditions_property import ALGORITHM_CONFIGS

#: (identical Raspberry Pi 4s, clients_per_round K, over_commit): every client is drawn
#: and all of them finish their round at the same instant
IDENTICAL = [(4, 2, 2.0), (3, 1, 3.0)]
#: the algorithms named for the tie; every other one is checked as well
NAMED = ["fedavg", "splitfed_v1", "hetero_splitee_averaging"]


def _scenario(algorithm: dict, devices: dict, k: int, over_commit: float, *,
              timing: bool = True, rounds: int = 3) -> dict:
    n = sum(g["count"] for g in devices.values())
    return {
        "name": "over_commit", "seed": 1,
        "dataset": {"name": "synthetic", "partition": {"scheme": "iid"},
                    "synthetic": {"train_samples": 16 * n, "test_samples": 8,
                                  "image_shape": [1, 16, 16]}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
        "devices": devices, "server": {"profile": "a100"}, "algorithm": dict(algorithm),
        "training": {"rounds": rounds, "batch_size": 8, "timing_only": timing,
                     "clients_per_round": k, "over_commit": over_commit},
        "evaluation": {"max_test_samples": 8},
    }


def _pis(n: int) -> dict:
    return {"pi": {"profile": "rpi4", "count": n, "end_layer": 2, "link": "wifi"}}


@pytest.fixture
def finishes(monkeypatch) -> dict[int, dict[int, float]]:
    """``{round: {client_id: instant (s) its round's work ended}}`` of the clients whose
    work ended (not cut off), as over-commitment sees them (the first work of a round
    that runs its clients twice: FedBABU's training before its personalisation)."""
    seen: dict[int, dict[int, float]] = {}
    real = RoundProtocol._kept

    def kept(self, client_id, work):
        def timed():
            yield from work
            seen.setdefault(self.sim.round, {}).setdefault(client_id, self.sim.now_s)
        return real(self, client_id, timed())

    monkeypatch.setattr(RoundProtocol, "_kept", kept)
    return seen


def _assert_first_k_kept(result, finishes: dict[int, dict[int, float]], k: int) -> list[int]:
    """Every round keeps exactly ``k`` clients: the first ``k`` to finish, ties in the
    round's sampling order; returns, per round, how many finished with the ``k``-th."""
    scenario = result.scenario
    seed = child_seeds(scenario)["sampling"]
    clients = result.clients
    tied = []
    for r in range(1, scenario.training.rounds + 1):
        order = draw_participants(scenario, None, seed, r, 0.0).order
        finished = finishes[r]
        first = sorted(finished, key=lambda c: (finished[c], order.index(c)))[:k]
        mine = clients[clients["round"] == r]
        kept = sorted(mine.client_id[mine.status == "trained"])
        assert kept == sorted(first), (r, order, finished)
        assert set(mine.status) <= {"trained", "over_committed"}
        tied.append(sum(t == finished[first[-1]] for t in finished.values()))
    return tied


@pytest.mark.parametrize(("n", "k", "over_commit"), IDENTICAL)
@pytest.mark.parametrize("name", sorted(ALGORITHM_CONFIGS))
def test_identical_devices_keep_exactly_k_the_first_in_sampling_order(finishes, name, n, k,
                                                                       over_commit):
    """``n`` identical Raspberry Pi 4s with equal data, ``k`` kept, all drawn: exactly
    ``k`` are "trained" each round, the first ``k`` to finish, and among those that
    finish at the same instant, the first sampled. For FedAvg, SplitFed V1 and
    Hetero-SplitEE Averaging all of them finish at the same instant, every round."""
    result = run_scenario(validate_scenario(_scenario(ALGORITHM_CONFIGS[name], _pis(n), k,
                                                      over_commit)))
    tied = _assert_first_k_kept(result, finishes, k)
    assert result.rounds.clients_trained.iloc[1:].tolist() == [k] * 3
    assert result.rounds.clients_over_committed.iloc[1:].tolist() == [n - k] * 3
    if name in NAMED:
        assert tied == [n] * 3  # the tie itself: every client finishes at the same instant


def test_every_algorithm_is_checked():
    assert sorted(ALGORITHM_CONFIGS) == sorted(ALGORITHMS)


def test_the_tie_follows_the_sampling_order_not_the_client_ids():
    """Over three rounds the kept clients change with each round's drawn order."""
    result = run_scenario(validate_scenario(_scenario({"name": "fedavg"}, _pis(4), 2, 2.0)))
    kept = {r: sorted(g.client_id[g.status == "trained"])
            for r, g in result.clients.groupby("round")}
    assert len({tuple(v) for v in kept.values()}) > 1, kept


@pytest.mark.parametrize(("n", "k", "over_commit"), IDENTICAL)
@pytest.mark.parametrize("name", NAMED)
def test_only_the_kept_clients_are_aggregated(monkeypatch, name, n, k, over_commit):
    """Trained runs: the round's average takes exactly the ``k`` kept clients, not the
    tied ones whose uploads arrived at the same instant."""
    averaged: list[list[int]] = []
    if name == "fedavg":
        real = fedavg.FedAvg.end_round
        monkeypatch.setattr(fedavg.FedAvg, "end_round", lambda self, r: (
            averaged.append(sorted(self.uploads)), real(self, r)))
    elif name == "splitfed_v1":
        real = splitfed.SplitFed.end_round
        monkeypatch.setattr(splitfed.SplitFed, "end_round", lambda self, r: (
            averaged.append(sorted(self.client_copies)), real(self, r)))
    else:
        real = hetero_splitee.cross_layer_aggregate
        monkeypatch.setattr(hetero_splitee, "cross_layer_aggregate", lambda models, *a, **kw: (
            averaged.append(len(models)), real(models, *a, **kw))[1])
    result = run_scenario(validate_scenario(_scenario(
        ALGORITHM_CONFIGS[name], _pis(n), k, over_commit, timing=False, rounds=2)))
    kept = [sorted(g.client_id[g.status == "trained"]) for _, g in result.clients.groupby("round")]
    assert [len(v) for v in kept] == [k, k]
    if name == "hetero_splitee_averaging":
        assert averaged == [k, k]
    else:
        assert averaged == kept


@pytest.mark.parametrize("name", NAMED + ["mergesfl", "centralized"])
def test_differing_devices_keep_the_k_fastest(finishes, name):
    """A Raspberry Pi 4 and a Jetson Nano on LTE, two Jetson Orin Nanos on Wi-Fi (faster
    to compute and to send), 2 kept of 4, all drawn: the two Orins finish first and are
    kept, as a run without over-commitment says they finish first."""
    devices = {"pi": {"profile": "rpi4", "count": 1, "end_layer": 2, "link": "lte"},
               "nano": {"profile": "jetson_nano", "count": 1, "end_layer": 2, "link": "lte"},
               "orin": {"profile": "jetson_orin_nano", "count": 2, "end_layer": 2,
                        "link": "wifi"}}
    data = _scenario(ALGORITHM_CONFIGS[name], devices, 2, 2.0, rounds=1)
    result = run_scenario(validate_scenario(data))
    _assert_first_k_kept(result, finishes, 2)
    free = dict(data, training={**data["training"], "clients_per_round": None,
                                "over_commit": 1.0})
    ends = run_scenario(validate_scenario(free)).events.groupby("client_id").end_s.max()
    kept = sorted(result.clients.client_id[result.clients.status == "trained"])
    assert kept == [2, 3]  # the Orins
    assert ends[[2, 3]].max() < ends[[0, 1]].min()
