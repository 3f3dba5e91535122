"""MergeSFL's timing-only rounds booked as chains of events equal its SimPy processes,
event by event (:class:`sflsim.execution.booked_chains._MergedChains`).

Hypothesis draws small fleets (shipped devices, often identical so that their events fall
together; cuts static per group or random per round; batch sizes by speed or even; 1-3
iterations; a server of 1-3 slots; stragglers and drop-outs) and runs each twice,
timing-only: booked as chains and with the booking turned off (a SimPy process per
client). The events tables, every column and the row order included, the rounds tables and
the clients tables must be identical.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sflsim.config import validate_scenario
from sflsim.execution import booked_chains
from sflsim.execution.booked_return import ReturnRoundBooking
from sflsim.runner import run_scenario
from tests.test_booked_return import _assert_same
from tests.test_booked_split import _scenario, device_groups, stragglers_or_none


def _run(data: dict, chains: bool, monkeypatch) -> tuple:
    """The run of ``data`` booked as chains or as processes; (result, rounds booked as
    merged chains)."""
    merged = []
    original = booked_chains._MergedChains.run

    def run(self):
        merged.append(1)
        return original(self)

    with monkeypatch.context() as patch:
        patch.setattr(booked_chains._MergedChains, "run", run)
        if not chains:
            patch.setattr(ReturnRoundBooking, "book_round", lambda self, sizes=None: None)
        result = run_scenario(validate_scenario(data))
    return result, len(merged)


@st.composite
def merged_fleets(draw) -> dict:
    """A timing-only MergeSFL scenario of 1-4 device groups, 2-10 clients."""
    devices, n = device_groups(draw)
    data = _scenario(devices, "mergesfl", batch_size=draw(st.sampled_from([4, 8])), rounds=2,
                     train_samples=draw(st.integers(2, 8)) * 4 * n)
    data["server"]["slots"] = draw(st.integers(1, 3))
    data["seed"] = draw(st.integers(0, 5))
    data["algorithm"]["split"] = draw(st.sampled_from([{"name": "static"}, {"name": "random"}]))
    data["algorithm"]["regulate_batch_sizes"] = draw(st.booleans())
    if draw(st.booleans()):
        data["algorithm"]["local_iterations"] = draw(st.integers(1, 3))
    data["conditions"] = stragglers_or_none(draw)
    return data


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=merged_fleets())
def test_merged_rounds_booked_as_chains_give_the_simpy_events(data, monkeypatch):
    """Each cut's clients wait for each other at every merge; the last to arrive runs the
    merged step on the one top model: booked as chains, event by event as the processes."""
    chains, merged = _run(data, True, monkeypatch)
    loop, none = _run(data, False, monkeypatch)
    assert (merged, none) == (2, 0)  # every round was booked as chains, and none here
    _assert_same(chains, loop)


def test_identical_clients_merge_in_the_order_simpy_wakes_them(monkeypatch):
    """Six identical clients at each of two cuts on a slow server: the events of a cut's
    clients fall together, and one cut's merged steps wait while the other's hold the
    one top model."""
    data = _scenario({"a": {"profile": "rpi4", "count": 6, "end_layer": 1, "link": "wifi"},
                      "b": {"profile": "jetson_orin_nano", "count": 6, "end_layer": 2,
                            "link": "wifi"}},
                     "mergesfl", train_samples=12 * 24, rounds=2)
    data["server"] = {"profile": "cpu_server", "slots": 1}
    chains, merged = _run(data, True, monkeypatch)
    loop, _ = _run(data, False, monkeypatch)
    _assert_same(chains, loop)
    served = chains.events.query("activity == 'server_train'")
    iterations = len(served) // (2 * 2)  # per round, one merged step per cut and iteration
    assert merged == 2 and iterations >= 2 and len(served) == 2 * 2 * iterations
    assert (served.queue_s > 0).sum() >= 2  # the other cut's step held the model
    assert (chains.events.activity == "send_gradients").sum() == 12 * 2 * iterations


def test_a_round_deadline_leaves_mergesfl_to_the_processes(monkeypatch):
    """A client that can be cut off mid-round leaves its merges (MergeSFL.leave): such
    rounds are not booked as chains."""
    data = _scenario({"a": {"profile": "rpi4", "count": 3, "end_layer": 2, "link": "wifi"}},
                     "mergesfl", train_samples=3 * 16, rounds=2)
    data["conditions"] = {"round_deadline_s": 0.02}
    result, merged = _run(data, True, monkeypatch)
    assert merged == 0 and result.events.cut_off.any()
