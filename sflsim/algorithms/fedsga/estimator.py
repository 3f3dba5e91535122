"""FedSGA's sufficiency estimator ``Gamma_theta`` (§3.3, eq. 6), its fit on the calibration
buffer (Alg. 1 line 8) and the ``r`` of each split decision (Alg. 2 line 9)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn


class MonotoneEstimator(nn.Module):
    """Gamma_theta of eq. 6: ``(B, 3) observations [a, delta, q], (B,) r_prev -> (B,) r``.

    Non-negative weights on ``[a, -delta, -q, r_prev]`` and monotone activations
    make ``r`` non-decreasing in ``a`` and ``r_prev`` and non-increasing in
    ``delta`` and ``q``.
    """

    def __init__(self, hidden: int = 8):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(hidden, 4) * 0.1)
        self.b1 = nn.Parameter(torch.zeros(hidden))
        self.w2 = nn.Parameter(torch.randn(1, hidden) * 0.1)
        self.b2 = nn.Parameter(torch.zeros(1))

    def forward(self, obs: torch.Tensor, r_prev: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logit(obs, r_prev))  # (B,)

    def logit(self, obs: torch.Tensor, r_prev: torch.Tensor) -> torch.Tensor:
        """The pre-sigmoid output ``(B,)`` (fitted with BCE on logits: no saturation)."""
        a, delta, q = obs.unbind(-1)
        z = torch.stack([a, -delta, -q, r_prev], dim=-1)  # (B, 4)
        h = torch.tanh(z @ F.softplus(self.w1).T + self.b1)  # (B, hidden)
        return (h @ F.softplus(self.w2).T + self.b2).squeeze(-1)  # (B,)


class SufficiencyEstimation:
    """The estimate ``r`` and the fit of ``Gamma_theta`` (a part of
    :class:`~sflsim.algorithms.fedsga.FedSGA`, its ``sufficiency``).

    Args:
        estimator: ``Gamma_theta`` (drawn by the algorithm with its other pieces).
        cfg: the scenario's ``algorithm`` (``sufficiency``, ``before_first_fit``).
        client_ids: the run's clients (each starts at ``r_prev = 0.5``).

    Attributes:
        calibration: the calibration buffer, ``(o, r_prev, s)`` of every probe (Alg. 1).
        fitted: whether ``Gamma_theta`` has been fitted on a calibration pair yet
            (``before_first_fit``).
        r_prev: ``{client_id: r}`` of its last split decision.
    """

    def __init__(self, estimator: MonotoneEstimator, cfg, client_ids: Iterable[int]):
        self.estimator = estimator
        self.cfg = cfg
        self.device = next(estimator.parameters()).device
        self.calibration: list[tuple[list[float], float, float]] = []
        self.fitted = False
        self.r_prev = {cid: 0.5 for cid in client_ids}

    def r(self, obs: list[float], client_id: int) -> float:
        """``r`` of the split decision: ``Gamma_theta(o, r_prev)`` (eq. 6), or the alignment
        proxy ``(a + 1) / 2`` with ``sufficiency: false`` and, with ``before_first_fit:
        alignment``, while the estimator has not been fitted on any calibration pair."""
        if not self.cfg.sufficiency or (self.cfg.before_first_fit == "alignment"
                                        and not self.fitted):
            return (obs[0] + 1) / 2
        return self.estimator_r(obs, client_id)

    def estimator_r(self, obs: list[float], client_id: int) -> float:
        """``Gamma_theta(o, r_prev)`` of eq. 6, whatever ``sufficiency`` says."""
        with torch.no_grad():
            return float(self.estimator(torch.tensor([obs], device=self.device),
                                        torch.tensor([self.r_prev[client_id]], device=self.device)))

    def add(self, obs: list[float], client_id: int, s: float) -> None:
        """Alg. 1: the pair ``((o, r_prev), s)`` joins the buffer and ``Gamma_theta`` is refitted."""
        self.calibration.append((obs, self.r_prev[client_id], s))
        self.fit()

    def fit(self, steps: int = 100) -> None:
        """Alg. 1 line 8: fit Gamma_theta on every calibration pair so far (binary
        cross-entropy on the logits, Adam; clamping probabilities instead would stop the
        gradient once an output saturates, and the estimator would never recover)."""
        def column(values: Iterable) -> torch.Tensor:
            return torch.tensor(list(values), device=self.device)

        obs = column(o for o, _, _ in self.calibration)
        r_prev = column(r for _, r, _ in self.calibration)
        target = column(s for _, _, s in self.calibration)
        opt = torch.optim.Adam(self.estimator.parameters(), lr=0.05)
        for _ in range(steps):
            loss = F.binary_cross_entropy_with_logits(self.estimator.logit(obs, r_prev), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.fitted = True
