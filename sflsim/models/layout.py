"""Memory layout of models on the host: channels-last, except where a CPU kernel breaks.

``training.channels_last`` (and the fused client groups, :mod:`sflsim.models.fused`)
run convolutions in NHWC layout, which oneDNN, PyTorch's CPU convolution library,
often runs faster than NCHW. One oneDNN kernel is broken in that layout:
uxlfoundation/oneDNN#6035 (open; oneDNN v3.12 in torch 2.14.1). The backward-weights
pass of a **1x1 convolution with stride > 1** on NHWC input whose **input channels
per group are fewer than the kernel's channel block** (8 with AVX2, 16 with AVX-512)
writes past its workspace ("reduce to unit stride" copy). What follows depends on
the host's instruction set, thread count and input size: heap corruption ("Fatal
Python error: Aborted", "malloc(): ... corrupted", a segmentation fault), both
threads spinning forever, or silently wrong weight gradients. Measured on an AMD
EPYC (Zen 4) with ``ONEDNN_MAX_CPU_ISA=AVX2`` (the kernels an AVX2-only EPYC or Xeon
runs): ``Conv2d(4, 8, 1, stride=2)`` at 14x14 aborts with one torch thread and
hangs with two; with the AVX-512 kernels the same convolution aborts at 64x64,
batch 32, for every ``in_channels`` < 16 and never for 16 or more. The ResNet
downsample convolutions of small width multipliers (``width: 0.0625`` gives 4 and
8 input channels) are exactly such convolutions.

:func:`to_memory_format` therefore keeps those convolutions, and only those, in
NCHW on the CPU: their weights stay contiguous and a forward pre-hook makes their
input contiguous, so oneDNN takes its blocked-layout path, which is correct. They
are tiny (1x1, few channels), so the copy costs next to nothing; every other
module runs channels-last. FLOPs and results do not depend on the layout (up to
float rounding, as for channels-last itself). On CUDA the hook does nothing.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["nchw_only", "to_memory_format"]

#: The widest oneDNN channel block on x86 (AVX-512, f32): below it the NHWC 1x1
#: strided backward-weights kernel is broken (oneDNN#6035); AVX2's block is 8.
ONEDNN_CHANNEL_BLOCK = 16


def nchw_only(module: nn.Module) -> bool:
    """Whether ``module`` is a convolution that oneDNN#6035 breaks in NHWC on the CPU:
    a 1x1 ``Conv2d`` with stride > 1 and fewer than 16 input channels per group."""
    return (isinstance(module, nn.Conv2d) and module.kernel_size == (1, 1)
            and module.stride != (1, 1)
            and module.in_channels // module.groups < ONEDNN_CHANNEL_BLOCK)


def _nchw_input(conv: nn.Module, args: tuple) -> tuple | None:
    """Forward pre-hook: the input of a :func:`nchw_only` convolution, contiguous (NCHW)
    on the CPU."""
    x = args[0]
    if x.device.type == "cpu" and not x.is_contiguous():
        return (x.contiguous(), *args[1:])
    return None


def to_memory_format(module: nn.Module, layout: torch.memory_format,
                     device: torch.device | str | None = None) -> nn.Module:
    """Move ``module`` to ``device`` and ``layout`` in place, keeping oneDNN#6035's
    convolutions in NCHW (see the module docstring); returns ``module``.

    Args:
        module: any model; its 4-D parameters and buffers change layout.
        layout: ``torch.channels_last`` or ``torch.contiguous_format``.
        device: where to move it (None: where it is).

    Calling it again, or on a model that holds an already guarded convolution, adds
    no second hook.
    """
    module.to(device, memory_format=layout)
    for m in module.modules():
        if nchw_only(m):
            m.to(memory_format=torch.contiguous_format)
            if layout == torch.channels_last and _nchw_input not in m._forward_pre_hooks.values():
                m.register_forward_pre_hook(_nchw_input)
    return module
