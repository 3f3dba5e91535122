"""``training.parallel_backend: processes``: the FedAvg family's clients trained in worker
processes give exactly the serial run (one torch thread, as the suite runs), report
progress per batch, and leave no worker behind however the run ends."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pandas as pd
import pytest
import torch

import sflsim.execution.worker_process as worker_process
import sflsim.execution.workers as workers
from sflsim.algorithms.global_model import GlobalModelAlgorithm
from sflsim.config import validate_scenario
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError, DivergenceError
from sflsim.runner import run_scenario

# worker processes fork torch and run its CPU kernels: a crash or hang fails these tests
# (in the isolated tests' one subprocess, see pyproject.toml), not the whole pytest run
pytestmark = [pytest.mark.isolated(group="host_kernels"),
              pytest.mark.skipif(sys.platform != "linux", reason="worker processes fork: Linux")]

WALL = ["wall_time_s"]


def _tables_equal(a, b) -> None:
    """Every table and loss identical, apart from wall-clock columns."""
    pd.testing.assert_frame_equal(a.rounds.drop(columns=WALL), b.rounds.drop(columns=WALL),
                                  check_exact=True)
    pd.testing.assert_frame_equal(a.clients, b.clients, check_exact=True)
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    assert [x[1:] for x in a.algorithm.steps.losses] == [x[1:] for x in b.algorithm.steps.losses]


def _processes(tiny: dict, workers_: int = 2, **kw):
    tiny["training"].update(parallel_clients=workers_, parallel_backend="processes")
    return run_scenario(Scenario.model_validate(tiny), **kw)


def _no_workers_left() -> None:
    assert multiprocessing.active_children() == []
    assert not workers._POOLS


@pytest.fixture
def federated(tiny):
    """The tiny scenario with 4 clients of unequal sizes, some dropping out, 2 epochs."""
    for group in tiny["devices"].values():
        group["count"] = 2 if group is tiny["devices"]["weak"] else 1
    tiny["training"].update(rounds=3, local_epochs=2)
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 1.0}
    tiny["conditions"] = {"client_drop_prob": 0.25, "straggler_sigma": 0.5}
    return tiny


@pytest.mark.parametrize("algorithm", [
    {"name": "fedavg"},
    {"name": "fedprox", "mu": 0.1},
    {"name": "fedmut", "alpha": 2.0},
    {"name": "fedbabu", "finetune_epochs": 1},
])
def test_worker_processes_give_exactly_the_serial_run(federated, algorithm):
    federated["algorithm"] = algorithm
    if algorithm["name"] == "fedavg":  # augmentation draws travel to the workers and back
        federated["dataset"]["augment"] = {"random_crop_padding": 2, "horizontal_flip": True}
        federated["training"]["optimizer"] = {"name": "sgd", "lr": 0.05, "momentum": 0.9}
    serial = run_scenario(Scenario.model_validate(federated))
    assert torch.get_num_threads() == 1
    parallel = _processes(federated, workers_=3)
    assert torch.get_num_threads() == 1
    _tables_equal(parallel, serial)
    assert (parallel.clients["status"] == "dropped").any()  # the dropouts were exercised
    mine, theirs = parallel.algorithm.global_model, serial.algorithm.global_model
    assert all(torch.equal(p, q) for p, q in zip(mine.state_dict().values(),
                                                 theirs.state_dict().values()))
    steps, serial_steps = parallel.algorithm.steps, serial.algorithm.steps
    assert steps.augment_generators.keys() == serial_steps.augment_generators.keys()
    for cid, gen in steps.augment_generators.items():
        assert torch.equal(gen.get_state(), serial_steps.augment_generators[cid].get_state())
    _no_workers_left()  # stopped when the run ended


def test_progress_counts_every_batch_once_from_the_calling_thread(tiny):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["rounds"] = 2

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
    _processes(tiny, progress=count)
    assert count.batches == count.total > 0
    assert count.thread_ids == {threading.get_ident()}


def test_timing_only_and_deadline_runs_start_no_workers(tiny, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("worker processes started")

    monkeypatch.setattr(workers.ClientWorkers, "__init__", refuse)
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["local_epochs"] = 2
    tiny["conditions"] = {"round_deadline_s": 0.2}  # the slowest client needs 0.26 s
    serial = run_scenario(Scenario.model_validate(tiny))
    assert (serial.clients["status"] == "late").any()
    _tables_equal(_processes(tiny), serial)
    del tiny["conditions"]
    tiny["training"]["timing_only"] = True
    _processes(tiny)


def test_divergence_stops_the_workers_and_reads_as_a_serial_one(tiny, monkeypatch):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["optimizer"] = {"name": "sgd", "lr": 0.1}
    monkeypatch.setattr(GlobalModelAlgorithm, "lr_for_round", lambda self, round_: 1e12)
    with pytest.raises(DivergenceError) as serial:
        run_scenario(Scenario.model_validate(tiny))
    with pytest.raises(DivergenceError) as parallel:
        _processes(tiny)
    assert str(parallel.value) == str(serial.value)
    _no_workers_left()


def test_an_error_in_a_worker_is_raised_with_its_traceback(tiny, monkeypatch):
    def broken(*args):  # forked into the workers with the module
        raise ValueError("no such image")

    monkeypatch.setattr(worker_process, "training_samples", broken)
    tiny["algorithm"] = {"name": "fedavg"}
    with pytest.raises(ValueError, match="no such image") as info:
        _processes(tiny)
    causes, exc = [], info.value
    while exc is not None:  # SimPy chains a copy before the worker's own
        causes.append(exc)
        exc = exc.__cause__
    # the worker's traceback
    assert any("in train" in str(c) and "worker_process.py" in str(c) for c in causes)
    _no_workers_left()


def test_ctrl_c_while_the_workers_train_stops_them(tiny):
    tiny["algorithm"] = {"name": "fedavg"}

    class Interrupt:
        def start(self, total_batches, rounds):
            pass

        def advance(self):
            raise KeyboardInterrupt

        def round_done(self, row):
            pass

    with pytest.raises(KeyboardInterrupt):
        _processes(tiny, progress=Interrupt())
    _no_workers_left()


def test_workers_die_with_a_killed_run(tmp_path):
    """SIGKILL leaves the main process no time to stop them: the kernel does."""
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent("""
        import time, torch
        from torch import nn
        from sflsim.execution.workers import ClientWorkers
        from sflsim.config.training import OptimizerConfig
        pool = ClientWorkers(2, nn.Linear(2, 2), None, None, nn.CrossEntropyLoss(),
                             OptimizerConfig())
        print(*(p.pid for p in pool.procs), flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def test_the_setting_is_checked(tiny):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["parallel_backend"] = "gpus"
    with pytest.raises(ConfigError, match=r"training\.parallel_backend: 'gpus' .*threads, "
                                          r"processes"):
        validate_scenario(tiny)
    tiny["training"].update(parallel_backend="processes", device="cuda")
    with pytest.raises(ConfigError, match=r"parallel_backend: 'processes' .*CPU.*'cuda'"):
        validate_scenario(tiny)
    tiny["training"]["device"] = "cpu"
    tiny["algorithm"] = {"name": "fedgh"}
    with pytest.raises(ConfigError, match=r"training\.parallel_backend: 'processes' .*'fedgh'"
                                          r".*fedavg, .*fedprox.*threads"):
        validate_scenario(tiny)
    tiny["training"]["parallel_backend"] = "threads"
    validate_scenario(tiny)


def test_a_pool_serves_rounds_until_closed():
    pool = workers.ClientWorkers(1, torch.nn.Linear(2, 2), None, None, None, None)
    owner = type("Owner", (), {})()
    assert workers.client_workers(owner, lambda: pool) is pool
    assert workers.client_workers(owner, lambda: None) is pool  # made once
    workers.close_workers(owner)
    assert pool.closed and not any(p.is_alive() for p in pool.procs)
    with pytest.raises(RuntimeError, match="stopped"):
        pool.train([], 0.1, None, lambda: None)
    assert os.getpid() == pool.pid
    _no_workers_left()


@pytest.mark.parametrize("test_samples", [40, None])  # a subset sent; the data's own split
def test_evaluations_after_the_first_round_run_in_the_workers(tiny, monkeypatch, test_samples):
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["evaluation"].update(batch_size=16 if test_samples else 256, max_test_samples=test_samples)
    serial = run_scenario(Scenario.model_validate(tiny))
    in_main = []
    evaluate = GlobalModelAlgorithm.evaluate
    monkeypatch.setattr(GlobalModelAlgorithm, "evaluate",
                        lambda self, *args: in_main.append(1) or evaluate(self, *args))
    parallel = _processes(tiny)
    assert len(in_main) == 1  # round 0's, before the first round forks the workers
    assert parallel.rounds["server_accuracy"].notna().sum() == tiny["training"]["rounds"] + 1
    _tables_equal(parallel, serial)
    _no_workers_left()


class _Pixels:
    """A dataset stub: ``batch`` as :meth:`sflsim.data.split.DatasetSplit.batch` reads it."""

    def batch(self, x, y, start, stop):
        return x[start:stop].float(), y[start:stop]


def test_a_pool_evaluates_each_test_set_it_is_given():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    pool = workers.ClientWorkers(2, model, _Pixels(), None, None, None)
    try:
        for n in (50, 7):  # a second test set replaces the first in the workers
            x = torch.randint(0, 255, (n, 4), dtype=torch.uint8)
            y = torch.randint(0, 3, (n,))
            with torch.no_grad():
                model.weight.add_(1.0)  # a new model for each evaluation
                expected = int((model(x.float()).argmax(1) == y).sum())
            reports: list[int] = []
            assert pool.evaluate(model, x, y, 8, lambda r=reports: r.append(1)) == expected
            assert len(reports) == -(-n // 8)
    finally:
        pool.close()
    _no_workers_left()


def test_workers_are_named_for_top_and_pgrep():
    pool = workers.ClientWorkers(2, torch.nn.Linear(2, 2), None, None, None, None)
    try:
        names = set()
        deadline = time.monotonic() + 10
        while names != {"sflsim-worker-0", "sflsim-worker-1"} and time.monotonic() < deadline:
            time.sleep(0.05)
            names = {open(f"/proc/{p.pid}/comm").read().strip() for p in pool.procs}
        assert names == {"sflsim-worker-0", "sflsim-worker-1"}
    finally:
        pool.close()
    _no_workers_left()


def test_the_round_is_simulated_while_its_clients_train(tiny, monkeypatch):
    """The workers get the round's clients before it is simulated and are waited for
    after (ClientWorkers.submit): every client's simulated round has ended before the
    main process first waits for a trained client, and the result is still the serial
    run's."""
    from sflsim.algorithms.fedavg import FedAvg

    log: list[str] = []
    train_client, finish = FedAvg.train_client, workers.ClientWorkers._finish

    def client(self, c, round_, trained=None):
        yield from train_client(self, c, round_, trained)
        log.append(f"client {c.client_id} round {round_}")

    def waited(self, tasks):
        log.append("wait")
        return finish(self, tasks)

    monkeypatch.setattr(FedAvg, "train_client", client)
    monkeypatch.setattr(workers.ClientWorkers, "_finish", waited)
    tiny["algorithm"] = {"name": "fedavg"}
    serial = run_scenario(Scenario.model_validate(tiny))
    log.clear()
    _tables_equal(_processes(tiny), serial)
    first_wait = log.index("wait")
    clients = len(tiny_clients := [x for x in log if x.endswith("round 1")])
    assert clients == len(serial.clients[serial.clients["round"] == 1]) > 1, tiny_clients
    assert all(log.index(x) < first_wait for x in tiny_clients), log


def test_new_tasks_before_the_last_finished_stop_the_workers(tiny):
    import copy as copy_

    from sflsim.runner import build

    ctx, _ = build(Scenario.model_validate(tiny))
    model = torch.nn.Sequential(*ctx.backbone.stages, ctx.backbone.head)
    pool = workers.ClientWorkers(1, model, ctx.data, None, torch.nn.functional.cross_entropy,
                                 Scenario.model_validate(tiny).training.optimizer)
    try:
        pool.set_base(model)
        job = workers.Job(0, [torch.arange(4)], None)
        pool.submit([job], 0.1, None, lambda: None, blank=lambda: copy_.deepcopy(model))
        with pytest.raises(RuntimeError, match="before the last ones finished"):
            pool.submit([job], 0.1, None, lambda: None, blank=lambda: copy_.deepcopy(model))
        assert pool.closed
    finally:
        pool.close()
    _no_workers_left()
