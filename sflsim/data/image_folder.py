"""Reader of ``image_folder``: the user's own images, one folder per class.

Layout under ``dataset.data_root`` (torchvision's ``ImageFolder`` layout, one tree per
split)::

    train/<class>/<image>        e.g. train/cat/0001.png, train/dog/a/b.jpg
    test/<class>/<image>

Classes are the sorted names of the folders in ``train/``
(``torchvision.datasets.folder.find_classes``), class ``k`` the ``k``-th; ``test/``
must hold the same class folders. A sample is every file in a class folder or its
subfolders whose name ends in one of torchvision's ``IMG_EXTENSIONS`` (``.jpg``,
``.jpeg``, ``.png``, ``.ppm``, ``.bmp``, ``.pgm``, ``.tif``, ``.tiff``, ``.webp``, any
case), in ``torchvision.datasets.folder.make_dataset``'s order (class by class, each
folder's files sorted); other files are ignored.

When the dataset is loaded every image's header is read (Pillow; nothing is decoded),
which names a file that is not an image and decides what the fields left null mean:

* ``dataset.channels`` null: 1 (grey) when every image is grey (Pillow modes in
  :data:`~sflsim.data.images.GREY_MODES`), else 3 (RGB; grey images then get three
  equal channels). 1 or 3 converts every image to that.
* ``dataset.image_size`` null: the images' own side, when every image is square and of
  one size; images of several sizes (or not square) need ``image_size``, the side
  every image is then resized to (bilinear, antialiased, aspect ratio not kept).

With both fields set no header is read (for folders of very many files); a file that is
not an image is then named when it is decoded.

Normalisation: per channel mean 0.5 and std 0.5 (pixels in [0, 1] map to [-1, 1]), as
PyTorch's CIFAR-10 tutorial does for data whose statistics are not known: sflsim does
not compute a user's statistics.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sflsim.data.folders import FolderIndex
from sflsim.errors import DatasetError, DatasetNotFoundError
from sflsim.text import plural

SPLITS = ("train", "test")
LAYOUT = "<data_root>/train/<class>/<image> and <data_root>/test/<class>/<image>"
#: what the normalisation uses, per channel (see the module docstring)
MEAN, STD = 0.5, 0.5


def _listed(names: Sequence[str], limit: int = 8) -> str:
    """``a, b, c`` or ``a, b, ..., h (20 in all)``."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


def check_image_folder_root(root: Path) -> dict[str, Path]:
    """The ``train/`` and ``test/`` folders of ``root`` (no torch, no image read).

    Raises:
        DatasetNotFoundError: ``root`` is not a folder, or lacks ``train/`` or ``test/``
            (names ``dataset.data_root``, the folder and the layout expected).
    """
    how = "set dataset.data_root to the folder that holds train/ and test/"
    if not root.is_dir():
        state = "is a file, not a folder" if root.exists() else "does not exist"
        raise DatasetNotFoundError(f"dataset.data_root: {root.absolute()} {state}; image_folder "
                                   f"reads {LAYOUT}: {how}")
    folders = {split: root / split for split in SPLITS}
    missing = [f"{split}/" for split, folder in folders.items() if not folder.is_dir()]
    if missing:
        try:
            held = sorted(e.name + ("/" if e.is_dir() else "") for e in os.scandir(root))
        except OSError:
            held = []
        holds = f"it holds {_listed(held)}" if held else "it is empty"
        raise DatasetNotFoundError(f"dataset.data_root: {root.absolute()} has no "
                                   f"{' and no '.join(missing)} folder ({holds}); image_folder "
                                   f"reads {LAYOUT}: {how}")
    return folders


def _classes(folder: Path) -> list[str]:
    from torchvision.datasets.folder import find_classes

    try:
        return find_classes(folder)[0]
    except FileNotFoundError:
        images = [n for n in sorted(os.listdir(folder)) if _is_image(n)]
        why = (f"its images ({_listed(images, 3)}) must be in class folders" if images
               else "it is empty" if not os.listdir(folder) else "it holds only files")
        raise DatasetError(f"dataset.data_root: {folder.absolute()} holds no class folders "
                           f"({why}); image_folder reads {LAYOUT}, one folder per class, e.g. "
                           f"{folder.name}/cat/1.png") from None


def _is_image(name: str) -> bool:
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    return has_file_allowed_extension(name, IMG_EXTENSIONS)


def _samples(folder: Path, class_to_idx: dict[str, int]) -> list[tuple[str, int]]:
    from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

    try:
        return make_dataset(str(folder), class_to_idx, extensions=IMG_EXTENSIONS)
    except FileNotFoundError:  # a class folder without images
        empty = [c for c in class_to_idx if not any(
            _is_image(f) for _, _, files in os.walk(folder / c, followlinks=True) for f in files)]
        raise DatasetError(
            f"dataset.data_root: {plural(len(empty), 'class folder')} of {folder.absolute()} "
            f"{'holds' if len(empty) == 1 else 'hold'} no images: {_listed(empty)}; every class "
            f"folder of train/ and test/ needs at least one file ending in "
            f"{', '.join(IMG_EXTENSIONS)} (add images or remove the folder from both splits)"
        ) from None


def read_image_folder(root: Path, *, image_size: int | None = None,
                      channels: int | None = None) -> FolderIndex:
    """List ``image_folder`` under ``root`` and decide its channels and size (see the
    module docstring).

    Args:
        root: ``dataset.data_root``.
        image_size: ``dataset.image_size`` (None: the images' own side).
        channels: ``dataset.channels``, 1 or 3 (None: from the images).

    Returns:
        The listing, with ``classes``, ``channels`` and, when ``image_size`` is None, the
        images' own ``image_size``.

    Raises:
        DatasetNotFoundError: ``root``, ``train/`` or ``test/`` is missing.
        DatasetError: no class folders in ``train/``, or only one; ``test/`` with other class folders
            (names both sets and the difference); a class folder without images; a file
            that is not an image (names it); images of several sizes, or not square, with
            ``image_size`` null. Each names the field to change.
    """
    folders = check_image_folder_root(root)
    classes = _classes(folders["train"])
    if len(classes) < 2:  # one class: every prediction right, accuracy 100 % for nothing
        raise DatasetError(f"dataset.data_root: {folders['train'].absolute()} holds one class "
                           f"folder ({_listed(classes)}); a classifier needs at least 2: add a "
                           f"folder per class ({LAYOUT})")
    test_classes = _classes(folders["test"])
    if test_classes != classes:
        in_train, in_test = set(classes), set(test_classes)
        only_train = [c for c in classes if c not in in_test]
        only_test = [c for c in test_classes if c not in in_train]
        diff = "; ".join(f"only in {where}/: {_listed(names)}" for where, names in
                         (("train", only_train), ("test", only_test)) if names)
        raise DatasetError(
            f"dataset.data_root: {root.absolute()}: test/ must hold the class folders of "
            f"train/ ({diff}); train/ has {plural(len(classes), 'class')} ({_listed(classes)}), "
            f"test/ has {len(test_classes)} ({_listed(test_classes)}): add or rename folders so "
            f"that both hold the same")
    class_to_idx = {c: k for k, c in enumerate(classes)}
    samples = {split: _samples(folders[split], class_to_idx) for split in SPLITS}
    paths = {s: np.array([p for p, _ in samples[s]], dtype=object) for s in SPLITS}
    labels = {s: np.array([k for _, k in samples[s]], dtype=np.int64) for s in SPLITS}
    native = None
    if image_size is None or channels is None:
        from sflsim.data.images import GREY_MODES, read_headers

        every = [p for s in SPLITS for p in paths[s]]
        modes, sizes = read_headers(every)
        if channels is None:
            channels = 1 if all(m in GREY_MODES for m in modes) else 3
        if image_size is None:
            native = _native_side(every, sizes)
    return FolderIndex(paths=paths, labels=labels, classes=tuple(classes),
                       channels=int(channels), image_size=native)


def _native_side(paths: list[str], sizes: list[tuple[int, int]]) -> int:
    """The side of images all square and of one size.

    Raises:
        DatasetError: they are not (names two images that differ, or one not square).
    """
    first = sizes[0]
    other = next((i for i, s in enumerate(sizes) if s != first), None)
    if other is not None:
        found = (f"{paths[0]} is {first[0]}x{first[1]} but {paths[other]} is "
                 f"{sizes[other][0]}x{sizes[other][1]} (width x height)")
    elif first[0] != first[1]:
        found = f"they are {first[0]}x{first[1]} (width x height), not square"
    else:
        return first[0]
    raise DatasetError(f"dataset.image_size: null keeps the images' own size, which needs them "
                       f"all square and of one size, but {found}: set dataset.image_size to the "
                       f"side in pixels to resize every image to (8 to 1024, e.g. 64)")
