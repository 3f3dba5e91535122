"""Datasets (embedded Fashion-MNIST subset and user-supplied files) and partitioners."""

from sflsim.data.datasets import DATASETS, DatasetSplit, load_dataset
from sflsim.data.partition import PARTITIONERS, label_skew, partition, register_partitioner

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "DatasetSplit",
    "label_skew",
    "load_dataset",
    "partition",
    "register_partitioner",
]
