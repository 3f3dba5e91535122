"""FedAvgM: FedAvg with server momentum, an algorithm of one's own for sflsim.

Paper: Hsu, Qi, Brown, "Measuring the Effects of Non-Identical Data Distribution for
Federated Visual Classification", arXiv:1909.06335 (2019), §3 (FedAvgM).

Each round is FedAvg's (download, ``local_epochs`` of local training, upload); the
server then treats the change the clients made, ``delta = w - mean_k(w_k)`` (sample
weighted), as a gradient with momentum: ``v <- beta * v + delta``, ``w <- w - lr_s * v``.
With ``server_momentum: 0`` and ``server_lr: 1`` it is FedAvg.

Deviations from the paper: BatchNorm running statistics (none in the small CNN) are
averaged as FedAvg does, without momentum; a round in which no upload arrives
leaves the model and the velocity as they were. The server's update is timed as
three element-wise passes over the parameters (3 FLOPs per parameter).

Run it from the repository root: ``PYTHONPATH=examples sflsim run examples/fedavgm.yaml``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from sflsim.algorithms import (
    SERVER_ID,
    AlgorithmConfig,
    RunContext,
    register_algorithm,
    register_algorithm_config,
)
from sflsim.algorithms.fedavg import FedAvg
from sflsim.engine import Process


@register_algorithm_config
class FedAvgMConfig(AlgorithmConfig):
    """The scenario's ``algorithm`` mapping: ``{name: fedavgm, server_momentum: 0.9}``."""

    name: Literal["fedavgm"]
    #: Server momentum beta (the paper sweeps 0 to 0.997; 0 gives FedAvg).
    server_momentum: float = Field(0.9, ge=0, lt=1)
    #: Server learning rate lr_s (the paper's update uses 1).
    server_lr: float = Field(1.0, gt=0, le=10)
    #: What FedAvg supports, FedAvgM supports: its clients' work is FedAvg's.
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"timing_only", "parallel_clients", "cuda", "whole_model"})


@register_algorithm("fedavgm")
class FedAvgM(FedAvg):
    """FedAvg whose server applies the averaged update with momentum."""

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        #: the server's momentum buffer v, one tensor per parameter of the global model
        self.velocity = [torch.zeros_like(p) for p in self.global_model.parameters()]

    def train_round(self, round_: int) -> Process:
        """FedAvg's round, then the server's update as simulated work on the server."""
        yield from super().train_round(round_)
        flops = 3.0 * sum(v.numel() for v in self.velocity)
        yield from self.sim.compute("server", "server_update", SERVER_ID, flops,
                                    self.ctx.server.flops_per_s)

    @torch.no_grad()
    def end_round(self, round_: int) -> None:
        """``w <- w - lr_s * (beta * v + delta)``, ``delta`` = ``w`` - FedAvg's average."""
        if not self.uploads:
            return
        before = [p.clone() for p in self.global_model.parameters()]
        super().end_round(round_)  # the global model is now the uploads' average
        cfg = self.scenario.algorithm
        for p, w, v in zip(self.global_model.parameters(), before, self.velocity):
            v.mul_(cfg.server_momentum).add_(w - p)
            p.copy_(w - cfg.server_lr * v)
