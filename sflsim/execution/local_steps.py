"""The torch steps every way of executing a round runs alike: the optimizer of a
configuration, one whole-model training step, FedProx's proximal term and a test
batch's correct predictions. The serial path (the algorithms), host threads, worker
processes and Ray actors all call these, so a client's update is the same wherever it
runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from sflsim.config.schema import OptimizerConfig


def make_optimizer(params: Iterator[nn.Parameter] | list, cfg: OptimizerConfig,
                   lr: float) -> torch.optim.Optimizer:
    """Adam or SGD as configured, at learning rate ``lr``."""
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def proximal_term(local: nn.Module, mu: float, anchor: Iterable[torch.Tensor]) -> torch.Tensor:
    """``(mu / 2) * sum ||w - w^a||^2`` over the parameters ``w`` of ``local`` and the
    tensors ``anchor`` (the anchor model's parameters, in the same order, detached): a 0-d
    tensor. FedProx's term (:meth:`~sflsim.algorithms.global_model.GlobalModelAlgorithm.penalty`)."""
    squares = [(w - a.detach()).pow(2).sum() for w, a in zip(local.parameters(), anchor)]
    return mu / 2 * torch.stack(squares).sum()


def whole_model_step(local: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                     y: torch.Tensor, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                     penalty: Callable[[nn.Module], torch.Tensor | None]) -> torch.Tensor:
    """One SGD step of ``local`` on images ``x`` ``(B, C, H, W)`` and labels ``y`` ``(B,)``:
    ``loss_fn`` plus ``penalty(local)`` when not None; returns the detached loss (0-d,
    the penalty left out). Serial, threaded and worker-process training all run it."""
    loss = loss_fn(local(x), y)
    extra = penalty(local)
    optimizer.zero_grad(set_to_none=True)
    (loss if extra is None else loss + extra).backward()
    optimizer.step()
    return loss.detach()


def correct_predictions(model: nn.Module, data, x, y: torch.Tensor, start: int, stop: int) -> int:
    """How many of test samples ``start:stop`` of uint8 images ``x`` ``(N, C, H, W)`` and
    labels ``y`` ``(N,)`` ``model`` (in eval mode) classifies right: the argmax of its
    logits ``(B, classes)``, under inference mode (thread-local: set here, in the thread
    that computes). The evaluation of the FedAvg family, serial, on host threads or in a
    worker process."""
    xb, yb = data.batch(x, y, start, stop)
    with torch.inference_mode():
        return int((model(xb).argmax(1) == yb).sum())
