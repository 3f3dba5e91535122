"""``training.fuse_clients``: Hetero-SplitEE clients that share a cut layer train in one
fused step; the run equals the step-by-step run up to float rounding."""

from __future__ import annotations

import pandas as pd
import pytest

from sflsim.config import validate_scenario
from sflsim.config.schema import Scenario
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
    assert all(not q for q in fused.algorithm.ready_steps.values())  # every step handed out


def test_fuse_clients_is_refused_for_split_learning(tiny):
    tiny["algorithm"] = {"name": "splitfed_v2"}
    tiny["training"]["fuse_clients"] = True
    with pytest.raises(ConfigError, match=r"training\.fuse_clients: .*'splitfed_v2'"):
        validate_scenario(tiny)
