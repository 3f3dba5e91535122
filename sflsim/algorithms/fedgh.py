"""FedGH: a generalized global header trained on the server from clients' class representations.

Paper: Yi, Wang, Liu, Shi, Yu, "FedGH: Heterogeneous Federated Learning with
Generalized Global Header", ACM MM 2023, pp. 8686-8696 (arXiv 2303.13137). Read:
its abstract and the workflow of its Fig. 1 (steps 1-4 below); where they are
silent, the authors' code (github.com/LipingYi/FedGH,
``FedGH_Codes/experiments/FLHetero/FedGH.py``) and PFLlib's version
(github.com/TsingZ0/PFLlib, ``system/flcore/clients/clientgh.py`` and
``servers/servergh.py``). FedSGA (CIKM 2026, arXiv
2608.15639, §4.1.2, Table 2) uses it as an FL
baseline.

Each client's model is a feature extractor and a header (the last linear layer,
:func:`~sflsim.algorithms.personalized.split_header`); the extractor stays on
the client, the header is shared. A round, per client (every active one):

1. **Header download.** The client receives the global header as the server
   held it when the round began (activity ``download_header``,
   ``header parameters x 4`` bytes) and puts it in place of its own header
   (Fig. 1 step 4, done at the start of the next round, as FedAvg downloads).
2. **Local training** of its whole model, extractor and header, on the
   cross-entropy loss for ``local_epochs`` (Fig. 1 step 1; ``client_train``, the
   whole model's FLOPs per batch, as FedAvg).
3. **Local averaged representations (LARs).** With the trained extractor, in
   eval mode, the mean representation of each class the client holds,
   ``phi_k^c = (1/|D_k^c|) sum_{x in D_k^c} R_k(x)`` (Fig. 1 step 2, the
   representation being the extractor's output, the header's input);
   ``client_representations``, the extractor's forward FLOPs over all the
   client's samples.
4. **Upload** of the ``k`` (LAR, class) pairs of the ``k`` classes it holds
   (``send_representations``, ``k * (dim * wire_bytes + 4)`` bytes: each LAR in
   the scenario's ``wire_dtype``, fp32 by default, and its class id as an int32).
   No sample and no weight leaves the client.
5. **Header training** on the server (Fig. 1 step 3): when the upload arrives,
   the server queues for a slot (``server_header``, the header's training FLOPs
   for ``k`` samples, through the server's queue) and takes one optimizer step
   of the global header on those ``k`` pairs, minimising the cross-entropy of
   ``header(phi_k^c)`` against ``c``. Uploads are served in order of simulated
   arrival, one at a time.

Accuracy is that of each client's extractor followed by the current global
header (the model the client uses once it has the header), averaged over
clients.

Readings and deviations:

* **Homogeneous models.** FedGH's point is model heterogeneity (each client its
  own extractor architecture, one header shape). Every sflsim client runs the
  scenario's one backbone, so that is not exercised here: the extractors differ
  in weights only (their training), and the devices' ``end_layer`` is unused
  (the whole model trains on the device, as FedAvg).
* **Header steps.** The authors' code takes one SGD step per (LAR, class)
  pair, client after client, once every client has trained; PFLlib takes
  shuffled mini-batches over all the round's pairs once all have arrived. Here
  one step per client upload on its ``k`` pairs (mean loss), in order of
  simulated arrival: one server job per upload, so the server trains only on
  what arrived, when it arrived. The optimizer is the scenario's
  (``training.optimizer``), kept across rounds, at ``header_lr`` (default: the
  scenario's learning rate) on the scenario's schedule. (As read, the authors'
  code steps the optimizer of the clients' network after the header's backward
  pass, so its global header stays as initialised; this follows the paper's
  description, in which the server trains the header.)
* **LARs are true class means** over all the client's samples (Fig. 1: "the
  average of representations belonging to the same class"); the authors' code
  averages per-batch class means instead.
* **Header replacement** happens when the next round's download arrives, so a
  dropped client keeps its header until it takes part again; the initial header
  is the backbone's.
* Every client takes part in every round unless ``conditions`` drop it (the
  paper samples a fraction). The clients' optimizers are created anew each round
  with the round's learning rate (as FedAvg); the authors keep one optimizer.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.global_model import model_bytes
from sflsim.algorithms.personalized import (
    ClientWork,
    Compute,
    Loss,
    PersonalizedAlgorithm,
    Transfer,
    split_header,
)
from sflsim.engine import FifoResource, Process
from sflsim.execution.local_steps import make_optimizer
from sflsim.work import BATCH, SERVER

#: bytes of one class id on the wire (int32)
CLASS_ID_BYTES = 4


@register_algorithm("fedgh")
class FedGH(PersonalizedAlgorithm):
    """FedGH: local extractors, a global header trained on the clients' per-class mean
    representations (see the module docstring)."""

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        _, self.header = split_header(self.global_model)  # the global header (server side)
        self.header_lr = ctx.scenario.algorithm.header_lr
        self.header_optimizer = make_optimizer(self.header.parameters(), ctx.scenario.training.optimizer,
                                               self.lr_for_round(1, self.header_lr))
        self.header_lock = FifoResource(self.sim.env)
        #: the header as the server sends it this round (a snapshot: the server trains on)
        self.sent_header: dict[str, torch.Tensor] = {}
        #: this round's arrived uploads: {client_id: (LARs (k, dim), classes (k,))}
        self.uploads: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def representation_bytes(self, classes: int) -> int:
        """Upload bytes of ``classes`` (LAR, class id) pairs."""
        return classes * (self.representation_dim * self.cost_model.wire_bytes + CLASS_ID_BYTES)

    def begin_round(self, round_: int) -> None:
        for group in self.header_optimizer.param_groups:
            group["lr"] = self.lr_for_round(round_, self.header_lr)
        if not self.ctx.timing_only:
            self.sent_header = copy.deepcopy(self.header.state_dict())
        self.uploads = {}

    def client_work(self, client: Client, round_: int) -> ClientWork:
        if self.ctx.timing_only:
            return (yield from self.timed_work(client))
        cid = client.client_id
        train_cost, extractor_cost = self.whole_model_cost(), self.extractor_cost()
        model = self.local_models[cid]
        extractor, header = split_header(model)
        yield Transfer("download_header", model_bytes(header), up=False)
        header.load_state_dict(self.sent_header)
        optimizer = self.round_optimizer(model.parameters(), round_)
        for idx in self.batching.round_batches(client):
            yield Compute("client_train", train_cost.train_flops(len(idx)))
            yield Loss(self.sgd_step(model, optimizer, idx, cid), len(idx))
        yield Compute("client_representations", extractor_cost.infer_flops(len(client.indices)))
        means, classes = self.class_means(extractor, client)
        yield Transfer("send_representations", self.representation_bytes(len(classes)), up=True)
        return means, classes

    def timed_work(self, client: Client) -> ClientWork:
        """:meth:`client_work`'s steps in a timing-only run: the same computes and
        transfers, no torch part; the upload is a shape, ``(k, dim)`` on torch's meta
        device for the ``k`` classes the client holds."""
        train_cost, extractor_cost = self.whole_model_cost(), self.extractor_cost()
        # the global header has the shape of every client's
        yield Transfer("download_header", model_bytes(self.header), up=False)
        for idx in self.batching.round_batches(client):
            yield Compute("client_train", train_cost.train_flops(len(idx)))
            yield Loss(None, len(idx))
        yield Compute("client_representations", extractor_cost.infer_flops(len(client.indices)))
        k = self.held_classes(client)
        yield Transfer("send_representations", self.representation_bytes(k), up=True)
        return self.cost_model.meta_tensor((k, self.representation_dim)), None

    def work_per_round(self) -> dict[str, float]:
        """The clients' local steps and one header step per client at the server."""
        return {BATCH: self.batches_per_round(), SERVER: len(self.ctx.clients)}

    def receive(self, client: Client, upload: object) -> Process:
        """Train the global header on the arrived LARs (one step, through the server queue)."""
        means, classes = upload  # type: ignore[misc]
        if not self.ctx.timing_only:
            self.uploads[client.client_id] = (means, classes)
        yield from self.train_header(client, means, classes)

    def leave_out(self, client_id: int) -> None:
        """Over-commitment keeps ``client_id`` out: its upload is forgotten (the header
        step it made on arrival stays, as a shared server model's steps do)."""
        self.uploads.pop(client_id, None)

    def train_header(self, client: Client, means: torch.Tensor, classes: torch.Tensor) -> Process:
        """One server step of the global header on ``(means (k, dim), classes (k,))``."""
        yield from self.steps.server_step(client, self.header, self.header_optimizer, means, classes,
                                    self.header_lock, activity="server_header")

    def personalized_model(self, client_id: int) -> nn.Module:
        """The client's extractor followed by the global header."""
        extractor, _ = split_header(self.local_models[client_id])
        return nn.Sequential(extractor, self.header)
