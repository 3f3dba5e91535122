"""A run that would stop half-way because a batch of one sample reaches a BatchNorm that
sees one value per channel (a 1x1 feature map: torchvision's networks on 28x28 or 32x32
images) is refused before it starts, with a batch size that works."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.models import StagedBackbone
from sflsim.text import plural


def one_value_batchnorm(backbone: StagedBackbone) -> str | None:
    """The name of the first BatchNorm of the backbone (stages and output layer) that sees
    one value per channel for a batch of one sample (it cannot train on it: torch raises
    "Expected more than 1 value per channel when training"), or None.

    Runs a ``meta`` copy (shapes only) in eval mode on one sample.
    """
    whole = nn.Sequential(*backbone.stages, backbone.head)
    norms = [(n, m) for n, m in whole.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return None
    piece = copy.deepcopy(whole).to("meta").eval()
    found: list[str] = []
    named = dict(piece.named_modules())
    hooks = []
    for name, _ in norms:
        def hook(_module, inputs, _out, name=name) -> None:
            x = inputs[0]
            if not found and int(np.prod(x.shape[2:], dtype=np.int64)) == 1:
                k, _, rest = name.partition(".")
                found.append(f"{rest} of stage {int(k) + 1}" if int(k) < backbone.num_stages
                             else f"{rest} of the output layer")
        hooks.append(named[name].register_forward_hook(hook))
    try:
        with torch.no_grad():
            piece(torch.empty(1, *backbone.input_shape, device="meta"))
    finally:
        for h in hooks:
            h.remove()
    return found[0] if found else None


def check_one_sample_batches(scenario: Scenario, parts: list[np.ndarray],
                             backbone: StagedBackbone) -> None:
    """Refuse a trained run in which some client's last batch holds one sample while the
    backbone has a BatchNorm that would see one value per channel on it.

    Raises:
        ConfigError: naming the model, the layer, the clients and a ``training.batch_size``
            that leaves no client a one-sample batch.
    """
    if scenario.training.timing_only:
        return
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    batch = scenario.training.batch_size
    stuck = np.flatnonzero(sizes % batch == 1)
    if len(stuck) == 0:
        return
    layer = one_value_batchnorm(backbone)
    if layer is None:
        return
    better = next((b for d in range(1, batch) for b in (batch + d, batch - d)
                   if b >= 2 and not (sizes % b == 1).any()), None)
    shape = "x".join(str(d) for d in backbone.input_shape)
    clients = ", ".join(str(int(c)) for c in stuck[:5]) + (" ..." if len(stuck) > 5 else "")
    raise ConfigError(
        f"training.batch_size: {batch} leaves {plural(len(stuck), 'client')} ({clients}) a last batch "
        f"of one sample, and model {scenario.model.name} at {shape} reduces the feature map to "
        f"1x1 before BatchNorm {layer}, which cannot train on one value per channel; valid: "
        + (f"training.batch_size: {better} (no client is left one sample), " if better else "")
        + "larger images, or a model without that BatchNorm (e.g. resnet18, "
          "hetero_splitee_resnet)")
