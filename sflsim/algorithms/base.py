"""What every algorithm shares: the :class:`Algorithm` base class and its registry.

An algorithm fills in :meth:`Algorithm.train_round` (a SimPy process for one
round), optionally :meth:`Algorithm.end_round` (aggregation) and
:meth:`Algorithm.server_model_for` (for evaluation). The runner
(:mod:`sflsim.runner`) owns the loop over rounds. Each is registered under its name with
:func:`register_algorithm`, and its configuration (the scenario's ``algorithm``
mapping) with :func:`sflsim.config.algorithms.register_algorithm_config`; an algorithm
of one's own registers the same way, in a module the scenario names in
``algorithm.module`` (:mod:`sflsim.config.user_algorithms`).

:class:`Algorithm` is composed of parts, each a module that can be read alone:

- :mod:`sflsim.algorithms.protocol`: the round protocol (the round's SimPy processes,
  its deadline, clients going offline, over-commitment);
- :mod:`sflsim.algorithms.costs`: the cost model (FLOPs, seconds and bytes of a step);
- :mod:`sflsim.algorithms.steps`: the torch steps, each paired with its simulated cost
  in one place, and evaluation;
- :mod:`sflsim.algorithms.batching`: a client's index batches and a round's work;
- :mod:`sflsim.algorithms.context`: :class:`Client`, :class:`RunContext` and the
  optimizer, schedule and augmentation-generator factories.

How torch work runs on the host (several clients on threads, measurements without
side effects) is :mod:`sflsim.algorithms.host_threads`.
"""

from __future__ import annotations

import collections
import inspect
from typing import ClassVar

import simpy
import torch
from torch import nn

from sflsim.algorithms.batching import Batching
from sflsim.algorithms.context import (
    SERVER_ID,
    Client,
    RunContext,
    augment_generator,
    make_optimizer,
    make_scheduler,
)
from sflsim.algorithms.costs import CostModel
from sflsim.algorithms.protocol import OFFLINE, RoundProtocol
from sflsim.algorithms.steps import TorchSteps
from sflsim.config.schema import WIRE_BYTES
from sflsim.engine import Process
from sflsim.models.cost import PieceCost
from sflsim.name_registry import registrar

__all__ = ["ALGORITHMS", "HOOKS", "OFFLINE", "SERVER_ID", "Algorithm", "Client",
           "RunContext", "make_optimizer", "make_scheduler",
           "register_algorithm"]

ALGORITHMS: dict[str, type[Algorithm]] = {}


#: the hooks every algorithm has (:class:`Algorithm`) and the arguments the runner passes
HOOKS = {"train_round": ("round_",), "end_round": ("round_",),
         "server_model_for": ("client",), "exit_models": ("client",)}


def _check_algorithm(name: str, entry: object) -> None:
    """What ``@register_algorithm(name)`` refuses: not an :class:`Algorithm` subclass; no
    :meth:`~Algorithm.train_round` or :meth:`~Algorithm.server_model_for` of its own or
    inherited from an algorithm; a hook that does not take the runner's arguments."""
    where = f"@register_algorithm({name!r})"
    if not (isinstance(entry, type) and issubclass(entry, Algorithm)):
        raise TypeError(f"{where}: {getattr(entry, '__qualname__', entry)!r} is not a subclass "
                        f"of sflsim.algorithms.Algorithm; derive it from Algorithm, or from a "
                        f"built-in algorithm such as FedAvg")
    missing = [h for h in ("train_round", "server_model_for")
               if getattr(entry, h) is getattr(Algorithm, h)]
    if missing:
        raise TypeError(f"{where}: {entry.__qualname__} does not implement "
                        f"{' or '.join(f'{h}({HOOKS[h][0]})' for h in missing)}; every algorithm "
                        f"needs train_round (the SimPy process of one round) and "
                        f"server_model_for (the server-side model that evaluates a client)")
    for hook, args in HOOKS.items():
        method = getattr(entry, hook)
        if method is getattr(Algorithm, hook):
            continue
        try:
            inspect.signature(method).bind(*(None,) * (1 + len(args)))
        except TypeError:
            raise TypeError(f"{where}: {entry.__qualname__}.{hook}{inspect.signature(method)} "
                            f"must take (self, {', '.join(args)}): the runner calls "
                            f"{hook}({', '.join(args)})") from None
        except ValueError:  # no signature to read (a builtin): nothing to check
            continue


#: ``@register_algorithm(name)``: register an :class:`Algorithm` subclass under ``name``
#: (its configuration class names it too: ``name: Literal[name]``); a name already
#: registered raises :class:`~sflsim.name_registry.DuplicateNameError`, a class that is not
#: an algorithm (no subclass, a missing hook, a hook with other arguments) a TypeError.
register_algorithm = registrar(ALGORITHMS, "algorithm", _check_algorithm)


class Algorithm(RoundProtocol, CostModel, TorchSteps, Batching):
    """Base class: per-round SimPy processes that call the engine for time and torch for learning.

    Composed of :class:`~sflsim.algorithms.protocol.RoundProtocol` (the round's
    processes and cut-offs), :class:`~sflsim.algorithms.costs.CostModel` (simulated
    costs), :class:`~sflsim.algorithms.steps.TorchSteps` (training steps and
    evaluation) and :class:`~sflsim.algorithms.batching.Batching` (index batches); no
    method is defined in two of them. Here: the state they share (:meth:`__init__`)
    and the hooks an algorithm implements.
    """

    #: Whether the algorithm trains each client's own client-side model and exit head
    #: (:attr:`Client.model`, :attr:`Client.exit_head`, :attr:`Client.optimizer`).
    #: False (algorithms whose models live elsewhere, e.g. one global model): the runner
    #: builds one untrained pair per end layer, shared by the clients of that end
    #: layer, and no optimizers, so that a run of 1,000 clients does not build 1,000
    #: models it never trains.
    client_models: ClassVar[bool] = True

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.sim = ctx.sim
        self.scenario = ctx.scenario
        self.loss_fn = nn.CrossEntropyLoss()
        self.wire_bytes = WIRE_BYTES[ctx.scenario.wire_dtype]
        #: (round, client_id, sim_time_s) of every server-side torch step, in order.
        self.server_steps: list[tuple[int, int, float]] = []
        #: (where, client_id, mean training loss of the batch, batch size), where is
        #: "client" (exit-head loss) or "server"; the runner summarises it per round.
        self.losses: list[tuple[str, int, float, int]] = []
        self.schedulers = [c.scheduler for c in ctx.clients if c.scheduler is not None]
        #: rounds over which a cosine learning-rate schedule decays: the run's rounds when
        #: it started (a run resumed with more rounds then stays at min_lr)
        self.lr_horizon_rounds = ctx.scenario.training.rounds
        #: cut layer of each client in the current round (adaptive-split algorithms update it)
        self.cuts: dict[int, int] = {c.client_id: c.end_layer for c in ctx.clients}
        #: this round's conditions (set by the runner before :meth:`run_round`):
        #: clients that sit the round out, and each client's compute slowdown
        self.dropped: set[int] = set()
        self.slowdowns: dict[int, float] = {}
        #: clients that sit the round out because they were not sampled or are offline
        #: (``{client_id: "not_sampled" | "offline"}``, also in :attr:`dropped`;
        #: :func:`sflsim.runner.round_participants`)
        self.absent: dict[int, str] = {}
        #: participants that go offline during the round: ``{client_id: time (s)}``
        self.offline_at: dict[int, float] = {}
        #: over-commitment (``training.over_commit``): clients kept, the first to finish
        #: their round's work (None: every participant)
        self.keep_first: int | None = None
        #: this round's participants in the order they were sampled (the runner's
        #: :func:`sflsim.run.participation.draw_participants`); over-commitment keeps
        #: clients that finish at the same instant in this order. Clients not in it come
        #: after it, in id order ([]: id order)
        self.sampling_order: list[int] = []
        #: over-commitment's bookkeeping of the round (:meth:`_kept`): the clients kept;
        #: those whose work ended at the instant being settled; the event they wait on,
        #: triggered once the instant is settled; each client's place in
        #: :attr:`sampling_order`
        self._kept_ids: set[int] = set()
        self._finishing: list[int] = []
        self._settled: simpy.Event | None = None
        self._sampling_rank: dict[int, int] = {}
        #: per client this round: "trained", "dropped", "late" (cut off by the deadline),
        #: "offline" (went offline, or was offline at the start), "not_sampled" or
        #: "over_committed" (stopped, or its finished work left out, once
        #: :attr:`keep_first` others had finished)
        self.status: dict[int, str] = {}
        self._round_procs: list[tuple[int, simpy.Process]] = []
        #: the processes that wait for this round's availability and over-commitment
        #: cut-offs (:meth:`_cut_off`); stopped when the round ends first
        self._cutters: list[simpy.Process] = []
        self._deadline_s: float | None = None
        #: per end layer: client-side step cost, activation shape (looked up per batch)
        self._client_costs: dict[int, PieceCost] = {}
        self._activation_shapes: dict[int, tuple[int, ...]] = {}
        self._timing_batches: dict[int, tuple[range, ...]] = {}
        #: (cut layer, activation shape, input gradient?) -> server-side step cost
        self._server_costs: dict[tuple, PieceCost] = {}
        self._meta: dict[tuple[int, ...], torch.Tensor] = {}
        #: client id -> (activations, loss) of client steps already trained this round,
        #: in batch order; :meth:`client_step` takes them instead of training
        self.ready_steps: dict[int, collections.deque] = {}
        #: client id (:data:`SERVER_ID` for the server's own steps) -> the generator of its
        #: training batches' augmentation (:meth:`train_batch`), with ``dataset.augment``
        #: only; apart from the batch-order generators, and saved in checkpoints with the
        #: algorithm, so resumed and parallel runs draw the same crops and flips
        self.augment_generators: dict[int, torch.Generator] = {}
        aug = ctx.scenario.dataset.augment
        if aug is not None and aug.active and not ctx.timing_only:
            self.augment_generators = {
                cid: augment_generator(ctx.seeds["augment"], cid)
                for cid in (SERVER_ID, *(c.client_id for c in ctx.clients))}

    # ----- hooks -----------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        """The SimPy process of one round; returns when the round's work is done."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement train_round")

    def end_round(self, round_: int) -> None:
        """Work after the round's process (aggregation); default none."""

    def server_model_for(self, client: Client) -> nn.Module:
        """The server-side model that serves ``client``'s activations."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement "
                                  f"server_model_for")

    def leave_out(self, client_id: int) -> None:
        """Forget what ``client_id``'s work of this round left for the round's end (its
        upload, its copies): its work ended, but over-commitment does not keep it (it
        finished at the same instant as the last client kept, and later in the sampling
        order: :meth:`~sflsim.algorithms.protocol.RoundProtocol._settle`); its status is
        "over_committed". Default: nothing, for an algorithm whose round end reads
        :attr:`status` (only "trained" clients count)."""

    def exit_models(self, client: Client) -> tuple[nn.Module, nn.Module, nn.Module] | None:
        """(client-side model, exit head, server-side model) for early-exit inference
        (Hetero-SplitEE Alg. 3), or None when the algorithm trains no exit heads."""
        return None

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """Extra clients-table columns of ``round_`` per client id (an algorithm's own
        per-client quantities, e.g. FedSGA's sufficiency estimates); default none. Every
        round must give the same column names."""
        return {}
