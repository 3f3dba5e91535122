"""FedAvg; the global-model machinery it shares with SplitFed is
:mod:`sflsim.algorithms.global_model`.

Paper: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017, Alg. 1 (FederatedAveraging).

Each round every client downloads the global model, trains the whole model on
its device for ``local_epochs`` passes over its data, and uploads it; the
server averages the uploads weighted by sample count, BatchNorm running
statistics included (:mod:`sflsim.algorithms.aggregation`).

Deviations from the paper: every client takes part in every round (C = 1) unless
``conditions.client_drop_prob`` drops it (then it is left out of the average);
the optimizer (and its state) is created anew on the device each round, with
the learning rate of the round's schedule. Model transfers count 4 bytes per
parameter and buffer element (fp32), whatever ``wire_dtype`` says for
activations.

FedProx, FedBABU and FedMut (:mod:`~sflsim.algorithms.fedprox`,
:mod:`~sflsim.algorithms.fedbabu`, :mod:`~sflsim.algorithms.fedmut`) subclass
:class:`FedAvg` through its hooks: the model a client starts from
(:meth:`FedAvg.local_model`), what trains (:meth:`FedAvg.local_optimizer`), a
proximal term added to the local objective (:meth:`FedAvg.proximal`), the cost of a step and the
bytes moved, so every one is timed and measured as FedAvg is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from sflsim.algorithms.aggregation import average_into
from sflsim.algorithms.base import Client, register_algorithm
from sflsim.algorithms.global_model import GlobalModelAlgorithm, model_bytes
from sflsim.engine import Link, Process, wait_until
from sflsim.execution.booked import BookedRounds, book_one_by_one, bookable
from sflsim.execution.host_threads import run_ahead, step_batched
from sflsim.execution.ray_workers import RayClientWorkers
from sflsim.execution.workers import ClientWorkers, Job, client_workers, running_workers
from sflsim.models.cost import PieceCost
from sflsim.work import TEST

__all__ = ["FedAvg"]


@register_algorithm("fedavg")
class FedAvg(GlobalModelAlgorithm):
    """FedAvg: the whole model trains on every device; uploads averaged by sample count.

    How a round executes follows what the algorithm's configuration declares
    (:data:`~sflsim.config.algorithms.CAPABILITIES`), never which methods a subclass
    overrides: ``array_booking`` (timing-only rounds as arrays, :meth:`book_round`),
    ``fuse_clients`` (:meth:`train_fused`), ``parallel_clients`` and
    ``parallel_processes`` (:meth:`train_ahead`, :meth:`start_in_workers`). A subclass
    that declares none runs client by client, in a SimPy process each.
    """

    #: Whether each client's local model starts as a copy of the global model (what
    #: worker processes are sent); False for an algorithm with local models of its own
    #: (FedMut's mutated copies, :meth:`local_model`).
    local_models_from_global: bool = True
    #: whether every client's links are its own (no access point shared); worked out once
    _own_links: bool | None = None

    def train_round(self, round_: int) -> Process:
        self.cost_model.cut_layers = dict.fromkeys([c.client_id for c in self.ctx.clients],
                                                   len(self.global_model))
        self.uploads: dict[int, nn.Module] = {}
        execution = self.ctx.execution
        if self.books_rounds():
            yield from self.book_round()
            return
        ahead = None if self.protocol.interruptible else execution.ahead
        finish = None
        if ahead == "fused":
            trained = self.train_fused(round_)
        elif ahead in ("processes", "ray"):
            trained, finish = self.start_in_workers(round_)
        elif ahead is not None:
            trained = self.train_ahead(round_)
        else:
            trained = {}
        yield from self.protocol.run_clients(lambda c: self.train_client(c, round_, trained.get(c.client_id)))
        if finish is not None:
            finish()

    def books_rounds(self) -> bool:
        """Whether :meth:`book_round` gives this round's timeline: the runner chose array
        booking (:class:`~sflsim.execution.strategy.Execution`: a timing-only run of an
        algorithm that declares ``array_booking``, whose client's round is
        :meth:`train_client`'s), nothing can cut the round short
        (:attr:`~sflsim.algorithms.base.Algorithm.interruptible`), and every client's link
        is its own in both directions (no access point shared)."""
        if self._own_links is None:  # the links do not change during a run
            self._own_links = all(type(c.uplink) is Link and type(c.downlink) is Link
                                  for c in self.ctx.clients)
        return (self.ctx.execution.array_booking and not self.protocol.interruptible
                and self._own_links)

    def book_round(self) -> Process:
        """A timing-only round without a SimPy process per client: each client's
        download, local steps and upload are booked one after the other on its own
        links and device (:meth:`~sflsim.engine.Link.book`, :meth:`Simulation.record`),
        which nothing else uses, and one timeout ends the round at the last upload's
        arrival. The same times, bytes and FLOPs as :meth:`train_client` in its
        processes (the trace's rows are put in order of completion when the round ends,
        :meth:`sflsim.engine.Trace.sort_from`): a test keeps the two timelines equal.
        """
        env, sim = self.sim.env, self.sim
        now = env.now
        cost, down, up = self.local_cost(), self.download_bytes(), self.upload_bytes()
        slowdowns = self.protocol.conditions.slowdowns
        booked = self._booked_rounds()
        if booked is not None:
            flops_of = {n: cost.train_flops(n) for n in sorted(booked.batch_sizes())}
            active, slowdown = booked.conditions(self.protocol.conditions.dropped, slowdowns)
            last = booked.book(sim, now, active, slowdown, flops_of, down, up, self.ctx.on_batch)
        else:
            cond = self.protocol.conditions
            last = book_one_by_one(sim, self.ctx.clients, cond.dropped, cond.slowdowns,
                                   self.batching.round_batches, self.ctx.on_batch, now, cost,
                                   down, up)
        yield from wait_until(env, last)

    def _booked_rounds(self) -> BookedRounds | None:
        """The clients as arrays for :meth:`book_round` (:mod:`sflsim.execution.booked`),
        made on first use; None when a link is not :func:`~sflsim.execution.booked.bookable`
        (a bandwidth trace): the round is booked client by client."""
        if not hasattr(self, "_booked"):
            clients = self.ctx.clients
            self._booked = BookedRounds(clients, [self.batching.round_batch_sizes(c) for c in clients]) \
                if bookable(clients) else None
        return self._booked

    def train_fused(self, round_: int) -> dict[int, tuple[list[torch.Tensor], nn.Module, list[torch.Tensor]]]:
        """``training.fuse_clients``: train every active client's local model before the
        round is simulated, the clients' step ``j`` as one batched step
        (:class:`sflsim.models.fused.FusedClients`: grouped convolutions, BatchNorm per
        channel block, batched linear layers; one optimizer over the stacked weights).

        The clients whose batch ``j`` has the same size train together; a client alone
        at its size trains by itself (:meth:`sgd_step`). Equal to :meth:`train_ahead` up
        to float rounding (grouped and plain convolutions sum in different orders:
        ~1e-6 relative in float32, then amplified by training), never in the simulated
        timeline, which does not depend on the trained values. The local objective
        may add :meth:`proximal`'s term (FedProx), and parameters that do not train
        (FedBABU's head) stay as they are, as step by step.

        Returns:
            as :meth:`train_ahead`.
        """
        from sflsim.models.fused import FusedClients

        proximal = self.proximal()
        active = self.protocol.active_clients()
        plans = {c.client_id: list(self.batching.round_batches(c)) for c in active}
        local = {c.client_id: self.local_model(c.client_id) for c in active}
        optimizer = {cid: self.local_optimizer(m, round_) for cid, m in local.items()}
        losses: dict[int, list[torch.Tensor]] = {cid: [] for cid in local}

        def record(cid: int, _: torch.Tensor | None, loss: torch.Tensor) -> None:
            losses[cid].append(loss)
            self.ctx.on_batch()

        def fuse(ids: tuple[int, ...]) -> FusedClients:
            anchors = None if proximal is None else (
                proximal[0], [proximal[1][:-1]] * len(ids), [proximal[1][-1]] * len(ids))
            return FusedClients([local[i][:-1] for i in ids], [local[i][-1] for i in ids],
                                [optimizer[i] for i in ids], proximal=anchors)

        step_batched(plans, fuse,
                     self.steps.train_batch, record,
                     alone=lambda cid, idx: (None, self.sgd_step(local[cid], optimizer[cid], idx, cid)))
        return {cid: (plans[cid], local[cid], losses[cid]) for cid in local}

    def train_ahead(self, round_: int) -> dict[int, tuple[list[torch.Tensor], nn.Module, list[torch.Tensor]]]:
        """``training.parallel_clients`` on host threads: train every active client's local
        model before the round is simulated, several clients at once
        (:func:`~sflsim.execution.host_threads.run_ahead`).

        Exact: a FedAvg client's update depends only on the global model and its own
        batches, drawn here from its own generator in the same order as step by step.
        With ``training.parallel_backend: processes`` or ``ray`` the clients train in
        worker processes or on Ray actors instead (:meth:`start_in_workers`).

        Returns:
            ``{client_id: (index batches, trained local model, per-batch losses)}``.
        """
        active = self.protocol.active_clients()
        plans = [list(self.batching.round_batches(c)) for c in active]

        def job(client_id: int, batches: list[torch.Tensor]):
            def train(step_done) -> tuple[list[torch.Tensor], nn.Module, list[torch.Tensor]]:
                local = self.local_model(client_id)
                optimizer = self.local_optimizer(local, round_)
                losses = []
                for idx in batches:
                    losses.append(self.sgd_step(local, optimizer, idx, client_id))
                    step_done()
                return batches, local, losses
            return train

        results = run_ahead([job(c.client_id, batches) for c, batches in zip(active, plans)],
                            self.ctx.execution.threads, self.ctx.on_batch)
        return {c.client_id: result for c, result in zip(active, results)}

    def start_in_workers(self, round_: int
                         ) -> tuple[dict[int, tuple[list[torch.Tensor], None, None]], Callable[[], None]]:
        """Start this round's active clients in ``training.parallel_clients`` worker
        processes (:class:`~sflsim.execution.workers.ClientWorkers`) or Ray actors
        (:class:`~sflsim.execution.ray_workers.RayClientWorkers`), started on the first
        round that needs them, stopped when the run ends: each client starts from
        :meth:`local_model` (made when its job is sent), trains with
        :meth:`local_optimizer`'s kind and learning rate and :meth:`proximal`'s term, on
        the batches and augmentation draws a serial run gives it; bit-identical to a
        serial run with one torch thread.

        The round is simulated while they train (:meth:`train_client` with
        ``(batches, None, None)``: each step's loss is kept a place in the run's losses,
        in the order a serial run records them, and its upload marked); ``finish()``,
        called once the round's processes have ended, waits for the workers, fills in the
        losses (checked as :meth:`~sflsim.algorithms.steps.TorchSteps.record_loss` checks
        them) and hands over the trained models as the uploads.

        Returns:
            ``{client_id: (index batches, None, None)}`` and ``finish``.

        Raises:
            ConfigError: the host is not Linux (processes); Ray is not installed, cannot be
                reached or lacks the CPUs or GPUs asked for (ray).
            RuntimeError: (from ``finish``) a worker process died; a Ray actor died more
                often than :data:`~sflsim.execution.ray_workers.RETRIES` allows.
            DivergenceError: (from ``finish``) a loss is NaN or infinite.
        """
        active = self.protocol.active_clients()
        plans = [list(self.batching.round_batches(c)) for c in active]
        pool = self.worker_pool()
        proximal = self.proximal()
        if proximal is not None:
            pool.set_anchor(proximal[1])
        from_global = self.local_models_from_global  # FedMut's are its own
        if from_global:
            pool.set_base(self.global_model)
        jobs = [Job(c.client_id, batches, self.steps.augment_generators.get(c.client_id),
                    None if from_global else lambda cid=c.client_id: self.local_model(cid))
                for c, batches in zip(active, plans)]
        results = pool.submit(jobs, self.lr_for_round(round_),
                              None if proximal is None else proximal[0], self.ctx.on_batch,
                              blank=self.blank_copy)
        self.loss_places: dict[int, list[int]] = {c.client_id: [] for c in active}

        def finish() -> None:
            trained = results()
            losses = sorted(pair for c, (_, values) in zip(active, trained)  # as recorded:
                            for pair in zip(self.loss_places.pop(c.client_id), values))
            for place, loss in losses:  # the first to diverge is the serial run's
                self.steps.fill_loss(place, loss)
            for c, (local, _) in zip(active, trained):
                cid = c.client_id
                if cid in self.uploads:
                    self.uploads[cid] = local
                else:  # not uploaded (cannot happen in a round nothing cuts short)
                    self.release_copies([local])

        return {c.client_id: (batches, None, None) for c, batches in zip(active, plans)}, finish

    def worker_pool(self) -> ClientWorkers | RayClientWorkers:
        """The run's client worker processes (``training.parallel_backend: processes``),
        forked the first time a round trains in them, or its Ray actors (``ray``), started
        then."""
        training, sim = self.scenario.training, self.sim
        args = (training.parallel_clients, self.global_model, self.ctx.data,
                self.scenario.dataset.augment, self.steps.loss_fn, training.optimizer)
        if self.ctx.execution.ahead == "ray":
            return client_workers(self, lambda: RayClientWorkers(
                *args, address=training.ray_address, cpus_per_actor=training.ray_cpus_per_actor,
                gpus_per_actor=training.ray_gpus_per_actor, round_of=lambda: sim.round))
        return client_workers(self, lambda: ClientWorkers(*args))

    def evaluate(self, x, y: torch.Tensor, batch_size: int) -> dict[int, tuple[float, float]]:
        """:meth:`GlobalModelAlgorithm.evaluate`; once the rounds train in worker processes
        or Ray actors (:meth:`start_in_workers`), and with the test images in memory (not files on
        disk), the test batches are spread over those workers
        (:meth:`ClientWorkers.evaluate`: the counts of a serial evaluation with one torch
        thread)."""
        pool = running_workers(self)
        if pool is None or not isinstance(x, torch.Tensor):
            return super().evaluate(x, y, batch_size)
        total = pool.evaluate(self.global_model, x, y, batch_size, lambda: self.ctx.on_batch(TEST))
        return {c.client_id: (total / len(y), float("nan")) for c in self.ctx.clients}

    # ----- hooks for the FedAvg family (FedProx, FedBABU, FedMut) ---------------------
    def local_model(self, client_id: int) -> nn.Module:
        """The model client ``client_id`` downloads and starts the round from: a copy of
        the global model (:meth:`global_copy`)."""
        return self.global_copy()

    def local_optimizer(self, local: nn.Module, round_: int) -> torch.optim.Optimizer:
        """The round's optimizer over the parameters of ``local`` that train (all of
        them in FedAvg)."""
        return self.round_optimizer([p for p in local.parameters() if p.requires_grad], round_)

    def local_cost(self) -> PieceCost:
        """Per-sample cost of one local training step on the whole model (a parameter
        that does not train has no weight gradient to pay for)."""
        return self.ctx.costs.cost("whole_model", self.global_model, self.ctx.backbone.input_shape)

    def download_bytes(self) -> int:
        """Bytes a client downloads at the start of a round: the whole model."""
        return model_bytes(self.global_model)

    def upload_bytes(self) -> int:
        """Bytes a client uploads at the end of a round: the whole model."""
        return model_bytes(self.global_model)

    def train_client(self, client: Client, round_: int,
                     trained: tuple[list[torch.Tensor], nn.Module, list[torch.Tensor]] | None = None
                     ) -> Process:
        """Download, local epochs, upload; with ``trained`` (from :meth:`train_ahead`)
        the steps are already done and only their times and losses are recorded; with
        ``(batches, None, None)`` (:meth:`start_in_workers`) they are being done in the
        workers, and their losses' places are kept. In
        timing-only runs no local model is made: only the times are simulated."""
        cid, timing = client.client_id, self.ctx.timing_only
        yield from client.downlink.transfer("download_model", cid, self.download_bytes())
        cost = self.local_cost()
        if timing:
            batches = self.batching.round_batches(client)
        elif trained is None:
            local = self.local_model(cid)
            optimizer = self.local_optimizer(local, round_)
            batches = self.batching.round_batches(client)
        else:
            batches, local, losses = trained
        for i, idx in enumerate(batches):
            yield from self.sim.compute(client.actor, "client_train", cid,
                                        cost.train_flops(len(idx)), client.flops_per_s)
            if timing:
                self.ctx.on_batch()
                continue
            if trained is None:
                loss = self.sgd_step(local, optimizer, idx, cid)
                self.ctx.on_batch()
            elif losses is None:  # training in the workers (start_in_workers)
                self.loss_places[cid].append(self.steps.defer_loss("client", cid, len(idx)))
                continue
            else:
                loss = losses[i]
            self.steps.record_loss("client", cid, loss, len(idx))
        yield from client.uplink.transfer("upload_model", cid, self.upload_bytes())
        if not timing:
            self.uploads[cid] = local  # None until start_in_workers' finish()

    def leave_out(self, client_id: int) -> None:
        """Over-commitment keeps ``client_id`` out: its upload is not averaged."""
        upload = getattr(self, "uploads", {}).pop(client_id, None)  # none before a round
        if upload is not None:
            self.release_copies([upload])

    def end_round(self, round_: int) -> None:
        """Sample-weighted mean of the uploads that arrived (dropped and late clients
        upload nothing); with none, the global model stays as it was."""
        ids = sorted(self.uploads)
        if ids:
            average_into([self.uploads[i] for i in ids],
                         [len(self.ctx.clients[i].indices) for i in ids],
                         target=self.global_model)
        self.release_copies(self.uploads.values())
        self.uploads = {}
