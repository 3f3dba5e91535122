"""Scales: a paper's settings at ``cpu``, ``smoke`` and ``paper`` scale, and every way each
departs from the paper (its shrink table)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .papers import BACKBONES, DATASET_NAMES, PRESETS


#: a :class:`Shrink`'s ``here`` for the runs per configuration: the report writes the
#: seeds the target ran with (``--seeds``, else the scale's)
SEEDS_RUN = "{seeds} seeds"


@dataclass(frozen=True)
class Shrink:
    """One way a scale departs from the paper: what, the paper's value, ours, and why;
    ``applies``: the datasets (as the paper names them) or backbones it concerns, empty
    for all."""

    what: str
    paper: str
    here: str
    why: str
    applies: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scale:
    """A paper's settings at one scale: the base scenario, the departures, default seeds.

    At ``--scale paper`` the base scenarios are the preset files of ``scenarios/papers/``
    (the one copy of the papers' settings): :meth:`on` gives the scale on one of the
    paper's datasets, with that dataset's preset as its base and its numbers beside.
    """

    name: str
    paper: str
    base: dict[str, Any]
    shrinks: tuple[Shrink, ...]
    seeds: int
    #: the paper's dataset whose numbers sflsim's are set beside first (columns of views)
    compare_with: tuple[str, ...]
    #: the paper's dataset this scale runs on (:meth:`on`); None: the base's own data
    dataset: str | None = None
    #: the backbone of the FedSGA preset (``resnet18``, ``vit_b16``); None: the base's
    backbone: str | None = None
    #: the preset file the base was read from
    preset: Path | None = None

    def on(self, dataset: str, backbone: str | None = None) -> Scale:
        """This scale on ``dataset`` (as the paper names it): the base scenario read from
        its preset file, sflsim's numbers set beside that dataset's.

        Raises:
            ConfigError: the preset file is missing or not a scenario mapping.
        """
        from sflsim.config.load import read_yaml_mapping

        path = preset_path(self.paper, dataset, backbone)
        return replace(self, base=read_yaml_mapping(path), compare_with=(dataset,),
                       dataset=dataset, backbone=backbone, preset=path)

    @property
    def slug(self) -> str:
        """The preset's name (``cifar100_resnet18``); empty without one."""
        return self.preset.stem if self.preset is not None else ""

    @property
    def label(self) -> str:
        """``CIFAR-100``, ``CIFAR-100, ViT-B/16``; empty without a dataset."""
        if self.dataset is None:
            return ""
        return self.dataset + (f", {BACKBONES[self.backbone]}" if self.backbone == "vit_b16" else "")


def preset_path(paper: str, dataset: str, backbone: str | None = None) -> Path:
    """``scenarios/papers/<paper>/<dataset>[_<backbone>].yaml`` (``dataset`` as the paper
    names it: ``CIFAR-10``)."""
    name = DATASET_NAMES[dataset] + (f"_{backbone}" if backbone else "")
    return PRESETS / paper / f"{name}.yaml"


def _hetero_devices(end_layers: tuple[int, int, int] = (3, 4, 5), count: int = 4) -> dict:
    """The quickstart's 12-device fleet: 4 Raspberry Pi 4 (Wi-Fi), 4 Jetson Nano (LTE),
    4 Jetson Orin Nano (Wi-Fi), at the given end layers."""
    return {
        "pi4_wifi": {"profile": "rpi4", "count": count, "end_layer": end_layers[0], "link": "wifi"},
        "nano_lte": {"profile": "jetson_nano", "count": count, "end_layer": end_layers[1],
                     "link": "lte", "link_override": {"uplink_bps": "5 Mbps", "latency_s": "35 ms"}},
        "orin_wifi": {"profile": "jetson_orin_nano", "count": count, "end_layer": end_layers[2],
                      "link": "wifi"},
    }


def _fedsga_devices(scale: float = 1.0) -> dict:
    """The 20-device fleet of scenarios/fedsga_vs_multisfl.yaml (FedSGA's N = 20; the paper
    names no hardware): 8 Pi 4, 6 Jetson Nano, 4 Orin Nano, 2 phones; ``end_layer`` is the
    cut of the static split policy."""
    counts = {k: max(1, round(v * scale)) for k, v in
              {"pi4_wifi": 8, "nano_lte": 6, "orin_wifi": 4, "phone_5g": 2}.items()}
    return {
        "pi4_wifi": {"profile": "rpi4", "count": counts["pi4_wifi"], "end_layer": 1, "link": "wifi"},
        "nano_lte": {"profile": "jetson_nano", "count": counts["nano_lte"], "end_layer": 2,
                     "link": "lte"},
        "orin_wifi": {"profile": "jetson_orin_nano", "count": counts["orin_wifi"], "end_layer": 3,
                      "link": "wifi"},
        "phone_5g": {"profile": "phone_midrange", "count": counts["phone_5g"], "end_layer": 2,
                     "link": "5g"},
    }


#: FedSGA's hyperparameters, §4.1.3 (sflsim's field names; they are also sflsim's defaults).
FEDSGA_ALGORITHM = {"name": "fedsga", "rho": 0.1, "beta": 0.05, "lambda_align": 0.1, "tau_a": 0.5,
                    "tau_m": 0.5, "num_prompts": 4, "mu": 0.9, "calibration_every": 5}

# ---- Hetero-SplitEE: Table II, §IV-A. Measured cost at this scale (2026-11-30, AMD EPYC,
# 1 torch thread per run, 1-min load about 2.7 from other jobs on the 2 cores), from timed
# 1- and 2-round trials of the 12-client runs at 3,000 training images and width 0.25:
# a round with evaluation and the early-exit sweep takes 19 s (Sequential), 18 s
# (Averaging), 20 s (Distributed), 36 s (Centralized, three models); a Sequential round
# without evaluation 11 s, evaluation + early-exit sweep 7 s. With evaluation every 10 of
# 30 rounds: about 5.6 min per Sequential/Averaging/Distributed run, 16 min per
# heterogeneous Centralized run (three models), 5.5 min per homogeneous one. Augmentation
# (§IV-A1) adds nothing measurable (2026-12-01, Intel Xeon, load 3: one round without
# evaluation 11.9 and 12.6 s with it, 13.7 and 10.7 s without). Repeat with
# `python analysis/reproduce.py TARGET --scale cpu --estimate --workers 2`.
HETERO_CPU = Scale(
    name="cpu", paper="hetero_splitee",
    base={
        "name": "hetero", "seed": 0,
        "dataset": {"name": "fashion_mnist", "fraction": 0.25, "test_fraction": 1.0,
                    "partition": {"scheme": "iid"},
                    # §IV-A1: zero-pad 4, random crop of the original size, left-right flip
                    "augment": {"random_crop_padding": 4, "horizontal_flip": True}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.25},
        "devices": _hetero_devices(),
        "server": {"profile": "a100"},
        "algorithm": {"name": "hetero_splitee_sequential", "server_lr_divisor": 12.0},
        "training": {"rounds": 30, "local_epochs": 1, "batch_size": 64,
                     "optimizer": {"name": "adam", "lr": 1.0e-3},
                     "schedule": {"name": "cosine", "min_lr": 1.0e-6}},
        "evaluation": {"every_rounds": 10, "max_test_samples": None,
                       "early_exit": {"enabled": True}},
    },
    shrinks=(
        Shrink("dataset", "CIFAR-10 / CIFAR-100 / STL-10", "embedded Fashion-MNIST subset "
               "(28x28 grey, 10 classes)", "the only dataset on a fresh machine (no download); "
               "sflsim's CIFAR readers need the files (README \"Data\")"),
        Shrink("training images", "50,000 (4,167 per client)", "3,000 (250 per client; fraction "
               "0.25 of the 12,000-image subset)", "time"),
        Shrink("test images", "10,000", "2,000 (the embedded subset's whole test split: "
               "dataset.test_fraction 1)", "the subset's test split; about ±1 point of sampling "
               "noise per run"),
        Shrink("model width", "1.0 (channels 64-64-64-128-256-512)", "0.25 (16-16-16-32-64-128)",
               "time: about 16x fewer FLOPs"),
        Shrink("rounds (epochs)", "600", "30 (cosine T_max 600 -> 30, same lr range)", "time"),
        Shrink("batch size", "1024", "64", "keeps the paper's steps per client epoch "
               "(4,167/1024 = 4.1; 250/64 = 3.9) at 1/17 of the data"),
        Shrink("evaluation", "every epoch (not stated)", "every 10 rounds and after the last",
               "time: a full evaluation costs about 40% of a round"),
        Shrink("runs per configuration", "not stated (one number per cell)", SEEDS_RUN,
               "a spread for every claim: a margin inside it is reported as within noise"),
        Shrink("hardware", "not stated", "4 Raspberry Pi 4 (Wi-Fi), 4 Jetson Nano (LTE), 4 Jetson "
               "Orin Nano (Wi-Fi), A100 server (the quickstart's fleet)",
               "only simulated time depends on it; accuracy does not"),
    ),
    seeds=3, compare_with=("CIFAR-100", "CIFAR-10"),
)
HETERO_SMOKE = Scale(
    name="smoke", paper="hetero_splitee",
    base={**copy.deepcopy(HETERO_CPU.base),
          "dataset": {**copy.deepcopy(HETERO_CPU.base["dataset"]), "fraction": 0.02},
          "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
          "devices": _hetero_devices(count=1),
          "algorithm": {"name": "hetero_splitee_sequential", "server_lr_divisor": 3.0},
          "training": {"rounds": 1, "local_epochs": 1, "batch_size": 16,
                       "optimizer": {"name": "adam", "lr": 1.0e-3},
                       "schedule": {"name": "cosine", "min_lr": 1.0e-6}},
          "evaluation": {"every_rounds": 1, "max_test_samples": 40,
                         "early_exit": {"enabled": True, "tau_step": 0.5, "samples_per_client": 4}}},
    shrinks=(Shrink("everything", "the paper", "3 clients, 240 images, width 1/16, 1 round",
                    "a seconds-long check of the harness, not of the paper"),),
    seeds=1, compare_with=("CIFAR-100", "CIFAR-10"),
)
#: --scale paper: Table II's settings, read from scenarios/papers/hetero_splitee/<dataset>.yaml
#: (Scale.on); here only what still departs from the paper at that scale.
HETERO_PAPER = Scale(
    name="paper", paper="hetero_splitee", base={},
    shrinks=(
        Shrink("hardware", "not stated", "4 Raspberry Pi 4 (Wi-Fi), 4 Jetson Nano (LTE, 5 Mbps up, "
               "35 ms), 4 Jetson Orin Nano (Wi-Fi), A100 server (the quickstart's fleet)",
               "the paper names none; only simulated time, bytes and energy depend on it, not "
               "accuracy"),
        Shrink("evaluation", "not stated", "every 10 rounds and after the last, whole test set",
               "time: a full evaluation with the early-exit sweep costs a good part of a round"),
        Shrink("optimizer details", "Adam (Table II); betas, eps, weight decay not stated",
               "torch's defaults (betas 0.9, 0.999; eps 1e-8), no weight decay",
               "the paper states none"),
        Shrink("STL-10 stem", "Table I: 7x7 conv, 3x3 stride-2 max-pool, padding not given",
               "max-pool padding 1 (torchvision's ResNet)", "as sflsim/models/resnet.py says",
               applies=("STL-10",)),
    ),
    seeds=1, compare_with=("CIFAR-100", "CIFAR-10"),
)

# ---- FedSGA: §4.1.3. Measured cost at this scale (2026-11-30, AMD EPYC, 1 torch thread per
# run, 1-min load about 2.6 from other jobs on the 2 cores): one round (5 local epochs) of a
# 20-client run at 2,400 training images, width 0.125, with a full evaluation: FedSGA 20 s,
# MultiSFL 15 s (`--estimate`, 2-round trials), FedAvg 14 s (6-round trial); at width 0.25
# and 1,200 images FedSGA took 23 s, MultiSFL 21 s, FedAvg and SplitFed V1 19 s. So one
# 15-round run: FedSGA (any variant) about 5 min, MultiSFL 3.8, FedAvg/SplitFed about 3.5
# (upper bounds: evaluation runs every 5 rounds, the trials evaluated every round).
# At lr 0.01 (the CIFAR-100 value) no method left chance level within 3 rounds; at lr 0.1
# FedAvg reached 73% and FedSGA 25% after 6 rounds (IID).
#: what FedSGA's paper leaves open, at every scale
FEDSGA_UNSTATED = (
    Shrink("hardware", "not stated", "8 Raspberry Pi 4, 6 Jetson Nano, 4 Jetson Orin Nano, "
           "2 phones, A100 server (scenarios/fedsga_vs_multisfl.yaml)",
           "only simulated time, FLOPs by cut and MultiSFL's resource cuts depend on it"),
    Shrink("optimizer details", "SGD; momentum, weight decay, schedule not stated",
           "SGD, momentum 0, no weight decay, constant lr", "the paper states none"),
    Shrink("MultiSFL split budget", "not stated (\"adjusts split strategies according to "
           "heterogeneous client resources\")", "sflsim's default: resource policy, 60 s "
           "per device and round (FedSGA's resource split in Fig. 4: the same 60 s)",
           "not tuned"),
    Shrink("SplitFed and static cuts", "not stated", "each device group's end layer: 1 (Pi 4), "
           "2 (Nano, phone), 3 (Orin) of ResNet-18's 4 cuts (ViT-B/16: 3, 6, 9 of 12); SplitFed "
           "is sflsim's splitfed_v1", "the fleet's scenario; sflsim's static policy"),
    Shrink("baselines' own settings (Table 2)", "not stated",
           "each baseline's defaults in sflsim (FedProx mu 0.01, FedMut alpha 4, FedAS and "
           "FedGH as their authors' code, MergeSFL and MU-SplitFed as their docstrings); "
           "FedBABU fine-tunes each client's copy for 5 epochs; the personalised FedBABU, "
           "FedGH and FedAS are scored on the common test set (test_distribution: global), "
           "averaged over clients, and on each client's own distribution beside it",
           "not tuned. \"All methods are evaluated under the same ... training protocol\" "
           "(§4.1.3): one test set for every row. The personalised methods' own score "
           "(test_distribution: client, as their papers test) is shown below the table, "
           "not compared with the other rows"),
)
FEDSGA_CPU = Scale(
    name="cpu", paper="fedsga",
    base={
        "name": "fedsga", "seed": 0,
        "dataset": {"name": "fashion_mnist", "fraction": 0.2, "test_fraction": 1.0,
                    "partition": {"scheme": "iid"}},
        "model": {"name": "resnet18", "width": 0.125},
        "devices": _fedsga_devices(),
        "server": {"profile": "a100"},
        "algorithm": dict(FEDSGA_ALGORITHM),
        "training": {"rounds": 15, "local_epochs": 5, "batch_size": 64,
                     "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0},
                     "schedule": {"name": "constant"}},
        "evaluation": {"every_rounds": 5, "max_test_samples": None},
    },
    shrinks=(
        Shrink("dataset", "CIFAR-10 / CIFAR-100 / Tiny-ImageNet / DomainNet",
               "embedded Fashion-MNIST subset (28x28 grey, 10 classes)",
               "the only dataset on a fresh machine; sflsim's CIFAR readers need the files "
               "(README \"Data\"). Numbers are set beside CIFAR-100 (Tables 4, 5, Fig. 4 print no "
               "CIFAR-10) and, in Table 2, CIFAR-10"),
        Shrink("learning rate", "0.1 (CIFAR-10), 0.01 (CIFAR-100 and the rest)", "0.1",
               "Fashion-MNIST is a 10-class task: the CIFAR-10 protocol; at 0.01 no method "
               "left chance level in 3 rounds of the cpu scale"),
        Shrink("training images", "50,000 (2,500 per client: 40 steps per local epoch)",
               "2,400 (120 per client: 2 steps per local epoch; fraction 0.2 of the "
               "12,000-image subset)", "time: 5 local epochs over all data per round"),
        Shrink("test images", "10,000", "2,000 (the embedded subset's whole test split: "
               "dataset.test_fraction 1)", "the subset's test split; about ±1 point of sampling "
               "noise per run"),
        Shrink("model width", "1.0 (ResNet-18, 64-512 channels)", "0.125 (8-64 channels)",
               "time: 2.5x faster per round than width 0.25 on this CPU"),
        Shrink("rounds", "100 (CIFAR-10), 300 (CIFAR-100)", "15 (calibration rounds 1, 6, 11)",
               "time"),
        Shrink("evaluation", "not stated", "every 5 rounds and after the last", "time"),
        *FEDSGA_UNSTATED,
    ),
    seeds=3, compare_with=("CIFAR-100", "CIFAR-10"),
)
FEDSGA_SMOKE = Scale(
    name="smoke", paper="fedsga",
    base={**copy.deepcopy(FEDSGA_CPU.base),
          "dataset": {"name": "fashion_mnist", "fraction": 0.02, "partition": {"scheme": "iid"}},
          "model": {"name": "resnet18", "width": 0.0625},
          "devices": _fedsga_devices(scale=0.25),
          "training": {"rounds": 1, "local_epochs": 1, "batch_size": 16,
                       "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0},
                       "schedule": {"name": "constant"}},
          "evaluation": {"every_rounds": 1, "max_test_samples": 40}},
    shrinks=(Shrink("everything", "the paper", "6 clients, 240 images, width 1/16, 1 round, "
                    "1 local epoch", "a seconds-long check of the harness, not of the paper"),),
    seeds=1, compare_with=("CIFAR-100", "CIFAR-10"),
)
#: --scale paper: §4.1.3's settings, read from scenarios/papers/fedsga/<dataset>_<backbone>.yaml
#: (Scale.on); here only what still departs from the paper at that scale.
FEDSGA_PAPER = Scale(
    name="paper", paper="fedsga", base={},
    shrinks=(
        Shrink("torch device", "not stated", "with --device cuda the algorithms of "
               "sflsim.config.schema.CUDA_ALGORITHMS train on the GPU: FedSGA and all its "
               "variants and every baseline",
               "wall time only: simulated times come from the profiles, and the results agree "
               "to float tolerance"),
        Shrink("evaluation", "not stated", "every 10 rounds and after the last, whole test set",
               "time"),
        Shrink("runs per configuration", "\"multiple runs\" (how many not stated)", SEEDS_RUN,
               "mean ± std as the paper prints them"),
        *FEDSGA_UNSTATED,
        Shrink("DomainNet", "Table 1: 586,575 / 34,000 images at 224x224; Non-IID: \"the same "
               "partitioning protocol ... within its multi-domain data\" (§4.1.1)",
               "the official train/test lists of all six domains (about 410,000 / 176,000) at "
               "224x224; Non-IID: client i holds domain i mod 6, Dirichlet 0.1 labels within it "
               "(partition scheme domain); IID: uniform over all domains",
               "sflsim's reading of §4.1.1; the paper's split sizes are not the official lists'",
               applies=("DomainNet",)),
        Shrink("ViT-B/16", "input size and initialisation not stated",
               "trained from scratch on the datasets' own sizes: 32x32 (CIFAR-100, 2x2 patches "
               "of 16), 64x64 (Tiny-ImageNet, 4x4), 224x224 (DomainNet, 14x14); its 20 "
               "per-client server copies need about 29, 31 and 65 GiB of host memory",
               "sflsim resizes only Tiny-ImageNet and DomainNet", applies=("vit_b16",)),
    ),
    seeds=3, compare_with=("CIFAR-100", "CIFAR-10"),
)

SCALE_TABLE = {(s.paper, s.name): s for s in (HETERO_CPU, HETERO_SMOKE, HETERO_PAPER, FEDSGA_CPU,
                                              FEDSGA_SMOKE, FEDSGA_PAPER)}
