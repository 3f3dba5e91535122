"""Where a run's tensors live: the torch device of ``training.device`` and the memory
layout of ``training.channels_last``, and the dataset moved there."""

from __future__ import annotations

import dataclasses

import torch

from sflsim.config.algorithms import algorithms_with
from sflsim.config.scenario import Scenario
from sflsim.data import DatasetSplit
from sflsim.errors import ConfigError
from sflsim.text import plural


def torch_device(scenario: Scenario, cpu_advice: str = "--device cpu") -> torch.device:
    """The torch device of ``training.device``; ``cpu_advice``: how the caller's user asks
    for the CPU instead (a sweep: ``--set training.device=cpu``), named when CUDA is absent.

    Raises:
        ConfigError: CUDA asked for but absent (or that GPU index missing), or an
            algorithm that cannot yet move all its models there.
    """
    name = scenario.training.device
    device = torch.device(name)
    if scenario.training.timing_only:  # no torch step runs: nothing to place
        return torch.device("cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"training.device: {name!r} but torch finds no CUDA GPU on this "
                              f"machine (torch {torch.__version__}, CUDA build "
                              f"{torch.version.cuda or 'none'}); use cpu ({cpu_advice})")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            valid = ", ".join(f"cuda:{i}" for i in range(count))
            raise ConfigError(f"training.device: {name!r} but this machine has "
                              f"{plural(count, 'CUDA GPU')}; valid: cuda, {valid}")
        if not scenario.algorithm.supports("cuda"):
            raise ConfigError(f"training.device: {name!r} is not available for "
                              f"{scenario.algorithm.name!r} yet; valid algorithms: "
                              f"{', '.join(algorithms_with('cuda'))}")
    return device


def memory_format(scenario: Scenario) -> torch.memory_format:
    """``torch.channels_last`` with ``training.channels_last``, else contiguous (NCHW)."""
    return torch.channels_last if scenario.training.channels_last else torch.contiguous_format


def data_on(data: DatasetSplit, device: torch.device,
            layout: torch.memory_format = torch.contiguous_format) -> DatasetSplit:
    """``data`` with its four tensors on ``device`` (uint8 images ``(N, C, H, W)`` in
    ``layout``), handing out its batches there, in that layout (images on disk stay
    there; their batches are moved when decoded)."""
    return dataclasses.replace(
        data, device=device, memory_format=layout,
        **{k: getattr(data, k).to(device) for k in ("y_train", "y_test")},
        **{k: x.to(device, memory_format=layout) for k in ("x_train", "x_test")
           if isinstance(x := getattr(data, k), torch.Tensor)})
