"""How accurate is simulated time? Fit the cost model by operation on measured training
steps and test it on steps it never saw.

    python benchmarks/validation/run.py                    # prints the table, writes results.md/.json
    python benchmarks/validation/run.py --write-profiles   # and the fitted operator_costs of the profiles

Data (this folder): ``public_steps.csv``, the public measurements of real boards in
the project's validation set (Raspberry Pi 4 and 5 from Flower's embedded vision
benchmark, Jetson Nano from the ARES testbed; sources in the file), and
``host_steps.csv``, this repository's own measurements of one CPU core
(``sflsim profile-host --steps``; the commands are in README.md).

Fits (:mod:`sflsim.hardware.calibration`):

1. the host on its own rows (generic prior);
2. the Raspberry Pi 4 and 5 as one family (same ARM Cortex-A CPUs, same PyTorch build),
   with the host's fitted parameters as the family's prior;
3. the Jetson Nano on its one row, with the host's parameters as prior (only its speed
   is determined: no held-out test is possible).

Tests: leave-one-model-out (a (device, model)'s rows left out of the fit, the device's
other rows and its family kept), and the stricter "model unseen": the model left out on
every device, the prior's fit included. The FLOPs-only rule (one FLOP/s per device,
fitted the same way) is the baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from sflsim.cli.calibrate import measurements_of, operator_costs_yaml  # noqa: E402
from sflsim.hardware import calibration  # noqa: E402
from sflsim.hardware.operator_cost import counted_flops  # noqa: E402
from sflsim.hardware.steps_csv import read_steps  # noqa: E402

PUBLIC = HERE / "public_steps.csv"
HOST = HERE / "host_steps.csv"
RPI = ("rpi4", "rpi5")


def flops_only_lomo(ms) -> dict[str, float]:
    """The FLOPs-only rule's leave-one-model-out errors: one FLOP/s per device, the
    geometric mean of counted FLOPs / seconds over the device's other models."""
    out = {}
    for m in ms:
        rest = [r for r in ms if r.device == m.device and r.model != m.model]
        if not rest:
            continue
        rate = float(np.exp(np.mean([np.log(counted_flops(r.work) / r.measured_s) for r in rest])))
        out[m.label] = counted_flops(m.work) / rate / m.measured_s - 1
    return out


def strict_rpi(host_ms, rpi_ms) -> dict[str, float]:
    """Each RPi model left out of every fit: the host prior's and the family's."""
    out = {}
    for model in sorted({m.model for m in rpi_ms}):
        host_rest = [m for m in host_ms if m.model != model]
        prior = calibration.fit(host_rest).params[host_rest[0].device]
        train = [m for m in rpi_ms if m.model != model]
        params = calibration.fit(train, prior).params
        for m in rpi_ms:
            if m.model == model:
                out[m.label] = calibration.predict(params[m.device], m) / m.measured_s - 1
    return out


def summary(errors: dict[str, float]) -> str:
    if not errors:
        return "n/a"
    e = [abs(v) for v in errors.values()]
    return f"median {statistics.median(e):.1%}, worst {max(e):.1%} ({len(e)} rows)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write-profiles", action="store_true",
                        help="write the fitted operator_costs into the shipped profiles")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    public = read_steps(PUBLIC)
    host_rows = read_steps(HOST)
    host_ms = measurements_of(host_rows)
    public_ms = measurements_of(public)
    rpi_ms = [m for m in public_ms if m.device in RPI]
    nano_ms = [m for m in public_ms if m.device == "jetson_nano"]

    host_fit = calibration.fit(host_ms)
    host_device = host_ms[0].device
    prior = host_fit.params[host_device]
    host_lomo = calibration.leave_one_model_out(host_ms)
    rpi_fit = calibration.fit(rpi_ms, prior)
    rpi_lomo = calibration.leave_one_model_out(rpi_ms, prior)
    rpi_strict = strict_rpi(host_ms, rpi_ms)
    nano_fit = calibration.fit(nano_ms, prior)
    flops_lomo = {**flops_only_lomo(host_ms), **flops_only_lomo(rpi_ms)}

    rows = []
    fits = {**{m.label: host_fit for m in host_ms}, **{m.label: rpi_fit for m in rpi_ms},
            **{m.label: nano_fit for m in nano_ms}}
    for m in [*public_ms, *host_ms]:
        fitted = calibration.predict(fits[m.label].params[m.device], m)
        rows.append({
            "row": m.label, "device": m.device, "model": m.model,
            "measured_s": m.measured_s, "fitted_s": fitted,
            "fit_error": fitted / m.measured_s - 1,
            "held_out_error": {**host_lomo, **rpi_lomo}.get(m.label),
            "model_unseen_error": rpi_strict.get(m.label),
            "flops_only_held_out_error": flops_lomo.get(m.label),
        })
    held = {**host_lomo, **rpi_lomo}
    result = {
        "leave_one_model_out": summary(held),
        "leave_one_model_out_public": summary(rpi_lomo),
        "leave_one_model_out_host": summary(host_lomo),
        "model_unseen_public": summary(rpi_strict),
        "flops_only_leave_one_model_out": summary(flops_lomo),
        "rows": rows,
        "params": {d: p.__dict__ for fit in (host_fit, rpi_fit, nano_fit)
                   for d, p in fit.params.items()},
    }
    (HERE / "results.json").write_text(json.dumps(result, indent=1, default=list) + "\n")
    (HERE / "results.md").write_text(markdown(result))
    print(markdown(result))
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.write_profiles:
        write_profiles(rpi_fit, nano_fit, rpi_lomo, rpi_ms, nano_ms)
    return 0


def pct(v) -> str:
    return "" if v is None else f"{v:+.1%}"


def markdown(result: dict) -> str:
    lines = [
        "| row | measured s | fitted s | fit error | held-out error | model unseen | FLOPs-only held-out |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(f"| {r['row']} | {r['measured_s']:.4g} | {r['fitted_s']:.4g} | "
                     f"{pct(r['fit_error'])} | {pct(r['held_out_error'])} | "
                     f"{pct(r['model_unseen_error'])} | {pct(r['flops_only_held_out_error'])} |")
    lines += [
        "",
        f"- Leave-one-model-out |error|, all rows: {result['leave_one_model_out']}",
        f"  - public boards (RPi 4, RPi 5): {result['leave_one_model_out_public']}",
        f"  - this machine: {result['leave_one_model_out_host']}",
        f"- Model unseen on any device (public boards): {result['model_unseen_public']}",
        f"- FLOPs-only rule, leave-one-model-out: {result['flops_only_leave_one_model_out']}",
        "",
    ]
    return "\n".join(lines)


def write_profiles(rpi_fit, nano_fit, rpi_lomo, rpi_ms, nano_ms) -> None:
    """Replace the ``operator_costs`` block at the end of each shipped profile."""
    import yaml

    for device, fit, ms, held in (("rpi4", rpi_fit, rpi_ms, rpi_lomo),
                                  ("rpi5", rpi_fit, rpi_ms, rpi_lomo),
                                  ("jetson_nano", nano_fit, nano_ms, {})):
        path = REPO / "device_profiles" / "devices" / f"{device}.yaml"
        text = path.read_text()
        if "\noperator_costs:" in text:
            text = text[:text.index("\noperator_costs:") + 1]
        family = sorted({m.device for m in ms})
        source = (f"fitted on the rows in fitted_on (benchmarks/validation/public_steps.csv) as "
                  f"one family ({', '.join(family)}), this repository's host fit as prior: "
                  f"python benchmarks/validation/run.py --write-profiles")
        costs = operator_costs_yaml(fit.params[device], source,
                                    [m.label for m in ms if m.device == device],
                                    {k: v for k, v in held.items() if k.startswith(device + "/")})
        block = yaml.safe_dump({"operator_costs": costs}, sort_keys=False, width=100)
        path.write_text(text.rstrip("\n") + "\n" + block)
        print(f"wrote operator_costs of {path}")


if __name__ == "__main__":
    raise SystemExit(main())
