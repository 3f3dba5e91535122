"""The refusal of a run whose memory estimate exceeds what it may use, naming the largest
part and what to lower."""

from __future__ import annotations

import os

from sflsim.errors import ConfigError
from sflsim.memory.available import LIMIT_ENV
from sflsim.memory.estimate import MemoryEstimate

GIB = 2**30


def check_fits(estimate: MemoryEstimate, available: int, where: str = "this machine") -> None:
    """Refuse a run whose estimate exceeds ``available`` bytes of ``where`` (named in
    the message: ``"this machine"``, or a GPU such as ``"the GPU cuda:0"``).

    Raises:
        ConfigError: the estimate and the available memory in GiB, the largest
            contributor and its size, and what to lower.
    """
    total = estimate.total_bytes
    if total <= available:
        return
    name, largest = estimate.largest()
    part = f"{name}: {largest / GIB:.2f} GiB"
    if name in ("gradients", "optimizer states"):
        copies, weights = estimate.largest_copies()
        part += (f" (of the trained model copies; the largest are the {copies}, "
                 f"{weights / GIB:.2f} GiB of weights)")
    source = f"the {LIMIT_ENV} cap" if os.environ.get(LIMIT_ENV) else where
    if name in estimate.sized_by:
        advice = (f"Lower {estimate.sized_by[name]}, model.width or dataset.fraction, or the "
                  f"number of clients (devices.*.count)")
    elif name == "dataset":
        advice = ("Lower dataset.fraction or dataset.image_size, or keep the images on disk "
                  "(dataset.storage: disk, for datasets read from image files)")
    else:
        advice = ("Lower the number of clients (devices.*.count), model.width, "
                  "training.batch_size or dataset.fraction, or choose an algorithm that keeps "
                  "fewer per-client copies (e.g. hetero_splitee_sequential or splitfed_v2)")
    raise ConfigError(
        f"memory: this run needs about {total / GIB:.2f} GiB but {source} has "
        f"{available / GIB:.2f} GiB available; the largest part is {part}. {advice}"
    )
