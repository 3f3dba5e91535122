"""FedMut: each client starts the round from its own mutation of the global model.

Paper: Hu, Cao, Li, Li, Liu, Li, Chen, Liu, "FedMut: Generalized Federated Learning
via Stochastic Mutation", AAAI 2024 (doi:10.1609/aaai.v38i11.29146), Alg. 1 and its
mutation rule, followed with the authors' code (github.com/HMHelloWorld/FedMut,
``Algorithm/Training_FedMut.py``: ``FedMut``, ``mutation_spread``; defaults in
``utils/options.py``).

After the aggregation of round ``r - 1`` the server knows the global update
``g = w_glb^{r-1} - w_glb^{r-2}``. In round ``r`` client ``i`` downloads, instead of
``w_glb``, the mutated model

    w_mut^i = {layer_1 + alpha v_1^i g_1, ..., layer_L + alpha v_L^i g_L},

one sign ``v_l^i`` in {+1, -1} per layer ``l`` (here: per parameter tensor, as the
authors' code mutates per state-dict entry). The signs balance over the clients:
for every layer, half of the clients get +1 and half -1, in an order drawn at random
per layer (the code pairs +1 with -1 and shuffles), so the mutated models surround
the global one and their mean is the global model. With an odd number of clients
one of them (here drawn at random each round; in the code the last of the randomly
sampled clients) gets the global model unmutated. The clients then train as in FedAvg
and the server averages their uploads. Round 1 has no previous update, so it is
FedAvg's, as in the code (its first local models are copies of the initial model);
``alpha: 0`` gives FedAvg bit for bit.

Options from the authors' code: ``alpha`` is its ``--radius`` (default 4.0).
``acceleration`` is its ``--mut_acc_rate`` (0.3 there): in round ``r`` the negative
signs become ``-1 + acceleration * (1 - min((r - 2) / acceleration_rounds, 1))``
(``r - 2`` is the code's 0-based index of the round whose update is used;
``--mut_bound 50``), so early mutations lean toward the last update; it defaults to
0, balanced +-1 signs. (The paper's full text could not be read here; the mutation
rule above, as transcribed from it in
blog.youkuaiyun.com/Rick_rui/article/details/138679984, has no acceleration term.)

The mutations are server-side element-wise work, which the cost model does not
count (:mod:`sflsim.models.cost`); each client downloads its own model, the same
bytes as FedAvg's broadcast, so FedMut's simulated time, bytes, FLOPs and energy
equal FedAvg's. The signs are drawn from their own generator, seeded from the
training stream (``seeds.training``), over the clients that take part in the round.

Deviations from the paper:

* Aggregation weighs the uploads by sample count (FedAvg, so that ``alpha: 0`` is
  FedAvg); the authors' code takes their plain mean.
* Parameters are mutated, buffers are not: the authors' code also mutates BatchNorm
  running statistics (a running variance can then turn negative) and the integer
  batch counters; here they start from the global model's.
* Every client takes part in every round (the paper samples K of N; a client that
  drops out, ``conditions.client_drop_prob``, gets no mutation and the signs balance
  over the others). A client cut off by a round deadline uploads nothing, so the
  uploads' starting points no longer balance.
* The update ``g`` is the previous round's change of the global model: after a round
  in which every client dropped out (the global model did not change) the next round
  is not mutated.
* The FedSGA paper (CIKM 2026, arXiv 2608.15639, §4.1.2) lists FedMut among its split-learning baselines
  and describes it as mutual learning between client and server models; its citation
  [18] is this paper, a (non-split) federated-learning method, which is what is built.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sflsim.algorithms.base import RunContext, register_algorithm
from sflsim.algorithms.fedavg import FedAvg
from sflsim.engine import Process


@register_algorithm("fedmut")
class FedMut(FedAvg):
    """FedAvg whose clients start from mutated global models (FedMut Alg. 1)."""

    local_models_from_global = False  # each client's is the global model mutated

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.rng = np.random.default_rng(
            np.random.SeedSequence(ctx.seeds.get("split", 0), spawn_key=(3,)))
        #: per parameter of the global model, its change in round ``update_round``
        self.last_update: list[torch.Tensor] | None = None
        self.update_round = 0
        #: this round: client id -> one sign (multiplier of ``alpha * g``) per parameter;
        #: clients without an entry start from the global model
        self.signs: dict[int, list[float]] = {}

    def train_round(self, round_: int) -> Process:
        self.signs = self.draw_signs(round_)
        yield from super().train_round(round_)

    def draw_signs(self, round_: int) -> dict[int, list[float]]:
        """Per client taking part in ``round_``, one sign per parameter tensor: per tensor,
        half the clients +1 and half -1 (with acceleration: ``-1 + rate``) in a random
        order; with an odd count one client, drawn at random, gets none."""
        cfg = self.scenario.algorithm
        active = [c.client_id for c in self.protocol.active_clients()]
        if cfg.alpha == 0 or self.last_update is None or self.update_round != round_ - 1 \
                or len(active) < 2:
            return {}
        if len(active) % 2:
            active.pop(int(self.rng.integers(len(active))))
        rate = cfg.acceleration * (1 - min((round_ - 2) / cfg.acceleration_rounds, 1.0))
        half = len(active) // 2
        balanced = np.array([1.0] * half + [-1.0 + rate] * half)
        per_tensor = [self.rng.permutation(balanced) for _ in self.last_update]  # (P, clients)
        return {cid: [float(s[i]) for s in per_tensor] for i, cid in enumerate(active)}

    def local_model(self, client_id: int) -> nn.Module:
        """The global model plus ``alpha * v * g`` per parameter tensor (no mutation for a
        client without signs this round)."""
        local = self.global_copy()
        signs = self.signs.get(client_id)
        if signs:
            alpha = self.scenario.algorithm.alpha
            with torch.no_grad():
                for p, g, v in zip(local.parameters(), self.last_update, signs):
                    p.add_(g, alpha=alpha * v)
        return local

    def end_round(self, round_: int) -> None:
        """FedAvg's aggregation, then keep the global model's change for the next round."""
        before = [p.detach().clone() for p in self.global_model.parameters()]
        super().end_round(round_)
        self.last_update = [p.detach() - b for p, b in zip(self.global_model.parameters(), before)]
        self.update_round = round_
