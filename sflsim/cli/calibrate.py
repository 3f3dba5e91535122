"""``sflsim calibrate STEPS.csv --device NAME -o PROFILE.yaml``: fit a device's cost model
by operation on measured training steps and say how well it predicts models it never saw.

The rows of the steps CSV (:mod:`sflsim.hardware.steps_csv`, written by ``sflsim
profile-host --steps`` or by hand) are fitted as one family
(:mod:`sflsim.hardware.calibration`); ``--prior`` gives the family's prior, a profile
with ``operator_costs``. The command prints each row's measured and fitted seconds and
its leave-one-model-out error (the row's model left out of the device's fit), and
writes ``--device``'s profile: ``operator_costs`` fitted (basis ``fitted``, the rows it
was fitted on and the held-out errors), the rest copied from ``--base`` or, without it,
placeholders that say they are not measurements.
"""

from __future__ import annotations

import datetime
import statistics
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError

from sflsim.cli.common import console, path_option, print_table, user_errors
from sflsim.errors import ConfigError
from sflsim.text import plural


def _load_profile(option: str, name: str):
    """The device profile an option names: a profile name or a YAML file.

    Raises:
        ConfigError: naming the option when there is no such profile or file.
    """
    from sflsim.hardware import profiles

    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"{option} {name}: no such file")
        from sflsim.inputs.yaml_files import read_yaml_mapping

        data = read_yaml_mapping(path, what="profile")
        try:
            return profiles.DeviceProfile.model_validate({"name": path.stem, **data})
        except ValidationError as exc:
            from sflsim.inputs.messages import format_validation_error

            raise ConfigError(f"{option} " + format_validation_error(
                exc, f"profile {path}", profiles.DeviceProfile)) from None
    try:
        return profiles.device_profile(name)
    except ConfigError as exc:
        raise ConfigError(f"{option} {name}: {exc}") from None


def _prior(name: str | None):
    """The ``operator_costs`` parameters of the profile ``--prior`` names."""
    if name is None:
        return None
    profile = _load_profile("--prior", name)
    if profile.operator_costs is None:
        raise ConfigError(f"--prior {name}: the profile has no operator_costs; valid: a profile "
                          f"written by sflsim calibrate (e.g. rpi5, rpi4)")
    return profile.operator_costs.params()


def measurements_of(rows, where: str = "steps CSV"):
    """The :class:`~sflsim.hardware.calibration.Measurement` of each steps-CSV row.

    Raises:
        ConfigError: a row's model cannot be built (named with ``where`` and the row).
    """
    from sflsim.hardware.calibration import Measurement
    from sflsim.hardware.operator_cost import pointwise_rule
    from sflsim.models.workload import row_workload

    out = []
    for r in rows:
        try:
            work = row_workload(r)
        except ConfigError as exc:
            raise ConfigError(f"{where}, row {r.label}: {exc}") from None
        out.append(Measurement(device=r.device, model=r.architecture, label=r.label, work=work,
                               measured_s=r.seconds_per_batch, threads=r.threads,
                               pointwise_per_sample_below_batch=pointwise_rule(r.threads)))
    return out


def _sourced(value: str, source: str) -> dict:
    return {"value": value, "basis": "fitted", "source": source}


def operator_costs_yaml(params, source: str, fitted_on: list[str],
                        held_out: dict[str, float]) -> dict:
    """``operator_costs`` of a profile (YAML-ready) from fitted parameters."""
    conv, grouped, matmul, elementwise = params.rates_flops
    return {
        "conv_flops": _sourced(f"{conv / 1e9:.4g} GFLOPS", source),
        "grouped_conv_flops": _sourced(f"{grouped / 1e9:.4g} GFLOPS", source),
        "matmul_flops": _sourced(f"{matmul / 1e9:.4g} GFLOPS", source),
        "elementwise_flops": _sourced(f"{elementwise / 1e9:.4g} GFLOPS", source),
        "memory_bandwidth_bps": _sourced(f"{params.memory_bandwidth_bps / 8e9:.4g} GB/s", source),
        "per_operator_s": _sourced(f"{params.per_operator_s * 1e6:.4g} us", source),
        "per_batch_s": _sourced(f"{params.per_batch_s * 1e3:.4g} ms", source),
        **({"pointwise_per_sample_below_batch": {
            "value": params.pointwise_per_sample_below_batch, "basis": "derived",
            "source": f"{source}: the rows were measured on one torch thread (column threads), "
                      f"where PyTorch runs 1x1 convolutions sample by sample below batch 16 "
                      f"(ConvParams::use_mkldnn, aten/src/ATen/native/Convolution.cpp)"}}
           if params.pointwise_per_sample_below_batch else {}),
        "fitted_on": fitted_on,
        "held_out_error": {k: round(v, 4) for k, v in held_out.items()},
    }


def calibrate(
    steps: Annotated[Path, typer.Argument(help="Steps CSV: model, input_shape, batch, "
                                          "seconds_per_batch (and device, width, classes, "
                                          "phase, optimizer, threads, ViT sizes, source).")],
    device: Annotated[str | None, typer.Option(
        help="The device to write a profile for (and of rows without a device column); "
        "default: the CSV's only device.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", **path_option("-o", "file"),
        help="Profile YAML to write, e.g. device_profiles/devices/myboard.yaml.")] = None,
    prior: Annotated[str | None, typer.Option(
        help="A profile with operator_costs (name or YAML file) as the family's prior: the "
        "shape of a similar device's costs. Default: a generic, wide prior.")] = None,
    family: Annotated[str | None, typer.Option(
        help="Comma-separated devices of the CSV fitted together with --device (boards of one "
        "kind share the shape of their costs); default: every device in the CSV.")] = None,
    base: Annotated[str | None, typer.Option(
        help="A profile (name or YAML file) whose memory and powers the written profile "
        "copies; default: placeholders that say they are not measured.")] = None,
) -> None:
    """Fit a device's cost model by operation on measured training steps; print each model's
    leave-one-model-out error; write the device's profile."""
    with user_errors():
        from sflsim.hardware import calibration
        from sflsim.hardware.steps_csv import read_steps

        if output is not None:  # said before fitting, as sflsim run says it
            from sflsim.metrics.results import check_output_file

            check_output_file(output, "-o", "myboard.yaml", reads={
                "the steps CSV": steps, "--prior": _file_or_none(prior),
                "--base": _file_or_none(base)})
        rows = read_steps(steps, device)
        if family is not None:
            wanted = {d.strip() for d in family.split(",") if d.strip()} | (
                {device} if device else set())
            unknown = sorted(wanted - {r.device for r in rows})
            if unknown:
                raise ConfigError(f"--family {family}: no row of {steps} is of "
                                  f"{', '.join(unknown)}; valid: "
                                  f"{', '.join(sorted({r.device for r in rows}))}")
            rows = [r for r in rows if r.device in wanted]
        devices = sorted({r.device for r in rows})
        if device is None:
            if len(devices) > 1:
                raise ConfigError(f"{steps} holds {len(devices)} devices ({', '.join(devices)}); "
                                  f"name the one to write with --device")
            device = devices[0]
        elif device not in devices:
            raise ConfigError(f"--device {device}: no row of {steps} is of it; valid: "
                              f"{', '.join(devices)}")
        prior_params = _prior(prior)
        base_profile = None if base is None else _load_profile("--base", base)
        measurements = measurements_of(rows, f"steps CSV {steps}")
        try:
            calibration.kernel_rules(measurements)
        except ValueError as exc:
            raise ConfigError(f"steps CSV {steps}: {exc}") from None
        console.print(f"fitting {plural(len(rows), 'row')} of {plural(len(devices), 'device')} "
                      f"({', '.join(devices)}) ...", highlight=False)
        fitted = calibration.fit(measurements, prior_params)
        held = calibration.leave_one_model_out(measurements, prior_params)
        _print_errors(measurements, fitted, held)
        _print_notes(devices, measurements, prior)
        if output is None:
            return
        mine = [m for m in measurements if m.device == device]
        source = (f"sflsim calibrate {steps.name} ({plural(len(rows), 'row')}, "
                  f"{plural(len(devices), 'device')}"
                  f"{'; prior ' + prior if prior else ''}), {datetime.date.today().isoformat()}")
        data = _profile(device, base_profile, mine, fitted.params[device], source,
                        {k: v for k, v in held.items() if k.startswith(f"{device}/")})
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("# Written by sflsim calibrate.\n"
                          + yaml.safe_dump(data, sort_keys=False, width=100))
        console.print(f"wrote {output}", highlight=False)
        console.print(_how_to_use(output), highlight=False)


def _file_or_none(profile: str | None) -> Path | None:
    """A profile option given as a YAML file, as a path; None for a name or nothing."""
    return Path(profile) if profile is not None and Path(profile).is_file() else None


def _how_to_use(output: Path) -> str:
    """How a scenario uses the profile written to ``output``: by name, from a folder of
    ``$SFLSIM_PROFILE_PATH`` (a scenario names profiles, not files)."""
    name = output.stem
    if output.parent.name == "devices":
        where = f"export SFLSIM_PROFILE_PATH={output.parent.parent.resolve()}"
    else:
        where = (f"move it to a folder's devices/ subfolder (e.g. my_profiles/devices/"
                 f"{output.name}) and export SFLSIM_PROFILE_PATH=$PWD/my_profiles")
    return (f"to use it: {where}; then in a scenario, devices.<group>.profile: {name} and "
            f"hardware: {{cost_model: operators}} (sflsim profiles show {name} to check)")


def _print_notes(devices: list[str], measurements, prior: str | None) -> None:
    """Say when a fit leans on its prior, and when held-out errors are optimistic."""
    few = [d for d in devices if len({m.model for m in measurements if m.device == d}) < 3]
    if few:
        console.print(f"note: {', '.join(few)}: fewer than 3 measured models for the cost "
                      f"model's 7 parameters; the fit leans on the prior "
                      f"({'--prior ' + prior if prior else 'a generic, wide one: give --prior'}"
                      f"); measure more models (each operator class your workloads use) and "
                      f"batch sizes", highlight=False)
    unknown = sorted({m.device for m in measurements if m.threads is None})
    if unknown:
        console.print(f"note: {', '.join(unknown)}: the steps CSV does not say on how many torch "
                      f"threads the rows were measured (column threads), so they are taken as "
                      f"several: PyTorch's one-thread kernel for 1x1 convolutions below batch 16 "
                      f"is not modelled; fill in threads if they were measured on one",
                      highlight=False)
    if prior is not None:
        console.print(f"note: a held-out row's model is left out of this fit, not out of "
                      f"--prior {prior}'s: where the prior was fitted on the same models, "
                      f"the held-out errors are optimistic", highlight=False)


#: a held-out error past which calibrate says the model's operators are not covered
POOR_HELD_OUT = 0.5


def _print_errors(measurements, fitted, held) -> None:
    from rich.table import Table

    from sflsim.hardware.calibration import predict

    table = Table("row", "measured s", "fitted s", "fit error", "held-out error")
    for m in measurements:
        p = predict(fitted.params[m.device], m)
        out = held.get(m.label)
        table.add_row(m.label, f"{m.measured_s:.4g}", f"{p:.4g}", f"{p / m.measured_s - 1:+.1%}",
                      "n/a (only model)" if out is None else f"{out:+.1%}")
    print_table(table)
    if held:
        errors = [abs(v) for v in held.values()]
        console.print(f"leave-one-model-out |error|: median {statistics.median(errors):.1%}, "
                      f"worst {max(errors):.1%} over {plural(len(errors), 'row')}", highlight=False)
        poor = sorted({label.split("/")[1] for label, e in held.items() if abs(e) > POOR_HELD_OUT})
        if poor:
            console.print(f"note: {', '.join(poor)}: over {POOR_HELD_OUT:.0%} off when left out "
                          f"of the fit: the other models measured do not cover its operators "
                          f"(a kind only it uses, such as attention or depthwise convolutions); "
                          f"trust the profile on such models only after measuring two or more "
                          f"models of each kind", highlight=False)
    else:
        console.print("leave-one-model-out: no device has two models; nothing was held out",
                      highlight=False)


def _profile(device: str, base, mine, params, source: str, held: dict[str, float]) -> dict:
    """The profile of ``device`` (YAML-ready)."""
    from sflsim.hardware.calibration import predict
    from sflsim.hardware.operator_cost import counted_flops

    costs = operator_costs_yaml(params, source, [m.label for m in mine], held)
    # the FLOPs reading's rate: the counted FLOPs of the fitted rows over their predictions
    rates = [counted_flops(m.work) / predict(params, m) for m in mine]

    def placeholder(value: str) -> dict:
        return {"value": value, "basis": "nominal",
                "source": "Assumed. unknown: not measured by sflsim calibrate.",
                "note": "A placeholder so that the profile is complete; do not use this "
                        "profile's energy figures."}

    copied = ({f: base.model_dump(mode="json", exclude_none=True)[f]
               for f in ("memory_bytes", *POWERS)} if base is not None else
              {"memory_bytes": placeholder("4 GiB"), "active_power_w": placeholder("5 W"),
               "idle_power_w": placeholder("2 W"), "radio_tx_power_w": placeholder("1 W"),
               "radio_rx_power_w": placeholder("0.7 W")})
    others = (f"Memory and power numbers copied from profile {base.name}." if base is not None
              else "Memory and power numbers are placeholders, not measurements.")
    return {
        "description": f"{device}, fitted by sflsim calibrate on "
                       f"{plural(len(mine), 'measured step')}. "
                       + others,
        "sustained_flops": {"value": f"{statistics.median(rates) / 1e9:.4g} GFLOPS",
                            "basis": "derived", "source": source,
                            "note": "median over the fitted rows of counted FLOPs / fitted "
                                    "seconds (the FLOPs-only reading's rate)"},
        **copied,
        "operator_costs": costs,
    }


#: the power fields a profile copies from --base
POWERS = ("active_power_w", "idle_power_w", "radio_tx_power_w", "radio_rx_power_w")
