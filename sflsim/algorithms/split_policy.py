"""Split strategies: which cut layer each client uses in a round (FedSGA Fig. 4).

* ``static``: every client keeps its device group's ``end_layer`` every round.
* ``random``: each round, each client draws a cut uniformly from the candidates
  (seeded from the training stream, ``seeds.training`` or ``seed``).
* ``resource``: each client takes the deepest candidate whose estimated round
  time on its device and link fits ``round_budget_s`` (if none fits, the
  candidate with the smallest estimated time). This is the resource-driven policy the FedSGA paper attributes
  to MultiSFL-style adaptive splitting.

The estimate for cut ``k`` (seconds) is: client compute of stages ``1..k``
(forward + backward FLOPs x samples x local epochs / sustained FLOP/s), plus
activations up and activation gradients down for every batch (bytes x 8 /
bandwidth + latency each way), plus downloading and uploading the client-side
model. Server time and queueing are not part of the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from torch import nn

from sflsim.algorithms.base import Client
from sflsim.models.cost import CostTable, PieceCost


class SplitPolicy:
    """Chooses ``{client_id: cut layer}`` for a round."""

    def __init__(self, candidates: list[int], clients: list[Client]):
        self.candidates = sorted(candidates)
        self.clients = clients

    def choose(self, round_: int) -> dict[int, int]:
        raise NotImplementedError


class StaticSplit(SplitPolicy):
    def choose(self, round_: int) -> dict[int, int]:
        return {c.client_id: c.end_layer for c in self.clients}


class RandomSplit(SplitPolicy):
    def __init__(self, candidates: list[int], clients: list[Client], rng: np.random.Generator):
        super().__init__(candidates, clients)
        self.rng = rng

    def choose(self, round_: int) -> dict[int, int]:
        return {c.client_id: int(self.rng.choice(self.candidates)) for c in self.clients}


class ResourceSplit(SplitPolicy):
    """Deepest cut whose estimated round time fits the budget (see module docstring)."""

    def __init__(self, candidates: list[int], clients: list[Client], budget_s: float,
                 round_time_s: Callable[[Client, int], float]):
        super().__init__(candidates, clients)
        self.budget_s = budget_s
        self.round_time_s = round_time_s
        self.fixed = {c.client_id: self._deepest_fitting(c) for c in clients}

    def _deepest_fitting(self, client: Client) -> int:
        times = {k: self.round_time_s(client, k) for k in self.candidates}
        fitting = [k for k, t in times.items() if t <= self.budget_s]
        return max(fitting) if fitting else min(times, key=times.get)

    def choose(self, round_: int) -> dict[int, int]:
        return dict(self.fixed)


def estimate_round_time_s(
    client: Client, cut: int, *, body: nn.Module, costs: CostTable, input_shape: tuple[int, ...],
    batch_size: int, local_epochs: int, activation_bytes_per_sample: float, model_bytes: int,
) -> float:
    """Estimated seconds of one SplitFed round of ``client`` at ``cut`` (module docstring).

    Args:
        body: the client-side model ``stages 1..cut`` (its FLOPs are counted once).
        activation_bytes_per_sample: wire bytes of one sample's activations at ``cut``.
        model_bytes: bytes of the client-side model sent each way.
    """
    cost: PieceCost = costs.cost(f"client_body:l{cut}", body, input_shape)
    n = len(client.indices) * local_epochs
    batches = math.ceil(len(client.indices) / batch_size) * local_epochs
    compute = cost.train_flops(n) / client.flops_per_s
    up, down = client.uplink, client.downlink
    transfer = (n * activation_bytes_per_sample * 8 * (1 / up.bandwidth_bps + 1 / down.bandwidth_bps)
                + batches * (up.latency_s + down.latency_s))
    model = model_bytes * 8 * (1 / up.bandwidth_bps + 1 / down.bandwidth_bps)
    return compute + transfer + model
