"""Memory estimate of a run, checked before training starts (refuse the impossible up front).

:func:`estimate_memory` adds up, in bytes, what a run keeps in host memory at
its peak, from parameter counts of the backbone's pieces and what each
algorithm keeps (read off ``sflsim/algorithms/*.py``), without building the
per-client models; :func:`~sflsim.memory.refusal.check_fits` compares it with what the
run may use (:mod:`sflsim.memory`).

Notation: ``N`` clients, group ``g`` with ``n_g`` clients at end layer ``l_g``;
``C(l)`` the parameter and buffer elements of stages ``1..l``
(``backbone.client_model(l)``), ``E(l)`` of the exit head after stage ``l``,
``S(l)`` of stages ``l+1..L`` plus the output layer
(``backbone.server_model(l)``), ``F = C(l) + S(l)`` the whole model; each
element takes the backbone's parameter size (4 bytes in fp32).

Model copies (a copy is "trained" when an optimizer steps it):

* every algorithm: the backbone itself (``F``) and, built by the runner, every
  client's ``C(l_g) + E(l_g)``; trained only by the Hetero-SplitEE family.
* ``hetero_splitee_sequential``: one shared server-side model ``S(min l_g)``, trained.
* ``hetero_splitee_averaging`` and ``distributed``: one server-side copy
  ``S(l_g)`` per client, trained (Alg. 2 keeps each with its own Adam state).
* ``centralized``: per distinct end layer ``C(l) + E(l) + S(l)``, trained.
* ``fedavg``: the global model ``F``, plus a local copy ``F`` per client,
  trained; all clients' processes run at once in simulated time and the uploads
  live until the round ends, so all ``N`` copies are alive together. The same for
  ``fedprox`` and ``fedbabu`` (whose ``N`` personalised models of the last round
  replace the uploads, aggregated by then); ``fedmut`` also keeps the last global
  update ``F``, not trained.
* ``splitfed_v1``: global ``F``, plus per client a client-side copy and a
  server-side copy, together ``F``, trained, all alive together.
* ``splitfed_v2``: global ``F`` trained by the shared server optimizer, plus a
  client-side copy ``C(cut)`` per client, trained.
* ``fedsga``: global ``F``, per client a copy ``C(max candidate)`` (trained up to
  its cut; counted whole, an upper bound; with ``client_fronts: local`` the
  clients' own fronts, kept across rounds), the server's stages ``2..L`` and the
  harmonizer, trained by ``server_update: sequential``; with ``per_client``
  (default) they are only averaged into, and per client a copy of them (stages
  after its cut, counted ``2..L``, an upper bound, plus the harmonizer) is
  trained, all alive together.
* ``fedgh``, ``fedas``: global ``F``, plus each client's own model ``F``, kept
  across rounds, trained; ``fedas`` with ``align`` also a copy of the extractor
  per client being aligned (counted ``F``, an upper bound), trained, all alive
  together, and with ``fisher: diagonal`` a Fisher estimate per parameter per
  client (``F``'s parameters), not trained.
* ``multisfl``: global ``F``, ``K`` branches ``F`` (``num_branches``, default
  ``min(4, N)``), trained, plus a client-side copy ``C(cut)`` per client, trained.
* ``mergesfl``: as ``splitfed_v2`` (one shared server side); ``mu_splitfed``: as
  ``splitfed_v1`` (per-client server-side copies).
* ``training.fuse_clients`` (without a round deadline): the clients' trained copies
  once more, stacked in the fused network (:class:`sflsim.models.fused.FusedClients`):
  ``sum n_g (C(l_g) + E(l_g))`` for the Hetero-SplitEE family, ``N F`` for the FedAvg
  family and SplitFed V1 (an upper bound: clients fuse in groups of one batch size),
  trained; FedProx (``mu > 0``) also its anchors, the global model ``N`` times, not
  trained; and the fused step's graph, every client's step at once.

Cut layers: the groups' end layers under the ``static`` split policy, else the
deepest candidate (default ``L - 1``), an upper bound.

Per trained element: its gradient (one element; ``zero_grad(set_to_none=True)``
runs before backward, so gradients stay allocated after each step; for the
algorithms in ``_FREES_GRADIENTS``, which free them after the step, only the
largest single copy's) and the
optimizer state: Adam 2 elements (``exp_avg``, ``exp_avg_sq``), SGD with
momentum 1, plain SGD 0 (``torch.optim``).

Activations: ``a_k`` the per-sample elements of stage ``k``'s output (one
forward of one sample); a training step through stages ``i..j`` keeps about
``ACTIVATION_FACTOR * sum(a_i..a_j) * batch`` elements for backward (the stage
outputs plus the tensors inside their blocks, as in
:func:`sflsim.runner.check_memory`). Every knob that sizes what is held at once
counts, ``batch`` being ``training.batch_size`` unless said otherwise (the FedAS
alignment, FedBABU fine-tuning and FedSGA probe steps use it too). One
whole-model step is counted; the SplitFed family (``splitfed_v1/v2``,
``fedsga``, ``multisfl``, ``mu_splitfed``) keeps every client's client-side graph
alive while it waits for the activation gradients, so ``N`` client-side graphs;
MergeSFL's clients' batches add up to one merged batch of
``algorithm.total_batch_size`` samples (default ``N`` batches), which the server
trains on at once, so a whole-model graph for the clients' batches and one for the
merged batch; the Hetero-SplitEE family queues detached activations at the
server, at least one batch per client. Evaluation (and the early-exit passes)
runs between rounds, one ``evaluation.batch_size`` batch of inference at a time, at
most the test samples evaluated (``INFERENCE_FACTOR`` times the largest stage
output): the activations are the
larger of the two. FedSGA's calibration probes keep every client's deeper
interface (the largest stage output up to the deepest candidate, one batch) until
the server has scored it; MultiSFL's replay keeps the replayed samples'
activations at the cut until the branch trains on them: ``replay_fraction_max``
(``replay_fraction`` without ``adaptive_replay``) of the training samples plus
``replay_min_samples`` per branch.

Dataset: held in memory, the bytes of the train and test tensors (exact: uint8
images, int64 labels; an expanded view, the synthetic dataset's one image for every
sample, counts one image), plus the evaluation subset's copy; images on disk
(``dataset.storage``, :func:`sflsim.runner.hold_data`), only the labels, the file
list (:data:`PATH_BYTES` per file) and the decode buffers: one uint8 training
batch per host thread (``training.parallel_clients``) and two evaluation batches
(the one in use and the one decoded ahead). Batches are normalised to float32 one
at a time and are counted with the activations' slack.

Not counted: the Python interpreter, torch itself and its allocator slack,
Python objects per module and tensor, the event trace and cost tables; see
``benchmarks/memory.py`` for how close the estimate comes to a real run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from sflsim.config.scenario import Scenario
from sflsim.data import DatasetSplit
from sflsim.models import StagedBackbone
from sflsim.models.cost import count_flops
from sflsim.text import plural

#: Elements kept for backward per element of a stage's output (see module docstring).
ACTIVATION_FACTOR = 4

#: Elements alive at once per element of the largest stage output in inference (a
#: block's input, kept for its shortcut, and two tensors inside it).
INFERENCE_FACTOR = 3

#: Bytes per listed image file of a dataset kept on disk (a Python str of ~70 characters
#: and its pointer in the path array).
PATH_BYTES = 128

#: Optimizer state elements per parameter element.
_ADAM_STATES, _MOMENTUM_STATES = 2, 1

#: Algorithms whose clients wait with their client-side graph for activation gradients.
_SPLITFED_FAMILY = {"splitfed_v1", "splitfed_v2", "fedsga", "multisfl", "mergesfl",
                    "mu_splitfed"}
#: Algorithms whose steps free their gradients right after ``optimizer.step()``: their
#: trained copies hold no gradients between steps, so only the largest one counts.
_FREES_GRADIENTS: set[str] = {"hetero_splitee_sequential", "hetero_splitee_averaging",
                               "distributed"}
#: Algorithms that train the client-side models the runner builds.
_HETERO_FAMILY = {"hetero_splitee_sequential", "hetero_splitee_averaging", "distributed"}


_NOT_WEIGHTS = ("gradients", "optimizer states", "activations", "dataset")


@dataclass
class MemoryEstimate:
    """Bytes a run needs at its peak, by named contributor (see the module docstring)."""

    contributors: dict[str, int] = field(default_factory=dict)
    #: contributor -> the fields that size it, for the advice of :func:`check_fits`
    sized_by: dict[str, str] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.contributors.values())

    def largest(self) -> tuple[str, int]:
        """(name, bytes) of the largest contributor."""
        return max(self.contributors.items(), key=lambda kv: kv[1])

    def largest_copies(self) -> tuple[str, int]:
        """(name, bytes) of the largest group of model weights (whose gradients and
        optimizer states are counted under those names)."""
        return max(((k, v) for k, v in self.contributors.items() if k not in _NOT_WEIGHTS),
                   key=lambda kv: kv[1])

    def describe(self) -> str:
        """One line per contributor, largest first, in MiB."""
        return "\n".join(f"{name}: {n / 2**20:.1f} MiB" for name, n in
                         sorted(self.contributors.items(), key=lambda kv: -kv[1]))


def _sizes(module: nn.Module) -> tuple[int, int]:
    """(bytes of parameters and buffers, bytes of parameters) of ``module``."""
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    return params + sum(b.numel() * b.element_size() for b in module.buffers()), params


def _total(*pairs: tuple[int, int], times: int = 1) -> tuple[int, int]:
    """The sum of ``(bytes of parameters and buffers, bytes of parameters)`` pairs,
    ``times`` over."""
    return (times * sum(p[0] for p in pairs), times * sum(p[1] for p in pairs))


@dataclass
class _Pieces:
    """The sizes of the backbone's pieces, each a pair (bytes of parameters and buffers,
    bytes of parameters), and the device groups' end layers (the module docstring's
    notation: ``C(l)``, ``E(l)``, ``S(l)``, ``F``)."""

    #: per stage
    stage: list[tuple[int, int]]
    #: the output layer
    head: tuple[int, int]
    #: ``(end layer, clients)`` of each device group (:func:`end_layer_counts`)
    groups: list[tuple[int, int]]
    #: end layer -> its exit head, ``E(l)``
    exit_heads: dict[int, tuple[int, int]]
    #: bytes per element
    size: int
    #: ``L``
    num_stages: int

    @classmethod
    def of(cls, scenario: Scenario, backbone: StagedBackbone) -> _Pieces:
        """Builds each exit head at most once (one per distinct end layer)."""
        L = backbone.num_stages
        size = next(backbone.stages.parameters()).element_size()
        stage = [_sizes(s) for s in backbone.stages]
        head = _sizes(backbone.head)
        groups = end_layer_counts(scenario)
        exit_heads = {end: _sizes(backbone.exit_head(end)) for end in {e for e, _ in groups}}
        return cls(stage, head, groups, exit_heads, size, L)

    @property
    def full(self) -> tuple[int, int]:  # F
        return _total(*self.stage, self.head)

    def client(self, end: int) -> tuple[int, int]:  # C(l)
        return _total(*self.stage[:end])

    def server(self, end: int) -> tuple[int, int]:  # S(l)
        return _total(*self.stage[end:], self.head)


def _optimizer_states(scenario: Scenario) -> int:
    opt = scenario.training.optimizer
    if opt.name == "adam":
        return _ADAM_STATES
    return _MOMENTUM_STATES if opt.momentum > 0 else 0


def _stage_activations(backbone: StagedBackbone) -> list[int]:
    """Per-sample output elements of every stage: the output shapes
    :func:`~sflsim.models.cost.count_flops` finds on PyTorch's ``meta`` device (no kernel
    runs; the backbone's device, layout, mode and BatchNorm statistics do not matter and
    are not touched), counted once per piece and process and kept on disk."""
    shape, out = tuple(backbone.input_shape), []
    for stage in backbone.stages:
        shape = count_flops(stage, shape, backward=False).output_shape
        out.append(math.prod(shape))
    return out


def end_layer_counts(scenario: Scenario) -> list[tuple[int, int]]:
    """``(end layer, clients)`` of each device group, or of each end layer of a fleet."""
    if scenario.fleet is not None:
        import numpy as np

        from sflsim.fleet import load_fleet

        ends = load_fleet(scenario.fleet).end_layers(scenario.fleet_end_layer or 1)
        values, counts = np.unique(ends, return_counts=True)
        return list(zip(values.tolist(), counts.tolist()))
    return [(g.end_layer, g.count) for g in scenario.devices.values()]


def _cuts(scenario: Scenario, num_stages: int) -> dict[int, int]:
    """``{cut layer: clients}`` the SplitFed family uses (static: the groups' end layers;
    otherwise the deepest candidate for everyone, an upper bound)."""
    algo = scenario.algorithm
    split = getattr(algo, "split", None)
    name = split if isinstance(split, str) else getattr(split, "name", "static")
    candidates = getattr(algo, "candidates", None) or getattr(split, "candidates", None)
    if name == "static":
        out: dict[int, int] = {}
        for end, count in end_layer_counts(scenario):
            out[end] = out.get(end, 0) + count
        return out
    return {max(candidates or range(1, num_stages)): scenario.num_clients}


def _fused(scenario: Scenario) -> bool:
    """Whether the clients are fused (``training.fuse_clients`` without a round deadline)."""
    return scenario.training.fuse_clients and scenario.conditions.round_deadline_s is None


def estimate_memory(scenario: Scenario, backbone: StagedBackbone, data: DatasetSplit,
                    *, on_disk: bool | None = None) -> MemoryEstimate:
    """Peak bytes of ``scenario``'s run (formula and sources: the module docstring).

    Builds each exit head at most once (one per distinct end layer) and nothing
    per client.

    Args:
        on_disk: count the images as decoded per batch (True) or held in memory
            (False; images still on disk count as if decoded); default: as ``data``
            holds them.
    """
    algo = scenario.algorithm.name
    # every count below is a pair: (bytes of parameters and buffers, bytes of parameters)
    pieces = _Pieces.of(scenario, backbone)
    models, trained = _model_copies(scenario, backbone, pieces)
    trained_bytes = sum(p for _, p in trained)

    contributors = {name: v[0] for name, v in models.items()}
    contributors["gradients"] = (max(p for _, p in trained) if algo in _FREES_GRADIENTS
                                 else trained_bytes)
    contributors["optimizer states"] = trained_bytes * _optimizer_states(scenario)

    acts = _stage_activations(backbone)
    kept = scenario.evaluation.max_test_samples
    evaluated = min(len(data.y_test), kept) if kept else len(data.y_test)
    contributors["activations"], sized_by = _activations(scenario, pieces, acts, evaluated)
    waiting, waiting_sized_by = _waiting_activations(scenario, data, pieces, acts)
    contributors.update(waiting)
    sized_by.update(waiting_sized_by)

    contributors["dataset"] = dataset_bytes(scenario, data,
                                            data.on_disk if on_disk is None else on_disk)
    return MemoryEstimate(contributors, sized_by)


def _model_copies(scenario: Scenario, backbone: StagedBackbone, p: _Pieces
                  ) -> tuple[dict[str, tuple[int, int]], list[tuple[int, int]]]:
    """The model copies ``scenario``'s algorithm keeps, by name, and those trained (an
    optimizer steps them: their gradients and optimizer states count)."""
    algo, n = scenario.algorithm.name, scenario.num_clients
    full, groups, exit_heads, client, server = p.full, p.groups, p.exit_heads, p.client, p.server
    client_models = _total(*(_total(client(e), exit_heads[e], times=k) for e, k in groups))

    models = {"backbone": full, f"client-side models ({plural(n, 'client')})": client_models}
    trained = [client_models] if algo in _HETERO_FAMILY else []
    if algo == "hetero_splitee_sequential":
        models["server-side model (shared)"] = server(min(e for e, _ in groups))
    elif algo in ("hetero_splitee_averaging", "distributed"):
        models[f"server-side copies ({n})"] = _total(*(_total(server(e), times=k)
                                                         for e, k in groups))
    elif algo == "centralized":
        ends = sorted(exit_heads)
        models[f"centralized models ({len(ends)})"] = _total(*(_total(full, exit_heads[e])
                                                                for e in ends))
    else:
        models["global model"] = full
        _copies_beside_global_model(scenario, backbone, p, models, trained)
    if _fused(scenario):  # the clients' trained copies once more, stacked in the fused network
        models[f"fused client copies ({n})"] = (client_models if algo in _HETERO_FAMILY
                                                else _total(full, times=n))
        if algo == "fedprox" and scenario.algorithm.mu > 0:  # the global model, K times
            models[f"fused proximal anchors ({n})"] = _total(full, times=n)
    trained += [v for name, v in models.items()
                if name not in ("backbone", "global model", "global server-side stages and harmonizer",
                                "last global update")
                and not name.startswith(("client-side models", "per-client Fisher",
                                         "fused proximal anchors"))]
    return models, trained


def _copies_beside_global_model(scenario: Scenario, backbone: StagedBackbone, p: _Pieces,
                                models: dict[str, tuple[int, int]],
                                trained: list[tuple[int, int]]) -> None:
    """Add to ``models`` the copies an algorithm with a global model keeps beside it (the
    FedAvg and SplitFed families, FedSGA, FedGH, FedAS, MultiSFL), and to ``trained``
    a global model its server optimizer trains."""
    algo, n, L, size = scenario.algorithm.name, scenario.num_clients, p.num_stages, p.size
    full, stage, client = p.full, p.stage, p.client
    cuts = _cuts(scenario, L)
    per_client = _total(*(_total(client(c), times=k) for c, k in cuts.items()))
    if scenario.algorithm.supports("whole_model"):
        models[f"per-client model copies ({n})"] = _total(full, times=n)
        if algo == "fedmut":
            models["last global update"] = full
    elif algo in ("splitfed_v1", "mu_splitfed"):
        models[f"per-client client- and server-side copies ({n})"] = _total(full, times=n)
    elif algo in ("splitfed_v2", "mergesfl"):
        models[f"per-client client-side copies ({n})"] = per_client
        trained.append(full)
    elif algo == "fedsga":
        deepest = max(getattr(scenario.algorithm, "candidates", None) or range(1, L))
        models[f"per-client client-side copies ({n})"] = _total(client(deepest), times=n)
        harmonizer = _harmonizer_elements(scenario, backbone) * size
        stages = _total(*stage[1:]) if getattr(scenario.algorithm, "server_backbone", True) \
            else (0, 0)
        server_side = _total(stages, (harmonizer, harmonizer))
        if getattr(scenario.algorithm, "server_update", "sequential") == "per_client":
            models["global server-side stages and harmonizer"] = server_side
            models[f"per-client server-side copies ({n})"] = _total(server_side, times=n)
        else:
            models["server-side stages and harmonizer"] = server_side
    elif algo in ("fedgh", "fedas"):
        models[f"per-client personalised models ({n})"] = _total(full, times=n)
        if algo == "fedas" and scenario.algorithm.align:
            models[f"per-client aligned extractor copies ({n})"] = _total(full, times=n)
        if algo == "fedas" and scenario.algorithm.fisher == "diagonal":
            models[f"per-client Fisher diagonals ({n})"] = (full[1] * n, 0)
    elif algo == "multisfl":
        k = getattr(scenario.algorithm, "num_branches", None) or min(4, n)
        models[f"branch models ({k})"] = _total(full, times=k)
        models[f"per-client client-side copies ({n})"] = per_client


def _activations(scenario: Scenario, p: _Pieces, acts: list[int], evaluated: int
                 ) -> tuple[int, dict[str, str]]:
    """Bytes of the activations held at once, the larger of the training steps' graphs
    and an evaluation batch's (at most the ``evaluated`` test samples), and the field that
    sizes them (``{"activations": field}``)."""
    algo, n, L, size, groups = (scenario.algorithm.name, scenario.num_clients, p.num_stages,
                                p.size, p.groups)
    batch = scenario.training.batch_size
    graph = ACTIVATION_FACTOR * sum(acts) * batch * size  # one whole-model training step
    if algo == "mergesfl":  # one merged server batch, the clients' batches adding up to it
        merged = scenario.algorithm.total_batch_size or batch * n
        graph = 2 * ACTIVATION_FACTOR * sum(acts) * merged * size
    elif algo in _SPLITFED_FAMILY:
        graph += sum(k * ACTIVATION_FACTOR * sum(acts[:c]) * batch * size
                     for c, k in _cuts(scenario, L).items())
    elif algo in _HETERO_FAMILY:
        graph += sum(k * acts[e - 1] * batch * size for e, k in groups)
    training = scenario.training
    graph *= min(training.parallel_clients, n)  # a step in flight per host thread
    if _fused(scenario):  # one step of every client at once
        graph += sum(k * ACTIVATION_FACTOR * sum(acts[:e if algo in _HETERO_FAMILY else L])
                     * batch * size for e, k in groups)
    # evaluation (and the early-exit passes) between rounds: one batch of inference
    evaluation = INFERENCE_FACTOR * max(acts) * min(scenario.evaluation.batch_size,
                                                    max(evaluated, 1)) * size
    sized_by = {"activations": "evaluation.batch_size" if evaluation > graph else
                ("algorithm.total_batch_size" if algo == "mergesfl" else "training.batch_size")
                + (" or training.parallel_clients" if training.parallel_clients > 1 else "")}
    return max(graph, evaluation), sized_by


def _waiting_activations(scenario: Scenario, data: DatasetSplit, p: _Pieces, acts: list[int]
                         ) -> tuple[dict[str, int], dict[str, str]]:
    """Activations kept while they wait (FedSGA's calibration probes, MultiSFL's replay,
    a round of the Hetero-SplitEE family trained ahead of the server), by name, and the
    fields that size them."""
    algo, n, L, size, groups = (scenario.algorithm.name, scenario.num_clients, p.num_stages,
                                p.size, p.groups)
    batch, training = scenario.training.batch_size, scenario.training
    contributors: dict[str, int] = {}
    sized_by: dict[str, str] = {}
    if algo == "fedsga" and round_calibrates(scenario):  # every client's h_ref waits
        deepest = max(getattr(scenario.algorithm, "candidates", None) or range(1, L))
        contributors["calibration probe activations"] = n * max(acts[:deepest]) * batch * size
        sized_by["calibration probe activations"] = "training.batch_size"
    if algo == "multisfl" and scenario.algorithm.replay:  # replayed activations wait
        cfg = scenario.algorithm
        k = cfg.num_branches or min(4, n)
        fraction = cfg.replay_fraction_max if cfg.adaptive_replay else cfg.replay_fraction
        samples = fraction * len(data.y_train) + k * (
            cfg.replay_min_samples if cfg.replay_min_samples is not None else data.num_classes)
        cut = max(_cuts(scenario, L))
        contributors["replay activations"] = int(min(samples, k * len(data.y_train))
                                                 * acts[cut - 1] * size)
        sized_by["replay activations"] = ("algorithm.replay_fraction_max" if cfg.adaptive_replay
                                          else "algorithm.replay_fraction")
    ahead = (training.fuse_clients or training.parallel_clients > 1) and \
        scenario.conditions.round_deadline_s is None
    if algo in _HETERO_FAMILY and ahead:  # a whole round's activations wait for the server
        samples = len(data.y_train) / n * training.local_epochs  # per client, on average
        contributors["activations trained ahead (one round)"] = int(
            sum(k * samples * acts[e - 1] * size for e, k in groups))
    return contributors, sized_by


def round_calibrates(scenario: Scenario) -> bool:
    """Whether FedSGA's calibration probes run (the sufficiency split with its estimator)."""
    cfg = scenario.algorithm
    return getattr(cfg, "split", None) == "sufficiency" and getattr(cfg, "sufficiency", False)


def dataset_bytes(scenario: Scenario, data: DatasetSplit, on_disk: bool) -> int:
    """Bytes the dataset takes during the run (see the module docstring)."""
    n_train, n_test = len(data.y_train), len(data.y_test)
    labels = (n_train + n_test) * data.y_train.element_size()
    image = data.image_bytes  # uint8
    kept = scenario.evaluation.max_test_samples
    if on_disk:
        training = scenario.training
        threads = min(training.parallel_clients, scenario.num_clients)
        batches = threads * training.batch_size + 2 * scenario.evaluation.batch_size
        return labels + (n_train + n_test) * PATH_BYTES + batches * image
    # an expanded view (the synthetic dataset's one image, every sample) holds one image
    held = sum(1 if n and isinstance(x, torch.Tensor) and x.stride(0) == 0 else n
               for x, n in ((data.x_train, n_train), (data.x_test, n_test)))
    dataset = labels + held * image
    if kept and kept < n_test:  # run_scenario copies the evaluation subset
        dataset += kept * (image + data.y_test.element_size())
    return dataset


def _harmonizer_elements(scenario: Scenario, backbone: StagedBackbone) -> int:
    """Parameters of FedSGA's harmonizer (per-cut input layers, depth embedding, MLP, head)."""
    cfg, L = scenario.algorithm, backbone.num_stages
    d = getattr(cfg, "projector_dim", 64)
    last = backbone.stage_output_dim(L)
    dims = [last if getattr(cfg, "server_backbone", True) else backbone.stage_output_dim(p)
            for p in range(1, L)]
    return (sum(c * d + d for c in dims) + L * d + 2 * (d * d + d)
            + d * backbone.num_classes + backbone.num_classes)
