"""A loaded dataset: uint8 images (in memory or on disk), labels, and per-batch normalisation.

Images are uint8 ``(N, C, H, W)``, a quarter of float32's bytes: a tensor in memory
or, for a dataset too large for it, :class:`~sflsim.data.images.DiskImages`
decoded a batch at a time. Batches become float32, normalised per channel with
the dataset's usual mean/std, only when they are used: :meth:`DatasetSplit.normalize`
(``(x / 255 - mean) / std`` in float32, one operation at a time, the values of the
float32 tensors held before images were uint8), :meth:`DatasetSplit.train_images`,
:meth:`DatasetSplit.test_images` and :meth:`DatasetSplit.batches`. Algorithms read
training batches only through :meth:`sflsim.algorithms.base.Algorithm.train_batch`,
which also augments them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from sflsim.data.images import DiskImages

#: what a dataset's images are: a uint8 tensor ``(N, C, H, W)`` or files decoded when read
Images = torch.Tensor | DiskImages


@dataclass(frozen=True)
class DatasetSplit:
    """A train/test pair of uint8 images, normalised per batch when read.

    Attributes:
        name: Dataset name, one of :data:`sflsim.data.DATASETS`.
        x_train: uint8 ``(N_train, C, H, W)`` pixels in ``[0, 255]``: a tensor, or
            :class:`~sflsim.data.images.DiskImages` (decoded when indexed).
        y_train: int64 ``(N_train,)``, class ids in ``[0, num_classes)``.
        x_test: uint8 ``(N_test, C, H, W)``, like ``x_train``.
        y_test: int64 ``(N_test,)``.
        num_classes: Number of classes.
        in_channels: ``C`` (1 for Fashion-MNIST, 3 for the others).
        image_size: ``H == W`` in pixels.
        mean, std: per-channel statistics of the training pixels scaled to ``[0, 1]``,
            ``C`` values each.
        domain_train, domain_test: int64 ``(N,)`` domain id of every sample (an index
            into ``domain_names``; DomainNet), None for a dataset without domains.
        domain_names: the domains' names.
        device: where batches are normalised and returned (the run's torch device;
            :func:`sflsim.runner.data_on` moves the tensors there).
        memory_format: the layout of the image batches handed out (channels-last
            runs: ``torch.channels_last``).
    """

    name: str
    x_train: Images
    y_train: torch.Tensor
    x_test: Images
    y_test: torch.Tensor
    num_classes: int
    in_channels: int
    image_size: int
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    domain_train: np.ndarray | None = None
    domain_test: np.ndarray | None = None
    domain_names: tuple[str, ...] = ()
    device: torch.device = torch.device("cpu")
    memory_format: torch.memory_format = torch.contiguous_format
    #: normalisation constants per device: ``{device: (255, mean (1, C, 1, 1), std)}``
    _constants: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # ----- storage -----------------------------------------------------------------
    @property
    def on_disk(self) -> bool:
        """Whether images are decoded from files per batch (not held in memory)."""
        return isinstance(self.x_train, DiskImages) or isinstance(self.x_test, DiskImages)

    @property
    def image_bytes(self) -> int:
        """Bytes of one uint8 image, ``C * H * W``."""
        return self.in_channels * self.image_size * self.image_size

    def in_memory(self) -> DatasetSplit:
        """This dataset with every image decoded into uint8 tensors (itself if they are)."""
        if not self.on_disk:
            return self
        return dataclasses.replace(self, **{
            k: v.decode_all() for k in ("x_train", "x_test")
            if isinstance(v := getattr(self, k), DiskImages)})

    # ----- reading --------------------------------------------------------------------
    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 pixels ``(B, C, H, W)`` -> float32 ``(x / 255 - mean) / std`` on ``x``'s
        device, a new tensor in ``x``'s layout.

        Each step is one float32 operation (division by 255, then the mean, then the
        std), so the values equal those of the float32 tensors held before images were
        stored as uint8, bit for bit. The divisors are tensors on ``x``'s device: torch
        on CUDA would turn a division by a Python number into a multiplication by its
        reciprocal, which rounds differently.

        Raises:
            TypeError: ``x`` is not uint8 (normalised twice, or not pixels).
        """
        if x.dtype != torch.uint8:
            raise TypeError(f"normalize expects uint8 pixels, got {x.dtype}")
        c = self._constants.get(x.device)
        if c is None:
            c = self._constants[x.device] = (
                torch.tensor(255.0, device=x.device),
                torch.tensor(self.mean, dtype=torch.float32, device=x.device).view(1, -1, 1, 1),
                torch.tensor(self.std, dtype=torch.float32, device=x.device).view(1, -1, 1, 1))
        scale, mean, std = c
        return x.to(torch.float32).div_(scale).sub_(mean).div_(std)

    def pixels(self, images: Images, idx: torch.Tensor | slice) -> torch.Tensor:
        """uint8 ``images[idx]`` ``(B, C, H, W)`` on :attr:`device`, in :attr:`memory_format`
        (files are decoded here)."""
        return self._placed(images[idx])

    def _placed(self, x: torch.Tensor) -> torch.Tensor:
        if x.device != self.device:
            x = x.to(self.device)
        return x.contiguous(memory_format=self.memory_format)

    def train_images(self, idx: torch.Tensor, *, crop_padding: int = 0,
                     horizontal_flip: bool = False,
                     generator: torch.Generator | None = None) -> torch.Tensor:
        """Training images ``idx`` ``(B,)`` as float32 ``(B, C, H, W)``, normalised; with
        ``generator``, first augmented as uint8 pixels
        (:func:`sflsim.data.augment.augment_batch`: zero padding ``crop_padding`` and a
        random crop, random left-right flips). Training steps read them through
        :meth:`~sflsim.algorithms.base.Algorithm.train_batch`."""
        x = self.pixels(self.x_train, idx)
        if generator is not None and (crop_padding > 0 or horizontal_flip):
            from sflsim.data.augment import augment_batch  # torchvision: imported when used

            x = augment_batch(x, crop_padding=crop_padding, horizontal_flip=horizontal_flip,
                              generator=generator)
        return self.normalize(x)

    def test_images(self, idx: torch.Tensor) -> torch.Tensor:
        """Test images ``idx`` ``(B,)`` as float32 ``(B, C, H, W)``, normalised."""
        return self.normalize(self.pixels(self.x_test, idx))

    def test_subset(self, keep: torch.Tensor | np.ndarray | None
                    ) -> tuple[Images, torch.Tensor]:
        """(uint8 images ``(K, C, H, W)``, labels ``(K,)``) of the test samples ``keep``
        (all of them when None), as the evaluation reads them (:meth:`batches`): a copy
        in memory, or the files on disk."""
        if keep is None:
            return self.x_test, self.y_test
        keep = torch.as_tensor(keep)
        x = self.x_test.subset(keep) if isinstance(self.x_test, DiskImages) else self.x_test[keep]
        return x, self.y_test[keep]

    def batch(self, x: Images, y: torch.Tensor, start: int, stop: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``start:stop`` of uint8 images ``x`` and labels ``y`` (e.g. of
        :meth:`test_subset`) as (float32 ``(B, C, H, W)`` normalised, labels ``(B,)``)."""
        return self.normalize(self.pixels(x, slice(start, stop))), y[start:stop]

    def batches(self, x: Images, y: torch.Tensor, batch_size: int
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`batch` over ``x``, ``y`` in order, ``batch_size`` samples at a time
        (the last batch shorter): how evaluation reads images, one batch normalised at
        a time. Images on disk: the next batch is decoded (on one helper thread) while
        the caller uses this one, so at most two batches are decoded at once."""
        starts = range(0, len(y), batch_size)
        if not isinstance(x, DiskImages):
            for start in starts:
                yield self.batch(x, y, start, start + batch_size)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="sflsim-prefetch") as ahead:
            pending = [ahead.submit(x.__getitem__, slice(s, s + batch_size)) for s in starts[:1]]
            for k, start in enumerate(starts):
                raw = pending.pop().result()
                if k + 1 < len(starts):
                    nxt = starts[k + 1]
                    pending.append(ahead.submit(x.__getitem__, slice(nxt, nxt + batch_size)))
                yield self.normalize(self._placed(raw)), y[start:start + batch_size]
