"""FedSGA's round end: the server "updates the shared submodel w_s using the contributions
from participating clients" (§3.1) as SplitFed V1's layer-wise aggregation with per-client
cuts, averages the harmonizer copies (§3.4) and keeps each client's adapted prefix for the
probes of Alg. 1."""

from __future__ import annotations

import copy

import torch
from torch import nn

from sflsim.algorithms.aggregation import average_into, weighted_average


class RoundAggregation:
    """What a round leaves behind (a part of :class:`~sflsim.algorithms.fedsga.FedSGA`)."""

    @torch.no_grad()
    def end_round(self, round_: int) -> None:
        """Keep each client's adapted prefix (``probe: adapted``), then average: the
        harmonizer copies (``harmonizer: per_client``) and every backbone stage over the
        copies that trained it (:meth:`aggregate_backbone`); then the round's prototype
        update (``prototype_update: per_round``)."""
        done = {cid: self.cuts[cid] for cid in self.round_fronts
                if self.status.get(cid, "trained") == "trained"
                and (cid in self.client_copies or self.fronts)}
        if self.cfg.probe == "adapted":
            for cid, cut in done.items():
                self.adapted[cid] = self.adapted_prefix(cid, cut)
        if not self.shared_harmonizer:
            self.aggregate_harmonizers(done)
        self.aggregate_backbone(done)
        self.end_prototypes()
        self.client_copies, self.server_copies, self.server_locks = {}, {}, {}
        self.round_fronts = {}

    def adapted_prefix(self, cid: int, cut: int) -> nn.Sequential:
        """Stages ``p_1+1..p_ref`` as trained for ``cid`` this round: its front up to its cut,
        then its server copy (``per_client``) or the shared stage; a copy."""
        out = []
        for j in range(self.p1, self.p_ref):  # global_model index j: stage j + 1
            if j < cut or not len(self.server_stages):
                out.append(self.round_fronts[cid][j])
            elif cid in self.server_copies:
                out.append(self.server_copies[cid][1].stages[j - cut])
            else:
                out.append(self.server_stages[j - 1])
        return copy.deepcopy(nn.Sequential(*out))

    @torch.no_grad()
    def aggregate_harmonizers(self, done: dict[int, int]) -> None:
        """``harmonizer: per_client``: the harmonizer becomes the sample-weighted average of
        the clients' copies: the input layer of cut ``p`` over the clients at ``p``, each
        depth embedding row over the clients whose cut reads it (``depth_embedding: cut``:
        the clients at ``p``; ``representation`` with ``server_backbone: true``: all), the
        rest over all; a piece nobody trained stays as it was."""
        copies = {cid: self.server_copies[cid][1].harmonizer for cid in done if cid in self.server_copies}
        if not copies:
            return
        samples = {cid: self.aggregation_weight(cid) for cid in copies}
        h = self.harmonizer
        for p in sorted({done[cid] for cid in copies}):
            at_p = [cid for cid in copies if done[cid] == p]
            weights = [samples[cid] for cid in at_p]
            for k, piece in enumerate(h.depth_pieces(p)):
                average_into([copies[cid].depth_pieces(p)[k] for cid in at_p], weights, target=piece)
        if h.depth_embedding is not None:
            for row in sorted({h.row(done[cid]) for cid in copies}):
                at_row = [cid for cid in copies if h.row(done[cid]) == row]
                rows = [{"row": copies[cid].depth_embedding.weight[row]} for cid in at_row]
                h.depth_embedding.weight[row] = weighted_average(
                    rows, [samples[cid] for cid in at_row])["row"]
        for name in ("mlp", "head"):
            average_into([getattr(c, name) for c in copies.values()], list(samples.values()),
                         target=getattr(h, name))

    @torch.no_grad()
    def aggregate_backbone(self, done: dict[int, int]) -> None:
        """Every stage becomes the sample-weighted average of the copies that trained it this
        round: the fronts of the clients cut at or after it, and the server copies
        (``per_client``) of the clients cut before it, or (``sequential``) the one ``w_s``
        trained in place, weighted by the samples of the clients it served there. With
        ``backbone: one`` a stage's client and server copies go into one average; with
        ``separate`` the fronts go into the global model and the server copies into the
        server's own stages. Only clients whose round completed count; a stage nobody
        trained stays as it was."""
        pooled: dict[int, tuple[nn.Module, list, list]] = {}

        def add(target: nn.Module, module: nn.Module, weight: float) -> None:
            entry = pooled.setdefault(id(target), (target, [], []))
            entry[1].append(module.state_dict())
            entry[2].append(weight)

        samples = {cid: self.aggregation_weight(cid) for cid in done}
        for cid, cut in done.items():
            if not self.fronts:
                for j in range(cut):
                    add(self.global_model[j], self.client_copies[cid][j], samples[cid])
            if cid in self.server_copies:
                for i, module in enumerate(self.server_copies[cid][1].stages):
                    add(self.server_stages[cut - 1 + i], module, samples[cid])
        if self.sequential:
            for i, stage in enumerate(self.server_stages):  # stage i + 2
                served = sum(samples[cid] for cid, cut in done.items() if cut <= i + 1)
                if served:
                    add(stage, stage, served)
        for target, states, weights in pooled.values():
            mean = weighted_average(states, weights)
            for name, tensor in target.state_dict().items():
                tensor.copy_(mean[name])
