"""FedSGA's class prototypes (§3.4): ``C^{t-1}`` as eqs. 3 and 9 read them and the
exponential moving average ``C^t_y <- normalize(mu C^{t-1}_y + (1 - mu) mean Z)`` the
server applies after its updates (Alg. 2 line 14), per round or per step."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ClassPrototypes:
    """The prototypes, their reading and their update (a part of
    :class:`~sflsim.algorithms.fedsga.FedSGA`, its ``class_prototypes``).

    Args:
        initial: the initial prototypes ``(classes, dim)``, unit rows.
        mu: the EMA's weight of the old prototype (``algorithm.mu``).
        read: ``algorithm.prototypes``: ``previous_round`` (eqs. 3 and 9 read
            ``C^{t-1}``) or ``live`` (the EMA as it moves).
        update: ``algorithm.prototype_update``: ``per_round`` (one EMA step at the round's
            end over the round's ``Z``) or ``per_step`` (after every server step).

    Attributes:
        prototypes: the live EMA ``(classes, dim)``.
        round_prototypes: ``C^{t-1}``, the prototypes as broadcast at the round's start.
        sums, counts: ``per_round``: this round's per-class sums of ``normalize(Z)``
            ``(classes, dim)`` and counts ``(classes,)``; None until the round's first step.
    """

    def __init__(self, initial: torch.Tensor, mu: float, read: str, update: str):
        self.prototypes = initial
        self.round_prototypes = initial.clone()
        self.mu, self.read, self.update_rule = mu, read, update
        self.sums: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None

    @property
    def alignment(self) -> torch.Tensor:
        """The prototypes eqs. 3 and 9 read: ``C^{t-1}``, or the live EMA (``prototypes: live``)."""
        return self.round_prototypes if self.read == "previous_round" else self.prototypes

    def start_round(self) -> None:
        """The round's ``C^{t-1}``; a round whose end was skipped leaves no sums behind."""
        self.round_prototypes = self.prototypes.clone()
        self.sums = self.counts = None

    def add(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """One server step's ``Z`` ``(B, dim)`` with labels ``y`` ``(B,)``: the EMA step
        (``per_step``) or the round's sums (``per_round``)."""
        if self.update_rule == "per_step":
            self.update(z, y)
        else:
            self.accumulate(z, y)

    @torch.no_grad()
    def update(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """``prototype_update: per_step``, one server step's batch:
        ``C_y <- normalize(mu C_y + (1 - mu) mean_{b: y_b = y} normalize(Z_b))``."""
        z = F.normalize(z, dim=1)
        for label in y.unique():
            mean = z[y == label].mean(0)
            c = self.mu * self.prototypes[label] + (1 - self.mu) * mean
            self.prototypes[label] = F.normalize(c, dim=0)

    @torch.no_grad()
    def accumulate(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """``prototype_update: per_round``: add one server step's ``normalize(Z_b)`` to the
        round's per-class sums and counts (:meth:`end_round` applies them)."""
        if self.sums is None:
            self.sums = torch.zeros_like(self.prototypes)
            self.counts = torch.zeros(len(self.prototypes), device=self.prototypes.device)
        z = F.normalize(z, dim=1)
        for label in y.unique():  # (not index_add_: atomic, hence unordered, on a GPU)
            mask = y == label
            self.sums[label] += z[mask].sum(0)
            self.counts[label] += mask.sum()

    @torch.no_grad()
    def end_round(self) -> None:
        """``prototype_update: per_round``: §3.4's one EMA step of the round over every
        participant's ``Z`` the server computed, ``C^t_y <- normalize(mu C^{t-1}_y + (1 - mu)
        mean_{i in S_t, b: y_b = y} normalize(Z_b))``; a class nobody sent stays as it was."""
        if self.sums is None:
            return
        seen = self.counts > 0
        mean = self.sums[seen] / self.counts[seen, None]
        c = self.mu * self.prototypes[seen] + (1 - self.mu) * mean
        self.prototypes[seen] = F.normalize(c, dim=1)
        self.sums = self.counts = None
