#!/usr/bin/env python3
"""Build the embedded, class-balanced Fashion-MNIST subset shipped with sflsim.

Source: Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, arXiv:1708.07747), read from
the IDX files that Debian's ``dataset-fashion-mnist`` package installs under
``/usr/share/datasets/fashion-mnist``.

Selection rule (deterministic): one ``numpy.random.default_rng(0)`` generator is
used in this order: train split, classes 0..9, then test split, classes 0..9. For
each (split, class) it draws a permutation of that class's source indices and
keeps the first ``n`` (1,200 train, 200 test). The kept indices are then sorted
ascending, so the subset keeps the source file's order (classes interleaved).

Output: ``sflsim/data/embedded/fashion_mnist_subset.npz`` (``np.savez_compressed``)
with arrays ``x_train`` uint8 (12000, 28, 28), ``y_train`` uint8 (12000,),
``x_test`` uint8 (2000, 28, 28), ``y_test`` uint8 (2000,), and
``train_source_index`` / ``test_source_index`` int32 (positions in the source
IDX files, for provenance).

Usage::

    python scripts/build_fashion_mnist_subset.py [--source DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
from pathlib import Path

import numpy as np

SOURCE = Path("/usr/share/datasets/fashion-mnist")
OUT = Path(__file__).resolve().parents[1] / "sflsim" / "data" / "embedded" / (
    "fashion_mnist_subset.npz"
)
PER_CLASS = {"train": 1200, "test": 200}
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
SEED = 0


def read_idx_gz(path: Path) -> np.ndarray:
    """Read a gzipped IDX file of unsigned bytes (type code 0x08) into a uint8 array."""
    raw = gzip.decompress(path.read_bytes())
    if raw[0:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    return data.reshape(shape).copy()


def select(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """Return sorted source indices: ``per_class`` random samples of each class 0..9."""
    chosen = []
    for c in range(10):
        idx = np.flatnonzero(labels == c)
        chosen.append(idx[rng.permutation(idx.size)[:per_class]])
    return np.sort(np.concatenate(chosen))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    rng = np.random.default_rng(SEED)
    arrays: dict[str, np.ndarray] = {}
    for split, (img_name, lbl_name) in FILES.items():
        images = read_idx_gz(args.source / img_name)
        labels = read_idx_gz(args.source / lbl_name)
        idx = select(labels, PER_CLASS[split], rng)
        arrays[f"x_{split}"] = images[idx]
        arrays[f"y_{split}"] = labels[idx]
        arrays[f"{split}_source_index"] = idx.astype(np.int32)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes), sha256 {digest}")


if __name__ == "__main__":
    main()
