"""Fleet files (one row per device) and FedScale's traces converted into them."""

from __future__ import annotations

import copy
import os
import pickle

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.config.load import check_names
from sflsim.errors import ConfigError
from sflsim.fedscale import convert, load_trace
from sflsim.fleet import read_fleet
from sflsim.hardware import profiles
from sflsim.runner import build, run_scenario

#: the tiny scenario's three groups as fleet rows
ROWS = [("rpi4", "wifi", "weak", 3), ("jetson_nano", "lte", "mid", 4),
        ("jetson_orin_nano", "wifi", "strong", 5)]


def timing(data: dict) -> dict:
    data = copy.deepcopy(data)
    data["training"]["timing_only"] = True
    data["training"]["rounds"] = 2
    data["evaluation"]["early_exit"] = {"enabled": False}
    return data


def as_fleet(data: dict, path) -> dict:
    data = copy.deepcopy(data)
    del data["devices"]
    data["fleet"] = str(path)
    return data


def same_run(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.clients, b.clients)
    wall = [c for c in a.rounds if "wall" in c]
    pd.testing.assert_frame_equal(a.rounds.drop(columns=wall), b.rounds.drop(columns=wall))


def test_a_fleet_of_profile_names_runs_as_the_same_groups(tiny, tmp_path):
    path = tmp_path / "fleet.csv"
    pd.DataFrame(ROWS, columns=["profile", "link", "group", "end_layer"]).to_csv(path, index=False)
    groups = run_scenario(validate_scenario(timing(tiny)))
    fleet = run_scenario(validate_scenario(as_fleet(timing(tiny), path)))
    same_run(groups, fleet)


def test_a_fleet_of_figures_runs_as_the_profiles_they_copy(tiny, tmp_path):
    rows = []
    for profile, link, group, end in ROWS:
        d, ln = profiles.device_profile(profile), profiles.link_profile(link)
        rows.append({"group": group, "end_layer": end, "flops_per_s": d.sustained_flops.value,
                     "memory_bytes": d.memory_bytes.value,
                     **{p: getattr(d, p).value for p in ("active_power_w", "idle_power_w",
                                                         "radio_tx_power_w", "radio_rx_power_w")},
                     "uplink_bps": ln.uplink_bps.value, "downlink_bps": ln.downlink_bps.value,
                     "latency_s": ln.latency_s.value})
    path = tmp_path / "fleet.parquet"
    pd.DataFrame(rows).to_parquet(path)
    groups = run_scenario(validate_scenario(timing(tiny)))
    fleet = run_scenario(validate_scenario(as_fleet(timing(tiny), path)))
    pd.testing.assert_frame_equal(groups.events, fleet.events)
    assert set(fleet.clients["profile"]) == {"custom"}  # figures alone: no profile name


def test_quantities_with_units_and_defaults(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("profile,flops_per_s,uplink_bps,downlink_bps,latency_s,link\n"
                    'rpi4,,5 Mbit/s,20e6,20 ms,\n'
                    ',25 GFLOPS,,,,lte\n')
    fleet = read_fleet(path)
    f = fleet.figures
    assert f["uplink_bps"][0] == 5e6 and f["latency_s"][0] == pytest.approx(0.02)
    assert f["flops_per_s"][0] == profiles.device_profile("rpi4").sustained_flops.value
    assert f["flops_per_s"][1] == 25e9 and f["uplink_bps"][1] == 11.22e6
    assert f["memory_bytes"][1] == np.inf and f["active_power_w"][1] == 0  # no profile
    assert fleet.group_names == ("rpi4", "fleet")
    devices = fleet.devices()
    assert devices[0] is profiles.device_profile("rpi4")  # nothing overridden: shared


@pytest.mark.parametrize(("text", "match"), [
    ("profile,link\nrpi4,wifi\nrpi4,wlan\n", r"f\.csv row 3, link: unknown link profile 'wlan'"),
    ("profile,link\nrpi44,wifi\n", r"row 2, profile: unknown device profile 'rpi44'"),
    ("profile,link,uplink_bps\nrpi4,wifi,\nrpi4,wifi,5 Mbit\n",
     r"row 3, uplink_bps: unknown bandwidth unit 'Mbit' in '5 Mbit'; did you mean 'Mbit/s'\? "
     r"\(valid units: "),
    ("profile,link,uplink_bps\nrpi4,wifi,0.5\n", r"row 2, uplink_bps: 0\.5 is out of range"),
    ("profile,link,latency_s\nrpi4,wifi,-1\nrpi4,wifi,-2\n",
     r"row 2, latency_s: -1 is out of range; valid: seconds >= 0.*\(and 1 more row\)"),
    ("profile,link,flops_per_s\nrpi4,wifi,nan\n", r"row 2, flops_per_s: nan is out of range; "
                                                    r"valid: FLOP/s above 0"),
    ("profile,link,uplink_bps\nrpi4,wifi,-Infinity\n", r"row 2, uplink_bps: -inf is out of "
                                                         r"range; valid: bit/s of at least 1"),
    ("profile,link,flops_per_s\nrpi4,wifi,abc\n", r"row 2, flops_per_s: cannot read 'abc' as a "
                                                    r"speed in FLOP/s; valid: FLOP/s above 0, "
                                                    r"e\.g\. 25e9 or \"25 GFLOPS\"$"),
    ("profile,link,memory_bytes\nrpi4,wifi,3 Gb\n", r"row 2, memory_bytes: unknown size unit "
                                                      r"'Gb' in '3 Gb'; did you mean 'GB'\? "
                                                      r"\(valid units: B, kB"),
    ("link\nwifi\n", r"row 2, profile: empty, and the row gives no flops_per_s"),
    ("profile,uplink_bps,downlink_bps\nrpi4,1e6,1e6\n", r"row 2, latency_s: empty"),
    ("profile,link,end_layer\nrpi4,wifi,2.5\n", r"row 2, end_layer: 2\.5 is not a cut layer"),
    ("profile,link,end_layer\nrpi4,wifi,true\n", r"row 2, end_layer: true is not a cut layer"),
    ("profile,link,end_layer\nrpi4,wifi,x\n", r"row 2, end_layer: 'x' is not a cut layer"),
    ("profile,link,uplink_bps\nrpi4,wifi,true\n", r"row 2, uplink_bps: true is not a quantity"),
    ("profile,link,speed\nrpi4,wifi,1\n", r"row 1, speed: unknown column \(valid: profile"),
    ("profle,link\nrpi4,wifi\n", r"row 1, profle: unknown column; did you mean 'profile'\? "
                                   r"\(valid: profile, link"),
    ("", r"f\.csv is empty; valid: a header row naming its columns \(e\.g\. profile,link; any "
         r"of profile, link, .*\), then one row per device$"),
    ("profile,link,flops_per_s,train_s_per_sample\nrpi4,wifi,1e9,0.1\n",
     r"row 2, train_s_per_sample: the row also gives flops_per_s"),
])
def test_a_bad_row_is_named_with_its_column(tmp_path, text, match):
    path = tmp_path / "f.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        read_fleet(path)


def test_devices_or_fleet_exactly_one(tiny, tmp_path):
    with pytest.raises(Exception, match="give either devices .* or fleet .* not both"):
        validate_scenario({**tiny, "fleet": "x.csv"})
    data = copy.deepcopy(tiny)
    del data["devices"]
    with pytest.raises(Exception, match="at least one device group is needed .*fleet"):
        validate_scenario(data)


def test_an_end_layer_past_the_model_names_the_row(tiny, tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("profile,link,end_layer\nrpi4,wifi,2\nrpi4,wifi,9\n")
    with pytest.raises(ConfigError, match=r"row 3, end_layer: 9 is past the last cut"):
        check_names(validate_scenario(as_fleet(tiny, path)))


def test_train_seconds_per_sample_become_flops_on_the_model(tiny, tmp_path):
    from torch import nn

    from sflsim.models.cost import count_flops

    path = tmp_path / "f.csv"
    path.write_text("train_s_per_sample,link,end_layer\n0.5,wifi,2\n20 ms,lte,3\n")
    ctx, _ = build(validate_scenario(as_fleet(timing(tiny), path)))
    bb = ctx.backbone
    per_sample = count_flops(nn.Sequential(*bb.stages, bb.head), bb.input_shape).train_flops(1)
    flops = [c.device.sustained_flops.value for c in ctx.clients]
    assert flops == pytest.approx([per_sample / 0.5, per_sample / 0.02])
    assert [c.end_layer for c in ctx.clients] == [2, 3]


# ----- FedScale ---------------------------------------------------------------------------
CAPACITY = {1: {"computation": 40.0, "communication": 5000.0},
            2: {"computation": 10.0, "communication": 20000.0},
            3: {"computation": 25.0, "communication": 800.0},
            9: {"computation": 1.0, "communication": 1.0}}  # no behaviour: left out
BEHAVIOUR = {1: {"duration": 100, "active": [0, 50], "inactive": [30, 90], "finish_time": 100,
                 "model": "Pixel 3"},
             2: {"duration": 60, "active": [10], "inactive": [40], "finish_time": 60,
                 "model": "SM-G960F"},
             3: {"duration": 200, "active": [0], "inactive": [200], "finish_time": 200,
                 "model": "Redmi 7"}}


def test_fedscale_conversion_follows_fedscale(tmp_path):
    fleet, avail = convert(CAPACITY, BEHAVIOUR)
    # 3x inference ms per sample -> training s per sample; kbit/s (1024 bits) -> bit/s
    assert fleet["train_s_per_sample"].tolist() == pytest.approx([0.12, 0.03, 0.075])
    assert fleet["uplink_bps"].tolist() == [5000 * 1024, 20000 * 1024, 800 * 1024]
    assert (fleet["uplink_bps"] == fleet["downlink_bps"]).all()
    # horizon: the longest finish_time (200 s); each trace repeats every finish_time
    got = [tuple(r) for r in avail.itertuples(index=False)]
    assert got == [(0, 0, 30), (0, 50, 90), (0, 100, 130), (0, 150, 190),
                   (1, 10, 40), (1, 70, 100), (1, 130, 160), (1, 190, 200), (2, 0, 200)]
    two, _ = convert(CAPACITY, BEHAVIOUR, clients=2, seed=1)
    assert len(two) == 2


def test_fedscale_command_writes_a_fleet_that_runs(tiny, tmp_path):
    (tmp_path / "cap.pkl").write_bytes(pickle.dumps(CAPACITY))
    (tmp_path / "beh.pkl").write_bytes(pickle.dumps(BEHAVIOUR))
    out = tmp_path / "fleet.csv"
    result = CliRunner().invoke(app, ["fleet", "from-fedscale", "--capacity",
                                      str(tmp_path / "cap.pkl"), "--behaviour",
                                      str(tmp_path / "beh.pkl"), "-o", str(out),
                                      "--profile", "phone_midrange"])
    assert result.exit_code == 0, result.output
    trace = tmp_path / "fleet_availability.csv"
    assert trace.is_file() and len(pd.read_csv(out)) == 3
    data = as_fleet(timing(tiny), out)
    data["conditions"] = {"availability": str(trace)}
    data["fleet_end_layer"] = 2
    run = run_scenario(validate_scenario(data))
    assert len(run.rounds) == 3 and set(run.clients["client_id"]) == {0, 1, 2}


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_unread(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "cap.pkl"
    path.write_bytes(pickle.dumps({1: Exploit(marker)}))
    with pytest.raises(ConfigError, match=r"--capacity: .*cap\.pkl refers to (posix|os|nt)"
                                          r"\.system, which is not a plain builtin type"):
        load_trace(path, "capacity")
    assert not marker.exists()
    result = CliRunner().invoke(app, ["fleet", "from-fedscale", "--capacity", str(path),
                                      "--behaviour", str(path), "-o", str(tmp_path / "f.csv")])
    assert result.exit_code == 2 and not marker.exists() and "refused" in result.output


def test_a_fedscale_entry_of_the_wrong_shape_is_named():
    with pytest.raises(ConfigError, match=r"--capacity: client 1, computation: -1.0; valid"):
        convert({1: {"computation": -1.0, "communication": 5.0}}, BEHAVIOUR)


# ----- scale ------------------------------------------------------------------------------
def test_a_5000_device_fleet_runs_timing_only(tmp_path):
    """(100,000 rows: benchmarks/fleet_scale.py; about 50 s on a loaded 2-core machine.)"""
    n = 5000
    rng = np.random.default_rng(0)
    pd.DataFrame({"flops_per_s": rng.uniform(5e9, 30e9, n), "uplink_bps": rng.uniform(1e6, 5e7, n),
                  "downlink_bps": rng.uniform(5e6, 1e8, n), "latency_s": rng.uniform(0, 0.05, n),
                  "availability": np.where(np.arange(n) % 2, "odd", "even")}
                 ).to_csv(tmp_path / "f.csv", index=False)
    (tmp_path / "a.csv").write_text("device,online_from_s,online_until_s\nodd,1e6,inf\n")
    data = {"name": "big", "dataset": {"name": "synthetic",
                                       "synthetic": {"train_samples": n, "test_samples": 100}},
            "model": {"name": "small_cnn"}, "fleet": str(tmp_path / "f.csv"),
            "algorithm": {"name": "fedavg"}, "conditions": {"availability": str(tmp_path / "a.csv")},
            "training": {"rounds": 1, "batch_size": 16, "timing_only": True,
                         "optimizer": {"name": "sgd", "lr": 0.05}},
            "evaluation": {"early_exit": {"enabled": False}}}
    run = run_scenario(validate_scenario(data))
    clients = run.clients
    assert len(clients) == n
    status = clients.set_index("client_id")["status"]
    assert (status.iloc[1::2] == "offline").all()  # odd: online only from 1e6 s
    assert (status.iloc[0::2] == "trained").all()


def test_validate_builds_a_trained_fleet_run(tiny, tmp_path):
    import yaml

    path = tmp_path / "fleet.csv"
    pd.DataFrame(ROWS, columns=["profile", "link", "group", "end_layer"]).to_csv(path, index=False)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(as_fleet(tiny, path)))
    result = CliRunner().invoke(app, ["validate", str(scenario)])
    assert result.exit_code == 0, result.output
    assert "3 clients (fleet " in result.output


def test_a_device_short_of_memory_names_its_row(tiny, tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("profile,link,memory_bytes\nrpi4,wifi,\nrpi4,wifi,1000\n")
    with pytest.raises(ConfigError, match=r"f\.csv row 3, memory_bytes: training the client-side "
                                          r"model at end layer 1"):
        build(validate_scenario(as_fleet(timing(tiny), path)))


def test_a_fleet_file_changed_since_the_run_started_is_no_resume(tiny, tmp_path):
    """The checkpoint keeps the fleet file's digest, as it keeps every input file's whose
    contents the scenario does not hold: a resume that would read other devices is
    refused, naming the file."""
    from sflsim.errors import SflsimError

    path = tmp_path / "fleet.csv"
    pd.DataFrame(ROWS, columns=["profile", "link", "group", "end_layer"]).to_csv(path, index=False)
    data = as_fleet(tiny, path)
    out = tmp_path / "run"
    run_scenario(validate_scenario(data), out)
    more = copy.deepcopy(data)
    more["training"]["rounds"] = 2
    slower = [("rpi4", "lte", "weak", 3), *ROWS[1:]]
    pd.DataFrame(slower, columns=["profile", "link", "group", "end_layer"]).to_csv(path, index=False)
    with pytest.raises(SflsimError, match=r"the file of fleet \(.*fleet\.csv\) changed since"):
        run_scenario(validate_scenario(more), out, resume=True)
    pd.DataFrame(ROWS, columns=["profile", "link", "group", "end_layer"]).to_csv(path, index=False)
    assert len(run_scenario(validate_scenario(more), out, resume=True).rounds) == 3  # 0, 1, 2


def test_a_trained_50_device_fleet_books_each_device_at_its_own_row(tiny, tmp_path):
    """Trained FedAvg on 50 devices of 50 different compute rates and links: every compute
    step takes its FLOPs over its row's FLOP/s, every transfer its bytes over its row's
    rate plus its row's latency, and the model trains (the loss is finite)."""
    rng = np.random.default_rng(0)
    rows = pd.DataFrame({
        "group": [f"g{k % 3}" for k in range(50)],
        "flops_per_s": rng.uniform(1e9, 1e10, 50), "uplink_bps": rng.uniform(1e6, 1e7, 50),
        "downlink_bps": rng.uniform(1e7, 1e8, 50), "latency_s": rng.uniform(1e-3, 5e-2, 50)})
    path = tmp_path / "fleet.csv"
    rows.to_csv(path, index=False)
    data = as_fleet(tiny, path)
    data["algorithm"] = {"name": "fedavg"}
    data["dataset"]["fraction"] = 0.05  # 600 training images: 12 per device
    result = run_scenario(validate_scenario(data))
    events = result.events
    assert set(events["client_id"]) == set(range(50))
    compute = events[events["activity"] == "client_train"]
    rate = rows["flops_per_s"].to_numpy()[compute["client_id"]]
    np.testing.assert_allclose(compute["end_s"] - compute["start_s"], compute["flops"] / rate,
                               rtol=1e-9)
    for activity, column in (("upload_model", "uplink_bps"), ("download_model", "downlink_bps")):
        moved = events[events["activity"] == activity]
        assert len(moved) == 50
        row = rows.iloc[moved["client_id"]]
        np.testing.assert_allclose(
            moved["end_s"] - moved["start_s"],
            8 * moved["payload_bytes"] / row[column].to_numpy() + row["latency_s"].to_numpy(),
            rtol=1e-9)
    assert np.isfinite(result.rounds["client_loss"].iloc[1:]).all()
    assert sorted(result.clients["group"].unique()) == ["g0", "g1", "g2"]


def test_a_sweep_takes_fleet_files_as_an_axis(tiny, tmp_path):
    import yaml

    from sflsim.metrics.compare import read_sweep

    paths = []
    for name, link in (("a", "wifi"), ("b", "lte")):
        path = tmp_path / f"{name}.csv"
        pd.DataFrame([("rpi4", link, "weak", 3), *ROWS[1:]],
                     columns=["profile", "link", "group", "end_layer"]).to_csv(path, index=False)
        paths.append(str(path))
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(as_fleet(timing(tiny), paths[0])))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"name": "fleets", "base": "base.yaml", "axes": {"fleet": paths}}))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "-o", str(out),
                                      "--workers", "1"])
    assert result.exit_code == 0, result.output
    table = read_sweep(out)
    assert list(table["status"]) == ["completed", "completed"]
    assert table["sim_time_s"].iloc[1] > table["sim_time_s"].iloc[0]  # LTE uplink: slower


def test_fedscale_command_never_writes_over_its_inputs_or_an_existing_file(tmp_path):
    (tmp_path / "cap.pkl").write_bytes(pickle.dumps(CAPACITY))
    (tmp_path / "beh.pkl").write_bytes(pickle.dumps(BEHAVIOUR))
    base = ["fleet", "from-fedscale", "--capacity", str(tmp_path / "cap.pkl"),
            "--behaviour", str(tmp_path / "beh.pkl")]
    before = (tmp_path / "cap.pkl").read_bytes()
    result = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "cap.pkl"), "--overwrite"])
    assert result.exit_code == 2 and "a file it reads" in result.output
    assert (tmp_path / "cap.pkl").read_bytes() == before
    kept = tmp_path / "keep.csv"
    kept.write_text("mine\n")
    result = CliRunner().invoke(app, [*base, "-o", str(kept)])
    assert result.exit_code == 2 and "exists" in result.output and "--overwrite" in result.output
    assert kept.read_text() == "mine\n"
    assert CliRunner().invoke(app, [*base, "-o", str(kept), "--overwrite"]).exit_code == 0
    assert len(pd.read_csv(kept)) == 3
    # a Parquet name gets Parquet, which the fleet reader reads
    assert CliRunner().invoke(app, [*base, "-o", str(tmp_path / "f.parquet")]).exit_code == 0
    assert len(pd.read_parquet(tmp_path / "f.parquet")) == 3


@pytest.mark.parametrize("content, match", [
    (b"client,computation\n1,20\n", "not a readable pickle"),
    (pickle.dumps(CAPACITY)[:20], "not a readable pickle"),
])
def test_a_file_that_is_no_pickle_is_named_so(tmp_path, content, match):
    from sflsim.errors import ConfigError
    from sflsim.fedscale import load_trace

    (tmp_path / "c.pkl").write_bytes(content)
    with pytest.raises(ConfigError, match=match):
        load_trace(tmp_path / "c.pkl", "capacity")
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        load_trace(tmp_path, "capacity")


def test_an_interval_that_ends_before_it_starts_is_refused():
    from sflsim.errors import ConfigError
    from sflsim.fedscale import convert

    behaviour = copy.deepcopy(BEHAVIOUR)
    first = next(iter(behaviour))
    behaviour[first] = {**behaviour[first], "active": [30.0], "inactive": [20.0]}
    with pytest.raises(ConfigError, match=r"interval 0 is active 30 s to inactive 20 s, which "
                                          r"ends before it starts"):
        convert(CAPACITY, behaviour)


@pytest.mark.parametrize("text, match", [
    ("profile,link\nx,rpi4,wifi\n", r"row 2 has 3 cells and the header 2 \(profile, link\)"),
    ("profile,link\nrpi4,wifi,extra\n", r"row 2 has 3 cells and the header 2"),
    ("profile,link\nrpi4,wifi\nrpi4\n", r"row 3 has 1 cell and the header 2"),
    ("profile,link,profile\nrpi4,wifi,rpi4\n", r"row 1: column 'profile' appears more than once"),
])
def test_a_row_of_another_width_or_a_column_twice_is_refused_not_shifted(tmp_path, text, match):
    from sflsim.errors import ConfigError
    from sflsim.fleet import read_fleet

    path = tmp_path / "fleet.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        read_fleet(path)


def test_a_row_of_figures_with_an_empty_profile_cell_runs(tiny, tmp_path):
    """An empty text cell is no profile (not NaN): the row runs as the figures it gives."""
    path = tmp_path / "fleet.csv"
    path.write_text("profile,link,flops_per_s\nrpi4,wifi,\n,wifi,1e9\n")
    fleet = read_fleet(path)
    assert fleet.profile.tolist() == ["rpi4", None]
    run = run_scenario(validate_scenario(as_fleet(timing(tiny), path)), tmp_path / "run")
    assert run.clients["profile"].unique().tolist() == ["rpi4", "custom"]
