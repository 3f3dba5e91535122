"""Image-classification datasets held as in-memory tensors.

Every loader returns a :class:`DatasetSplit` whose images are float32
``(N, C, H, W)`` tensors, normalized per channel with the dataset's usual
mean/std, and whose labels are int64 ``(N,)`` tensors. The datasets are small
(at most 60,000 32x32 images), so training loops index the tensors directly.

Sources:
    * ``fashion_mnist``: the class-balanced subset shipped in
      ``sflsim/data/embedded`` (1,200 train / 200 test images per class) of
      Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, arXiv:1708.07747).
    * ``fashion_mnist_full``: the full 60,000 / 10,000 Fashion-MNIST IDX files,
      by default from Debian's ``dataset-fashion-mnist`` package.
    * ``cifar10`` / ``cifar100``: CIFAR-10/100 (Krizhevsky 2009), the python
      version, read by torchvision with ``download=False``.
"""

from __future__ import annotations

import gzip
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sflsim.errors import ConfigError, DatasetError, DatasetNotFoundError
from sflsim.text import plural

DATASETS = ("fashion_mnist", "fashion_mnist_full", "cifar10", "cifar100")

EMBEDDED_NPZ = Path(__file__).parent / "embedded" / "fashion_mnist_subset.npz"
FASHION_MNIST_ROOT = Path("/usr/share/datasets/fashion-mnist")
DEFAULT_DATA_ROOT = Path("data")

# Per-channel (mean, std) of the training images scaled to [0, 1].
_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "fashion_mnist_full": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_CIFAR = {  # name -> (torchvision class name, folder, num_classes)
    "cifar10": ("CIFAR10", "cifar-10-batches-py", 10),
    "cifar100": ("CIFAR100", "cifar-100-python", 100),
}
_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
#: per-image array shape each reader must produce: ``(H, W)`` grey or ``(H, W, C)`` colour
_IMAGE_SHAPES = {"fashion_mnist": (28, 28), "fashion_mnist_full": (28, 28),
                 "cifar10": (32, 32, 3), "cifar100": (32, 32, 3)}


@dataclass(frozen=True)
class DatasetSplit:
    """A train/test pair of normalized image tensors.

    Attributes:
        name: Dataset name, one of :data:`DATASETS`.
        x_train: float32 ``(N_train, C, H, W)``, normalized per channel.
        y_train: int64 ``(N_train,)``, class ids in ``[0, num_classes)``.
        x_test: float32 ``(N_test, C, H, W)``, normalized like ``x_train``.
        y_test: int64 ``(N_test,)``.
        num_classes: Number of classes.
        in_channels: ``C`` (1 for Fashion-MNIST, 3 for CIFAR).
        image_size: ``H == W`` in pixels (28 or 32).
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    in_channels: int
    image_size: int


def load_dataset(
    name: str,
    *,
    data_root: str | Path | None = None,
    fraction: float = 1.0,
    seed: int = 0,
) -> DatasetSplit:
    """Load a dataset into memory as normalized tensors.

    Args:
        name: One of :data:`DATASETS`.
        data_root: Folder holding the files. ``fashion_mnist`` ignores it;
            ``fashion_mnist_full`` defaults to ``/usr/share/datasets/fashion-mnist``;
            CIFAR defaults to ``./data`` (must contain ``cifar-10-batches-py``
            or ``cifar-100-python``).
        fraction: In ``(0, 1]``. Keeps a class-balanced subset of both train
            and test: ``max(1, round(fraction * n_c))`` samples of each class c,
            drawn with ``np.random.default_rng(seed)``, in source order.
            ``1.0`` returns everything unchanged.
        seed: Seed of the subset draw (unused when ``fraction == 1``).

    Returns:
        The :class:`DatasetSplit`.

    Raises:
        ConfigError: Unknown ``name`` or ``fraction`` outside ``(0, 1]``.
        DatasetNotFoundError: Files missing or unreadable; the message lists the
            paths looked at and how to get the files.
        DatasetError: The files read but hold something else than the dataset:
            images not uint8 of the dataset's shape, labels not 1-D integers in
            ``[0, num_classes)`` (names the file and the first bad index), image
            and label counts that differ, or an empty split. See
            :func:`check_arrays`.
    """
    if name not in DATASETS:
        raise ConfigError(
            f"dataset.name: unknown dataset {name!r}; valid names: {', '.join(DATASETS)}"
        )
    if not isinstance(fraction, numbers.Real) or not 0.0 < fraction <= 1.0:
        raise ConfigError(f"dataset.fraction: must be in (0, 1] (got {fraction!r})")

    if name == "fashion_mnist":
        (arrays, sources), num_classes = _load_embedded(), 10
    elif name == "fashion_mnist_full":
        root = Path(data_root) if data_root is not None else FASHION_MNIST_ROOT
        (arrays, sources), num_classes = _load_idx_folder(root), 10
    else:
        root = Path(data_root) if data_root is not None else DEFAULT_DATA_ROOT
        (arrays, sources), num_classes = _load_cifar(name, root), _CIFAR[name][2]
    check_arrays(name, arrays, sources, num_classes)

    if fraction < 1.0:
        rng = np.random.default_rng(seed)
        for split in ("train", "test"):
            keep = _balanced_subset(arrays[f"y_{split}"], fraction, rng)
            arrays[f"x_{split}"] = arrays[f"x_{split}"][keep]
            arrays[f"y_{split}"] = arrays[f"y_{split}"][keep]

    mean, std = _STATS[name]
    x_train = _to_tensor(arrays["x_train"], mean, std)
    return DatasetSplit(
        name=name,
        x_train=x_train,
        y_train=torch.from_numpy(arrays["y_train"].astype(np.int64)),
        x_test=_to_tensor(arrays["x_test"], mean, std),
        y_test=torch.from_numpy(arrays["y_test"].astype(np.int64)),
        num_classes=num_classes,
        in_channels=x_train.shape[1],
        image_size=x_train.shape[2],
    )


def check_arrays(name: str, arrays: dict[str, np.ndarray], sources: dict[str, str],
                 num_classes: int) -> None:
    """Refuse what a reader read unless it is the dataset: for ``train`` and ``test``,
    images ``x_<split>`` uint8 of shape ``(N, *image shape)`` (:data:`_IMAGE_SHAPES`),
    labels ``y_<split>`` 1-D integers in ``[0, num_classes)``, the same N, N > 0.

    Args:
        arrays: ``{"x_train", "y_train", "x_test", "y_test"}`` as read.
        sources: the same keys: the file (or folder) each array came from.

    Raises:
        DatasetError: the first problem found, naming the file and, for labels, the
            first bad index and value.
    """
    shape = _IMAGE_SHAPES[name]
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        xs, ys = sources[f"x_{split}"], sources[f"y_{split}"]
        where = f"dataset {name!r}"
        if x.dtype != np.uint8:
            raise DatasetError(f"{where}: {xs}: {split} images must be unsigned bytes "
                               f"(uint8), got {x.dtype}")
        if x.shape[1:] != shape:
            raise DatasetError(f"{where}: {xs}: {split} images must have shape "
                               f"{shape} each, got {tuple(x.shape[1:])}")
        if not len(x):
            raise DatasetError(f"{where}: {xs}: the {split} split holds no images")
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise DatasetError(f"{where}: {ys}: {split} labels must be a 1-D array of "
                               f"integers, got {y.dtype} of shape {tuple(y.shape)}")
        if len(y) != len(x):
            raise DatasetError(f"{where}: {split} images ({xs}) and labels ({ys}) differ in "
                               f"count ({len(x)} vs {len(y)}); the files are corrupt or "
                               f"mismatched")
        bad = np.flatnonzero((y < 0) | (y >= num_classes))
        if bad.size:
            raise DatasetError(f"{where}: {ys}: {split} label {int(y[bad[0]])} at index "
                               f"{int(bad[0])} is outside [0, {num_classes}) "
                               f"({plural(bad.size, 'such label')}); the file is corrupt or "
                               f"from another dataset")


def _to_tensor(x: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """uint8 ``(N, H, W)`` or ``(N, H, W, C)`` -> normalized float32 ``(N, C, H, W)``."""
    t = torch.from_numpy(x.astype(np.float32))  # a fresh, writable copy
    t = t.unsqueeze(1) if t.ndim == 3 else t.permute(0, 3, 1, 2)
    t = t.div_(255.0)
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return t.sub_(m).div_(s).contiguous()


def _balanced_subset(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices keeping ``max(1, round(fraction * n_c))`` random samples per class."""
    keep = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n = max(1, int(round(fraction * idx.size)))
        keep.append(rng.choice(idx, size=n, replace=False))
    return np.sort(np.concatenate(keep))


def _load_embedded() -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The shipped subset: uint8 images ``(N, 28, 28)`` and uint8 labels ``(N,)``, and
    where each came from."""
    keys = ("x_train", "y_train", "x_test", "y_test")
    try:
        with np.load(EMBEDDED_NPZ) as npz:
            return {k: npz[k] for k in keys}, {k: f"{EMBEDDED_NPZ} ({k})" for k in keys}
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetNotFoundError(
            f"dataset 'fashion_mnist': the embedded subset could not be read from "
            f"{EMBEDDED_NPZ} ({exc}). The installation is incomplete; regenerate it with "
            f"`python scripts/build_fashion_mnist_subset.py` or use "
            f"dataset.name: fashion_mnist_full"
        ) from exc


def _read_idx(path: Path) -> np.ndarray:
    """Read an IDX file of unsigned bytes (type 0x08), gzipped or not, as a uint8 array.

    Format: 2 zero bytes, type code, number of dimensions d, d big-endian
    uint32 sizes, then the data (LeCun et al., MNIST database).
    """
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError("not an unsigned-byte IDX file")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"IDX header says shape {shape} but file holds {plural(data.size, 'value')}")
    return data.reshape(shape)


def _load_idx_folder(root: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read the four Fashion-MNIST IDX files from ``root`` (or its torchvision layout);
    returns the arrays and the file each came from."""
    folders = [root, root / "FashionMNIST" / "raw"]
    arrays: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    looked: list[Path] = []
    for key, stem in _IDX_FILES.items():
        candidates = [f / (stem + ext) for f in folders for ext in (".gz", "")]
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            looked.extend(candidates)
            continue
        try:
            arrays[key], sources[key] = _read_idx(found), str(found)
        except (OSError, EOFError, ValueError) as exc:  # gzip.BadGzipFile is an OSError
            raise DatasetNotFoundError(
                f"dataset 'fashion_mnist_full': {found} is unreadable or corrupt ({exc}). "
                f"Reinstall with `apt-get install --reinstall dataset-fashion-mnist` or point "
                f"dataset.data_root at a folder with the four Fashion-MNIST IDX files"
            ) from exc
    if looked:
        missing = sorted({p.name.removesuffix(".gz") for p in looked})
        where = " and ".join(str(f.absolute()) for f in folders)
        raise DatasetNotFoundError(
            f"dataset 'fashion_mnist_full': {', '.join(missing)} (gzipped or not) not found "
            f"in {where}. Get them with `apt-get install dataset-fashion-mnist` (installs to "
            f"{FASHION_MNIST_ROOT}) or point dataset.data_root at a folder holding the four "
            f"Fashion-MNIST IDX files"
        )
    return arrays, sources


def _load_cifar(name: str, root: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read CIFAR-10/100 (python version) with torchvision, ``download=False``; returns
    the arrays and the folder they came from."""
    import torchvision  # imported here: slow to import and only needed for CIFAR

    cls_name, folder, _ = _CIFAR[name]
    cls = getattr(torchvision.datasets, cls_name)
    arrays: dict[str, np.ndarray] = {}
    try:
        for split, train in (("train", True), ("test", False)):
            ds = cls(root=str(root), train=train, download=False)
            arrays[f"x_{split}"] = np.asarray(ds.data, dtype=np.uint8)  # (N, 32, 32, 3)
            arrays[f"y_{split}"] = np.asarray(ds.targets, dtype=np.int64)
    except (RuntimeError, OSError, EOFError, ValueError, KeyError) as exc:
        # torchvision raises RuntimeError("Dataset not found or corrupted...").
        path = (root / folder).absolute()
        state = (f"is incomplete or corrupt ({exc})" if path.is_dir() else "does not exist")
        raise DatasetNotFoundError(
            f"dataset {name!r}: {path} {state}. Download the python version from {_CIFAR_URL} "
            f"and extract it so that <data_root>/{folder} exists, then set "
            f"dataset.data_root to that folder"
        ) from exc
    folder_path = str((root / folder).absolute())
    return arrays, {k: folder_path for k in arrays}
