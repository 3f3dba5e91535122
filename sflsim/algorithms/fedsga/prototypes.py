"""FedSGA's class prototypes (§3.4): ``C^{t-1}`` as eqs. 3 and 9 read them and the
exponential moving average ``C^t_y <- normalize(mu C^{t-1}_y + (1 - mu) mean Z)`` the
server applies after its updates (Alg. 2 line 14), per round or per step."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ClassPrototypes:
    """The prototypes' reading and update (a part of :class:`~sflsim.algorithms.fedsga.FedSGA`)."""

    @property
    def alignment_prototypes(self) -> torch.Tensor:
        """The prototypes eqs. 3 and 9 read: ``C^{t-1}``, or the live EMA (``prototypes: live``)."""
        return self.round_prototypes if self.cfg.prototypes == "previous_round" else self.prototypes

    @torch.no_grad()
    def update_prototypes(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """``prototype_update: per_step``, one server step's batch:
        ``C_y <- normalize(mu C_y + (1 - mu) mean_{b: y_b = y} normalize(Z_b))``."""
        z = F.normalize(z, dim=1)
        for label in y.unique():
            mean = z[y == label].mean(0)
            c = self.cfg.mu * self.prototypes[label] + (1 - self.cfg.mu) * mean
            self.prototypes[label] = F.normalize(c, dim=0)

    @torch.no_grad()
    def accumulate_prototypes(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """``prototype_update: per_round``: add one server step's ``normalize(Z_b)`` to the
        round's per-class sums and counts (:meth:`end_prototypes` applies them)."""
        if self.prototype_sums is None:
            self.prototype_sums = torch.zeros_like(self.prototypes)
            self.prototype_counts = torch.zeros(len(self.prototypes), device=self.prototypes.device)
        z = F.normalize(z, dim=1)
        for label in y.unique():  # (not index_add_: atomic, hence unordered, on a GPU)
            mask = y == label
            self.prototype_sums[label] += z[mask].sum(0)
            self.prototype_counts[label] += mask.sum()

    @torch.no_grad()
    def end_prototypes(self) -> None:
        """``prototype_update: per_round``: §3.4's one EMA step of the round over every
        participant's ``Z`` the server computed, ``C^t_y <- normalize(mu C^{t-1}_y + (1 - mu)
        mean_{i in S_t, b: y_b = y} normalize(Z_b))``; a class nobody sent stays as it was."""
        if self.prototype_sums is None:
            return
        seen = self.prototype_counts > 0
        mean = self.prototype_sums[seen] / self.prototype_counts[seen, None]
        c = self.cfg.mu * self.prototypes[seen] + (1 - self.cfg.mu) * mean
        self.prototypes[seen] = F.normalize(c, dim=1)
        self.prototype_sums = self.prototype_counts = None
