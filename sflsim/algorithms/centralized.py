"""Centralized baseline of Hetero-SplitEE (arXiv 2512.09313, §IV-A4).

All clients' training data are gathered at the server and one model with the
paper's architecture (client-side stages, exit head, server-side stages) is
trained on the combined data, for each distinct end layer in the scenario.

Deviations from the paper: the paper trains the centralized model only in the
homogeneous setting (a single end layer); with several end layers we train one
such model per end layer and report each depth's accuracy from its own model.
Training is hierarchical as in the paper's architecture (the exit head trains
stages ``1..l``, the server loss trains the rest on detached activations).
Each client uploads its raw images (1 byte per pixel, plus a 1-byte label) over
its uplink in the first round it takes part in (round 1 unless it drops out); the
server trains only on the samples whose upload has completed. A client that drops
out, or whose upload a round deadline cuts off, uploads again in a later round it
takes part in. While nothing has arrived the server does not train: the models stay
bit-identical and the round takes no simulated time.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sflsim.algorithms.base import SERVER_ID, Algorithm, Client, RunContext, register_algorithm
from sflsim.algorithms.batching import shuffled_batches, timing_batches
from sflsim.algorithms.context import make_scheduler
from sflsim.engine import FifoResource, Process
from sflsim.execution.host_threads import accuracy
from sflsim.execution.local_steps import make_optimizer
from sflsim.work import BATCH


@register_algorithm("centralized")
class Centralized(Algorithm):
    """One model per end layer trained at the server on the pooled data."""

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        cfg = ctx.scenario
        self.steps.schedulers = []
        #: clients whose data upload has completed (the server holds their samples)
        self.delivered: set[int] = set()
        #: clients whose data upload completed in this round
        self.arrived: set[int] = set()
        self.generator = torch.Generator().manual_seed(cfg.stream_seeds.training)
        self.models: dict[int, tuple[nn.Module, nn.Module, nn.Module]] = {}
        self.optimizers: dict[int, torch.optim.Optimizer] = {}
        for end in sorted({c.end_layer for c in ctx.clients}):
            body, exit_head = ctx.backbone.client_model(end), ctx.backbone.exit_head(end)
            server = ctx.backbone.server_model(end)
            self.models[end] = (body, exit_head, server)
            params = [p for m in self.models[end] for p in m.parameters()]
            self.optimizers[end] = make_optimizer(params, cfg.training.optimizer,
                                                  cfg.training.optimizer.lr)
            scheduler = make_scheduler(self.optimizers[end], cfg)
            if scheduler is not None:
                self.steps.schedulers.append(scheduler)
        self.lock = FifoResource(self.sim.env)

    def batches_per_round(self) -> int:
        """Once every client's data has arrived (an upper bound before that)."""
        bs = self.scenario.training.batch_size
        samples = sum(len(c.indices) for c in self.ctx.clients)
        per_model = -(-samples // bs) * self.scenario.training.local_epochs
        return per_model * len(self.models)

    def work_per_round(self) -> dict[str, float]:
        """Whole-model steps only (each counted as a training batch): no client trains."""
        return {BATCH: self.batches_per_round()}

    def delivered_indices(self) -> torch.Tensor:
        """Training-sample indices the server holds: those of the clients whose upload
        completed, in client-id order (shape ``(N,)``, int64; empty before any)."""
        parts = [c.indices for c in self.ctx.clients if c.client_id in self.delivered]
        return torch.as_tensor(np.concatenate(parts) if parts else np.zeros(0, np.int64))

    def exit_models(self, client: Client) -> tuple[nn.Module, nn.Module, nn.Module]:
        """The model of the client's end layer, deployed on the client for inference."""
        return self.models[client.end_layer]

    def server_model_for(self, client: Client) -> nn.Module:
        return self.models[client.end_layer][2]

    def train_round(self, round_: int) -> Process:
        sample_bytes = int(np.prod(self.ctx.backbone.input_shape)) + 1

        def upload(c: Client) -> Process:
            if c.client_id not in self.delivered:
                yield from c.uplink.transfer("upload_data", c.client_id,
                                             sample_bytes * len(c.indices))
                self.delivered.add(c.client_id)  # not reached when the deadline cuts it off
                self.arrived.add(c.client_id)

        self.arrived = set()
        yield from self.protocol.run_clients(upload)
        indices = self.delivered_indices()
        if not len(indices):
            return
        bs = self.scenario.training.batch_size
        for end in self.models:
            for _epoch in range(self.scenario.training.local_epochs):
                if self.ctx.timing_only:  # only the batch sizes matter: no order is drawn
                    batches = timing_batches(len(indices), bs)
                else:
                    batches = shuffled_batches(indices, bs, self.generator)
                for idx in batches:
                    yield from self.central_step(end, idx)

    def leave_out(self, client_id: int) -> None:
        """Over-commitment keeps ``client_id`` out: data it uploaded this round are not
        used, and it uploads them again in a later round it takes part in (data that
        arrived in an earlier round stay at the server)."""
        if client_id in self.arrived:
            self.delivered.discard(client_id)

    def central_step(self, end: int, idx: torch.Tensor) -> Process:
        """Simulate one whole-model step at the server, then run it (timing-only runs:
        only ``len(idx)`` is read)."""
        body, exit_head, server = self.models[end]
        whole = nn.Sequential(body, exit_head)
        cost = self.ctx.costs.cost(f"central:l{end}", whole, self.ctx.backbone.input_shape)
        shape = self.ctx.costs.cost(f"client_body:l{end}", body, self.ctx.backbone.input_shape,
                                    backward=False).output_shape
        server_cost = self.ctx.costs.cost(f"server:l{end}", server, shape)
        flops = cost.train_flops(len(idx)) + server_cost.train_flops(len(idx))
        asked = self.sim.now_s
        with self.ctx.server.request() as slot:
            yield slot
            yield from self.ctx.server.run("central_train", SERVER_ID, flops, asked)
        if self.ctx.timing_only:
            self.ctx.on_batch()
            return
        x, y = self.steps.train_batch(idx, SERVER_ID)
        h = body(x)
        client_loss = self.steps.loss_fn(exit_head(h), y)
        server_loss = self.steps.loss_fn(server(h.detach()), y)
        opt = self.optimizers[end]
        opt.zero_grad(set_to_none=True)
        (client_loss + server_loss).backward()
        opt.step()
        self.steps.record_loss("client", SERVER_ID, client_loss, len(idx))
        self.steps.record_loss("server", SERVER_ID, server_loss, len(idx))
        self.ctx.on_batch()

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        by_end = {end: accuracy(*models, self.steps.test_batches(x, y, batch_size))
                  for end, models in self.models.items()}
        return {c.client_id: by_end[c.end_layer] for c in self.ctx.clients}
