"""``sflsim export DIR --trace FILE``: the event trace as Chrome Trace Event JSON, checked
against the format and matched one to one with the events table."""

from __future__ import annotations

import copy
import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.errors import SflsimError
from sflsim.metrics.chrome_trace import first_free_lanes, write_chrome_trace
from sflsim.metrics.results import read_result, read_run_table
from tests.conftest import TINY
from tests.table_files import copy_run

#: Phases of the Trace Event Format (Google's "Trace Event Format" document).
TRACE_PHASES = set("BEXiICbneSTpFsftPONDMVvRcLx(),=") | {"I"}
#: Metadata event names of the format.
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name",
            "thread_sort_index"}
SLOTS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A timing-only run of the tiny scenario: 2 rounds, 3 devices, a server of 2 slots."""
    from sflsim.config import validate_scenario
    from sflsim.runner import run_scenario

    data = copy.deepcopy(TINY)
    data["training"] |= {"rounds": 2, "timing_only": True}
    data["server"] |= {"slots": SLOTS}
    out = tmp_path_factory.mktemp("trace") / "run"
    run_scenario(validate_scenario(data), out)
    return out


def _strict_json(path: Path) -> dict:
    """The file as JSON, refusing NaN and infinities (not JSON, and not read by Perfetto)."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{path} holds {name}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def validate_trace(trace: dict) -> dict[tuple[int, int], str]:
    """Assert ``trace`` is a Chrome trace in the JSON Object Format with the events the
    export writes; returns each named thread ``(pid, tid)`` -> ``process/thread`` name."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for event in trace["traceEvents"]:
        assert isinstance(event, dict), event
        assert event["ph"] in TRACE_PHASES and event["ph"] in ("M", "X", "i"), event
        assert isinstance(event["name"], str) and event["name"], event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        if event["ph"] == "M":
            assert event["name"] in METADATA, event
            value = event["args"]["name" if event["name"].endswith("_name") else "sort_index"]
            assert isinstance(value, str if event["name"].endswith("_name") else int), event
            if event["name"] == "process_name":
                processes[event["pid"]] = value
            elif event["name"] == "thread_name":
                threads[event["pid"], event["tid"]] = value
            continue
        assert isinstance(event["ts"], (int, float)) and not isinstance(event["ts"], bool)
        assert math.isfinite(event["ts"]) and event["ts"] >= 0, event
        assert isinstance(event.get("args", {}), dict), event
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0, event
        else:
            assert event["s"] in ("g", "p", "t"), event
    named = {key: f"{processes[key[0]]}/{name}" for key, name in threads.items()
             if key[0] in processes}
    for event in trace["traceEvents"]:
        if event["ph"] in ("X", "i"):  # every slice and marker on a named track
            assert (event["pid"], event["tid"]) in named, event
    return named


def test_the_trace_is_chrome_json_and_its_slices_are_the_events(run, tmp_path):
    written = write_chrome_trace(run, tmp_path / "trace.json")
    trace = _strict_json(written.path)
    tracks = validate_trace(trace)
    events = read_run_table(run, "events").sort_values("seq").reset_index(drop=True)
    slices = sorted((e for e in trace["traceEvents"] if e["ph"] == "X"),
                    key=lambda e: e["args"]["seq"])
    assert written.slices == len(slices) == len(events) > 0
    assert [s["args"]["seq"] for s in slices] == events["seq"].tolist()  # one to one
    for s, (_, row) in zip(slices, events.iterrows()):
        assert s["name"] == row["activity"]
        assert s["ts"] == pytest.approx(row["start_s"] * 1e6, abs=1e-3)  # to the nanosecond
        assert s["dur"] == pytest.approx((row["end_s"] - row["start_s"]) * 1e6, abs=2e-3)
        assert (s["args"]["start_s"], s["args"]["end_s"]) == (row["start_s"], row["end_s"])
        assert s["args"]["flop"] == row["flops"]
        assert s["args"]["payload_bytes"] == row["payload_bytes"]
        assert s["args"]["round"] == row["round"] and s["args"]["queue_s"] == row["queue_s"]
        process, thread = tracks[s["pid"], s["tid"]].split("/")
        actor = row["actor"]
        if actor == "server":
            assert process == "server" and thread.startswith("slot ")
        else:  # client3 -> compute, client3:uplink -> uplink, on client3's own track
            device, _, direction = actor.partition(":")
            assert process.split(" ")[0] == device
            assert thread.split(" ")[0] == (direction or "compute")
    # the device groups name the devices' tracks; the server has at most its slots
    assert {n.split("/")[0] for n in tracks.values()} >= {"client0 (weak)", "client1 (mid)",
                                                          "client2 (strong)", "server"}
    slots = [n for n in tracks.values() if n.startswith("server/")]
    assert 1 <= len(slots) <= SLOTS and written.tracks == len(tracks) - 1  # - the rounds'
    # slices on one track never overlap (Perfetto nests or drops overlapping ones)
    by_track = defaultdict(list)
    for s in slices:
        by_track[s["pid"], s["tid"]].append((s["ts"], s["ts"] + s["dur"]))
    for spans in by_track.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))


def test_each_round_has_a_marker_at_its_start_with_its_totals(run, tmp_path):
    trace = _strict_json(write_chrome_trace(run, tmp_path / "t.json").path)
    marks = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    rounds = read_result(run)[1]
    rounds = rounds[rounds["round"] >= 1]
    assert [m["name"] for m in marks] == [f"round {r}" for r in rounds["round"]] == [
        "round 1", "round 2"]
    for mark, (_, row) in zip(marks, rounds.iterrows()):
        assert mark["s"] == "g"
        assert mark["ts"] == pytest.approx((row["sim_time_s"] - row["round_time_s"]) * 1e6,
                                           abs=1e-3)
        assert mark["args"]["client_energy_j"] == pytest.approx(row["client_energy_j"])
        assert mark["args"]["round_time_s"] == pytest.approx(row["round_time_s"])


def test_a_run_written_before_parquet_gives_the_same_trace(run, tmp_path):
    older = copy_run(run, tmp_path / "older", "csv")
    assert not (older / "events.parquet").exists()
    new = _strict_json(write_chrome_trace(run, tmp_path / "a.json").path)["traceEvents"]
    old = _strict_json(write_chrome_trace(older, tmp_path / "b.json").path)["traceEvents"]
    assert old == new


def test_overlapping_transfers_get_a_second_thread():
    # three transfers: the second starts before the first has arrived, the third after
    assert first_free_lanes([0, 5, 10], [10, 12, 20]).tolist() == [0, 1, 0]
    assert first_free_lanes([0, 0, 0], [1, 1, 1]).tolist() == [0, 1, 2]
    assert first_free_lanes([2, 0], [3, 2]).tolist() == [0, 0]  # an end frees its lane


def test_cli_writes_the_trace_and_refuses_what_it_cannot_write(run, tmp_path):
    out = tmp_path / "traces" / "run.json"
    result = CliRunner().invoke(app, ["export", str(run), "--trace", str(out)])
    assert result.exit_code == 0, result.output
    events = len(read_run_table(run, "events", ["seq"]))
    assert f"wrote {out}: {events} slices on" in " ".join(result.output.split())
    validate_trace(_strict_json(out))
    summary = (run / "summary.json").read_text()
    for args, said in (
            (["--trace", str(run / "summary.json")], "belongs to the run's results in"),
            (["--trace", str(run / "events.parquet" / "t.json")], "events table"),
            (["--trace", str(tmp_path)], "is a folder"),
            (["--trace", str(tmp_path / "x.json"), "--to", str(tmp_path)], "--csv only"),
            ([], "--csv (CSV copies of the tables) or --trace FILE")):
        result = CliRunner().invoke(app, ["export", str(run), *args])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), (args,
                                                                                  result.output)
    assert (run / "summary.json").read_text() == summary
    assert not (run / "events.parquet" / "t.json").exists() and not (tmp_path / "x.json").exists()


def test_a_sweep_or_a_folder_without_events_is_named(run, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "points").mkdir(parents=True)
    copy_run(run, sweep / "points" / "p000", "parquet")
    pd.DataFrame({"point": ["p000"], "status": ["completed"], "run_dir": ["points/p000"]}
                 ).to_csv(sweep / "sweep.csv", index=False)
    result = CliRunner().invoke(app, ["export", str(sweep), "--trace", str(tmp_path / "t.json")])
    assert result.exit_code == 2 and "is a sweep directory" in result.output
    bare = copy_run(run, tmp_path / "bare", "parquet")
    shutil.rmtree(bare / "events.parquet")
    with pytest.raises(SflsimError, match="has no events.parquet or events.csv"):
        write_chrome_trace(bare, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_a_trace_named_as_a_table_folder_is_refused_with_advice_that_works(tmp_path):
    """``--trace RUN/events.parquet``: the refusal names the table and advises a path
    outside it (not a file inside the table, which would be refused in turn)."""
    from sflsim.metrics.results import check_output_file

    run = tmp_path / "run"
    (run / "events.parquet").mkdir(parents=True)
    for path in (run / "events.parquet", run / "events.parquet" / "trace.json"):
        with pytest.raises(SflsimError, match=r"is a run's events table .* outside it \(in "):
            check_output_file(path, option="--trace")
