"""``training.fuse_clients``: Hetero-SplitEE clients that share a cut layer, and FedAvg's
and FedMut's local models, train in one fused step; the run equals the step-by-step run
up to float rounding."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from sflsim.config import validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario

# channels-last and host threads run CPU kernels that differ between hosts: a crash
# or hang fails these tests (in the isolated tests' one subprocess, see pyproject.toml),
# not the whole pytest run
pytestmark = pytest.mark.isolated(group="host_kernels")


# float32 grouped and plain convolutions round differently, and BatchNorm over a few
# samples of 1x1 maps amplifies that; the method itself is exact (tests/test_fused.py
# checks float64 to 1e-10), so these bounds are float32 noise, far below a wrong result
@pytest.mark.parametrize(("algorithm", "optimizer", "param_tol"), [
    ("hetero_splitee_sequential", {"name": "sgd", "lr": 0.01, "momentum": 0.5}, 1e-3),
    # Adam's update is about lr whatever the gradient's size, so rounding that flips the
    # sign of a near-zero gradient moves that weight by up to 2 lr (here 2e-3)
    ("hetero_splitee_averaging", {"name": "adam", "lr": 1e-3}, 2.5e-3),
])
def test_fused_clients_give_the_step_by_step_run(tiny, algorithm, optimizer, param_tol):
    for group in tiny["devices"].values():
        group["count"] = 3
    tiny["algorithm"] = {"name": algorithm}
    tiny["training"]["optimizer"] = optimizer
    tiny["training"]["rounds"] = 2
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}  # unequal sizes
    tiny["conditions"] = {"client_drop_prob": 0.2}  # unequal Adam step counts in round 2
    loop = run_scenario(Scenario.model_validate(tiny))
    tiny["training"]["fuse_clients"] = True
    fused = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(fused.events, loop.events, check_exact=True)  # same timeline
    cols = ["client_loss", "server_loss"]
    pd.testing.assert_frame_equal(fused.clients[cols], loop.clients[cols], rtol=1e-3, atol=1e-4)
    for a, b in zip(fused.algorithm.ctx.clients, loop.algorithm.ctx.clients):
        for p, q in zip(a.model.parameters(), b.model.parameters()):
            assert (p - q).abs().max().item() < param_tol
    assert all(not q for q in fused.algorithm.steps.ready_steps.values())  # every step handed out


@pytest.mark.parametrize("algorithm", [{"name": "fedavg"}, {"name": "fedmut"},
                                       {"name": "fedprox", "mu": 1.0},
                                       {"name": "fedbabu", "finetune_epochs": 1}],
                         ids=lambda a: a["name"])
def test_fused_local_models_give_the_client_by_client_run(tiny, algorithm):
    """FedAvg (and FedMut's mutated starts, FedProx's proximal term, FedBABU's frozen
    head): the clients' local steps batched; unequal client sizes (Dirichlet) leave
    some steps to a client alone; a dropped client is not trained. Same timeline, same
    accuracies, losses to 1e-4 and global weights to 1e-4 (float32 rounding of grouped
    vs. plain convolutions)."""
    for group in tiny["devices"].values():
        group.update(count=3, end_layer=1)
    tiny["model"] = {"name": "small_cnn", "width": 0.5}
    tiny["algorithm"] = algorithm
    tiny["training"].update(rounds=2, optimizer={"name": "sgd", "lr": 0.05, "momentum": 0.5})
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}
    tiny["conditions"] = {"client_drop_prob": 0.2}
    loop = run_scenario(Scenario.model_validate(tiny))
    tiny["training"]["fuse_clients"] = True
    fused = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(fused.events, loop.events, check_exact=True)
    assert fused.rounds.clients_dropped.sum() > 0
    pd.testing.assert_series_equal(fused.rounds.server_accuracy, loop.rounds.server_accuracy)
    pd.testing.assert_series_equal(fused.clients.client_loss, loop.clients.client_loss,
                                   rtol=1e-4, atol=1e-5)
    rounding = _largest_gap(fused, loop)
    assert rounding < 1e-4
    if algorithm["name"] == "fedprox":  # the fused step computed the term: FedAvg is far
        tiny["algorithm"] = {"name": "fedavg"}
        fedavg = run_scenario(Scenario.model_validate(tiny))
        assert _largest_gap(fused, fedavg) > 100 * rounding


def _largest_gap(a, b) -> float:
    """The largest difference between two runs' global model parameters."""
    return max((p - q).abs().max().item() for p, q in zip(
        a.algorithm.global_model.parameters(), b.algorithm.global_model.parameters()))


def test_fused_splitfed_v1_gives_the_client_by_client_run(tiny):
    """SplitFed V1 with fuse_clients: each client's client-side and server-side copies
    trained ahead as one network, the clients batched; the same events, server losses to
    1e-4, global weights to 1e-4 (float32 rounding of grouped convolutions; the small CNN
    has no BatchNorm to amplify it)."""
    for group in tiny["devices"].values():
        group.update(count=2, end_layer=1)
    tiny["model"] = {"name": "small_cnn", "width": 0.5}
    tiny["algorithm"] = {"name": "splitfed_v1"}
    tiny["training"].update(rounds=2, optimizer={"name": "sgd", "lr": 0.05, "momentum": 0.5})
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}
    loop = run_scenario(Scenario.model_validate(tiny))
    tiny["training"]["fuse_clients"] = True
    fused = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(fused.events, loop.events, check_exact=True)
    pd.testing.assert_series_equal(fused.clients.server_loss, loop.clients.server_loss,
                                   rtol=1e-4, atol=1e-5)
    for p, q in zip(fused.algorithm.global_model.parameters(),
                    loop.algorithm.global_model.parameters()):
        assert (p - q).abs().max().item() < 1e-4
    assert all(not q for q in fused.algorithm.ready_losses.values())  # every loss handed out


def test_splitfed_v1_trained_ahead_is_the_split_step_run_exactly(tiny, monkeypatch):
    """What fuse_clients changes in SplitFed V1 besides the kernels: a client's split
    steps trained ahead as steps of one network (client and server copy, one optimizer
    over both) and replayed in the simulation. With the batched step replaced by those
    steps client by client, the run is bit for bit the split-step run: events, server
    losses and global weights, with random cuts (clients at different cuts) on the
    ResNet with BatchNorm."""
    import torch.nn.functional as F

    from sflsim.models import fused as fused_module

    class OneByOne:  # FusedClients' interface, each client's step on its own
        def __init__(self, models, heads, optimizers):
            self.members = list(zip(models, heads, optimizers))

        def step(self, xs, ys):
            acts, losses = [], []
            for (model, head, optimizer), x, y in zip(self.members, xs, ys):
                h = model(x)
                received = h.detach().requires_grad_(True)
                loss = F.cross_entropy(head(received), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                h.backward(received.grad)
                optimizer.step()
                acts.append(received.detach())
                losses.append(loss.detach())
            return acts, losses

        def write_back(self):
            pass

    for group in tiny["devices"].values():
        group["count"] = 2
    tiny["algorithm"] = {"name": "splitfed_v1", "split": {"name": "random"}}
    tiny["training"].update(rounds=2, optimizer={"name": "sgd", "lr": 0.05, "momentum": 0.5})
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}
    loop = run_scenario(Scenario.model_validate(tiny))
    assert loop.clients.cut_layer.nunique() > 1
    monkeypatch.setattr(fused_module, "FusedClients", OneByOne)
    tiny["training"]["fuse_clients"] = True
    ahead = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(ahead.events, loop.events, check_exact=True)
    pd.testing.assert_series_equal(ahead.clients.server_loss, loop.clients.server_loss,
                                   check_exact=True)
    for p, q in zip(ahead.algorithm.global_model.parameters(),
                    loop.algorithm.global_model.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize(("name", "reason"), [
    ("splitfed_v2", "wait for a server-side model that other clients share"),
    ("fedsga", "wait for a server-side model that other clients share"),
    ("fedgh", "does not batch"),
    ("centralized", "pooled data"),
])
def test_fuse_clients_is_refused_with_the_algorithms_reason(tiny, name, reason):
    tiny["algorithm"] = {"name": name}
    tiny["training"]["fuse_clients"] = True
    with pytest.raises(ConfigError, match=rf"training\.fuse_clients: .*'{name}', .*{reason}"):
        validate_scenario(tiny)
