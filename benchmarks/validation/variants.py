"""Model forms tried beyond the shipped cost model by operation, on this machine's rows.

    python benchmarks/validation/variants.py            # ~1 min on 2 cores; one line per form
    python benchmarks/validation/variants.py --micro    # depthwise backward kernels, timed

Each form is fitted on ``host_steps.csv`` the way :func:`sflsim.hardware.calibration.fit`
fits a device on its own (log-space least squares, generic prior of width 3), and
scored leave-one-model-out, as ``run.py`` scores the shipped form. The forms:

- ``shipped``: :func:`sflsim.hardware.operator_cost.step_seconds`, re-implemented here
  (within 0.1 point of ``run.py``'s host line, whose fit also has a device speed and
  departure with their own priors).
- ``dw_gemm``: oneDNN computes the weight gradient of a depthwise convolution whose kernel
  is wider than 3, or whose input is smaller than its kernel, with a general matrix
  multiply instead of its depthwise kernel (``--micro``: 10-20 times slower than a 3x3
  kernel of the same shape). Those weight gradients (half the backward operator's FLOPs)
  get a rate of their own, fitted.
- ``ew_fixed``: element-wise operators (and the optimizer's) get a fixed cost of their own,
  fitted apart from the other operators' (``torch.profiler``: 1-3 us per element-wise call,
  50-170 us per oneDNN convolution).
- ``l3``: an operator whose bytes fit in the 32 MiB L3 cache moves them at a second,
  fitted bandwidth.
- ``per_sample_kernel``: PyTorch's one-thread 1x1 kernel below batch 16 (the shipped
  ``pointwise_per_sample_below_batch``) also accumulates the weight gradient per sample
  (reads and writes it: 1.5 times the backward's fixed bytes per sample), and moves its
  one sample's activations at a fitted cache bandwidth.
- ``norm``: BatchNorm and LayerNorm (forward and backward) move their bytes at a bandwidth
  of their own (training BatchNorm reads its input twice), fitted.
- ``faults``: every tensor an operator allocates above 32 MiB (glibc maps it afresh each
  step) costs its bytes at a fitted page-fault bandwidth on top.
- parts joined by ``+`` combine; the last line is the first four together.

Nothing here changes sflsim: what the forms need beyond the shipped operator lists (a
flag per operator, the bytes it allocates) is recorded by wrapping ``sflsim.models.ops``'
recorder for the duration of the count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from sflsim.hardware.operator_cost import UPDATE_BYTES_PER_PARAM, UPDATE_OPS_PER_TENSOR  # noqa: E402

PARTS = ("dw_gemm", "ew_fixed", "l3", "per_sample_kernel", "norm", "faults")
FORMS = ("shipped", *PARTS, "+".join(PARTS[:4]))
#: log-space start and prior centre: 4 class rates (FLOP/s), bandwidth (bytes/s), fixed
#: s per operator, s per batch, the depthwise-GEMM rate, s per element-wise operator,
#: the cache bandwidth (bytes/s), the page-fault bandwidth (bytes/s), the normalisation
#: bandwidth (bytes/s)
P0 = np.log([1e10, 1e10, 1e10, 1e10, 1e10, 2e-5, 1e-3, 1e9, 2e-6, 3e10, 2e9, 1e10])
L3_BYTES = 32 * 2**20
#: glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): a larger
#: allocation is mapped afresh, and page-faulted on first write, on every step
MMAP_BYTES = 32 * 2**20
POINTWISE, DW_GEMM = 1, 2


def flagged_rows() -> list[dict]:
    """The host rows as plain arrays, each operator with a flag (0, :data:`POINTWISE`,
    :data:`DW_GEMM`), its name, and the bytes of each tensor it allocates (per sample and
    fixed: its outputs that are not one of its inputs)."""
    import torch
    from torch.utils._pytree import tree_leaves

    import sflsim.models.oplist as oplist
    import sflsim.models.ops as ops
    from sflsim.cli.calibrate import measurements_of
    from sflsim.hardware.steps_csv import read_steps

    side: list = [None]  # what each record's third field (an index here) stands for
    record, split, dtype = ops._Recorder._record, ops._split, oplist._ARRAY_FIELDS["pointwise"]

    def flagged_record(self, func, packet, args, kwargs, out):
        n = len(self.records)
        record(self, func, packet, args, kwargs, out)
        if len(self.records) == n:
            return
        r, bound = self.records[-1], ops._bind(func, args, kwargs)
        flag, mask = (POINTWISE if r[2] else 0), bound.get("output_mask")
        if int(bound.get("groups", 1) or 1) > 1 and mask is not None and bool(mask[1]):
            kernel, size = bound["weight"].shape[2:], bound["input"].shape[2:]
            if max(kernel) > 3 or any(a < k for a, k in zip(size, kernel)):
                flag = DW_GEMM
        inputs = {id(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        side.append((flag, [t.numel() * t.element_size() for t in tree_leaves(out)
                            if isinstance(t, torch.Tensor) and id(t) not in inputs]))
        self.records[-1] = (r[0], r[1], len(side) - 1, *r[3:])

    def flagged_split(a, b):
        (na, nb), out = ops.COUNT_BATCHES, []
        for ra, rb in zip(a, b):
            (flag, at_a), (_, at_b) = side[ra[2]], side[rb[2]]
            per_sample = [(y - x) / (nb - na) for x, y in zip(at_a, at_b)]
            side.append((flag, [(p, x - p * na) for p, x in zip(per_sample, at_a)]))
            out.append((ra[0], ra[1], len(side) - 1, *ra[3:]))
        return split(out, b)

    ops._Recorder._record, ops._split = flagged_record, flagged_split
    oplist._ARRAY_FIELDS["pointwise"] = np.int64
    try:
        ms = measurements_of(read_steps(HERE / "host_steps.csv"))
    finally:
        ops._Recorder._record, ops._split = record, split
        oplist._ARRAY_FIELDS["pointwise"] = dtype

    def plain(o, batch: int) -> dict:
        entries = [side[i] for i in o.pointwise]
        allocated = [sum(s for s in (p * batch + f for p, f in e[1]) if s > MMAP_BYTES)
                     for e in entries]
        return {"cls": np.asarray(o.op_class, dtype=np.int64),
                "flops": np.asarray(o.flops_per_sample), "bytes": np.asarray(o.bytes_per_sample),
                "fixed": np.asarray(o.bytes_fixed), "flag": np.array([e[0] for e in entries]),
                "norm": np.array(["_norm" in n for n in o.names], dtype=bool),
                "mapped": np.asarray(allocated, dtype=np.float64)}

    return [{"label": m.label, "model": m.model, "measured": m.measured_s, "batch": m.work.batch,
             "rule": m.pointwise_per_sample_below_batch, "optimizer": m.work.optimizer,
             "params": m.work.trained_params, "tensors": m.work.param_tensors,
             "forward": plain(m.work.forward, m.work.batch),
             "backward": plain(m.work.backward, m.work.batch)} for m in ms]


def pass_seconds(form: str, v: np.ndarray, p: dict, batch: int, rule: int,
                 backward: bool) -> float:
    form = set(form.split("+"))
    cls, flag, flops = p["cls"], p["flag"], p["flops"] * batch
    rates = v[:4][cls]
    per_sample_kernel = (flag == POINTWISE) & (batch < rule)
    grow = 1.5 if "per_sample_kernel" in form and backward else 1.0
    fixed = np.where(per_sample_kernel, p["fixed"] * batch * grow, p["fixed"])
    moved = p["bytes"] * batch + fixed
    memory = moved / v[4]
    if "l3" in form:
        memory = np.where(moved <= L3_BYTES, moved / v[9], memory)
    if "norm" in form:
        memory = np.where(p["norm"], moved / v[11], memory)
    if "per_sample_kernel" in form:
        memory = np.where(per_sample_kernel, p["bytes"] * batch / v[9] + fixed / v[4], memory)
    if "dw_gemm" in form:
        gemm = flag == DW_GEMM
        t = (np.maximum(np.where(gemm, flops / 2, flops) / rates, memory)
             + np.where(gemm, flops / 2 / v[7], 0.0))
    else:
        t = np.maximum(flops / rates, memory)
    per_op = np.where(cls == 3, v[8], v[5]) if "ew_fixed" in form else v[5]
    faults = p["mapped"].sum() / v[10] if "faults" in form else 0.0
    return float(t.sum() + np.broadcast_to(per_op, cls.shape).sum() + faults)


def step_seconds(form: str, theta: np.ndarray, r: dict) -> float:
    v, batch, rule, opt = np.exp(theta), r["batch"], r["rule"], r["optimizer"]
    update_op = v[8] if "ew_fixed" in form.split("+") else v[5]
    return (pass_seconds(form, v, r["forward"], batch, rule, False) + v[6]
            + pass_seconds(form, v, r["backward"], batch, rule, True)
            + r["params"] * UPDATE_BYTES_PER_PARAM[opt] / v[4]
            + r["tensors"] * UPDATE_OPS_PER_TENSOR[opt] * update_op)


def fit(form: str, ms) -> np.ndarray:
    from scipy.optimize import least_squares

    measured = np.log([m["measured"] for m in ms])

    def residuals(x):
        predicted = np.log([step_seconds(form, x, m) for m in ms])
        return np.concatenate([(predicted - measured) / 0.05, (x - P0) / 3.0])

    return least_squares(residuals, P0.copy(), method="trf", diff_step=1e-4,
                         max_nfev=4000).x


def score(form: str, ms) -> str:
    theta = fit(form, ms)
    fitted = [abs(step_seconds(form, theta, m) / m["measured"] - 1) for m in ms]
    held = {}
    for model in sorted({m["model"] for m in ms}):
        rest = fit(form, [m for m in ms if m["model"] != model])
        held.update({m["label"]: step_seconds(form, rest, m) / m["measured"] - 1
                     for m in ms if m["model"] == model})
    worst = sorted(held, key=lambda k: -abs(held[k]))[:3]
    a = [abs(e) for e in held.values()]
    return (f"| {form} | {statistics.median(fitted):.1%} / {max(fitted):.1%} | "
            f"{statistics.median(a):.1%} / {max(a):.1%} | "
            + ", ".join(f"{k.split('/', 1)[1]} {held[k]:+.0%}" for k in worst) + " |")


def micro() -> None:
    """Depthwise convolution backward on one thread: input gradient vs weight gradient."""
    import torch

    torch.set_num_threads(1)
    print("| channels | input | kernel | stride | batch | input grad ms | weight grad ms |")
    print("|---|---|---|---|---|---|---|")
    for c, h, k, s in ((576, 2, 3, 1), (576, 4, 3, 1), (576, 4, 5, 1), (96, 16, 3, 1),
                       (96, 16, 5, 1), (120, 8, 5, 1), (72, 16, 5, 2), (32, 32, 7, 1)):
        for batch in (4, 32):
            x, w = torch.randn(batch, c, h, h), torch.randn(c, 1, k, k)
            g = torch.randn_like(torch.nn.functional.conv2d(x, w, stride=s, padding=k // 2,
                                                             groups=c))
            times = []
            for mask in ([True, False, False], [False, True, False]):
                def run(g=g, x=x, w=w, s=s, k=k, c=c, mask=mask):
                    torch.ops.aten.convolution_backward(
                        g, x, w, None, [s, s], [k // 2] * 2, [1, 1], False, [0, 0], c, mask)
                for _ in range(3):
                    run()
                best = min(_timed(run) for _ in range(7))
                times.append(f"{best * 1e3:.2f}")
            print(f"| {c} | {h}x{h} | {k}x{k} | {s} | {batch} | {times[0]} | {times[1]} |")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--micro", action="store_true", help="time depthwise backward kernels")
    parser.add_argument("--forms", nargs="+", default=list(FORMS),
                        help="forms, or parts joined by +: " + ", ".join(PARTS))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.micro:
        micro()
        return 0
    ms = flagged_rows()
    print("| form | fitted: median / worst | held out: median / worst | worst held-out rows |")
    print("|---|---|---|---|")
    with ProcessPoolExecutor(args.workers) as pool:
        for line in pool.map(score, args.forms, [ms] * len(args.forms)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
