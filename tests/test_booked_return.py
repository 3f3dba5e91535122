"""SplitFed's timing-only rounds booked as arrays equal its SimPy processes, event by
event (:mod:`sflsim.execution.booked_return`).

Hypothesis draws small fleets (shipped devices, often identical so that downloads,
forwards and activations end at the same instant; one batch per client and round, of
uneven sizes; stragglers and drop-outs; static and random cuts; seeds; V2, or V1 on a
server of 1-3 slots) and runs each twice,
timing-only: with the array booking and with it turned off (a SimPy process per client).
The events tables, every column and the row order included, and the rounds tables must be
identical.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sflsim.config import validate_scenario
from sflsim.execution import booked_return
from sflsim.execution.booked_return import (
    BookedReturnRounds,
    ReturnRoundBooking,
    _first_come_first_served,
    book_chains,
    processing_orders,
    rows_in_order,
    server_order,
)
from sflsim.runner import run_scenario
from tests.test_booked_split import _scenario, device_groups, stragglers_or_none

TIMED = ["round", "sim_time_s", "bytes_up", "bytes_down", "client_flops", "server_flops"]


@st.composite
def fleets(draw) -> dict:
    """A timing-only SplitFed V2 or V1 scenario of 1-4 device groups, 2-10 clients, each
    with one batch a round; V1 on a server of 1-3 slots."""
    devices, n = device_groups(draw)
    batch = draw(st.sampled_from([4, 8, 16]))
    # k or k + 1 samples a client (IID): one batch each, of uneven sizes
    samples = n * draw(st.integers(1, batch - 1)) + draw(st.integers(0, n - 1))
    algorithm = draw(st.sampled_from(["splitfed_v2", "splitfed_v1"]))
    data = _scenario(devices, algorithm, batch_size=batch, train_samples=samples, rounds=3)
    if algorithm == "splitfed_v1":
        data["server"]["slots"] = draw(st.integers(1, 3))
    data["seed"] = draw(st.integers(0, 5))
    data["algorithm"]["split"] = draw(st.sampled_from([{"name": "static"}, {"name": "random"}]))
    data["conditions"] = stragglers_or_none(draw)
    return data


def _run(data: dict, arrays: bool, monkeypatch) -> tuple:
    """The run of ``data`` with the array booking on or off; (result, rounds booked as
    arrays, rounds the arrays gave back for a tie)."""
    booked, tied = [], []
    original = BookedReturnRounds.book

    def book(self, *args, **kwargs):
        last = original(self, *args, **kwargs)
        (booked if last is not None else tied).append(1)
        return last

    with monkeypatch.context() as patch:
        patch.setattr(BookedReturnRounds, "book", book)
        if not arrays:
            patch.setattr(ReturnRoundBooking, "book_round", lambda self: None)
        result = run_scenario(validate_scenario(data))
    return result, len(booked), len(tied)


def _assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    pd.testing.assert_frame_equal(a.rounds[TIMED], b.rounds[TIMED], check_exact=True)
    pd.testing.assert_frame_equal(a.clients.drop(columns="wall_time_s", errors="ignore"),
                                  b.clients.drop(columns="wall_time_s", errors="ignore"),
                                  check_exact=True)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=fleets())
def test_the_array_booking_gives_the_simpy_events(data, monkeypatch):
    arrays, booked, tied = _run(data, True, monkeypatch)
    loop, _, _ = _run(data, False, monkeypatch)
    assert booked + tied == 3  # every round was offered to the arrays
    _assert_same(arrays, loop)


def test_identical_clients_are_booked_in_the_order_simpy_serves_them(monkeypatch):
    """Twelve identical clients: their downloads, forwards and activations end at the same
    instants and reach the server together; the arrays order them as SimPy does (by
    client, then by the order of each previous event) and book every round."""
    data = _scenario({"a": {"profile": "rpi4", "count": 6, "end_layer": 2, "link": "wifi"},
                      "b": {"profile": "rpi4", "count": 6, "end_layer": 2, "link": "wifi"}},
                     "splitfed_v2", train_samples=12 * 8, rounds=3)
    arrays, booked, tied = _run(data, True, monkeypatch)
    loop, _, _ = _run(data, False, monkeypatch)
    assert (booked, tied) == (3, 0)
    _assert_same(arrays, loop)
    served = arrays.events.query("activity == 'server_train' and round == 1")
    assert (served["queue_s"] > 0).sum() == 11  # all arrived at once: eleven queued


@pytest.mark.parametrize("algorithm", ["splitfed_v2", "splitfed_v1"])
def test_identical_clients_on_a_server_of_two_slots(algorithm, monkeypatch):
    """Twelve identical clients reach a server of two slots together: V2 serves them one
    at a time on its one model; V1, on a model each, two at a time, so the jobs of the two
    slots, and every row after them, end in pairs, ordered as SimPy processes them."""
    data = _scenario({"a": {"profile": "rpi4", "count": 12, "end_layer": 2, "link": "wifi"}},
                     algorithm, train_samples=12 * 8, rounds=2)
    data["server"]["slots"] = 2
    arrays, booked, tied = _run(data, True, monkeypatch)
    loop, _, _ = _run(data, False, monkeypatch)
    assert (booked, tied) == (2, 0)
    _assert_same(arrays, loop)
    served = loop.events.query("activity == 'server_train' and round == 1")
    assert (served["queue_s"] > 0).sum() == (11 if algorithm == "splitfed_v2" else 10)


def test_v1_jobs_take_the_slot_that_frees_first(monkeypatch):
    """Clients of three kinds at three cuts, stragglers, reach a slow V1 server of two
    slots in bursts of three: the third of a burst waits for the slot that frees first,
    and every round is booked as arrays, equal to the processes."""
    data = _scenario({"a": {"profile": "rpi4", "count": 3, "end_layer": 1, "link": "wifi"},
                      "b": {"profile": "jetson_nano", "count": 3, "end_layer": 2, "link": "lte"},
                      "c": {"profile": "jetson_orin_nano", "count": 3, "end_layer": 3,
                            "link": "wifi"}},
                     "splitfed_v1", train_samples=9 * 8, rounds=3)
    data["server"] = {"profile": "cpu_server", "slots": 2}
    data["conditions"] = {"straggler_sigma": 1.0}
    arrays, booked, tied = _run(data, True, monkeypatch)
    loop, _, _ = _run(data, False, monkeypatch)
    assert (booked, tied) == (3, 0)
    _assert_same(arrays, loop)
    served = arrays.events.query("activity == 'server_train'")
    assert (served["queue_s"] > 0).sum() >= 2


@pytest.mark.parametrize("change", ["two_batches", "priority_queue"])
def test_what_the_arrays_do_not_book(change, monkeypatch):
    """More than one batch a round is booked as chains (:func:`book_chains`); a server
    queue by priority runs a SimPy process per client."""
    data = _scenario({"a": {"profile": "rpi4", "count": 2, "end_layer": 1, "link": "wifi"}},
                     "splitfed_v2", train_samples=2 * 8, rounds=1)
    if change == "two_batches":
        data["training"]["local_epochs"] = 2
    else:
        data["server"]["queue"] = "priority"
    chains = []
    with monkeypatch.context() as patch:
        patch.setattr(booked_return, "book_chains",
                      lambda *a, **k: chains.append(1) or book_chains(*a, **k))
        result, booked, tied = _run(data, True, monkeypatch)
    assert (booked, tied, len(chains)) == (0, 0, 1 if change == "two_batches" else 0)
    assert (result.events.activity == "server_train").sum() == 2 * (
        2 if change == "two_batches" else 1)


@st.composite
def chain_fleets(draw) -> dict:
    """A timing-only SplitFed V2 or V1 scenario of 1-4 device groups, 2-10 clients with
    1-8 batches a round each (uneven data, a short last batch, 1-2 local epochs); V1 on
    a server of 1-3 slots."""
    devices, n = device_groups(draw)
    algorithm = draw(st.sampled_from(["splitfed_v2", "splitfed_v1"]))
    data = _scenario(devices, algorithm, batch_size=draw(st.sampled_from([4, 8])), rounds=2,
                     train_samples=draw(st.integers(2, 8)) * 4 * n)
    if algorithm == "splitfed_v1":
        data["server"]["slots"] = draw(st.integers(1, 3))
    data["seed"] = draw(st.integers(0, 5))
    data["dataset"]["partition"] = draw(st.sampled_from([{"scheme": "iid"},
                                                         {"scheme": "dirichlet", "alpha": 0.3}]))
    data["training"]["local_epochs"] = draw(st.integers(1, 2))
    data["algorithm"]["split"] = draw(st.sampled_from([{"name": "static"}, {"name": "random"}]))
    data["conditions"] = stragglers_or_none(draw)
    return data


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=chain_fleets())
def test_rounds_of_several_batches_booked_as_chains_give_the_simpy_events(data, monkeypatch):
    """Clients of several batches a round, their server steps interleaved with the others'
    on V2's one model or V1's slots: booked as chains, event by event as the processes."""
    arrays, _, _ = _run(data, True, monkeypatch)
    loop, _, _ = _run(data, False, monkeypatch)
    _assert_same(arrays, loop)


def test_identical_clients_of_several_batches_on_two_slots(monkeypatch):
    """Twelve identical clients of three batches each on V1's two slots and on V2's one
    model: every event of one kind falls together, and the chains order them as SimPy."""
    for algorithm in ("splitfed_v1", "splitfed_v2"):
        data = _scenario({"a": {"profile": "rpi4", "count": 12, "end_layer": 2, "link": "wifi"}},
                         algorithm, train_samples=12 * 24, rounds=2)
        data["server"]["slots"] = 2
        arrays, _, _ = _run(data, True, monkeypatch)
        loop, _, _ = _run(data, False, monkeypatch)
        _assert_same(arrays, loop)
        served = arrays.events.query("activity == 'server_train'")
        assert len(served) == 12 * 3 * 2 and (served.queue_s > 0).sum() >= 12


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
                      min_size=1, max_size=8))
def test_the_orders_are_the_ones_simpy_processes_events_in(steps):
    """Processes started in client order, each waiting three delays (download, forward,
    upload) of whole seconds, so that events of many clients fall on one instant: the
    order SimPy fires each kind of event in is :func:`processing_orders`'."""
    env, fired = simpy.Environment(), {0: [], 1: [], 2: []}

    def client(i, delays):
        for kind, delay in enumerate(delays):
            yield env.timeout(delay)
            fired[kind].append(i)

    for i, delays in enumerate(steps):
        env.process(client(i, delays))
    env.run()
    times = np.array(steps, dtype=float).cumsum(axis=1)
    orders = processing_orders(times[:, 0], times[:, 1], times[:, 2])
    assert [o.tolist() for o in orders] == [fired[0], fired[1], fired[2]]


@settings(max_examples=300, deadline=None)
@given(jobs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2)),
                     min_size=1, max_size=8),
       slots=st.integers(1, 3))
def test_the_server_order_is_the_one_simpy_ends_jobs_in(jobs, slots):
    """Clients started in client order reach a first-come-first-served server of 1-3 slots
    (:class:`~sflsim.engine.server.FifoResource`, as SplitFed's server) after whole-second
    delays, then hold a slot for whole seconds (zero included), then wait a last delay:
    many jobs arrive, start and end on one instant. Where :func:`server_order` gives an
    order, it is the order SimPy ends the jobs in, the starts are SimPy's, and the last
    events fire in the order derived from it."""
    from sflsim.engine.server import FifoResource

    env = simpy.Environment()
    server = FifoResource(env, capacity=slots)
    arrivals, started, ended, after = [], {}, [], []

    def client(i, arrive, hold, last):
        yield env.timeout(arrive)
        arrivals.append(i)
        with server.request() as slot:
            yield slot
            started[i] = env.now
            yield env.timeout(hold)
        ended.append(i)
        yield env.timeout(last)
        after.append(i)

    for i, (arrive, hold, last) in enumerate(jobs):
        env.process(client(i, arrive, hold, last))
    env.run()
    arrive, hold, last = (np.array(x, dtype=float) for x in zip(*jobs))
    served = np.argsort(arrive, kind="stable")
    assert served.tolist() == arrivals
    begin, finish = _first_come_first_served(arrive[served].tolist(), hold[served].tolist(),
                                             slots)
    start, end = np.empty(len(jobs)), np.empty(len(jobs))
    start[served], end[served] = begin, finish
    assert [started[i] for i in range(len(jobs))] == start.tolist()
    order = server_order(arrive, start, end, served)
    if order is not None:
        assert order.tolist() == ended
        done = end + last
        assert order[np.argsort(done[order], kind="stable")].tolist() == after


def test_the_server_order_refuses_what_it_cannot_tell():
    served = np.arange(3)
    # two jobs start and end together, one at its arrival, one handed a slot
    assert server_order(np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0]),
                        np.array([1.0, 2.0, 2.0]), served) is None
    # two jobs start at their arrivals when a job ends, and end together
    assert server_order(np.array([0.0, 1.0, 1.0]), np.array([0.0, 1.0, 1.0]),
                        np.array([1.0, 2.0, 2.0]), served) is None
    # jobs that end together go in the queue's order
    assert server_order(np.array([0.0, 0.0, 0.5]), np.array([0.0, 0.0, 0.5]),
                        np.array([2.0, 2.0, 2.0]), np.array([1, 0, 2])).tolist() == [1, 0, 2]


def test_rows_of_two_kinds_ending_together_are_left_to_the_processes():
    end = np.array([1.0, 2.0, 2.0, 3.0])
    assert rows_in_order(end, np.array([0, 0, 0, 1], dtype=np.int8)).tolist() == [0, 1, 2, 3]
    assert rows_in_order(end, np.array([0, 0, 1, 1], dtype=np.int8)) is None  # two kinds
    assert rows_in_order(end, np.array([0, 3, 3, 4], dtype=np.int8)).tolist() == [0, 1, 2, 3]
    assert rows_in_order(end[::-1].copy(), np.zeros(4, dtype=np.int8)).tolist() == [3, 1, 2, 0]
