"""Parameter averaging shared by the algorithms (FedAvg, SplitFed, cross-layer aggregation).

Weighted averaging follows FedAvg (McMahan et al., AISTATS 2017, Alg. 1): each
copy weighs ``n_k / sum(n)``, ``n_k`` its number of training samples. BatchNorm
running statistics are averaged like parameters; integer buffers (BatchNorm's
``num_batches_tracked``) are averaged and rounded, so they stay integers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch
from torch import nn

from sflsim.models.module_state import state_entries


@torch.no_grad()
def weighted_average(states: Sequence[dict[str, torch.Tensor]], weights: Sequence[float]
                     ) -> dict[str, torch.Tensor]:
    """Average state dicts with the given non-negative weights.

    Args:
        states: state dicts with the same keys and shapes.
        weights: one weight per state (e.g. sample counts); they need not sum to 1.

    Returns:
        A new state dict; floating tensors are the weighted mean, integer tensors
        the weighted mean rounded to the nearest integer, in their own dtype.

    Raises:
        ValueError: no states, a length mismatch, or weights that sum to zero.
    """
    if not states or len(states) != len(weights):
        raise ValueError(f"need one weight per state, got {len(states)} states and "
                         f"{len(weights)} weights")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError(f"weights must sum to more than 0, got {list(weights)}")
    shares = [w / total for w in weights]
    out = {}
    for name, first in states[0].items():
        acc = sum(s[name].to(torch.float64) * share for s, share in zip(states, shares))
        out[name] = acc.round().to(first.dtype) if not first.is_floating_point() else acc.to(first.dtype)
    return out


@torch.no_grad()
def average_into(modules: Sequence[nn.Module], weights: Sequence[float],
                 target: nn.Module | None = None, *, keys: Collection[str] | None = None) -> None:
    """Weighted-average ``modules`` and copy the result into each of them (or ``target``).

    Copies in place, so optimizers holding the parameters stay valid. With ``keys``
    (state-dict names) only those entries are averaged and copied; the rest stay as
    they are (FedBABU averages the body only).
    """
    states = [state_entries(m) for m in modules]
    if keys is not None:
        states = [{k: s[k] for k in keys} for s in states]
    mean = weighted_average(states, weights)
    for module in [target] if target is not None else modules:
        for name, tensor in state_entries(module).items():
            if name in mean:
                tensor.copy_(mean[name])
