"""The scenario's ``training`` section: rounds, local epochs, batch size, the optimizer
and its learning-rate schedule, client sampling and over-commitment, and how the host
trains (timing only, fused or parallel clients, memory layout, torch device)."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sflsim.config.schema_model import SchemaModel as _Model
from sflsim.inputs.quantities import FROZEN, whole_number
from sflsim.text import as_yaml


class OptimizerConfig(_Model):
    """The optimizer of every local step (client- and server-side models alike)."""

    model_config = FROZEN
    #: ``adam`` or ``sgd`` (torch.optim's).
    name: Literal["adam", "sgd"] = "adam"
    #: Learning rate at round 1 (the schedule moves it from there).
    lr: float = Field(1e-3, gt=0, le=10)
    #: SGD momentum (0: none); ignored by Adam.
    momentum: float = Field(0.0, ge=0, lt=1)
    #: L2 weight decay added to the gradients (0: none).
    weight_decay: float = Field(0.0, ge=0)


class ScheduleConfig(_Model):
    """Learning-rate schedule, stepped once per round (paper: cosine, per epoch)."""

    model_config = FROZEN
    #: ``cosine`` (from ``optimizer.lr`` down to ``min_lr`` at the last round) or
    #: ``constant`` (``optimizer.lr`` throughout).
    name: Literal["constant", "cosine"] = "cosine"
    #: The cosine schedule's learning rate at the last round.
    min_lr: float = Field(1e-6, ge=0)


class TrainingConfig(_Model):
    """Rounds, local epochs, batches and the optimizer, and how the host trains them."""

    model_config = FROZEN
    #: Global rounds (aggregations) of the run.
    rounds: int = Field(ge=1, le=100_000)
    #: Passes over its local data a client makes each round.
    local_epochs: int = Field(1, ge=1, le=10_000)
    #: Samples per local step (a client's last batch of an epoch may be smaller).
    batch_size: int = Field(32, ge=1)
    #: The optimizer of every local step.
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    #: Timing only (``sflsim run --no-train``): the same simulated processes, costs from
    #: the cost table, no torch steps, no model copies per client, no evaluation; for the
    #: algorithms that declare ``timing_only`` (:data:`TIMING_ONLY_ALGORITHMS`, built in).
    timing_only: bool = False
    #: Train the clients' steps in one fused (grouped-convolution) step per batch,
    #: ahead of the simulated round (:data:`FUSED_CLIENT_ALGORITHMS`): Hetero-SplitEE's
    #: client-side steps of clients that share a cut layer
    #: (:meth:`sflsim.algorithms.hetero_splitee._HierarchicalTraining.train_ahead`), and
    #: FedAvg's and FedMut's local models (:meth:`sflsim.algorithms.fedavg.FedAvg.train_fused`);
    #: the same results up to float rounding, the same timeline. Ignored with a round
    #: deadline or clients going offline (a fused step could train a client past it).
    fuse_clients: bool = False
    #: Train this many clients at once on the host (``sflsim run --parallel-clients``),
    #: each in its own thread with one torch thread, ahead of the simulated round, for
    #: algorithms whose clients train independently within a round (those that declare
    #: ``parallel_clients``, :data:`PARALLEL_CLIENT_ALGORITHMS`); 1 trains them one after the other. Results
    #: are bit-identical to a run with one torch thread (``--threads 1``) and the
    #: timeline is the same. Ignored with a round deadline and in timing-only runs.
    parallel_clients: int = Field(1, ge=1, le=1024)
    #: Where ``parallel_clients`` > 1 trains the clients: ``threads`` (host threads of the
    #: run's process; every algorithm that declares ``parallel_clients``) or
    #: ``processes`` (a pool of ``parallel_clients`` worker processes started on the
    #: first round that needs it and stopped when the run ends, one torch thread each;
    #: the FedAvg family, :data:`PARALLEL_PROCESS_ALGORITHMS`, on the CPU, on Linux).
    #: Both are bit-identical to a run with one torch thread; threads share the
    #: interpreter and contend for it, processes do not (``docs/how-to/speed.md``).
    #: ``ray``: the same algorithms on ``parallel_clients`` Ray actors, on a local Ray or
    #: the cluster at ``ray_address`` (``pip install "sflsim[ray]"``;
    #: :mod:`sflsim.execution.ray_workers`), bit-identical too with one CPU per actor.
    parallel_backend: Literal["threads", "processes", "ray"] = "threads"
    #: With ``parallel_backend: ray``: the Ray cluster the actors run on: ``auto`` (the
    #: cluster this machine is part of), ``HOST:PORT`` of its head node (as
    #: ``ray start --head`` prints it), ``ray://HOST:10001`` (Ray Client) or ``local``;
    #: null (default): the Ray this process is connected to, else a local Ray started for
    #: the run (and shut down when it ends).
    ray_address: str | None = None
    #: With ``parallel_backend: ray``: CPUs each actor asks Ray for (fractions allowed);
    #: an actor trains with ``max(1, floor(ray_cpus_per_actor))`` torch threads, so 1
    #: (default) keeps results bit-identical to a run with one torch thread.
    ray_cpus_per_actor: float = Field(1.0, gt=0, le=1024)
    #: With ``parallel_backend: ray``: GPUs each actor asks Ray for (0.25: four actors
    #: per GPU); above 0 the actors train on their GPU and ``device`` must be ``cuda``.
    ray_gpus_per_actor: float = Field(0.0, ge=0, le=64)
    #: Keep convolution weights, activations and images in channels-last (NHWC) memory
    #: layout, which oneDNN runs faster on CPU (max-pooling and grouped convolutions
    #: most). The same timeline; other float rounding, which training can amplify
    #: (BatchNorm over small batches most).
    channels_last: bool = False
    #: Where torch trains (``sflsim run --device``): ``cpu``, ``cuda`` or ``cuda:N``.
    #: Simulated times come from the profiles, never from this host, so the
    #: timeline is the same on every device; accuracies agree to float tolerance.
    device: str = "cpu"
    #: Clients that train each round: a count (an integer, e.g. ``3``) or a fraction of
    #: all clients (a float in (0, 1], e.g. ``0.25``: ``round(0.25 N)``, at least 1),
    #: drawn uniformly without replacement each round from the clients online at its
    #: start (``conditions.availability``), from the ``sampling`` seed stream; all of
    #: them when fewer are online. Null (default): every client, every round.
    clients_per_round: int | float | None = None
    #: Over-commitment (FedScale): draw ``ceil(over_commit * clients_per_round)`` clients
    #: and keep the first ``clients_per_round`` to finish their round's work; the others
    #: stop at that instant, their work cut off (status ``over_committed``). 1: none.
    #: A count: exactly ``clients_per_round`` are kept. Clients that finish at the same
    #: instant (identical devices with equal data) are kept in the round's sampling
    #: order, the order of the seeded draw (``draw_participants`` in
    #: :mod:`sflsim.run.participation`); one that finished with the last kept client but
    #: after it in that order is ``over_committed`` and its finished work is not
    #: aggregated.
    over_commit: float = Field(1.0, ge=1, le=10)

    @field_validator("clients_per_round", mode="before")
    @classmethod
    def _count_or_fraction(cls, value: object) -> object:
        """A number, or text that reads as one: with a decimal point a fraction (``'0.5'``),
        else a count as integer fields read it (``'6'``; ``'1e1'``, PyYAML's text for
        ``1e1``, is 10); anything else (a flag, a list) is one error, not one per branch of
        the union."""
        if isinstance(value, str):
            number = whole_number(value) if "." not in value else value
            try:
                return number if isinstance(number, int) else float(value)
            except ValueError:
                pass
        elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        raise ValueError("a count (an integer) or a fraction (a number in (0, 1]) is needed")

    @field_validator("clients_per_round")
    @classmethod
    def _participation(cls, value: int | float | None) -> int | float | None:
        if isinstance(value, int) and value < 1:
            raise ValueError("a count must be at least 1")
        if isinstance(value, float) and not 0 < value <= 1:
            raise ValueError("a fraction must be in (0, 1]; write a count as an integer")
        return value

    @model_validator(mode="after")
    def _over_commit_needs_sampling(self) -> TrainingConfig:
        if self.over_commit > 1 and self.clients_per_round is None:
            raise ValueError(f"over_commit: {self.over_commit:g} draws more clients than "
                             f"clients_per_round keeps; set training.clients_per_round too")
        return self

    def participants(self, num_clients: int) -> int:
        """Clients sampled per round out of ``num_clients`` (all: ``num_clients``)."""
        k = self.clients_per_round
        if k is None:
            return num_clients
        if isinstance(k, float):
            return max(1, round(k * num_clients))
        return k

    def drawn(self, num_clients: int) -> int:
        """Clients drawn per round out of ``num_clients``: :meth:`participants` times
        ``over_commit``, rounded up (FedScale's draw), at most ``num_clients``."""
        return min(num_clients, math.ceil(self.participants(num_clients) * self.over_commit
                                          - 1e-9))

    @field_validator("device", mode="before")
    @classmethod
    def _device_name(cls, value: object) -> object:
        if not isinstance(value, str):  # null, a number: the valid names too, as for a bad name
            shown = as_yaml(value)
            hint = f" (GPU {value} is cuda:{value})" if type(value) is int and value >= 0 else ""
            raise ValueError(f"not a torch device{hint}; valid: cpu, cuda or cuda:N "
                             f"(N a GPU index), got {shown}")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", value):
            raise ValueError(f"unknown torch device {value!r}; valid: cpu, cuda or cuda:N "
                             f"(N a GPU index)")
        return value

    @model_validator(mode="after")
    def _processes_on_cpu(self) -> TrainingConfig:
        if self.parallel_backend == "processes" and self.device != "cpu":
            raise ValueError(f"parallel_backend: 'processes' trains on the CPU only, got "
                             f"device {self.device!r}; valid with device {self.device!r}: "
                             f"threads, or ray with ray_gpus_per_actor above 0")
        return self

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(
                r"auto|local|(ray://)?(\[[0-9A-Fa-f:.]+\]|[\w.-]+):\d{1,5}", value):
            raise ValueError(f"not a Ray address, got {value!r}; valid: null (a local Ray), "
                             f"auto, local, HOST:PORT (the head node, e.g. 10.0.0.1:6379) or "
                             f"ray://HOST:PORT (e.g. ray://10.0.0.1:10001)")
        return value

    @model_validator(mode="after")
    def _ray_settings(self) -> TrainingConfig:
        if self.parallel_backend != "ray":
            asked = [f"{name}: {shown}" for name, shown, on in (
                ("ray_address", repr(self.ray_address), self.ray_address is not None),
                ("ray_cpus_per_actor", f"{self.ray_cpus_per_actor:g}", self.ray_cpus_per_actor != 1),
                ("ray_gpus_per_actor", f"{self.ray_gpus_per_actor:g}", self.ray_gpus_per_actor != 0))
                if on]
            if asked:
                raise ValueError(f"{asked[0]} is read only with parallel_backend: ray, got "
                                 f"parallel_backend: {self.parallel_backend!r}; valid: "
                                 f"parallel_backend: ray, or leave it out")
        elif self.ray_gpus_per_actor > 0 and not self.device.startswith("cuda"):
            raise ValueError(f"ray_gpus_per_actor: {self.ray_gpus_per_actor:g} gives each actor "
                             f"a GPU, got device {self.device!r}; valid: device cuda, or "
                             f"ray_gpus_per_actor: 0 (the CPU)")
        elif self.ray_gpus_per_actor == 0 and self.device != "cpu":
            raise ValueError(f"parallel_backend: 'ray' with device {self.device!r} needs GPUs "
                             f"for the actors, got ray_gpus_per_actor: 0; valid: "
                             f"ray_gpus_per_actor above 0 (e.g. 1), or device cpu")
        return self

    @model_validator(mode="after")
    def _min_lr_below_lr(self) -> TrainingConfig:
        if self.schedule.name == "cosine" and self.schedule.min_lr > self.optimizer.lr:
            raise ValueError(f"schedule.min_lr must not exceed optimizer.lr "
                             f"({self.optimizer.lr:g}): the cosine schedule decays from lr to "
                             f"min_lr, got {self.schedule.min_lr:g}")
        return self
