"""Personalised methods (FedBABU, FedGH, FedAS) scored two ways: on each client's own test
distribution, as their papers test, and on the test set as it is; the switch picks which
one is ``server_accuracy`` and the clients table holds both."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from sflsim.algorithms.personal_scores import SCORE_COLUMNS, PersonalScores, two_scores
from sflsim.config import validate_scenario
from sflsim.config.resolve import ABSENT, resolved_dump
from sflsim.runner import run_scenario


def test_the_two_scores_by_hand():
    correct = torch.tensor([9.0, 1.0, 0.0])  # class 2 has no test sample
    total = torch.tensor([10.0, 10.0, 0.0])
    labels = torch.tensor([0, 0, 0, 1, 2])  # 3 of class 0, 1 of class 1, 1 of class 2
    own, glob = two_scores(correct, total, labels)
    assert glob == pytest.approx(10 / 20)
    assert own == pytest.approx((3 * 0.9 + 1 * 0.1) / 4)  # class 2 left out: not tested
    assert two_scores(correct, total, torch.tensor([2, 2])) == (glob, glob)  # none tested


def test_the_switch_picks_the_score_and_the_columns_are_handed_over_once():
    scores = PersonalScores("global")
    counts = (torch.tensor([1.0, 3.0]), torch.tensor([2.0, 4.0]))
    assert scores.keep(0, *counts, torch.tensor([0, 0, 0])) == pytest.approx(4 / 6)
    assert scores.columns([0, 1])[0] == {SCORE_COLUMNS[0]: pytest.approx(0.5),
                                         SCORE_COLUMNS[1]: pytest.approx(4 / 6)}
    assert all(math.isnan(v) for v in scores.columns([0])[0].values())  # handed over once
    with pytest.raises(ValueError, match="client or global"):
        PersonalScores("local")


def skewed(tiny: dict, algorithm: dict) -> dict:
    data = copy.deepcopy(tiny)
    data["model"] = {"name": "small_cnn", "width": 0.5}
    for group in data["devices"].values():
        group["end_layer"] = 1
    data["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 0.1}
    data["algorithm"] = algorithm
    data["training"]["rounds"] = 2
    data["evaluation"]["every_rounds"] = 2
    data["evaluation"]["early_exit"] = {"enabled": False}
    return data


@pytest.mark.parametrize("algorithm", [{"name": "fedgh"}, {"name": "fedas"},
                                       {"name": "fedbabu", "finetune_epochs": 1}])
@pytest.mark.parametrize("distribution", ["client", "global"])
def test_a_run_writes_both_scores_and_scores_by_the_switch(tiny, algorithm, distribution):
    run = run_scenario(validate_scenario(skewed(tiny, {**algorithm,
                                                       "test_distribution": distribution})))
    clients = run.clients
    first, last = clients[clients["round"] == 1], clients[clients["round"] == 2]
    assert first[list(SCORE_COLUMNS)].isna().all().all()  # round 1 is not evaluated
    assert last[list(SCORE_COLUMNS)].notna().all().all()
    picked = "accuracy_own_distribution" if distribution == "client" else "accuracy_global"
    assert last["server_accuracy"].tolist() == pytest.approx(last[picked].tolist())
    # Dirichlet 0.1 skews each client's labels: its own distribution is another test set
    assert (last["accuracy_own_distribution"] != last["accuracy_global"]).any()


def test_a_stored_run_without_the_switch_is_not_read_as_today_default():
    """FedGH and FedAS runs written before ``test_distribution`` were scored on the global
    test set; today's default scores each client's own distribution."""
    from tests.conftest import TINY

    stored = copy.deepcopy(TINY)
    stored["algorithm"] = {"name": "fedgh"}
    dumped = validate_scenario(stored).model_dump(mode="json")
    del dumped["algorithm"]["test_distribution"]
    assert resolved_dump(dumped, stored=True)["algorithm"]["test_distribution"] == ABSENT
