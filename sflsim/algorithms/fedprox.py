"""FedProx: FedAvg with a proximal term in every local step.

Paper: Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020, Alg. 2 (FedProx) and its local objective: in
round ``t`` client ``k`` starts from the global model ``w^t`` and (inexactly) minimises

    h_k(w; w^t) = F_k(w) + (mu / 2) ||w - w^t||^2;

the server averages the local solutions as FedAvg does.

Here every local step minimises the batch's cross-entropy plus
``(mu / 2) * sum ||w - w^t||^2`` over the model's parameters, ``w^t`` the global
model of the round (the one the client downloaded). The term is added to the loss
and differentiated by autograd, so its gradient ``mu (w - w^t)`` reaches the
configured optimizer. The authors' code (github.com/litian96/FedProx,
``flearn/optimizer/pgd.py``, ``PerturbedGradientDescent``) folds it into plain SGD,
``w <- w - lr (grad F + mu (w - w^t))``, which is the same step with
``optimizer: {name: sgd}`` (no momentum, no weight decay); with Adam or momentum the
proximal gradient passes through the optimizer's state like the loss gradient.
Everything else is FedAvg's (:class:`~sflsim.algorithms.fedavg.FedAvg`): download,
``local_epochs`` passes, upload, sample-weighted averaging (the authors'
``aggregate`` weighs by samples too), and the simulated times, bytes, FLOPs and
energy. With ``mu: 0`` the run is FedAvg's, bit for bit. With
``training.fuse_clients`` the clients' steps are batched
(:class:`sflsim.models.fused.FusedClients`) with the same term, whose gradient is
element-wise.

``mu`` (default 0.01): the paper tunes it per dataset from {0.001, 0.01, 0.1, 1},
and the authors' README says no default works for all settings. The FedSGA paper
(CIKM 2026, arXiv 2608.15639, §4.1.2), whose Table 2 has FedProx as a baseline, does not give its
value. 0.01 is the value the FedMut authors' code uses for its FedProx baseline on
CIFAR with ResNet-18 (github.com/HMHelloWorld/FedMut, ``utils/options.py``,
``--prox_alpha 0.01``), the setting closest to FedSGA's; the term sums over every
parameter, so on a ResNet (10^5 to 10^7 parameters) the grid's top value 1 would hold
local models close to the global one.

Deviations from the paper:

* Partial work: the paper accepts γ-inexact local solutions and, in its experiments
  with systems heterogeneity, aggregates the partial updates of stragglers, which the
  authors' code (``flearn/trainers/fedprox.py``) simulates by giving a fraction of the
  clients 1 to E-1 local epochs. Here stragglers are slowed
  down (``conditions.straggler_sigma``) but every client does ``local_epochs``; a
  client cut off by a round deadline uploads nothing, as in FedAvg.
* The paper's heuristic of adapting ``mu`` during training is not implemented:
  ``mu`` is constant.
* The term covers parameters, not buffers (BatchNorm running statistics); the
  authors' code covers TensorFlow's trainable variables, the same set.
* The term is element-wise work, which the cost model does not count (nor the
  optimizer update, :mod:`sflsim.models.cost`), so FedProx's simulated time, FLOPs and
  energy equal FedAvg's.
* The training loss recorded (``client_loss``) is the cross-entropy alone, so it
  compares with FedAvg's.
"""

from __future__ import annotations

from torch import nn

from sflsim.algorithms.base import register_algorithm
from sflsim.algorithms.fedavg import FedAvg


@register_algorithm("fedprox")
class FedProx(FedAvg):
    """FedAvg whose local objective adds ``(mu/2)||w - w_global||^2`` (FedProx)."""

    def proximal(self) -> tuple[float, nn.Module] | None:
        """``(mu, global model)``: the term ``(mu / 2) * sum ||w - w^t||^2`` over the local
        model's parameters, ``w^t`` the round's global model (unchanged until the round's
        aggregation); None when ``mu`` is 0."""
        mu = self.scenario.algorithm.mu
        return None if mu == 0 else (mu, self.global_model)
