"""Split learning's timing-only rounds booked as arrays equal the client-by-client booking,
event by event (:mod:`sflsim.execution.booked_split`).

Hypothesis draws small fleets of Hetero-SplitEE's Sequential strategy (shipped devices, often
identical so that activations reach the server at the same instant; uneven data, so that
clients have different numbers of batches and a short last batch; stragglers and
drop-outs) and runs each twice, timing-only: with the array booking and with it turned
off (the client-by-client booking). The events tables, every column and row order
included, and the rounds tables must be identical. So must fleets of the Averaging
strategy and the Distributed baseline on a server of 1-3 slots, and their server queue
(:func:`~sflsim.execution.booked_split.slot_jobs`) must equal SimPy's own processes on
:class:`~sflsim.engine.FifoResource`. A fleet the array booking does not take (a round
deadline, a shared access network) must run the client-by-client way.
"""

from __future__ import annotations

import pandas as pd
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sflsim.algorithms.hetero_splitee import _HierarchicalTraining
from sflsim.config import validate_scenario
from sflsim.engine import FifoResource
from sflsim.execution.booked_split import BookedSplitRounds, slot_jobs
from sflsim.runner import run_scenario

PROFILES = ["rpi4", "jetson_nano", "jetson_orin_nano"]


def _scenario(devices: dict, algorithm: str = "hetero_splitee_sequential", *,
              train_samples: int, rounds: int = 2, batch_size: int = 8, **extra) -> dict:
    """A timing-only scenario of ``devices`` on tiny synthetic images."""
    return {
        "name": "booked_split", "seed": 0,
        "dataset": {"name": "synthetic", "partition": {"scheme": "iid"},
                    "synthetic": {"train_samples": train_samples, "test_samples": 8,
                                  "image_shape": [1, 16, 16]}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
        "devices": devices, "server": {"profile": "a100"}, "algorithm": {"name": algorithm},
        "training": {"rounds": rounds, "batch_size": batch_size, "timing_only": True},
        "evaluation": {"max_test_samples": 8}, **extra,
    }


def device_groups(draw) -> tuple[dict, int]:
    """1-4 device groups of 1-4 shipped devices each (``devices:``) and their client count."""
    groups = draw(st.lists(st.tuples(st.sampled_from(PROFILES), st.integers(1, 4),
                                     st.integers(1, 3), st.sampled_from(["wifi", "lte"])),
                           min_size=1, max_size=4))
    devices = {f"g{i}": {"profile": p, "count": k, "end_layer": e, "link": link}
               for i, (p, k, e, link) in enumerate(groups)}
    return devices, sum(k for _, k, _, _ in groups)


def stragglers_or_none(draw) -> dict:
    """Half the time no conditions, else stragglers (sigma 0.3 or 1) and drop-outs (none or
    30%)."""
    if not draw(st.booleans()):
        return {}
    return {"straggler_sigma": draw(st.sampled_from([0.3, 1.0])),
            "client_drop_prob": draw(st.sampled_from([0.0, 0.3]))}


@st.composite
def fleets(draw) -> dict:
    """A timing-only Hetero-SplitEE Sequential scenario of 1-4 device groups, 2-10 clients."""
    devices, n = device_groups(draw)
    data = _scenario(devices, train_samples=draw(st.integers(2, 12)) * 4 * n,
                     batch_size=draw(st.sampled_from([4, 8, 16])))
    data["seed"] = draw(st.integers(0, 5))
    data["dataset"]["partition"] = draw(st.sampled_from([{"scheme": "iid"},
                                                         {"scheme": "dirichlet", "alpha": 0.3}]))
    data["training"]["local_epochs"] = draw(st.integers(1, 2))
    data["conditions"] = stragglers_or_none(draw)
    return data


@st.composite
def slot_fleets(draw) -> dict:
    """A timing-only Hetero-SplitEE Averaging or Distributed scenario of 1-4 device groups,
    2-10 clients, on a server of 1-3 slots; half the time one batch per client and round
    (of uneven sizes), else several (uneven data, 1-2 local epochs)."""
    devices, n = device_groups(draw)
    batch = draw(st.sampled_from([4, 8, 16]))
    algorithm = draw(st.sampled_from(["hetero_splitee_averaging", "distributed"]))
    if draw(st.booleans()):  # k or k + 1 samples a client (IID): one batch each
        samples = n * draw(st.integers(1, batch - 1)) + draw(st.integers(0, n - 1))
        data = _scenario(devices, algorithm, batch_size=batch, train_samples=samples, rounds=3)
    else:
        data = _scenario(devices, algorithm, batch_size=batch, rounds=2,
                         train_samples=draw(st.integers(2, 8)) * 4 * n)
        data["dataset"]["partition"] = draw(st.sampled_from(
            [{"scheme": "iid"}, {"scheme": "dirichlet", "alpha": 0.3}]))
        data["training"]["local_epochs"] = draw(st.integers(1, 2))
    data["server"]["slots"] = draw(st.integers(1, 3))
    data["seed"] = draw(st.integers(0, 5))
    data["conditions"] = stragglers_or_none(draw)
    return data


def _run(data: dict, arrays: bool, monkeypatch) -> tuple:
    """The run of ``data`` with the array booking on or off; (result, rounds booked as
    arrays)."""
    booked = []
    original_arrays, original_book = _HierarchicalTraining._arrays, BookedSplitRounds.book

    def book(self, *args, **kwargs):
        got = original_book(self, *args, **kwargs)
        booked.append(got is not None)
        return got

    with monkeypatch.context() as patch:
        patch.setattr(_HierarchicalTraining, "_arrays",
                      lambda self: original_arrays(self) if arrays else None)
        patch.setattr(BookedSplitRounds, "book", book)
        result = run_scenario(validate_scenario(data))
    return result, sum(booked)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=fleets())
def test_the_array_booking_gives_the_client_by_client_events(data, monkeypatch):
    arrays, booked = _run(data, True, monkeypatch)
    loop, _ = _run(data, False, monkeypatch)
    assert booked  # the fleet took the array booking
    _assert_same(arrays, loop)


def _assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    timed = ["round", "sim_time_s", "bytes_up", "bytes_down", "client_flops", "server_flops"]
    pd.testing.assert_frame_equal(a.rounds[timed], b.rounds[timed], check_exact=True)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=slot_fleets())
def test_averaging_booked_as_arrays_gives_the_client_by_client_events(data, monkeypatch):
    """Averaging and Distributed: a job per batch on its client's own server-side model
    and the server's slots, first come, first served."""
    arrays, booked = _run(data, True, monkeypatch)
    loop, _ = _run(data, False, monkeypatch)
    assert booked == data["training"]["rounds"]
    _assert_same(arrays, loop)


@settings(max_examples=300, deadline=None)
@given(jobs=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6), st.integers(0, 3)),
                     min_size=1, max_size=14),
       slots=st.integers(1, 3))
def test_slot_jobs_are_simpys_own_queue(jobs, slots):
    """Jobs of 1-3 clients (client by client, as the processes are made), arriving and
    lasting whole seconds so that arrivals, starts and ends often fall together, on 1-3
    slots: the starts, the ends and the order they end in are those of SimPy processes
    that wait for their arrival, their client's model and a slot (FifoResource)."""
    jobs = sorted(jobs, key=lambda job: job[0])  # made client by client
    owner = [c for c, _, _ in jobs]
    arrival = [float(a) for _, a, _ in jobs]
    duration = [float(d) for _, _, d in jobs]
    env = simpy.Environment()
    server = FifoResource(env, slots)
    models = {c: FifoResource(env) for c in set(owner)}
    ended = []

    def job(k):
        yield env.timeout(arrival[k])
        with models[owner[k]].request() as model:
            yield model
            with server.request() as slot:
                yield slot
                start = env.now
                yield env.timeout(duration[k])
                ended.append((k, start, env.now))

    for k in range(len(jobs)):
        env.process(job(k))
    env.run()
    starts, ends, order = slot_jobs(arrival, duration, owner, slots)
    assert list(zip(order.tolist(), starts, ends)) == ended


def test_averaging_on_contended_slots_is_booked_as_arrays(monkeypatch):
    """Twelve clients of three kinds, stragglers, on a slow server of two slots: jobs wait
    for the slot that frees first; every round is booked as arrays and equals the
    client-by-client booking."""
    data = _scenario({"a": {"profile": "rpi4", "count": 4, "end_layer": 1, "link": "wifi"},
                      "b": {"profile": "jetson_nano", "count": 4, "end_layer": 2, "link": "lte"},
                      "c": {"profile": "jetson_orin_nano", "count": 4, "end_layer": 3,
                            "link": "wifi"}},
                     "hetero_splitee_averaging", train_samples=12 * 6, rounds=3)
    data["server"] = {"profile": "cpu_server", "slots": 2}  # slow: the jobs queue
    data["conditions"] = {"straggler_sigma": 1.0}
    data["training"]["local_epochs"] = 2  # a client's second job may wait for its model
    arrays, booked = _run(data, True, monkeypatch)
    loop, _ = _run(data, False, monkeypatch)
    assert booked == 3
    _assert_same(arrays, loop)
    served = arrays.events.query("activity == 'server_train'")
    assert (served.queue_s > 0).sum() >= 6  # the slots were contended


@pytest.mark.parametrize("algorithm", ["hetero_splitee_sequential", "hetero_splitee_averaging"])
@pytest.mark.parametrize("setting", ["deadline", "shared_access"])
def test_a_round_arrays_cannot_book_runs_client_by_client(setting, algorithm, monkeypatch):
    """A round deadline (work may be cut off) or an access point shared by the uplinks
    (transfers contend) leaves the round to the client-by-client booking or the SimPy
    processes; the run still completes."""
    data = _scenario({"a": {"profile": "rpi4", "count": 2, "end_layer": 1, "link": "wifi"},
                      "b": {"profile": "jetson_nano", "count": 2, "end_layer": 2, "link": "lte"}},
                     algorithm, train_samples=64)
    if setting == "deadline":
        data["conditions"] = {"round_deadline_s": 1e9}
    else:
        data["network"] = {"topology": "shared_access", "access_points": {
            "ap1": {"link": "wifi", "groups": ["a", "b"]}}}
    result, booked = _run(data, True, monkeypatch)
    assert not booked
    assert len(result.rounds) == 3 and (result.events.activity == "server_train").any()


@pytest.mark.parametrize("algorithm", ["fedavg", "hetero_splitee_sequential",
                                       "hetero_splitee_averaging"])
def test_a_round_every_client_sits_out_books_nothing(algorithm):
    """A booked round after which no client takes part adds no rows, and the run goes on
    (an empty block of columns once made the round's events unreadable)."""
    data = _scenario({"a": {"profile": "rpi4", "count": 1, "end_layer": 1, "link": "wifi"}},
                     algorithm, train_samples=32, rounds=4,
                     conditions={"client_drop_prob": 0.9})
    result = run_scenario(validate_scenario(data))
    dropped = result.clients.query("status == 'dropped'")["round"]
    assert len(dropped) and set(result.events["round"]).isdisjoint(dropped)
    assert result.rounds["round"].tolist() == [0, 1, 2, 3, 4]
