"""How reproducible are the measured training steps the cost model is fitted and tested on?

    python benchmarks/validation/repeatability.py     # ~1 min

Data (this folder): ``host_steps.csv`` (the rows ``run.py`` fits and tests on, one AMD EPYC
VM, 2026-12-05/06) and ``host_steps_repeat_a.csv`` / ``host_steps_repeat_b.csv``: the same
57 rows measured twice more with the same ``sflsim profile-host --steps`` commands
(``benchmarks/README.md``) on another 2-core VM sold as "AMD EPYC", 2026-12-06, the two
passes one after the other with nothing else running (load average 1.0: the measuring
process).

Printed:

1. **Same VM, minutes apart**: pass b against pass a, per row.
2. **Two VMs of the same name**: pass a against ``host_steps.csv``, before and after one
   speed factor (the median ratio) is taken out: what a fitted profile carries over.
3. **The cost model's leave-one-model-out error** (``calibration.leave_one_model_out``, as
   ``run.py`` computes it for the host) on each set of rows, and on the row-wise minimum of
   the two passes (the minimum over both passes' steps, as each pass takes the minimum of
   its own).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from sflsim.cli.calibrate import measurements_of  # noqa: E402
from sflsim.hardware import calibration  # noqa: E402
from sflsim.hardware.steps_csv import read_steps  # noqa: E402

SETS = {"host_steps.csv": HERE / "host_steps.csv",
        "repeat a": HERE / "host_steps_repeat_a.csv",
        "repeat b": HERE / "host_steps_repeat_b.csv"}


def seconds(rows) -> dict[str, float]:
    return {r.label.split("/", 1)[1]: r.seconds_per_batch for r in rows}


def spread(errors: dict[str, float]) -> str:
    a = [abs(v) for v in errors.values()]
    worst = max(errors, key=lambda k: abs(errors[k]))
    over = sum(v > 0.2 for v in a)
    return (f"median |diff| {statistics.median(a):.1%}, worst {errors[worst]:+.1%} ({worst}), "
            f"{over} of {len(a)} rows past 20%")


def lomo(rows) -> str:
    held = calibration.leave_one_model_out(measurements_of(rows))
    a = [abs(v) for v in held.values()]
    worst = max(held, key=lambda k: abs(held[k]))
    return (f"median {statistics.median(a):.1%}, worst {held[worst]:+.1%} "
            f"({worst.split('/', 1)[1]})")


def main() -> int:
    rows = {name: read_steps(path) for name, path in SETS.items()}
    s = {name: seconds(r) for name, r in rows.items()}
    a, b, old = s["repeat a"], s["repeat b"], s["host_steps.csv"]
    print("1. same VM, pass b vs pass a:", spread({k: b[k] / a[k] - 1 for k in a}))
    ratio = {k: a[k] / old[k] for k in a}
    speed = float(np.exp(np.median(np.log(list(ratio.values())))))
    print(f"2. other VM (pass a) vs host_steps.csv: ratio median {speed:.3f}, "
          f"{min(ratio.values()):.2f} to {max(ratio.values()):.2f}; after that one factor: "
          + spread({k: v / speed - 1 for k, v in ratio.items()}))
    both = [replace(r, seconds_per_batch=min(r.seconds_per_batch, rb.seconds_per_batch))
            for r, rb in zip(rows["repeat a"], rows["repeat b"])]
    for name, rs in [*rows.items(), ("min of a and b", both)]:
        print(f"3. leave-one-model-out on {name}: {lomo(rs)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
