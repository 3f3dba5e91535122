"""Torch steps: every real training step paired with its simulated cost, and evaluation.

The main invariant: every real torch step is paired with its simulated cost in one
place, :meth:`TorchSteps.client_step` and :meth:`TorchSteps.server_step`, and runs at
the simulated instant its work completes. Every algorithm reads training data through
:meth:`TorchSteps.train_batch` (normalisation, augmentation), records each step's loss
with :meth:`TorchSteps.record_loss` (which stops a diverged run), and evaluates on
:meth:`TorchSteps.test_batches`.

Timing-only runs (``training.timing_only``) go through the same processes: the steps
then simulate the work and run no torch step, and the activations passed on are shapes
on torch's ``meta`` device (:meth:`~sflsim.algorithms.costs.CostModel.meta_tensor`).

:class:`TorchSteps` is one part of :class:`~sflsim.algorithms.base.Algorithm` (its
``steps``).
"""

from __future__ import annotations

import collections
import math
import warnings
from collections.abc import Callable, Generator, Iterator

import simpy
import torch
from torch import nn

from sflsim.algorithms.context import SERVER_ID, Client, RunContext, augment_generator
from sflsim.algorithms.costs import CostModel
from sflsim.data.augment import training_samples
from sflsim.engine import FifoQueue, FifoResource, Process
from sflsim.errors import DivergenceError
from sflsim.work import BATCH, SERVER, TEST


class TorchSteps:
    """Client-side and server-side training steps (simulated, then run), losses,
    learning-rate schedules and the test batches of an evaluation.

    Given the run context (clients, data, server, ``on_batch``, ``timing_only``, seeds),
    the cost model (:class:`~sflsim.algorithms.costs.CostModel`: each step's cost) and
    the algorithm's ``server_model_for`` (the models :meth:`check_parameters` checks).
    Owns :meth:`client_step`, :meth:`server_step` and their torch parts, the training
    batch (:meth:`train_batch`), the loss record (:meth:`record_loss`,
    :meth:`check_parameters`), the schedules (:meth:`step_schedulers`) and the state
    below.

    Attributes:
        loss_fn: the training loss (cross-entropy).
        losses: ``(where, client_id, mean loss of the batch, batch size)`` of every
            step, where is "client" (exit-head loss) or "server"; the runner summarises
            it per round.
        server_steps: ``(round, client_id, sim_time_s)`` of every server-side torch
            step, in order.
        ready_steps: client id -> ``(activations, loss)`` of client steps already trained
            this round, in batch order; :meth:`client_step` takes them instead of
            training.
        augment_generators: client id (:data:`SERVER_ID` for the server's own steps) ->
            the generator of its training batches' augmentation (:meth:`train_batch`),
            with ``dataset.augment`` only; apart from the batch-order generators, and
            saved in checkpoints with the algorithm, so resumed and parallel runs draw
            the same crops and flips.
        schedulers: every client's learning-rate schedule.
        lr_horizon_rounds: rounds over which a cosine learning-rate schedule decays: the
            run's rounds when it started (a run resumed with more rounds then stays at
            ``min_lr``).
    """

    def __init__(self, ctx: RunContext, cost_model: CostModel,
                 server_model_for: Callable[[Client], nn.Module]):
        self.ctx = ctx
        self.sim = ctx.sim
        self.cost_model = cost_model
        self._server_model_for = server_model_for
        self.loss_fn = nn.CrossEntropyLoss()
        self.losses: list[tuple[str, int, float, int]] = []
        self.server_steps: list[tuple[int, int, float]] = []
        self.ready_steps: dict[int, collections.deque] = {}
        self.schedulers = [c.scheduler for c in ctx.clients if c.scheduler is not None]
        self.lr_horizon_rounds = ctx.scenario.training.rounds
        self.augment_generators: dict[int, torch.Generator] = {}
        aug = ctx.scenario.dataset.augment
        if aug is not None and aug.active and not ctx.timing_only:
            self.augment_generators = {
                cid: augment_generator(ctx.seeds["augment"], cid)
                for cid in (SERVER_ID, *(c.client_id for c in ctx.clients))}

    def client_step(self, client: Client, idx: torch.Tensor
                    ) -> Generator[simpy.Event, object, torch.Tensor]:
        """Simulate and run one client-side step on the local (exit-head) loss.

        The device is busy for the step's FLOPs over its sustained FLOP/s; then
        the real step runs. Use as ``h = yield from self.client_step(...)``.

        Returns:
            The detached activations ``(B, C, H, W)`` to send to the server (a "meta"
            tensor, shape only, in timing-only runs).
        """
        flops, seconds = self.cost_model.client_step_cost(client, len(idx))
        yield from self.sim.busy(client.actor, "client_train", client.client_id, flops, seconds)
        return self.client_torch_step(client, idx)

    def client_torch_step(self, client: Client, idx: torch.Tensor,
                          done_s: float | None = None) -> torch.Tensor:
        """The torch part of :meth:`client_step` (its step trained ahead, if it was), once
        the step's time is simulated; returns the detached activations ``(B, ...)``.
        ``done_s``: the simulated instant (s) the step completes, when the round is booked
        ahead of the clock (default: now), for the progress display."""
        n = len(idx)
        if self.ctx.timing_only:
            self.ctx.on_batch(BATCH, done_s)
            return self.cost_model.meta_tensor((n, *self.cost_model.activation_shape(client)))
        ready = self.ready_steps.get(client.client_id)
        if ready:  # trained ahead (see train_ahead), and counted for progress then
            h, loss = ready.popleft()
            self.record_loss("client", client.client_id, loss, n)
            self.ctx.on_batch(None, done_s)  # the simulated clock only
            return h
        h, loss = self.local_step(client, idx)
        self.record_loss("client", client.client_id, loss, n)
        self.ctx.on_batch(BATCH, done_s)
        return h

    def train_batch(self, idx: torch.Tensor, client_id: int | None, *,
                    generator: torch.Generator | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The training samples ``idx`` as ``client_id`` trains on them.

        Every algorithm reads training data through here, so what a training batch is
        (normalisation, augmentation) is decided in one place. With
        ``dataset.augment`` a training step's images are augmented
        (:mod:`sflsim.data.augment`) with draws from ``client_id``'s own generator in
        :attr:`augment_generators`; a measurement (``client_id`` None) never is.

        Args:
            idx: int64 ``(B,)`` indices into the training set.
            client_id: whose training step this is (:data:`SERVER_ID` for the server);
                ``None`` for a measurement that trains nothing.
            generator: draw the augmentation from this generator instead of
                ``client_id``'s (training done for an evaluation, e.g. FedBABU's
                fine-tuning, must not move the training draws).

        Returns:
            images float32 ``(B, C, H, W)``, normalised per channel, on the run's device;
            labels int64 ``(B,)``.
        """
        if client_id is None or client_id not in self.augment_generators:
            generator = None  # a measurement, or no augmentation
        elif generator is None:
            generator = self.augment_generators[client_id]
        return training_samples(self.ctx.data, self.ctx.scenario.dataset.augment, idx, generator)

    def local_step(self, client: Client, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The torch part of :meth:`client_step`: forward, exit-head cross-entropy,
        backward, update. Returns (detached activations ``(B, ...)``, loss ``()``)."""
        x, y = self.train_batch(idx, client.client_id)
        h = client.model(x)
        loss = self.loss_fn(client.exit_head(h), y)
        client.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        client.optimizer.step()
        client.optimizer.zero_grad(set_to_none=True)  # 100 clients' gradients would stay otherwise
        return h.detach(), loss.detach()

    def server_step(self, client: Client, model: nn.Module, optimizer: torch.optim.Optimizer,
                    h: torch.Tensor, y: torch.Tensor, lock: FifoResource | FifoQueue,
                    activity: str = "server_train", *, input_grad: bool = False,
                    objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                    ) -> Generator[simpy.Event, object, torch.Tensor | None]:
        """Queue for ``model`` and a server slot, simulate, then run one server step.

        Args:
            h: activations ``(B, ...)`` as received.
            y: labels ``(B,)``.
            lock: the model's own resource; one step at a time per model, FIFO. A
                :class:`~sflsim.engine.FifoQueue` when the model's steps are the server's
                only work (no slot is taken; the start is computed, the same times).
            input_grad: also compute (and pay for) the gradient w.r.t. ``h``.
            objective: ``(h, y) -> loss`` to minimise instead of cross-entropy of
                ``model(h)``; it must run ``model`` on ``h`` (its cost is what is paid).

        Returns:
            The activation gradients ``(B, ...)`` when ``input_grad``, else None.
        """
        flops = self.cost_model.server_step_flops(client, model, h, input_grad)
        yield from self.run_on_server(activity, client.client_id, flops, lock)
        return self.server_torch_step(client, model, optimizer, h, y, input_grad=input_grad,
                                      objective=objective)

    def run_on_server(self, activity: str, client_id: int, flops: float,
                      lock: FifoResource | FifoQueue) -> Process:
        """The simulated part of :meth:`server_step`: queue for the model's ``lock`` (FIFO)
        and a server slot, then hold the slot for ``flops`` of ``activity`` done for
        ``client_id``; the server's time counts from the arrival. With a
        :class:`~sflsim.engine.FifoQueue` no slot is taken (the start is computed)."""
        server = self.ctx.server
        if isinstance(lock, FifoQueue):
            yield from server.run_queued(activity, client_id, flops, lock)
            return
        arrived = self.sim.now_s
        with lock.request() as model_req:
            yield model_req
            with server.request(client_id) as slot:
                yield slot
                yield from server.run(activity, client_id, flops, arrived)

    def server_torch_step(self, client: Client, model: nn.Module,
                          optimizer: torch.optim.Optimizer, h: torch.Tensor, y: torch.Tensor, *,
                          input_grad: bool = False,
                          objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                          | None = None, done_s: float | None = None) -> torch.Tensor | None:
        """The torch part of :meth:`server_step`, once the step's time is simulated;
        ``done_s`` as in :meth:`client_torch_step`."""
        if self.ctx.timing_only:
            self.ctx.on_batch(SERVER, done_s)
            return self.cost_model.meta_tensor(tuple(h.shape)) if input_grad else None
        h = h.detach().requires_grad_(input_grad)
        loss = objective(h, y) if objective else self.loss_fn(model(h), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        self.record_loss("server", client.client_id, loss, len(h))
        self.server_steps.append((self.sim.round, client.client_id, self.sim.now_s))
        self.ctx.on_batch(SERVER, done_s)
        return h.grad if input_grad else None

    def record_loss(self, where: str, client_id: int, loss: torch.Tensor, batch: int) -> None:
        """Append a step's mean loss to :attr:`losses`.

        Raises:
            DivergenceError: the loss is NaN or infinite (names the algorithm, the
                round and the client; the runner keeps the completed rounds).
        """
        self.losses.append((where, client_id, self._finite(where, client_id, loss.item()), batch))

    def defer_loss(self, where: str, client_id: int, batch: int) -> int:
        """Keep the place in :attr:`losses` of a step whose loss is not known yet (trained
        in a worker while the round is simulated); returns the place, for
        :meth:`fill_loss`."""
        self.losses.append((where, client_id, math.nan, batch))
        return len(self.losses) - 1

    def fill_loss(self, place: int, loss: float) -> None:
        """The loss (nats) of the step whose place :meth:`defer_loss` kept.

        Raises:
            DivergenceError: as :meth:`record_loss`.
        """
        where, client_id, _, batch = self.losses[place]
        self.losses[place] = (where, client_id, self._finite(where, client_id, loss), batch)

    def _finite(self, where: str, client_id: int, value: float) -> float:
        if not math.isfinite(value):
            name = self.ctx.scenario.algorithm.name
            raise DivergenceError(
                f"{name} diverged in round {self.sim.round}: the {where}-side loss of client "
                f"{client_id} is {value}; lower training.optimizer.lr (now "
                f"{self.ctx.scenario.training.optimizer.lr:g})",
                algorithm=name, round=self.sim.round, client_id=client_id)
        return value

    def check_parameters(self) -> None:
        """Raise :class:`DivergenceError` if a parameter of a model used for evaluation
        (every client's client-side model, exit head and server-side model) is NaN or
        infinite. A module that several clients share (FedAvg's global model, the
        shared untrained client-side models of :attr:`client_models` False) is checked
        once, for the first client that uses it."""
        name = self.ctx.scenario.algorithm.name
        seen: dict[int, nn.Module] = {}  # held, so that no id is reused meanwhile
        for c in self.ctx.clients:
            for what, module in (("client-side model", c.model), ("exit head", c.exit_head),
                                 ("server-side model", self._server_model_for(c))):
                if id(module) in seen:
                    continue
                seen[id(module)] = module
                if not all(torch.isfinite(p).all() for p in module.parameters()):
                    raise DivergenceError(
                        f"{name} diverged in round {self.sim.round}: the {what} of client "
                        f"{c.client_id} has NaN or infinite parameters; lower "
                        f"training.optimizer.lr (now {self.ctx.scenario.training.optimizer.lr:g})",
                        algorithm=name, round=self.sim.round, client_id=c.client_id)

    def step_schedulers(self) -> None:
        """Step every learning-rate schedule once: schedules follow rounds, so a client
        that sat the round out (or a resumed optimizer) steps too, which torch would
        otherwise warn about. A cosine schedule that has reached its horizon (a run
        resumed with more rounds than it started with) stays at ``min_lr``: torch's
        cosine would climb back up."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step",
                                    category=UserWarning)
            for sched in self.schedulers:
                if sched.last_epoch < getattr(sched, "T_max", math.inf):
                    sched.step()

    def schedule_horizon_rounds(self) -> int | None:
        """:attr:`lr_horizon_rounds` with a cosine schedule, None with a constant rate."""
        cosine = self.ctx.scenario.training.schedule.name == "cosine"
        return self.lr_horizon_rounds if cosine else None

    def test_batches(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                     ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`~sflsim.data.DatasetSplit.batches` of the test images ``x`` (uint8
        ``(N, C, H, W)``) and labels ``y`` ``(N,)``, each reported to the progress display
        as a test batch once the caller has used it (asks for the next one); any thread."""
        for batch in self.ctx.data.batches(x, y, batch_size):
            yield batch
            self.ctx.on_batch(TEST)
