"""What every algorithm shares: the :class:`Algorithm` base class and its registry.

An algorithm fills in :meth:`Algorithm.train_round` (a SimPy process for one
round), optionally :meth:`Algorithm.end_round` (aggregation) and
:meth:`Algorithm.server_model_for` (for evaluation). The runner
(:mod:`sflsim.runner`) owns the loop over rounds. Each is registered under its name with
:func:`register_algorithm`, and its configuration (the scenario's ``algorithm``
mapping) with :func:`sflsim.config.algorithms.register_algorithm_config`; an algorithm
of one's own registers the same way, in a module the scenario names in
``algorithm.module`` (:mod:`sflsim.config.user_algorithms`).

:class:`Algorithm` is an abstract class (``train_round`` and ``server_model_for`` are
``@abstractmethod``s) that holds its parts as fields, each a class with its own
constructor and state, in a module that can be read alone:

- ``protocol`` (:mod:`sflsim.algorithms.protocol`): the round protocol (the round's SimPy
  processes, its conditions, deadline, clients going offline, over-commitment), given
  the simulation, the clients and the algorithm's ``train_round`` and ``leave_out``;
- ``cost_model`` (:mod:`sflsim.algorithms.costs`): FLOPs, seconds and bytes of a step,
  and their caches;
- ``steps`` (:mod:`sflsim.algorithms.steps`): the torch steps, each paired with its
  simulated cost in one place, handed the cost model;
- ``batching`` (:mod:`sflsim.algorithms.batching`): a client's index batches.

:mod:`sflsim.algorithms.context` holds :class:`Client`, :class:`RunContext` and the
optimizer, schedule and augmentation-generator factories.

How torch work runs on the host (several clients on threads, measurements without
side effects) is :mod:`sflsim.execution.host_threads`.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import nn

from sflsim.algorithms.batching import Batching
from sflsim.algorithms.context import SERVER_ID, Client, RunContext
from sflsim.algorithms.costs import CostModel, param_count
from sflsim.algorithms.protocol import OFFLINE, RoundConditions, RoundProtocol
from sflsim.algorithms.steps import TorchSteps
from sflsim.engine import Process
from sflsim.execution.host_threads import accuracy
from sflsim.name_registry import registrar
from sflsim.work import BATCH, SERVER

__all__ = ["ALGORITHMS", "HOOKS", "OFFLINE", "SERVER_ID", "Algorithm", "Client",
           "RoundConditions", "RunContext", "register_algorithm"]

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
               if h in getattr(entry, "__abstractmethods__", ())]
    if missing:
        raise TypeError(f"{where}: {entry.__qualname__} does not implement "
                        f"{' or '.join(f'{h}({HOOKS[h][0]})' for h in missing)}; every algorithm "
                        f"needs train_round (the SimPy process of one round) and "
                        f"server_model_for (the server-side model that evaluates a client)")
    for hook, args in HOOKS.items():
        method = getattr(entry, hook)
        if hook in entry.__abstractmethods__:
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


class Algorithm(ABC):
    """Base class: per-round SimPy processes that call the engine for time and torch for learning.

    An algorithm implements :meth:`train_round` and :meth:`server_model_for`, and may
    override the other hooks below. It owns its parts as fields, each with its own state:

    - :attr:`protocol` (:class:`~sflsim.algorithms.protocol.RoundProtocol`): the round's
      processes, its conditions and cut-offs, each client's status of the round;
    - :attr:`cost_model` (:class:`~sflsim.algorithms.costs.CostModel`): simulated costs
      and their caches, each client's cut layer this round;
    - :attr:`steps` (:class:`~sflsim.algorithms.steps.TorchSteps`, handed the cost
      model): training steps, losses, schedules;
    - :attr:`batching` (:class:`~sflsim.algorithms.batching.Batching`): index batches.

    The runner calls :meth:`run_round` with the round's conditions, then
    :meth:`end_round`, and :meth:`evaluate` when due.
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
        self.cost_model = CostModel(ctx)
        self.batching = Batching(ctx)
        self.steps = TorchSteps(ctx, self.cost_model, self.server_model_for)
        self.protocol = RoundProtocol(ctx.sim, ctx.clients, self.train_round, self.leave_out)
        #: (id of a client-side model, id of an exit head) -> their parameters
        self._activated: dict[tuple[int, int], int] = {}

    def __getattr__(self, name: str) -> object:
        """Only for a name not found: an attribute that lives in one of the parts says
        where (``self.run_clients`` -> ``self.protocol.run_clients``).

        Raises:
            AttributeError: always; naming the part when the name is one of a part's.
        """
        where = _MOVED.get(name)
        if where is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}: it "
                             f"is {where} (an algorithm holds its parts as fields: protocol, "
                             f"cost_model, steps, batching)")

    def run_round(self, round_: int, conditions: RoundConditions) -> Process:
        """Round ``round_`` (:meth:`train_round`) under ``conditions``, as the round protocol
        runs it (:meth:`RoundProtocol.run_round
        <sflsim.algorithms.protocol.RoundProtocol.run_round>`: deadline, clients going
        offline, over-commitment)."""
        return self.protocol.run_round(round_, conditions)

    # ----- hooks -----------------------------------------------------------------
    @abstractmethod
    def train_round(self, round_: int) -> Process:
        """The SimPy process of one round; returns when the round's work is done."""

    def end_round(self, round_: int) -> None:  # noqa: B027 (a hook whose default is nothing)
        """Work after the round's process (aggregation); default none."""

    @abstractmethod
    def server_model_for(self, client: Client) -> nn.Module:
        """The server-side model that serves ``client``'s activations."""

    def leave_out(self, client_id: int) -> None:  # noqa: B027 (a hook whose default is nothing)
        """Forget what ``client_id``'s work of this round left for the round's end (its
        upload, its copies): its work ended, but over-commitment does not keep it (it
        finished at the same instant as the last client kept, and later in the sampling
        order: :meth:`~sflsim.algorithms.protocol.RoundProtocol._settle`); its status is
        "over_committed". Default: nothing, for an algorithm whose round end reads
        ``protocol.status`` (only "trained" clients count)."""

    def exit_models(self, client: Client) -> tuple[nn.Module, nn.Module, nn.Module] | None:
        """(client-side model, exit head, server-side model) for early-exit inference
        (Hetero-SplitEE Alg. 3), or None when the algorithm trains no exit heads."""
        return None

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """Extra clients-table columns of ``round_`` per client id (an algorithm's own
        per-client quantities, e.g. FedSGA's sufficiency estimates); default none. Every
        round must give the same column names."""
        return {}

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Test accuracy of every client: ``{client_id: (server_acc, client_acc)}`` in [0, 1].

        Args:
            x: uint8 test images ``(N, C, H, W)`` (e.g. of
                :meth:`~sflsim.data.DatasetSplit.test_subset`), normalised a batch at a
                time by :meth:`~sflsim.data.DatasetSplit.batches`; y: labels ``(N,)``.
        """
        return {
            c.client_id: accuracy(c.model, c.exit_head, self.server_model_for(c),
                                  self.steps.test_batches(x, y, batch_size))
            for c in self.ctx.clients
        }

    def activated_params(self, client_id: int) -> int:
        """Client-side parameters the client trains this round (FedSGA Table 5's
        "activated parameters"); here the client-side model and exit head (counted once
        per pair of modules: their architectures do not change during a run)."""
        c = self.ctx.clients[client_id]
        key = (id(c.model), id(c.exit_head))
        count = self._activated.get(key)
        if count is None:
            count = self._activated[key] = param_count(c.model) + param_count(c.exit_head)
        return count

    def batches_per_round(self) -> int:
        """Training batches in one round (for progress bars)."""
        bs = self.scenario.training.batch_size
        n = sum(math.ceil(len(c.indices) / bs) for c in self.ctx.clients)
        return n * self.scenario.training.local_epochs

    def work_per_round(self) -> dict[str, float]:
        """Units of host work one round is expected to make with every client taking
        part, by kind (:mod:`sflsim.work`), for the progress display's time estimate:
        here the training batches (:meth:`batches_per_round`) and one server step per
        batch (split learning). Only an estimate for the first round: later ones are
        expected to repeat the last round's counts."""
        batches = self.batches_per_round()
        return {BATCH: batches, SERVER: batches}



def _members(part: str, cls: type, *attributes: str) -> dict[str, str]:
    """``{name: "self.<part>.<name>"}`` for the public members of ``cls`` and ``attributes``."""
    names = {n for n in vars(cls) if not n.startswith("_")} | set(attributes)
    return {n: f"self.{part}.{n}" for n in names}


#: a part's member asked of the algorithm -> where it is (the round's conditions by their
#: own names too: ``self.dropped`` -> ``self.protocol.conditions.dropped``; and the names
#: the cut layers had: ``cuts``, ``cut_of``)
_MOVED: dict[str, str] = {
    **_members("protocol.conditions", RoundConditions, *RoundConditions.__dataclass_fields__),
    **_members("batching", Batching),
    **_members("cost_model", CostModel, "cut_layers", "wire_bytes"),
    **_members("steps", TorchSteps, "loss_fn", "losses", "server_steps", "ready_steps",
               "augment_generators", "schedulers", "lr_horizon_rounds"),
    **_members("protocol", RoundProtocol, "status", "conditions"),
    "cuts": "self.cost_model.cut_layers", "cut_of": "self.cost_model.cut_layer_of",
}
