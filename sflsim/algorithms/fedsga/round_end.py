"""FedSGA's round end: the server "updates the shared submodel w_s using the contributions
from participating clients" (§3.1) as SplitFed V1's layer-wise aggregation with per-client
cuts, averages the harmonizer copies (§3.4) and keeps each client's adapted prefix for the
probes of Alg. 1."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn

from sflsim.algorithms.aggregation import average_into, weighted_average

if TYPE_CHECKING:
    from sflsim.algorithms.fedsga.state import FedSGAState


@torch.no_grad()
def end_round(fedsga: FedSGAState) -> None:
    """FedSGA's round end (:meth:`FedSGA.end_round
    <sflsim.algorithms.fedsga.FedSGA.end_round>`): keep each client's adapted prefix
    (``probe: adapted``), then average: the harmonizer copies (``harmonizer:
    per_client``) and every backbone stage over the copies that trained it
    (:func:`aggregate_backbone`); then the round's prototype update (``prototype_update:
    per_round``)."""
    done = {cid: fedsga.cost_model.cut_layers[cid] for cid in fedsga.round_fronts
            if fedsga.protocol.status.get(cid, "trained") == "trained"
            and (cid in fedsga.client_copies or fedsga.fronts)}
    if fedsga.cfg.probe == "adapted":
        for cid, cut in done.items():
            fedsga.adapted[cid] = adapted_prefix(fedsga, cid, cut)
    if not fedsga.server_side.shared_harmonizer:
        aggregate_harmonizers(fedsga, done)
    aggregate_backbone(fedsga, done)
    fedsga.class_prototypes.end_round()
    fedsga.client_copies = {}
    fedsga.server_side.copies, fedsga.server_side.locks = {}, {}
    fedsga.round_fronts = {}


def adapted_prefix(fedsga: FedSGAState, cid: int, cut: int) -> nn.Sequential:
    """Stages ``p_1+1..p_ref`` as trained for ``cid`` this round: its front up to its cut,
    then its server copy (``per_client``) or the shared stage; a copy."""
    out = []
    for j in range(fedsga.p1, fedsga.p_ref):  # global_model index j: stage j + 1
        if j < cut or not len(fedsga.server_side.server_stages):
            out.append(fedsga.round_fronts[cid][j])
        elif cid in fedsga.server_side.copies:
            out.append(fedsga.server_side.copies[cid][1].stages[j - cut])
        else:
            out.append(fedsga.server_side.server_stages[j - 1])
    return copy.deepcopy(nn.Sequential(*out))


@torch.no_grad()
def aggregate_harmonizers(fedsga: FedSGAState, done: dict[int, int]) -> None:
    """``harmonizer: per_client``: the harmonizer becomes the sample-weighted average of
    the clients' copies: the input layer of cut ``p`` over the clients at ``p``, each
    depth embedding row over the clients whose cut reads it (``depth_embedding: cut``:
    the clients at ``p``; ``representation`` with ``server_backbone: true``: all), the
    rest over all; a piece nobody trained stays as it was."""
    server_copies = fedsga.server_side.copies
    copies = {cid: server_copies[cid][1].harmonizer for cid in done if cid in server_copies}
    if not copies:
        return
    samples = {cid: fedsga.aggregation_weight(cid) for cid in copies}
    h = fedsga.server_side.harmonizer
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
def aggregate_backbone(fedsga: FedSGAState, done: dict[int, int]) -> None:
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

    samples = {cid: fedsga.aggregation_weight(cid) for cid in done}
    for cid, cut in done.items():
        if not fedsga.fronts:
            for j in range(cut):
                add(fedsga.global_model[j], fedsga.client_copies[cid][j], samples[cid])
        if cid in fedsga.server_side.copies:
            for i, module in enumerate(fedsga.server_side.copies[cid][1].stages):
                add(fedsga.server_side.server_stages[cut - 1 + i], module, samples[cid])
    if fedsga.server_side.sequential:
        for i, stage in enumerate(fedsga.server_side.server_stages):  # stage i + 2
            served = sum(samples[cid] for cid, cut in done.items() if cut <= i + 1)
            if served:
                add(stage, stage, served)
    for target, states, weights in pooled.values():
        mean = weighted_average(states, weights)
        for name, tensor in target.state_dict().items():
            tensor.copy_(mean[name])
