"""Tiny datasets in each on-disk format sflsim reads, written by tests (never downloaded):
CIFAR-10 and CIFAR-100 (python version), STL-10 (binary), Tiny-ImageNet and DomainNet
(image folders with their lists). torchvision checks the real archives' MD5 sums; the
``tv_checks`` fixture in ``tests/conftest.py`` makes it accept these files."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image


def _pixels(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def write_cifar10(root: Path, per_batch: int = 4, seed: int = 0) -> Path:
    """The python-version CIFAR-10 layout: 5 training batches and a test batch."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 "labels": list(np.arange(per_batch) % 10)}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in
                                                                        range(10)]}))
    return folder


def write_cifar100(root: Path, n_train: int = 24, n_test: int = 8, seed: int = 0) -> Path:
    """The python-version CIFAR-100 layout: ``train``, ``test`` and ``meta`` (fine labels)."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("test", n_test)):
        labels = list((np.arange(n) * 7) % 100)
        batch = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 "fine_labels": labels, "coarse_labels": [k // 5 for k in labels]}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "meta").write_bytes(pickle.dumps({"fine_label_names": [f"c{i}" for i in range(100)],
                                                "coarse_label_names": [f"s{i}" for i in range(20)]}))
    return folder


def write_stl10(root: Path, n_train: int = 12, n_test: int = 6,
                labels: np.ndarray | None = None) -> tuple[Path, np.ndarray]:
    """STL-10's binary files: images (N, 3, 96, 96) stored column-major, labels 1..10."""
    folder = root / "stl10_binary"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    images = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8)  # (N, C, H, W)
        images[split] = x
        (folder / f"{split}_X.bin").write_bytes(x.transpose(0, 1, 3, 2).tobytes())
        y = (np.arange(n) % 10 + 1).astype(np.uint8) if labels is None or split == "test" \
            else labels
        (folder / f"{split}_y.bin").write_bytes(y.tobytes())
    return folder, images["train"]


def write_tiny_imagenet(root: Path, per_class: int = 1, val: int = 6) -> Path:
    """tiny-imagenet-200/: 200 wnids, ``per_class`` JPEGs each, ``val`` annotated ones."""
    base = root / "tiny-imagenet-200"
    rng = np.random.default_rng(2)
    wnids = [f"n{k:08d}" for k in range(200)]
    base.mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for w in wnids:
        folder = base / "train" / w / "images"
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(_pixels(rng, 64, 64)).save(folder / f"{w}_{i}.JPEG")
    (base / "val" / "images").mkdir(parents=True)
    lines = []
    for i in range(val):
        pixels = _pixels(rng, 64, 64)
        if i == 0:  # Tiny-ImageNet has grey images: they become three equal channels
            Image.fromarray(pixels[:, :, 0], mode="L").save(base / "val" / "images" / f"val_{i}.JPEG")
        else:
            Image.fromarray(pixels).save(base / "val" / "images" / f"val_{i}.JPEG")
        lines.append(f"val_{i}.JPEG\t{wnids[(7 * i) % 200]}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return base


def write_domainnet(root: Path, domains=("clipart", "sketch"), classes=(0, 5, 344),
                    per_class: int = 4, test_per_class: int = 1) -> Path:
    """<root>/<domain>/<class>/<image> (JPEG and PNG of several sizes) and the lists."""
    rng = np.random.default_rng(3)
    for domain in domains:
        for split, n in (("train", per_class), ("test", test_per_class)):
            lines = []
            for c in classes:
                folder = root / domain / f"class_{c:03d}"
                folder.mkdir(parents=True, exist_ok=True)
                for i in range(n):
                    ext = "png" if i % 2 else "jpg"
                    name = f"{domain}_{split}_{c:03d}_{i}.{ext}"
                    h, w = (40, 56) if i % 2 else (90, 70)
                    Image.fromarray(_pixels(rng, h, w)).save(folder / name)
                    lines.append(f"{domain}/class_{c:03d}/{name} {c}")
            (root / f"{domain}_{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def write_image_folder(root: Path, classes=("cat", "dog", "owl"), per_class: int = 8,
                       test_per_class: int = 2, side: int = 16, grey: bool = False,
                       seed: int = 4) -> dict[str, list[np.ndarray]]:
    """torchvision's ImageFolder layout, ``root/{train,test}/<class>/<i>.png``: PNGs of
    ``side x side`` random pixels (grey or RGB). Returns each split's pixels in sample
    order (class by class, files by name), ``(side, side, 3)`` or ``(side, side)``."""
    rng = np.random.default_rng(seed)
    written: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    for split, n in (("train", per_class), ("test", test_per_class)):
        for c in sorted(classes):
            folder = root / split / c
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = _pixels(rng, side, side)[:, :, 0] if grey else _pixels(rng, side, side)
                Image.fromarray(pixels).save(folder / f"{i:02d}.png")
                written[split].append(pixels)
    return written
