"""The scenario schema: frozen pydantic models, unknown keys refused, units parsed to SI.

A scenario names the dataset and partition, the model and width, the device mix
(groups of devices by profile name, each with its end layer and link), the
server, the algorithm and its hyperparameters, evaluation and the seed::

    seed: 0
    dataset: {name: fashion_mnist, fraction: 1.0, partition: {scheme: iid}}
    model: {name: hetero_splitee_resnet, width: 0.25}
    devices:
      pi4: {profile: rpi4, count: 4, end_layer: 3, link: wifi}
    server: {profile: a100}
    algorithm: {name: hetero_splitee_sequential}
    training: {rounds: 5, local_epochs: 1, batch_size: 32,
               optimizer: {name: adam, lr: 1.0e-3}, schedule: {name: cosine}}
"""

from __future__ import annotations

import re
import typing
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sflsim.config.algorithm_field import AlgorithmField
from sflsim.config.algorithms import AlgorithmConfig, algorithms_with, register_algorithm_config
from sflsim.config.base import SchemaModel as _Model
from sflsim.config.quantities import FROZEN, BandwidthBps, PositiveTimeS, TimeS


class PartitionConfig(_Model):
    """How training samples are dealt to clients."""

    model_config = FROZEN
    #: ``iid``, ``dirichlet`` (label skew), or ``domain`` (DomainNet: client i gets
    #: domain i mod D, then Dirichlet label skew within it; FedSGA §4.1.1)
    scheme: Literal["iid", "dirichlet", "domain"] = "iid"
    #: Dirichlet concentration (Hsu et al. 2019); smaller = more label skew.
    alpha: float = Field(0.5, gt=0)


class AugmentConfig(_Model):
    """Training-time augmentation of every training batch (never of evaluation):
    Hetero-SplitEE §IV-A1 is ``{random_crop_padding: 4, horizontal_flip: true}``
    (zero-pad 4 pixels, random crop of the original size, random left-right flip).
    Drawn per sample from a generator per client (:mod:`sflsim.data.augment`)."""

    model_config = FROZEN
    #: Pixels of zero padding on every side before a random crop of the original size;
    #: 0 = no crop; at most the image side (checked once the data is read) and 512.
    random_crop_padding: int = Field(0, ge=0, le=512)
    #: Flip each training image left-right with probability 1/2.
    horizontal_flip: bool = False

    @property
    def active(self) -> bool:
        """Whether it changes any image."""
        return self.random_crop_padding > 0 or self.horizontal_flip


DOMAINNET_DOMAINS = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")


class SyntheticConfig(_Model):
    """The size of the ``synthetic`` dataset, made up when loaded
    (:func:`sflsim.data.datasets.load_dataset`): labels drawn uniformly over the classes
    from the partition seed, every image all zeros (one image held, however many
    samples). It carries no signal: a run that trains on it stays at chance accuracy.
    It is for timing-only runs (``training.timing_only``, ``--no-train``) of fleets
    larger than any dataset, and for pipeline checks. Defaults: Fashion-MNIST's shape."""

    model_config = FROZEN
    #: Training samples (a run needs at least one per client).
    train_samples: int = Field(60_000, ge=1, le=100_000_000)
    #: Test samples.
    test_samples: int = Field(10_000, ge=1, le=100_000_000)
    #: Classes; labels are uniform over ``0 .. classes - 1``.
    classes: int = Field(10, ge=2, le=100_000)
    #: ``[channels, height, width]`` of every image: channels 1 or 3, square, side 8 to 1024.
    image_shape: list[int] = [1, 28, 28]

    @field_validator("image_shape")
    @classmethod
    def _check_image_shape(cls, shape: list[int]) -> list[int]:
        if len(shape) != 3:
            raise ValueError("must be [channels, height, width], three numbers")
        channels, height, width = shape
        if channels not in (1, 3):
            raise ValueError("channels must be 1 (grey) or 3 (RGB)")
        if height != width:
            raise ValueError("images must be square: height == width")
        if not 8 <= height <= 1024:
            raise ValueError("the side must be 8 to 1024 pixels")
        return shape


class DatasetConfig(_Model):
    """Which data, where its files are, how much of it, how it is dealt and augmented
    (:mod:`sflsim.data.datasets` has the table of datasets)."""

    model_config = FROZEN
    #: ``synthetic``: blank images with random labels (no signal: trained runs stay at
    #: chance accuracy), sized by ``synthetic``, for timing-only runs and pipeline checks.
    #: ``image_folder``: the user's own images, ``train/<class>/<image>`` and
    #: ``test/<class>/<image>`` under ``data_root`` (:mod:`sflsim.data.image_folder`).
    name: Literal["fashion_mnist", "fashion_mnist_full", "cifar10", "cifar100", "stl10",
                  "tiny_imagenet", "domainnet", "image_folder", "synthetic"] = "fashion_mnist"
    #: Folder with user-supplied dataset files (not used by the embedded ``fashion_mnist``;
    #: required by ``image_folder``).
    data_root: str | None = None
    #: Class-balanced fraction of the training and test data to use, in (0, 1].
    fraction: float = Field(1.0, gt=0, le=1)
    #: Class-balanced fraction of the test data, in (0, 1]; null = ``fraction``. 1 evaluates
    #: on the whole test split while ``fraction`` shrinks the training data (evaluation is
    #: cheap next to training, and 400 test images leave about ±2.5 points of sampling noise).
    test_fraction: float | None = Field(None, gt=0, le=1)
    partition: PartitionConfig = PartitionConfig()
    #: Augmentation of training batches; none by default.
    augment: AugmentConfig | None = None
    #: Let torchvision download missing files into ``data_root`` (cifar10, cifar100, stl10).
    download: bool = False
    #: DomainNet's domains to use, in this order (domain ids follow it); null = all six.
    domains: list[Literal["clipart", "infograph", "painting", "quickdraw", "real",
                          "sketch"]] | None = None
    #: Side in pixels images are resized to (tiny_imagenet, domainnet: null = 64;
    #: image_folder: null = the images' own side, when all are square and of one size).
    image_size: int | None = Field(None, ge=8, le=1024)
    #: Channels of ``image_folder``'s images: 1 (grey) or 3 (RGB); null = grey when every
    #: image is grey, else RGB. Other datasets have fixed channels.
    channels: Literal[1, 3] | None = None
    #: Where images read from files (tiny_imagenet, domainnet, image_folder) are held: ``memory``
    #: (decoded once, uint8), ``disk`` (decoded a batch at a time), ``auto`` (memory when
    #: the run's memory estimate fits with them there). Never changes results.
    storage: Literal["auto", "memory", "disk"] = "auto"
    #: Size of ``name: synthetic`` (null = Fashion-MNIST's: 60,000 / 10,000 samples, 10
    #: classes, ``[1, 28, 28]``); for that dataset only.
    synthetic: SyntheticConfig | None = None

    #: Classes of each dataset (kept equal to :mod:`sflsim.data.datasets` by a test; no
    #: data is read here); ``synthetic``: its default, which ``synthetic.classes`` sets
    #: (:attr:`num_classes`); ``image_folder``: None, known once its folders are read.
    NUM_CLASSES: ClassVar[dict[str, int | None]] = {
        "fashion_mnist": 10, "fashion_mnist_full": 10, "cifar10": 10, "cifar100": 100,
        "stl10": 10, "tiny_imagenet": 200, "domainnet": 345, "image_folder": None,
        "synthetic": 10}
    #: Datasets ``image_size`` applies to, and its default for them (None: the images' own).
    RESIZABLE: ClassVar[dict[str, int | None]] = {"tiny_imagenet": 64, "domainnet": 64,
                                                  "image_folder": None}
    DOWNLOADABLE: ClassVar[tuple[str, ...]] = ("cifar10", "cifar100", "stl10")

    @property
    def num_classes(self) -> int | None:
        """Classes of this dataset (``synthetic.classes`` for ``synthetic``); None for
        ``image_folder``, whose classes are its folders (the loaded
        :class:`~sflsim.data.split.DatasetSplit` has them)."""
        if self.name == "synthetic" and self.synthetic is not None:
            return self.synthetic.classes
        return self.NUM_CLASSES[self.name]

    @model_validator(mode="after")
    def _check_dataset_options(self) -> DatasetConfig:
        if self.name == "image_folder" and self.data_root is None:
            raise ValueError("dataset.data_root is required by image_folder: the folder that "
                             "holds train/<class>/<image> and test/<class>/<image>")
        if self.channels is not None and self.name != "image_folder":
            raise ValueError(f"dataset.channels applies only to image_folder, not to "
                             f"{self.name}, whose images have fixed channels: remove it")
        if self.image_size is not None and self.name not in self.RESIZABLE:
            raise ValueError(f"dataset.image_size ({self.image_size}) applies only to "
                             f"{', '.join(self.RESIZABLE)} (images read from files), not to "
                             f"{self.name}: remove it")
        if self.domains is not None:
            if self.name != "domainnet":
                raise ValueError(f"dataset.domains applies only to domainnet, not to "
                                 f"{self.name}: remove it")
            if not self.domains or len(set(self.domains)) != len(self.domains):
                raise ValueError(f"dataset.domains: {self.domains} must name distinct domains, "
                                 f"at least one; valid: {', '.join(DOMAINNET_DOMAINS)}")
        if self.download and self.name not in self.DOWNLOADABLE:
            raise ValueError(f"dataset.download: true is available for "
                             f"{', '.join(self.DOWNLOADABLE)} only, not {self.name}; get its "
                             f"files as the README's dataset table says")
        if self.storage == "disk" and self.name not in self.RESIZABLE:
            raise ValueError(f"dataset.storage: disk applies only to datasets read from image "
                             f"files ({', '.join(self.RESIZABLE)}); {self.name} is read into "
                             f"memory: use auto or memory")
        if self.synthetic is not None and self.name != "synthetic":
            raise ValueError(f"dataset.synthetic applies only to name: synthetic, not to "
                             f"{self.name}: remove it")
        if self.partition.scheme == "domain" and self.name != "domainnet":
            raise ValueError(f"dataset.partition.scheme: domain needs a dataset with domains "
                             f"(domainnet), not {self.name}; use iid or dirichlet")
        return self


class ModelConfig(_Model):
    """The backbone: a registered model name, a width multiplier and ViT sizes.

    The ViT fields are for ``name: vit`` only; ``None`` means the builder's
    default (:data:`VIT_DEFAULTS`; ViT-B/16 is ``patch_size: 16, depth: 12,
    hidden_dim: 768, heads: 12, mlp_dim: 3072``).
    """

    model_config = FROZEN
    name: Literal["hetero_splitee_resnet", "resnet18", "vit", "small_cnn"] = "hetero_splitee_resnet"
    #: Channel multiplier (1.0 = the paper's widths); for a ViT it scales hidden_dim and mlp_dim.
    width: float = Field(1.0, gt=0, le=4)
    #: ViT patch side in pixels; the image size must be a multiple of it.
    patch_size: int | None = Field(None, ge=1)
    #: ViT encoder blocks (the model has depth + 1 stages).
    depth: int | None = Field(None, ge=1)
    #: ViT token width before ``width``; a multiple of ``heads``.
    hidden_dim: int | None = Field(None, ge=1)
    #: ViT attention heads.
    heads: int | None = Field(None, ge=1)
    #: ViT MLP width before ``width``; default 4 x hidden_dim.
    mlp_dim: int | None = Field(None, ge=1)

    VIT_FIELDS: ClassVar[tuple[str, ...]] = ("patch_size", "depth", "hidden_dim", "heads", "mlp_dim")
    #: Defaults of :func:`sflsim.models.vit.vit` (kept equal to it by a test; no torch here).
    VIT_DEFAULTS: ClassVar[dict[str, int]] = {"patch_size": 4, "depth": 6, "hidden_dim": 192,
                                               "heads": 3}

    @model_validator(mode="after")
    def _check_vit_fields(self) -> ModelConfig:
        given = [f for f in self.VIT_FIELDS if getattr(self, f) is not None]
        if given and self.name != "vit":
            raise ValueError(f"model.{given[0]} applies only to name: vit, not to {self.name}; "
                             f"remove {', '.join('model.' + f for f in given)}")
        hidden = self.hidden_dim or self.VIT_DEFAULTS["hidden_dim"]
        heads = self.heads or self.VIT_DEFAULTS["heads"]
        if self.name == "vit" and hidden % heads:
            raise ValueError(f"model.hidden_dim ({hidden}) must be divisible by model.heads "
                             f"({heads})")
        return self

    def builder_kwargs(self) -> dict[str, int]:
        """Extra keyword arguments of the model builder: the ViT fields that are set."""
        return {f: getattr(self, f) for f in self.VIT_FIELDS if getattr(self, f) is not None}


class LinkOverride(_Model):
    """Optional per-group overrides of a link profile's numbers."""

    model_config = FROZEN
    uplink_bps: BandwidthBps | None = None
    downlink_bps: BandwidthBps | None = None
    latency_s: TimeS | None = None


class DeviceGroup(_Model):
    """``count`` devices of one hardware profile, all at the same end layer and link."""

    model_config = FROZEN
    profile: str
    #: Devices in the group; 0 leaves the group out (device-mix sweeps).
    count: int = Field(ge=0, le=100_000)
    #: Cut layer: the client-side model runs stages 1..end_layer.
    end_layer: int = Field(ge=1)
    link: str
    link_override: LinkOverride = LinkOverride()


class ServerConfig(_Model):
    """The server accelerator: profile, concurrent slots and queue discipline.

    ``queue: priority`` serves the waiting job of the lowest priority number first
    (ties in order of arrival; running jobs are not pre-empted). A client's
    priority is its device group's entry in ``priorities``, else the group's
    position in ``devices`` (0 for the first group listed).
    """

    model_config = FROZEN
    profile: str = "a100"
    #: Concurrent jobs on the accelerator; default: the profile's ``slots``.
    slots: int | None = Field(None, ge=1)
    #: Queue discipline of jobs waiting for a slot.
    queue: Literal["fifo", "priority"] = "fifo"
    #: Priority per device group for ``queue: priority`` (lower is served first).
    priorities: dict[str, int] = {}


class AccessPointConfig(_Model):
    """An access point or gateway whose capacity the devices behind it share."""

    model_config = FROZEN
    #: Link profile of the shared medium (capacity each way and latency of the access hop).
    link: str
    link_override: LinkOverride = LinkOverride()
    #: Device groups whose devices sit behind this access point.
    groups: list[str] = Field(min_length=1)
    #: Link profile from the access point to ``upstream``; None: no link (no cost).
    backhaul: str | None = None
    #: ``server`` or the name of another access point.
    upstream: str = "server"


class NetworkConfig(_Model):
    """How devices reach the server (see :mod:`sflsim.network.topology`).

    ``star`` (default): one link per device straight to the server. ``shared_access``:
    the groups under an access point share its capacity, then cross its backhaul.
    ``traces`` maps a device group or access point to a CSV trace of bandwidth over
    time (``time_s,bandwidth_bps``; path absolute, or relative to the working directory
    or else to the shipped scenarios: :func:`sflsim.shipped.trace_path`).
    """

    model_config = FROZEN
    topology: Literal["star", "shared_access"] = "star"
    access_points: dict[str, AccessPointConfig] = {}
    traces: dict[str, str] = {}

    @model_validator(mode="after")
    def _consistent(self) -> NetworkConfig:
        if self.topology == "shared_access" and not self.access_points:
            raise ValueError("topology: shared_access needs at least one entry in access_points")
        if self.topology == "star" and self.access_points:
            raise ValueError("access_points apply only to topology: shared_access")
        seen: dict[str, str] = {}
        for name, ap in self.access_points.items():
            if name == "server":
                raise ValueError("access_points: 'server' is reserved; name the access point "
                                 "something else")
            if ap.upstream != "server" and ap.upstream not in self.access_points:
                raise ValueError(f"access_points.{name}.upstream: {ap.upstream!r} is neither "
                                 f"server nor an access point; valid: server, "
                                 f"{', '.join(self.access_points)}")
            for g in ap.groups:
                if g in seen:
                    raise ValueError(f"access_points.{name}.groups: {g!r} is already behind "
                                     f"access point {seen[g]!r}; a group sits behind one only")
                seen[g] = name
        return self


class SequentialConfig(AlgorithmConfig):
    """Hetero-SplitEE Sequential strategy (Alg. 1)."""

    model_config = FROZEN
    name: Literal["hetero_splitee_sequential"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "fuse_clients", "parallel_clients", "cuda"})
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
        "timing_only", "fuse_clients", "parallel_clients", "cuda"})
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
        "timing_only", "fuse_clients", "parallel_clients", "cuda"})


class CentralizedConfig(AlgorithmConfig):
    """Centralized baseline: all data at the server, one model per end layer."""

    model_config = FROZEN
    name: Literal["centralized"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})


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
        # clients at one cut can be fused; V2's share one server model, in arrival order
        return cls.capabilities | {"fuse_clients"} if name == "splitfed_v1" else cls.capabilities


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


class FedSGAConfig(AlgorithmConfig):
    """FedSGA (Yuan et al., CIKM 2026, §3): sufficiency-guided adaptive splits, private
    prompts, depth-aware harmonization. Defaults are the paper's (§4.1)."""

    model_config = FROZEN
    name: Literal["fedsga"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})
    #: Candidate cut layers P (stage boundaries); default: every cut of the model.
    candidates: list[Annotated[int, Field(ge=1)]] | None = None
    #: p_ref, the deeper reference split of eq. 7; default: the middle candidate.
    reference_split: int | None = Field(None, ge=1)
    #: Split policy: FedSGA's sufficiency-guided one, or static/random/resource (Fig. 4).
    split: Literal["sufficiency", "static", "random", "resource"] = "sufficiency"
    #: Timing-only runs of ``split: sufficiency`` (whose cuts follow trained values): the
    #: cuts a trained run of the same scenario chose, read from its results directory
    #: (``clients.parquet`` or ``clients.csv``) or from that table itself (columns
    #: round, client_id, cut_layer); relative paths from the working directory. The
    #: observations, probes and transfers are simulated and charged as in the trained
    #: run, each decision takes the recorded cut.
    split_schedule: str | None = None
    #: Per-round time budget of one device, for split: resource (seconds).
    round_budget_s: TimeS | None = None
    rho: float = Field(0.1, ge=0, le=1)           # eq. 8 offset toward deeper splits
    beta: float = Field(0.05, ge=0, le=1)         # eq. 7 relative tolerance
    lambda_align: float = Field(0.1, ge=0)        # eq. 10 weight of the alignment loss
    tau_a: float = Field(0.5, gt=0)               # eq. 9 temperature
    tau_m: float = Field(0.5, gt=0)               # eq. 2 temperature
    num_prompts: int = Field(4, ge=1)             # m
    mu: float = Field(0.9, ge=0, lt=1)            # prototype EMA
    #: Calibration rounds T_cal = {1, 1 + every, 1 + 2 every, ...}.
    calibration_every: int = Field(5, ge=1)
    #: Width of the harmonized embedding Z (projector output).
    projector_dim: int = Field(64, ge=1)
    #: Hidden units of the two-layer monotone estimator Gamma_theta.
    estimator_hidden: int = Field(8, ge=1)
    #: Ablation switches (Table 4): client-specific adaptation channel (prompts),
    #: shallow sufficiency estimator, split-compatible interface harmonization.
    adapt: bool = True
    sufficiency: bool = True
    harmonize: bool = True
    #: True: the server runs its own stages after the cut before harmonizing (§3.1);
    #: False: the harmonized embedding of the interface feeds only the head.
    server_backbone: bool = True
    #: How the server updates w_s (its stages after the cut, projector and head G), §3.1.
    #: per_client: each client's server work on its own copy of the round's w_s, in
    #: parallel up to the server's slots, w_s the sample-weighted average of the copies
    #: at round end (SplitFed V1 style); sequential: one w_s updated per batch in order
    #: of simulated arrival, one client at a time (SplitFed V2 style).
    server_update: Literal["per_client", "sequential"] = "per_client"
    #: The client-side fronts w_i: averaged: layer-wise sample-weighted average of the
    #: clients' copies each round (a global front is downloaded); local: each client
    #: keeps and trains its own front, never downloaded, uploaded or averaged.
    client_fronts: Literal["averaged", "local"] = "averaged"
    #: one: stage l of the model is one set of parameters, trained by whichever side holds
    #: it for a client and averaged over every copy that trained it; separate: the server
    #: keeps its own copies of stages 2..L, never merged with the client fronts.
    backbone: Literal["one", "separate"] = "one"
    #: What the probe losses of eq. 7 compare. adapted: L_pref runs the client's locally
    #: adapted stages p_1+1..p_ref (as trained for it in its last round), L_p1 the shared
    #: ones; shared: both run the shared stages, as a split at p_1 or p_ref would.
    probe: Literal["adapted", "shared"] = "adapted"
    #: shared: one projector phi and head G on the server, stepped by every client's batches
    #: in order of simulated arrival (§3.4 "a shared projection module"); per_client: a
    #: copy per client and round, averaged at round end.
    harmonizer: Literal["shared", "per_client"] = "shared"
    #: two_layer: phi = Linear-ReLU-Linear over [Pool(z) zero-padded; e(p)] (§4.1.3);
    #: per_depth: a per-depth input layer, + e(p), then Linear-ReLU-Linear.
    projector: Literal["two_layer", "per_depth"] = "two_layer"
    #: phi_s of eq. 3: separate: a lightweight linear head on the pooled p_1 interface, used
    #: only for sufficiency estimation; projector: phi(., e(p_1)) on the server path.
    phi_s: Literal["separate", "projector"] = "separate"
    #: When m_i^t (eq. 2) is computed: before_decision: from the observation batch's prompt
    #: gradient before the split of round t (Alg. 2 line 6); after_training: from the last
    #: training batch of the round before (one round late).
    descriptor: Literal["before_decision", "after_training"] = "before_decision"
    #: The prototypes of eqs. 3 and 9: previous_round: C^{t-1} as broadcast at round start
    #: (Alg. 2 line 3); live: the EMA as it stands at each step.
    prototypes: Literal["previous_round", "live"] = "previous_round"
    #: The depth embedding e of the projector (§3.4: "the semantic level at which the
    #: representation is produced"). representation: the depth of what is pooled and
    #: harmonized, the cut p with server_backbone: false, the last stage (one row for
    #: every cut) with server_backbone: true; cut: e(p) of the client's cut; none: no
    #: depth embedding (the projector's MLP stays).
    depth_embedding: Literal["representation", "cut", "none"] = "representation"
    #: When the prototypes move (§3.4's EMA). per_round: one EMA step per round, C^t from
    #: C^{t-1} and the class means of every participant's Z of the round; per_step: one
    #: EMA step per server step, from that batch's class means.
    prototype_update: Literal["per_round", "per_step"] = "per_round"
    #: r before Gamma_theta has been fitted on any calibration pair: estimator: the
    #: estimator as initialised (Alg. 2 line 9 in every round); alignment: (a + 1) / 2,
    #: the sufficiency: false proxy, until the first fit.
    before_first_fit: Literal["estimator", "alignment"] = "estimator"

    @model_validator(mode="after")
    def _consistent(self) -> FedSGAConfig:
        if self.split == "resource" and self.round_budget_s is None:
            raise ValueError("split: resource needs a device's time budget per round: set "
                             "algorithm.round_budget_s (e.g. \"60 s\")")
        if self.split_schedule is not None and self.split != "sufficiency":
            raise ValueError(f"split_schedule replaces the decisions of split: sufficiency; "
                             f"split: {self.split} chooses its cuts without training, so "
                             f"remove split_schedule (or set split: sufficiency)")
        if self.client_fronts == "local" and self.backbone == "one":
            raise ValueError("client_fronts: local keeps a second copy of the fronts, which "
                             "backbone: one does not have; set backbone: separate with it, or "
                             "client_fronts: averaged")
        if self.server_update == "sequential" and self.harmonizer == "per_client":
            raise ValueError("server_update: sequential steps one w_s and one harmonizer in "
                             "order of arrival; harmonizer: per_client needs server_update: "
                             "per_client (or set harmonizer: shared)")
        if self.candidates is not None and len(self.candidates) < 2:
            raise ValueError("candidates must name at least two cut layers (p_1 and a deeper p_ref)")
        if (self.candidates is not None and self.reference_split is not None
                and self.reference_split not in self.candidates):
            raise ValueError(f"reference_split {self.reference_split} must be one of the candidates "
                             f"{self.candidates}")
        return self


class MergeSFLConfig(AlgorithmConfig):
    """MergeSFL (Liao et al., ICDE 2024): the server merges the clients' activations into
    one batch per iteration; batch sizes in proportion to device speed."""

    model_config = FROZEN
    name: Literal["mergesfl"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})
    split: SplitPolicyConfig = SplitPolicyConfig()
    #: Samples of one merged iteration over all clients taking part; default: batch_size
    #: times the clients taking part (the mean client batch is batch_size).
    total_batch_size: int | None = Field(None, ge=1)
    #: Iterations per round, every client the same; default: ceil(local_epochs x samples
    #: of the clients taking part / total_batch_size), one SplitFed round's samples.
    local_iterations: int | None = Field(None, ge=1)
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


class FedAvgConfig(AlgorithmConfig):
    """FedAvg (McMahan et al. 2017): the whole model trains on the device."""

    model_config = FROZEN
    name: Literal["fedavg"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "parallel_clients", "cuda", "whole_model", "fuse_clients"})


class FedGHConfig(AlgorithmConfig):
    """FedGH (Yi et al., ACM MM 2023): local extractors, a global header trained on the
    server from the clients' per-class mean representations."""

    model_config = FROZEN
    name: Literal["fedgh"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "parallel_clients", "cuda"})
    #: Learning rate of the server's header optimizer (``training.optimizer``'s kind, on
    #: the run's schedule); default: ``training.optimizer.lr``.
    header_lr: float | None = Field(None, gt=0, le=10)


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
    align_epochs: int = Field(1, ge=1)
    #: Client synchronization: Fisher-weighted aggregation (false: sample-weighted).
    synchronize: bool = True
    #: trace: one Fisher number per client (the authors'); diagonal: per parameter.
    fisher: Literal["trace", "diagonal"] = "trace"


class FedProxConfig(AlgorithmConfig):
    """FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020):
    FedAvg whose every local step minimises cross-entropy plus (mu/2)||w - w_global||^2."""

    model_config = FROZEN
    name: Literal["fedprox"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "parallel_clients", "cuda", "whole_model", "fuse_clients"})
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
        "timing_only", "parallel_clients", "cuda", "whole_model", "fuse_clients"})
    #: Local epochs of personalisation fine-tuning before evaluation (paper: 5; 0: none).
    finetune_epochs: int = Field(5, ge=0, le=1000)
    #: What personalisation fine-tunes: ``full`` the whole model (the authors'
    #: evaluation code) or ``head`` the head only, on the frozen body.
    finetune: Literal["full", "head"] = "full"
    #: Learning rate of fine-tuning; default: ``training.optimizer.lr``.
    finetune_lr: float | None = Field(None, gt=0, le=10)
    #: The test data a client's personalised model is scored on: ``client`` the test
    #: set reweighted to the client's training label distribution (the paper tests each
    #: client on data distributed like its own), ``global`` the test set as it is.
    test_distribution: Literal["client", "global"] = "client"


class FedMutConfig(AlgorithmConfig):
    """FedMut (Hu et al., "FedMut: Generalized Federated Learning via Stochastic Mutation",
    AAAI 2024, Alg. 1): each client starts the round from the global model mutated layer
    by layer by +-alpha times the last global update, signs balanced over the clients."""

    model_config = FROZEN
    name: Literal["fedmut"]
    capabilities: ClassVar[frozenset[str]] = frozenset({
        "timing_only", "parallel_clients", "cuda", "whole_model", "fuse_clients"})
    #: Mutation scale alpha (0 gives FedAvg); default: the authors' code (``--radius 4.0``).
    alpha: float = Field(4.0, ge=0, le=100)
    #: Mutation acceleration of the authors' code (``--mut_acc_rate``; 0.3 there): the
    #: negative signs are -1 + acceleration * (1 - t / acceleration_rounds) in the t-th
    #: mutated round, so early mutations lean toward the last update; 0 (default): the
    #: paper's balanced +-1 signs.
    acceleration: float = Field(0.0, ge=0, le=1)
    #: Rounds over which the acceleration decays to 0 (authors' code: ``--mut_bound 50``).
    acceleration_rounds: int = Field(50, ge=1)


#: The built-in algorithms' configurations, registered in this order (which error
#: messages and ``sflsim validate --algorithms`` list them in).
BUILTIN_ALGORITHM_CONFIGS = (
    SequentialConfig, AveragingConfig, DistributedConfig, CentralizedConfig, SplitFedConfig,
    FedAvgConfig, FedSGAConfig, MultiSFLConfig, FedGHConfig, FedASConfig, MergeSFLConfig,
    MUSplitFedConfig, FedProxConfig, FedBABUConfig, FedMutConfig)
for _config in BUILTIN_ALGORITHM_CONFIGS:
    register_algorithm_config(_config)
del _config


class OptimizerConfig(_Model):
    model_config = FROZEN
    name: Literal["adam", "sgd"] = "adam"
    lr: float = Field(1e-3, gt=0, le=10)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)


class ScheduleConfig(_Model):
    """Learning-rate schedule, stepped once per round (paper: cosine, per epoch)."""

    model_config = FROZEN
    name: Literal["constant", "cosine"] = "cosine"
    min_lr: float = Field(1e-6, ge=0)


#: The built-in algorithms with each capability (:data:`~sflsim.config.algorithms.CAPABILITIES`,
#: declared by their configuration classes), in the order of :data:`BUILTIN_ALGORITHM_CONFIGS`; the checks
#: ask :func:`~sflsim.config.algorithms.algorithms_with`, which adds the registered user
#: algorithms.
#:
#: ``timing_only``: the simulated timeline does not depend on what training computes, so
#: ``training.timing_only`` gives the same events as a trained run (tests compare the
#: traces). Two need a setting for it, checked by
#: :func:`sflsim.config.load.check_timing_only`: MultiSFL's adaptive replay (the replay
#: fraction follows the gradient norms) and FedSGA's sufficiency-guided split (the cuts
#: follow trained values; a trained run's recorded cuts, ``split_schedule``, replace it).
TIMING_ONLY_ALGORITHMS = algorithms_with("timing_only")
#: ``fuse_clients``: the clients' steps (client-side model and exit head on the local
#: loss) can be fused across clients (``training.fuse_clients``).
FUSED_CLIENT_ALGORITHMS = algorithms_with("fuse_clients")
#: ``whole_model``: FedAvg and the algorithms built on it
#: (sflsim.algorithms.fedavg.FedAvg): the whole model trains on the device, so a device
#: group's end layer may be the model's end.
WHOLE_MODEL_ALGORITHMS = algorithms_with("whole_model")
#: ``parallel_clients``: the clients' training steps within a round depend only on the
#: client's own model, optimizer and batches (never on the server or simulated time), so
#: they can be trained ahead of the simulated round (``training.parallel_clients``).
PARALLEL_CLIENT_ALGORITHMS = algorithms_with("parallel_clients")
#: ``cuda``: every model is built from the backbone, so ``training.device`` moves them
#: all (FedSGA places its prompts, harmonizer, estimator and prototypes there).
CUDA_ALGORITHMS = algorithms_with("cuda")


class TrainingConfig(_Model):
    model_config = FROZEN
    rounds: int = Field(ge=1, le=100_000)
    local_epochs: int = Field(1, ge=1)
    batch_size: int = Field(32, ge=1)
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
    over_commit: float = Field(1.0, ge=1, le=10)

    @field_validator("clients_per_round", mode="before")
    @classmethod
    def _not_a_flag(cls, value: object) -> object:
        if isinstance(value, bool) or isinstance(value, str):
            raise ValueError("a count (an integer) or a fraction (a number in (0, 1]) is needed")
        return value

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

    @field_validator("device", mode="before")
    @classmethod
    def _device_name(cls, value: object) -> object:
        if not isinstance(value, str):  # null, a number: the valid names too, as for a bad name
            shown = ("null" if value is None else str(value).lower() if isinstance(value, bool)
                     else str(value))  # as YAML writes it
            hint = f" (GPU {value} is cuda:{value})" if type(value) is int and value >= 0 else ""
            raise ValueError(f"not a torch device{hint}; valid: cpu, cuda or cuda:N "
                             f"(N a GPU index), got {shown}")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", value):
            raise ValueError(f"unknown torch device {value!r}; valid: cpu, cuda or cuda:N "
                             f"(N a GPU index)")
        return value

    @model_validator(mode="after")
    def _min_lr_below_lr(self) -> TrainingConfig:
        if self.schedule.name == "cosine" and self.schedule.min_lr > self.optimizer.lr:
            raise ValueError(f"schedule.min_lr must not exceed optimizer.lr "
                             f"({self.optimizer.lr:g}): the cosine schedule decays from lr to "
                             f"min_lr, got {self.schedule.min_lr:g}")
        return self


class EarlyExitConfig(_Model):
    """Collaborative early-exit inference after training (Hetero-SplitEE Alg. 3).

    A test sample exits on the device when the exit head's confidence C = -H (H the
    entropy of its softmax, in nats) is above the threshold tau, else its activations
    go to the server. tau is swept from ``tau_min`` to ``tau_max`` in steps of
    ``tau_step`` (paper: entropy thresholds 0 to 4 in steps of 0.05). Applies to the
    algorithms with exit heads (Hetero-SplitEE, distributed, centralized).
    """

    model_config = FROZEN
    enabled: bool = True
    #: Lowest threshold on C = -H (most samples exit); entropy threshold -tau_min.
    tau_min: float = -4.0
    #: Highest threshold on C = -H (fewest exit); C <= 0, so tau_max >= 0 exits none.
    tau_max: float = 0.0
    tau_step: float = Field(0.05, gt=0)
    #: Test samples each client infers in the latency simulation; None = all.
    samples_per_client: int | None = Field(200, ge=1)
    #: Samples the device infers at once (the offloaded ones of a batch travel together).
    batch_size: int = Field(1, ge=1)

    @field_validator("tau_max")
    @classmethod
    def _above_min(cls, v: float, info: ValidationInfo) -> float:
        low = info.data.get("tau_min")
        if low is not None and v <= low:
            raise ValueError(f"must be greater than tau_min ({low:g})")
        return v

    @field_validator("tau_step")
    @classmethod
    def _few_thresholds(cls, v: float, info: ValidationInfo) -> float:
        low, high = info.data.get("tau_min"), info.data.get("tau_max")
        if low is not None and high is not None and (high - low) / v > 100_000:
            raise ValueError(f"makes {(high - low) / v:.0f} thresholds from tau_min to tau_max; "
                             f"valid: at most 100,000 (paper: 0.05)")
        return v


class EvaluationConfig(_Model):
    model_config = FROZEN
    #: Evaluate on the test split every this many rounds (and after the last).
    every_rounds: int = Field(1, ge=1)
    #: Use at most this many test samples (a seeded random subset); None = all.
    max_test_samples: int | None = Field(None, ge=1)
    batch_size: int = Field(500, ge=1)
    #: Early-exit inference sweep after the last round (``early_exit.csv``).
    early_exit: EarlyExitConfig = EarlyExitConfig()


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


class ConditionsConfig(_Model):
    """Stragglers, dropouts and a round deadline; the defaults change nothing.

    Each round, for every client in id order, a generator seeded from the training
    stream (:class:`SeedsConfig`) draws whether it drops (probability
    ``client_drop_prob``) and its compute slowdown ``exp(N(0, straggler_sigma^2))``
    (lognormal, median 1): the client's compute takes that many times longer this round.
    """

    #: sigma of the lognormal per-client per-round compute slowdown factor (0: none).
    #: At most 3: slowdowns of e^(3 sigma) = 8,000x are already three sigmas out.
    straggler_sigma: float = Field(0.0, ge=0, le=3)
    #: probability that a client sits a round out (does nothing, is not aggregated).
    client_drop_prob: float = Field(0.0, ge=0, le=1)
    #: seconds after the round's start when unfinished work is discarded (None or
    #: omitted: no deadline). It bounds the round's duration (Nishio and Yonetani,
    #: "Client Selection for Federated Learning with Heterogeneous Resources in Mobile
    #: Edge", IEEE ICC 2019, arXiv:1804.08333): it counts from the round's start, the
    #: instant the round before ended, so a wait for a client to come online
    #: (``availability``) is part of it and nothing of the round ends after the start
    #: plus the deadline (``round_time_s`` <= the deadline); when no client comes
    #: online before it, the round ends there with no client taking part. Inclusive:
    #: work that ends exactly at the deadline counts, work that would end after it is
    #: cut off, the rule of every cut-off (:func:`sflsim.engine.cut_off_at`).
    round_deadline_s: PositiveTimeS | None = None
    #: CSV trace of the intervals in which devices are online
    #: (``device,online_from_s,online_until_s``; :mod:`sflsim.availability`); path
    #: absolute or relative to the working directory. None: always online.
    availability: str | None = None


class EnergyConfig(_Model):
    """How each device's energy (J) is counted from the event trace and its profile's
    powers (W); see :mod:`sflsim.metrics.records`. Compute energy is always busy time x
    ``active_power_w``; radio power is drawn on top of compute or idle power.

    Defaults follow the device-energy model of the federated-learning energy literature,
    which counts the energy of the work a device does for training, computation plus
    transmission (Tran et al., "Federated Learning over Wireless Networks: Optimization
    Model Design and Analysis", IEEE INFOCOM 2019; Yang et al., "Energy Efficient
    Federated Learning Over Wireless Communication Networks", IEEE Transactions on
    Wireless Communications 2021, arXiv:1911.02417, where transmission energy is
    transmit power x the time to send the bits, data size / rate), plus the idle power
    a taking-part device draws while it waits within its round.
    """

    #: When a device's radio draws its transmit (receive) power. ``serialisation``: while
    #: it sends (receives) bits, from the start of a transfer until its last bit has left
    #: (arrival minus the link's one-way latency), counted once however many transfers of
    #: that direction overlap (the union of the intervals): the literature's transmit
    #: power x bits / rate. ``transfer``: from the start of a transfer until its last bit
    #: arrives (latency included), also as a union, counted once.
    radio_on: Literal["serialisation", "transfer"] = "serialisation"
    #: Which devices draw idle power, and when, while not computing. ``participants``: a
    #: device that takes part in the round (trained, late, over-committed) from the
    #: round's start to its end; one that did some work and then left (went offline)
    #: until its last activity ended; a device not sampled, dropped or offline at the
    #: start draws nothing. ``all``: every device for the whole round, taking part or not.
    #: ``none``: no device (compute and radio only, the cited papers' model).
    idle_draw: Literal["participants", "all", "none"] = "participants"


class Scenario(_Model):
    """One simulated deployment and training run."""

    model_config = FROZEN
    #: Also the default results folder name (runs/<name>): letters, digits, . _ -
    name: str = Field("scenario", max_length=200)
    description: str = ""
    #: Seed of every random choice, unless ``seeds`` gives a stream its own.
    seed: int = Field(0, ge=0, le=2**63 - 1)
    #: Optional seeds of the partition, model and training streams (default: ``seed``).
    seeds: SeedsConfig = SeedsConfig()
    dataset: DatasetConfig = DatasetConfig()
    model: ModelConfig = ModelConfig()
    #: A CSV or Parquet file with one row per device (:mod:`sflsim.fleet`), instead of
    #: ``devices``; path absolute or relative to the working directory.
    fleet: str | None = None
    #: End layer of the fleet's rows that give none (default 1, the shallowest cut).
    fleet_end_layer: int | None = Field(None, ge=1)
    #: Groups of devices by profile; or, instead, ``fleet`` (exactly one of the two).
    devices: dict[str, DeviceGroup] = {}
    server: ServerConfig = ServerConfig()
    #: The algorithm and its hyperparameters: the configuration class registered under
    #: ``name`` (:mod:`sflsim.config.algorithms`).
    algorithm: AlgorithmField
    training: TrainingConfig
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
        if self.fleet is not None and (self.network.topology != "star" or self.network.traces):
            raise ValueError("network.topology: shared_access and network.traces are not "
                             "available with fleet yet; use devices groups for them")
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


WIRE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
