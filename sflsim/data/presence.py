"""Whether a scenario's dataset files are there, told before torch loads.

:func:`check_dataset_files` runs the readers' own checks for missing files
(:mod:`sflsim.data.readers`, :mod:`sflsim.data.folders`), which need no torch, so that
``sflsim run`` and ``sflsim validate`` refuse a missing dataset in a second rather
than after the seconds torch takes to import. Whether the files hold the dataset is
checked when they are read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sflsim.config.scenario import Scenario
from sflsim.errors import DatasetNotFoundError

#: Where datasets are read from when ``dataset.data_root`` is not set (Fashion-MNIST in
#: full: Debian's package folder, :data:`sflsim.data.readers.FASHION_MNIST_ROOT`).
DEFAULT_DATA_ROOT = Path("data")


@contextlib.contextmanager
def named_by_the_dataset_field(name: str) -> Iterator[None]:
    """Files missing or unreadable: the message leads with the field that chose them,
    ``dataset.name: 'cifar10': ...`` (readers say ``dataset 'cifar10': ...``), so that
    the error of a ``--set dataset.name=...`` is told as that override's
    (:func:`sflsim.config.load.scenario_errors`)."""
    try:
        yield
    except DatasetNotFoundError as exc:
        message, prefix = str(exc), f"dataset {name!r}: "
        if message.startswith(prefix):
            message = f"dataset.name: {name!r}: {message.removeprefix(prefix)}"
        raise DatasetNotFoundError(message) from None


def check_dataset_files(scenario: Scenario) -> None:
    """Refuse a scenario whose dataset files are missing (``download: true`` leaves that
    to the download).

    Raises:
        DatasetNotFoundError: as :func:`sflsim.data.load_dataset` for missing files.
    """
    from sflsim.data.folders import check_domainnet_lists, tiny_imagenet_base
    from sflsim.data.image_folder import check_image_folder_root
    from sflsim.data.readers import (
        FASHION_MNIST_ROOT,
        TORCHVISION_SETS,
        check_torchvision_files,
        find_idx_files,
    )

    ds = scenario.dataset
    root = Path(ds.data_root) if ds.data_root is not None else DEFAULT_DATA_ROOT
    with named_by_the_dataset_field(ds.name):
        if ds.name == "fashion_mnist_full":
            find_idx_files(Path(ds.data_root) if ds.data_root is not None else FASHION_MNIST_ROOT)
        elif ds.name == "tiny_imagenet":
            tiny_imagenet_base(root)
        elif ds.name == "domainnet":
            check_domainnet_lists(root, ds.domains)
        elif ds.name == "image_folder":
            check_image_folder_root(root)
        elif ds.name in TORCHVISION_SETS and not ds.download:
            check_torchvision_files(ds.name, root)


def dataset_files_missing(scenario: Scenario) -> bool:
    """Whether the scenario's dataset files are missing, ``download: true`` or not."""
    dataset = scenario.dataset.model_copy(update={"download": False})
    try:
        check_dataset_files(scenario.model_copy(update={"dataset": dataset}))
    except DatasetNotFoundError:
        return True
    return False
