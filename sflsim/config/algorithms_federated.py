"""Configurations of the federated algorithms whose models train on the device, FedAvg
(McMahan et al. 2017) and those built on it or beside it: FedGH, FedAS, FedProx, FedBABU
and FedMut. Registered in order by :mod:`sflsim.config.algorithms_builtin`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from sflsim.config.algorithms import AlgorithmConfig
from sflsim.inputs.quantities import FROZEN


class FedAvgConfig(AlgorithmConfig):
    """FedAvg (McMahan et al. 2017): the whole model trains on the device."""

    model_config = FROZEN
    name: Literal["fedavg"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "parallel_clients", "parallel_processes", "cuda", "whole_model",
        "fuse_clients", "array_booking"})


class FedGHConfig(AlgorithmConfig):
    """FedGH (Yi et al., ACM MM 2023): local extractors, a global header trained on the
    server from the clients' per-class mean representations."""

    model_config = FROZEN
    name: Literal["fedgh"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "parallel_clients", "cuda"})
    #: Learning rate of the server's header optimizer (``training.optimizer``'s kind, on
    #: the run's schedule); default: ``training.optimizer.lr``.
    header_lr: float | None = Field(None, gt=0, le=10)
    #: The test data a client's personalised model is scored on (``server_accuracy``):
    #: ``client`` the test set reweighted to the client's training label distribution (the
    #: paper tests each client on data distributed like its own), ``global`` the test set
    #: as it is. Evaluated rounds write both to the clients table
    #: (``accuracy_own_distribution``, ``accuracy_global``).
    test_distribution: Literal["client", "global"] = "client"


class FedASConfig(AlgorithmConfig):
    """FedAS (Yang et al., CVPR 2024): parameter alignment of the downloaded extractor,
    Fisher-information-weighted aggregation. Defaults are the authors' code's."""

    model_config = FROZEN
    name: Literal["fedas"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "parallel_clients", "cuda"})
    #: Federated parameter alignment (false: the global extractor replaces the client's).
    align: bool = True
    #: Plain-SGD learning rate of the alignment steps.
    align_lr: float = Field(0.01, gt=0, le=10)
    #: Passes over the client's data that align the downloaded extractor.
    align_epochs: int = Field(1, ge=1, le=10_000)
    #: Client synchronization: Fisher-weighted aggregation (false: sample-weighted).
    synchronize: bool = True
    #: trace: one Fisher number per client (the authors'); diagonal: per parameter.
    fisher: Literal["trace", "diagonal"] = "trace"
    #: The test data a client's personalised model is scored on (``server_accuracy``):
    #: ``client`` the test set reweighted to the client's training label distribution (the
    #: paper tests each client on data distributed like its own), ``global`` the test set
    #: as it is. Evaluated rounds write both to the clients table
    #: (``accuracy_own_distribution``, ``accuracy_global``).
    test_distribution: Literal["client", "global"] = "client"


class FedProxConfig(AlgorithmConfig):
    """FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020):
    FedAvg whose every local step minimises cross-entropy plus (mu/2)||w - w_global||^2."""

    model_config = FROZEN
    name: Literal["fedprox"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "parallel_clients", "parallel_processes", "cuda", "whole_model",
        "fuse_clients", "array_booking"})
    #: Proximal weight mu (0 gives FedAvg). The paper tunes it from {0.001, 0.01, 0.1, 1};
    #: 0.01 is chosen for deep CNNs under label skew (see sflsim/algorithms/fedprox.py).
    mu: float = Field(0.01, ge=0, le=1e3)


class FedBABUConfig(AlgorithmConfig):
    """FedBABU (Oh, Kim, Yun, "FedBABU: Toward Enhanced Representation for Federated Image
    Classification", ICLR 2022): the body trains federatedly with the head (the model's
    last linear layer) frozen at its initialisation; accuracy is measured after each
    client fine-tunes the global model on its own data (personalisation)."""

    model_config = FROZEN
    name: Literal["fedbabu"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "parallel_clients", "parallel_processes", "cuda", "whole_model",
        "fuse_clients", "array_booking"})
    #: Local epochs of personalisation fine-tuning before evaluation (paper: 5; 0: none).
    finetune_epochs: int = Field(5, ge=0, le=1000)
    #: What personalisation fine-tunes: ``full`` the whole model (the authors'
    #: evaluation code) or ``head`` the head only, on the frozen body.
    finetune: Literal["full", "head"] = "full"
    #: Learning rate of fine-tuning; default: ``training.optimizer.lr``.
    finetune_lr: float | None = Field(None, gt=0, le=10)
    #: The test data a client's personalised model is scored on (``server_accuracy``):
    #: ``client`` the test set reweighted to the client's training label distribution (the
    #: paper tests each client on data distributed like its own), ``global`` the test set
    #: as it is. Evaluated rounds write both to the clients table
    #: (``accuracy_own_distribution``, ``accuracy_global``).
    test_distribution: Literal["client", "global"] = "client"


class FedMutConfig(AlgorithmConfig):
    """FedMut (Hu et al., "FedMut: Generalized Federated Learning via Stochastic Mutation",
    AAAI 2024, Alg. 1): each client starts the round from the global model mutated layer
    by layer by +-alpha times the last global update, signs balanced over the clients."""

    model_config = FROZEN
    name: Literal["fedmut"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "parallel_clients", "parallel_processes", "cuda", "whole_model",
        "fuse_clients", "array_booking"})
    #: Mutation scale alpha (0 gives FedAvg); default: the authors' code (``--radius 4.0``).
    alpha: float = Field(4.0, ge=0, le=100)
    #: Mutation acceleration of the authors' code (``--mut_acc_rate``; 0.3 there): the
    #: negative signs are -1 + acceleration * (1 - t / acceleration_rounds) in the t-th
    #: mutated round, so early mutations lean toward the last update; 0 (default): the
    #: paper's balanced +-1 signs.
    acceleration: float = Field(0.0, ge=0, le=1)
    #: Rounds over which the acceleration decays to 0 (authors' code: ``--mut_bound 50``).
    acceleration_rounds: int = Field(50, ge=1)
