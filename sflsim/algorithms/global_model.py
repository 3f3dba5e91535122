"""The global-model machinery that FedAvg, its family and SplitFed share: one model
``stages + head`` kept by the server, copies of it for the clients, its bytes on the
wire, its learning-rate schedule and its evaluation (:class:`GlobalModelAlgorithm`).

Model transfers count 4 bytes per parameter and buffer element (fp32,
:data:`MODEL_WIRE_BYTES`), whatever ``wire_dtype`` says for activations.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Iterable

import torch
from torch import nn

from sflsim.algorithms.base import Algorithm, Client, RunContext
from sflsim.execution.host_threads import eval_mode, host_threads
from sflsim.execution.local_steps import (
    correct_predictions,
    make_optimizer,
    proximal_term,
    whole_model_step,
)
from sflsim.models.module_state import state_tensors
from sflsim.work import BATCH, TEST

MODEL_WIRE_BYTES = 4  # fp32 weights on the wire


_MODEL_BYTES: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


def model_bytes(module: nn.Module) -> int:
    """Bytes to send ``module``: every parameter and buffer element of its state dict at 4
    bytes (cached per module: architectures do not change during a run)."""
    size = _MODEL_BYTES.get(module)
    if size is None:
        n = sum(t.numel() for t in module.state_dict().values())
        size = _MODEL_BYTES[module] = n * MODEL_WIRE_BYTES
    return size


class GlobalModelAlgorithm(Algorithm):
    """An algorithm whose result is one global model ``stages + head`` kept by the server.

    ``self.global_model`` is an ``nn.Sequential`` whose child ``k`` (0-based) is stage
    ``k + 1`` and whose last child is the output layer. Its clients train copies of it,
    not :attr:`Client.model` (:attr:`Algorithm.client_models` is False).
    """

    client_models = False

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        #: copies of the global model handed back after aggregation (:meth:`global_copy`)
        self.spare_copies: list[nn.Module] = []
        self.steps.schedulers = []  # the learning rate is set per round, see lr_for_round
        self.global_model = nn.Sequential(*copy.deepcopy([*ctx.backbone.stages, ctx.backbone.head]))
        self._stage_bytes: dict[tuple[int, int | None], int] = {}
        self._prefix_params: dict[int, int] = {}

    def global_copy(self) -> nn.Module:
        """A copy of the global model as it is now: its weights and buffers, the
        ``training`` mode of each module and ``requires_grad`` of each parameter, as
        ``copy.deepcopy`` gives, written into a copy handed back by
        :meth:`release_copies` when there is one (a deep copy of a module tree costs
        milliseconds; writing its tensors, microseconds)."""
        if not self.spare_copies:
            return copy.deepcopy(self.global_model)
        local = self.blank_copy()
        with torch.no_grad():  # load_state_dict's copies, without walking the module trees
            for mine, theirs in zip(state_tensors(local), state_tensors(self.global_model)):
                mine.copy_(theirs)
        return local

    def blank_copy(self) -> nn.Module:
        """A module of the global model's architecture, the ``training`` mode of each module
        and ``requires_grad`` of each parameter (no gradients), whose values are to be
        overwritten: a copy handed back by :meth:`release_copies` when there is one (its
        values are then an older model's), else a deep copy."""
        if not self.spare_copies:
            return copy.deepcopy(self.global_model)
        local = self.spare_copies.pop()
        modules, params = _tree(local)
        global_modules, global_params = _tree(self.global_model)
        for mine, theirs in zip(modules, global_modules):
            if mine.training != theirs.training:  # nn.Module.__setattr__ is slow: only changes
                mine.training = theirs.training
        for mine, theirs in zip(params, global_params):
            if mine.requires_grad != theirs.requires_grad:
                mine.requires_grad_(theirs.requires_grad)
            if mine.grad is not None:
                mine.grad = None
        return local

    def release_copies(self, copies: Iterable[nn.Module]) -> None:
        """Hand back copies made by :meth:`global_copy` that nothing holds any more, for
        later :meth:`global_copy` calls to reuse."""
        self.spare_copies.extend(copies)

    def stage_bytes(self, start: int, stop: int | None = None) -> int:
        """Bytes to send the global model's children ``start..stop - 1`` (0-based; stage
        ``k + 1`` is child ``k``, the output layer last), as :func:`model_bytes` counts
        them, or of any copy of them; cached (every client's download and upload)."""
        size = self._stage_bytes.get((start, stop))
        if size is None:
            size = self._stage_bytes[start, stop] = model_bytes(self.global_model[start:stop])
        return size

    def prefix_params(self, cut: int) -> int:
        """Parameters of the global model's first ``cut`` children (cached)."""
        count = self._prefix_params.get(cut)
        if count is None:
            count = self._prefix_params[cut] = sum(
                p.numel() for p in self.global_model[:cut].parameters())
        return count

    def lr_for_round(self, round_: int, lr: float | None = None) -> float:
        """Learning rate of ``round_`` (1-based): cosine annealing over the run's rounds
        (:attr:`lr_horizon_rounds`; ``min_lr`` after them) or constant."""
        cfg = self.scenario.training
        lr = cfg.optimizer.lr if lr is None else lr
        if cfg.schedule.name == "constant":
            return lr
        progress = min(1.0, (round_ - 1) / self.steps.lr_horizon_rounds)
        return cfg.schedule.min_lr + (lr - cfg.schedule.min_lr) * (1 + math.cos(math.pi * progress)) / 2

    def round_optimizer(self, params, round_: int) -> torch.optim.Optimizer:
        return make_optimizer(params, self.scenario.training.optimizer, self.lr_for_round(round_))

    def sgd_step(self, local: nn.Module, optimizer: torch.optim.Optimizer, idx: torch.Tensor,
                 client_id: int) -> torch.Tensor:
        """One SGD step of the whole model on client ``client_id``'s batch ``idx``: cross-entropy
        plus :meth:`penalty`, if any; returns the detached cross-entropy."""
        x, y = self.steps.train_batch(idx, client_id)
        return whole_model_step(local, optimizer, x, y, self.steps.loss_fn, self.penalty)

    def penalty(self, local: nn.Module) -> torch.Tensor | None:
        """A term added to the local objective of every step, or None: by default the
        proximal term of :meth:`proximal`, ``(mu / 2) * sum ||w - w^a||^2`` over the
        parameters of ``local`` (``w^a`` the anchor's, detached). A subclass that adds
        another term cannot fuse its clients (:meth:`train_fused` refuses)."""
        proximal = self.proximal()
        if proximal is None:
            return None
        mu, anchor = proximal
        return proximal_term(local, mu, anchor.parameters())

    def proximal(self) -> tuple[float, nn.Module] | None:
        """``(mu, anchor)`` when every local step adds ``(mu / 2) ||w - w^a||^2``, ``w^a``
        the parameters of the model ``anchor`` (FedProx: the round's global model), or
        None (FedAvg). The step-by-step (:meth:`penalty`) and the fused
        (:meth:`train_fused`) steps both add it."""
        return None

    def server_model_for(self, client: Client) -> nn.Module:
        return self.global_model

    def activated_params(self, client_id: int) -> int:
        """Parameters of the global model up to the client's cut (FedAvg: all of it)."""
        return self.prefix_params(self.cost_model.cut_layers.get(client_id, len(self.global_model)))

    def work_per_round(self) -> dict[str, float]:
        """The clients' local steps; no server step (a split algorithm says otherwise)."""
        return {BATCH: self.batches_per_round()}

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Accuracy of the global model, the same for every client (no exit heads: NaN),
        in eval mode (:func:`~sflsim.execution.host_threads.eval_mode`: modes restored).

        With ``training.parallel_clients`` > 1 the test batches are spread over that
        many host threads (:func:`~sflsim.execution.host_threads.host_threads`; the same counts
        as serially)."""
        def correct(start: int) -> int:  # normalised here: one float batch per thread
            hits = correct_predictions(self.global_model, self.ctx.data, x, y, start,
                                       start + batch_size)
            self.ctx.on_batch(TEST)
            return hits

        starts = range(0, len(y), batch_size)
        with eval_mode(self.global_model), \
                host_threads(min(self.ctx.execution.threads, len(starts))) as pool:
            counts = pool.map(correct, starts) if pool else map(correct, starts)
            total = sum(counts)
        return {c.client_id: (total / len(y), float("nan")) for c in self.ctx.clients}


_TREES: weakref.WeakKeyDictionary[nn.Module, tuple[list[nn.Module], list[nn.Parameter]]] = \
    weakref.WeakKeyDictionary()


def _tree(model: nn.Module) -> tuple[list[nn.Module], list[nn.Parameter]]:
    """``model``'s modules and parameters, in order, listed once per model (the global
    model and its copies keep their structure for the whole run)."""
    tree = _TREES.get(model)
    if tree is None:
        tree = _TREES[model] = (list(model.modules()), list(model.parameters()))
    return tree
