"""Training-time augmentation of uint8 image batches: zero-pad, random crop, random flip.

Hetero-SplitEE ("Split Learning of Neural Networks with Early Exits for
Heterogeneous IoT Devices", arXiv 2512.09313), §IV-A1: "we zero-pad images by 4
pixels on all sides, take a random crop of the original size, and randomly flip
the pictures. For inference, images are not augmented". The usual torchvision
pipeline ``RandomCrop(size, padding=4), RandomHorizontalFlip()`` before
``ToTensor(), Normalize(...)`` does the same per image; here it is done per batch
on the uint8 pixels, before normalisation, so the padding is black (pixel 0) as
there.

Why not ``torchvision.transforms.v2.RandomCrop``/``RandomHorizontalFlip`` on the
batch: v2's random transforms draw from torch's global generator and make one
draw per call, so a whole batch would share one crop and one flip, and the draws
would depend on whatever else used the global generator (other clients' threads
with ``training.parallel_clients``). Instead every sample's crop offsets and flip
are drawn from the caller's own ``torch.Generator`` (one per client, see
:meth:`sflsim.algorithms.base.Algorithm.train_batch`), then applied with tensor
operations: one ``torchvision.transforms.v2.functional.pad`` of the whole batch and
one gather of every sample's window (flipped windows read their columns in
reverse). The same generator state gives the same images, on any device and in
any thread.

Draw order per batch of ``B`` images (fixed, so runs repeat): with padding ``p >
0``, ``B`` row offsets then ``B`` column offsets, each uniform on ``0..2p``
(``torch.randint``); then, with flips, ``B`` uniforms (``torch.rand``), a sample
flipping when its uniform is below 0.5.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
from torchvision.transforms.v2 import functional as TF

if TYPE_CHECKING:
    from sflsim.config.schema import AugmentConfig


class TrainingImages(Protocol):
    """What :func:`training_samples` reads of a dataset
    (:class:`sflsim.data.split.DatasetSplit` is one)."""

    y_train: torch.Tensor

    def train_images(self, idx: torch.Tensor, **augment: object) -> torch.Tensor: ...


def augment_batch(x: torch.Tensor, *, crop_padding: int, horizontal_flip: bool,
                  generator: torch.Generator) -> torch.Tensor:
    """Pad, randomly crop and randomly flip every image of a batch independently.

    Args:
        x: uint8 images ``(B, C, H, W)``, on any device.
        crop_padding: ``p``, pixels of zero padding on every side before a random
            ``H x W`` crop (0: no crop).
        horizontal_flip: flip each image left-right with probability 1/2.
        generator: CPU generator the draws come from (advanced by the draws of the
            module docstring).

    Returns:
        uint8 ``(B, C, H, W)`` on ``x``'s device, in ``x``'s memory layout; ``x`` itself
        when nothing is to be done.
    """
    b, _, h, w = x.shape
    if crop_padding <= 0 and not horizontal_flip:
        return x
    p = max(crop_padding, 0)
    dy = dx = torch.zeros(b, dtype=torch.int64)
    if p:
        dy = torch.randint(0, 2 * p + 1, (b,), generator=generator)
        dx = torch.randint(0, 2 * p + 1, (b,), generator=generator)
    rows = dy[:, None] + torch.arange(h)  # (B, H) rows of the padded image
    cols = dx[:, None] + torch.arange(w)  # (B, W)
    if horizontal_flip:
        flip = torch.rand(b, generator=generator) < 0.5
        cols = torch.where(flip[:, None], cols.flip(1), cols)
    layout = (torch.channels_last if x.dim() == 4 and not x.is_contiguous()
              and x.is_contiguous(memory_format=torch.channels_last)
              else torch.contiguous_format)
    padded = TF.pad(x, [p, p, p, p], fill=0) if p else x  # (B, C, H + 2p, W + 2p)
    dev = x.device
    batch = torch.arange(b, device=dev)[:, None, None]
    out = padded[batch, :, rows.to(dev)[:, :, None], cols.to(dev)[:, None, :]]  # (B, H, W, C)
    out = out.permute(0, 3, 1, 2)
    # a copy with the layout's own strides: with one channel the permuted view counts as
    # contiguous already but keeps a channel stride of 1, (HW, 1, W, 1), which torch's CPU
    # convolutions on AVX2-only hosts mishandle (heap corruption in the backward pass of
    # later stages, torch 2.14); the copy has (HW, HW, W, 1)
    return torch.empty_like(out, memory_format=layout).copy_(out)


def training_samples(data: TrainingImages, augment: AugmentConfig | None, idx: torch.Tensor,
                     generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The training samples ``idx`` (int64 ``(B,)``) of ``data``: images float32
    ``(B, C, H, W)``, normalised, augmented as ``augment`` says with draws from
    ``generator`` (none when it is None); labels int64 ``(B,)``. What
    :meth:`sflsim.algorithms.steps.TorchSteps.train_batch` returns, and what worker processes
    (:mod:`sflsim.execution.workers`) compute from the same generator state."""
    if generator is None:
        return data.train_images(idx), data.y_train[idx]
    return data.train_images(idx, crop_padding=augment.random_crop_padding,
                             horizontal_flip=augment.horizontal_flip,
                             generator=generator), data.y_train[idx]
