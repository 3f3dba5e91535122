"""Configurations of the split-learning algorithms that cut the model per client: the
split policy they share (FedSGA Fig. 4 strategies), SplitFed V1/V2, MultiSFL, MergeSFL
and MU-SplitFed. Registered in order by :mod:`sflsim.config.algorithms_builtin`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from sflsim.config.algorithms import AlgorithmConfig
from sflsim.config.schema_model import SchemaModel as _Model
from sflsim.inputs.quantities import FROZEN, TimeS


class SplitPolicyConfig(_Model):
    """Which cut layer each client uses each round (FedSGA Fig. 4 strategies)."""

    model_config = FROZEN
    #: static: each group's end_layer; random: uniform over candidates each round;
    #: resource: the deepest candidate whose estimated round time fits round_budget_s.
    name: Literal["static", "random", "resource"] = "static"
    #: Allowed cut layers (stage boundaries); default: every cut of the model.
    candidates: list[Annotated[int, Field(ge=1)]] | None = None
    #: Per-round time budget of one device, for the resource policy (seconds).
    round_budget_s: TimeS | None = None

    @model_validator(mode="after")
    def _budget_for_resource(self) -> SplitPolicyConfig:
        if self.name == "resource" and self.round_budget_s is None:
            raise ValueError("the resource policy needs a device's time budget per round: "
                             "set algorithm.split.round_budget_s (e.g. \"60 s\")")
        if self.candidates is not None and not self.candidates:
            raise ValueError("candidates must name at least one cut layer")
        if self.candidates is not None and len(set(self.candidates)) < len(self.candidates):
            raise ValueError(f"candidates must name each cut layer once, got {self.candidates}")
        return self


class SplitFedConfig(AlgorithmConfig):
    """SplitFed V1/V2 (Thapa et al., AAAI 2022): activation gradients return to clients."""

    model_config = FROZEN
    name: Literal["splitfed_v1", "splitfed_v2"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})
    split: SplitPolicyConfig = SplitPolicyConfig()

    @classmethod
    def capabilities_of(cls, name: str) -> frozenset[str]:
        # V1's clients train against server copies of their own, so a round's steps of
        # clients at one cut can be fused; V2's share one server model, in arrival order;
        # the timing-only rounds of both, one batch per client, are booked as arrays
        return cls.capabilities | {"array_booking"} | (
            {"fuse_clients"} if name == "splitfed_v1" else frozenset())


class MultiSFLConfig(AlgorithmConfig):
    """MultiSFL (Xia et al., AAAI 2025; arXiv 2404.12846 KoReA-SFL): branch models, a master
    model and knowledge replay; cut layers by device resources unless ``split`` says otherwise."""

    model_config = FROZEN
    name: Literal["multisfl"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})
    #: Branch models, each trained by a group of clients per round; default min(4, clients).
    num_branches: int | None = Field(None, ge=1)
    #: Default: the deepest cut whose estimated round time on the device fits 60 s.
    split: SplitPolicyConfig = SplitPolicyConfig(name="resource", round_budget_s=60.0)
    #: Share of the master model mixed into each branch after aggregation, in (0, 1];
    #: 1 = every branch restarts from the master (authors' code: 1/11).
    master_pull: float = Field(0.1, gt=0, le=1)
    #: Knowledge replay from assistant devices (false: multi-model aggregation only).
    replay: bool = True
    #: Replay samples asked per branch and round, as a fraction of the samples of the
    #: branch's clients, in [0, 1]; the starting value when adaptive_replay is on.
    replay_fraction: float = Field(0.01, ge=0, le=1)
    #: Upper bound of the replay fraction under adaptive_replay, in [replay_fraction, 1].
    replay_fraction_max: float = Field(0.2, ge=0, le=1)
    #: At least this many replay samples per branch and round; default: the number of classes.
    replay_min_samples: int | None = Field(None, ge=0)
    #: Most assistant devices per branch and round; default: as many as the quotas need.
    max_assistants: int | None = Field(None, ge=1)
    #: Weight decay per round of a branch's past label distributions in its score, in [0, 1).
    score_decay: float = Field(0.5, ge=0, lt=1)
    #: Double / halve the replay fraction as the federated gradient norm rises / falls.
    adaptive_replay: bool = True

    @model_validator(mode="after")
    def _replay_bounds(self) -> MultiSFLConfig:
        if self.replay_fraction_max < self.replay_fraction:
            raise ValueError(f"replay_fraction_max ({self.replay_fraction_max:g}) must be at "
                             f"least replay_fraction ({self.replay_fraction:g})")
        return self


class MergeSFLConfig(AlgorithmConfig):
    """MergeSFL (Liao et al., ICDE 2024): the server merges the clients' activations into
    one batch per iteration; batch sizes in proportion to device speed."""

    model_config = FROZEN
    name: Literal["mergesfl"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda", "array_booking"})
    split: SplitPolicyConfig = SplitPolicyConfig()
    #: Samples of one merged iteration over all clients taking part; default: batch_size
    #: times the clients taking part (the mean client batch is batch_size).
    total_batch_size: int | None = Field(None, ge=1)
    #: Iterations per round, every client the same; default: ceil(local_epochs x samples
    #: of the clients taking part / total_batch_size), one SplitFed round's samples.
    local_iterations: int | None = Field(None, ge=1, le=100_000)
    #: Batch size regulation; false: the total split equally (feature merging only).
    regulate_batch_sizes: bool = True


class MUSplitFedConfig(AlgorithmConfig):
    """MU-SplitFed (Liang et al., NeurIPS 2025, arXiv 2510.21155): tau server steps per
    received batch ("unbalanced update"); zeroth-order client updates."""

    model_config = FROZEN
    name: Literal["mu_splitfed"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})
    split: SplitPolicyConfig = SplitPolicyConfig()
    #: Server steps on each received activation batch (1: SplitFed V1's one).
    tau: int = Field(2, ge=1, le=1000)
    #: How a client updates: zeroth_order (forward passes only, loss differences from
    #: the server) or first_order (activation gradients and backpropagation, SplitFed's).
    client_gradient: Literal["zeroth_order", "first_order"] = "zeroth_order"
    #: Random directions P of each zeroth-order estimate.
    zo_perturbations: int = Field(1, ge=1, le=1000)
    #: Smoothing mu: the perturbation's scale along each direction.
    zo_smoothing: float = Field(1e-3, gt=0, le=1)
    #: central: (L(w + mu u) - L(w - mu u)) / 2mu; forward: (L(w + mu u) - L(w)) / mu.
    zo_difference: Literal["central", "forward"] = "central"
    #: Learning rate of a zeroth-order client (``training.optimizer``'s kind, on the run's
    #: schedule scaled by ``zo_client_lr / training.optimizer.lr``); the server keeps
    #: ``training.optimizer.lr``. The paper trains the two sides at separate rates; 1e-4
    #: is CeZO-FL's default, the source of the estimator and of the three zo_ defaults
    #: above.
    #: null: ``training.optimizer.lr`` for both sides. First-order clients always use
    #: ``training.optimizer.lr`` (SplitFed's client).
    zo_client_lr: float | None = Field(1e-4, gt=0, le=10)
