"""Building a run (:func:`build`): the data and its partition, the backbone, the server,
the network, every client with its model and optimizer, and the algorithm, from the
resolved scenario; and the dataset alone as the build holds it, for a resumed run
(:func:`run_data`)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

import sflsim.algorithms  # noqa: F401  (registers the algorithms)
import sflsim.models  # noqa: F401  (registers the backbones)
from sflsim.algorithms.base import ALGORITHMS, Algorithm, Client, RunContext
from sflsim.algorithms.context import make_scheduler
from sflsim.algorithms.operator_times import StageOperators, operator_rate, with_rate
from sflsim.config.load import check_timing_only
from sflsim.config.resolve import resolve_scenario
from sflsim.config.scenario import Scenario
from sflsim.data import DatasetSplit, partition
from sflsim.engine import Server, Simulation
from sflsim.errors import ConfigError
from sflsim.execution.local_steps import make_optimizer
from sflsim.execution.strategy import choose_execution
from sflsim.hardware import profiles
from sflsim.memory import available_memory_bytes, check_fits, estimate_memory
from sflsim.models import StagedBackbone
from sflsim.models.layout import to_memory_format
from sflsim.models.registry import MODELS
from sflsim.network import Network
from sflsim.network.topology import AccessPointSpec, LinkSpec
from sflsim.run.batch_checks import check_one_sample_batches
from sflsim.run.data import check_augment, client_domain, hold_data, load_data
from sflsim.run.device_memory import check_devices
from sflsim.run.placement import data_on, memory_format, torch_device
from sflsim.run.seeds import child_seeds


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
    with allocations_named(scenario):
        return _build(scenario)


@contextlib.contextmanager
def allocations_named(scenario: Scenario) -> Iterator[None]:
    """Turn an allocation that fails while the run is built (a model or an algorithm's
    part sized far beyond the host's memory) into one message naming the sizes set.

    Raises:
        ConfigError: torch or Python could not allocate the memory asked for.
    """
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        text = str(exc)
        if not isinstance(exc, MemoryError) and "allocate" not in text:
            raise
        asked = re.search(r"allocate (\d+) bytes", text)
        sizes = [f"{where}.{name}: {value}"
                 for where, part in (("model", scenario.model), ("algorithm", scenario.algorithm))
                 for name, value in part.model_dump(exclude_defaults=True).items()
                 if type(value) is int]
        raise ConfigError(
            "building the run (its data and models) needs more memory than this host can give"
            + (f" (asked for {int(asked[1]) / 2**30:,.1f} GiB at once)" if asked else "")
            + (f"; sizes set: {', '.join(sizes)}" if sizes else "")
            + "; valid: sizes whose models fit in memory") from None


def _build(scenario: Scenario) -> tuple[RunContext, Algorithm]:
    """:func:`build` of the resolved scenario."""
    seeds = child_seeds(scenario)
    on = torch_device(scenario)  # where torch trains (``device`` is a hardware profile below)
    data, parts, backbone = data_and_backbone(scenario, seeds, on)
    sim = Simulation()
    server = build_server(scenario, sim)
    network = network_of(sim, scenario)  # star: one Link per client and direction, as always
    check_fusable(scenario, backbone)
    devices = client_devices(scenario, backbone, network)
    operators = None
    if scenario.hardware.cost_model == "operators":
        operators, devices = operator_devices(scenario, backbone, devices)
    clients = build_clients(scenario, data, parts, backbone, devices, seeds, on)
    ctx = RunContext(scenario=scenario, data=data, backbone=backbone, sim=sim, server=server,
                     clients=clients, seeds=seeds, timing_only=scenario.training.timing_only,
                     operators=operators,
                     execution=choose_execution(scenario, scenario.training.timing_only))
    return ctx, ALGORITHMS[scenario.algorithm.name](ctx)


def network_of(sim: Simulation, scenario: Scenario) -> Network:
    """The scenario's network (:class:`~sflsim.network.Network`): its device groups'
    links, and with ``network.topology: shared_access`` its access points, as the
    network's own values.

    Raises:
        ConfigError: as :class:`~sflsim.network.Network`.
    """
    def spec(profile: str, over) -> LinkSpec:
        return LinkSpec(profile, over.uplink_bps, over.downlink_bps, over.latency_s)

    cfg = scenario.network
    access_points = {} if cfg.topology != "shared_access" else {
        name: AccessPointSpec(spec(ap.link, ap.link_override), tuple(ap.groups), ap.backhaul,
                              ap.upstream)
        for name, ap in cfg.access_points.items()}
    groups = {name: spec(group.link, group.link_override)
              for name, group in scenario.devices.items()}
    return Network(sim, groups, access_points, cfg.traces)


def data_and_backbone(scenario: Scenario, seeds: dict[str, int], on: torch.device
                      ) -> tuple[DatasetSplit, list[np.ndarray], StagedBackbone]:
    """The run's data, its partition among the clients and the backbone: checked, the data
    held as ``dataset.storage`` says and both placed on the training device ``on``.

    Raises:
        ConfigError / DatasetNotFoundError: as :func:`build`; a run that cannot fit in
            memory is refused here, before the per-client models are built.
    """
    ds = scenario.dataset
    data = load_data(scenario)
    check_augment(scenario, data)
    parts = partition(data.y_train.numpy(), scenario.num_clients, scheme=ds.partition.scheme,
                      alpha=ds.partition.alpha, min_samples=1,
                      rng=np.random.default_rng(seeds["partition"]), domains=data.domain_train)
    backbone = build_backbone(scenario, data, seeds["model"])
    timing_only = scenario.training.timing_only
    check_timing_only(scenario)
    check_one_sample_batches(scenario, parts, backbone)
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
    return data, parts, backbone


def build_server(scenario: Scenario, sim: Simulation) -> Server:
    """The server of ``server.profile``, its slots and queue, each client's priority that of
    its device group (``server.priority``)."""
    server_profile = profiles.server_profile(scenario.server.profile)
    if scenario.fleet is not None:  # one row per device (sflsim.fleet)
        from sflsim.fleet import load_fleet

        fleet = load_fleet(scenario.fleet)
        rank = [scenario.priority_of_group(g) for g in fleet.group_names]
        group_priority = [rank[k] for k in fleet.group.tolist()]
    else:
        group_priority = [rank for g, group in scenario.devices.items()
                          for rank in [scenario.priority_of_group(g)] * group.count]
    return Server(sim, server_profile.sustained_flops.value,
                  scenario.server.slots or server_profile.slots, queue=scenario.server.queue,
                  priorities=dict(enumerate(group_priority)))


def client_devices(scenario: Scenario, backbone: StagedBackbone, network: Network
                   ) -> list[tuple[str, int, object, tuple]]:
    """Each client's ``(group, end layer, device profile, (uplink, downlink))``, in client
    order: the device groups' clients, or one per fleet row with its own link figures."""
    if scenario.fleet is not None:  # one row per device, its own link figures
        return [(group_name, end_layer, device, network.star_links(cid, *rates))
                for cid, (group_name, end_layer, device, rates)
                in enumerate(fleet_clients(scenario, backbone))]
    devices = []
    for group_name, group in scenario.devices.items():
        device = profiles.device_profile(group.profile)
        for _ in range(group.count):
            devices.append((group_name, group.end_layer, device,
                            network.links_for(len(devices), group_name)))
    return devices


def check_fusable(scenario: Scenario, backbone: StagedBackbone) -> None:
    """Under ``training.fuse_clients``, refuse a model whose layers cannot be fused across
    clients (:func:`~sflsim.models.fused_layers.fuse_modules`), before anything trains.

    Raises:
        ConfigError: naming training.fuse_clients, the model and the layer.
    """
    if not scenario.training.fuse_clients or scenario.training.timing_only:
        return
    from sflsim.config.schema import WHOLE_MODEL_ALGORITHMS
    from sflsim.models.fused_layers import fuse_modules

    if scenario.algorithm.name in WHOLE_MODEL_ALGORITHMS:  # the whole model trains on a client
        pieces = [nn.Sequential(*backbone.stages, backbone.head)]
    else:  # the client-side models and their exit heads
        ends = ({g.end_layer for g in scenario.devices.values()} if scenario.devices
                else set(range(1, backbone.num_stages)))
        ends = {min(e, backbone.num_stages - 1) for e in ends}
        pieces = [nn.Sequential(*backbone.stages[:max(ends)]),
                  *(backbone.exit_head(e) for e in sorted(ends))]
    for piece in pieces:
        try:
            fuse_modules([piece, piece])
        except ValueError as exc:
            raise ConfigError(f"training.fuse_clients: model {scenario.model.name} cannot be "
                              f"fused across clients ({exc}); set training.fuse_clients: false "
                              f"or use a model whose layers fuse (hetero_splitee_resnet, "
                              f"resnet18, resnet34, resnet50, small_cnn)") from None


def operator_devices(scenario: Scenario, backbone: StagedBackbone,
                     devices: list[tuple[str, int, object, tuple]]
                     ) -> tuple[StageOperators, list[tuple[str, int, object, tuple]]]:
    """Under ``hardware.cost_model: operators``: the backbone's operators
    (:class:`~sflsim.algorithms.operator_times.StageOperators`) and ``devices`` (as
    :func:`client_devices` gives them) with each device that has ``operator_costs``
    given the cost model's FLOP/s for a whole-model step at ``training.batch_size``
    (:func:`~sflsim.algorithms.operator_times.operator_rate`), computed once per
    ``operator_costs``, one copy per device kind."""
    opt = scenario.training.optimizer
    operators = StageOperators(backbone, opt.name, opt.momentum)
    rates: dict[int, object] = {}
    copies: dict[int, object] = {}
    out = []
    for group, end, device, links in devices:
        costs = getattr(device, "operator_costs", None)
        if costs is not None and id(device) not in copies:
            rate = rates.get(id(costs))
            if rate is None:
                rate = rates[id(costs)] = operator_rate(costs, operators,
                                                        scenario.training.batch_size)
            copies[id(device)] = with_rate(device, rate)
        out.append((group, end, copies.get(id(device), device), links))
    flops_only = sorted({getattr(d, "name", "?") for _, _, d, _ in devices
                         if getattr(d, "operator_costs", None) is None})
    if flops_only:
        from sflsim.config.input_warnings import warn

        warn(f"hardware.cost_model: operators: {', '.join(flops_only)} "
             f"{'has' if len(flops_only) == 1 else 'have'} no operator_costs in the profile and "
             f"keep{'s' if len(flops_only) == 1 else ''} the FLOPs rule (sustained_flops); fit "
             f"one with sflsim calibrate (docs: Add a device profile)")
    return operators, out


def build_clients(scenario: Scenario, data: DatasetSplit, parts: list[np.ndarray],
                  backbone: StagedBackbone, devices: list[tuple[str, int, object, tuple]],
                  seeds: dict[str, int], on: torch.device) -> list[Client]:
    """One :class:`~sflsim.algorithms.base.Client` per entry of ``devices`` (see
    :func:`client_devices`): its samples, client-side model, exit head, optimizer,
    scheduler and batch generator."""
    layout = memory_format(scenario)
    clients: list[Client] = []
    shared: dict[int, tuple[nn.Sequential, nn.Module]] = {}
    # one untrained client-side model and exit head per end layer where nothing trains
    # them: timing-only runs, and algorithms that keep their models elsewhere
    timing = scenario.training.timing_only
    share = timing or not ALGORITHMS[scenario.algorithm.name].client_models
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
            generator=None if timing else torch.Generator().manual_seed(seeds["batches"] + cid),
            scheduler=None if opt is None else make_scheduler(opt, scenario),
        ))
    return clients


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


def run_data(scenario: Scenario) -> DatasetSplit:
    """The dataset as :func:`build` holds it (loaded, decoded or not, on the training
    device), for a run resumed from its checkpoint."""
    data = load_data(scenario)
    if not scenario.training.timing_only and data.on_disk:
        data = hold_data(scenario, data, build_backbone(scenario, data,
                                                        child_seeds(scenario)["model"]))
    return data_on(data, torch_device(scenario), memory_format(scenario))
