"""What personalised FL baselines share (FedGH, FedAS): a model per client, kept across rounds.

Every client holds its own whole model (stages + output layer), initialised as
the global model and never replaced whole; what travels and what is shared is
the algorithm's business. The model is read as a **feature extractor** (the
stages and the output layer up to its last ``nn.Linear``) followed by a
**header** (that ``nn.Linear``): see :func:`split_header`.

A client's round is written once, as its *work*: a generator (the
:meth:`PersonalizedAlgorithm.client_work` hook) that yields a :class:`Compute`
before each piece of device work and then does the torch part of it, a
:class:`Transfer` before using what it downloads or after preparing what it
uploads, and a :class:`Loss` after each training step; it returns what arrives
at the server. The client process (:meth:`PersonalizedAlgorithm.run_client`)
turns each yielded step into simulated time on the client's device and links,
so every torch step runs at the simulated instant its work completes
(sflsim's main invariant); when the upload has arrived, :meth:`PersonalizedAlgorithm.receive` (a hook)
does the server's part. A client cut off by a round deadline keeps what it
trained before the cut (the model is its own), and its upload never arrives.

``training.parallel_clients`` > 1: a client's work reads only its own model,
batches and generator and what the server sent at the start of the round, so
the works of all active clients run ahead of the simulated round, several at
once (:func:`~sflsim.execution.host_threads.run_ahead`); the client processes
then replay the recorded steps. The torch arithmetic is the same, so the
results equal the serial run's bit for bit (one torch thread each). Ignored with
a round deadline (work could run past it), as for FedAvg.

Accuracy: each client's personalised model (:meth:`personalized_model`) on the
run's test set reweighted to the client's own label distribution, as the papers
test (``test_distribution: client``, default), or on the test set as it is
(``global``), averaged over clients by the runner (``server_accuracy``;
``client_accuracy`` is NaN: no exit heads). Both scores of every client go to the
clients table in evaluated rounds (:mod:`~sflsim.algorithms.personal_scores`).
"""

from __future__ import annotations

import copy
from collections.abc import Generator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from sflsim.algorithms.base import Client, RunContext
from sflsim.algorithms.global_model import GlobalModelAlgorithm
from sflsim.algorithms.personal_scores import PersonalScores, class_counts
from sflsim.engine import Process
from sflsim.execution.host_threads import eval_mode, host_threads, run_ahead
from sflsim.models.cost import PieceCost


@dataclass(frozen=True)
class Compute:
    """Device work of ``flops`` FLOPs, recorded as ``activity``; its torch part follows."""

    activity: str
    flops: float


@dataclass(frozen=True)
class Transfer:
    """``payload_bytes`` over the client's uplink (``up``) or downlink, as ``activity``."""

    activity: str
    payload_bytes: int
    up: bool


@dataclass(frozen=True)
class Loss:
    """The loss of a training step of ``batch`` samples (for ``client_loss`` and progress);
    ``value`` None in timing-only runs (no step ran: progress only)."""

    value: torch.Tensor | None
    batch: int


Step = Compute | Transfer | Loss
#: a client's work in a round: yields steps, returns what reaches the server
ClientWork = Generator[Step, None, object]


def split_header(model: nn.Sequential) -> tuple[nn.Sequential, nn.Linear]:
    """(feature extractor, header) of ``stages + head``, sharing ``model``'s modules.

    The header is the last ``nn.Linear`` of the output layer; the extractor is
    everything before it, so ``header(extractor(x)) == model(x)`` and the extractor's
    output is the representation ``(B, dim)`` the header classifies (ResNets: the
    pooled features; the small CNN: the flattened feature map; ViT: the normalised
    CLS token).

    Raises:
        ValueError: the output layer does not end in an ``nn.Linear``.
    """
    head = model[-1]
    if isinstance(head, nn.Linear):
        return nn.Sequential(*model[:-1]), head
    if isinstance(head, nn.Sequential) and isinstance(head[-1], nn.Linear):
        return nn.Sequential(*model[:-1], *head[:-1]), head[-1]
    raise ValueError(f"the output layer {head!r} does not end in nn.Linear; no header to split off")


class PersonalizedAlgorithm(GlobalModelAlgorithm):
    """Personalised FL on sflsim's clock: a whole model per client, kept across rounds.

    ``self.global_model`` is the server's model (what of it is used is the
    subclass's business); ``self.local_models[client_id]`` each client's own.
    """

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        #: none in timing-only runs: a client's work then only yields its steps
        self.local_models = {} if ctx.timing_only else {
            c.client_id: copy.deepcopy(self.global_model) for c in ctx.clients}
        _, header = split_header(self.global_model)  # refuse a model without a header now
        #: width of the representation the header classifies
        self.representation_dim = header.in_features
        #: each evaluation's two scores per client (own test distribution, global)
        self.scores = PersonalScores(ctx.scenario.algorithm.test_distribution)

    # ----- hooks -----------------------------------------------------------------
    def begin_round(self, round_: int) -> None:
        """Before any client work of ``round_`` (main thread): fix what the server sends."""

    def client_work(self, client: Client, round_: int) -> ClientWork:
        """The client's round as steps (see the module docstring); returns its upload. In
        timing-only runs (``self.ctx.timing_only``) the same steps with no torch part
        (losses None), sized from the global model and the client's labels."""
        raise NotImplementedError

    def receive(self, client: Client, upload: object) -> Process:
        """The server's part once ``client``'s upload (the work's return value) has arrived."""
        yield from ()

    def personalized_model(self, client_id: int) -> nn.Module:
        """The model client ``client_id`` would use now: ``(B, C, H, W) -> (B, classes)``."""
        return self.local_models[client_id]

    def server_model_for(self, client: Client) -> nn.Module:
        """The client's personalised model (what is evaluated and checked for divergence)."""
        return self.personalized_model(client.client_id)

    # ----- the round -----------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        self.cost_model.cut_layers = {c.client_id: len(self.global_model) for c in self.ctx.clients}
        self.scores.clear()
        self.begin_round(round_)
        self.whole_model_cost(), self.extractor_cost()  # counted here, not in a host thread
        ahead = self.ctx.execution.ahead == "threads" and not self.protocol.interruptible
        done = self.work_ahead(round_) if ahead else {}
        yield from self.protocol.run_clients(lambda c: self.run_client(c, round_, done.get(c.client_id)))

    def work_ahead(self, round_: int) -> dict[int, tuple[list[Step], object]]:
        """Every active client's work of ``round_``, run before the round is simulated
        (``training.parallel_clients`` threads); ``{client_id: (steps, upload)}``."""
        active = self.protocol.active_clients()

        def job(client: Client):
            def run(step_done) -> tuple[list[Step], object]:
                steps: list[Step] = []
                work = self.client_work(client, round_)
                while True:
                    try:
                        step = next(work)
                    except StopIteration as stop:
                        return steps, stop.value
                    steps.append(step)
                    if isinstance(step, Loss):
                        step_done()
            return run

        results = run_ahead([job(c) for c in active], self.ctx.execution.threads,
                            self.ctx.on_batch)
        return {c.client_id: result for c, result in zip(active, results)}

    def run_client(self, client: Client, round_: int,
                   done: tuple[list[Step], object] | None = None) -> Process:
        """The client's round in simulated time, then the server's part (:meth:`receive`);
        with ``done`` (from :meth:`work_ahead`) the torch work is already done."""
        if done is None:
            work = self.client_work(client, round_)
            while True:
                try:
                    step = next(work)  # runs the torch part of the step before
                except StopIteration as stop:
                    upload = stop.value
                    break
                yield from self.perform(client, step, live=True)
        else:
            steps, upload = done
            for step in steps:
                yield from self.perform(client, step, live=False)
        yield from self.receive(client, upload)

    def perform(self, client: Client, step: Step, *, live: bool) -> Process:
        """Simulate one step of ``client``'s work (``live``: its torch part runs next)."""
        cid = client.client_id
        if isinstance(step, Compute):
            yield from self.sim.compute(client.actor, step.activity, cid, step.flops,
                                        client.flops_per_s)
        elif isinstance(step, Transfer):
            link = client.uplink if step.up else client.downlink
            yield from link.transfer(step.activity, cid, step.payload_bytes)
        elif step.value is None:  # timing only: no step ran
            self.ctx.on_batch()
        else:
            self.steps.record_loss("client", cid, step.value, step.batch)
            if live:  # trained ahead: reported to the progress bar as it trained
                self.ctx.on_batch()

    # ----- shared pieces -------------------------------------------------------------
    def whole_model_cost(self) -> PieceCost:
        """Per-sample FLOPs of the whole model (forward + backward)."""
        return self.ctx.costs.cost("whole_model", self.global_model, self.ctx.backbone.input_shape)

    def extractor_cost(self) -> PieceCost:
        """Per-sample FLOPs of the feature extractor (forward + backward)."""
        return self.ctx.costs.cost("feature_extractor", split_header(self.global_model)[0],
                                   self.ctx.backbone.input_shape)

    def measurement_batches(self, client: Client) -> list[torch.Tensor]:
        """The client's samples in index order, in batches of ``batch_size`` (no generator
        draw): for passes that train nothing, whose result does not depend on order."""
        idx = torch.as_tensor(client.indices)
        return list(torch.split(idx, self.scenario.training.batch_size))

    def held_classes(self, client: Client) -> int:
        """How many classes ``client``'s training samples hold (the rows of
        :meth:`class_means`), from the labels alone."""
        labels = self.ctx.data.y_train[torch.as_tensor(client.indices)]
        return int((torch.bincount(labels, minlength=self.ctx.backbone.num_classes) > 0).sum())

    @torch.no_grad()
    def class_means(self, extractor: nn.Module, client: Client) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-class mean representation of ``client``'s training samples, in eval mode.

        Returns:
            means ``(k, dim)`` and their classes ``(k,)`` (int64, ascending), for the
            ``k`` classes the client holds.
        """
        classes = self.ctx.backbone.num_classes
        sums, counts = None, None
        with eval_mode(extractor):
            for idx in self.measurement_batches(client):
                x, y = self.steps.train_batch(idx, None)
                z = extractor(x)  # (B, dim)
                onehot = F.one_hot(y, classes).to(z.dtype)  # (B, classes)
                part = onehot.T @ z  # (classes, dim): a matmul, deterministic on every device
                sums = part if sums is None else sums + part
                counts = onehot.sum(0) if counts is None else counts + onehot.sum(0)
        held = torch.nonzero(counts).flatten()
        return sums[held] / counts[held, None], held

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Accuracy of every client's personalised model on the test set ``x`` ``(N, C, H, W)``
        as ``test_distribution`` says (:mod:`~sflsim.algorithms.personal_scores`; both
        scores are kept for the clients table), exit-head accuracy NaN, in eval mode
        (every module's mode restored); with ``training.parallel_clients`` > 1, clients
        on that many host threads."""
        ids = [c.client_id for c in self.ctx.clients]
        models = {cid: self.personalized_model(cid) for cid in ids}
        classes = self.ctx.backbone.num_classes
        labels = {c.client_id: self.ctx.data.y_train[torch.as_tensor(c.indices)]
                  for c in self.ctx.clients}

        def score(cid: int) -> float:
            correct, total = class_counts(models[cid], self.steps.test_batches(x, y, batch_size),
                                          classes)  # inference mode: per thread, inside
            return self.scores.keep(cid, correct, total, labels[cid])

        workers = min(self.ctx.execution.threads, len(ids))
        with eval_mode(*models.values()), host_threads(workers) as pool:
            accs = list(pool.map(score, ids) if pool else map(score, ids))
        return {cid: (acc, float("nan")) for cid, acc in zip(ids, accs)}

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """The round's two scores per client (``accuracy_own_distribution``,
        ``accuracy_global``; NaN in rounds without evaluation)."""
        return self.scores.columns(c.client_id for c in self.ctx.clients)
