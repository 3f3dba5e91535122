"""Readers of datasets stored as arrays: the embedded subset, IDX files, CIFAR, STL-10.

Each reader returns ``({"x_train", "y_train", "x_test", "y_test"}: arrays, the same
keys: the file each came from)`` (a :class:`Files` where an array joins several files,
as CIFAR's batches, so that a bad row is told by its file and its index there), images
uint8 ``(N, H, W)`` or ``(N, H, W, C)``; :func:`check_arrays` refuses anything else
before the images become tensors.

Sources:
    * ``fashion_mnist``: the class-balanced subset shipped in
      ``sflsim/data/embedded`` (1,200 train / 200 test images per class) of
      Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, arXiv:1708.07747).
    * ``fashion_mnist_full``: the full 60,000 / 10,000 Fashion-MNIST IDX files,
      by default from Debian's ``dataset-fashion-mnist`` package.
    * ``cifar10`` / ``cifar100``: CIFAR-10/100 (Krizhevsky 2009), the python
      version, read by torchvision (downloaded by it with ``dataset.download``).
    * ``stl10``: STL-10 (Coates, Lee & Ng 2011), the binary version
      (``stl10_binary/``), read by torchvision: the 5,000 labelled training and
      8,000 test 96x96 images (the unlabelled split is not used).
"""

from __future__ import annotations

import contextlib
import gzip
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sflsim.errors import DatasetError, DatasetNotFoundError
from sflsim.text import plural

if TYPE_CHECKING:
    import torch

EMBEDDED_NPZ = Path(__file__).parent / "embedded" / "fashion_mnist_subset.npz"
FASHION_MNIST_ROOT = Path("/usr/share/datasets/fashion-mnist")

_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
#: name -> (torchvision class name, folder, num_classes, where to get it)
TORCHVISION_SETS = {
    "cifar10": ("CIFAR10", "cifar-10-batches-py", 10, "https://www.cs.toronto.edu/~kriz/cifar.html"),
    "cifar100": ("CIFAR100", "cifar-100-python", 100, "https://www.cs.toronto.edu/~kriz/cifar.html"),
    "stl10": ("STL10", "stl10_binary", 10, "https://cs.stanford.edu/~acoates/stl10/"),
}
#: per-image array shape each reader must produce: ``(H, W)`` grey or ``(H, W, C)`` colour
IMAGE_SHAPES = {"fashion_mnist": (28, 28), "fashion_mnist_full": (28, 28),
                "cifar10": (32, 32, 3), "cifar100": (32, 32, 3), "stl10": (96, 96, 3)}


class Files(str):
    """Where an array that joins several files came from: reads as the folder, and
    :meth:`locate` finds the file of a row and the row's index within that file.

    Args:
        folder: what the source reads as.
        counts: called only when a row must be located (on the error path): the files
            in the order they were joined, with the rows each holds.
    """

    def __new__(cls, folder: str, counts: Callable[[], list[tuple[str, int]]]) -> Files:
        self = super().__new__(cls, folder)
        self.counts = counts
        return self

    def locate(self, index: int) -> tuple[str, int]:
        """(file, index within it) of row ``index``; (the folder, ``index``) when the
        files cannot be counted."""
        start = 0
        try:
            parts = self.counts()
        except Exception:  # noqa: BLE001  (a file that cannot be re-read: say the folder)
            return str(self), index
        for path, n in parts:
            if index < start + n:
                return path, index - start
            start += n
        return str(self), index


def _row(source: str, index: int) -> tuple[str, int]:
    """(file, index within it) of row ``index`` of an array read from ``source``."""
    return source.locate(index) if isinstance(source, Files) else (source, index)


def check_arrays(name: str, arrays: dict[str, np.ndarray], sources: dict[str, str],
                 num_classes: int) -> None:
    """Refuse what a reader read unless it is the dataset: for ``train`` and ``test``,
    images ``x_<split>`` uint8 of shape ``(N, *image shape)`` (:data:`IMAGE_SHAPES`),
    labels ``y_<split>`` 1-D integers in ``[0, num_classes)``, the same N, N > 0.

    Args:
        arrays: ``{"x_train", "y_train", "x_test", "y_test"}`` as read.
        sources: the same keys: the file (or folder) each array came from.

    Raises:
        DatasetError: the first problem found, naming the file and, for labels, the
            first bad index and value.
    """
    shape = IMAGE_SHAPES[name]
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
            file, index = _row(ys, int(bad[0]))
            within = "" if index == bad[0] else f" (index {int(bad[0])} of the {split} split)"
            raise DatasetError(f"{where}: {file}: {split} label {int(y[bad[0]])} at index "
                               f"{index}{within} is outside [0, {num_classes}) "
                               f"({plural(bad.size, 'such label')}); the file is corrupt or "
                               f"from another dataset")


def to_nchw(x: np.ndarray) -> torch.Tensor:
    """uint8 ``(N, H, W)`` or ``(N, H, W, C)`` -> a contiguous, writable uint8 tensor
    ``(N, C, H, W)`` (one copy at most)."""
    import torch  # here: the rest of this module (file checks) needs no torch

    t = np.ascontiguousarray(x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2))
    if not t.flags.writeable:  # e.g. np.frombuffer of an IDX file
        t = t.copy()
    return torch.from_numpy(t)


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
    arrays: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for key, found in find_idx_files(root).items():
        try:
            arrays[key], sources[key] = _read_idx(found), str(found)
        except (OSError, EOFError, ValueError) as exc:  # gzip.BadGzipFile is an OSError
            raise DatasetNotFoundError(
                f"dataset 'fashion_mnist_full': {found} is unreadable or corrupt ({exc}). "
                f"Reinstall with `apt-get install --reinstall dataset-fashion-mnist` or point "
                f"dataset.data_root at a folder with the four Fashion-MNIST IDX files"
            ) from exc
    return arrays, sources


def find_idx_files(root: Path) -> dict[str, Path]:
    """The four Fashion-MNIST IDX files in ``root`` (or its torchvision layout), gzipped
    or not, by array key.

    Raises:
        DatasetNotFoundError: one is missing (names them, where they were looked for and
            how to get them).
    """
    folders = [root, root / "FashionMNIST" / "raw"]
    found: dict[str, Path] = {}
    looked: list[Path] = []
    for key, stem in _IDX_FILES.items():
        candidates = [f / (stem + ext) for f in folders for ext in (".gz", "")]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            looked.extend(candidates)
        else:
            found[key] = path
    if looked:
        missing = sorted({p.name.removesuffix(".gz") for p in looked})
        where = " and ".join(str(f.absolute()) for f in folders)
        raise DatasetNotFoundError(
            f"dataset 'fashion_mnist_full': {', '.join(missing)} (gzipped or not) not found "
            f"in {where}. Get them with `apt-get install dataset-fashion-mnist` (installs to "
            f"{FASHION_MNIST_ROOT}) or point dataset.data_root at a folder holding the four "
            f"Fashion-MNIST IDX files"
        )
    return found




#: what torchvision raises for missing or damaged files (RuntimeError: "Dataset not
#: found or corrupted"; the others from reading a damaged pickle or binary file)
_READ_ERRORS = (RuntimeError, OSError, EOFError, ValueError, KeyError, pickle.UnpicklingError)


def load_torchvision(name: str, root: Path, download: bool = False
                     ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read CIFAR-10/100 (python version) or STL-10 (binary version) from ``root`` with
    torchvision; with ``download``, let torchvision download and extract them into
    ``root`` first when they cannot be read. Returns the arrays and where each came from.

    Raises:
        DatasetNotFoundError: the files are missing or damaged (and, with ``download``,
            the download failed): names the folder, its layout and where to get it.
    """
    try:
        return _read_torchvision(name, root)
    except _READ_ERRORS as exc:
        if not download:
            raise _not_found(name, root, exc) from exc
    try:
        fetch(name, root)
    except _READ_ERRORS as exc:  # urllib's URLError is an OSError
        raise _not_found(name, root, exc, downloading=True) from exc
    try:
        return _read_torchvision(name, root)
    except _READ_ERRORS as exc:
        raise _not_found(name, root, exc) from exc


def fetch(name: str, root: Path) -> None:
    """Download and extract ``name`` into ``root`` with torchvision (``download=True``;
    it verifies the archive's MD5 and skips files already there). A download that fails
    removes the folders it created for ``root`` again, if they are still empty."""
    import torchvision

    cls = getattr(torchvision.datasets, TORCHVISION_SETS[name][0])
    made = [p for p in (root, *root.parents) if not p.exists()]  # deepest first
    root.mkdir(parents=True, exist_ok=True)
    try:
        if name == "stl10":
            cls(root=str(root), split="train", download=True)
        else:
            cls(root=str(root), train=True, download=True)
    except BaseException:  # offline, say: leave no empty folder behind
        for folder in made:
            with contextlib.suppress(OSError):  # not empty: something was fetched; keep it
                folder.rmdir()
        raise


def _read_torchvision(name: str, root: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    import torchvision  # imported here: slow to import and only needed for these

    cls_name, folder, _, _ = TORCHVISION_SETS[name]
    cls = getattr(torchvision.datasets, cls_name)
    base = (root / folder).absolute()
    arrays: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for split, train in (("train", True), ("test", False)):
        if name == "stl10":
            ds = cls(root=str(root), split=split, download=False)
            # torchvision: (N, 3, 96, 96) uint8, labels from 1-based uint8 minus 1
            arrays[f"x_{split}"] = np.transpose(ds.data, (0, 2, 3, 1))  # (N, 96, 96, 3) view
            arrays[f"y_{split}"] = np.asarray(ds.labels)
            sources[f"x_{split}"] = str(base / f"{split}_X.bin")
            sources[f"y_{split}"] = str(base / f"{split}_y.bin")
        else:
            ds = cls(root=str(root), train=train, download=False)
            arrays[f"x_{split}"] = np.asarray(ds.data, dtype=np.uint8)  # (N, 32, 32, 3)
            arrays[f"y_{split}"] = np.asarray(ds.targets, dtype=np.int64)
            files = [base / f for f, _ in (ds.train_list if train else ds.test_list)]
            sources[f"x_{split}"] = sources[f"y_{split}"] = Files(
                str(base), lambda files=files: [(str(f), _cifar_rows(f)) for f in files])
    return arrays, sources


#: the files torchvision reads of each set, in its folder (STL-10's unlabelled split is
#: checked by torchvision too, but never read here)
TORCHVISION_FILES = {
    "cifar10": [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"],
    "cifar100": ["train", "test"],
    "stl10": ["train_X.bin", "train_y.bin", "test_X.bin", "test_y.bin"],
}


def check_torchvision_files(name: str, root: Path) -> None:
    """Refuse a torchvision set whose files are not all there (before torchvision loads).

    Raises:
        DatasetNotFoundError: as :func:`load_torchvision` for missing files.
    """
    base = root / TORCHVISION_SETS[name][1]
    missing = [f for f in TORCHVISION_FILES[name] if not (base / f).is_file()]
    if missing:
        raise _not_found(name, root, FileNotFoundError(f"no {', '.join(missing)}"))


def _cifar_rows(path: Path) -> int:
    """Images in one CIFAR batch file (its labels, as torchvision reads them)."""
    with open(path, "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    return len(entry["labels"] if "labels" in entry else entry["fine_labels"])


def _not_found(name: str, root: Path, exc: BaseException, *, downloading: bool = False
               ) -> DatasetNotFoundError:
    _, folder, _, url = TORCHVISION_SETS[name]
    path = (root / folder).absolute()
    if downloading:
        state = (f"could not be downloaded (dataset.download: true; {type(exc).__name__}: "
                 f"{exc}); without a network, download it elsewhere")
    else:
        state = f"is incomplete or corrupt ({exc})" if path.is_dir() else "does not exist"
    if name == "stl10":
        layout = (f"so that <data_root>/{folder}/ holds train_X.bin, train_y.bin, test_X.bin, "
                  f"test_y.bin and unlabeled_X.bin (torchvision checks all five)")
        what = "the binary version (stl10_binary.tar.gz)"
    else:
        layout = f"so that <data_root>/{folder} exists"
        what = "the python version"
    hint = "" if downloading else " (or set dataset.download: true to let torchvision fetch it)"
    return DatasetNotFoundError(
        f"dataset {name!r}: {path} {state}. Download {what} from {url} and extract it "
        f"{layout}, then set dataset.data_root to <data_root>, the folder that holds "
        f"{folder}{hint}")
