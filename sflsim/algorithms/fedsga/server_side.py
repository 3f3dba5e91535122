"""FedSGA's server side: the path that serves a client at its cut, with its optimizer and
lock (the shared submodel ``w_s`` of §3.1, updated per client or sequentially), and the
harmonized objective of eq. 10 with the alignment of eq. 9 (§3.4, Alg. 2 line 13)."""

from __future__ import annotations

import copy

import torch

from sflsim.algorithms.base import Client
from sflsim.algorithms.fedsga.harmonizer import ServerPath, alignment_loss, pool
from sflsim.engine import FifoResource


class JointOptimizer:
    """Several optimizers stepped as one (a client's server copy and shared server pieces)."""

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()


class ServerSide:
    """The server path, optimizer and objective of each client's round (a part of
    :class:`~sflsim.algorithms.fedsga.FedSGA`)."""

    def server_path(self, p: int) -> ServerPath:
        stages = self.server_stages[p - 1:] if len(self.server_stages) else self.server_stages
        return ServerPath(self.harmonizer, p, stages)

    def server_side(self, client: Client, cut: int, round_: int
                    ) -> tuple[ServerPath, torch.optim.Optimizer | JointOptimizer, FifoResource]:
        """(server path, its optimizer, its lock) that serves ``client`` at ``cut`` this round.

        ``sequential``: the shared ``w_s`` and harmonizer with the persistent server
        optimizer and the one server lock. ``per_client``: the client's own copy of the
        stages after ``cut`` (and, with ``harmonizer: per_client``, of the harmonizer),
        with an optimizer of its own for the round, joined to the persistent optimizer of
        the shared pieces, and the client's own lock, so different clients' server steps
        run in parallel up to the server's slots
        (:meth:`~sflsim.algorithms.base.Algorithm.server_step`, as SplitFed V1).
        """
        if self.sequential:
            return self.server_path(cut), self.server_optimizer, self.server_lock
        stages = copy.deepcopy(self.server_path(cut).stages)
        harmonizer = self.harmonizer if self.shared_harmonizer else copy.deepcopy(self.harmonizer)
        path = ServerPath(harmonizer, cut, stages)
        own = [*(() if self.shared_harmonizer else harmonizer.parameters()), *stages.parameters()]
        optimizers = [self.round_optimizer(own, round_)] if own else []
        if self.server_optimizer is not None:
            optimizers.append(self.server_optimizer)
        return path, JointOptimizer(*optimizers), self.server_locks[client.client_id]

    def server_objective(self, path: ServerPath):
        """Eq. 10 on interfaces through ``path`` (plus phi_s's own loss on ``p_1``
        interfaces, detached), then the EMA prototype update (``per_step``) or the
        step's ``Z`` added to the round's class sums (``per_round``)."""

        def objective(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = path.embed(h)
            loss = self.loss_fn(path.harmonizer.head(z), y)
            if self.cfg.harmonize and self.cfg.lambda_align > 0:
                loss = loss + self.cfg.lambda_align * alignment_loss(z, self.alignment_prototypes,
                                                                     y, self.cfg.tau_a)
            if self.phi_s is not None and path.p == self.p1:
                loss = loss + self.phi_s_loss(h.detach(), y)
            if self.cfg.prototype_update == "per_step":
                self.update_prototypes(z.detach(), y)
            else:
                self.accumulate_prototypes(z.detach(), y)
            return loss
        return objective

    def phi_s_loss(self, h1: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Eq. 9's loss of ``phi_s(Pool(h_p1))`` against the prototypes (trains phi_s only)."""
        return alignment_loss(self.phi_s(pool(h1)), self.alignment_prototypes, y, self.cfg.tau_a)
