"""FedSGA's server side: the path that serves a client at its cut, with its optimizer and
lock (the shared submodel ``w_s`` of §3.1, updated per client or sequentially), and the
harmonized objective of eq. 10 with the alignment of eq. 9 (§3.4, Alg. 2 line 13)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from sflsim.algorithms.base import Client
from sflsim.algorithms.fedsga.harmonizer import Harmonizer, ServerPath, alignment_loss, pool
from sflsim.algorithms.fedsga.prototypes import ClassPrototypes
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
    """The server's pieces and the path, optimizer, lock and objective of each client's
    round (a part of :class:`~sflsim.algorithms.fedsga.FedSGA`, its ``server_side``).

    Args:
        cfg: the scenario's ``algorithm`` (``server_update``, ``harmonizer``,
            ``harmonize``, ``lambda_align``, ``tau_a``).
        harmonizer: the harmonizer ``phi`` and predictor ``G`` (§3.4).
        phi_s: phi_s of eq. 3 (``phi_s: separate``), else None.
        server_stages: ``w_s``, stages 2..L (empty with ``server_backbone: false``).
        prototypes: the class prototypes eq. 9 aligns to, updated by every step.
        loss_fn: the training loss.
        round_optimizer: ``(parameters, round) -> optimizer`` of the run's kind and
            that round's learning rate.
        env: the simulation's environment (for the locks).

    Attributes:
        sequential: ``server_update: sequential`` (one ``w_s`` trained in place, one lock).
        shared_harmonizer: one harmonizer for every client (sequential, or
            ``harmonizer: shared``).
        optimizer: the optimizer of the server pieces every client's steps update in
            place, across rounds (shared harmonizer, phi_s; sequential: ``w_s`` too).
        lock: ``sequential``: the one lock of ``w_s``.
        locks: ``per_client``: this round's ``{client_id: the lock of its server copy}``.
        copies: ``per_client``: this round's ``{client_id: (cut, its server path)}``.
    """

    def __init__(self, cfg, harmonizer: Harmonizer, phi_s: nn.Module | None,
                 server_stages: nn.Sequential, prototypes: ClassPrototypes,
                 loss_fn: nn.Module, round_optimizer, env):
        self.cfg = cfg
        self.harmonizer, self.phi_s, self.server_stages = harmonizer, phi_s, server_stages
        self.prototypes, self.loss_fn, self.round_optimizer = prototypes, loss_fn, round_optimizer
        self.env = env
        self.sequential = cfg.server_update == "sequential"
        self.shared_harmonizer = self.sequential or cfg.harmonizer == "shared"
        shared = [*(harmonizer.parameters() if self.shared_harmonizer else ()),
                  *(phi_s.parameters() if phi_s is not None else ()),
                  *(server_stages.parameters() if self.sequential else ())]
        self.optimizer = round_optimizer(shared, 1) if shared else None
        self.lock = FifoResource(env) if self.sequential else None
        self.locks: dict[int, FifoResource] = {}
        self.copies: dict[int, tuple[int, ServerPath]] = {}

    def start_round(self, lr: float) -> None:
        """A new round: no copies or locks yet; the shared pieces' learning rate ``lr``."""
        self.copies, self.locks = {}, {}
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr

    def open(self, client_id: int) -> None:
        """``per_client``: the lock of ``client_id``'s server copy this round."""
        if not self.sequential:
            self.locks[client_id] = FifoResource(self.env)

    def lock_of(self, client_id: int) -> FifoResource:
        """The lock a step served for ``client_id`` takes (sequential: the one lock)."""
        return self.lock if self.sequential else self.locks[client_id]

    def path(self, p: int) -> ServerPath:
        """The shared path that serves an interface of cut ``p``: stages ``p+1..L``, then the
        harmonizer."""
        stages = self.server_stages[p - 1:] if len(self.server_stages) else self.server_stages
        return ServerPath(self.harmonizer, p, stages)

    def for_client(self, client: Client, cut: int, round_: int
             ) -> tuple[ServerPath, torch.optim.Optimizer | JointOptimizer, FifoResource]:
        """(server path, its optimizer, its lock) that serves ``client`` at ``cut`` this round.

        ``sequential``: the shared ``w_s`` and harmonizer with the persistent server
        optimizer and the one server lock. ``per_client``: the client's own copy of the
        stages after ``cut`` (and, with ``harmonizer: per_client``, of the harmonizer),
        with an optimizer of its own for the round, joined to the persistent optimizer of
        the shared pieces, and the client's own lock, so different clients' server steps
        run in parallel up to the server's slots
        (:meth:`~sflsim.algorithms.steps.TorchSteps.server_step`, as SplitFed V1).
        """
        if self.sequential:
            return self.path(cut), self.optimizer, self.lock
        stages = copy.deepcopy(self.path(cut).stages)
        harmonizer = self.harmonizer if self.shared_harmonizer else copy.deepcopy(self.harmonizer)
        path = ServerPath(harmonizer, cut, stages)
        own = [*(() if self.shared_harmonizer else harmonizer.parameters()), *stages.parameters()]
        optimizers = [self.round_optimizer(own, round_)] if own else []
        if self.optimizer is not None:
            optimizers.append(self.optimizer)
        return path, JointOptimizer(*optimizers), self.locks[client.client_id]

    def objective(self, path: ServerPath, p1: int):
        """Eq. 10 on interfaces through ``path`` (plus phi_s's own loss on ``p1``
        interfaces, detached), then the step's ``Z`` to the prototypes
        (:meth:`ClassPrototypes.add`)."""

        def objective(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = path.embed(h)
            loss = self.loss_fn(path.harmonizer.head(z), y)
            if self.cfg.harmonize and self.cfg.lambda_align > 0:
                loss = loss + self.cfg.lambda_align * alignment_loss(
                    z, self.prototypes.alignment, y, self.cfg.tau_a)
            if self.phi_s is not None and path.p == p1:
                loss = loss + self.phi_s_loss(h.detach(), y)
            self.prototypes.add(z.detach(), y)
            return loss
        return objective

    def phi_s_loss(self, h1: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Eq. 9's loss of ``phi_s(Pool(h_p1))`` against the prototypes (trains phi_s only)."""
        return alignment_loss(self.phi_s(pool(h1)), self.prototypes.alignment, y, self.cfg.tau_a)
