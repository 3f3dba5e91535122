"""FedAS: parameter alignment before local training, Fisher-information-weighted aggregation.

Paper: Yang, Huang, Ye, "FedAS: Bridging Inconsistency in Personalized Federated
Learning", CVPR 2024, pp. 11986-11995: Federated Parameter-Alignment and
Client-Synchronization. The paper's full text was not at hand (no equation of
it is quoted here); where its abstract is silent this module follows the
authors' code
(github.com/xiyuanyang45/FedAS, ``system/flcore/clients/clientas.py``:
``set_parameters`` and ``train``; ``system/flcore/servers/serveras.py``:
``aggregate_wrt_fisher``), which PFLlib ships unchanged in substance
(github.com/TsingZ0/PFLlib, ``clientas.py``, ``serveras.py``). FedSGA
(CIKM 2026, arXiv 2608.15639, §4.1.2, Table 2) uses it as an FL baseline.

Each client's model is a shared feature extractor and a personalised header
(the last linear layer, :func:`~sflsim.algorithms.personalized.split_header`):
the extractor is shared through the server, the header never leaves the client.
A round, per client (every active one):

1. **Download** of the global extractor (``download_model``, its parameters and
   buffers at 4 bytes each).
2. **Parameter alignment** (``align``; "the shared parts learn from the previous
   model"): with its own extractor from the last round, in eval mode, the client
   computes the mean representation ``p_c`` of every class ``c`` it holds
   (``client_prototypes``: the extractor's forward FLOPs over its samples). It
   then trains its copy of the downloaded global extractor for ``align_epochs``
   passes over its data with plain SGD at ``align_lr`` on
   ``L = sum_{c in batch} mean_{i: y_i = c} mean_d (f(x_i)_d - p_{c,d})^2``
   (the authors' per-class ``MSELoss``, summed over the batch's classes;
   ``client_align``: the extractor's forward and backward FLOPs per batch), and
   takes the aligned extractor as its own. Its header is kept. Without
   ``align``, the global extractor replaces the client's as downloaded.
3. **Local training** of the whole model (extractor and personal header) on the
   cross-entropy loss, ``local_epochs`` passes (``client_train``, as FedAvg).
4. **Fisher information** (``synchronize``): in eval mode, per batch ``b`` of its
   data, the gradient ``g_b`` of the batch's mean negative log-likelihood; the
   client's Fisher estimate is ``F = (1/B) sum_b g_b^2`` over its ``B`` batches
   (``client_fisher``: the whole model's forward and backward FLOPs over its
   samples). ``fisher: trace`` (default, the authors' code) sends one number,
   ``tr F`` summed over every parameter of the model; ``fisher: diagonal``
   sends ``F`` for each parameter of the extractor.
5. **Upload** of the trained extractor and the Fisher estimate
   (``upload_model``: 4 bytes per extractor parameter and buffer element, plus
   4 bytes for the trace or 4 per extractor parameter for the diagonal).

At round end the server sets each extractor parameter element ``k`` to
``sum_i w_ik theta_ik`` with ``w_ik = n_i F_ik / sum_j n_j F_jk``
(:func:`fisher_weights`; ``n_i`` the client's samples; with ``fisher: trace``
``F_ik = tr F_i`` for every ``k``), over the clients whose upload arrived;
where every ``F_jk`` is 0 the weights are the sample shares ``n_i / sum_j n_j``.
Buffers (BatchNorm statistics) are averaged by sample shares, as FedAvg does.
Without ``synchronize``: FedAvg's sample-weighted average, no Fisher pass.
Accuracy is that of each client's own model (aligned, trained extractor and its
header), averaged over clients.

Readings and deviations:

* **Weights.** The authors weight client ``i`` by ``tr F_i`` summed over its
  ``ceil(n_i / batch)`` batches, normalised over clients. Here ``F`` is the mean
  over batches and the weight ``n_i tr F_i``: the same up to the rounding of
  the last batch, and exactly the sample shares when the clients' Fisher
  estimates are equal. ``fisher: diagonal`` (per-parameter weights, a reading
  of "Fisher-weighted aggregation" as in Fisher merging) is not the authors'.
* **What travels.** The authors' server averages and sends the whole model, but
  clients only ever load the extractor ("base"); here only the extractor goes
  up and down (and is averaged), which changes no model a client uses.
* **Alignment target.** The authors' code aligns the server's global model
  object in place, so each client of a round starts from the previous client's
  aligned extractor; here each client aligns its own copy of the extractor as
  the server sent it. Their prototypes and alignment use batches of 16; here
  ``training.batch_size`` (alignment in the client's shuffled order, prototypes
  in index order). The prototype pass runs in eval mode (theirs in whatever
  mode the model was left in).
* **Stragglers.** The authors compute the Fisher trace of unselected clients
  too (for logs only); a dropped client here does nothing. Every client takes
  part in every round unless ``conditions`` drop it. Optimizers for local
  training are created anew each round (as FedAvg); the authors keep one, and
  ``progress`` (round / rounds) is passed to alignment but unused there.
* Server aggregation takes no simulated time (as FedAvg's).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from sflsim.algorithms.aggregation import weighted_average
from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.global_model import MODEL_WIRE_BYTES, model_bytes
from sflsim.algorithms.personalized import (
    ClientWork,
    Compute,
    Loss,
    PersonalizedAlgorithm,
    Transfer,
    split_header,
)
from sflsim.execution.host_threads import eval_mode


@torch.no_grad()
def fisher_weights(fishers: Sequence[torch.Tensor], samples: Sequence[float]) -> list[torch.Tensor]:
    """Per-element aggregation weights ``w_i = n_i F_i / sum_j n_j F_j`` (float64).

    Args:
        fishers: one non-negative Fisher estimate per client, all of one shape (a
            parameter's diagonal) or 0-dimensional (a trace, one weight per client).
        samples: the clients' sample counts ``n_i`` (> 0 in total).

    Returns:
        One weight tensor per client, of the fishers' shape; at every element they sum
        to 1. Where every ``F_jk`` is 0 they are the sample shares ``n_i / sum_j n_j``.

    Raises:
        ValueError: no clients, a length mismatch, or samples that sum to zero.
    """
    if not fishers or len(fishers) != len(samples):
        raise ValueError(f"need one sample count per Fisher estimate, got {len(fishers)} "
                         f"estimates and {len(samples)} counts")
    total = float(sum(samples))
    if total <= 0:
        raise ValueError(f"sample counts must sum to more than 0, got {list(samples)}")
    weighted = [f.to(torch.float64) * n for f, n in zip(fishers, samples)]
    denominator = sum(weighted)
    informed = denominator > 0
    safe = torch.where(informed, denominator, torch.ones_like(denominator))
    return [torch.where(informed, w / safe, torch.full_like(safe, n / total))
            for w, n in zip(weighted, samples)]


@torch.no_grad()
def fisher_average(states: Sequence[Mapping[str, torch.Tensor]],
                   fishers: Sequence[Mapping[str, torch.Tensor]], samples: Sequence[float]
                   ) -> dict[str, torch.Tensor]:
    """Average state dicts: each entry named in ``fishers`` by :func:`fisher_weights`, the
    rest (buffers) by sample shares (:func:`~sflsim.algorithms.aggregation.weighted_average`).

    Args:
        states: the clients' state dicts (same keys and shapes).
        fishers: per client, ``{name: Fisher estimate}`` for the entries to weight by
            it, each of the entry's shape or 0-dimensional.
        samples: the clients' sample counts.
    """
    out = weighted_average(states, samples)
    for name in fishers[0]:
        weights = fisher_weights([f[name] for f in fishers], samples)
        mean = sum(w * s[name].to(torch.float64) for w, s in zip(weights, states))
        out[name] = mean.to(states[0][name].dtype)
    return out


@register_algorithm("fedas")
class FedAS(PersonalizedAlgorithm):
    """FedAS: align the downloaded extractor to the client's own class representations,
    train, send the Fisher information; Fisher-weighted averaging (module docstring)."""

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.cfg = ctx.scenario.algorithm
        self.extractor, _ = split_header(self.global_model)  # the shared part (server side)
        #: the extractor as the server sends it this round
        self.sent_extractor: dict[str, torch.Tensor] = {}
        #: this round's arrived uploads: {client_id: Fisher estimate by parameter name}
        #: (None without ``synchronize``); the extractor is the client's, unchanged since.
        #: Kept until the next round begins.
        self.uploads: dict[int, dict[str, torch.Tensor] | None] = {}

    def begin_round(self, round_: int) -> None:
        if not self.ctx.timing_only:
            self.sent_extractor = copy.deepcopy(self.extractor.state_dict())
        self.uploads = {}

    def fisher_bytes(self) -> int:
        """Upload bytes of the Fisher estimate (0 without ``synchronize``)."""
        if not self.cfg.synchronize:
            return 0
        if self.cfg.fisher == "trace":
            return MODEL_WIRE_BYTES
        return sum(p.numel() for p in self.extractor.parameters()) * MODEL_WIRE_BYTES

    def client_work(self, client: Client, round_: int) -> ClientWork:
        if self.ctx.timing_only:
            return (yield from self.timed_work(client))
        cid, n = client.client_id, len(client.indices)
        model = self.local_models[cid]
        extractor, _ = split_header(model)
        train_cost, extractor_cost = self.whole_model_cost(), self.extractor_cost()
        size = model_bytes(self.extractor)
        yield Transfer("download_model", size, up=False)
        if self.cfg.align:
            yield Compute("client_prototypes", extractor_cost.infer_flops(n))
            prototypes, _ = self.class_prototypes(extractor, client)
            aligned = copy.deepcopy(extractor)
            aligned.load_state_dict(self.sent_extractor)
            optimizer = torch.optim.SGD(aligned.parameters(), lr=self.cfg.align_lr)
            for _ in range(self.cfg.align_epochs):
                for idx in self.batching.batches(client):
                    yield Compute("client_align", extractor_cost.train_flops(len(idx)))
                    self.align_step(aligned, optimizer, prototypes, idx, cid)
            extractor.load_state_dict(aligned.state_dict())
        else:
            extractor.load_state_dict(self.sent_extractor)
        optimizer = self.round_optimizer(model.parameters(), round_)
        for idx in self.batching.round_batches(client):
            yield Compute("client_train", train_cost.train_flops(len(idx)))
            yield Loss(self.sgd_step(model, optimizer, idx, cid), len(idx))
        fisher = None
        if self.cfg.synchronize:
            yield Compute("client_fisher", train_cost.train_flops(n))
            fisher = self.fisher_information(model, client)
        yield Transfer("upload_model", size + self.fisher_bytes(), up=True)
        return fisher

    def timed_work(self, client: Client) -> ClientWork:
        """:meth:`client_work`'s steps in a timing-only run: the same computes and
        transfers, no torch part."""
        n = len(client.indices)
        train_cost, extractor_cost = self.whole_model_cost(), self.extractor_cost()
        size = model_bytes(self.extractor)
        yield Transfer("download_model", size, up=False)
        if self.cfg.align:
            yield Compute("client_prototypes", extractor_cost.infer_flops(n))
            for _ in range(self.cfg.align_epochs):
                for idx in self.batching.batches(client):
                    yield Compute("client_align", extractor_cost.train_flops(len(idx)))
        for idx in self.batching.round_batches(client):
            yield Compute("client_train", train_cost.train_flops(len(idx)))
            yield Loss(None, len(idx))
        if self.cfg.synchronize:
            yield Compute("client_fisher", train_cost.train_flops(n))
        yield Transfer("upload_model", size + self.fisher_bytes(), up=True)
        return None

    def receive(self, client: Client, upload: object):
        if not self.ctx.timing_only:
            self.uploads[client.client_id] = upload  # type: ignore[assignment]
        yield from ()

    def leave_out(self, client_id: int) -> None:
        """Over-commitment keeps ``client_id`` out: its extractor is not averaged."""
        self.uploads.pop(client_id, None)

    def class_prototypes(self, extractor: nn.Module, client: Client
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(prototypes (classes, dim), held (classes,) bool)``: the client's class means
        with ``extractor``, a row per class (zeros for classes it does not hold)."""
        means, classes = self.class_means(extractor, client)
        table = means.new_zeros(self.ctx.backbone.num_classes, means.shape[1])
        table[classes] = means
        held = torch.zeros(self.ctx.backbone.num_classes, dtype=torch.bool, device=means.device)
        held[classes] = True
        return table, held

    def align_step(self, extractor: nn.Module, optimizer: torch.optim.Optimizer,
                   prototypes: torch.Tensor, idx: torch.Tensor, client_id: int) -> None:
        """One alignment step: pull each sample's representation towards its class
        prototype, per-class mean squared error summed over the batch's classes."""
        x, y = self.steps.train_batch(idx, client_id)
        z = extractor(x)  # (B, dim)
        per_sample = (z - prototypes[y]).pow(2).mean(1)  # (B,)
        counts = torch.bincount(y, minlength=len(prototypes)).to(z.dtype)
        loss = (per_sample / counts[y]).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def fisher_information(self, model: nn.Module, client: Client) -> dict[str, torch.Tensor]:
        """The client's empirical Fisher estimate, mean over its batches of the squared
        gradient of the batch's mean negative log-likelihood, in eval mode.

        Returns:
            ``fisher: trace``: ``{name: tr F}`` (one 0-dim tensor, summed over every
            parameter of the model) for every extractor parameter; ``diagonal``:
            ``{name: F}`` per extractor parameter, of its shape.
        """
        extractor, _ = split_header(model)
        names = {id(p): name for name, p in extractor.named_parameters()}
        params = list(model.parameters())
        batches = self.measurement_batches(client)
        squares = [torch.zeros_like(p) for p in params]
        with eval_mode(model):
            for idx in batches:
                x, y = self.steps.train_batch(idx, None)
                nll = F.cross_entropy(model(x), y)
                grads = torch.autograd.grad(nll, params)
                for acc, g in zip(squares, grads):
                    acc.add_(g.detach().pow(2))
        squares = [s / len(batches) for s in squares]
        if self.cfg.fisher == "trace":
            trace = sum(s.sum() for s in squares)
            return {names[id(p)]: trace for p in params if id(p) in names}
        return {names[id(p)]: s for p, s in zip(params, squares) if id(p) in names}

    def end_round(self, round_: int) -> None:
        """Fisher-weighted (or, without ``synchronize``, sample-weighted) average of the
        extractors that arrived; with none the global extractor stays as it was."""
        ids = sorted(self.uploads)
        if not ids:
            return
        states = [split_header(self.local_models[i])[0].state_dict() for i in ids]
        samples = [len(self.ctx.clients[i].indices) for i in ids]
        if self.cfg.synchronize:
            mean = fisher_average(states, [self.uploads[i] for i in ids], samples)
        else:
            mean = weighted_average(states, samples)
        with torch.no_grad():
            for name, tensor in self.extractor.state_dict().items():
                tensor.copy_(mean[name])
