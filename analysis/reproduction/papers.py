"""Where the harness's files are, and the papers it reproduces (their titles, datasets and
backbones as the papers name them)."""

from __future__ import annotations

from pathlib import Path

#: the ``analysis/`` folder (the paper numbers, the report, the stored runs)
HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent
PAPER_NUMBERS = HERE / "paper_numbers.csv"
REPORT = HERE / "REPRODUCTION.md"
DEFAULT_OUT = Path("runs") / "reproduce"
#: the papers' preset scenarios, the base scenarios of ``--scale paper`` (one per paper,
#: dataset and, for FedSGA, backbone: ``<paper>/<dataset>[_<backbone>].yaml``)
PRESETS = REPO / "scenarios" / "papers"
#: a paper's dataset (as paper_numbers.csv names it) -> sflsim's dataset name
DATASET_NAMES = {"CIFAR-10": "cifar10", "CIFAR-100": "cifar100", "STL-10": "stl10",
                 "Tiny-ImageNet": "tiny_imagenet", "DomainNet": "domainnet"}
#: a backbone of the FedSGA presets -> how the paper names it
BACKBONES = {"resnet18": "ResNet-18", "vit_b16": "ViT-B/16"}
SCALES = ("cpu", "smoke", "paper")
PAPER_TITLES = {
    "hetero_splitee": ('Hetero-SplitEE, "Hetero-SplitEE: Split Learning of Neural Networks with '
                       'Early Exits for Heterogeneous IoT Devices" (arXiv 2512.09313)'),
    "fedsga": ('FedSGA, "When Is Shallow Enough? Adaptive Split Federated Learning with '
               'Client-Specific Sufficiency Estimation" (CIKM 2026, arXiv 2608.15639)'),
}
