"""Image-classification datasets: which exist, where their files are, and loading them.

:func:`load_dataset` returns a :class:`~sflsim.data.split.DatasetSplit` whose
images are uint8 ``(N, C, H, W)``, normalised per batch when read (see
:mod:`sflsim.data.split`). Datasets stored as arrays (Fashion-MNIST, CIFAR,
STL-10: :mod:`sflsim.data.readers`) load into memory; datasets stored as image
folders (Tiny-ImageNet, DomainNet: :mod:`sflsim.data.folders`; the user's own:
:mod:`sflsim.data.image_folder`) load as
:class:`~sflsim.data.images.DiskImages`, listed but not decoded: the runner decodes
them into memory when the memory estimate says they fit, else a batch at a time
(:func:`sflsim.runner.hold_data`).

Datasets (name: classes, train / test images, size, files under ``data_root``):

* ``fashion_mnist``: 10, 12,000 / 2,000, 28x28 grey, shipped (``sflsim/data/embedded``).
* ``fashion_mnist_full``: 10, 60,000 / 10,000, 28x28 grey, the IDX files
  (Debian's ``dataset-fashion-mnist``).
* ``cifar10``, ``cifar100``: 10 / 100, 50,000 / 10,000, 32x32 RGB,
  ``cifar-10-batches-py`` / ``cifar-100-python``.
* ``stl10``: 10, 5,000 / 8,000, 96x96 RGB, ``stl10_binary/``.
* ``tiny_imagenet``: 200, 100,000 / 10,000 (the validation split), 64x64 RGB,
  ``tiny-imagenet-200/``.
* ``domainnet``: 345, ~410,000 / ~176,000 over six domains, resized to
  ``image_size``, ``<domain>/<class>/<image>`` and ``<domain>_{train,test}.txt``.
* ``image_folder``: the user's own images, ``train/<class>/<image>`` and
  ``test/<class>/<image>``: classes, channels and size from the files (or
  ``image_size``, ``channels``); see :mod:`sflsim.data.image_folder`.
* ``synthetic``: made up, no files: as many samples, classes and as large images as
  ``dataset.synthetic`` says (default 10, 60,000 / 10,000, 28x28 grey). Labels are
  uniform over the classes, every image is all zeros and one image is held however
  many samples there are (:func:`synthetic_split`). It carries no signal, so a run
  that trains on it stays at chance accuracy: it is for timing-only runs of fleets
  larger than any dataset (a client needs a sample) and for pipeline checks.

Normalisation statistics (:data:`STATS`, per channel, pixels scaled to [0, 1]):
Fashion-MNIST and CIFAR from their training sets; STL-10 and Tiny-ImageNet the
training-set values commonly used for them in public training code (not
recomputed here: the files are not on this machine); DomainNet ImageNet's (as
DomainNet baselines use), for every domain; ``synthetic`` (0, 1), which leaves its
zeros zeros; ``image_folder`` (0.5, 0.5), statistics not computed (its module says why).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from pydantic import ValidationError

from sflsim.config.schema import SyntheticConfig
from sflsim.data.folders import (
    DOMAINNET_CLASSES,
    DOMAINNET_DOMAINS,
    TINY_IMAGENET_CLASSES,
    FolderIndex,
    read_domainnet,
    read_tiny_imagenet,
)
from sflsim.data.image_folder import MEAN, STD, read_image_folder
from sflsim.data.images import DiskImages
from sflsim.data.presence import DEFAULT_DATA_ROOT, named_by_the_dataset_field
from sflsim.data.readers import (
    EMBEDDED_NPZ,
    FASHION_MNIST_ROOT,
    TORCHVISION_SETS,
    _load_embedded,
    _load_idx_folder,
    check_arrays,
    load_torchvision,
    to_nchw,
)
from sflsim.data.split import DatasetSplit
from sflsim.errors import ConfigError
from sflsim.inputs.messages import describe_error

__all__ = ["DATASETS", "DOMAINNET_DOMAINS", "EMBEDDED_NPZ",
           "FASHION_MNIST_ROOT", "NUM_CLASSES",
           "load_dataset", "synthetic_split"]

DATASETS = ("fashion_mnist", "fashion_mnist_full", "cifar10", "cifar100", "stl10",
            "tiny_imagenet", "domainnet", "image_folder", "synthetic")

#: classes of each dataset; synthetic: its default; image_folder: None, its class folders
NUM_CLASSES: dict[str, int | None] = {
    "fashion_mnist": 10, "fashion_mnist_full": 10, "cifar10": 10, "cifar100": 100, "stl10": 10,
    "tiny_imagenet": TINY_IMAGENET_CLASSES, "domainnet": DOMAINNET_CLASSES, "image_folder": None,
    "synthetic": SyntheticConfig().classes}

_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
#: Per-channel (mean, std) of the training images scaled to [0, 1].
STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "fashion_mnist_full": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "stl10": ((0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)),
    "tiny_imagenet": ((0.4802, 0.4481, 0.3975), (0.2302, 0.2265, 0.2262)),
    "domainnet": _IMAGENET,
    "synthetic": ((0.0,), (1.0,)),  # per channel, whatever the channels (synthetic_split)
}
#: Datasets read from image files, which ``dataset.image_size`` resizes -> their default size
#: (None: the images' own, :mod:`sflsim.data.image_folder`)
RESIZABLE: dict[str, int | None] = {"tiny_imagenet": 64, "domainnet": 64, "image_folder": None}
#: Datasets torchvision can download (``dataset.download``)
DOWNLOADABLE = tuple(TORCHVISION_SETS)


def load_dataset(
    name: str,
    *,
    data_root: str | Path | None = None,
    fraction: float = 1.0,
    seed: int = 0,
    image_size: int | None = None,
    test_fraction: float | None = None,
    domains: Sequence[str] | None = None,
    download: bool = False,
    synthetic: SyntheticConfig | Mapping[str, object] | None = None,
    channels: int | None = None,
) -> DatasetSplit:
    """Load a dataset: arrays into memory, image folders listed (not decoded).

    Args:
        name: One of :data:`DATASETS`.
        data_root: Folder holding the files. ``fashion_mnist`` ignores it;
            ``fashion_mnist_full`` defaults to ``/usr/share/datasets/fashion-mnist``;
            the others default to ``./data``, which must hold ``cifar-10-batches-py``,
            ``cifar-100-python``, ``stl10_binary``, ``tiny-imagenet-200``, or DomainNet's
            ``<domain>/`` folders and ``<domain>_train.txt`` / ``_test.txt`` lists;
            ``image_folder`` needs it: the folder holding ``train/`` and ``test/``.
        fraction: In ``(0, 1]``. Keeps a class-balanced subset of both train
            and test: ``max(1, round(fraction * n_c))`` samples of each class c (of
            each domain and class for DomainNet), drawn with
            ``np.random.default_rng(seed)``, in source order. ``1.0`` returns
            everything unchanged.
        seed: Seed of the subset draw (unused when both fractions are 1).
        test_fraction: In ``(0, 1]``: the test split's fraction, drawn the same way
            after the training subset (which it leaves unchanged); None = ``fraction``.
            ``1.0`` evaluates on the whole test split.
        image_size: Side in pixels images are resized to (:data:`RESIZABLE` only;
            default 64; ``image_folder``: the images' own side).
        domains: DomainNet's domains to use (default all six, in
            :data:`~sflsim.data.folders.DOMAINNET_DOMAINS` order); sample domain ids
            follow this order.
        download: Let torchvision download and extract the files into ``data_root``
            when they cannot be read (:data:`DOWNLOADABLE` only).
        synthetic: The size of ``synthetic`` (the fields of
            :class:`~sflsim.config.schema.SyntheticConfig`, as it or a mapping; None =
            its defaults); for that dataset only. See :func:`synthetic_split`.
        channels: ``image_folder`` only: 1 (grey) or 3 (RGB) channels; None: grey when
            every image is grey, else RGB.

    Returns:
        The :class:`DatasetSplit` (its images are
        :class:`~sflsim.data.images.DiskImages` for image-folder datasets).

    Raises:
        ConfigError: Unknown ``name``, ``fraction`` outside ``(0, 1]``, an option
            the dataset does not have, or ``image_folder`` without ``data_root``.
        DatasetNotFoundError: Files missing or unreadable; the message lists the
            paths looked at, the layout expected and how to get the files.
        DatasetError: The files read but hold something else than the dataset:
            images not uint8 of the dataset's shape, labels outside
            ``[0, num_classes)`` (names the file and the first bad index or line),
            image and label counts that differ, an empty split, a list line that
            does not parse or an image that does not exist; for ``image_folder`` a
            split without class folders, a class folder without images, ``test/``
            classes other than ``train/``'s, a file that is not an image, or images of
            several sizes without ``image_size``. See
            :func:`~sflsim.data.readers.check_arrays`, :mod:`sflsim.data.folders` and
            :func:`~sflsim.data.image_folder.read_image_folder`.
    """
    fractions = _checked_fractions(name, fraction, test_fraction)
    _check_options(name, image_size, domains, download, channels, data_root)
    if name == "synthetic":
        return synthetic_split(synthetic, fraction=fraction, seed=seed, test_fraction=fractions["test"])
    if synthetic is not None:
        raise ConfigError(f"dataset.synthetic: applies only to dataset synthetic, not to "
                          f"{name}: remove dataset.synthetic")
    root = Path(data_root) if data_root is not None else DEFAULT_DATA_ROOT
    rng = np.random.default_rng(seed) if min(fractions.values()) < 1.0 else None
    with named_by_the_dataset_field(name):
        if name in RESIZABLE:
            return _from_folders(name, root, image_size, channels, domains, fractions, rng)
        arrays, sources = _read_arrays(name, data_root, root, download)
    return _from_arrays(name, arrays, sources, fractions, rng)


def _checked_fractions(name: str, fraction: float,
                       test_fraction: float | None) -> dict[str, float]:
    """Refuse an unknown dataset name and a fraction outside ``(0, 1]``; the fraction of
    each split kept (``test_fraction`` None: ``fraction``)."""
    if name not in DATASETS:
        raise ConfigError(
            f"dataset.name: unknown dataset {name!r}; valid names: {', '.join(DATASETS)}"
        )
    if not isinstance(fraction, numbers.Real) or not 0.0 < fraction <= 1.0:
        raise ConfigError(f"dataset.fraction: must be in (0, 1] (got {fraction!r})")
    if test_fraction is None:
        test_fraction = fraction
    if not isinstance(test_fraction, numbers.Real) or not 0.0 < test_fraction <= 1.0:
        raise ConfigError(f"dataset.test_fraction: must be in (0, 1], or null to follow "
                          f"dataset.fraction (got {test_fraction!r})")
    return {"train": fraction, "test": test_fraction}


def _from_folders(name: str, root: Path, image_size: int | None, channels: int | None,
                  domains: Sequence[str] | None, fractions: dict[str, float],
                  rng: np.random.Generator | None) -> DatasetSplit:
    """A dataset stored as image folders (:data:`RESIZABLE`): listed, not decoded, and
    subset (``rng`` None: whole)."""
    index = (read_image_folder(root, image_size=image_size, channels=channels)
             if name == "image_folder" else read_tiny_imagenet(root)
             if name == "tiny_imagenet" else read_domainnet(root, domains))
    size = image_size or RESIZABLE[name] or index.image_size
    assert size is not None  # image_folder's reader gives the images' own side
    return _from_index(name, index, size, fractions, rng)


def _read_arrays(name: str, data_root: str | Path | None, root: Path,
                 download: bool) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The arrays of a dataset stored as arrays (:mod:`sflsim.data.readers`), and the
    file each came from."""
    if name == "fashion_mnist":
        arrays, sources = _load_embedded()
    elif name == "fashion_mnist_full":
        arrays, sources = _load_idx_folder(Path(data_root) if data_root is not None
                                           else FASHION_MNIST_ROOT)
    else:
        arrays, sources = load_torchvision(name, root, download)
    return arrays, sources


def _from_arrays(name: str, arrays: dict[str, np.ndarray], sources: dict[str, str],
                 fractions: dict[str, float], rng: np.random.Generator | None) -> DatasetSplit:
    """A :class:`DatasetSplit` in memory from a dataset's arrays: checked
    (:func:`~sflsim.data.readers.check_arrays`), subset (``rng`` None: whole)."""
    num_classes = NUM_CLASSES[name]
    assert num_classes is not None  # known for every dataset read as arrays
    check_arrays(name, arrays, sources, num_classes)
    if rng is not None:
        for split in (s for s in ("train", "test") if fractions[s] < 1.0):
            keep = _balanced_subset(arrays[f"y_{split}"], fractions[split], rng)
            arrays[f"x_{split}"] = arrays[f"x_{split}"][keep]
            arrays[f"y_{split}"] = arrays[f"y_{split}"][keep]

    mean, std = STATS[name]
    x_train = to_nchw(arrays["x_train"])
    return DatasetSplit(
        name=name,
        x_train=x_train,
        y_train=torch.from_numpy(arrays["y_train"].astype(np.int64)),
        x_test=to_nchw(arrays["x_test"]),
        y_test=torch.from_numpy(arrays["y_test"].astype(np.int64)),
        num_classes=num_classes,
        in_channels=x_train.shape[1],
        image_size=x_train.shape[2],
        mean=mean,
        std=std,
    )


def _check_options(name: str, image_size: int | None, domains: Sequence[str] | None,
                   download: bool, channels: int | None = None,
                   data_root: str | Path | None = None) -> None:
    """Refuse options the dataset does not have (ConfigError naming field, value and what is valid)."""
    if channels is not None and name != "image_folder":
        raise ConfigError(f"dataset.channels: {channels} applies only to image_folder, not to "
                          f"{name}, whose images have fixed channels: remove dataset.channels")
    if channels is not None and channels not in (1, 3):
        raise ConfigError(f"dataset.channels: must be 1 (grey) or 3 (RGB), or null to follow "
                          f"the images (got {channels!r})")
    if name == "image_folder" and data_root is None:
        raise ConfigError("dataset.data_root: image_folder needs the folder that holds "
                          "train/<class>/<image> and test/<class>/<image>; set it")
    if image_size is not None and name not in RESIZABLE:
        raise ConfigError(f"dataset.image_size: {image_size} applies only to datasets read from "
                          f"image files ({', '.join(RESIZABLE)}); {name} has fixed-size images: "
                          f"remove dataset.image_size")
    if image_size is not None and (int(image_size) != image_size or image_size < 1):
        raise ConfigError(f"dataset.image_size: must be a whole number of pixels >= 1 "
                          f"(got {image_size!r})")
    if domains is not None:
        if name != "domainnet":
            raise ConfigError(f"dataset.domains: {list(domains)} applies only to domainnet, not "
                              f"to {name}: remove dataset.domains")
        bad = [d for d in domains if d not in DOMAINNET_DOMAINS]
        if bad or not domains or len(set(domains)) != len(domains):
            raise ConfigError(f"dataset.domains: {list(domains)} must name distinct DomainNet "
                              f"domains, at least one; valid: {', '.join(DOMAINNET_DOMAINS)}")
    if download and name not in DOWNLOADABLE:
        raise ConfigError(f"dataset.download: true is available for {', '.join(DOWNLOADABLE)} "
                          f"only, not {name}: get the files as the README's dataset table says "
                          f"and set dataset.download: false")


def _from_index(name: str, index: FolderIndex, size: int, fractions: dict[str, float],
                rng: np.random.Generator | None) -> DatasetSplit:
    """A :class:`DatasetSplit` of :class:`DiskImages` from a folder listing, subset
    (``fractions``: per split)."""
    keep: dict[str, np.ndarray | slice] = {"train": slice(None), "test": slice(None)}
    if rng is not None:
        for split in (s for s in keep if fractions[s] < 1.0):
            key = index.labels[split]
            if index.domains is not None:  # balanced per domain and class
                key = index.domains[split] * DOMAINNET_CLASSES + key
            keep[split] = _balanced_subset(key, fractions[split], rng)
    domains = index.domains
    channels = index.channels
    mean, std = STATS[name] if name in STATS else ((MEAN,) * channels, (STD,) * channels)
    num_classes = len(index.classes) if index.classes else NUM_CLASSES[name]
    assert num_classes is not None
    return DatasetSplit(
        name=name,
        x_train=DiskImages(index.paths["train"][keep["train"]], size, channels),
        y_train=torch.from_numpy(index.labels["train"][keep["train"]]),
        x_test=DiskImages(index.paths["test"][keep["test"]], size, channels),
        y_test=torch.from_numpy(index.labels["test"][keep["test"]]),
        num_classes=num_classes, in_channels=channels, image_size=size, mean=mean, std=std,
        domain_train=None if domains is None else domains["train"][keep["train"]],
        domain_test=None if domains is None else domains["test"][keep["test"]],
        domain_names=index.domain_names,
    )


def _balanced_subset(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices keeping ``max(1, round(fraction * n_c))`` random samples per class."""
    keep = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n = max(1, int(round(fraction * idx.size)))
        keep.append(rng.choice(idx, size=n, replace=False))
    return np.sort(np.concatenate(keep))


def synthetic_split(options: SyntheticConfig | Mapping[str, object] | None = None, *,
                    fraction: float = 1.0, seed: int = 0,
                    test_fraction: float | None = None) -> DatasetSplit:
    """The ``synthetic`` dataset: random labels and blank images, no files.

    Labels are drawn uniformly over ``range(classes)`` by ``np.random.default_rng(seed)``,
    the training labels first, then the test labels; with ``fraction < 1`` the same
    generator then draws the class-balanced subset of each split (as
    :func:`load_dataset` does for the other datasets; ``test_fraction`` for the test
    split, None = ``fraction``). Every image is uint8 zeros, one
    ``(1, C, H, W)`` tensor expanded to ``(N, C, H, W)``: ``C * H * W`` bytes held
    however many samples there are; indexing a batch gives an ordinary tensor of it.
    The images cannot be written to (they share one image) and moving them to a GPU or
    into channels-last copies them in full. Normalisation statistics are (0, 1).

    The data carries no signal: a model trained on it stays at chance accuracy. It is
    for timing-only runs (``training.timing_only``) of more devices than a real dataset
    has samples, and for checking a pipeline end to end.

    Raises:
        ConfigError: a field out of range (named, as ``dataset.synthetic.<field>``).
    """
    if options is None:
        options = SyntheticConfig()
    elif not isinstance(options, SyntheticConfig):
        try:
            options = SyntheticConfig.model_validate(dict(options))
        except ValidationError as exc:
            raise ConfigError("; ".join(f"dataset.synthetic.{describe_error(err, SyntheticConfig)}"
                                        for err in exc.errors())) from None
    channels, side = options.image_shape[0], options.image_shape[1]
    rng = np.random.default_rng(seed)
    labels = {split: rng.integers(0, options.classes, size=n, dtype=np.int64)
              for split, n in (("train", options.train_samples), ("test", options.test_samples))}
    fractions = {"train": fraction, "test": fraction if test_fraction is None else test_fraction}
    labels = {split: y[_balanced_subset(y, fractions[split], rng)] if fractions[split] < 1.0
              else y for split, y in labels.items()}
    blank = torch.zeros((1, channels, side, side), dtype=torch.uint8)
    mean, std = STATS["synthetic"]
    return DatasetSplit(
        name="synthetic",
        x_train=blank.expand(len(labels["train"]), channels, side, side),
        y_train=torch.from_numpy(labels["train"]),
        x_test=blank.expand(len(labels["test"]), channels, side, side),
        y_test=torch.from_numpy(labels["test"]),
        num_classes=options.classes, in_channels=channels, image_size=side,
        mean=mean * channels, std=std * channels,
    )
