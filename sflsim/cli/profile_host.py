"""``sflsim profile-host -o FILE``: measure this machine stage by stage, write a device profile.

For each batch size the backbone's stages run one after another in training mode, as
in a client-side step: stage ``k`` gets the (detached) output of stage ``k-1``,
with ``requires_grad`` for ``k > 1`` so that its backward also computes the gradient
for the stage before it (stage 1's input, the images, needs none). Per repeat, the
forward is timed, then ``output.backward(ones)``, then an Adam step of the stage's
parameters; the stage's exit head (forward, cross-entropy, backward, Adam step) is
timed on the stage's output. After warm-up, the minimum of the repeats is kept (the
uncontended time; ``--statistic median`` keeps the median). The
sustained FLOP/s is the FLOPs of a whole-network training step (forward, backward,
optimizer) at the largest batch size over its time.

The profile's memory comes from ``/proc/meminfo`` (measured); powers and radio are not
measured and are written as assumed placeholders that say so.
"""

from __future__ import annotations

import datetime
import math
import platform
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml

from sflsim.cli.common import console, path_option, user_errors
from sflsim.errors import ConfigError
from sflsim.hardware.steps_csv import MAX_BATCH, MAX_CLASSES, MAX_SIDE, MAX_WIDTH
from sflsim.text import did_you_mean, plural
from sflsim.threads import MAX_THREADS

if TYPE_CHECKING:  # torch is imported when the command runs: `sflsim --help` stays fast
    from torch import nn

    from sflsim.models import StagedBackbone

NUM_CLASSES = 10


def build(model: str, width: float, channels: int, image_size: int,
          classes: int = NUM_CLASSES) -> StagedBackbone:
    from sflsim.models import MODELS

    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}{did_you_mean(model, sorted(MODELS))} "
                          f"(valid: {', '.join(sorted(MODELS))})")
    try:
        return MODELS[model](in_channels=channels, image_size=image_size,
                             num_classes=classes, width=width, seed=0)
    except ValueError as exc:
        raise ConfigError(f"model {model}: {exc}") from None


def _sync() -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover - CPU here
        torch.cuda.synchronize()


STATISTICS = {"min": min, "median": statistics.median}


def _time(fn, repeats: int, warmup: int, statistic: str = "min") -> float:
    times = []
    for rep in range(warmup + repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        if rep >= warmup:
            times.append(time.perf_counter() - t0)
    return STATISTICS[statistic](times)


def time_stages(backbone: StagedBackbone, batch: int, repeats: int, warmup: int = 2,
                statistic: str = "min") -> dict[str, list[float]]:
    """Seconds (``statistic`` of the repeats) of each stage for a batch of ``batch``: ``forward_s``,
    ``backward_s``, ``update_s`` (Adam step of the stage's parameters) and
    ``exit_head_s`` (exit head after the stage: forward, loss, backward, Adam step)."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, *backbone.input_shape, generator=gen)
    y = torch.randint(0, NUM_CLASSES, (batch,), generator=gen)
    loss_fn = nn.CrossEntropyLoss()
    out_times: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "update_s": [],
                                         "exit_head_s": []}
    for k, stage in enumerate(backbone.stages):
        stage = stage.train()
        opt = torch.optim.Adam(stage.parameters(), lr=1e-3)
        inp = x.detach().requires_grad_(k > 0)
        f_times, b_times, u_times = [], [], []
        for rep in range(warmup + repeats):
            opt.zero_grad(set_to_none=True)
            inp.grad = None
            _sync()
            t0 = time.perf_counter()
            out = stage(inp)
            _sync()
            t1 = time.perf_counter()
            out.backward(torch.ones_like(out))
            _sync()
            t2 = time.perf_counter()
            opt.step()
            _sync()
            t3 = time.perf_counter()
            if rep >= warmup:
                f_times.append(t1 - t0)
                b_times.append(t2 - t1)
                u_times.append(t3 - t2)
        with torch.no_grad():
            x = stage(x)
        head = backbone.exit_head(k + 1).train()
        head_opt = torch.optim.Adam(head.parameters(), lr=1e-3)
        h = x.detach().requires_grad_(True)

        def head_step(head=head, head_opt=head_opt, h=h) -> None:
            head_opt.zero_grad(set_to_none=True)
            h.grad = None
            loss_fn(head(h), y).backward()
            head_opt.step()

        stat = STATISTICS[statistic]
        out_times["forward_s"].append(stat(f_times))
        out_times["backward_s"].append(stat(b_times))
        out_times["update_s"].append(stat(u_times))
        out_times["exit_head_s"].append(_time(head_step, repeats, warmup, statistic))
    return out_times


def time_train_step(model: nn.Module, input_shape: tuple[int, ...], batch: int, repeats: int,
                    warmup: int = 2, statistic: str = "min", optimizer: str = "adam",
                    classes: int = NUM_CLASSES) -> float:
    """Seconds (``statistic`` of the repeats) of a real training step: forward,
    cross-entropy, backward and an ``optimizer`` update ("adam", "sgd" at lr 0.1 or
    "sgd_momentum" at lr 0.1, momentum 0.9), on random inputs held in memory."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, *input_shape, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    model.train()
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1,
                              momentum=0.9 if optimizer == "sgd_momentum" else 0.0)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return _time(step, repeats, warmup, statistic)


def measure_steps(models: list[str], channels: int, image_size: int, batch_sizes: tuple[int, ...],
                  repeats: int, device: str, width: float = 1.0, classes: int = NUM_CLASSES,
                  optimizer: str = "sgd", statistic: str = "min", warmup: int = 1,
                  on_row=None) -> list:
    """Time whole-model training steps of each of ``models`` at each batch size: the rows
    of a steps CSV (:mod:`sflsim.hardware.steps_csv`) that ``sflsim calibrate`` fits.

    Args:
        models: registered model names.
        channels, image_size: per-sample input ``channels x image_size x image_size``.
        batch_sizes: samples per step.
        repeats: timed repeats per step (after ``warmup`` untimed ones); the
            ``statistic`` of them is kept.
        device: the name the rows give this machine.
        on_row: called with each row as it is measured (progress).

    Raises:
        ConfigError: an unknown model or sizes a model refuses (before anything is timed).
    """
    import torch
    from torch import nn

    from sflsim.hardware.steps_csv import StepRow
    from sflsim.provenance import cpu_model

    backbones = {m: build(m, width, channels, image_size, classes) for m in models}
    if min(batch_sizes) == 1:
        from sflsim.run.batch_checks import one_value_batchnorm

        for name, backbone in backbones.items():
            layer = one_value_batchnorm(backbone)
            if layer is not None:
                raise ConfigError(f"--batch-sizes 1: model {name} at {channels}x{image_size}x"
                                  f"{image_size} reduces the feature map to 1x1 before BatchNorm "
                                  f"{layer}, which cannot train on one sample; valid: batch "
                                  f"sizes of 2 or more, or larger images")
    where = (f"sflsim profile-host --steps on {platform.node() or 'this host'} "
             f"({cpu_model()}, torch {torch.__version__}, "
             f"{plural(torch.get_num_threads(), 'thread')}), {datetime.date.today().isoformat()}, "
             f"{statistic} of {repeats}")
    rows = []
    for name, backbone in backbones.items():
        whole = nn.Sequential(*backbone.stages, backbone.head)
        for b in batch_sizes:
            seconds = time_train_step(whole, backbone.input_shape, b, repeats, warmup,
                                      statistic, optimizer, classes)
            row = StepRow(device=device, model=name, input_shape=tuple(backbone.input_shape),
                          batch=b, seconds_per_batch=seconds, width=width, classes=classes,
                          optimizer=optimizer, threads=torch.get_num_threads(), source=where)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover
        return None
    return None  # pragma: no cover


def measure_host(model: str = "hetero_splitee_resnet", width: float = 0.25, channels: int = 1,
                 image_size: int = 28, batch_sizes: tuple[int, ...] = (8, 16, 32),
                 repeats: int = 5, host: str | None = None, statistic: str = "min") -> dict:
    """Measure this host; returns the device profile as a dict (YAML-ready)."""
    import torch
    from torch import nn

    from sflsim.models.cost import count_flops

    if not batch_sizes or min(batch_sizes) < 1:
        raise ConfigError("batch sizes must be positive integers")
    if repeats < 1:
        raise ConfigError("repeats must be at least 1")
    if statistic not in STATISTICS:
        raise ConfigError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    backbone = build(model, width, channels, image_size)
    host = host or platform.node() or "this host"
    date = datetime.date.today().isoformat()
    threads = torch.get_num_threads()
    cpu = platform.processor() or platform.machine()
    where = (f"sflsim profile-host on {host} ({cpu}, torch {torch.__version__}, "
             f"{plural(threads, 'thread')}), {date}")
    tables = []
    for b in sorted(set(batch_sizes)):
        times = time_stages(backbone, b, repeats, statistic=statistic)
        tables.append({
            "model": model, "width": width, "input": list(backbone.input_shape), "batch_size": b,
            **{k: [float(f"{t:.6g}") for t in v] for k, v in times.items()},
            "basis": "measured", "source": where,
            "note": f"{statistic} of {repeats} repeats after 2 warm-up runs, per stage, whole "
                    "batch; "
                    "update_s = Adam step, exit_head_s = exit head forward + loss + backward + "
                    "Adam step",
        })
    whole = nn.Sequential(*backbone.stages, backbone.head)
    b = max(batch_sizes)
    step_s = time_train_step(whole, backbone.input_shape, b, repeats, statistic=statistic)
    cost = count_flops(whole, backbone.input_shape)
    flops = cost.train_flops(b)
    rate = flops / step_s
    mem = memory_bytes()
    mem_field = ({"value": f"{mem} B", "basis": "measured",
                  "source": f"/proc/meminfo MemTotal on {host}, {date}"}
                 if mem else {"value": "8 GiB", "basis": "nominal", "source": "Assumed.",
                              "note": "/proc/meminfo not readable; a placeholder."})

    def placeholder(value: str) -> dict:
        return {"value": value, "basis": "nominal",
                "source": "Assumed. unknown: not measured by sflsim profile-host.",
                "note": "A placeholder so that the profile is complete; do not use this "
                        "profile's energy figures."}

    return {
        "description": (f"This host ({host}, {cpu}, {plural(threads, 'torch thread')}), measured by "
                        f"sflsim profile-host on {date}: per-stage latency of {model} "
                        f"width {width:g} at {image_size}x{image_size}x{channels}, batch sizes "
                        f"{', '.join(str(b) for b in sorted(set(batch_sizes)))}. Power numbers "
                        "are placeholders, not measurements."),
        "sustained_flops": {
            "value": f"{rate / 1e9:.4g} GFLOPS", "basis": "measured", "source": where,
            "note": (f"whole {model} training step (forward, backward, Adam) at batch {b}: "
                     f"{flops / 1e9:.4g} GFLOP / {step_s:.4g} s ({statistic} of {repeats})"),
        },
        "memory_bytes": mem_field,
        "active_power_w": placeholder("10 W"),
        "idle_power_w": placeholder("5 W"),
        "radio_tx_power_w": placeholder("1 W"),
        "radio_rx_power_w": placeholder("0.7 W"),
        "stage_latency": tables,
    }


def profile_host(
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", **path_option("-o", "file"),
        help="Profile YAML to write (per-stage latency of --model), e.g. "
        "device_profiles/devices/myhost.yaml.")] = None,
    steps: Annotated[Path | None, typer.Option(
        "--steps", **path_option("--steps", "file"),
        help="Steps CSV to write (appended to if it exists): whole-model training steps of "
        "each of --models at each batch size, for sflsim calibrate.")] = None,
    model: Annotated[str, typer.Option(help="Registered backbone (for -o).")] = "hetero_splitee_resnet",
    models: Annotated[str, typer.Option(help="Comma-separated registered backbones (for "
                                        "--steps).")] = "resnet18,mobilenet_v2,vit",
    device_name: Annotated[str, typer.Option(
        "--device-name", help="The device column of the --steps rows.")] = "host",
    width: Annotated[float | None, typer.Option(
        help="Width multiplier; default 0.25 for -o, 1 for --steps (some models have no "
        "width multiplier).")] = None,
    image_size: Annotated[int, typer.Option(
        min=1, max=MAX_SIDE, help="Input height = width in pixels.")] = 28,
    channels: Annotated[int, typer.Option(min=1, max=MAX_SIDE, help="Input channels.")] = 1,
    classes: Annotated[int, typer.Option(min=1, max=MAX_CLASSES,
                                         help="Output classes.")] = NUM_CLASSES,
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "8,16,32",
    repeats: Annotated[int, typer.Option(min=1, max=10_000,
                                         help="Timed repeats per measurement.")] = 5,
    threads: Annotated[int, typer.Option(help="torch intra-op threads; 1 by default, which is "
                                         "steady on a shared machine.")] = 1,
    optimizer: Annotated[str, typer.Option(help="Optimizer of the --steps steps: sgd (lr 0.1), "
                                           "sgd_momentum or adam.")] = "sgd",
    statistic: Annotated[str, typer.Option(help="min (default: the uncontended time, steady on "
                                           "a shared machine) or median of the repeats.")] = "min",
) -> None:
    """Measure this machine: per-stage latency of one model as a device profile (-o), or
    whole training steps of several models as a steps CSV for sflsim calibrate (--steps)."""
    with user_errors():
        try:
            sizes = tuple(dict.fromkeys(int(s) for s in batch_sizes.split(",") if s.strip()))
        except ValueError:
            raise ConfigError(f"--batch-sizes must be integers separated by commas, got "
                              f"{batch_sizes!r}") from None
        if not 1 <= threads <= MAX_THREADS:
            raise ConfigError(f"--threads {threads} is out of range; valid: 1 to {MAX_THREADS}")
        if output is None and steps is None:
            raise ConfigError("give -o PROFILE.yaml (per-stage latency of --model) or --steps "
                              "STEPS.csv (training steps of --models, for sflsim calibrate)")
        if optimizer not in ("sgd", "sgd_momentum", "adam"):
            raise ConfigError(f"--optimizer {optimizer!r}; valid: sgd, sgd_momentum, adam")
        _check_outputs(output, steps)
        if not sizes or min(sizes) < 1 or max(sizes) > MAX_BATCH:
            raise ConfigError(f"--batch-sizes {batch_sizes!r}: each must be a whole number from "
                              f"1 to {MAX_BATCH}")
        if statistic not in STATISTICS:
            raise ConfigError(f"--statistic {statistic}; valid: {', '.join(STATISTICS)}")
        if width is not None and not 0 < width <= MAX_WIDTH:
            raise ConfigError(f"--width {width:g} is out of range; valid: above 0 and at most "
                              f"{MAX_WIDTH:g} (as a scenario's model.width)")
        if steps is not None and steps.is_file():
            from sflsim.hardware.steps_csv import check_appendable

            check_appendable(steps)
        import torch

        torch.set_num_threads(threads)
        if steps is not None:
            _write_steps(steps, list(dict.fromkeys(m.strip() for m in models.split(",")
                                                   if m.strip())), channels,
                         image_size, sizes, repeats, device_name, 1.0 if width is None else width,
                         classes, optimizer, statistic)
        if output is None:
            return
        t0 = time.perf_counter()
        data = measure_host(model, 0.25 if width is None else width, channels, image_size,
                            sizes, repeats, statistic=statistic)
        output.parent.mkdir(parents=True, exist_ok=True)
        took = math.ceil(time.perf_counter() - t0)
        output.write_text(f"# Written by sflsim profile-host ({took} s of measurement).\n"
                          + yaml.safe_dump(data, sort_keys=False, width=100))
        console.print(f"wrote {output} (sustained {data['sustained_flops']['value']})",
                      highlight=False)


def _check_outputs(output: Path | None, steps: Path | None) -> None:
    """Refuse an output file that cannot be written, before anything is measured (as
    sflsim run says it)."""
    from sflsim.metrics.results import check_output_file

    for path, option, example in ((output, "-o", "myhost.yaml"), (steps, "--steps", "steps.csv")):
        if path is not None:
            check_output_file(path, option, example)
    if output is not None and steps is not None and output.resolve() == steps.resolve():
        raise ConfigError(f"-o {output} and --steps {steps} are one file; the profile and the "
                          f"steps CSV need a file each")


def _write_steps(path: Path, models: list[str], channels: int, image_size: int,
                 sizes: tuple[int, ...], repeats: int, device: str, width: float, classes: int,
                 optimizer: str, statistic: str) -> None:
    """Measure the steps and append each row to ``path`` as soon as it is measured (an
    interrupted measurement keeps its rows)."""
    from sflsim.hardware.steps_csv import write_steps

    if not models:
        raise ConfigError("--models is empty; give registered model names, e.g. resnet18,vit")
    path.parent.mkdir(parents=True, exist_ok=True)
    total = len(models) * len(sizes)

    def on_row(row) -> None:
        write_steps(path, [row], append=True)
        done = on_row.count = getattr(on_row, "count", 0) + 1
        console.print(f"[{done}/{total}] {row.label}: {row.seconds_per_batch:.4g} s",
                      highlight=False)

    measure_steps(models, channels, image_size, sizes, repeats, device, width, classes,
                  optimizer, statistic, on_row=on_row)
    console.print(f"wrote {path} ({plural(total, 'step')})", highlight=False)
