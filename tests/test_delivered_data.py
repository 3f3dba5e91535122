"""No algorithm trains on data, or reads state, that the simulated system has not
delivered (issue 14 §1): per round, the server-side training steps on a client's data
are at most the activation batches whose upload completed, and Centralized trains only
on the samples whose upload completed."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from sflsim.algorithms.base import ALGORITHMS
from sflsim.algorithms.steps import TorchSteps
from sflsim.config import validate_scenario
from sflsim.runner import run_scenario

#: activities that carry a client's activations (or raw data) to the server
UPLOADS = ("send_activations", "send_replay_activations", "send_probe_activations",
           "send_representations")


#: settings beyond ``{"name": ...}`` that keep the runs small: FedBABU fine-tunes for one
#: epoch before each evaluation, not its default 5 (fine-tuning trains no shared model and
#: reads only the client's own data, on the device)
SETTINGS = {"fedbabu": {"finetune_epochs": 1}}


def _run(tiny, algorithm, drop_prob, *, rounds=2, seed=6, monkeypatch=None):
    tiny = copy.deepcopy(tiny)
    tiny["algorithm"] = {"name": algorithm, **SETTINGS.get(algorithm, {})}
    tiny["devices"]["weak"]["count"] = 2  # 4 clients
    tiny["training"]["rounds"] = rounds
    tiny["seed"] = seed
    tiny["conditions"] = {"client_drop_prob": drop_prob}
    losses: list[tuple[int, str, int, int]] = []  # (round, side, client, samples)
    original = TorchSteps.record_loss

    def record_loss(self, where, client_id, loss, batch):
        losses.append((self.sim.round, where, client_id, batch))
        original(self, where, client_id, loss, batch)

    monkeypatch.setattr(TorchSteps, "record_loss", record_loss)
    return run_scenario(validate_scenario(tiny)), losses


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_nothing_delivered_nothing_trained(tiny, algorithm, monkeypatch):
    result, losses = _run(tiny, algorithm, 1.0, monkeypatch=monkeypatch)
    assert losses == [] and result.events.empty
    rounds = result.rounds
    assert (rounds.round_time_s == 0.0).all() and (rounds.server_busy_s == 0.0).all()
    # the models never changed, so every round evaluates as the untrained model (round 0)
    acc = [c for c in rounds.columns if c.endswith("accuracy")]
    assert rounds["round"].tolist() == [0, 1, 2] and acc
    assert rounds[acc].iloc[0].equals(rounds[acc].iloc[1])
    assert rounds[acc].iloc[1].equals(rounds[acc].iloc[2])


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_server_trains_only_on_what_arrived(tiny, algorithm, monkeypatch):
    result, losses = _run(tiny, algorithm, 0.5, monkeypatch=monkeypatch)
    clients = result.clients
    dropped = {(r, c) for r, c in zip(clients["round"], clients.client_id)
               if clients.set_index(["round", "client_id"]).status[(r, c)] == "dropped"}
    assert dropped and len(dropped) < len(clients)  # seed 6 drops some, not all
    # no loss on a dropped client's data, client side or server side
    assert not {(r, c) for r, _, c, _ in losses if c >= 0} & dropped
    ev = result.events
    if algorithm == "centralized":
        sizes = {c: len(x.indices) for c, x in enumerate(result.algorithm.ctx.clients)}
        arrived = ev[(ev.activity == "upload_data") & ~ev.cut_off]
        held = 0
        for r in sorted(set(clients["round"])):
            held += sum(sizes[c] for c in arrived[arrived["round"] == r].client_id)
            trained = sum(n for rr, side, _, n in losses if rr == r and side == "server")
            # each of its models trains once per local epoch on every sample it holds
            per_model = held * tiny["training"]["local_epochs"]
            assert trained == per_model * len(result.algorithm.models), r
        assert held < sum(sizes.values())  # some data never arrived in this run
        return
    arrived = ev[ev.activity.isin(UPLOADS) & ~ev.cut_off]  # a cut-off upload never arrived
    uploads = Counter(zip(arrived["round"], arrived.client_id))
    steps = Counter((r, c) for r, side, c, _ in losses if side != "client")
    per_upload = getattr(result.algorithm, "server_steps_per_upload", 1)  # MU-SplitFed: tau
    for key, n in steps.items():
        assert n <= per_upload * uploads[key], (key, n, uploads[key])
