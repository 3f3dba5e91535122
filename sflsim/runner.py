"""``run_scenario``: the one public entry point that builds and runs a simulation.

Seeds (STYLE.md §10): each stream's seed (``seeds.partition``, ``seeds.model``,
``seeds.training``, each ``seed`` unless given; see
:class:`~sflsim.config.schema.SeedsConfig` for what each drives) is split with
``numpy.random.SeedSequence`` into independent child seeds, one per use
(:data:`SEED_USES`), so changing one use or stream leaves the others alone.

Conditions (``scenario.conditions``): before each round, the ``conditions``
generator draws for every client in id order whether it drops out (Bernoulli,
``client_drop_prob``) and then its compute slowdown ``exp(N(0, sigma^2))``;
both are drawn every round whatever the settings, so the same seed gives the
same draws. See :meth:`sflsim.algorithms.base.Algorithm.run_round` for the deadline.

Round 0: before round 1 a fresh run evaluates the untrained models, on the same test
subset and in the same way as after a round, and records them as the first row of
``rounds.csv`` (``round`` 0, ``sim_time_s`` 0, no work, bytes or energy, ``note``
"untrained model"), so a time-to-accuracy curve starts at time 0. Evaluation changes
no model (``tests/test_evaluation_side_effects.py``), so training is as without it.
Timing-only runs record the row without accuracies. Round 0 is not a completed round:
``rounds_completed`` and the progress callback count rounds from 1, and
the clients and events tables start at round 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import math
import os
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch
from torch import nn

import sflsim.algorithms  # noqa: F401  (registers the algorithms)
import sflsim.models  # noqa: F401  (registers the backbones)
from sflsim import checkpoint
from sflsim.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    Client,
    RunContext,
    make_optimizer,
    make_scheduler,
)
from sflsim.algorithms.early_exit import run_early_exit, sweeps_early_exit, test_passes
from sflsim.availability import AvailabilityTrace, client_groups, read_availability
from sflsim.check import check_if_asked
from sflsim.config.algorithms import algorithms_with
from sflsim.config.load import check_timing_only
from sflsim.config.resolve import resolve_scenario
from sflsim.config.schema import Scenario
from sflsim.data import DatasetSplit, load_dataset, partition
from sflsim.engine import Server, Simulation, Trace, TraceEvent
from sflsim.errors import ConfigError, DivergenceError, SflsimError
from sflsim.hardware import profiles
from sflsim.hardware.profiles import DeviceProfile
from sflsim.memory import available_memory_bytes, check_fits, estimate_memory
from sflsim.metrics import records, results
from sflsim.models import StagedBackbone
from sflsim.models.layout import to_memory_format
from sflsim.models.registry import MODELS
from sflsim.network import Network
from sflsim.signals import uninterrupted
from sflsim.text import plural
from sflsim.work import Reporter, WorkPlan, ignore_work


class Progress(Protocol):
    """What the runner reports while it works (the CLI draws it).

    ``start`` comes first, with the training batches of the rounds still to run and the
    rounds of the run; ``advance`` after each training batch; ``round_done`` with each
    round's ``rounds.csv`` row as the round ends. A resumed run first reports the rows
    of the rounds in its checkpoint, each a copy with ``"from_checkpoint": True``.

    Optional: a ``round_started(round_, batches, sim_time_s)`` method, if the object has
    one, is called as each round begins, with the round (1-based), its training batches
    and a function that returns the simulated time (s) (``sflsim.cli.progress`` prints it);
    an ``evaluating(round_, test_samples)`` method is called when a round's training is done
    and its evaluation on ``test_samples`` test images begins.

    Every kind of work (:mod:`sflsim.work`): a ``plan(plan)`` method is called right after
    ``start`` with the run's :class:`~sflsim.work.WorkPlan` (the units of each kind a round
    is expected to make, the rounds evaluated); an object with a ``work_done(kind,
    sim_time_s, units=1)`` method gets every unit of work the run reports instead of
    ``advance``: training batches, server steps and test batches, each with the simulated
    time (s) at which its work completes (``kind`` None: no work, the simulated clock
    only; ``units`` > 1: units done on other threads, handed on together). Every call
    comes from the thread that called :func:`run_scenario`.
    """

    def start(self, total_batches: int, rounds: int) -> None: ...
    def advance(self) -> None: ...
    def round_done(self, row: dict) -> None: ...


@dataclass
class RunResult:
    """Everything a run produced; the same tables as the results directory.

    With a results directory the per-client rows and the events went to disk round by
    round (memory stays flat however many rounds run): :attr:`clients` and
    :attr:`events` read them back from there. Without one they are held in memory.
    """

    scenario: Scenario
    #: one dict per round (``rounds.csv``)
    round_rows: list[dict] = field(repr=False)
    #: per round, its clients-table rows as columns (empty when streamed to disk)
    client_columns: list[dict] = field(repr=False)
    #: the events held in memory (every one without a results directory)
    trace: Trace = field(repr=False)
    summary: dict
    output_dir: Path | None = None
    algorithm: Algorithm | None = field(default=None, repr=False)
    #: early-exit sweep (``early_exit.csv``), None when disabled or not applicable
    early_exit: pd.DataFrame | None = None

    # the tables are built on first use: large timing-only runs have millions of rows

    @functools.cached_property
    def rounds(self) -> pd.DataFrame:
        """One row per round (``rounds.csv``)."""
        return pd.DataFrame(self.round_rows)

    @functools.cached_property
    def clients(self) -> pd.DataFrame:
        """One row per client and round (``clients.parquet``)."""
        if self.output_dir is not None and not self.client_columns:
            return results.read_run_table(self.output_dir, "clients")
        return pd.concat([pd.DataFrame(c) for c in self.client_columns], ignore_index=True) \
            if self.client_columns else pd.DataFrame()

    @functools.cached_property
    def events(self) -> pd.DataFrame:
        """One row per simulated activity (``events.parquet``)."""
        if self.output_dir is not None and not len(self.trace):
            return results.read_run_table(self.output_dir, "events")
        return pd.DataFrame(self.trace.columns(), columns=TraceEvent._fields)


#: Each use of randomness that has a child seed -> the stream it belongs to. The order
#: numbers the children: use ``i`` is child ``i`` of its stream's ``SeedSequence``.
SEED_USES = {"partition": "partition", "model": "model", "batches": "training",
             "test_subset": "partition", "split": "training", "conditions": "training",
             "augment": "training", "sampling": "training"}


def child_seeds(scenario: Scenario) -> dict[str, int]:
    """The child seed of every use in :data:`SEED_USES`, from its stream's seed.

    With every stream at ``seed`` (no ``seeds`` given) these are the children of one
    ``SeedSequence(seed)``, as in runs made before ``seeds`` existed.
    """
    streams = scenario.stream_seeds._asdict()
    return {use: int(np.random.SeedSequence(streams[stream], spawn_key=(i,)).generate_state(1)[0])
            for i, (use, stream) in enumerate(SEED_USES.items())}


def build(scenario: Scenario) -> tuple[RunContext, Algorithm]:
    """Load data, partition it, build clients, models and the algorithm.

    The run is built from the resolved scenario (defaults such as ``server.slots``
    filled in: :func:`~sflsim.config.resolve.resolve_scenario`), which
    ``ctx.scenario`` holds.

    Raises:
        ConfigError / DatasetNotFoundError: the scenario cannot be built (too many
            clients for the data, a device whose model does not fit its memory, ...).
    """
    scenario = resolve_scenario(scenario)
    seeds = child_seeds(scenario)
    ds = scenario.dataset
    on = torch_device(scenario)  # where torch trains (``device`` is a hardware profile below)
    data = load_data(scenario)
    check_augment(scenario, data)
    parts = partition(data.y_train.numpy(), scenario.num_clients, scheme=ds.partition.scheme,
                      alpha=ds.partition.alpha, min_samples=1,
                      rng=np.random.default_rng(seeds["partition"]), domains=data.domain_train)
    backbone = build_backbone(scenario, data, seeds["model"])
    timing_only = scenario.training.timing_only
    check_timing_only(scenario)
    # a device that cannot hold its model: the more specific error, told before the host's
    # memory is asked (what the host has free must not decide which error a user sees)
    check_devices(scenario, backbone)
    if not timing_only:  # timing only reads no image
        data = hold_data(scenario, data, backbone)
    layout = memory_format(scenario)
    if on.type != "cpu" or layout != torch.contiguous_format:  # every model is a copy of these
        data = data_on(data, on, layout)
        to_memory_format(backbone.stages, layout, on)
        to_memory_format(backbone.head, layout, on)
    if not timing_only:  # timing only: one model per end layer, shared (nothing trains)
        # refuse what cannot fit before the per-client models are built (sflsim.memory)
        check_fits(estimate_memory(scenario, backbone, data), available_memory_bytes(on),
                   f"the GPU {on}" if on.type == "cuda" else "this machine")
    sim = Simulation()
    server_profile = profiles.server_profile(scenario.server.profile)
    if scenario.fleet is not None:  # one row per device (sflsim.fleet)
        from sflsim.fleet import load_fleet

        fleet = load_fleet(scenario.fleet)
        rank = [scenario.priority_of_group(g) for g in fleet.group_names]
        group_priority = [rank[k] for k in fleet.group.tolist()]
    else:
        group_priority = [scenario.priority_of_group(g) for g, group in scenario.devices.items()
                          for _ in range(group.count)]
    server = Server(sim, server_profile.sustained_flops.value,
                    scenario.server.slots or server_profile.slots, queue=scenario.server.queue,
                    priorities=dict(enumerate(group_priority)))
    network = Network(sim, scenario)  # star: one Link per client and direction, as always
    clients: list[Client] = []
    shared: dict[int, tuple[nn.Sequential, nn.Module]] = {}
    # one untrained client-side model and exit head per end layer where nothing trains
    # them: timing-only runs, and algorithms that keep their models elsewhere
    share = timing_only or not ALGORITHMS[scenario.algorithm.name].client_models
    if scenario.fleet is not None:  # one row per device, its own link figures
        devices = [(group_name, end_layer, device, network.star_links(cid, *rates))
                   for cid, (group_name, end_layer, device, rates)
                   in enumerate(fleet_clients(scenario, backbone))]
    else:
        devices = []
        for group_name, group in scenario.devices.items():
            device = profiles.device_profile(group.profile)
            for _ in range(group.count):
                devices.append((group_name, group.end_layer, device,
                                network.links_for(len(devices), group_name)))
    for cid, (group_name, end_layer, device, (uplink, downlink)) in enumerate(devices):
        # FedAvg trains the whole model and may name any end layer; its split
        # models are never used, so they stop at the last stage boundary
        end = min(end_layer, backbone.num_stages - 1)
        if share:
            if end not in shared:
                shared[end] = (backbone.client_model(end),
                               to_memory_format(backbone.exit_head(end), layout, on))
            (model, head), opt = shared[end], None
        else:
            model = backbone.client_model(end)
            head = to_memory_format(backbone.exit_head(end), layout, on)
            opt = make_optimizer([*model.parameters(), *head.parameters()],
                                 scenario.training.optimizer, scenario.training.optimizer.lr)
        clients.append(Client(
            client_id=cid, group=group_name, end_layer=end_layer, device=device,
            domain=client_domain(data, parts[cid]),
            uplink=uplink, downlink=downlink,  # type: ignore[arg-type]
            indices=parts[cid], model=model, exit_head=head, optimizer=opt,
            generator=torch.Generator().manual_seed(seeds["batches"] + cid),
            scheduler=None if opt is None else make_scheduler(opt, scenario),
        ))
    ctx = RunContext(scenario=scenario, data=data, backbone=backbone, sim=sim, server=server,
                     clients=clients, seeds=seeds, timing_only=timing_only)
    return ctx, ALGORITHMS[scenario.algorithm.name](ctx)


def hold_data(scenario: Scenario, data: DatasetSplit, backbone: StagedBackbone) -> DatasetSplit:
    """Decode a dataset read from image files into memory, or keep it on disk.

    ``dataset.storage``: ``memory`` decodes every image once (uint8); ``disk`` keeps
    the files and decodes each batch when it is read
    (:class:`~sflsim.data.images.DiskImages`); ``auto`` decodes into memory when the
    run's memory estimate (:func:`~sflsim.memory.estimate_memory`) with the images in
    memory fits :func:`~sflsim.memory.available_memory_bytes`, and keeps them on disk
    otherwise (the runner then checks that the run fits that way). Either way the
    images, and so the results, are the same. Datasets read as arrays are in memory
    already and are returned as they are.

    Raises:
        ConfigError: ``storage: memory`` and the run does not fit with the images in
            memory (before any is decoded).
    """
    if not data.on_disk:
        return data
    storage = scenario.dataset.storage
    if storage == "disk":
        return data
    held, available = estimate_memory(scenario, backbone, data, on_disk=False), \
        available_memory_bytes()
    if storage == "auto" and held.total_bytes > available:
        return data
    check_fits(held, available)  # storage: memory: refused before decoding what cannot fit
    return data.in_memory()


def run_data(scenario: Scenario) -> DatasetSplit:
    """The dataset as :func:`build` holds it (loaded, decoded or not, on the training
    device), for a run resumed from its checkpoint."""
    data = load_data(scenario)
    if not scenario.training.timing_only and data.on_disk:
        data = hold_data(scenario, data, build_backbone(scenario, data,
                                                        child_seeds(scenario)["model"]))
    return data_on(data, torch_device(scenario), memory_format(scenario))


def data_on(data: DatasetSplit, device: torch.device,
            layout: torch.memory_format = torch.contiguous_format) -> DatasetSplit:
    """``data`` with its four tensors on ``device`` (uint8 images ``(N, C, H, W)`` in
    ``layout``), handing out its batches there, in that layout (images on disk stay
    there; their batches are moved when decoded)."""
    return dataclasses.replace(
        data, device=device, memory_format=layout,
        **{k: getattr(data, k).to(device) for k in ("y_train", "y_test")},
        **{k: x.to(device, memory_format=layout) for k in ("x_train", "x_test")
           if isinstance(x := getattr(data, k), torch.Tensor)})


def client_domain(data: DatasetSplit, indices: np.ndarray) -> str | None:
    """The name of the domain of a client's samples (the clients table's ``domain``), None
    for a dataset without domains; several names joined by ``+`` if the partition mixed
    domains (not under the ``domain`` scheme)."""
    if data.domain_train is None or not len(indices):
        return None
    ids = np.unique(data.domain_train[indices])
    return "+".join(data.domain_names[i] for i in ids)


def memory_format(scenario: Scenario) -> torch.memory_format:
    """``torch.channels_last`` with ``training.channels_last``, else contiguous (NCHW)."""
    return torch.channels_last if scenario.training.channels_last else torch.contiguous_format


def torch_device(scenario: Scenario, cpu_advice: str = "--device cpu") -> torch.device:
    """The torch device of ``training.device``; ``cpu_advice``: how the caller's user asks
    for the CPU instead (a sweep: ``--set training.device=cpu``), named when CUDA is absent.

    Raises:
        ConfigError: CUDA asked for but absent (or that GPU index missing), or an
            algorithm that cannot yet move all its models there.
    """
    name = scenario.training.device
    device = torch.device(name)
    if scenario.training.timing_only:  # no torch step runs: nothing to place
        return torch.device("cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"training.device: {name!r} but torch finds no CUDA GPU on this "
                              f"machine (torch {torch.__version__}, CUDA build "
                              f"{torch.version.cuda or 'none'}); use cpu ({cpu_advice})")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            valid = ", ".join(f"cuda:{i}" for i in range(count))
            raise ConfigError(f"training.device: {name!r} but this machine has "
                              f"{plural(count, 'CUDA GPU')}; valid: cuda, {valid}")
        if not scenario.algorithm.supports("cuda"):
            raise ConfigError(f"training.device: {name!r} is not available for "
                              f"{scenario.algorithm.name!r} yet; valid algorithms: "
                              f"{', '.join(algorithms_with('cuda'))}")
    return device


def build_backbone(scenario: Scenario, data: DatasetSplit, seed: int) -> StagedBackbone:
    """The scenario's backbone for this dataset's images, initialised from ``seed``.

    Raises:
        ConfigError: the model does not fit the data (e.g. a ViT patch size that
            does not divide the image size).
    """
    try:
        return MODELS[scenario.model.name](
            in_channels=data.in_channels, image_size=data.image_size, num_classes=data.num_classes,
            width=scenario.model.width, seed=seed, **scenario.model.builder_kwargs(),
        )
    except ValueError as exc:
        raise ConfigError(f"model: {exc} (dataset {scenario.dataset.name} has "
                          f"{data.image_size}x{data.image_size} images)") from None


def load_data(scenario: Scenario) -> DatasetSplit:
    """Load the scenario's dataset and check it has a sample for every client.

    Raises:
        DatasetNotFoundError: the files are missing (says where it looked).
        ConfigError: more clients than training samples.
    """
    ds = scenario.dataset
    data = load_dataset(ds.name, data_root=ds.data_root, fraction=ds.fraction,
                        test_fraction=ds.test_fraction,
                        seed=scenario.stream_seeds.partition, image_size=ds.image_size,
                        domains=ds.domains, download=ds.download, synthetic=ds.synthetic,
                        channels=ds.channels)
    n_train = len(data.y_train)
    if scenario.num_clients > n_train:
        counts = (", ".join(f"{k}: {g.count}" for k, g in scenario.devices.items())
                  or f"fleet {scenario.fleet}")
        more = ("dataset.synthetic.train_samples or dataset.fraction" if ds.name == "synthetic"
                else "dataset.fraction (a timing-only run can use dataset.name: synthetic)")
        raise ConfigError(
            f"devices: {plural(scenario.num_clients, 'client')} in total ({counts}) but {ds.name} "
            f"with dataset.fraction={ds.fraction} has only {plural(n_train, 'training sample')}; "
            f"every client needs at least one: lower devices.*.count or raise {more}"
        )
    return data


def check_augment(scenario: Scenario, data: DatasetSplit) -> None:
    """Refuse a crop padding wider than the images (a crop would then mostly show padding).

    Raises:
        ConfigError: naming the field, the value and the image side.
    """
    augment = scenario.dataset.augment
    pad = augment.random_crop_padding if augment is not None else 0
    if pad > data.image_size:
        raise ConfigError(f"dataset.augment.random_crop_padding: {pad} pixels is more than the "
                          f"side of {scenario.dataset.name}'s {data.image_size}x{data.image_size} "
                          f"images; valid: 0 to {data.image_size} (Hetero-SplitEE pads 4)")


def fleet_clients(scenario: Scenario, backbone: StagedBackbone
                  ) -> Iterator[tuple[str, int, object, tuple[float, float, float]]]:
    """Each fleet row (:mod:`sflsim.fleet`) as ``(group, end layer, device, (uplink bit/s,
    downlink bit/s, one-way latency s))``, in client order. ``train_s_per_sample`` becomes
    FLOP/s on the scenario's whole model: its forward + backward FLOPs per sample / it."""
    from sflsim.fleet import load_fleet
    from sflsim.models.cost import count_flops

    fleet = load_fleet(scenario.fleet)
    per_sample = None
    if np.isnan(fleet.figures["flops_per_s"]).any():
        whole = nn.Sequential(*backbone.stages, backbone.head)
        per_sample = count_flops(whole, backbone.input_shape).train_flops(1)
    devices = fleet.devices(per_sample)
    ends = fleet.end_layers(scenario.fleet_end_layer or 1).tolist()
    names = fleet.group_names
    f = fleet.figures
    rates = zip(f["uplink_bps"].tolist(), f["downlink_bps"].tolist(), f["latency_s"].tolist())
    for k, end, device, rate in zip(fleet.group.tolist(), ends, devices, rates):
        yield names[k], end, device, rate


def check_devices(scenario: Scenario, backbone: StagedBackbone) -> None:
    """Refuse a device group whose client-side model cannot train in its device's memory
    (:func:`check_memory` for each group), before anything is built per client and
    before the host's memory is checked.

    Raises:
        ConfigError: the first group that does not fit.
    """
    if scenario.fleet is not None:
        check_fleet_memory(scenario, backbone)
    for group_name, group in scenario.devices.items():
        end = min(group.end_layer, backbone.num_stages - 1)
        # the backbone's own stages (a view, not a copy) and the group's exit head
        check_memory(backbone.stages[:end], backbone.exit_head(end),
                     profiles.device_profile(group.profile), backbone.input_shape,
                     scenario.training.batch_size, group_name, group.end_layer)


def check_fleet_memory(scenario: Scenario, backbone: StagedBackbone) -> None:
    """Refuse the first fleet row whose client-side model cannot train in its memory
    (the estimate of :func:`check_memory`, once per end layer).

    Raises:
        ConfigError: naming the file, the row, the estimate and the memory.
    """
    from sflsim.fleet import load_fleet

    fleet = load_fleet(scenario.fleet)
    ends = fleet.end_layers(scenario.fleet_end_layer or 1)
    memory = fleet.figures["memory_bytes"]
    batch = scenario.training.batch_size
    for end_layer in np.unique(ends).tolist():
        end = min(end_layer, backbone.num_stages - 1)
        need = memory_need_bytes(backbone.stages[:end], backbone.exit_head(end),
                                 backbone.input_shape, batch)
        short = np.flatnonzero((ends == end_layer) & (memory < need))
        if len(short):
            i = int(short[0])
            raise ConfigError(
                f"fleet: {scenario.fleet} row {fleet.row(i)}, memory_bytes: training the "
                f"client-side model at end layer {end_layer} with batch {batch} needs about "
                f"{need / 2**20:.0f} MiB but the device has {memory[i] / 2**20:.0f} MiB "
                f"({plural(len(short), 'row')} short); valid: at least {need:.0f} bytes, or "
                f"lower training.batch_size, model.width or the end layer")


def memory_need_bytes(model: nn.Module, exit_head: nn.Module, input_shape: tuple[int, ...],
                      batch_size: int) -> float:
    """Bytes to train ``model`` and ``exit_head`` on one batch (:func:`check_memory`)."""
    from sflsim.models.cost import count_flops

    params = sum(p.numel() for m in (model, exit_head) for p in m.parameters())
    # shapes only, from the FLOP counter (on the meta device, cached): counted as the
    # client-side model's cost will count them, stage by stage
    shape, needs_grad, act_numel = tuple(input_shape), False, 0
    for stage in model:
        cost = count_flops(stage, shape, input_requires_grad=needs_grad)
        shape, act_numel = cost.output_shape, act_numel + cost.output_numel
        needs_grad = needs_grad or any(p.requires_grad for p in stage.parameters())
    return 4 * 4 * params + 4 * 4 * act_numel * batch_size


def check_memory(model: nn.Module, exit_head: nn.Module, device: DeviceProfile,
                 input_shape: tuple[int, ...], batch_size: int, group_name: str,
                 end_layer: int) -> None:
    """Refuse a client-side model that cannot train in its device's memory.

    Estimate (bytes, fp32): parameters x 4 (weights, gradients, two Adam moments)
    plus the activations of one batch kept for backward (each stage output x 4,
    for the tensors inside its blocks).

    Raises:
        ConfigError: naming the device group, the estimate and the memory.
    """
    need = memory_need_bytes(model, exit_head, input_shape, batch_size)
    memory = device.memory_bytes.value
    if need > memory:
        raise ConfigError(
            f"devices.{group_name}: training the client-side model at end layer "
            f"{end_layer} with batch {batch_size} needs about {need / 2**20:.0f} MiB "
            f"but {device.name} has {memory / 2**20:.0f} MiB; lower training.batch_size, "
            f"model.width or devices.{group_name}.end_layer"
        )


def run_scenario(scenario: Scenario, output_dir: str | Path | None = None, *,
                 progress: Progress | None = None, resume: bool = False,
                 overwrite: bool = False) -> RunResult:
    """Simulate ``scenario`` and train its models; write results to ``output_dir`` if given.

    After every completed round the tables and a checkpoint (:mod:`sflsim.checkpoint`)
    are written atomically, so a run stopped at any point, even by SIGKILL, can be
    continued with ``resume=True`` and then gives the same ``rounds.csv`` as an
    uninterrupted run (apart from wall-clock columns). Torch runs with deterministic
    algorithms where they exist.

    Args:
        resume: continue the run in ``output_dir`` from its checkpoint (the scenario
            must be the one it was started with).
        overwrite: replace the results already in ``output_dir`` (only sflsim's own
            files are removed, and only once the scenario has been built).

    Returns:
        A :class:`RunResult` whose ``scenario`` is the resolved one (as in
        ``scenario.yaml``: run-time defaults filled in); on KeyboardInterrupt the
        results directory keeps every completed round (``summary.json`` says
        ``"status": "interrupted"``) and the interrupt is re-raised.

    Raises:
        ConfigError / DatasetNotFoundError: the scenario cannot be built.
        SflsimError: ``output_dir`` already holds results (without ``overwrite`` or
            ``resume``), another run, sweep or export holds it
            (:func:`sflsim.metrics.results.hold_folder`: one at a time), the run would
            write over or delete a file it reads (a trace, a profile, a split schedule:
            :func:`sflsim.metrics.results.refuse_writing_inputs`, with ``overwrite``
            too), or there is no matching, undamaged checkpoint to resume.
        DivergenceError: a loss or parameter became NaN or infinite; the completed
            rounds are kept and ``summary.json`` says ``"status": "diverged"``.
        Exception: anything else raised during the rounds is re-raised after the
            completed rounds are written; ``summary.json`` says ``"status": "failed"``
            with ``"error"`` (type, message, round; see :func:`failure_record`) and the
            traceback is in ``traceback.txt``. Only KeyboardInterrupt (Ctrl-C, SIGTERM)
            leaves ``"interrupted"``.
    """
    out = Path(output_dir) if output_dir is not None else None
    # what the run uses, written to scenario.yaml and compared on resume
    scenario = resolve_scenario(scenario)
    if resume and out is None:
        raise SflsimError("resume needs the results directory of the run to continue")
    if out is not None:  # before the (slow) build: a folder in use, a file the run reads
        results.check_not_held(out)
        results.refuse_writing_inputs(out, results.run_writes(resume, rewrites_scenario=False),
                                      results.scenario_inputs(scenario))
    if out is not None and not (resume or overwrite):
        results.refuse_existing(out)  # before the (slow) build
    # one run, sweep or export at a time in a results folder (results.hold_folder)
    with deterministic_torch(), fewer_gc_passes(), \
            results.hold_folder(out) if out is not None else contextlib.nullcontext():
        if resume:
            state = checkpoint.load_checkpoint(
                out / checkpoint.CHECKPOINT, scenario.model_dump(mode="json"),  # type: ignore[operator]
                run_data(scenario), ignore_work)  # the run's reporter replaces it
            # equal to the checkpoint's scenario but for host-only fields (parallel clients)
            # and training.rounds (a run extended: sflsim.checkpoint.load_checkpoint)
            if state.ctx.scenario.training.rounds != scenario.training.rounds:
                results.write_scenario(out / "scenario.yaml", scenario.model_dump(mode="json"))
            state.ctx.scenario = state.algorithm.scenario = scenario
            (out / results.TRACEBACK_FILE).unlink(missing_ok=True)  # of an earlier failure
            wall_start = time.perf_counter() - state.wall_time_s
        else:
            wall_start = time.perf_counter()
            ctx, algorithm = build(scenario)  # bad input fails here, before anything is written
            state = checkpoint.RunState(
                round=0, ctx=ctx, algorithm=algorithm, round_rows=[],
                conditions_rng=np.random.default_rng(child_seeds(scenario)["conditions"]),
                wall_time_s=0.0)
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                if not overwrite:  # held now: results another run wrote meanwhile stay
                    results.refuse_existing(out)
                results.clear_results(out)
                results.write_scenario(out / "scenario.yaml", scenario.model_dump(mode="json"))
                results.write_json(out / "manifest.json", {
                    **results.manifest(scenario.seed),
                    "seeds": scenario.stream_seeds._asdict(),
                    # what the files gave where the scenario leaves it open (image_folder:
                    # image_size and channels null follow the images)
                    "dataset": {"train_samples": len(ctx.data.y_train),
                                "test_samples": len(ctx.data.y_test),
                                "num_classes": ctx.data.num_classes,
                                "channels": ctx.data.in_channels,
                                "image_size": ctx.data.image_size}})
        result = _run_rounds(state, out, progress, wall_start)
    check_if_asked(result)  # SFLSIM_CHECK_RESULTS=1 (the tests): physics and bookkeeping
    return result


@contextlib.contextmanager
def fewer_gc_passes() -> Iterator[None]:
    """Python's cycle collector, less often, for the block (then as before).

    A run allocates millions of short-lived SimPy events while the trace and the
    rows it keeps grow; at the default thresholds (700, 10, 10) the collector scans
    those long-lived objects again and again (40% of a 10,000-device timing-only
    run, ``benchmarks/timing_scale.py``). Unreachable cycles are still collected.
    """
    before = gc.get_threshold()
    gc.set_threshold(50_000, 20, 1_000)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def deterministic_torch() -> Iterator[None]:
    """Torch deterministic algorithms (where they exist; others warn) for the block,
    then the previous setting."""
    before, warn = torch.are_deterministic_algorithms_enabled(), \
        torch.is_deterministic_algorithms_warn_only_enabled()
    # cuBLAS is deterministic only with a fixed workspace (read when CUDA starts)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    # deterministic mode also fills every new tensor with NaN (10% of CPU time here);
    # sflsim never reads memory it has not written, so results stay the same without it
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def _run_rounds(state: checkpoint.RunState, out: Path | None, progress: Progress | None,
                wall_start: float) -> RunResult:
    """The round loop from ``state.round + 1`` (see :func:`run_scenario`)."""
    ctx, algorithm, scenario = state.ctx, state.algorithm, state.ctx.scenario
    sim, cfg = ctx.sim, scenario
    seeds = child_seeds(scenario)
    # the evaluation's test samples: uint8 images, normalised a batch at a time
    keep, n_test = None, len(ctx.data.y_test)
    if cfg.evaluation.max_test_samples and cfg.evaluation.max_test_samples < n_test:
        keep = np.sort(np.random.default_rng(seeds["test_subset"]).permutation(n_test)
                       [: cfg.evaluation.max_test_samples])
    x_test, y_test = ctx.data.test_subset(keep)
    end_layers = {c.client_id: c.end_layer for c in ctx.clients}
    reporter: Reporter | None = None
    ctx.on_batch = ignore_work
    if progress is not None:
        reporter = Reporter(getattr(progress, "work_done", None), progress.advance,
                            lambda: sim.now_s)
        ctx.on_batch = reporter
        progress.start(batches_per_round(algorithm) * (cfg.training.rounds - state.round),
                       cfg.training.rounds)
        plan = getattr(progress, "plan", None)  # optional (see Progress)
        if plan is not None:
            plan(work_plan(algorithm, state.round, fresh=not state.round_rows))
        for row in state.round_rows:
            if row["round"] >= 1:  # round 0 is the untrained model, not a round done
                progress.round_done({**row, "from_checkpoint": True})
    round_started = getattr(progress, "round_started", None)  # optional (see Progress)
    evaluating = getattr(progress, "evaluating", None)  # optional (see Progress)

    round_rows = state.round_rows
    totals = Totals(round_rows)  # summary.json's sums, kept as rounds are added
    timing_only = ctx.timing_only
    availability = read_availability(cfg.conditions.availability, client_groups(cfg)) \
        if cfg.conditions.availability else None
    # who takes part is decided each round only with sampling or availability
    participation = availability is not None or cfg.training.clients_per_round is not None
    table = records.ClientTable(ctx.clients, cfg.energy)  # energy rules: EnergyConfig
    # with a results directory each round's rows go to disk and leave memory
    tables = results.RunTables(out) if out is not None else None
    client_columns: list[dict] = []
    events_done = sim.trace.dropped  # activities of the completed rounds (resumed: before too)
    if tables is not None:
        tables.keep_rounds(state.round)  # resumed: rounds after the checkpoint are redone
        tables.write_rounds(round_rows)
    status, note, failure = "interrupted", None, {}
    passes = None  # the last round's test passes, for the early-exit sweep
    early_exit, early_exit_note = None, None
    try:
        if not round_rows:  # a fresh run: round 0, the untrained model at simulated time 0
            accs = None if timing_only else algorithm.evaluate(x_test, y_test,
                                                               cfg.evaluation.batch_size)
            if reporter is not None:
                reporter.flush()  # test batches of host threads
            round_rows.append(records.round_row(0, [], [], sim.now_s, sim.now_s,
                                                time.perf_counter() - wall_start, accs, end_layers))
            totals.add(round_rows[-1])
        for r in range(state.round + 1, cfg.training.rounds + 1):
            sim.round, start_s, first_event = r, sim.now_s, len(sim.trace)
            if round_started is not None:
                round_started(r, batches_per_round(algorithm), lambda: sim.now_s)
            first_loss = len(algorithm.losses)
            algorithm.dropped, algorithm.slowdowns = draw_conditions(state.conditions_rng, cfg,
                                                                     len(ctx.clients))
            deadline_s = cfg.conditions.round_deadline_s  # counts from start_s, the wait too
            if participation:  # the round starts by waiting for an online client, if none is
                algorithm.absent, algorithm.offline_at = round_participants(
                    cfg, availability, seeds["sampling"], r,
                    wait_for_clients(sim, availability, start_s,
                                     None if deadline_s is None else start_s + deadline_s))
                algorithm.dropped |= set(algorithm.absent)
                if cfg.training.over_commit > 1:  # the first to finish are kept
                    algorithm.keep_first = cfg.training.participants(len(ctx.clients))
            with gc_paused():  # a round makes millions of short-lived objects, no cycles to keep
                sim.run_until(algorithm.run_round(r, deadline_s, start_s=start_s))
            accs = None
            if not timing_only:
                if len(algorithm.dropped) < len(ctx.clients):  # nothing to aggregate otherwise
                    algorithm.end_round(r)
                algorithm.check_parameters()
                algorithm.step_schedulers()
                evaluate_now = r % cfg.evaluation.every_rounds == 0 or r == cfg.training.rounds
                if evaluate_now and evaluating is not None:
                    evaluating(r, len(y_test))
                if r == cfg.training.rounds and sweeps_early_exit(algorithm):
                    # the early-exit sweep reuses these passes over the test set
                    accs, passes = test_passes(algorithm, x_test, y_test,
                                               cfg.evaluation.batch_size)
                elif evaluate_now:
                    accs = algorithm.evaluate(x_test, y_test, cfg.evaluation.batch_size)
                if reporter is not None:
                    reporter.flush()  # test batches of host threads
            sim.trace.sort_from(first_event)
            events = sim.trace.columns(first_event)
            losses = records.mean_losses(algorithm.losses[first_loss:])
            c_cols = records.client_round_columns(
                r, events, table, start_s, sim.now_s, accs, losses, algorithm.cuts,
                algorithm.activated_params_by_client(),
                algorithm.status, algorithm.slowdowns)
            extra = algorithm.client_columns(r)
            if extra:
                names = list(dict.fromkeys(k for cols in extra.values() for k in cols))
                nan = float("nan")
                for name in names:
                    c_cols[name] = [extra.get(i, {}).get(name, nan) for i in table.ids]
            row = records.round_row(r, events, c_cols, start_s, sim.now_s,
                                    time.perf_counter() - wall_start, accs, end_layers, losses)
            growth = records.loss_growth_note(round_rows, row)
            if growth:
                row["note"] = "; ".join(n for n in (row["note"], growth) if n)
            with uninterrupted():  # Ctrl-C/SIGTERM wait until the round is on disk
                round_rows.append(row)
                totals.add(row)
                events_done += len(events["seq"])
                state.round, state.wall_time_s = r, time.perf_counter() - wall_start
                if tables is None:
                    client_columns.append(c_cols)
                else:
                    tables.add_round(r, c_cols, events)
                    sim.trace.drop()
                    # a trained round's tables go to disk at once, before the checkpoint
                    # lists it; a timing-only run's rounds share a file (RunTables)
                    if not timing_only or tables.due():
                        tables.flush(round_rows)
                        if not timing_only:  # the checkpoint: the truth on resume
                            checkpoint.save_checkpoint(out / checkpoint.CHECKPOINT, state)
                        # "running" until the run ends: a run killed outright says how far it got
                        results.write_json(out / "summary.json", summarize(
                            scenario, totals, "running", state.wall_time_s))
            if progress is not None:
                progress.round_done(row)
        # after the last round, so training results are untouched (sflsim.algorithms.early_exit)
        if not timing_only:
            early_exit, early_exit_note = run_early_exit(algorithm, x_test, y_test, passes)
        if out is not None and early_exit is not None:
            results.write_table(out / "early_exit.csv", early_exit)
        status = "completed"
    except DivergenceError as exc:
        status, note = "diverged", str(exc)
        raise
    except Exception as exc:  # a defect or a broken host, not the user: keep what finished
        status, failure = "failed", failure_record(exc, sim.round, out)
        raise
    finally:
        summary = summarize(scenario, totals, status, time.perf_counter() - wall_start)
        summary["events"] = events_done
        if state.rounds_before:  # resumed with another training.rounds
            summary["rounds_before"] = state.rounds_before
            summary["lr_schedule_horizon_rounds"] = algorithm.schedule_horizon_rounds()
        if note is not None:
            summary["diverged"] = note
        if status == "failed":
            summary["error"] = failure
        if early_exit_note is not None:
            summary["early_exit"] = early_exit_note
        if out is not None:
            with uninterrupted():
                tables.flush(round_rows)  # the rounds held, if any, and rounds.csv
                results.write_json(out / "summary.json", summary)
    return RunResult(
        scenario=scenario, round_rows=round_rows, client_columns=client_columns,
        trace=sim.trace, summary=summary, output_dir=out,
        algorithm=algorithm, early_exit=early_exit,
    )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off for the block (a round: SimPy's events and processes
    are freed by reference counting as they finish), then on as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def failure_record(exc: BaseException, round_: int, out: Path | None) -> dict:
    """``summary.json``'s ``"error"`` of a run that failed in ``round_`` (1-based, the round
    in progress): the exception's type and message, and, with a results directory, the
    file its traceback was written to (:data:`sflsim.metrics.results.TRACEBACK_FILE`)."""
    record = {"type": type(exc).__name__, "message": str(exc), "round": round_}
    if out is not None:
        try:
            text = "".join(traceback.format_exception(exc))
            (out / results.TRACEBACK_FILE).write_text(text)
            record["traceback"] = results.TRACEBACK_FILE
        except OSError:  # a full disk must not hide the original error
            pass
    return record


def batches_per_round(algorithm: Algorithm) -> int:
    """Training batches of a round, for progress bars: the algorithm's count for all
    clients, scaled to the clients sampled each round (``training.clients_per_round``)."""
    training, n = algorithm.scenario.training, len(algorithm.ctx.clients)
    return math.ceil(algorithm.batches_per_round() * training.participants(n) / max(n, 1))


def work_per_round(algorithm: Algorithm) -> dict[str, float]:
    """Units of work of each kind (:mod:`sflsim.work`) expected in a round: the
    algorithm's :meth:`~sflsim.algorithms.base.Algorithm.work_per_round` for all
    clients, scaled to the clients sampled each round (``training.clients_per_round``)."""
    training, n = algorithm.scenario.training, len(algorithm.ctx.clients)
    share = training.participants(n) / max(n, 1)
    return {kind: math.ceil(units * share) for kind, units in algorithm.work_per_round().items()
            if units}


def work_plan(algorithm: Algorithm, rounds_done: int, *, fresh: bool) -> WorkPlan:
    """The :class:`~sflsim.work.WorkPlan` of a run with ``rounds_done`` rounds in its
    checkpoint (0: none); ``fresh``: the untrained model is evaluated first (round 0).
    A timing-only run evaluates nothing."""
    cfg = algorithm.scenario
    rounds, every = cfg.training.rounds, cfg.evaluation.every_rounds
    evaluated: tuple[int, ...] = ()
    if not algorithm.ctx.timing_only:
        evaluated = ((0,) if fresh else ()) + tuple(
            r for r in range(rounds_done + 1, rounds + 1) if r % every == 0 or r == rounds)
    return WorkPlan(rounds=rounds, first_round=rounds_done + 1,
                    per_round=work_per_round(algorithm), evaluated_rounds=evaluated)


def wait_for_clients(sim: Simulation, availability: AvailabilityTrace | None,
                     now_s: float, deadline_at_s: float | None = None) -> float:
    """With no client online at ``now_s`` (a round's start), advance the simulated clock
    to the first instant one comes online (nothing else happens meanwhile: the wait is
    part of the round's time, the devices idle); returns the instant (s) whose online
    clients take part in the round: that one, or ``now_s`` when one is online or none
    ever will be.

    Args:
        deadline_at_s: the round's deadline instant (s of simulated time; its start plus
            ``conditions.round_deadline_s``), None for none. The deadline counts from the
            round's start, so the wait is part of it: when no client comes online before
            it (or none ever will again: past the trace's end), the clock stops at the
            deadline and ``now_s`` is returned (no client is online then, so none takes
            part and the round ends there). A client that
            comes online at the deadline instant could do no work before it and does
            not take part.
    """
    if availability is None or any(availability.online(c, now_s)
                                   for c in range(availability.num_clients)):
        return now_s
    nxt = availability.next_online_after(now_s)
    if deadline_at_s is not None and (nxt is None or nxt >= deadline_at_s):
        sim.env.run(until=deadline_at_s)
        return now_s
    if nxt is None:  # past the trace's last online instant, and no deadline: 0 s rounds
        return now_s
    sim.env.run(until=nxt)
    return sim.now_s


def round_participants(scenario: Scenario, availability: AvailabilityTrace | None, seed: int,
                       round_: int, start_s: float) -> tuple[dict[int, str], dict[int, float]]:
    """Who takes part in ``round_`` (starting at ``start_s``), the same for every
    algorithm: clients online at the start (``conditions.availability``), of which
    ``training.clients_per_round`` (times ``training.over_commit``, rounded up) are drawn
    uniformly without replacement (all of them when fewer are online) by a generator
    seeded from ``SeedSequence(seed, spawn_key=(round_,))``, so a resumed or timing-only
    run draws the same clients.

    Returns:
        (``{client_id: "offline" | "not_sampled"}`` for those who sit the round out,
        ``{client_id: simulated time (s) it goes offline}`` for participants whose
        online interval ends during the round's span, whenever that ends).
    """
    n = scenario.num_clients
    online = {c: math.inf for c in range(n)} if availability is None else {
        c: t for c in range(n) if (t := availability.offline_at(c, start_s)) is not None}
    absent = {c: "offline" for c in range(n) if c not in online}
    training = scenario.training
    k = math.ceil(training.participants(n) * training.over_commit - 1e-9)  # FedScale's draw
    ids = sorted(online)
    if k < len(ids):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(round_,)))
        chosen = set(int(c) for c in rng.choice(ids, size=k, replace=False))
        absent.update({c: "not_sampled" for c in ids if c not in chosen})
    offline_at = {c: t for c, t in online.items() if c not in absent and math.isfinite(t)}
    return dict(sorted(absent.items())), offline_at


def draw_conditions(rng: np.random.Generator, scenario: Scenario, num_clients: int
                    ) -> tuple[set[int], dict[int, float]]:
    """One round's (dropped client ids, ``{client_id: compute slowdown}``): per client in id
    order, one uniform for the dropout and one standard normal for the slowdown."""
    cond = scenario.conditions
    dropped, slowdowns = set(), {}
    if cond.client_drop_prob == 0 and cond.straggler_sigma == 0:
        return dropped, slowdowns  # nobody drops, nobody slows down: no draw is needed
    for cid in range(num_clients):
        if rng.random() < cond.client_drop_prob:
            dropped.add(cid)
        slowdowns[cid] = float(np.exp(cond.straggler_sigma * rng.standard_normal()))
    return dropped, slowdowns


class Totals:
    """The sums and last evaluated round of ``summary.json``, kept as rounds are added,
    so writing the summary after a round costs the same in round 10 as in round 10,000."""

    SUMMED = ("bytes_up", "bytes_down", "client_flops", "server_flops", "client_energy_j")

    def __init__(self, rows: list[dict] = ()) -> None:
        self.sums = dict.fromkeys(self.SUMMED, 0)
        self.trained, self.last, self.final = 0, {}, {}
        for row in rows:
            self.add(row)

    def add(self, row: dict) -> None:
        """Count one ``rounds.csv`` row (in round order)."""
        for k in self.SUMMED:
            self.sums[k] += row[k]
        self.last = row
        if row["round"] >= 1:
            self.trained += 1
            if not math.isnan(row["server_accuracy"]):
                self.final = row


def summarize(scenario: Scenario, totals: Totals, status: str, wall_time_s: float) -> dict:
    """Final numbers of a run for ``summary.json`` from ``totals`` of its rounds (round 0,
    the untrained model, is not a completed round and gives no final accuracy)."""
    final = totals.final
    return {
        "name": scenario.name, "algorithm": scenario.algorithm.name, "seed": scenario.seed,
        "status": status, "rounds_completed": totals.trained,
        "rounds_planned": scenario.training.rounds,
        "num_clients": scenario.num_clients,
        "sim_time_s": totals.last.get("sim_time_s", 0.0), "wall_time_s": wall_time_s,
        "final_server_accuracy": final.get("server_accuracy"),
        "final_client_accuracy": final.get("client_accuracy"),
        "final_accuracy_by_end_layer": {
            k: v for k, v in final.items() if k.startswith(("server_accuracy_l", "client_accuracy_l"))
        },
        **totals.sums,
    }
