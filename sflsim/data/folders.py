"""Readers of datasets stored as image folders: Tiny-ImageNet and DomainNet.

Each reader checks the layout and lists every sample (file, label, domain) without
decoding an image; the images are :class:`~sflsim.data.images.DiskImages`.
A half-extracted or corrupt folder is one :class:`~sflsim.errors.DatasetError`
naming the file (a missing image is found here; an image that does not decode is
found when it is decoded, and named then).

Sources:
    * Tiny-ImageNet (Le & Yang 2015, CS231N), ``tiny-imagenet-200.zip`` from
      :data:`TINY_IMAGENET_URL`: 200 classes, 500 train and 50 validation 64x64
      images per class. The validation split, whose labels are public, is the test
      split (the official test split has no labels).
    * DomainNet (Peng et al. 2019, "Moment Matching for Multi-Source Domain
      Adaptation", ICCV), from :data:`DOMAINNET_URL`: 345 classes in six domains,
      with the authors' ``<domain>_train.txt`` / ``<domain>_test.txt`` lists.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sflsim.errors import DatasetError, DatasetNotFoundError

TINY_IMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_IMAGENET_FOLDER = "tiny-imagenet-200"
TINY_IMAGENET_CLASSES = 200
DOMAINNET_URL = "http://ai.bu.edu/M3SDA/"
#: DomainNet's domains, in the order its ``domain`` ids follow by default
DOMAINNET_DOMAINS = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")
DOMAINNET_CLASSES = 345
_IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


@dataclass
class FolderIndex:
    """Every sample of a dataset on disk, per split: files, labels, domains.

    Attributes:
        paths: ``{"train": (N,) file paths, "test": ...}``, sample order.
        labels: the same keys, int64 ``(N,)`` class ids.
        domains: the same keys, int64 ``(N,)`` domain ids (index into
            ``domain_names``), or None for a dataset without domains.
        domain_names: names of the domain ids.
        classes: names of the class ids, where the files name them (``image_folder``);
            empty where the dataset's table fixes the classes.
        channels: ``C`` of the decoded images (3: RGB, 1: grey).
        image_size: the images' own side in pixels when the reader found them all square
            and of one size, else None.
    """

    paths: dict[str, np.ndarray]
    labels: dict[str, np.ndarray]
    domains: dict[str, np.ndarray] | None = None
    domain_names: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    channels: int = 3
    image_size: int | None = None


class _Listing:
    """Which files exist, one ``os.listdir`` per folder (hundreds of thousands of checks)."""

    def __init__(self) -> None:
        self._dirs: dict[str, frozenset[str]] = {}

    def exists(self, path: str) -> bool:
        folder, name = os.path.split(path)
        names = self._dirs.get(folder)
        if names is None:
            try:
                names = frozenset(os.listdir(folder))
            except OSError:
                names = frozenset()
            self._dirs[folder] = names
        return name in names


def _lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read {what} ({type(exc).__name__}: {exc})") from None


def tiny_imagenet_base(root: Path) -> Path:
    """``root/tiny-imagenet-200``, which must hold ``wnids.txt``.

    Raises:
        DatasetNotFoundError: the folder or ``wnids.txt`` is missing (says how to get it).
    """
    base = root / TINY_IMAGENET_FOLDER
    how = (f"Download {TINY_IMAGENET_URL} and extract it so that "
           f"<data_root>/{TINY_IMAGENET_FOLDER}/wnids.txt exists, then set dataset.data_root "
           f"to that folder")
    if not base.is_dir():
        raise DatasetNotFoundError(f"dataset 'tiny_imagenet': {base.absolute()} does not "
                                   f"exist. {how}")
    if not (base / "wnids.txt").is_file():
        raise DatasetNotFoundError(f"dataset 'tiny_imagenet': {(base / 'wnids.txt').absolute()} "
                                   f"is missing: the folder is incomplete. {how}")
    return base


def check_domainnet_lists(root: Path, domains: Sequence[str] | None = None) -> None:
    """Refuse DomainNet ``domains`` whose train or test list is missing.

    Raises:
        DatasetNotFoundError: the first missing list (says how to get the dataset).
    """
    for domain in tuple(domains or DOMAINNET_DOMAINS):
        for split in ("train", "test"):
            lst = root / f"{domain}_{split}.txt"
            if not lst.is_file():
                state = "exists" if (root / domain).is_dir() else "is missing too"
                raise DatasetNotFoundError(
                    f"dataset 'domainnet': {lst.absolute()} is missing ({root / domain} {state}). "
                    f"Download the {domain} images and its train/test lists from "
                    f"{DOMAINNET_URL} and extract them so that <data_root>/{domain}/<class>/"
                    f"<image> and <data_root>/{domain}_train.txt, {domain}_test.txt exist, then "
                    f"set dataset.data_root to <data_root>, the folder that holds them (or list "
                    f"fewer dataset.domains)")


def read_tiny_imagenet(root: Path) -> FolderIndex:
    """List Tiny-ImageNet under ``root/tiny-imagenet-200``.

    Layout: ``wnids.txt`` (one WordNet id per line; class ``k`` is line ``k``),
    ``train/<wnid>/images/*.JPEG`` (sorted by name), ``val/images/*.JPEG`` and
    ``val/val_annotations.txt`` (tab-separated lines ``file wnid x y w h``; the
    box is unused).

    Raises:
        DatasetNotFoundError: the folder or ``wnids.txt`` is missing (says how to get it).
        DatasetError: not 200 distinct wnids; a class folder without images; an
            annotation line that does not parse, names an unknown wnid or a missing
            image (names the file and line).
    """
    base = tiny_imagenet_base(root)
    how = (f"Download {TINY_IMAGENET_URL} and extract it so that "
           f"<data_root>/{TINY_IMAGENET_FOLDER}/wnids.txt exists, then set dataset.data_root "
           f"to that folder")
    wnids_file = base / "wnids.txt"
    wnids = [w.strip() for w in _lines(wnids_file, "the class list") if w.strip()]
    if len(wnids) != TINY_IMAGENET_CLASSES or len(set(wnids)) != len(wnids):
        raise DatasetError(f"{wnids_file}: expected {TINY_IMAGENET_CLASSES} distinct class ids "
                           f"(WordNet ids, one per line), found {len(set(wnids))} distinct in "
                           f"{len(wnids)} lines")
    label_of = {w: k for k, w in enumerate(wnids)}
    paths, labels = [], []
    for k, w in enumerate(wnids):
        folder = base / "train" / w / "images"
        try:
            names = sorted(n for n in os.listdir(folder) if n.lower().endswith(_IMAGE_SUFFIXES))
        except OSError:
            names = []
        if not names:
            raise DatasetError(f"dataset 'tiny_imagenet': {folder} holds no images of class "
                               f"{w} (line {k + 1} of {wnids_file}); the folder is incomplete: "
                               f"extract {TINY_IMAGENET_URL} again")
        paths += [str(folder / n) for n in names]
        labels += [k] * len(names)
    annotations = base / "val" / "val_annotations.txt"
    if not annotations.is_file():
        raise DatasetNotFoundError(f"dataset 'tiny_imagenet': {annotations.absolute()} is "
                                   f"missing: the folder is incomplete. {how}")
    listing, test_paths, test_labels = _Listing(), [], []
    for n, line in enumerate(_lines(annotations, "the validation labels"), 1):
        if not line.strip():
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) < 2:
            raise DatasetError(f"{annotations}:{n}: expected 'file<TAB>wnid<TAB>...', got "
                               f"{line!r}")
        name, wnid = fields[0].strip(), fields[1].strip()
        if wnid not in label_of:
            raise DatasetError(f"{annotations}:{n}: class {wnid!r} is not in {wnids_file}; the "
                               f"files are from different releases")
        path = str(base / "val" / "images" / name)
        if not listing.exists(path):
            raise DatasetError(f"{annotations}:{n}: image {path} does not exist; the folder is "
                               f"incomplete: extract {TINY_IMAGENET_URL} again")
        test_paths.append(path)
        test_labels.append(label_of[wnid])
    if not test_paths:
        raise DatasetError(f"{annotations}: lists no images")
    return FolderIndex(
        paths={"train": np.array(paths, dtype=object), "test": np.array(test_paths, dtype=object)},
        labels={"train": np.array(labels, dtype=np.int64),
                "test": np.array(test_labels, dtype=np.int64)})


def read_domainnet(root: Path, domains: Sequence[str] | None = None) -> FolderIndex:
    """List DomainNet's ``domains`` (default all six) under ``root``.

    Layout: ``<root>/<domain>/<class>/<image>`` and, per domain and split,
    ``<root>/<domain>_train.txt`` / ``<domain>_test.txt`` with lines
    ``<domain>/<class>/<image> <label>`` (path relative to ``root``, label in
    ``[0, 345)``). Samples keep the lists' order, domain by domain in the order of
    ``domains``; a sample's domain id is its domain's position in ``domains``.

    Raises:
        DatasetNotFoundError: a list file is missing (says how to get the dataset).
        DatasetError: a line that does not parse, a label outside ``[0, 345)``, an
            image that does not exist, or an empty list (names the file and line).
    """
    domains = tuple(domains or DOMAINNET_DOMAINS)
    check_domainnet_lists(root, domains)
    listing = _Listing()
    paths: dict[str, list[str]] = {"train": [], "test": []}
    labels: dict[str, list[int]] = {"train": [], "test": []}
    doms: dict[str, list[int]] = {"train": [], "test": []}
    for d, domain in enumerate(domains):
        for split in ("train", "test"):
            lst = root / f"{domain}_{split}.txt"
            count = 0
            for n, line in enumerate(_lines(lst, "the image list"), 1):
                if not line.strip():
                    continue
                parts = line.rsplit(maxsplit=1)
                try:
                    rel, label = parts[0], int(parts[1])
                except (IndexError, ValueError):
                    raise DatasetError(f"{lst}:{n}: expected '<domain>/<class>/<image> <label>', "
                                       f"got {line!r}") from None
                if not 0 <= label < DOMAINNET_CLASSES:
                    raise DatasetError(f"{lst}:{n}: label {label} is outside "
                                       f"[0, {DOMAINNET_CLASSES}); the list is corrupt or from "
                                       f"another dataset")
                path = str(root / rel)
                if not listing.exists(path):
                    raise DatasetError(f"{lst}:{n}: image {path} does not exist; the folder is "
                                       f"incomplete: extract {domain}'s images again")
                paths[split].append(path)
                labels[split].append(label)
                doms[split].append(d)
                count += 1
            if not count:
                raise DatasetError(f"{lst}: lists no images")
    return FolderIndex(
        paths={s: np.array(p, dtype=object) for s, p in paths.items()},
        labels={s: np.array(v, dtype=np.int64) for s, v in labels.items()},
        domains={s: np.array(v, dtype=np.int64) for s, v in doms.items()},
        domain_names=domains)
