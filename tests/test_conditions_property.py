"""Every algorithm under every condition of a round: a property test over small random
fleets, timing-only.

For every registered algorithm and each of: an availability trace that takes clients
offline mid-round, a shared access network, stragglers and drop-outs, over-commitment,
a round deadline, and all of them at once, Hypothesis draws a fleet of 2-5 shipped
devices (Raspberry Pi 4, Jetson Nano, Jetson Orin Nano; identical ones often, so that
clients tie) and checks that every round ends (the run completes: no round waits for a
client that is gone), that ``sflsim check`` (:func:`sflsim.checks.check_run`) finds no
violation in its results, and what each condition promises (statuses, the deadline,
over-commitment's count). An algorithm that cannot take a condition must be refused
by the scenario validator, naming it (:data:`REFUSED`).
"""

from __future__ import annotations

import math
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sflsim.algorithms.base import ALGORITHMS
from sflsim.checks import check_run
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.runner import run_scenario

#: every registered algorithm as a timing-only scenario's ``algorithm`` (MultiSFL's
#: adaptive replay and FedSGA's sufficiency-guided split need trained values)
ALGORITHM_CONFIGS = {
    "centralized": {"name": "centralized"},
    "distributed": {"name": "distributed"},
    "fedas": {"name": "fedas"},
    "fedavg": {"name": "fedavg"},
    "fedbabu": {"name": "fedbabu", "finetune_epochs": 1},
    "fedgh": {"name": "fedgh"},
    "fedmut": {"name": "fedmut"},
    "fedprox": {"name": "fedprox"},
    "fedsga": {"name": "fedsga", "split": "random"},
    "hetero_splitee_averaging": {"name": "hetero_splitee_averaging"},
    "hetero_splitee_sequential": {"name": "hetero_splitee_sequential"},
    "mergesfl": {"name": "mergesfl"},
    "mu_splitfed": {"name": "mu_splitfed"},
    "multisfl": {"name": "multisfl", "adaptive_replay": False},
    "splitfed_v1": {"name": "splitfed_v1"},
    "splitfed_v2": {"name": "splitfed_v2"},
}
CONDITIONS = ["availability", "shared_access", "stragglers", "over_commit", "deadline"]
#: (algorithm, condition) -> what the validator's refusal says; none refuses today
REFUSED: dict[tuple[str, str], str] = {}
PROFILES = ["rpi4", "jetson_nano", "jetson_orin_nano"]
ROUNDS = 2

_TRACES = Path(tempfile.mkdtemp(prefix="sflsim-conditions-traces-"))


def _availability(rows: list[tuple[int, float, float]]) -> str:
    """An availability trace file of ``rows`` (client id, online from, online until)."""
    text = "device,online_from_s,online_until_s\n" + "".join(
        f"{d},{a!r},{'inf' if math.isinf(b) else repr(b)}\n" for d, a, b in rows)
    path = _TRACES / f"availability-{zlib.crc32(text.encode()):08x}.csv"
    if not path.exists():
        path.write_text(text)
    return str(path)


@st.composite
def fleets(draw) -> tuple[dict, int]:
    """1-3 device groups of shipped profiles, 2-5 clients in all; ``(devices, n)``."""
    n = draw(st.integers(2, 5))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    counts: list[int] = []
    for size in sizes:
        if sum(counts) < n:
            counts.append(min(size, n - sum(counts)))
    if sum(counts) < n:
        counts[-1] += n - sum(counts)
    devices = {f"g{i}": {"profile": draw(st.sampled_from(PROFILES)), "count": count,
                         "end_layer": draw(st.integers(1, 3)),
                         "link": draw(st.sampled_from(["wifi", "lte"]))}
               for i, count in enumerate(counts)}
    return devices, n


def _scenario(algorithm: dict, devices: dict, n: int, seed: int) -> dict:
    return {
        "name": "conditions", "seed": seed,
        "dataset": {"name": "synthetic", "partition": {"scheme": "iid"},
                    "synthetic": {"train_samples": 16 * n, "test_samples": 8,
                                  "image_shape": [1, 16, 16]}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
        "devices": devices, "server": {"profile": "a100"}, "algorithm": dict(algorithm),
        "training": {"rounds": ROUNDS, "batch_size": 8, "timing_only": True},
        "evaluation": {"max_test_samples": 8},
    }


def _round_one_s(data: dict) -> float:
    """Round 1's simulated time (s) of ``data`` as it is."""
    return float(run_scenario(validate_scenario(data)).rounds.round_time_s.iloc[1])


@st.composite
def conditioned(draw, algorithm: dict, condition: str) -> tuple[dict, dict]:
    """A scenario of ``algorithm`` under ``condition`` (or all of them); ``(scenario,
    what was set)``."""
    devices, n = draw(fleets())
    data = _scenario(algorithm, devices, n, draw(st.integers(0, 3)))
    chosen = CONDITIONS if condition == "all" else [condition]
    setting: dict = {}
    if "shared_access" in chosen:
        behind = draw(st.lists(st.sampled_from(sorted(devices)), min_size=1, unique=True))
        data["network"] = {"topology": "shared_access", "access_points": {"ap1": {
            "link": "wifi", "groups": behind,
            "link_override": {"uplink_bps": draw(st.sampled_from([2e6, 20e6]))}}}}
    if "stragglers" in chosen:
        data["conditions"] = {"straggler_sigma": draw(st.sampled_from([0.3, 1.0])),
                              "client_drop_prob": draw(st.sampled_from([0.0, 0.3]))}
    if "over_commit" in chosen:
        k = draw(st.integers(1, n - 1))
        data["training"].update(clients_per_round=k,
                                over_commit=draw(st.sampled_from([1.5, 2.0, 3.0])))
        setting["keep"] = k
    if "availability" in chosen or "deadline" in chosen:
        round_s = _round_one_s(data)  # the instants below fall inside round 1
        conditions = data.setdefault("conditions", {})
        if "availability" in chosen:
            leaving = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n - 1,
                                    unique=True))
            rows, gone = [], {}
            for cid in leaving:
                gone[cid] = round_s * draw(st.sampled_from([0.1, 0.4, 0.7, 0.95]))
                rows.append((cid, 0.0, gone[cid]))
                back = draw(st.sampled_from([1.5, 3.0, None]))
                if back is not None:
                    rows.append((cid, round_s * back, math.inf))
            conditions["availability"] = _availability(rows)
            setting["gone_s"] = dict(sorted(gone.items()))
        if "deadline" in chosen:
            conditions["round_deadline_s"] = round_s * draw(st.sampled_from([0.3, 0.6, 0.9]))
            setting["deadline_s"] = conditions["round_deadline_s"]
    return data, setting


def test_every_registered_algorithm_is_drawn():
    assert sorted(ALGORITHM_CONFIGS) == sorted(ALGORITHMS)


@pytest.mark.parametrize("condition", [*CONDITIONS, "all"])
@pytest.mark.parametrize("name", sorted(ALGORITHM_CONFIGS))
@settings(max_examples=2, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_round_ends_and_keeps_the_books_under_every_condition(name, condition, data):
    """The run completes all its rounds, ``sflsim check`` finds nothing, and each
    condition does what it says: clients going offline mid-round are "offline" (the
    round goes on without them), a round deadline bounds every round and leaves
    clients "trained" or "late", over-commitment keeps exactly ``clients_per_round``
    clients when all who were drawn take part to the end."""
    scenario, setting = data.draw(conditioned(ALGORITHM_CONFIGS[name], condition))
    refusals = [REFUSED[name, c] for c in ([*CONDITIONS] if condition == "all" else [condition])
                if (name, c) in REFUSED]
    if refusals:
        with pytest.raises(ConfigError, match=refusals[0]):
            validate_scenario(scenario)
        return
    with tempfile.TemporaryDirectory(prefix="sflsim-conditions-") as out:
        result = run_scenario(validate_scenario(scenario), Path(out) / "run")
        assert result.summary["status"] == "completed"
        assert result.summary["rounds_completed"] == ROUNDS
        found = check_run(Path(out) / "run")
        assert not found, "\n".join(map(str, found))
        clients, rounds, events = result.clients, result.rounds, result.events  # read now
    assert sorted(clients["round"].unique()) == list(range(1, ROUNDS + 1))
    status = clients.pivot(index="round", columns="client_id", values="status")
    if "deadline_s" in setting:
        assert (rounds.round_time_s.iloc[1:] <= setting["deadline_s"] * (1 + 1e-9)).all()
    for cid, gone_s in setting.get("gone_s", {}).items():
        # round 1 (it starts at 0 s): a client that leaves during it is "offline", its work
        # under way cut off at the instant it leaves, nothing of it after; or its work had
        # ended by then ("trained"), or (with every condition) another cut came first
        mine = events[(events["round"] == 1) & (events.client_id == cid)]
        assert (mine.end_s <= gone_s).all(), mine
        if status.loc[1, cid] == "offline":
            assert mine.cut_off.any() and mine.end_s.max() == gone_s, mine
            event("a client went offline mid-round")
        else:
            assert status.loc[1, cid] in ({"trained"} if condition == "availability" else
                                          {"trained", "not_sampled", "dropped", "late",
                                           "over_committed"})
    if condition == "over_commit":
        for r in range(1, ROUNDS + 1):
            counts = status.loc[r].value_counts()
            assert counts.get("trained", 0) == setting["keep"], status.loc[r].to_dict()
    if condition == "stragglers":
        assert set(status.to_numpy().ravel()) <= {"trained", "dropped"}
    if condition == "shared_access":
        assert set(status.to_numpy().ravel()) == {"trained"}
    for value in sorted(set(status.to_numpy().ravel()) - {"trained"}):
        event(f"a client {value}")


@pytest.mark.parametrize("condition", ["availability", "over_commit"])
def test_a_client_cut_off_mid_round_takes_no_further_part_in_it(condition):
    """FedBABU's last round trains, then times every client's personalisation (a second
    piece of client work in the same round): a client that went offline during the
    training, or that over-commitment did not keep, does none of it."""
    devices = {"pi": {"profile": "rpi4", "count": 3, "end_layer": 2, "link": "wifi"}}
    data = _scenario({"name": "fedbabu", "finetune_epochs": 1}, devices, 3, seed=0)
    data["training"]["rounds"] = 1
    gone = 0.005  # during client 0's model download
    if condition == "availability":
        data["conditions"] = {"availability": _availability([(0, 0.0, gone)])}
    else:
        data["training"].update(clients_per_round=1, over_commit=3.0)
    result = run_scenario(validate_scenario(data))
    status = result.clients.set_index("client_id").status
    events = result.events
    out = list(status.index[status != "trained"])
    assert len(out) == (1 if condition == "availability" else 2)
    tuned = set(events.client_id[events.activity == "client_finetune"])
    assert tuned == set(status.index[status == "trained"])
    if condition == "availability":
        assert events[events.client_id == 0].end_s.max() == gone
