"""K structurally identical modules fused into one, side by side on the channel axis.

* ``Conv2d(in, out, groups=g)`` becomes ``Conv2d(K*in, K*out, groups=K*g)`` whose
  weight is the K weights concatenated on dim 0, so output channels
  ``[k*out, (k+1)*out)`` see only input channels ``[k*in, (k+1)*in)``: client
  ``k``'s convolution, untouched by the others.
* ``BatchNorm2d(C)`` becomes ``BatchNorm2d(K*C)``: BatchNorm statistics are per
  channel over ``(N, H, W)``, so the per-channel statistics of the fused batch are
  each client's own batch statistics, and so are the running-stat updates.
* ``ReLU``, ``MaxPool2d``, ``AdaptiveAvgPool2d``, ``Identity`` and the residual
  additions of torchvision's ``BasicBlock``/``Bottleneck`` act per channel and stay
  as they are; ``Flatten(1)`` keeps client ``k``'s features in the contiguous block
  ``k``.
* ``Linear(in, out)`` becomes :class:`FusedLinear`: a batched matrix product over
  stacked ``(K, out, in)`` weights, ``(B, K*in) -> (B, K*out)``.

Layout: every fused activation is ``(B, K*C, ...)`` with client ``k`` in channel
block ``k``; sample ``b`` of every client sits at batch index ``b``, so all K
clients must bring batches of the same size ``B``.

:func:`fuse_modules` fuses, :func:`write_back_modules` copies the fused values back
into the K modules (:mod:`sflsim.models.fused` trains the fused copy).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

#: containers whose forward only composes their children with per-channel operations
_CONTAINERS: tuple[type[nn.Module], ...] = (nn.Sequential, BasicBlock, Bottleneck)
#: leaves that act per channel (or per element) and carry no parameters
_STATELESS: tuple[type[nn.Module], ...] = (nn.ReLU, nn.Identity, nn.MaxPool2d, nn.AdaptiveAvgPool2d)


class FusedLinear(nn.Module):
    """K linear layers side by side: ``(B, K*in) -> (B, K*out)``.

    Client ``k`` reads features ``[k*in, (k+1)*in)`` and writes outputs
    ``[k*out, (k+1)*out)``.

    Attributes:
        weight: ``(K, out, in)``, client ``k``'s weight at ``weight[k]``.
        bias: ``(K, out)`` or None.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, out, inp = self.weight.shape
        xb = x.reshape(x.shape[0], k, inp).transpose(0, 1)  # (K, B, in)
        if self.bias is None:
            y = torch.bmm(xb, self.weight.transpose(1, 2))
        else:
            y = torch.baddbmm(self.bias.unsqueeze(1), xb, self.weight.transpose(1, 2))  # (K, B, out)
        return y.transpose(0, 1).reshape(x.shape[0], k * out)


def _config(m: nn.Module) -> tuple:
    """The hyper-parameters of a leaf that must agree across clients."""
    if isinstance(m, nn.Conv2d):
        return (m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation,
                m.groups, m.bias is not None, m.padding_mode)
    if isinstance(m, nn.BatchNorm2d):
        return (m.num_features, m.eps, m.momentum, m.affine, m.track_running_stats)
    if isinstance(m, nn.Linear):
        return (m.in_features, m.out_features, m.bias is not None)
    if isinstance(m, nn.MaxPool2d):
        return (m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, m.return_indices)
    if isinstance(m, nn.AdaptiveAvgPool2d):
        return (m.output_size,)
    if isinstance(m, nn.Flatten):
        return (m.start_dim, m.end_dim)
    if isinstance(m, BasicBlock | Bottleneck):
        return (m.stride,)
    return ()


def _check_same(mods: Sequence[nn.Module], where: str) -> None:
    m0 = mods[0]
    for k, m in enumerate(mods[1:], start=1):
        if type(m) is not type(m0):
            raise ValueError(f"cannot fuse: at {where!r} client 0 has {type(m0).__name__} "
                             f"but client {k} has {type(m).__name__}")
        if _config(m) != _config(m0):
            raise ValueError(f"cannot fuse: at {where!r} client 0 has {m0!r} but client {k} has {m!r}")
        if m.training != m0.training:
            raise ValueError(f"cannot fuse: at {where!r} client 0 and client {k} differ in "
                             f"train/eval mode")
        names0 = [n for n, _ in m0.named_children()]
        if [n for n, _ in m.named_children()] != names0:
            raise ValueError(f"cannot fuse: at {where!r} client 0 and client {k} have different children")
        for n, p in m0.named_parameters(recurse=False):
            q = getattr(m, n)
            if q is None or q.shape != p.shape or q.dtype != p.dtype or q.device != p.device \
                    or q.requires_grad != p.requires_grad:
                raise ValueError(f"cannot fuse: parameter {where}.{n} of client {k} differs in "
                                 f"shape, dtype, device or requires_grad from client 0's")


def _fuse(mods: Sequence[nn.Module], where: str) -> nn.Module:
    _check_same(mods, where)
    m0, k = mods[0], len(mods)
    if type(m0) in _CONTAINERS:  # exact types: a subclass may have another forward
        fused = copy.copy(m0)  # shallow: same attributes (stride, ...), own child dict
        fused._modules = dict(m0._modules)
        fused._parameters, fused._buffers = {}, {}
        if m0._parameters or m0._buffers:
            raise ValueError(f"cannot fuse: container {where!r} ({type(m0).__name__}) holds its own "
                             f"parameters or buffers")
        for name, child in m0.named_children():
            sub = f"{where}.{name}" if where else name
            fused._modules[name] = None if child is None else _fuse(
                [m._modules[name] for m in mods], sub)
        return fused
    with torch.no_grad():
        if type(m0) is nn.Conv2d:
            fused = nn.Conv2d(k * m0.in_channels, k * m0.out_channels, m0.kernel_size, m0.stride,
                              m0.padding, m0.dilation, k * m0.groups, m0.bias is not None,
                              m0.padding_mode, device=m0.weight.device, dtype=m0.weight.dtype)
            fused.weight.copy_(torch.cat([m.weight for m in mods]))
            if m0.bias is not None:
                fused.bias.copy_(torch.cat([m.bias for m in mods]))
        elif type(m0) is nn.BatchNorm2d:
            fused = nn.BatchNorm2d(k * m0.num_features, m0.eps, m0.momentum, m0.affine,
                                   m0.track_running_stats, device=_device(m0), dtype=_dtype(m0))
            if m0.affine:
                fused.weight.copy_(torch.cat([m.weight for m in mods]))
                fused.bias.copy_(torch.cat([m.bias for m in mods]))
            if m0.track_running_stats:
                fused.running_mean.copy_(torch.cat([m.running_mean for m in mods]))
                fused.running_var.copy_(torch.cat([m.running_var for m in mods]))
                counts = {int(m.num_batches_tracked) for m in mods}
                if m0.momentum is None and len(counts) > 1:
                    raise ValueError(f"cannot fuse: BatchNorm {where!r} uses a cumulative average "
                                     f"(momentum=None) and the clients have tracked different "
                                     f"numbers of batches {sorted(counts)}")
                fused.num_batches_tracked.copy_(m0.num_batches_tracked)
        elif type(m0) is nn.Linear:
            fused = FusedLinear(torch.stack([m.weight.detach() for m in mods]).clone(),
                                None if m0.bias is None
                                else torch.stack([m.bias.detach() for m in mods]).clone())
        elif type(m0) is nn.Flatten:
            if m0.start_dim != 1 or m0.end_dim != -1:
                raise ValueError(f"cannot fuse: Flatten {where!r} must flatten dims 1..-1, "
                                 f"got {m0.start_dim}..{m0.end_dim}")
            fused = nn.Flatten()
        elif type(m0) in _STATELESS:
            fused = copy.deepcopy(m0)
        else:
            raise ValueError(
                f"cannot fuse module {where or '<root>'!r} of type {type(m0).__name__}: supported "
                f"are Conv2d, BatchNorm2d, Linear, ReLU, Identity, MaxPool2d, AdaptiveAvgPool2d, "
                f"Flatten(1) inside Sequential, BasicBlock and Bottleneck")
        for n, p in fused.named_parameters(recurse=False):
            p.requires_grad_(getattr(m0, n).requires_grad)
    fused.train(m0.training)
    return fused


def _device(m: nn.Module) -> torch.device | None:
    t = next(iter([*m.parameters(), *m.buffers()]), None)
    return None if t is None else t.device


def _dtype(m: nn.Module) -> torch.dtype | None:
    t = next(iter(m.parameters()), None)
    return None if t is None else t.dtype


def fuse_modules(modules: Sequence[nn.Module]) -> nn.Module:
    """Fuse K structurally identical modules into one (see the module docstring).

    Args:
        modules: K >= 1 modules with the same structure, hyper-parameters, dtype,
            device and train/eval mode (e.g. K clients' client-side models at the
            same cut layer, or their exit heads). They are only read.

    Returns:
        A new module ``(B, K*C_in, ...) -> (B, K*C_out, ...)`` whose parameters
        and buffers have the same names as a client's, holding the K clients'
        values: a parameter of client shape ``s`` has shape ``(K*s[0], *s[1:])``
        (Conv2d, BatchNorm2d), or ``(K, *s)`` (Linear); either way
        ``fused.view(K, *s)[k]`` is client ``k``'s. ``num_batches_tracked`` is
        client 0's (see :func:`write_back_modules`).

    Raises:
        ValueError: no modules; the modules differ in structure, a layer's
            hyper-parameters, parameter shape/dtype/device/requires_grad or
            train/eval mode; a module type is not supported (only Conv2d,
            BatchNorm2d, Linear, ReLU, Identity, MaxPool2d, AdaptiveAvgPool2d and
            ``Flatten(1)`` inside Sequential, torchvision BasicBlock/Bottleneck are);
            a cumulative-average BatchNorm (``momentum=None``) has different batch
            counts across clients.
    """
    if not modules:
        raise ValueError("cannot fuse zero modules")
    return _fuse(list(modules), "")


def write_back_modules(fused: nn.Module, modules: Sequence[nn.Module],
                       tracked_base: dict[str, torch.Tensor] | None = None) -> None:
    """Copy the fused parameters and buffers into the K modules, in place.

    The K modules keep their parameter objects (so optimizers that hold them stay
    valid); gradients are not copied. BatchNorm ``num_batches_tracked``: with
    ``tracked_base`` (``{buffer name: fused counter at fuse time}``) each client's
    counter grows by the fused counter's growth since then (clients may have
    started from different counts); without it each is set to the fused one.

    Raises:
        ValueError: the modules do not have the fused module's parameter/buffer names.
    """
    k = len(modules)
    fp, fb = dict(fused.named_parameters()), dict(fused.named_buffers())
    with torch.no_grad():
        for i, m in enumerate(modules):
            params, bufs = dict(m.named_parameters()), dict(m.named_buffers())
            if params.keys() != fp.keys() or bufs.keys() != fb.keys():
                raise ValueError(f"module {i} does not match the fused module's parameters/buffers")
            for name, p in params.items():
                p.copy_(fp[name].view(k, *p.shape)[i])
            for name, b in bufs.items():
                if name.endswith("num_batches_tracked"):
                    if tracked_base is None:
                        b.copy_(fb[name])
                    else:
                        b.add_(fb[name] - tracked_base[name])
                else:
                    b.copy_(fb[name].view(k, *b.shape)[i])
