"""``training.parallel_clients``: clients trained ahead of the simulated round on host
threads give exactly the serial run (one torch thread each, as the suite runs), and
``training.channels_last`` keeps the timeline."""

from __future__ import annotations

import threading

import pandas as pd
import pytest
import torch

from sflsim.algorithms.global_model import GlobalModelAlgorithm
from sflsim.config import validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError, DivergenceError
from sflsim.execution.host_threads import host_threads
from sflsim.runner import run_scenario

# channels-last and host threads run CPU kernels that differ between hosts: a crash
# or hang fails these tests (in the isolated tests' one subprocess, see pyproject.toml),
# not the whole pytest run
pytestmark = pytest.mark.isolated(group="host_kernels")

WALL = ["wall_time_s"]


def _tables_equal(a, b) -> None:
    """Every table and every parameter identical, apart from wall-clock columns."""
    pd.testing.assert_frame_equal(a.rounds.drop(columns=WALL), b.rounds.drop(columns=WALL),
                                  check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    assert [x[1:] for x in a.algorithm.steps.losses] == [x[1:] for x in b.algorithm.steps.losses]


def _parallel(tiny: dict, workers: int = 2):
    tiny["training"]["parallel_clients"] = workers
    return run_scenario(Scenario.model_validate(tiny))


@pytest.mark.parametrize("algorithm", ["fedavg", "hetero_splitee_sequential",
                                       "hetero_splitee_averaging"])
def test_parallel_clients_give_exactly_the_serial_run(tiny, algorithm):
    for group in tiny["devices"].values():
        group["count"] = 2
    tiny["algorithm"] = {"name": algorithm}
    tiny["training"].update(rounds=2, local_epochs=2)
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}  # unequal sizes
    tiny["conditions"] = {"client_drop_prob": 0.3, "straggler_sigma": 0.5}
    serial = run_scenario(Scenario.model_validate(tiny))
    assert torch.get_num_threads() == 1
    parallel = _parallel(tiny, workers=3)
    assert torch.get_num_threads() == 1  # restored after every round
    _tables_equal(parallel, serial)
    assert (parallel.clients["status"] == "dropped").any()  # the dropouts were exercised
    if algorithm == "fedavg":
        pairs = zip(parallel.algorithm.global_model.state_dict().values(),
                    serial.algorithm.global_model.state_dict().values())
    else:
        pairs = ((p, q) for a, b in zip(parallel.algorithm.ctx.clients, serial.algorithm.ctx.clients)
                 for p, q in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert all(torch.equal(p, q) for p, q in pairs)


def test_parallel_clients_with_fused_groups_keep_the_timeline(tiny):
    for group in tiny["devices"].values():
        group["count"] = 2
    tiny["training"]["fuse_clients"] = True
    fused = run_scenario(Scenario.model_validate(tiny))
    both = _parallel(tiny)
    _tables_equal(both, fused)  # fused groups run whole in one thread: the same arithmetic


def test_parallel_clients_are_ignored_with_a_round_deadline(tiny):
    """A deadline can cut a client off mid-round: nothing may train past it."""
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["local_epochs"] = 2
    tiny["conditions"] = {"round_deadline_s": 0.2}  # the slowest client needs 0.26 s
    serial = run_scenario(Scenario.model_validate(tiny))
    assert (serial.clients["status"] == "late").any()
    _tables_equal(_parallel(tiny), serial)


@pytest.mark.parametrize("algorithm", ["fedavg", "hetero_splitee_sequential"])
def test_progress_counts_every_batch_once(tiny, algorithm):
    tiny["algorithm"] = {"name": algorithm}
    scenario = Scenario.model_validate({**tiny, "training": {**tiny["training"],
                                                             "parallel_clients": 2}})

    class Count:
        def __init__(self):
            self.batches = 0
            self.thread_ids: set[int] = set()

        def start(self, total_batches, rounds):
            self.total = total_batches

        def advance(self):
            self.batches += 1
            self.thread_ids.add(threading.get_ident())

        def round_done(self, row):
            pass

    count = Count()
    run_scenario(scenario, progress=count)
    assert count.batches == count.total > 0
    assert count.thread_ids == {threading.get_ident()}  # drawn from the calling thread only


def test_divergence_in_a_parallel_round_is_reported_like_a_serial_one(tiny, monkeypatch):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["optimizer"] = {"name": "sgd", "lr": 0.1}
    monkeypatch.setattr(GlobalModelAlgorithm, "lr_for_round", lambda self, round_: 1e12)
    with pytest.raises(DivergenceError) as serial:
        run_scenario(Scenario.model_validate(tiny))
    with pytest.raises(DivergenceError) as parallel:
        _parallel(tiny)
    assert str(parallel.value) == str(serial.value)


def test_host_threads_run_tasks_and_restore_torch_threads():
    before = torch.get_num_threads()
    with host_threads(1) as pool:
        assert pool is None
    with pytest.raises(RuntimeError, match="job 3"), host_threads(2) as pool:
        seen = list(pool.map(lambda i: torch.get_num_threads(), range(4)))
        assert seen == [1, 1, 1, 1]  # one torch thread per task
        pool.submit(lambda: (_ for _ in ()).throw(RuntimeError("job 3"))).result()
    assert torch.get_num_threads() == before


def test_parallel_clients_are_refused_where_clients_wait_for_the_server(tiny):
    tiny["algorithm"] = {"name": "splitfed_v2"}
    tiny["training"]["parallel_clients"] = 2
    with pytest.raises(ConfigError, match=r"training\.parallel_clients: .*'splitfed_v2'.*fedavg"):
        validate_scenario(tiny)
    tiny["training"]["parallel_clients"] = 0
    with pytest.raises(ConfigError, match=r"training\.parallel_clients"):
        validate_scenario(tiny)


@pytest.mark.parametrize("algorithm", ["fedavg", "hetero_splitee_averaging"])
def test_channels_last_keeps_the_timeline(tiny, algorithm):
    tiny["algorithm"] = {"name": algorithm}
    tiny["training"]["rounds"] = 2
    nchw = run_scenario(Scenario.model_validate(tiny))
    tiny["training"]["channels_last"] = True
    nhwc = run_scenario(Scenario.model_validate(tiny))
    pd.testing.assert_frame_equal(nhwc.events, nchw.events, check_exact=True)
    model = nhwc.algorithm.ctx.clients[0].model
    conv = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)][-1]  # in_channels > 1
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not conv.weight.is_contiguous()
    # float rounding only: the losses agree closely
    pd.testing.assert_series_equal(nhwc.clients["client_loss"], nchw.clients["client_loss"],
                                   rtol=1e-3, atol=1e-4, check_exact=False)


def test_the_cli_says_when_host_options_are_ignored(tiny):
    from sflsim.cli.run import host_option_notes

    tiny["training"]["parallel_clients"] = 2
    assert host_option_notes(Scenario.model_validate(tiny)) == []
    tiny["conditions"] = {"round_deadline_s": 1.0}
    assert host_option_notes(Scenario.model_validate(tiny)) == [
        "training.parallel_clients is ignored: a round deadline could cut a client off in the "
        "middle of work trained ahead"]
    tiny["conditions"], tiny["training"]["timing_only"] = {}, True
    tiny["training"]["fuse_clients"] = True
    assert [n.split(" is ")[0] for n in host_option_notes(Scenario.model_validate(tiny))] == [
        "training.fuse_clients"]  # parallel_clients: an input warning (idle_settings) says it


def test_the_cli_says_which_of_fusing_and_parallel_clients_runs(tiny):
    from sflsim.cli.run import host_option_notes, thread_line
    from sflsim.threads import ThreadChoice

    choice = ThreadChoice(threads=1, reason="--threads 1", explicit=True)
    tiny["training"].update(parallel_clients=2, fuse_clients=True)
    hetero = Scenario.model_validate(tiny)  # fused groups on 2 threads: both run
    assert host_option_notes(hetero) == []
    assert "2 clients at once" in thread_line(choice, hetero)
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["parallel_backend"] = "processes"
    fedavg = Scenario.model_validate(tiny)  # fused into one step: no workers
    assert host_option_notes(fedavg) == [
        "training.parallel_clients is ignored: with training.fuse_clients, fedavg's clients "
        "train as one batched step"]
    assert "at once" not in thread_line(choice, fedavg)
    tiny["training"].update(parallel_clients=1, fuse_clients=False)
    assert host_option_notes(Scenario.model_validate(tiny)) == []  # an input warning says it


def test_resume_without_a_checkpoint_points_to_overwrite_when_results_exist(tiny, tmp_path):
    from sflsim.errors import SflsimError

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rounds.csv").write_text("round\n")
    with pytest.raises(SflsimError, match="start afresh with --overwrite"):
        run_scenario(Scenario.model_validate(tiny), tmp_path / "run", resume=True)
    with pytest.raises(SflsimError, match="run without --resume"):
        run_scenario(Scenario.model_validate(tiny), tmp_path / "none", resume=True)
