"""A module's state-dict entries without walking its module tree each time.

``nn.Module.state_dict()`` visits every submodule and runs its hooks: tens of
microseconds for a small CNN, paid per client several times a round where client models
are copied and averaged. :func:`state_entries` finds where each entry lives once per
module (the submodule's parameter or buffer dictionary and the entry's name there) and
reads the tensors from there on every call, so a parameter replaced or given new data
since is read as it is now. The entries, their names and order are ``state_dict()``'s as
long as the module's structure (its submodules and which parameters and buffers they
register) stays as it was, which holds for the models of a run.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

__all__ = ["state_entries", "state_tensors"]

#: per module, per state-dict entry: its name, the dictionary holding it, its key there
_PLACES: weakref.WeakKeyDictionary[nn.Module, list[tuple[str, dict, str]]] = \
    weakref.WeakKeyDictionary()


def _places(module: nn.Module) -> list[tuple[str, dict, str]]:
    places = _PLACES.get(module)
    if places is None:
        places = []
        for name in module.state_dict(keep_vars=True):
            owner, _, leaf = name.rpartition(".")
            sub = module.get_submodule(owner)
            places.append((name, sub._parameters if leaf in sub._parameters else sub._buffers,
                           leaf))
        _PLACES[module] = places
    return places


def state_tensors(module: nn.Module) -> list[torch.Tensor]:
    """``module``'s state-dict tensors (parameters and persistent buffers) in
    ``state_dict()`` order, as the module holds them (parameters are not detached: write
    them under ``torch.no_grad()``)."""
    return [holder[leaf] for _, holder, leaf in _places(module)]


def state_entries(module: nn.Module) -> dict[str, torch.Tensor]:
    """``module.state_dict(keep_vars=True)``: state-dict name -> tensor, in order
    (:func:`state_tensors`)."""
    return {name: holder[leaf] for name, holder, leaf in _places(module)}
