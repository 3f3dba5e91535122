"""Many clients, one step: train K structurally identical client-side models together.

Clients that share an architecture and a cut layer run the same network on
different data with different weights. Here their K copies are fused into one
network that holds all K weight sets side by side **on the channel axis**:

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

The training loss is the sum over clients of each client's mean cross-entropy.
Client ``k``'s parameters influence only term ``k``, so the gradient of every
client's parameters is the gradient of its own loss, as in the per-client loop.
Adam, AdamW and SGD (with momentum, Nesterov, weight decay) update each element
from that element's gradient and state alone, so one optimizer over the fused
parameters performs exactly the K separate optimizers' updates, provided they
share hyper-parameters and (for Adam) step count. The result equals the
per-client loop up to floating-point rounding (grouped vs. plain convolution
kernels sum in different orders; ~1e-6 relative in float32), not bit for bit.

Use :class:`FusedClients` to keep the fused copy across many steps (fuse once,
:meth:`FusedClients.step` many times, :meth:`FusedClients.write_back` once), or
:func:`fused_client_steps` for one self-contained step (fuse, step, write back)::

    fused = FusedClients([c.model for c in group], [c.exit_head for c in group],
                         [c.optimizer for c in group], channels_last=True)
    for idx_k in zip(*batches_of_each_client):          # K index batches of one size B
        xs, ys = zip(*(alg.train_batch(i, c.client_id) for i, c in zip(idx_k, group)))
        acts, losses = fused.step(list(xs), list(ys))  # float32 (B, C, H, W) normalised
    fused.write_back()                                  # before anyone reads c.model

What can be fused: clients with the same architecture and cut layer whose
optimizers have the same type, hyper-parameters and per-parameter state keys
and (Adam/AdamW) the same step count, e.g. clients that have taken the same
number of local steps so far. Anything else raises ValueError.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from sflsim.models.layout import to_memory_format
from sflsim.text import plural

__all__ = [
    "FusedClients",
    "FusedLinear",
    "fuse_modules",
    "fuse_optimizers",
    "fused_client_steps",
    "write_back_modules",
    "write_back_optimizers",
]

#: containers whose forward only composes their children with per-channel operations
_CONTAINERS: tuple[type[nn.Module], ...] = (nn.Sequential, BasicBlock, Bottleneck)
#: leaves that act per channel (or per element) and carry no parameters
_STATELESS: tuple[type[nn.Module], ...] = (nn.ReLU, nn.Identity, nn.MaxPool2d, nn.AdaptiveAvgPool2d)
#: optimizers whose update is element-wise in parameter, gradient and state
_OPTIMIZERS: tuple[type[torch.optim.Optimizer], ...] = (torch.optim.SGD, torch.optim.Adam,
                                                       torch.optim.AdamW)


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


# ----- structure checks ------------------------------------------------------------------
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


# ----- optimizers --------------------------------------------------------------------------
def _param_names(mods: Sequence[nn.Module]) -> dict[nn.Parameter, str]:
    """``{parameter: "j.name"}`` over modules ``mods`` (j = position)."""
    return {p: f"{j}.{n}" for j, m in enumerate(mods) for n, p in m.named_parameters()}


def _hyper(group: dict) -> dict:
    return {key: v for key, v in group.items() if key != "params"}


def fuse_optimizers(optimizers: Sequence[torch.optim.Optimizer],
                    client_modules: Sequence[Sequence[nn.Module]],
                    fused_modules: Sequence[nn.Module]) -> torch.optim.Optimizer:
    """One optimizer over the fused parameters, equal to the K optimizers.

    Args:
        optimizers: K optimizers of one type (SGD, Adam or AdamW), optimizer
            ``k`` over parameters of ``client_modules[k]``.
        client_modules: per client, its modules, e.g. ``[model_k, exit_head_k]``.
        fused_modules: the fused modules in the same order, e.g.
            ``[fuse_modules(models), fuse_modules(heads)]``.

    Returns:
        An optimizer of the same type with the same param groups (same
        hyper-parameters, the fused parameter in place of each client's) whose
        state for each fused parameter stacks the K clients' states the way
        :func:`fuse_modules` stacks the parameters (scalar ``step`` shared).

    Raises:
        ValueError: the optimizers differ in type, hyper-parameters or param-group
            layout, the type is not element-wise (SGD, Adam, AdamW), or their states
            differ in keys or in a scalar (Adam's ``step``: clients that took different
            numbers of steps cannot share one Adam).
    """
    k = len(optimizers)
    if k == 0 or k != len(client_modules):
        raise ValueError(f"need one optimizer per client, got {plural(k, 'optimizer')} for "
                         f"{plural(len(client_modules), 'client')}")
    o0 = optimizers[0]
    if type(o0) not in _OPTIMIZERS:
        raise ValueError(f"cannot fuse optimizer {type(o0).__name__}: only SGD, Adam and AdamW "
                         f"(element-wise updates) are supported")
    fused_of = {name: p for p, name in _param_names(fused_modules).items()}
    names = [_param_names(mods) for mods in client_modules]
    groups = []
    for g, group0 in enumerate(o0.param_groups):
        layout0 = [names[0].get(p) for p in group0["params"]]
        if None in layout0:
            raise ValueError("optimizer 0 holds a parameter outside client 0's modules")
        for i, opt in enumerate(optimizers[1:], start=1):
            if type(opt) is not type(o0) or len(opt.param_groups) != len(o0.param_groups):
                raise ValueError(f"cannot fuse: optimizer {i} differs from optimizer 0 in type "
                                 f"or number of param groups")
            gi = opt.param_groups[g]
            if _hyper(gi) != _hyper(group0):
                raise ValueError(f"cannot fuse: optimizer {i} group {g} has hyper-parameters "
                                 f"{_hyper(gi)}, optimizer 0 has {_hyper(group0)}")
            if [names[i].get(p) for p in gi["params"]] != layout0:
                raise ValueError(f"cannot fuse: optimizer {i} group {g} holds other parameters "
                                 f"(or in another order) than optimizer 0")
        groups.append({**_hyper(group0), "params": [fused_of[n] for n in layout0]})
    fused_opt = type(o0)(groups)
    for g, group0 in enumerate(o0.param_groups):
        for j, p0 in enumerate(group0["params"]):
            states = [opt.state.get(opt.param_groups[g]["params"][j], {}) for opt in optimizers]
            if any(s.keys() != states[0].keys() for s in states):
                raise ValueError(f"cannot fuse: optimizer states of {names[0][p0]} "
                                 f"differ in keys (some clients have stepped, others not)")
            fp = fused_of[names[0][p0]]
            fused_state = {}
            for key, v0 in states[0].items():
                vals = [s[key] for s in states]
                if v0 is None:
                    if any(v is not None for v in vals):
                        raise ValueError(f"cannot fuse: optimizer state {key!r} is None for some "
                                         f"clients only")
                    fused_state[key] = None
                elif torch.is_tensor(v0) and v0.shape == p0.shape and p0.dim() > 0:
                    fused_state[key] = torch.stack(vals).reshape(fp.shape).clone()
                else:
                    if any(not _equal(v, v0) for v in vals):
                        raise ValueError(f"cannot fuse: optimizer state {key!r} differs across "
                                         f"clients ({[_item(v) for v in vals]}); e.g. Adam clients "
                                         f"that took different numbers of steps")
                    fused_state[key] = v0.clone() if torch.is_tensor(v0) else copy.copy(v0)
            if fused_state:
                fused_opt.state[fp] = fused_state
    return fused_opt


def _equal(a: object, b: object) -> bool:
    if torch.is_tensor(a) and torch.is_tensor(b):
        return a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))
    return a == b


def _item(v: object) -> object:
    return v.tolist() if torch.is_tensor(v) else v


def write_back_optimizers(fused_opt: torch.optim.Optimizer, optimizers: Sequence[torch.optim.Optimizer],
                          client_modules: Sequence[Sequence[nn.Module]],
                          fused_modules: Sequence[nn.Module]) -> None:
    """Set each client optimizer's state to its slice of the fused optimizer's state.

    Per-element state (``exp_avg``, ``momentum_buffer``, ...) is sliced like the
    parameters; scalars (``step``) are copied. Hyper-parameters (``lr``) are not
    touched: they belong to the client optimizers (and their schedulers).
    """
    fused_of = {name: p for p, name in _param_names(fused_modules).items()}
    for i, (opt, mods) in enumerate(zip(optimizers, client_modules)):
        for p, name in _param_names(mods).items():
            state = fused_opt.state.get(fused_of[name])
            if not state:
                continue
            new = {}
            for key, v in state.items():
                if torch.is_tensor(v) and v.shape == fused_of[name].shape and p.dim() > 0:
                    new[key] = v.view(len(optimizers), *p.shape)[i].clone()
                else:
                    new[key] = v.clone() if torch.is_tensor(v) else copy.copy(v)
            opt.state[p] = new


# ----- training ----------------------------------------------------------------------------
def _fused_input(xs: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """``K x (B, C, H, W)`` -> ``(B, K*C, H, W)`` (client k in channel block k)."""
    x = torch.stack(list(xs)) if not torch.is_tensor(xs) else xs  # (K, B, C, ...)
    return x.transpose(0, 1).reshape(x.shape[1], x.shape[0] * x.shape[2], *x.shape[3:])


def _check_batches(xs: Sequence[torch.Tensor] | torch.Tensor, ys: Sequence[torch.Tensor] | torch.Tensor,
                   k: int) -> None:
    if len(xs) != k or len(ys) != k:
        raise ValueError(f"expected {k} input and {k} label batches (one per client), got "
                         f"{len(xs)} and {len(ys)}")
    sizes = {(tuple(x.shape), tuple(y.shape)) for x, y in zip(xs, ys)}
    if len(sizes) != 1:
        raise ValueError(f"all clients' batches must have the same shape to train together, "
                         f"got (input, label) shapes {sorted(sizes)}")
    (xshape, yshape), = sizes
    if len(yshape) != 1 or yshape[0] != xshape[0]:
        raise ValueError(f"labels must be (B,) for inputs (B, ...), got {yshape} for {xshape}")


def _counters(m: nn.Module) -> dict[str, torch.Tensor]:
    return {n: b.clone() for n, b in m.named_buffers() if n.endswith("num_batches_tracked")}


class FusedClients:
    """K clients with the same client-side architecture and cut layer, trained as one.

    Fuses the clients' client-side models, exit heads and optimizers on
    construction (the clients' own modules are only read); :meth:`step` trains all
    K at once; :meth:`write_back` copies parameters, BatchNorm buffers and
    optimizer state back into the clients' modules and optimizers. Between
    construction and :meth:`write_back` the clients' own modules must not be
    trained or changed (they are stale), and every step trains all K clients.

    Args:
        models: K client-side models ``(B, C, H, W) -> (B, C', H', W')``.
        heads: K exit heads ``(B, C', H', W') -> (B, classes)``.
        optimizers: K optimizers, optimizer ``k`` over ``models[k]`` and ``heads[k]``.
        channels_last: run the fused model in channels-last memory format (can be
            faster for convolutions; the same results up to rounding).
        proximal: ``(mu, anchor_models, anchor_heads)``: add to client ``k``'s loss the
            proximal term ``(mu / 2) ||w_k - a_k||^2`` over its model's and head's
            parameters, ``a_k`` those of ``anchor_models[k]`` and ``anchor_heads[k]``
            (K modules each, structured as ``models`` and ``heads``, read once here),
            e.g. FedProx's global model of the round (Li et al., MLSys 2020). Its
            gradient ``mu (w_k - a_k)`` is element-wise, the same as the loop's.

    Raises:
        ValueError: see :func:`fuse_modules` and :func:`fuse_optimizers`; anchors not
            structured as the models and heads.
    """

    def __init__(self, models: Sequence[nn.Module], heads: Sequence[nn.Module],
                 optimizers: Sequence[torch.optim.Optimizer], *, channels_last: bool = False,
                 proximal: tuple[float, Sequence[nn.Module], Sequence[nn.Module]] | None = None
                 ) -> None:
        if not (len(models) == len(heads) == len(optimizers)) or not models:
            raise ValueError(f"need K >= 1 models, heads and optimizers, got {len(models)}, "
                             f"{len(heads)} and {len(optimizers)}")
        self.k = len(models)
        self.models, self.heads, self.optimizers = list(models), list(heads), list(optimizers)
        self.model = fuse_modules(self.models)
        self.head = fuse_modules(self.heads)
        #: (mu, [(fused parameter, its fused anchor)]) of the proximal term, or None
        self.proximal: tuple[float, list[tuple[nn.Parameter, torch.Tensor]]] | None = None
        if proximal is not None:
            mu, anchor_models, anchor_heads = proximal
            pairs = []
            for fused, anchors in ((self.model, anchor_models), (self.head, anchor_heads)):
                anchor = dict(fuse_modules(list(anchors)).named_parameters())
                own = dict(fused.named_parameters())
                if anchor.keys() != own.keys() or len(anchors) != self.k:
                    raise ValueError("the proximal term's anchors are not K modules structured "
                                     "as the clients' models and heads")
                pairs += [(p, anchor[n].detach()) for n, p in own.items()]
            self.proximal = (mu, pairs)
        self.channels_last = channels_last
        if channels_last:  # but not oneDNN#6035's convolutions (sflsim.models.layout)
            to_memory_format(self.model, torch.channels_last)
        self.optimizer = fuse_optimizers(self.optimizers, self._client_modules(), [self.model, self.head])
        self._tracked_base = self._tracked()

    def _tracked(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"model": _counters(self.model), "head": _counters(self.head)}

    def refresh_hyperparameters(self) -> None:
        """Copy the client optimizers' current hyper-parameters (e.g. ``lr`` after a
        scheduler step) into the fused optimizer.

        Raises:
            ValueError: the client optimizers no longer agree on them.
        """
        for g, group in enumerate(self.optimizer.param_groups):
            hypers = [_hyper(opt.param_groups[g]) for opt in self.optimizers]
            if any(h != hypers[0] for h in hypers):
                raise ValueError(f"the client optimizers' group {g} hyper-parameters differ: {hypers}")
            group.update(hypers[0])

    def _client_modules(self) -> list[list[nn.Module]]:
        return [[m, h] for m, h in zip(self.models, self.heads)]

    def step(self, xs: Sequence[torch.Tensor] | torch.Tensor, ys: Sequence[torch.Tensor] | torch.Tensor
             ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """One training step of all K clients on their own batches.

        Each client: forward its client-side model, mean cross-entropy of its exit
        head's logits (plus the proximal term, if given), backward, optimizer step (as
        :meth:`Algorithm.client_step`).

        Args:
            xs: K input batches ``(B, C, H, W)`` (a list, or a ``(K, B, C, H, W)`` tensor).
            ys: K label batches ``(B,)`` (a list, or a ``(K, B)`` tensor).

        Returns:
            ``(activations, losses)``: K detached contiguous tensors ``(B, C', H', W')``,
            client ``k``'s activations at ``activations[k]``, and the K mean losses
            ``(K,)`` (detached; the cross-entropy alone).

        Raises:
            ValueError: not K batches, or batches of different shapes.
        """
        _check_batches(xs, ys, self.k)
        x = _fused_input(xs)
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.stack(list(ys)) if not torch.is_tensor(ys) else ys  # (K, B)
        b = x.shape[0]
        h = self.model(x)  # (B, K*C', H', W')
        logits = self.head(h)  # (B, K*classes)
        logits = logits.view(b, self.k, -1).transpose(0, 1).reshape(self.k * b, -1)
        per_sample = F.cross_entropy(logits, y.reshape(-1), reduction="none").view(self.k, b)
        losses = per_sample.mean(1)  # (K,) each client's mean loss
        total = losses.sum()
        if self.proximal is not None:  # client k's slice of each sum is its own term
            mu, pairs = self.proximal
            total = total + mu / 2 * torch.stack([(p - a).pow(2).sum() for p, a in pairs]).sum()
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        self.optimizer.step()
        hd = h.detach()
        acts = hd.reshape(b, self.k, -1, *hd.shape[2:]).unbind(1)
        return [a.contiguous() for a in acts], losses.detach()

    def write_back(self) -> None:
        """Copy parameters, BatchNorm buffers and optimizer state into the K clients'
        modules and optimizers (in place; parameter objects are kept). Each client's
        ``num_batches_tracked`` grows by the batches tracked since construction or
        the last write-back. The fused copy stays usable for further steps."""
        write_back_modules(self.model, self.models, self._tracked_base["model"])
        write_back_modules(self.head, self.heads, self._tracked_base["head"])
        write_back_optimizers(self.optimizer, self.optimizers, self._client_modules(),
                              [self.model, self.head])
        self._tracked_base = self._tracked()


def fused_client_steps(models: Sequence[nn.Module], heads: Sequence[nn.Module],
                       optimizers: Sequence[torch.optim.Optimizer],
                       xs: Sequence[torch.Tensor] | torch.Tensor, ys: Sequence[torch.Tensor] | torch.Tensor,
                       ) -> tuple[list[torch.Tensor], list[float]]:
    """One client step for each of K clients, run as one fused step, written back.

    Equivalent (up to float rounding) to, for each ``k``: ``h = models[k](xs[k])``,
    ``loss = cross_entropy(heads[k](h), ys[k])``, ``optimizers[k].zero_grad()``,
    ``loss.backward()``, ``optimizers[k].step()``. Fusing and writing back cost
    a copy of the parameters and optimizer state; for many steps in a row keep a
    :class:`FusedClients` instead.

    Args:
        models, heads, optimizers: as in :class:`FusedClients`.
        xs: K input batches ``(B, C, H, W)`` of the same shape.
        ys: K label batches ``(B,)``.

    Returns:
        ``(activations, losses)``: K detached ``(B, C', H', W')`` tensors and K floats.

    Raises:
        ValueError: the clients differ in architecture, hyper-parameters, optimizer
            or optimizer step count, or their batches differ in shape.
    """
    fused = FusedClients(models, heads, optimizers)
    acts, losses = fused.step(xs, ys)
    fused.write_back()
    return acts, losses.tolist()
