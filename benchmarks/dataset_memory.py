"""Peak memory of a run on a large dataset held in memory as uint8, against float32.

Usage::

    python benchmarks/dataset_memory.py            # 100,000 64x64 RGB images; --help

A synthetic stand-in for Tiny-ImageNet (``--images`` random 64x64 RGB uint8
training images, ``--test-images`` test images, 200 classes; the scenario says
``tiny_imagenet`` and ``sflsim.run.data.load_dataset`` is replaced by the synthetic
set) trains for one round: Hetero-SplitEE Sequential, 3 clients, the Table I
ResNet at ``--width``. Each measurement runs in a fresh subprocess (``ru_maxrss``
is a per-process high-water mark):

* **baseline**: import sflsim and torch and build the synthetic dataset; its peak RSS.
* **run**: the same, then the run; its peak RSS and the memory estimate
  (:func:`sflsim.memory.estimate_memory`).

It prints both against the dataset's uint8 bytes (``N * 3 * 64 * 64``, what
sflsim holds) and its float32 bytes (4x, what holding normalised float32 tensors
would take).

``--on-disk DIR`` instead writes the images as JPEG files in Tiny-ImageNet's
layout under ``DIR`` (once; ``--images / 200`` per class) and runs with
``dataset.storage: disk``: every batch is decoded from the files when it is read,
so the images never sit in memory together.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

GB = 1e9


def scenario_dict(args: argparse.Namespace) -> dict:
    dataset = {"name": "tiny_imagenet", "partition": {"scheme": "iid"}}
    if args.on_disk:
        dataset.update(data_root=args.on_disk, storage="disk")
    return {
        "name": "dataset_memory", "seed": 0,
        "dataset": dataset,
        "model": {"name": "hetero_splitee_resnet", "width": args.width},
        "devices": {
            "weak": {"profile": "rpi4", "count": 1, "end_layer": 3, "link": "wifi"},
            "mid": {"profile": "jetson_nano", "count": 1, "end_layer": 4, "link": "lte"},
            "strong": {"profile": "jetson_orin_nano", "count": 1, "end_layer": 5,
                       "link": "wifi"},
        },
        "server": {"profile": "a100"},
        "algorithm": {"name": "hetero_splitee_sequential"},
        "training": {"rounds": 1, "local_epochs": 1, "batch_size": args.batch_size,
                     "optimizer": {"name": "adam", "lr": 1e-3}},
        "evaluation": {"max_test_samples": 1000, "early_exit": {"enabled": False}},
    }


def synthetic(args: argparse.Namespace):
    """A DatasetSplit of random uint8 images ``(N, 3, size, size)`` and labels."""
    import torch

    from sflsim.data.datasets import STATS
    from sflsim.data.split import DatasetSplit

    g = torch.Generator().manual_seed(0)
    size = args.size

    def images(n: int) -> torch.Tensor:
        return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)

    mean, std = STATS["tiny_imagenet"]
    return DatasetSplit(
        name="tiny_imagenet", x_train=images(args.images),
        y_train=torch.randint(0, 200, (args.images,), generator=g),
        x_test=images(args.test_images), y_test=torch.randint(0, 200, (args.test_images,),
                                                               generator=g),
        num_classes=200, in_channels=3, image_size=size, mean=mean, std=std)


def write_folder(args: argparse.Namespace) -> None:
    """Random 64x64 JPEGs in Tiny-ImageNet's layout under ``args.on_disk`` (kept if there)."""
    from pathlib import Path

    import numpy as np
    from PIL import Image

    base = Path(args.on_disk) / "tiny-imagenet-200"
    if (base / "val" / "val_annotations.txt").is_file():
        return
    rng = np.random.default_rng(0)
    wnids = [f"n{k:08d}" for k in range(200)]
    for k, w in enumerate(wnids):
        folder = base / "train" / w / "images"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(k, args.images, 200):
            Image.fromarray(rng.integers(0, 256, (args.size, args.size, 3), dtype=np.uint8)
                            ).save(folder / f"{w}_{i}.JPEG")
    (base / "val" / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(args.test_images):
        Image.fromarray(rng.integers(0, 256, (args.size, args.size, 3), dtype=np.uint8)
                        ).save(base / "val" / "images" / f"val_{i}.JPEG")
        lines.append(f"val_{i}.JPEG\t{wnids[i % 200]}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")


def _maxrss() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def measure(kind: str, args: argparse.Namespace) -> dict:
    """Runs in the child process."""
    import torch

    torch.set_num_threads(args.threads)
    import sflsim.run.data  # the runner's loader, replaced below
    from sflsim import runner
    from sflsim.config.load import validate_scenario
    from sflsim.memory import estimate_memory

    scenario = validate_scenario(scenario_dict(args))
    if args.on_disk:
        data = runner.load_data(scenario)  # the file list; nothing decoded
        dataset = 0
    else:
        data = synthetic(args)
        dataset = sum(t.numel() * t.element_size()
                      for t in (data.x_train, data.y_train, data.x_test, data.y_test))
        sflsim.run.data.load_dataset = lambda *a, **k: data  # the runner's loader: the synthetic set
    if kind == "baseline":
        return {"peak_rss": _maxrss(), "dataset": dataset}
    t0 = time.perf_counter()
    result = runner.run_scenario(scenario)
    wall = time.perf_counter() - t0
    ctx = result.algorithm.ctx
    estimate = estimate_memory(scenario, ctx.backbone, ctx.data)
    assert ctx.data.on_disk == bool(args.on_disk)
    return {"peak_rss": _maxrss(), "dataset": dataset, "wall_s": wall,
            "estimate": estimate.total_bytes, "estimate_parts": estimate.contributors,
            "accuracy": result.summary["final_server_accuracy"]}


def child(kind: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--images", str(args.images),
           "--test-images", str(args.test_images), "--size", str(args.size),
           "--width", str(args.width), "--batch-size", str(args.batch_size),
           "--threads", str(args.threads)] + (["--on-disk", args.on_disk] if args.on_disk else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--test-images", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--width", type=float, default=0.0625)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--on-disk", metavar="DIR", default=None,
                        help="write the images as JPEGs under DIR and decode them per batch")
    parser.add_argument("--child", choices=["baseline", "run"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return
    if args.on_disk:
        t0 = time.perf_counter()
        write_folder(args)
        print(f"JPEG folder ready under {args.on_disk} ({time.perf_counter() - t0:.0f} s)")
    base = child("baseline", args)
    run = child("run", args)
    n = args.images + args.test_images
    uint8 = n * 3 * args.size * args.size
    where = "JPEG files, decoded per batch" if args.on_disk else "held in memory"
    print(f"synthetic dataset ({where}): {args.images:,} train + {args.test_images:,} test images, "
          f"3x{args.size}x{args.size}; hetero_splitee_sequential, 3 clients, width "
          f"{args.width}, batch {args.batch_size}, 1 round ({run['wall_s']:.0f} s)")
    print(f"images as uint8:               {uint8 / GB:6.2f} GB "
          f"(train alone {args.images * 3 * args.size ** 2 / GB:.2f} GB)")
    print(f"images as float32 (not held):  {4 * uint8 / GB:6.2f} GB")
    print(f"dataset tensors (with labels): {run['dataset'] / GB:6.2f} GB")
    print(f"baseline peak RSS (imports + data):    {base['peak_rss'] / GB:6.2f} GB")
    print(f"run peak RSS:                          {run['peak_rss'] / GB:6.2f} GB")
    print(f"  run - dataset tensors:               {(run['peak_rss'] - run['dataset']) / GB:6.2f} GB")
    print(f"  peak RSS / float32 images:           {run['peak_rss'] / (4 * uint8):6.2f}")
    print(f"estimate_memory total:                 {run['estimate'] / GB:6.2f} GB")
    for name, b in sorted(run["estimate_parts"].items(), key=lambda kv: -kv[1]):
        print(f"    {name}: {b / GB:.3f} GB")


if __name__ == "__main__":
    main()
