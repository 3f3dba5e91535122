"""The scenario: the top-level model that holds every section (:class:`Scenario`), the
seeds of its random streams, and the bytes per element of each wire dtype."""

from __future__ import annotations

import re
import typing
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

import sflsim.config.algorithms_builtin  # noqa: F401  (registers the built-in configurations)
from sflsim.config.algorithm_field import AlgorithmField
from sflsim.config.dataset import DatasetConfig
from sflsim.config.deployment import (
    ConditionsConfig,
    DeviceGroup,
    HardwareConfig,
    NetworkConfig,
    ServerConfig,
)
from sflsim.config.evaluation import EnergyConfig, EvaluationConfig
from sflsim.config.model import ModelConfig
from sflsim.config.schema_model import SchemaModel as _Model
from sflsim.config.training import TrainingConfig
from sflsim.inputs.quantities import FROZEN


class SeedsConfig(_Model):
    """Seeds of the three random streams of a run; a stream left out (or null) follows
    the scenario's ``seed``, so ``seed`` alone seeds everything.

    Each stream drives its own uses and nothing else, so changing one stream's seed
    leaves what the others draw bit-identical (STYLE.md §10):

    - ``partition``, which data the run sees: the class-balanced ``dataset.fraction``
      subset of train and test, the partition of the training samples among clients,
      the ``evaluation.max_test_samples`` test subset and the test samples of the
      early-exit latency simulation.
    - ``model``, the initial weights: the backbone, every exit head, and FedSGA's
      prompt tokens, harmonizer, estimator and prototypes.
    - ``training``, what happens while training: every client's batch order (and the
      centralized baseline's), the random split policy's cuts, MultiSFL's client
      groups and replay samples, and the conditions (which clients drop out, straggler
      slowdowns). No layer draws random numbers in a training step (ViT dropout is 0,
      there is no data augmentation).

    Within a stream each use has its own child seed (``numpy.random.SeedSequence``
    spawned from the stream's seed; see :func:`sflsim.runner.child_seeds`).
    """

    partition: int | None = Field(None, ge=0, le=2**63 - 1)
    model: int | None = Field(None, ge=0, le=2**63 - 1)
    training: int | None = Field(None, ge=0, le=2**63 - 1)


class StreamSeeds(typing.NamedTuple):
    """The seed of each stream of :class:`SeedsConfig` as a run uses it."""

    partition: int
    model: int
    training: int


class Scenario(_Model):
    """One simulated deployment and training run."""

    model_config = FROZEN
    #: Also the default results folder name (runs/<name>): letters, digits, . _ -
    name: str = Field("scenario", max_length=200)
    #: Free text kept with the run (``scenario.yaml``); not used by the simulation.
    description: str = ""
    #: Seed of every random choice, unless ``seeds`` gives a stream its own.
    seed: int = Field(0, ge=0, le=2**63 - 1)
    #: Optional seeds of the partition, model and training streams (default: ``seed``).
    seeds: SeedsConfig = SeedsConfig()
    dataset: DatasetConfig = DatasetConfig()
    model: ModelConfig = ModelConfig()
    #: A CSV or Parquet file with one row per device (:mod:`sflsim.fleet`), instead of
    #: ``devices``; path absolute or relative to the scenario file (else the working directory).
    fleet: str | None = None
    #: End layer of the fleet's rows that give none (default 1, the shallowest cut).
    fleet_end_layer: int | None = Field(None, ge=1)
    #: Groups of devices by profile; or, instead, ``fleet`` (exactly one of the two).
    devices: dict[str, DeviceGroup] = {}
    server: ServerConfig = ServerConfig()
    #: How device work becomes seconds: the FLOPs rule or the cost model by operation.
    hardware: HardwareConfig = HardwareConfig()
    #: The algorithm and its hyperparameters: the configuration class registered under
    #: ``name`` (:mod:`sflsim.config.algorithms`).
    algorithm: AlgorithmField
    #: Rounds, local epochs, batch size, optimizer and schedule, and how the host trains.
    training: TrainingConfig
    #: When and on how many test samples accuracy is measured, and the early-exit sweep.
    evaluation: EvaluationConfig = EvaluationConfig()
    #: dtype of activations and gradients on the wire (bytes per element 4 or 2).
    wire_dtype: Literal["fp32", "fp16", "bf16"] = "fp32"
    network: NetworkConfig = NetworkConfig()
    #: stragglers, dropouts and a round deadline (off by default)
    conditions: ConditionsConfig = ConditionsConfig()
    #: how device energy is counted: radio on-time and who draws idle power
    energy: EnergyConfig = EnergyConfig()

    @field_validator("name")
    @classmethod
    def _name_is_a_folder_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", v):
            raise ValueError("must be a folder name: letters, digits, '.', '_' and '-', not "
                             "starting with '.' or '-' (it names the default results folder)")
        return v

    @field_validator("devices")
    @classmethod
    def _some_devices(cls, v: dict[str, DeviceGroup], info: ValidationInfo
                      ) -> dict[str, DeviceGroup]:
        if not v:
            if info.data.get("fleet") is not None:  # devices from the fleet file
                return v
            raise ValueError("at least one device group is needed (or, instead, a fleet "
                             "file: fleet: FILE, one row per device)")
        if not any(g.count for g in v.values()):
            raise ValueError("every group has count 0; at least one client is needed, got 0")
        return v

    @model_validator(mode="after")
    def _devices_or_fleet(self) -> Scenario:
        if self.devices and self.fleet is not None:
            raise ValueError("give either devices (groups of devices by profile) or fleet (a "
                             "CSV or Parquet file with one row per device), not both")
        if self.fleet is None and self.fleet_end_layer is not None:
            raise ValueError("fleet_end_layer applies only with fleet; set each group's "
                             "end_layer under devices")
        if self.fleet is not None:  # name only what the scenario gives
            given = ([f"network.topology: {self.network.topology}"]
                     if self.network.topology != "star" else [])
            given += ["network.traces"] if self.network.traces else []
            if given:
                many = len(given) > 1
                raise ValueError(f"{' and '.join(given)} {'are' if many else 'is'} not available "
                                 f"with fleet yet (a fleet's devices take star links); use "
                                 f"devices groups for {'them' if many else 'it'}")
        return self

    @model_validator(mode="after")
    def _known_groups(self) -> Scenario:
        if self.fleet is not None:  # the fleet's groups: checked once it is read
            return self
        groups = list(self.devices)
        for ap in self.network.access_points:
            if ap in groups:
                raise ValueError(f"network.access_points.{ap}: the name is also a device group's; "
                                 f"give the access point its own name")
        refs = [(f"network.access_points.{ap}.groups", g)
                for ap, cfg in self.network.access_points.items() for g in cfg.groups]
        refs += [("network.traces", k) for k in self.network.traces
                 if k not in self.network.access_points]
        refs += [("server.priorities", k) for k in self.server.priorities]
        for where, name in refs:
            if name not in groups:
                also = (f" or access points ({', '.join(self.network.access_points)})"
                        if where == "network.traces" and self.network.access_points else "")
                raise ValueError(f"{where}: {name!r} is not a device group; valid: "
                                 f"{', '.join(groups)}{also}")
        return self

    def priority_of_group(self, group: str) -> int:
        """Server queue priority of ``group`` (lower first): ``server.priorities`` or its
        position in ``devices`` (a fleet's groups: in order of their first row)."""
        return self.server.priorities.get(group, self.group_names.index(group))

    @property
    def group_names(self) -> list[str]:
        """The device groups in client order: ``devices``' keys, or the fleet's labels."""
        if self.fleet is not None:
            from sflsim.fleet import load_fleet

            return list(load_fleet(self.fleet).group_names)
        return list(self.devices)

    @property
    def stream_seeds(self) -> StreamSeeds:
        """The seed of each stream: ``seeds.<stream>`` where given, else ``seed``."""
        return StreamSeeds(*(self.seed if v is None else v
                             for v in (self.seeds.partition, self.seeds.model,
                                       self.seeds.training)))

    @property
    def num_clients(self) -> int:
        if self.fleet is not None:  # read once per file (sflsim.fleet.load_fleet)
            from sflsim.fleet import load_fleet

            return load_fleet(self.fleet).num_clients
        return sum(g.count for g in self.devices.values())

    def client_groups(self) -> dict[str, list[int]]:
        """``{device group: its client ids}`` (clients are numbered from 0 in the order of
        ``devices``); with a fleet (:mod:`sflsim.fleet`) its groups and then its
        ``availability`` labels, clients numbered in row order."""
        if self.fleet is not None:
            from sflsim.fleet import load_fleet

            return load_fleet(self.fleet).client_groups()
        groups, first = {}, 0
        for name, group in self.devices.items():
            groups[name] = list(range(first, first + group.count))
            first += group.count
        return groups


WIRE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
