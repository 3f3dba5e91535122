"""Images stored as files (JPEG, PNG), decoded to uint8 tensors when read.

:class:`DiskImages` stands where a dataset's uint8 ``(N, C, H, W)`` image tensor
would: ``images[idx]`` decodes the files ``idx`` (on a shared thread pool) into a
uint8 tensor. A dataset that fits in memory is decoded once into a tensor
(:meth:`DiskImages.decode_all`); one that does not stays on disk and is decoded a
batch at a time (see :mod:`sflsim.memory` for the choice).

Decoding (:func:`decode_image`): Pillow opens the file, converts it to RGB (grey
and palette images become three equal or looked-up channels, an alpha channel is
dropped) or, for one-channel images, to grey (Pillow's ``L``: colour becomes its
ITU-R 601-2 luma; 16-bit grey is scaled to 8 bits, :data:`WIDE_GREY_MODES`), and
torchvision resizes it to ``size x size`` (bilinear, antialiased:
``torchvision.transforms.v2.functional.resize`` on the PIL image), ignoring the
aspect ratio. A JPEG at least twice as large as the target is first decoded at a
reduced scale by libjpeg (Pillow's ``draft``: a power of two, never below the
target), which is several times faster on large images and changes pixels only by
the resampling. The same file gives the same pixels every time on the same Pillow
and libjpeg; in memory and per batch give the same images.

Why a thread pool and not torch's ``DataLoader``: training reads one index batch at
a time, in the order the simulation asks for it (a client's next batch is drawn
when its previous step has been simulated), so there is no sample stream to
prefetch from; what a batch costs is decoding its ``B`` files, which Pillow does
with the GIL released, so ``B`` files decode side by side on
:data:`DECODE_THREADS` threads. Evaluation, which knows its order, decodes the next
test batch while the current one runs (:meth:`sflsim.data.DatasetSplit.batches`).
Nothing here draws random numbers, so decoding never changes a run's results.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from sflsim.errors import DatasetError

#: Threads that decode image files (shared by every dataset of the process).
DECODE_THREADS = max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                            else (os.cpu_count() or 1)))

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _decode_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="sflsim-decode")
        return _pool


#: Pillow modes of one-channel images (grey, 1-bit, 16- and 32-bit grey, grey with alpha)
GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
#: Pillow modes of 16-bit grey images (PNG, TIFF; ``I`` holds them in some Pillow versions),
#: scaled to 8 bits by 255/65535 (Pillow's ``convert`` would clip them at 255)
WIDE_GREY_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N"})


def _image_errors() -> tuple[type[BaseException], ...]:
    """What Pillow raises for a file that is missing, truncated or not an image."""
    from PIL import Image

    return (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def decode_image(path: str | Path, size: int, channels: int = 3) -> np.ndarray:
    """One image file as uint8 ``(size, size, 3)`` RGB pixels, or ``(size, size, 1)``
    grey ones for ``channels=1`` (see the module docstring).

    Raises:
        DatasetError: the file is missing, unreadable or not an image (names it).
    """
    from PIL import Image
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as TF

    mode = "L" if channels == 1 else "RGB"
    try:
        with Image.open(path) as im:
            if im.format == "JPEG" and min(im.size) >= 2 * size:
                im.draft(mode, (size, size))
            if im.mode in WIDE_GREY_MODES:
                wide = np.asarray(im, dtype=np.float64)  # (H, W) in [0, 65535]
                im = Image.fromarray(np.clip(np.rint(wide * (255 / 65535)), 0, 255)
                                     .astype(np.uint8))
            pixels = im.convert(mode)
            if pixels.size != (size, size):
                pixels = TF.resize(pixels, [size, size], interpolation=InterpolationMode.BILINEAR,
                                   antialias=True)
            array = np.asarray(pixels, dtype=np.uint8)
            return array[:, :, None] if array.ndim == 2 else array
    except _image_errors() as exc:
        raise DatasetError(f"{path}: cannot decode the image ({type(exc).__name__}: {exc}); "
                           f"the file is missing, truncated or not an image: replace or "
                           f"remove it (a downloaded dataset: extract it again)") from None


def read_headers(paths: Sequence[str]) -> tuple[list[str], list[tuple[int, int]]]:
    """Pillow mode and ``(width, height)`` in pixels of each image file, from its header
    (nothing is decoded), read on the decode threads.

    Raises:
        DatasetError: the first file (in ``paths`` order) that cannot be opened as an
            image (names it and says why).
    """
    from PIL import Image

    errors = _image_errors()

    def one(path: str) -> tuple[str, tuple[int, int]] | BaseException:
        try:
            with Image.open(path) as im:
                return im.mode, im.size
        except errors as exc:
            return exc

    heads = list(_decode_pool().map(one, paths)) if len(paths) > 1 else \
        [one(p) for p in paths]
    for path, head in zip(paths, heads):
        if isinstance(head, BaseException):
            raise DatasetError(f"{path}: cannot read the image ({type(head).__name__}: {head}); "
                               f"the file is truncated or not an image: replace or remove it")
    return [h[0] for h in heads], [h[1] for h in heads]  # type: ignore[index]


class DiskImages:
    """uint8 images ``(N, C, size, size)`` kept as files, decoded when indexed.

    Indexing (``images[idx]`` with an int64 tensor or array of positions, or a slice)
    returns a new uint8 CPU tensor ``(B, C, size, size)``; ``len``, ``shape``,
    ``dtype``, :meth:`subset` and :meth:`decode_all` are what the datasets need.

    Args:
        paths: the image files, one per sample, in sample order.
        size: side in pixels every image is resized to.
        channels: ``C``: 3 (RGB) or 1 (grey); see :func:`decode_image`.
    """

    dtype = torch.uint8
    device = torch.device("cpu")

    def __init__(self, paths: Sequence[str] | np.ndarray, size: int, channels: int = 3):
        self.paths = np.asarray(paths, dtype=object)
        self.size = int(size)
        self.channels = int(channels)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.paths), self.channels, self.size, self.size)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def image_bytes(self) -> int:
        """Bytes of one decoded image (uint8)."""
        return self.channels * self.size * self.size

    @property
    def nbytes(self) -> int:
        """Bytes of every image decoded (what :meth:`decode_all` allocates)."""
        return len(self) * self.image_bytes

    def subset(self, idx: torch.Tensor | np.ndarray) -> DiskImages:
        """The images at positions ``idx``, still on disk."""
        return DiskImages(self.paths[np.asarray(idx, dtype=np.int64)], self.size, self.channels)

    def __getitem__(self, idx: torch.Tensor | np.ndarray | slice) -> torch.Tensor:
        paths = self.paths[idx] if isinstance(idx, slice) else \
            self.paths[np.asarray(torch.as_tensor(idx).cpu(), dtype=np.int64).reshape(-1)]
        return self._decode(paths)

    def decode_all(self) -> torch.Tensor:
        """Every image decoded into one uint8 tensor ``(N, C, size, size)`` (decoded in
        place: no second copy)."""
        return self._decode(self.paths)

    def _decode(self, paths: np.ndarray) -> torch.Tensor:
        out = torch.empty((len(paths), self.channels, self.size, self.size), dtype=torch.uint8)
        view = out.numpy()

        def one(i: int) -> None:  # (H, W, C) -> (C, H, W)
            view[i] = decode_image(paths[i], self.size, self.channels).transpose(2, 0, 1)

        if len(paths) <= 1:
            for i in range(len(paths)):
                one(i)
        else:
            chunk = max(1, len(paths) // (4 * DECODE_THREADS))  # a few tasks per thread
            starts = range(0, len(paths), chunk)

            def run(start: int) -> None:
                for i in range(start, min(start + chunk, len(paths))):
                    one(i)

            for f in [_decode_pool().submit(run, s) for s in starts]:
                f.result()  # the first failure (a DatasetError naming the file) is raised
        return out
