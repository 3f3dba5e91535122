"""Calibration you can check: predict this host's real client-side training steps.

1. Profile this host in-process with the code of ``sflsim profile-host`` (per-stage
   forward/backward table and sustained FLOP/s).
2. Measure real client-side training steps: client model at end layers 1..5 plus its
   exit head, forward + cross-entropy + backward + Adam, at batch 16 and 32.
3. Predict each step (a) with the FLOPs rule, FLOPs / sustained_flops, and (b) with
   the per-stage table (:func:`sflsim.hardware.latency.stage_time_s`: forward +
   backward + Adam update of stages 1..end layer, plus the exit head's time; what the
   simulator uses for a ``client_train`` event).
4. Print measured vs predicted and, for each rule, the median (MdAPE) and the mean (MAPE)
   absolute percentage error.

Run: ``python benchmarks/calibration.py`` (about 20 s on one thread; see --help).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch import nn

from sflsim.cli.profile_host import build, measure_host, time_train_step
from sflsim.hardware.latency import stage_time_s
from sflsim.hardware.profiles import DeviceProfile
from sflsim.models.cost import count_flops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="hetero_splitee_resnet")
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--image-size", type=int, default=28)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--profile-batch-sizes", default="8,16,32")
    ap.add_argument("--step-batch-sizes", default="16,32")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--statistic", choices=["min", "median"], default="min",
                    help="of the repeats, for the profile and the measured steps alike")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    sizes = tuple(int(s) for s in args.profile_batch_sizes.split(","))
    data = measure_host(args.model, args.width, args.channels, args.image_size, sizes,
                        args.repeats, statistic=args.statistic)
    profile = DeviceProfile.model_validate({"name": "this_host", **data})
    rate = profile.sustained_flops.value
    backbone = build(args.model, args.width, args.channels, args.image_size)
    shape = backbone.input_shape
    rows = []
    for batch in (int(s) for s in args.step_batch_sizes.split(",")):
        for end in range(1, backbone.num_stages):
            piece = nn.Sequential(backbone.client_model(end), backbone.exit_head(end))
            measured = time_train_step(piece, shape, batch, args.repeats,
                                       statistic=args.statistic)
            flops_rule = count_flops(piece, shape).train_flops(batch) / rate
            stages = range(1, end + 1)
            table = sum(stage_time_s(profile, args.model, args.width, shape,
                                     [end] if d == "exit_head" else stages, batch, d)
                        for d in ("forward", "backward", "update", "exit_head"))
            rows.append((end, batch, measured, flops_rule, table))

    def ape(pred: float, meas: float) -> float:
        return abs(pred - meas) / meas * 100

    print(f"host: {data['sustained_flops']['source']}")
    print(f"model {args.model} width {args.width:g} input {list(shape)}, sustained "
          f"{rate / 1e9:.3g} GFLOP/s, {args.threads} thread(s), {args.statistic} of "
          f"{args.repeats} repeats")
    print(f"{'end':>3} {'batch':>5} {'measured ms':>12} {'FLOPs ms':>9} {'err %':>6} "
          f"{'table ms':>9} {'err %':>6}")
    for end, batch, m, f, t in rows:
        print(f"{end:>3} {batch:>5} {m * 1e3:>12.2f} {f * 1e3:>9.2f} {ape(f, m):>6.1f} "
              f"{t * 1e3:>9.2f} {ape(t, m):>6.1f}")
    for name, average in (("MdAPE (median", statistics.median), ("MAPE (mean", statistics.fmean)):
        flops_rule = average(ape(f, m) for _, _, m, f, _ in rows)
        table = average(ape(t, m) for _, _, m, _, t in rows)
        print(f"{name} absolute percentage error): FLOPs rule {flops_rule:.1f}%, "
              f"per-stage table {table:.1f}%")


if __name__ == "__main__":
    main()
