"""Configurations of Hetero-SplitEE's strategies (Sequential, Alg. 1; Averaging, Alg. 2
with cross-layer aggregation, eq. 1) and of its baselines with exit heads (distributed,
centralized). Registered in order by :mod:`sflsim.config.algorithms_builtin`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from sflsim.config.algorithms import AlgorithmConfig
from sflsim.inputs.quantities import FROZEN


class SequentialConfig(AlgorithmConfig):
    """Hetero-SplitEE Sequential strategy (Alg. 1)."""

    model_config = FROZEN
    name: Literal["hetero_splitee_sequential"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "fuse_clients", "parallel_clients", "cuda", "array_booking"})
    #: Server learning rate = lr / divisor; default: the number of clients that train each
    #: round (``training.clients_per_round``, else all; paper: 12.0, all 12 clients).
    server_lr_divisor: float | None = Field(None, gt=0, le=1e6)
    #: BatchNorm running statistics of the shared server-side layers: ``shared`` (one set,
    #: Alg. 1's "shared server model"), ``per_depth`` (one set per end layer) or
    #: ``per_client``; parameters are shared under every value
    #: (:mod:`sflsim.algorithms.hetero_splitee` has the reading).
    bn_statistics: Literal["shared", "per_depth", "per_client"] = "shared"


class AveragingConfig(AlgorithmConfig):
    """Hetero-SplitEE Averaging strategy (Alg. 2) with cross-layer aggregation."""

    model_config = FROZEN
    name: Literal["hetero_splitee_averaging"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "fuse_clients", "parallel_clients", "cuda", "array_booking"})
    #: Cross-layer aggregation weights: ``uniform`` is the paper's unweighted mean over
    #: C_l (eq. 1); ``samples`` weighs each client's copy by its training samples, as
    #: FedAvg does (they differ when clients hold unequal amounts of data).
    weighting: Literal["uniform", "samples"] = "uniform"
    #: BatchNorm running statistics in cross-layer aggregation: ``per_client`` (each
    #: server-side model keeps its own; eq. 1 averages "the parameters of layer l"),
    #: ``per_depth`` (averaged over the clients of C_l at the same end layer) or
    #: ``shared`` (averaged over C_l with the parameters, as FedAvg's state dicts)
    #: (:mod:`sflsim.algorithms.hetero_splitee` has the reading).
    bn_statistics: Literal["shared", "per_depth", "per_client"] = "per_client"


class DistributedConfig(AlgorithmConfig):
    """Distributed baseline: every client and its server model train alone."""

    model_config = FROZEN
    name: Literal["distributed"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "fuse_clients", "parallel_clients", "cuda", "array_booking"})


class CentralizedConfig(AlgorithmConfig):
    """Centralized baseline: all data at the server, one model per end layer."""

    model_config = FROZEN
    name: Literal["centralized"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})
