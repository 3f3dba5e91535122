"""The simulated clients and what the runner hands an algorithm.

:class:`Client` is one simulated device with its data and client-side model,
:class:`RunContext` everything an algorithm is built with (scenario, data, backbone,
simulation, server, clients, cost table, seeds). The runner builds each client's
optimizer (:func:`sflsim.execution.local_steps.make_optimizer`) and learning-rate schedule
with :func:`make_scheduler`, and the algorithm its augmentation generators with
:func:`augment_generator`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from sflsim.config.scenario import Scenario
from sflsim.data.split import DatasetSplit
from sflsim.engine import Link, Server, Simulation
from sflsim.execution.strategy import Execution
from sflsim.hardware.profiles import DeviceProfile
from sflsim.models import StagedBackbone
from sflsim.models.cost import CostTable
from sflsim.work import ignore_work

if TYPE_CHECKING:
    from sflsim.algorithms.operator_times import StageOperators

#: the ``client_id`` of work the server does on raw samples (Centralized)
SERVER_ID = -1


@dataclass
class Client:
    """One simulated device with its data, client-side model and exit head.

    Attributes:
        client_id: 0-based id; ties in simulated time break by it.
        group: the scenario's device-group name.
        end_layer: cut layer; the client-side model holds stages 1..end_layer.
        device: hardware profile (throughput in FLOP/s, power in W).
        uplink, downlink: the device's link, one :class:`Link` per direction.
        indices: indices of the client's training samples, shape ``(n,)``.
        model: client-side model ``(B, C, H, W) -> activations``.
        exit_head: ``activations -> (B, classes)`` logits.
        optimizer: optimizer of ``model`` and ``exit_head``.
        generator: the client's batch-shuffling generator.
        domain: the domain of its samples (DomainNet), None for other datasets.
    """

    client_id: int
    group: str
    end_layer: int
    device: DeviceProfile
    uplink: Link
    downlink: Link
    indices: np.ndarray
    model: nn.Sequential
    exit_head: nn.Module
    #: None in timing-only runs (nothing trains; the models are shared per end layer)
    optimizer: torch.optim.Optimizer | None
    #: None in timing-only runs (no batch order is drawn; a generator holds 2.5 KB of
    #: state, which a fleet of 100,000 devices would pay for nothing)
    generator: torch.Generator | None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    #: this round's straggler factor (``conditions.straggler_sigma``): compute takes
    #: ``slowdown`` times longer; 1.0 outside the round's client processes
    slowdown: float = 1.0
    domain: str | None = None

    @property
    def actor(self) -> str:
        return f"client{self.client_id}"

    @property
    def flops_per_s(self) -> float:
        """Sustained throughput this round: the profile's, divided by the slowdown."""
        return self.device.sustained_flops.value / self.slowdown


@dataclass
class RunContext:
    """Everything an algorithm needs, built once by the runner."""

    scenario: Scenario
    data: DatasetSplit
    backbone: StagedBackbone
    sim: Simulation
    server: Server
    clients: list[Client]
    costs: CostTable = field(default_factory=CostTable)
    #: independent child seeds by use, each from its stream's seed (sflsim.runner.child_seeds)
    seeds: dict[str, int] = field(default_factory=dict)
    #: ``on_batch(kind, at_s, units=1)``: ``units`` units of host work done, of ``kind``
    #: (:mod:`sflsim.work`: a training batch by default, a server step, a test batch;
    #: None: only the simulated clock), their work complete at simulated time ``at_s``
    #: (s; default now): the progress display's count and time estimate
    on_batch: Callable[..., None] = ignore_work
    #: ``training.timing_only``: simulate the same processes, run no torch step
    timing_only: bool = False
    #: the backbone's operators, priced per device (``hardware.cost_model: operators``;
    #: None under the FLOPs rule): :class:`~sflsim.algorithms.operator_times.StageOperators`
    operators: StageOperators | None = None
    #: how the rounds execute (array booking, clients trained ahead, threads), chosen by the
    #: runner from the algorithm's declared capabilities
    #: (:func:`~sflsim.execution.strategy.choose_execution`)
    execution: Execution = field(default_factory=Execution)


def augment_generator(seed: int, client_id: int) -> torch.Generator:
    """The augmentation generator of ``client_id`` (:data:`SERVER_ID` for the server):
    seeded with child ``client_id + 1`` of ``SeedSequence(seed)``, ``seed`` being the
    run's ``augment`` child seed of the training stream (:func:`sflsim.runner.child_seeds`)."""
    state = np.random.SeedSequence(seed, spawn_key=(client_id + 1,)).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


def make_scheduler(optimizer: torch.optim.Optimizer, scenario: Scenario
                   ) -> torch.optim.lr_scheduler.LRScheduler | None:
    """Cosine annealing over the run's rounds (stepped once per round), or none."""
    sched = scenario.training.schedule
    if sched.name == "constant":
        return None
    return torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=scenario.training.rounds, eta_min=sched.min_lr
    )
