"""Datasets (embedded Fashion-MNIST subset and user-supplied files) and partitioners."""

from sflsim.data.datasets import DATASETS, load_dataset
from sflsim.data.partition import PARTITIONERS, label_skew, partition, register_partitioner
from sflsim.data.split import DatasetSplit

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "DatasetSplit",
    "label_skew",
    "load_dataset",
    "partition",
    "register_partitioner",
]
