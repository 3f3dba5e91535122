"""A run's dataset: loaded and checked against the scenario (a sample for every client, a
crop padding the images allow), held in memory or left on disk (``dataset.storage``),
and the domain of each client's samples."""

from __future__ import annotations

import numpy as np

from sflsim.config.scenario import Scenario
from sflsim.data import DatasetSplit, load_dataset
from sflsim.errors import ConfigError
from sflsim.memory import available_memory_bytes, check_fits, estimate_memory
from sflsim.models import StagedBackbone
from sflsim.text import plural


def load_data(scenario: Scenario) -> DatasetSplit:
    """Load the scenario's dataset and check it has a sample for every client.

    Raises:
        DatasetNotFoundError: the files are missing (says where it looked).
        ConfigError: more clients than training samples.
    """
    ds = scenario.dataset
    data = load_dataset(ds.name, data_root=ds.data_root, fraction=ds.fraction,
                        test_fraction=ds.test_fraction,
                        seed=scenario.stream_seeds.partition, image_size=ds.image_size,
                        domains=ds.domains, download=ds.download, synthetic=ds.synthetic,
                        channels=ds.channels)
    n_train = len(data.y_train)
    if scenario.num_clients > n_train:
        counts = (", ".join(f"{k}: {g.count}" for k, g in scenario.devices.items())
                  or f"fleet {scenario.fleet}")
        more = ("dataset.synthetic.train_samples or dataset.fraction" if ds.name == "synthetic"
                else "dataset.fraction (a timing-only run can use dataset.name: synthetic)")
        raise ConfigError(
            f"devices: {plural(scenario.num_clients, 'client')} in total ({counts}) but {ds.name} "
            f"with dataset.fraction={ds.fraction} has only {plural(n_train, 'training sample')}; "
            f"every client needs at least one: lower devices.*.count or raise {more}"
        )
    return data


def check_augment(scenario: Scenario, data: DatasetSplit) -> None:
    """Refuse a crop padding wider than the images (a crop would then mostly show padding).

    Raises:
        ConfigError: naming the field, the value and the image side.
    """
    augment = scenario.dataset.augment
    pad = augment.random_crop_padding if augment is not None else 0
    if pad > data.image_size:
        raise ConfigError(f"dataset.augment.random_crop_padding: {pad} pixels is more than the "
                          f"side of {scenario.dataset.name}'s {data.image_size}x{data.image_size} "
                          f"images; valid: 0 to {data.image_size} (Hetero-SplitEE pads 4)")


def hold_data(scenario: Scenario, data: DatasetSplit, backbone: StagedBackbone) -> DatasetSplit:
    """Decode a dataset read from image files into memory, or keep it on disk.

    ``dataset.storage``: ``memory`` decodes every image once (uint8); ``disk`` keeps
    the files and decodes each batch when it is read
    (:class:`~sflsim.data.images.DiskImages`); ``auto`` decodes into memory when the
    run's memory estimate (:func:`~sflsim.memory.estimate_memory`) with the images in
    memory fits :func:`~sflsim.memory.available_memory_bytes`, and keeps them on disk
    otherwise (the runner then checks that the run fits that way). Either way the
    images, and so the results, are the same. Datasets read as arrays are in memory
    already and are returned as they are.

    Raises:
        ConfigError: ``storage: memory`` and the run does not fit with the images in
            memory (before any is decoded).
    """
    if not data.on_disk:
        return data
    storage = scenario.dataset.storage
    if storage == "disk":
        return data
    held, available = estimate_memory(scenario, backbone, data, on_disk=False), \
        available_memory_bytes()
    if storage == "auto" and held.total_bytes > available:
        return data
    check_fits(held, available)  # storage: memory: refused before decoding what cannot fit
    return data.in_memory()


def client_domain(data: DatasetSplit, indices: np.ndarray) -> str | None:
    """The name of the domain of a client's samples (the clients table's ``domain``), None
    for a dataset without domains; several names joined by ``+`` if the partition mixed
    domains (not under the ``domain`` scheme)."""
    if data.domain_train is None or not len(indices):
        return None
    ids = np.unique(data.domain_train[indices])
    return "+".join(data.domain_names[i] for i in ids)
