"""The cost model by operation: pricing, fitting, the steps CSV, and a run under it."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.config import validate_scenario
from sflsim.errors import ConfigError
from sflsim.hardware import calibration
from sflsim.hardware.operator_cost import (
    OperatorParams,
    Workload,
    pass_seconds,
    pointwise_rule,
    step_seconds,
    update_seconds,
)
from sflsim.hardware.steps_csv import StepRow, check_appendable, read_steps, write_steps

PARAMS = OperatorParams(rates_flops=(4e10, 2e9, 8e10, 1e10), memory_bandwidth_bps=8e10,
                        per_operator_s=1e-5, per_batch_s=2e-3)


def ops(classes, flops, per_sample, fixed, pointwise=None):
    return SimpleNamespace(op_class=np.array(classes), flops_per_sample=np.array(flops, float),
                           bytes_per_sample=np.array(per_sample, float),
                           bytes_fixed=np.array(fixed, float),
                           pointwise=np.array(pointwise or [False] * len(classes)))


def test_below_the_kernel_rule_batch_a_pointwise_convolution_reads_its_weights_per_sample():
    """PyTorch on one CPU thread runs 1x1 convolutions sample by sample below batch 16: their
    fixed bytes (weights, weight gradients) count once per sample; other operators and
    other batch sizes are priced as before."""
    work = ops([0, 0], [1e3, 1e3], [1e3, 1e3], [4e7, 4e7], pointwise=[True, False])
    rule = OperatorParams(**{**PARAMS.__dict__, "pointwise_per_sample_below_batch": 16})
    for batch in (1, 4, 15):
        weights_per_sample = (batch * 1e3 + batch * 4e7) / 1e10
        once = (batch * 1e3 + 4e7) / 1e10
        assert pass_seconds(rule, work, batch) == pytest.approx(
            weights_per_sample + once + 2 * 1e-5, rel=1e-12)
        assert pass_seconds(PARAMS, work, batch) == pytest.approx(2 * once + 2 * 1e-5, rel=1e-12)
    for batch in (16, 32):
        assert pass_seconds(rule, work, batch) == pass_seconds(PARAMS, work, batch)
    assert pointwise_rule(1) == 16 and pointwise_rule(4) == 0 and pointwise_rule(None) == 0


def test_each_operator_takes_the_slower_of_compute_and_memory_plus_its_fixed_cost():
    # a dense conv (compute-bound), a depthwise conv at its own rate, an element-wise op
    # whose bytes dominate; 10 GB/s = 8e10 bit/s
    work = ops([0, 1, 3], [1e9, 1e7, 1e5], [1e3, 1e3, 1e7], [4e6, 0, 0])
    batch = 8
    expected = (max(8e9 / 4e10, (8e3 + 4e6) / 1e10) + max(8e7 / 2e9, 8e3 / 1e10)
                + max(8e5 / 1e10, 8e7 / 1e10) + 3 * 1e-5)
    assert pass_seconds(PARAMS, work, batch) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="batch must be at least 1"):
        pass_seconds(PARAMS, work, 0)


def test_a_training_step_adds_backward_the_update_and_the_batch_cost():
    fwd, bwd = ops([2], [1e8], [0], [0]), ops([2, 2], [1e8, 1e8], [0, 0], [0, 0])
    work = Workload(forward=fwd, backward=bwd, trained_params=1000, param_tensors=2, batch=4,
                    optimizer="adam")
    update = 1000 * 28 / 1e10 + 2 * 7 * 1e-5
    assert update_seconds(PARAMS, 1000, 2, "adam") == pytest.approx(update)
    expected = 4e8 / 8e10 + 1e-5 + 2 * (4e8 / 8e10 + 1e-5) + update + 2e-3
    assert step_seconds(PARAMS, work) == pytest.approx(expected)
    inference = Workload(forward=fwd, backward=ops([], [], [], []), trained_params=0,
                         param_tensors=0, batch=4)
    assert step_seconds(PARAMS, inference) == pytest.approx(4e8 / 8e10 + 1e-5 + 2e-3)
    with pytest.raises(ValueError, match="unknown optimizer 'lbfgs'"):
        update_seconds(PARAMS, 1, 1, "lbfgs")


def _synthetic_models(rng):
    """Op lists of different mixes: conv-heavy, depthwise-heavy, matmul-heavy, memory-bound."""
    models = {}
    for name, weights in {"convnet": (8, 0, 1, 4), "mobile": (6, 6, 1, 8),
                          "shuffle": (1, 4, 0, 6), "transformer": (0, 0, 8, 4),
                          "mlp": (0, 0, 2, 1)}.items():
        classes, flops, per_sample, fixed = [], [], [], []
        for cls, count in enumerate(weights):
            for _ in range(count * 5):
                classes.append(cls)
                flops.append(rng.uniform(1e6, 5e7) if cls < 3 else rng.uniform(1e4, 1e5))
                per_sample.append(rng.uniform(1e4, 4e5))
                fixed.append(rng.uniform(0, 2e6) if cls < 3 else 0.0)
        fwd = ops(classes, flops, per_sample, fixed)
        bwd = ops(classes * 2, flops * 2, per_sample * 2, fixed * 2)
        models[name] = (fwd, bwd, int(sum(fixed) / 4), len(classes))
    return models


def _measurements(params: OperatorParams, device: str, batches=(2, 8, 32)):
    rng = np.random.default_rng(0)
    out = []
    for name, (fwd, bwd, n_params, tensors) in _synthetic_models(rng).items():
        for b in batches:
            work = Workload(forward=fwd, backward=bwd, trained_params=n_params,
                            param_tensors=tensors, batch=b)
            out.append(calibration.Measurement(device=device, model=name,
                                               label=f"{device}/{name}/b{b}", work=work,
                                               measured_s=step_seconds(params, work)))
    return out


def test_the_fit_reproduces_steps_made_by_the_model_and_predicts_a_model_left_out():
    # every class of operator is in at least two models: none is unknown when one is held out
    ms = _measurements(PARAMS, "board")
    fit = calibration.fit(ms)
    assert max(abs(e) for e in fit.fit_error.values()) < 0.02
    held = calibration.leave_one_model_out(ms)
    assert set(held) == {m.label for m in ms}
    assert max(abs(e) for e in held.values()) < 0.25


def test_a_family_member_takes_its_shape_from_the_others():
    # a second board, 3x faster in every way, measured on one model only: its speed
    # comes from its row, the rest of its shape from the family
    fast = OperatorParams.from_log_vector(PARAMS.as_log_vector() + np.log(3) * calibration.SPEED)
    slow_rows = _measurements(PARAMS, "slow")
    fast_rows = [m for m in _measurements(fast, "fast") if m.model == "convnet"]
    fitted = calibration.fit([*slow_rows, *fast_rows]).params["fast"]
    for m in _measurements(fast, "fast"):
        if m.model == "mobile":
            assert calibration.predict(fitted, m) == pytest.approx(m.measured_s, rel=0.15)
    # a device measured on one model has nothing left when it is held out
    held = calibration.leave_one_model_out([*slow_rows, *fast_rows])
    assert not any(k.startswith("fast/") for k in held)


def test_the_fit_refuses_nothing_and_non_positive_times():
    with pytest.raises(ValueError, match="no measurements"):
        calibration.fit([])
    m = _measurements(PARAMS, "board")[0]
    bad = calibration.Measurement(m.device, m.model, m.label, m.work, 0.0)
    with pytest.raises(ValueError, match="measured seconds must be above 0"):
        calibration.fit([bad])


def test_steps_csv_round_trip_and_clear_errors(tmp_path):
    rows = [StepRow(device="pi", model="vit", input_shape=(3, 32, 32), batch=4,
                    seconds_per_batch=0.25, vit={"patch_size": 16, "depth": 2}),
            StepRow(device="pi", model="resnet18", input_shape=(3, 64, 64), batch=8,
                    seconds_per_batch=1.5, width=0.5, optimizer="adam", phase="inference",
                    threads=1)]
    path = tmp_path / "steps.csv"
    write_steps(path, rows[:1])
    write_steps(path, rows[1:], append=True)
    assert read_steps(path) == rows
    assert rows[1].label == "pi/resnet18 w0.5/3x64x64/b8/inference/adam"
    notes = tmp_path / "notes.csv"
    notes.write_text("# my notes\n\n")
    write_steps(notes, rows[:1], append=True)  # a file of comments only: the header too
    assert read_steps(notes) == rows[:1]
    old = tmp_path / "old.csv"  # an earlier sflsim's columns: no threads
    old.write_text("device,model,width,input_shape,classes,batch,phase,optimizer,patch_size,"
                   "depth,hidden_dim,heads,mlp_dim,seconds_per_batch,source\n")
    with pytest.raises(ConfigError, match="it lacks threads"):
        check_appendable(old)
    write_steps(path, rows[:1], append=True)  # measured again: its own row, told apart
    again = read_steps(path)
    assert [r.label for r in again][2] == rows[0].label + " #2"
    cases = {
        "model,input_shape,batch\nresnet18,3x8x8,2\n": "missing column seconds_per_batch",
        "model,input_shape,batch,seconds_per_batch\nresnet18,3x8,2,1\n":
            "row 2: input_shape = '3x8'; valid: CxHxW",
        "model,input_shape,batch,seconds_per_batch\nresnet18,3x8x8,0,1\n":
            "row 2: batch = '0'; valid: a whole number from 1 to 100000",
        "model,input_shape,batch,seconds_per_batch\nresnet18,3x8x8,1e20,1\n":
            "row 2: batch = '1e20'; valid: a whole number from 1 to 100000",
        "model,input_shape,batch,seconds_per_batch\nresnet18,3x99999x99999,2,1\n":
            "row 2: input_shape = '3x99999x99999'; valid: CxHxW with whole numbers from 1 to 1024",
        "model,input_shape,batch,seconds_per_batch\nresnet18,3x8x8,2,1e300\n":
            "row 2: seconds_per_batch = '1e300'; valid: a number of seconds above 0 and at most "
            "86400",
        "model,input_shape,batch,seconds_per_batch,width\nresnet18,3x8x8,2,1,1e6\n":
            "row 2: width = '1e6'; valid: a number above 0 and at most 4",
        "model,input_shape,batch,seconds_per_batch,classes\nresnet18,3x8x8,2,1,1e12\n":
            "row 2: classes = '1e12'; valid: a whole number from 1 to 100000",
        "model,input_shape,batch,seconds_per_batch,depth\nvit,3x8x8,2,1,5000\n":
            "row 2: depth = '5000'; valid: a whole number from 1 to 1000",
        "model,input_shape,batch,seconds_per_batch\nresnet18,3x8x8,2,-1\n":
            "row 2: seconds_per_batch = '-1'; valid: a number of seconds above 0",
        "model,input_shape,batch,seconds_per_batch,phase\nresnet18,3x8x8,2,1,eval\n":
            "row 2: phase = 'eval'; valid: train or inference",
        "model,input_shape,batch,seconds_per_batch\n": "no rows",
        "model,input_shape,batch,seconds_per_batch,threads\nresnet18,3x8x8,2,1,0\n":
            "row 2: threads = '0'; valid: a whole number >= 1, or empty",
        "model,input_shape,batch,seconds_per_batch,threads\nresnet18,3x8x8,2,1,inf\n":
            "row 2: threads = 'inf'; valid: a whole number >= 1, or empty",
        "model,input_shape,batch,seconds_per_batch\nresnet18,3x8x8,1e400,1\n":
            "row 2: batch = '1e400'; valid: a whole number from 1",
        "model,input_shape,batch,seconds_per_batch,patchsize\nvit,3x8x8,2,1,4\n":
            "unknown column 'patchsize'; did you mean 'patch_size'?",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            read_steps(path, device="pi")
    from sflsim.config.model import ModelConfig
    from sflsim.hardware.steps_csv import MAX_WIDTH, VIT_MAX

    def bound(field: str) -> float:
        return next(m.le for m in ModelConfig.model_fields[field].metadata if hasattr(m, "le"))

    assert MAX_WIDTH == bound("width")  # a row takes the sizes a scenario takes
    assert VIT_MAX == {f: bound(f) for f in ModelConfig.VIT_FIELDS}
    path.write_text("model,input_shape,batch,seconds_per_batch\nresnet18,3x8x8,2,1\n")
    with pytest.raises(ConfigError, match="device is empty"):
        read_steps(path)
    with pytest.raises(ConfigError, match="no such file"):
        read_steps(tmp_path / "missing.csv")
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        read_steps(tmp_path)


def test_calibrate_writes_a_profile_that_a_scenario_can_use(tmp_path, profile_dir, tiny):
    """End to end as a user would: measured steps in, a profile out, a run under it."""
    import yaml

    from sflsim.hardware import profiles
    from sflsim.models.workload import row_workload

    truth = OperatorParams(rates_flops=(2e9, 2e8, 3e9, 5e8), memory_bandwidth_bps=2e10,
                           per_operator_s=5e-5, per_batch_s=1e-3,
                           pointwise_per_sample_below_batch=16)  # measured on one thread
    rows = []
    for model, shape in (("small_cnn", (1, 28, 28)), ("vit", (3, 16, 16)),
                         ("mobilenet_v2", (3, 32, 32))):
        for batch in (2, 8):
            row = StepRow(device="board", model=model, input_shape=shape, batch=batch,
                          seconds_per_batch=1.0, width=0.25)
            t = step_seconds(truth, row_workload(row))
            rows.append(StepRow(device="board", model=model, input_shape=shape, batch=batch,
                                seconds_per_batch=t, width=0.25, threads=1))
    steps = tmp_path / "steps.csv"
    write_steps(steps, rows)
    out = tmp_path / "profiles" / "devices" / "board.yaml"
    result = CliRunner().invoke(app, ["calibrate", str(steps), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "leave-one-model-out |error|: median" in result.output
    assert f"to use it: export SFLSIM_PROFILE_PATH={out.parent.parent.resolve()}; then in a " \
        "scenario, devices.<group>.profile: board and hardware: {cost_model: operators}" \
        in " ".join(result.output.split())  # the path may be wrapped
    data = yaml.safe_load(out.read_text())
    assert data["operator_costs"]["conv_flops"]["basis"] == "fitted"
    assert data["operator_costs"]["pointwise_per_sample_below_batch"]["value"] == 16
    for name in ("board", str(out)):  # by name, or the file calibrate wrote
        shown = CliRunner().invoke(app, ["profiles", "show", name])
        assert shown.exit_code == 0, shown.output
        assert "pointwise_per_sample_below_batch" in shown.output
    shown = CliRunner().invoke(app, ["profiles", "show", str(tmp_path / "nothing.yaml")])
    assert shown.exit_code == 2 and "nothing.yaml: no such profile file" in shown.output
    assert len(data["operator_costs"]["fitted_on"]) == 6
    assert set(data["operator_costs"]["held_out_error"]) == {r.label for r in rows}
    profiles.load_profile.cache_clear()
    with pytest.raises(ConfigError, match=r"A scenario names a profile, not its file: put "
                                          r"board\.yaml in DIR/devices/, add DIR to "
                                          r"SFLSIM_PROFILE_PATH and give 'board'"):
        profiles.device_profile(str(out))
    board = profiles.device_profile("board")
    assert board.operator_costs is not None
    for r in rows:  # the fitted profile reproduces the steps it was made from
        assert step_seconds(board.operator_costs.params(), row_workload(r)) == \
            pytest.approx(r.seconds_per_batch, rel=0.05)
    # bad input: one line, no traceback
    bad = CliRunner().invoke(app, ["calibrate", str(steps), "--device", "nano"])
    assert bad.exit_code == 2 and "--device nano: no row" in bad.output
    assert "Traceback" not in bad.output
    bad = CliRunner().invoke(app, ["calibrate", str(steps), "--family", "board,nano"])
    assert bad.exit_code == 2 and "--family board,nano: no row" in bad.output
    bad = CliRunner().invoke(app, ["calibrate", str(steps), "--prior", "laptop_cpu"])
    assert bad.exit_code == 2 and "has no operator_costs" in bad.output
    before = steps.read_bytes()
    bad = CliRunner().invoke(app, ["calibrate", str(steps), "-o", str(steps)])
    assert bad.exit_code == 2 and f"-o {steps} is the steps CSV, a file this command reads" \
        in " ".join(bad.output.split()), bad.output
    assert steps.read_bytes() == before
    # a model whose steps the others do not predict (here: 5 times slower than the cost
    # model says) is named in a note
    write_steps(steps, [replace(r, seconds_per_batch=r.seconds_per_batch * 5)
                        if r.model == "vit" else r for r in rows])
    noted = CliRunner().invoke(app, ["calibrate", str(steps)])
    assert noted.exit_code == 0, noted.output
    assert re.search(r"note: [^:]*vit w0\.25[^:]*: over 50% off when left out of the fit",
                     " ".join(noted.output.split())), noted.output
    write_steps(steps, [*rows, replace(rows[0], threads=4, seconds_per_batch=0.5)])
    bad = CliRunner().invoke(app, ["calibrate", str(steps)])
    assert bad.exit_code == 2 and "device board: some rows were measured on one torch thread " \
        "(e.g. board/small_cnn w0.25/1x28x28/b2), others on several" in bad.output
    assert "Traceback" not in bad.output


def test_a_run_under_the_operator_reading_prices_client_steps_by_operator(tiny, tmp_path):
    """One client, zero latency: the client's compute time is the cost model's."""
    from sflsim.algorithms.operator_times import StageOperators
    from sflsim.hardware.profiles import device_profile
    from sflsim.runner import build, run_scenario

    tiny["devices"] = {"pi": {"profile": "rpi4", "count": 1, "end_layer": 2, "link": "wifi"}}
    tiny["training"]["timing_only"] = True
    tiny["algorithm"] = {"name": "hetero_splitee_sequential"}
    flops = run_scenario(validate_scenario(tiny), tmp_path / "flops")
    tiny["hardware"] = {"cost_model": "operators"}
    scenario = validate_scenario(tiny)
    ops = run_scenario(scenario, tmp_path / "ops")
    ev = ops.events
    train = ev[(ev.actor == "client0") & ev.activity.str.startswith("client_train")]
    assert len(train) > 0
    ctx, _ = build(scenario)
    stage_ops = StageOperators(ctx.backbone, scenario.training.optimizer.name)
    costs = device_profile("rpi4").operator_costs
    for (_, row), n in zip(train.iterrows(), _batch_sizes(ctx)):
        want = stage_ops.seconds(costs.params(), 2, n, ("forward", "backward", "update",
                                                        "exit_head"))
        assert row.end_s - row.start_s == pytest.approx(want, rel=1e-9)
    assert not math.isclose(ops.rounds.sim_time_s.iloc[-1], flops.rounds.sim_time_s.iloc[-1])
    # the early-exit sweep's inference on the device (a trained run): the same operators,
    # forward only
    import pandas as pd

    tiny["training"]["timing_only"] = False
    run_scenario(validate_scenario(tiny), tmp_path / "trained")
    exits = pd.read_csv(tmp_path / "trained" / "early_exit.csv")
    everything_on_device = exits[exits.exit_ratio == 1.0]
    assert len(everything_on_device) > 0
    one = stage_ops.device_inference_seconds(costs, 2, 1)  # batch 1, the sweep's default
    assert one == pytest.approx(stage_ops.seconds(costs.params(), 2, 1, ("forward",))
                                + pass_seconds(costs.params(), stage_ops.head(2).forward, 1))
    assert everything_on_device.device_s_mean.iloc[0] == pytest.approx(one, rel=1e-9)


def _batch_sizes(ctx):
    n = len(ctx.clients[0].indices)
    b = ctx.scenario.training.batch_size
    sizes = [b] * (n // b) + ([n % b] if n % b else [])
    return sizes * ctx.scenario.training.local_epochs
