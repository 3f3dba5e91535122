"""``sflsim check`` catches every kind of tampering with a finished run's files.

Each case edits a copy of a sound timing-only run (made once per module) the way a bug
in the writer, or a hand edit, would, and the check must report it: a compute or server
job faster than its FLOPs allow, work that uses data before it arrives, queue columns
that do not add up, a transfer larger or faster than its hop allows, a cut-off flag
flipped, NaN or removed columns, energy from the wrong power, files of another run.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.checks import check_run
from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.errors import SflsimError
from sflsim.metrics.lock import hold_folder
from sflsim.metrics.results import read_result_csv
from sflsim.runner import run_scenario

PI = {"profile": "rpi4", "count": 2, "end_layer": 3, "link": "wifi"}
NANO = {"profile": "jetson_nano", "count": 2, "end_layer": 4, "link": "lte",
        "link_override": {"latency_s": 0.5}}
SHARED = {"topology": "shared_access", "access_points": {"ap1": {
    "link": "wifi", "groups": ["pi", "nano"], "backhaul": "lte",
    "link_override": {"uplink_bps": 2e6, "downlink_bps": 2e6}}}}


def _scenario(name: str, algorithm: str, samples: int = 64, **sections: dict) -> dict:
    return {"name": name, "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
            "dataset": {"name": "synthetic", "synthetic": {
                "train_samples": samples, "test_samples": 8, "image_shape": [1, 16, 16]}},
            "devices": {"pi": PI, "nano": NANO}, "algorithm": {"name": algorithm},
            "training": {"rounds": 2, "batch_size": 8, "timing_only": True}, **sections}


#: the sound runs the cases tamper with: activations streamed to a slow server with
#: stragglers; split learning (forward, gradients, backward, model up and down, server
#: queue); the same behind a shared access point with a backhaul; FedAvg under a round
#: deadline that cuts the two LTE devices off in the middle of a training step; split
#: learning under the cost model by operation (client steps priced stage by stage); split
#: learning that trains (accuracies and losses measured)
RUNS = {
    "stream": _scenario("stream", "hetero_splitee_sequential", 256,
                        server={"profile": "cpu_server", "slots": 1},
                        conditions={"straggler_sigma": 0.5}),
    "split": _scenario("split", "splitfed_v1", server={"profile": "cpu_server", "slots": 1}),
    "shared": _scenario("shared", "splitfed_v2", network=SHARED),
    "deadline": _scenario("deadline", "fedavg", conditions={"round_deadline_s": 0.5412}),
    "operators": _scenario("operators", "splitfed_v1", hardware={"cost_model": "operators"}),
    "trained": _scenario("trained", "splitfed_v1", 32, training={"rounds": 2, "batch_size": 8}),
}
#: the streaming run's scenario with twice the clients: its events are another run's
RUNS["stream8"] = dict(RUNS["stream"], devices={"pi": dict(PI, count=4),
                                               "nano": dict(NANO, count=4)})
#: where the fixture put each run (for tamperings that take another run's files)
RUN_DIRS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Each of :data:`RUNS` run once, unchecked (the check is what is tested here)."""
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SFLSIM_CHECK_RESULTS", raising=False)
        for name, data in RUNS.items():
            out[name] = tmp_path_factory.mktemp(name) / "run"
            run_scenario(validate_scenario(data), out[name])
    RUN_DIRS.update(out)
    return out


# ----- editing a run's files --------------------------------------------------------------
def _table(run: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run / f"{name}.parquet")


def _write_table(run: Path, name: str, frame: pd.DataFrame) -> None:
    folder = run / f"{name}.parquet"
    for part in folder.glob("*.parquet"):
        part.unlink()
    frame.to_parquet(folder / "round-000001.parquet", index=False)


def _events(change: Callable[[pd.DataFrame], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        frame = _table(run, "events")
        change(frame)
        _write_table(run, "events", frame)
    return edit


def _clients(change: Callable[[pd.DataFrame], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        frame = _table(run, "clients")
        change(frame)
        _write_table(run, "clients", frame)
    return edit


def _summary(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        summary = json.loads((run / "summary.json").read_text())
        change(summary)
        (run / "summary.json").write_text(json.dumps(summary))
    return edit


def _first(frame: pd.DataFrame, **where: object) -> int:
    mask = np.ones(len(frame), bool)
    for column, value in where.items():
        mask &= (frame[column] == value).to_numpy()
    return int(frame.index[mask][0])


def _nth(frame: pd.DataFrame, k: int, **where: object) -> int:
    mask = np.ones(len(frame), bool)
    for column, value in where.items():
        mask &= (frame[column] == value).to_numpy()
    return int(frame[mask].sort_values("start_s").index[k])


def _faster(factor: float, **where: object) -> Callable[[pd.DataFrame], None]:
    def change(ev: pd.DataFrame) -> None:
        i = _first(ev, **where)
        ev.loc[i, "end_s"] = ev.loc[i, "start_s"] + (ev.loc[i, "end_s"] - ev.loc[i, "start_s"]) / factor
    return change


def _all_compute_of_client0_100x_faster(ev: pd.DataFrame) -> None:
    mine = ev["actor"] == "client0"
    ev.loc[mine, "end_s"] = ev.loc[mine, "start_s"] + (ev.loc[mine, "end_s"]
                                                       - ev.loc[mine, "start_s"]) / 100


def _shift(i: int, ev: pd.DataFrame, delta: float) -> None:
    ev.loc[i, "start_s"] += delta
    ev.loc[i, "end_s"] += delta


def _server_before_activations(ev: pd.DataFrame) -> None:
    """The 2nd server job of client 1 moved to just after its 1st arrival, before the
    2nd activations arrive (the server is idle then in this run)."""
    ups = ev[(ev["actor"] == "client1:uplink") & (ev["round"] == 1)].sort_values("end_s")
    i = _nth(ev, 1, actor="server", client_id=1, round=1)
    _shift(i, ev, float(ups["end_s"].iloc[0]) + 1e-6 - ev.loc[i, "start_s"])
    ev.loc[i, "queue_s"] = 0.0


def _backward_before_forward(ev: pd.DataFrame) -> None:
    i = _nth(ev, 1, actor="client2", activity="client_backward", round=1)
    fwd = ev.loc[_nth(ev, 1, actor="client2", activity="client_forward", round=1)]
    _shift(i, ev, float(fwd["start_s"]) - ev.loc[i, "start_s"] - 1e-4)


def _backward_before_gradients(ev: pd.DataFrame) -> None:
    i = _nth(ev, 0, actor="client2", activity="client_backward", round=1)
    fwd = ev.loc[_nth(ev, 0, actor="client2", activity="client_forward", round=1)]
    _shift(i, ev, float(fwd["end_s"]) - ev.loc[i, "start_s"])  # right after the forward


def _download_before_aggregation(ev: pd.DataFrame) -> None:
    i = _first(ev, activity="download_model", round=2, client_id=0)
    _shift(i, ev, -0.5)


def _send_before_compute(ev: pd.DataFrame) -> None:
    i = _nth(ev, 0, actor="client0:uplink", activity="send_activations", round=1)
    fwd = ev.loc[_nth(ev, 0, actor="client0", activity="client_forward", round=1)]
    _shift(i, ev, float(fwd["start_s"]) - ev.loc[i, "start_s"])


def _queue_of(actor: str, extra: float) -> Callable[[pd.DataFrame], None]:
    def change(ev: pd.DataFrame) -> None:
        queued = ev[(ev["actor"].str.fullmatch(actor)) & (ev["queue_s"] > 0)]
        i = int(queued.index[0]) if len(queued) else _first(ev, actor=actor)
        ev.loc[i, "queue_s"] += extra
    return change


def _payload(factor: float, actor: str, k: int = 0) -> Callable[[pd.DataFrame], None]:
    def change(ev: pd.DataFrame) -> None:
        i = _nth(ev, k, actor=actor, round=1)
        ev.loc[i, "payload_bytes"] = int(ev.loc[i, "payload_bytes"] * factor)
    return change


def _flip_cut_on(ev: pd.DataFrame) -> None:
    ev.loc[_first(ev, actor="client0", round=1), "cut_off"] = True


def _flip_cut_off(ev: pd.DataFrame) -> None:
    ev.loc[_first(ev, actor="client2", round=1, cut_off=True), "cut_off"] = False


def _energy_rule_bug(run: Path) -> None:
    """compute_energy_j priced at the radio's transmit power instead of the active
    power, everywhere the writer adds it up (clients table, rounds.csv, summary)."""
    from sflsim.hardware.profiles import device_profile

    clients = _table(run, "clients")
    tx = clients["profile"].map(lambda p: device_profile(p).radio_tx_power_w.value)
    clients["compute_energy_j"] = clients["compute_s"] * tx
    clients["energy_j"] = clients[["compute_energy_j", "radio_energy_j", "idle_energy_j"]].sum(axis=1)
    _write_table(run, "clients", clients)
    rounds = read_result_csv(run / "rounds.csv")
    sums = clients.groupby("round")[["energy_j", "compute_energy_j"]].sum()
    for column, source in (("client_energy_j", "energy_j"),
                           ("client_compute_energy_j", "compute_energy_j")):
        rounds[column] = [sums[source].get(r, 0.0) for r in rounds["round"]]
    rounds.to_csv(run / "rounds.csv", index=False)
    _summary(lambda s: s.update(client_energy_j=float(rounds["client_energy_j"].sum())))(run)


def _running_with_tampered_round(run: Path) -> None:
    _events(_faster(10, actor="client0", round=1))(run)
    _summary(lambda s: s.update(status="running"))(run)


def _set(column: str, value: object, **where: object) -> Callable[[pd.DataFrame], None]:
    def change(frame: pd.DataFrame) -> None:
        frame.loc[_first(frame, **where), column] = value
    return change


def _scale(column: str, factor: float, **where: object) -> Callable[[pd.DataFrame], None]:
    def change(frame: pd.DataFrame) -> None:
        frame.loc[_first(frame, **where), column] *= factor
    return change


def _add(column: str, extra: float, **where: object) -> Callable[[pd.DataFrame], None]:
    def change(frame: pd.DataFrame) -> None:
        frame.loc[_first(frame, **where), column] += extra
    return change


def _drop_rounds_column(column: str) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        rounds = read_result_csv(run / "rounds.csv")
        rounds.drop(columns=[column]).to_csv(run / "rounds.csv", index=False)
    return edit


def _drop_events_column(column: str) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        _write_table(run, "events", _table(run, "events").drop(columns=[column]))
    return edit


def _edit_rounds(change: Callable[[pd.DataFrame], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        rounds = read_result_csv(run / "rounds.csv")
        change(rounds)
        rounds.to_csv(run / "rounds.csv", index=False)
    return edit


def _drop_round_files(table: str, round_: int) -> Callable[[Path], None]:
    """Delete one round's rows of a streamed table."""
    def edit(run: Path) -> None:
        frame = _table(run, table)
        _write_table(run, table, frame[frame["round"] != round_])
    return edit


def _drop_last_round_row(run: Path) -> None:
    rounds = read_result_csv(run / "rounds.csv")
    rounds.iloc[:-1].to_csv(run / "rounds.csv", index=False)


def _overlap(ev: pd.DataFrame) -> None:
    first = ev.index[(ev["actor"] == "client0") & (ev["round"] == 1)]
    _shift(int(first[1]), ev, ev.loc[first[0], "start_s"] - ev.loc[first[1], "start_s"])


def _two_server_jobs_at_once(ev: pd.DataFrame) -> None:
    jobs = ev[(ev["actor"] == "server") & (ev["round"] == 1)].sort_values("start_s").index
    _shift(int(jobs[1]), ev, ev.loc[jobs[0], "start_s"] - ev.loc[jobs[1], "start_s"])


def _outside_round(ev: pd.DataFrame) -> None:
    _shift(_first(ev, round=1, actor="client1"), ev, 100.0)


def _foreign_client(ev: pd.DataFrame) -> None:
    i = _nth(ev, 3, actor="client1", round=2)
    ev.loc[i, "actor"], ev.loc[i, "client_id"] = "client99", 99


def _events_of_the_8_client_run(run: Path) -> None:
    shutil.rmtree(run / "events.parquet")
    shutil.copytree(RUN_DIRS["stream8"] / "events.parquet", run / "events.parquet")


#: (case id, run, tampering, text the check's report must hold[, exit status: 1 a
#: violation, 2 a file that is not this run's, one line])
CASES = [
    ("compute-10x-faster", "stream", _events(_faster(10, actor="client0", round=1)),
     "client_train took"),
    ("compute-100x-faster-whole-device", "stream", _events(_all_compute_of_client0_100x_faster),
     "likely cause: device profile rpi4"),
    ("operator-priced-step-10x-faster", "operators",
     _events(_faster(10, activity="client_backward", client_id=2)),
     "nor is it the cost model by operation's time of any batch"),
    ("compute-flops-doubled", "split", _events(_scale("flops", 2.0, actor="client1")),
     "FLOPs, but at rpi4's"),
    ("slowdown-altered", "stream", _clients(_scale("slowdown", 3.0, client_id=2, round=1)),
     "slowdown"),
    ("server-job-10x-faster", "split", _events(_faster(10, actor="server")),
     "at the server's"),
    ("server-job-before-its-activations", "stream", _events(_server_before_activations),
     "before the data it works on arrived"),
    ("backward-before-forward", "split", _events(_backward_before_forward),
     "before its forward pass end"),
    ("backward-before-gradients", "split", _events(_backward_before_gradients),
     "before its activation gradients arrive"),
    ("download-before-aggregation", "split", _events(_download_before_aggregation),
     "before the model it downloads was aggregated"),
    ("activations-sent-before-computed", "split", _events(_send_before_compute),
     "data sent before it was computed"),
    ("queue-of-a-server-job", "split", _events(_queue_of("server", 0.05)),
     "waits of its server jobs"),
    ("queue-of-a-transfer", "stream", _events(_queue_of(r"client\d:uplink", 0.05)),
     "waited"),
    ("clients-server-queue-s", "split", _clients(_add("server_queue_s", 0.3, client_id=1)),
     "server_queue_s"),
    ("rounds-server-queue-mean-s", "split", _edit_rounds(_add("server_queue_mean_s", 0.2,
                                                               round=1)),
     "server_queue_mean_s"),
    ("rounds-server-queue-max-s", "split", _edit_rounds(_add("server_queue_max_s", 0.2,
                                                              round=2)),
     "server_queue_max_s"),
    ("own-link-transfer-enlarged", "split", _events(_payload(1.01, "client2:uplink")),
     "plus its latency"),
    ("own-link-transfer-too-fast", "stream", _events(_faster(1.5, actor="client3:uplink")),
     "plus its latency"),
    ("shared-hop-transfer-enlarged", "shared", _events(_payload(1.2, "client0:uplink")),
     "but its fair share of the access point ap1 (uplink)"),
    ("shared-hop-transfer-too-fast", "shared", _events(_faster(1.3, actor="client1:uplink",
                                                              round=1)),
     "faster than its hop allows"),
    ("backhaul-transfer-enlarged", "shared", _events(_payload(1.5, "ap:ap1:backhaul_up")),
     "backhaul of access point ap1"),
    ("bytes-up-altered", "stream", _clients(_add("bytes_up", 1000, client_id=0, round=2)),
     "bytes_up"),
    ("cut-off-flag-set-on-finished-work", "deadline", _events(_flip_cut_on),
     "marked cut_off"),
    ("cut-off-flag-cleared-on-cut-work", "deadline", _events(_flip_cut_off),
     "work cut off at the deadline"),
    ("late-client-marked-trained", "deadline", _clients(_set("status", "trained", client_id=3,
                                                             round=1)),
     "clients_trained"),
    ("rounds-column-nan", "stream", _edit_rounds(_set("client_energy_j", np.nan, round=1)),
     "NaN"),
    ("accuracy-above-one", "stream", _edit_rounds(_set("server_accuracy", 1.7, round=1)),
     "server_accuracy 1.7, not a fraction from 0 to 1"),
    ("rounds-column-removed", "stream", _drop_rounds_column("server_flops"),
     "server_flops: no such column"),
    ("round-0-bytes-altered", "stream", _edit_rounds(_set("bytes_up", 5, round=0)),
     "round 0: bytes_up: 5, but round 0 is the untrained model"),
    ("round-0-clients-trained", "split", _edit_rounds(_set("clients_trained", 2, round=0)),
     "round 0: clients_trained: 2, but round 0 is the untrained model"),
    ("round-end-moved", "split", _edit_rounds(_add("sim_time_s", 1.0, round=1)),
     "likely cause: rounds.csv's sim_time_s or round_time_s of rounds 1, 2, which disagree"),
    ("clients-column-nan", "split", _clients(_set("compute_s", np.nan, client_id=0, round=2)),
     "NaN"),
    ("events-column-removed", "split", _drop_events_column("queue_s"),
     "queue_s: no such column"),
    ("running-with-a-tampered-round", "stream", _running_with_tampered_round,
     "client_train took"),
    ("energy-altered", "split", _clients(_add("energy_j", 0.5, client_id=3, round=1)),
     "energy_j"),
    ("energy-rule-radio-power-for-compute", "stream", _energy_rule_bug,
     "compute_energy_j"),
    ("idle-energy-altered", "deadline", _clients(_scale("idle_energy_j", 1.5, client_id=0,
                                                        round=2)),
     "idle_energy_j"),
    ("time-went-backward", "split", _edit_rounds(_set("sim_time_s", 0.1, round=2)),
     "simulated time went backward"),
    ("summary-total-altered", "split", _summary(lambda s: s.update(bytes_up=1)),
     "summary.json: bytes_up: 1"),
    ("summary-final-accuracy-altered", "trained",
     _summary(lambda s: s.update(final_server_accuracy=0.99)),
     "summary.json: final_server_accuracy: 0.99, but rounds.csv: round 2, the last with a "
     "server_accuracy, gives"),
    ("last-round-accuracy-altered", "trained",
     _edit_rounds(_set("server_accuracy", 0.99, round=2)),
     ", but rounds.csv: round 2, the last with a server_accuracy, gives 0.99"),
    ("round-accuracy-not-the-clients-mean", "trained",
     _edit_rounds(_set("server_accuracy", 0.5, round=1)),
     "rounds.csv: round 1: server_accuracy: 0.5, but the mean of the clients table's "
     "server_accuracy over its clients is"),
    ("end-layer-accuracy-altered", "trained",
     _edit_rounds(_set("client_accuracy_l4", 0.25, round=1)),
     "client_accuracy_l4: 0.25, but the clients table has no client_accuracy of its clients "
     "at end layer 4 (not evaluated, or no exit heads)"),
    ("round-0-accuracy-altered", "trained", _edit_rounds(_set("server_accuracy", 0.9, round=0)),
     "round 0: server_accuracy: 0.9, but its server_accuracy_l3, server_accuracy_l4 weighted "
     "by the clients at each end layer give"),
    ("client-accuracy-altered", "trained", _clients(_set("server_accuracy", 0.0, client_id=0,
                                                         round=2)),
     "round 2: server_accuracy_l3: "),
    ("summary-seed-altered", "split", _summary(lambda s: s.update(seed=7)),
     "summary.json: seed: 7, but scenario.yaml gives 0"),
    ("summary-status-unknown", "split", _summary(lambda s: s.update(status="bogus")),
     "summary.json: status: 'bogus' is not a status a run ends with or runs under; valid: "
     "running, completed"),
    ("loss-negative", "trained", _edit_rounds(_set("server_loss", -3.0, round=1)),
     "server_loss -3, not a number from 0 up"),
    ("wall-time-negative", "stream", _edit_rounds(_set("wall_time_s", -4.0, round=1)),
     "wall_time_s -4, not a number from 0 up"),
    ("event-outside-its-round", "split", _events(_outside_round), "is not inside its round"),
    ("events-of-the-last-round-deleted", "split", _drop_round_files("events", 2),
     "likely cause: the events of round 2, missing from events.parquet"),
    ("last-row-of-rounds-deleted", "split", _drop_last_round_row,
     "likely cause: rounds.csv's row of round 2, missing"),
    ("two-computes-at-once", "stream", _events(_overlap), "capacity one"),
    ("two-server-jobs-at-once-on-one-slot", "split", _events(_two_server_jobs_at_once),
     "more than its 1 slot"),
    ("foreign-client-in-events", "stream", _events(_foreign_client),
     "events.parquet: round 2: client99: no such client", 2),
    ("events-of-a-run-with-8-clients", "stream", _events_of_the_8_client_run,
     "no such client (the run has 4 clients, 0 to 3, as its scenario.yaml says)", 2),
]


def test_the_runs_tampered_with_are_sound(runs):
    for name, run in runs.items():
        assert check_run(run) == [], name
    assert len(_table(runs["stream8"], "clients")["client_id"].unique()) == 8
    deadline = _table(runs["deadline"], "events")
    assert deadline["cut_off"].any() and (deadline[deadline["cut_off"]]["actor"]
                                          .isin(["client2", "client3"]).any())
    split = _table(runs["split"], "events")
    assert (split[split["actor"] == "server"]["queue_s"] > 0).any()
    stream = _table(runs["stream"], "events")
    assert (stream[stream["actor"].str.endswith(":uplink")]["queue_s"] > 0).any()


@pytest.mark.parametrize("run_name, tamper, expected, status",
                         [(*c[1:4], c[4] if len(c) > 4 else 1) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_tampering_is_caught(runs, tmp_path, run_name, tamper, expected, status):
    run = tmp_path / "run"
    shutil.copytree(runs[run_name], run)
    tamper(run)
    result = CliRunner().invoke(app, ["check", str(run)])
    assert result.exit_code == status, result.output
    assert expected in result.output, result.output
    lines = result.output.strip().splitlines()
    assert "Traceback" not in result.output
    assert len(lines) <= 23 if status == 1 else len(lines) == 1, result.output


def test_there_are_at_least_30_kinds_of_tampering():
    assert len({c[0] for c in CASES}) == len(CASES) >= 30


def test_a_run_in_progress_says_what_it_checked(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["stream"], run)
    _running_with_tampered_round(run)
    with hold_folder(run):  # as the run writing it does
        result = CliRunner().invoke(app, ["check", str(run)])
    last = result.output.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ violations in 2 rounds of .* \(so far: summary\.json says "
                        r"running\)", last), last


# ----- foreign files: one line, never a traceback -------------------------------------------
def test_check_run_raises_one_message_for_another_runs_events(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["stream"], run)
    _events(_foreign_client)(run)
    with pytest.raises(SflsimError, match=r"events.parquet: round 2: client99: no such client"):
        check_run(run)


# ----- output ---------------------------------------------------------------------------------
def test_the_output_is_capped_and_names_the_likely_cause(runs, tmp_path):
    """The Wi-Fi profile the run kept, its uplink made faster after the run: every
    transfer of the two Wi-Fi devices is off. The report shows 20 violations, counts the
    rest and names the link."""
    run = tmp_path / "run"
    shutil.copytree(runs["stream"], run)
    kept = run / "profiles" / "links" / "wifi.yaml"
    text = kept.read_text()
    faster = re.sub(r'(uplink_bps:\s*\n\s*value:\s*)"([^"]+)"', r'\1"1 Gbps"', text)
    assert faster != text
    kept.write_text(faster)
    result = CliRunner().invoke(app, ["check", str(run)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1
    assert len(lines) == 23, result.output  # 20, the rest counted, the cause, the verdict
    assert re.fullmatch(r"\.\.\. and \d+ more violations not shown", lines[20]), lines[20]
    assert lines[21].startswith("likely cause: link wifi of device group pi ("), lines[21]
    assert re.fullmatch(r"(\d+) violations in 2 rounds of .*", lines[22]), lines[22]
    assert int(lines[22].split()[0]) > 20
