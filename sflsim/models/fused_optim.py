"""K optimizers fused into one over the fused parameters, and their states written back.

Adam, AdamW and SGD (with momentum, Nesterov, weight decay) update each element from
that element's gradient and state alone, so one optimizer over the fused parameters
(:mod:`sflsim.models.fused_layers`) performs exactly the K separate optimizers'
updates, provided they share hyper-parameters and (for Adam) step count.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from sflsim.text import plural

#: optimizers whose update is element-wise in parameter, gradient and state
_OPTIMIZERS: tuple[type[torch.optim.Optimizer], ...] = (torch.optim.SGD, torch.optim.Adam,
                                                       torch.optim.AdamW)


def _param_names(mods: Sequence[nn.Module]) -> dict[nn.Parameter, str]:
    """``{parameter: "j.name"}`` over modules ``mods`` (j = position)."""
    return {p: f"{j}.{n}" for j, m in enumerate(mods) for n, p in m.named_parameters()}


def hyperparameters(group: dict) -> dict:
    """A param group's hyper-parameters: everything in it but its ``params``."""
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
        :func:`~sflsim.models.fused_layers.fuse_modules` stacks the parameters (scalar ``step`` shared).

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
            if hyperparameters(gi) != hyperparameters(group0):
                raise ValueError(f"cannot fuse: optimizer {i} group {g} has hyper-parameters "
                                 f"{hyperparameters(gi)}, optimizer 0 has {hyperparameters(group0)}")
            if [names[i].get(p) for p in gi["params"]] != layout0:
                raise ValueError(f"cannot fuse: optimizer {i} group {g} holds other parameters "
                                 f"(or in another order) than optimizer 0")
        groups.append({**hyperparameters(group0), "params": [fused_of[n] for n in layout0]})
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
