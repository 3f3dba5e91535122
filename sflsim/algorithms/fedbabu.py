"""FedBABU: federated training of the body with a frozen head; personalised evaluation.

Paper: Oh, Kim, Yun, "FedBABU: Toward Enhanced Representation for Federated Image
Classification", ICLR 2022 (openreview.net/forum?id=HuaYQfggn5u): body update,
body aggregation, head fine-tuning for evaluation; details from the authors' code
(github.com/jhoon-oh/FedBABU: ``main_fed.py``, ``models/Update.py``, ``analysis.ipynb``).

The network is split into a body (the extractor) and a head (the classifier, here
the model's last linear layer). Federated training is FedAvg's
(:class:`~sflsim.algorithms.fedavg.FedAvg`) except that the head keeps its random
initialisation and is never updated: clients train the body only (the authors'
``main_fed.py --local_upt_part body``, which gives the head learning rate 0) and the
server averages the body only (``--aggr_part body``). The head is the backbone's own
initialisation: PyTorch's default for ``nn.Linear``, as in the authors' federated
code (``utils/train_utils.get_model``); the orthogonal head initialisation appears only
in their centralised ablation (``main_single.py --results_save orthogonal``).

Evaluation is personalised: each client fine-tunes a copy of the global model on
its own training data for ``finetune_epochs`` local epochs (default 5: the authors'
``--ft_ep`` and ``personalization_epoch = 5`` in ``analysis.ipynb``), and its accuracy
is that of its fine-tuned model; the reported accuracy (``server_accuracy``) is the
mean over clients. ``finetune_epochs: 0`` scores the global model itself; round 0
(the untrained model) is scored after the same fine-tuning. ``finetune: full``
(default) fine-tunes body and head at one learning rate, as the authors' evaluation
code does; ``head`` fine-tunes the head only, on the body frozen in eval mode (its
BatchNorm statistics too), as the abstract phrases it. Fine-tuning uses
``training.optimizer`` at ``finetune_lr`` (default ``training.optimizer.lr``; the
authors fine-tune with SGD, momentum 0.9, at 1e-3, which is where their step-decayed
training rate, 0.1, ends), batches of ``training.batch_size`` and a batch order of its
own: a generator per client seeded from the training stream, fresh at every
evaluation, which also draws the ``dataset.augment`` crops and flips, so evaluation
reads the global model only and changes nothing (neither the client's batch-order
nor its augmentation generator is drawn from).

Test data: the paper tests each client on test data distributed like its training
data (the authors split the test set into the same class shards). sflsim has one
test set, so with ``test_distribution: client`` (default) a client's accuracy is its
fine-tuned model's per-class test accuracy weighted by the client's training label
distribution: the expected accuracy on test data with the client's labels (classes
missing from the evaluated test subset are left out; a client none of whose classes
is in it is scored on the whole subset). ``global`` scores every fine-tuned model on
the test set as it is, like the other algorithms' global models.

Timing: federated rounds are timed as FedAvg's; a client uploads the body only (the
head never changes) and downloads the whole model. The head's weight gradient is not
computed (nor paid for). Personalisation is timed once, in the last round
(``training.rounds``): after the aggregation every client that took part downloads
the final global model and fine-tunes it on its device (activity ``client_finetune``),
and those fine-tuned models are the ones evaluated. Evaluations after earlier rounds
(``evaluation.every_rounds``) measure what personalising at that point would give;
their fine-tuning is not simulated, so the timeline does not depend on how often a
run evaluates. A client that dropped out of the last round, or whose personalisation
the round deadline cuts off (it is then marked late), is evaluated after the same
fine-tuning, untimed.

Deviations from the paper: every client takes part in every round (the paper samples
a fraction); aggregation weighs clients by sample count (the authors' code takes the
plain mean; their clients hold equal amounts of data); the reading of "each client's
test data" above.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sflsim.algorithms.aggregation import average_into
from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.batching import shuffled_batches
from sflsim.algorithms.fedavg import FedAvg
from sflsim.algorithms.global_model import model_bytes
from sflsim.algorithms.personal_scores import PersonalScores, class_counts
from sflsim.engine import Process
from sflsim.execution.host_threads import eval_mode, run_ahead
from sflsim.execution.local_steps import make_optimizer
from sflsim.models.cost import PieceCost


def last_linear(model: nn.Module) -> tuple[str, nn.Linear]:
    """The model's last ``nn.Linear`` and its name in ``model.named_modules()``.

    Raises:
        ValueError: the model has no linear layer.
    """
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError("FedBABU needs a model whose head ends in a linear layer")
    return linears[-1]


@register_algorithm("fedbabu")
class FedBABU(FedAvg):
    """FedAvg on the body with a frozen head; accuracy after per-client fine-tuning."""

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        name, head = last_linear(self.global_model)
        head.requires_grad_(False)  # copies inherit it: no gradient, no update, no cost
        self.head_keys = {f"{name}.{k}" for k in head.state_dict()}
        self.body_keys = [k for k in self.global_model.state_dict() if k not in self.head_keys]
        self.head_params = sum(p.numel() for p in head.parameters())
        #: client id -> its fine-tuned model of the last round (timed personalisation)
        self.personalized: dict[int, nn.Module] = {}
        self._finetune_cost: PieceCost | None = None
        #: each evaluation's two scores per client (own test distribution, global)
        self.scores = PersonalScores(ctx.scenario.algorithm.test_distribution)

    # ----- federated training: the body only ------------------------------------------
    def upload_bytes(self) -> int:
        """The body: the head never changes, so it is not sent back."""
        return model_bytes(self.global_model) - model_bytes(last_linear(self.global_model)[1])

    def activated_params(self, client_id: int) -> int:
        """Parameters trained on the device in federated rounds: the body's."""
        return super().activated_params(client_id) - self.head_params

    def end_round(self, round_: int) -> None:
        """Sample-weighted mean of the uploaded bodies (FedAvg's, the head left out)."""
        ids = sorted(self.uploads)
        if ids:
            average_into([self.uploads[i] for i in ids],
                         [len(self.ctx.clients[i].indices) for i in ids],
                         target=self.global_model, keys=self.body_keys)
        self.uploads = {}

    def train_round(self, round_: int) -> Process:
        """FedAvg's round; in the last round, then the aggregation and every active
        client's timed personalisation."""
        self.personalized = {}
        self.scores.clear()
        yield from super().train_round(round_)
        if round_ < self.scenario.training.rounds:
            return
        if not self.ctx.timing_only:  # personalisation starts from the final global model
            self.end_round(round_)
        active = self.protocol.active_clients()
        tuned: dict[int, nn.Module] = {}
        if (self.ctx.execution.threads > 1 and not self.protocol.interruptible
                and not self.ctx.timing_only):
            jobs = [lambda _done, c=c: self.fine_tune(c) for c in active]
            tuned = dict(zip([c.client_id for c in active],
                             run_ahead(jobs, self.ctx.execution.threads)))
        yield from self.protocol.run_clients(lambda c: self.personalize(c, tuned.get(c.client_id)))

    # ----- personalisation ------------------------------------------------------------
    def personalize(self, client: Client, tuned: nn.Module | None = None) -> Process:
        """Download the global model and fine-tune it on the device (with ``tuned``, from
        :meth:`fine_tune` ahead, or in timing-only runs, only the times are simulated)."""
        cid = client.client_id
        yield from client.downlink.transfer("download_model", cid, model_bytes(self.global_model))
        flops = self.finetune_cost().train_flops(1)
        for batch in self.finetune_batch_sizes(client):
            yield from self.sim.compute(client.actor, "client_finetune", cid, flops * batch,
                                        client.flops_per_s)
        if not self.ctx.timing_only:
            self.personalized[cid] = tuned if tuned is not None else self.fine_tune(client)

    def finetune_cost(self) -> PieceCost:
        """Per-sample cost of a fine-tuning step: the whole model, or (``head``) a forward
        pass and the head's backward pass."""
        if self._finetune_cost is None:
            self._finetune_cost = self.ctx.costs.cost(
                f"finetune_{self.scenario.algorithm.finetune}", self.finetune_model(),
                self.ctx.backbone.input_shape)
        return self._finetune_cost

    def finetune_batch_sizes(self, client: Client) -> list[int]:
        """Batch sizes of the fine-tuning steps: ``finetune_epochs`` passes over the data."""
        n, bs = len(client.indices), self.scenario.training.batch_size
        return [min(bs, n - i) for i in range(0, n, bs)] * self.scenario.algorithm.finetune_epochs

    def finetune_model(self) -> nn.Module:
        """A copy of the global model with what fine-tuning trains set to require grad."""
        model = self.global_copy()
        head = last_linear(model)[1]
        model.requires_grad_(self.scenario.algorithm.finetune == "full")
        head.requires_grad_(True)
        return model

    def fine_tune(self, client: Client) -> nn.Module:
        """The global model fine-tuned on ``client``'s training data (a new module)."""
        cfg, training = self.scenario.algorithm, self.scenario.training
        model = self.finetune_model()
        optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad],
                                   training.optimizer, cfg.finetune_lr or training.optimizer.lr)
        seed = np.random.SeedSequence(self.ctx.seeds.get("batches", 0),
                                      spawn_key=(1, client.client_id)).generate_state(1)[0]
        generator = torch.Generator().manual_seed(int(seed))
        indices = torch.as_tensor(client.indices)
        model.train(cfg.finetune == "full")  # head only: the body runs as in inference
        with torch.inference_mode(False), torch.enable_grad():
            for _ in range(cfg.finetune_epochs):
                for idx in shuffled_batches(indices, training.batch_size, generator):
                    x, y = self.steps.train_batch(idx, client.client_id, generator=generator)
                    loss = self.steps.loss_fn(model(x), y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
        return model

    # ----- evaluation -----------------------------------------------------------------
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Each client's accuracy after personalisation (:meth:`fine_tune`, or the last
        round's timed one), scored by :meth:`score`; no exit heads (NaN). With
        ``training.parallel_clients`` > 1 clients are fine-tuned on that many threads."""
        clients = self.ctx.clients

        def job(client: Client):
            def run(_done) -> float:
                model = self.personalized.get(client.client_id)
                if model is None:
                    model = self.fine_tune(client)
                return self.score(model, client, x, y, batch_size)
            return run

        accs = run_ahead([job(c) for c in clients], self.ctx.execution.threads)
        return {c.client_id: (acc, float("nan")) for c, acc in zip(clients, accs)}

    def score(self, model: nn.Module, client: Client, x: torch.Tensor, y: torch.Tensor,
              batch_size: int) -> float:
        """Accuracy in [0, 1] of ``model`` on ``x`` ``(N, C, H, W)``, ``y`` ``(N,)``: per-class
        accuracies weighted by ``client``'s training labels (``test_distribution:
        client``) or plain (``global``); both are kept for the clients table
        (:mod:`~sflsim.algorithms.personal_scores`)."""
        with eval_mode(model):
            correct, total = class_counts(model, self.steps.test_batches(x, y, batch_size),
                                          self.ctx.backbone.num_classes)
        labels = self.ctx.data.y_train[torch.as_tensor(client.indices, device=y.device)]
        return self.scores.keep(client.client_id, correct, total, labels)

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """The round's two scores per client (``accuracy_own_distribution``,
        ``accuracy_global``; NaN in rounds without evaluation)."""
        return self.scores.columns(c.client_id for c in self.ctx.clients)
