"""Many clients, one step: train K structurally identical client-side models together.

Clients that share an architecture and a cut layer run the same network on
different data with different weights. Here their K copies are fused into one
network that holds all K weight sets side by side **on the channel axis**
(:mod:`sflsim.models.fused_layers` says how each layer is fused). Every fused activation
is ``(B, K*C, ...)`` with client ``k`` in channel block ``k``, so all K clients must bring
batches of the same size ``B``.

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
        xs, ys = zip(*(alg.steps.train_batch(i, c.client_id) for i, c in zip(idx_k, group)))
        acts, losses = fused.step(list(xs), list(ys))  # float32 (B, C, H, W) normalised
    fused.write_back()                                  # before anyone reads c.model

What can be fused: clients with the same architecture and cut layer whose
optimizers have the same type, hyper-parameters and per-parameter state keys
and (Adam/AdamW) the same step count, e.g. clients that have taken the same
number of local steps so far. Anything else raises ValueError.

The modules are fused in :mod:`sflsim.models.fused_layers`, the optimizers in
:mod:`sflsim.models.fused_optim`; this module trains the fused copy (their names are
re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sflsim.models.fused_layers import fuse_modules, write_back_modules
from sflsim.models.fused_optim import fuse_optimizers, hyperparameters, write_back_optimizers
from sflsim.models.layout import to_memory_format

__all__ = [
    "FusedClients",
    "fuse_modules",
    "fused_client_steps",
]


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
            hypers = [hyperparameters(opt.param_groups[g]) for opt in self.optimizers]
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
