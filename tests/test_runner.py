"""End to end: shipped scenarios, result files, determinism, interruption."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.config import load_scenario, validate_scenario
from sflsim.config.resolve import resolve_scenario
from sflsim.errors import ConfigError
from sflsim.metrics.results import read_result, read_run_table
from sflsim.runner import build, run_scenario

SCENARIOS = sorted((Path(__file__).parents[1] / "scenarios").glob("*.yaml"))
SMALL = ["training.rounds=1", "dataset.fraction=0.025", "model.width=0.0625",
         "evaluation.max_test_samples=100"]
REQUIRED = ["round", "sim_time_s", "wall_time_s", "server_accuracy", "client_accuracy",
            "bytes_up", "bytes_down", "client_flops", "server_flops"]


@pytest.mark.parametrize("cost_model", ["flops", "operators"])
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenario_runs_one_round(path, cost_model, tmp_path):
    scenario = load_scenario(path, [*SMALL, f"hardware.cost_model={cost_model}"])
    result = run_scenario(scenario, tmp_path)
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    assert list(rounds["round"]) == [0, 1]  # round 0: the untrained model at time 0
    assert set(REQUIRED) <= set(rounds.columns)
    layers = {g.end_layer for g in scenario.devices.values()}
    for layer in layers:
        assert rounds[f"server_accuracy_l{layer}"].between(0.0, 1.0).all()
    assert rounds.sim_time_s.tolist()[0] == 0 and rounds.bytes_up.tolist()[0] == 0
    assert rounds.sim_time_s.iloc[1] > 0 and rounds.bytes_up.iloc[1] > 0
    assert result.summary["status"] == "completed"


def test_result_directory_contents(tiny, tmp_path):
    run_scenario(validate_scenario(tiny), tmp_path)
    for name in ("scenario.yaml", "rounds.csv", "summary.json", "manifest.json"):
        assert (tmp_path / name).is_file(), name
    for name in ("clients.parquet", "events.parquet"):  # one file per round
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["round-000001.parquet"]
    # the resolved scenario is itself a valid scenario, with units in SI and the values
    # the run used where the file left them to the run
    resolved = validate_scenario(yaml.safe_load((tmp_path / "scenario.yaml").read_text()))
    assert resolved == resolve_scenario(validate_scenario(tiny)) != validate_scenario(tiny)
    assert resolved.algorithm.server_lr_divisor == 3.0 and resolved.server.slots == 4
    clients = read_run_table(tmp_path, "clients")
    assert len(clients) == 3 and clients.samples.sum() == 240
    assert (clients.energy_j > 0).all()
    events = read_run_table(tmp_path, "events")
    assert {"actor", "activity", "start_s", "end_s", "payload_bytes", "flops"} <= set(events)
    assert (events.end_s >= events.start_s).all()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 1


@pytest.mark.parametrize("algorithm", ["hetero_splitee_sequential", "fedsga"])
def test_round_zero_is_the_untrained_model_at_time_zero(tiny, tmp_path, algorithm):
    tiny["algorithm"] = {"name": algorithm}
    tiny["training"]["rounds"] = 2
    tiny["evaluation"] = {"max_test_samples": None, "every_rounds": 2}  # the whole test split
    scenario = validate_scenario(tiny)
    result = run_scenario(scenario, tmp_path)
    summary, rounds = read_result(tmp_path)
    assert rounds["round"].tolist() == [0, 1, 2]
    zero = rounds.iloc[0]
    assert zero.sim_time_s == 0 and zero.round_time_s == 0 and zero.note == "untrained model"
    nothing = ["bytes_up", "bytes_down", "client_flops", "server_flops", "server_jobs",
               "server_busy_s", "client_energy_j", "clients_trained", "clients_dropped"]
    assert (zero[nothing] == 0).all()
    # the accuracy of the models as built, before any training
    ctx, algorithm_ = build(scenario)
    built = algorithm_.evaluate(ctx.data.x_test, ctx.data.y_test, 500)
    assert zero.server_accuracy == pytest.approx(sum(a for a, _ in built.values()) / len(built))
    assert pd.isna(rounds.server_accuracy.iloc[1])  # evaluated every 2 rounds: round 0 is extra
    # round 0 is not a completed round, and gives no final accuracy
    assert summary["rounds_completed"] == 2 == result.summary["rounds_completed"]
    assert summary["final_server_accuracy"] == pytest.approx(rounds.server_accuracy.iloc[2])
    assert summary["bytes_up"] == rounds.bytes_up.sum() > 0
    assert read_run_table(tmp_path, "clients", ["round"])["round"].unique().tolist() == [1, 2]


def _without_wall_clock(path: Path) -> pd.DataFrame:
    return pd.read_csv(path).drop(columns=["wall_time_s"])


def test_same_seed_identical_rounds_different_seed_differs(tiny, tmp_path):
    tiny["training"]["rounds"] = 2
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        tiny["seed"] = seed
        run_scenario(validate_scenario(tiny), tmp_path / name)
    a, b, c = (_without_wall_clock(tmp_path / n / "rounds.csv") for n in "abc")
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_interrupted_run_keeps_completed_rounds(tiny, tmp_path):
    tiny["training"]["rounds"] = 3

    class StopInRoundTwo:
        def start(self, total_batches, rounds):
            self.per_round, self.done = total_batches // rounds, 0

        def advance(self):
            self.done += 1
            if self.done > self.per_round:
                raise KeyboardInterrupt

        def round_done(self, row):
            pass

    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(tiny), tmp_path, progress=StopInRoundTwo())
    assert list(pd.read_csv(tmp_path / "rounds.csv")["round"]) == [0, 1]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] == 1


def test_cli_run_with_overrides(tmp_path):
    args = ["run", "scenarios/quickstart.yaml", "-o", str(tmp_path / "out")]
    for assignment in SMALL:
        args += ["--set", assignment]
    result = CliRunner().invoke(app, [*args, "--set", "seed=3"])
    assert result.exit_code == 0, result.output
    assert "final accuracy" in result.output
    assert yaml.safe_load((tmp_path / "out" / "scenario.yaml").read_text())["seed"] == 3


def test_cli_validate_ok():
    result = CliRunner().invoke(app, ["validate", "scenarios/quickstart.yaml"])
    assert result.exit_code == 0 and "ok" in result.output


def test_table_iv_analysis(tiny, tmp_path):
    import runpy

    for name in ("hetero_splitee_sequential", "hetero_splitee_averaging", "distributed"):
        tiny["algorithm"] = {"name": name}
        run_scenario(validate_scenario(tiny), tmp_path / name)
    module = runpy.run_path(str(Path(__file__).parents[1] / "analysis" / "table_iv.py"))
    table = module["table_iv"]([tmp_path / n for n in ("hetero_splitee_sequential",
                                                       "hetero_splitee_averaging", "distributed")])
    assert table.shape == (6, 3)
    assert list(table.columns) == ["Layer-3", "Layer-4", "Layer-5"]
    rounds = pd.read_csv(tmp_path / "distributed" / "rounds.csv")
    assert table.loc[("Distributed (baseline)", "Server"), "Layer-4"] == pytest.approx(
        100 * rounds.server_accuracy_l4.iloc[-1])
    with pytest.raises(SystemExit, match="not an sflsim results directory"):
        module["read_run"](tmp_path)


def test_clients_smaller_than_batch_train_without_nan(tiny):
    """Dirichlet(0.05) over 12 clients leaves some with fewer samples than the batch."""
    tiny["dataset"]["partition"] = {"scheme": "dirichlet", "alpha": 0.05}
    tiny["devices"]["weak"]["count"] = 10
    tiny["training"]["batch_size"] = 64
    result = run_scenario(validate_scenario(tiny))
    clients = result.clients
    assert clients.samples.min() < 64 and clients.samples.min() >= 1
    assert clients.samples.sum() == 240
    assert clients.client_loss.notna().all() and clients.server_loss.notna().all()
    assert result.rounds.server_accuracy.notna().all()


def test_table5_analysis(tiny, tmp_path):
    import runpy

    runs = {"fedsga": {"name": "fedsga"}, "fedavg": {"name": "fedavg"},
            "splitfed": {"name": "splitfed_v1"}}
    for name, algorithm in runs.items():
        tiny["algorithm"] = algorithm
        run_scenario(validate_scenario(tiny), tmp_path / name)
    module = runpy.run_path(str(Path(__file__).parents[1] / "analysis" / "table5.py"))
    table = module["table5"]([tmp_path / n for n in runs])
    assert list(table.index) == list(runs)
    # FedAvg trains the whole model on the device: the most client parameters and FLOPs
    assert table.activated_client_params_m.idxmax() == "fedavg"
    assert table.client_gflops_per_round.idxmax() == "fedavg"
    summary = json.loads((tmp_path / "fedsga" / "summary.json").read_text())
    assert table.loc["fedsga", "sim_time_s"] == pytest.approx(summary["sim_time_s"])


def test_device_that_cannot_hold_its_model_is_refused(tiny, profile_dir):
    from tests.conftest import sourced

    fields = {"description": "tiny-memory device", "sustained_flops": sourced("1 GFLOPS"),
              "memory_bytes": sourced("64 KiB"), "active_power_w": sourced("1 W"),
              "idle_power_w": sourced("0.5 W"), "radio_tx_power_w": sourced("1 W"),
              "radio_rx_power_w": sourced("1 W")}
    profile_dir("devices", "tiny_memory", yaml.safe_dump(fields))
    tiny["devices"]["weak"]["profile"] = "tiny_memory"
    with pytest.raises(ConfigError) as err:
        run_scenario(validate_scenario(tiny))
    message = str(err.value)
    assert "devices.weak" in message and "tiny_memory" in message
    assert "MiB" in message and "end layer 3" in message


def test_fedavg_accepts_an_end_layer_at_the_models_end(tiny):
    """FedAvg ignores the cut, so validation lets end_layer reach the last stage; the
    build must not try to split there."""
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["devices"]["strong"]["end_layer"] = 6
    result = run_scenario(validate_scenario(tiny))
    assert result.summary["status"] == "completed"


def test_tables_stream_a_round_at_a_time_and_read_back_exactly(tmp_path):
    """clients.parquet and events.parquet get one file per round, written as the round
    ends; read back (and exported as CSV) they hold exactly what was recorded: NaN,
    extreme floats and text with commas and quotes, and the CSV copy is the text
    DataFrame.to_csv writes."""
    from sflsim.engine import TraceEvent
    from sflsim.metrics.export import export_csv
    from sflsim.metrics.results import RunTables

    clients = [{"round": 1, "client_id": 0, "group": 'weak, "old"', "loss": float("nan"),
                "acc": 0.1 + 0.2, "status": "trained", "flops": 1e300, "tiny": 5e-324},
               {"round": 2, "client_id": 0, "group": "strong", "loss": 2.5, "acc": 1.0,
                "status": "late", "flops": 0.0, "tiny": -0.0}]
    trace = [TraceEvent(1, "client0", "client_train", 0, 0.0, 1 / 3, flops=12.0, seq=0),
             TraceEvent(2, "client0:uplink", "send", 0, 1.5, 2.25, 0.125, 4096, seq=1)]
    tables = RunTables(tmp_path)
    for r in (1, 2):
        events = {f: [getattr(e, f) for e in trace if e.round == r] for f in TraceEvent._fields}
        client_cols = {k: [row[k] for row in clients if row["round"] == r] for k in clients[0]}
        tables.write_round(r, client_cols, events, [{"round": i} for i in range(r + 1)])
        assert sorted(p.name for p in (tmp_path / "events.parquet").iterdir()) == [
            f"round-{i:06d}.parquet" for i in range(1, r + 1)]
    expected = pd.DataFrame(clients)
    got = read_run_table(tmp_path, "clients")
    pd.testing.assert_frame_equal(got.drop(columns=["group", "status"]),
                                  expected.drop(columns=["group", "status"]), check_exact=True)
    assert got["group"].tolist() == ['weak, "old"', "strong"]
    events = read_run_table(tmp_path, "events")
    assert [tuple(r) for r in events.itertuples(index=False)] == [tuple(e) for e in trace]
    assert len(pd.read_csv(tmp_path / "rounds.csv")) == 3
    list(export_csv(tmp_path))
    assert (tmp_path / "clients.csv").read_text() == expected.to_csv(index=False)
    assert (tmp_path / "events.csv").read_text() == pd.DataFrame(
        trace, columns=TraceEvent._fields).to_csv(index=False)


def test_timing_only_rounds_share_part_files_and_read_back_as_one_per_round(tiny, tmp_path,
                                                                           monkeypatch):
    """A timing-only run holds its rounds' rows until PART_ROWS rows are held (or the run
    ends) and writes them as one file per table; the tables read back are the ones a
    file per round gives, and a part that spans a resumed run's checkpoint is cut there."""
    from sflsim.metrics import results, streamed

    tiny["training"].update(rounds=5, timing_only=True)
    scenario = validate_scenario(tiny)
    one_each = run_scenario(scenario, tmp_path / "each")
    events_per_round = len(read_run_table(tmp_path / "each", "events")) // 5
    monkeypatch.setattr(streamed, "PART_ROWS", 2 * events_per_round)  # two rounds a file
    shared = run_scenario(scenario, tmp_path / "shared")
    assert sorted(p.name for p in (tmp_path / "shared" / "events.parquet").iterdir()) == [
        "round-000001.parquet", "round-000003.parquet", "round-000005.parquet"]
    for name in ("events", "clients"):
        pd.testing.assert_frame_equal(read_run_table(tmp_path / "shared", name),
                                      read_run_table(tmp_path / "each", name), check_exact=True)
    assert one_each.summary["events"] == shared.summary["events"]
    results.RunTables(tmp_path / "shared").keep_rounds(3)
    events = read_run_table(tmp_path / "shared", "events")
    assert sorted(set(events["round"])) == [1, 2, 3]
    assert sorted(p.name for p in (tmp_path / "shared" / "events.parquet").iterdir()) == [
        "round-000001.parquet", "round-000003.parquet"]


def test_loss_growing_by_orders_of_magnitude_is_noted():
    from sflsim.metrics.records import loss_growth_note

    rows = [{"round": 1, "client_loss": 2.0, "server_loss": 2.3},
            {"round": 2, "client_loss": 0.5, "server_loss": float("nan")}]
    assert loss_growth_note(rows, {"round": 3, "client_loss": 49.0, "server_loss": 2.0}) == ""
    note = loss_growth_note(rows, {"round": 3, "client_loss": 50.0, "server_loss": 230.0})
    assert note.startswith("client loss 50 is 100x its round-2 low (0.5): diverging?")
    assert "server loss 230 is 100x its round-1 low (2.3)" in note
    assert loss_growth_note([], {"round": 1, "client_loss": 1e9, "server_loss": 1e9}) == ""


# ------------------------------------------------------------------- seed streams


def _drawn_by_stream(data: dict) -> dict[str, list]:
    """What each seed stream decides in a built run, by stream (see SeedsConfig)."""
    import torch

    from sflsim.runner import build, child_seeds

    ctx, algorithm = build(validate_scenario(data))
    seeds = child_seeds(ctx.scenario)
    return {
        "partition": [ctx.data.y_train, ctx.data.y_test, *(c.indices for c in ctx.clients),
                      seeds["test_subset"]],
        "model": [p.detach() for c in ctx.clients
                  for m in (c.model, c.exit_head) for p in m.parameters()]
                 + [p.detach() for p in algorithm.stages.parameters()],
        "training": [torch.tensor([c.generator.initial_seed() for c in ctx.clients]),
                     seeds["split"], seeds["conditions"]],
    }


def _same(a: list, b: list) -> bool:
    import torch

    return len(a) == len(b) and all(
        torch.equal(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(a, b))


def test_no_seeds_is_every_stream_at_seed_and_the_children_of_one_seed_sequence(tiny):
    import numpy as np

    from sflsim.runner import SEED_USES, child_seeds

    tiny["seed"] = 5
    default = validate_scenario(tiny)
    explicit = validate_scenario({**tiny, "seeds": {"partition": 5, "model": 5, "training": 5}})
    assert tuple(default.stream_seeds) == (5, 5, 5)
    # the derivation of runs made before seeds existed: children of SeedSequence(seed)
    before = {use: int(child.generate_state(1)[0]) for use, child
              in zip(SEED_USES, np.random.SeedSequence(5).spawn(len(SEED_USES)))}
    assert child_seeds(default) == child_seeds(explicit) == before


@pytest.mark.parametrize("stream", ["partition", "model", "training"])
def test_one_stream_seed_moves_only_what_that_stream_draws(tiny, stream):
    base = _drawn_by_stream(tiny)
    moved = _drawn_by_stream({**tiny, "seeds": {stream: 7}})
    for name in ("partition", "model", "training"):
        assert _same(base[name], moved[name]) == (name != stream), name


def test_changing_only_the_model_seed_keeps_partition_and_batches_and_trains_otherwise(
        tiny, tmp_path):
    tiny["training"]["rounds"] = 1
    a = run_scenario(validate_scenario(tiny), tmp_path / "a")
    b = run_scenario(validate_scenario({**tiny, "seeds": {"model": 1}}), tmp_path / "b")
    same_data = ["client_id", "group", "samples"]
    pd.testing.assert_frame_equal(a.clients[same_data], b.clients[same_data])
    assert [c.indices.tolist() for c in a.algorithm.ctx.clients] == \
        [c.indices.tolist() for c in b.algorithm.ctx.clients]
    assert not a.rounds["client_loss"].equals(b.rounds["client_loss"])
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["seeds"] == {
        "partition": 0, "model": 1, "training": 0}


def test_centralized_batch_order_follows_the_training_stream(tiny):
    from sflsim.runner import build

    tiny["algorithm"] = {"name": "centralized"}
    tiny["seeds"] = {"training": 11}
    _, algorithm = build(validate_scenario(tiny))
    assert algorithm.generator.initial_seed() == 11


def test_seeds_are_validated(tiny):
    with pytest.raises(ConfigError, match=r"seeds\.modle: unknown field; did you mean 'model'"):
        validate_scenario({**tiny, "seeds": {"modle": 1}})
    with pytest.raises(ConfigError, match=r"seeds\.training: -1 is out of range"):
        validate_scenario({**tiny, "seeds": {"training": -1}})


# --------------------------------------- errors found when building name the file


@pytest.mark.parametrize(("extra", "env", "expected"), [
    (["--device", "cuda"], {}, "--set training.device=cuda: training.device: 'cuda' but torch "
                                "finds no CUDA GPU"),
    (["--set", "devices.weak.count=500", "--set", "seed=2"], {},
     "{path} (--set devices.weak.count=500): devices: 502 clients in total"),
    (["--set", "training.batch_size=512"], {"SFLSIM_MEMORY_LIMIT_BYTES": "1000"},
     "{path} (--set training.batch_size=512): memory: this run needs about"),
    (["--set", "seed=1"], {"SFLSIM_MEMORY_LIMIT_BYTES": "1000"}, "{path}: memory: this run needs"),
], ids=["cuda missing", "too many clients", "memory", "memory, override not the source"])
@pytest.mark.parametrize("command", ["run", "validate"])
def test_build_errors_name_the_file_and_the_overrides_behind_them(
        tiny, tmp_path, monkeypatch, command, extra, env, expected):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny))
    args = ["-o", str(tmp_path / "out")] if command == "run" else []
    if command == "validate" and extra[0] == "--device":
        extra = ["--set", "training.device=cuda"]
    elif extra[0] == "--device":  # an option is named as typed, not as a --set
        expected = expected.replace("--set training.device=cuda", "--device cuda")
    result = CliRunner().invoke(app, [command, str(path), *args, *extra])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    expected = expected.format(path=path)  # a field set by --set: the --set leads, no file
    assert f"error: {expected}" in out, out
    assert out.count(str(path)) == expected.startswith(str(path)) and "Traceback" not in out
    if "seed=1" in extra:
        assert "--set" not in out  # seed has nothing to do with memory
    assert not (tmp_path / "out").exists()


def test_the_manifest_names_the_cpu_and_the_commit_the_run_was_made_at(tiny_run):
    """Results depend on the CPU family and the code: the manifest says both, the commit
    with whether sflsim's source had uncommitted changes (null outside a checkout)."""
    import subprocess

    import torch

    from sflsim.provenance import SOURCE

    made = json.loads((tiny_run / "manifest.json").read_text())
    assert made["cpu"] and isinstance(made["cpu"], str)
    assert made["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    try:
        head = subprocess.run(["git", "-C", str(SOURCE), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = None
    assert made["git_commit"] == head
    if head is None:  # an installed wheel, a copy without .git
        assert made["git_dirty"] is None
    else:
        assert isinstance(made["git_dirty"], bool)
