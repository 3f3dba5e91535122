"""The scenario as a run uses it: every default that depends on something else filled in.

Some fields mean "work it out" when left out (null). :func:`resolve_scenario`
fills each with the value the run uses, and the run is built from the result,
so the ``scenario.yaml`` written into a run directory documents the run and
runs it again as it ran:

- ``server.slots``: the server profile's ``slots``;
- ``algorithm.server_lr_divisor`` (Sequential): the number of clients that train each
  round (``training.clients_per_round``, else all);
- ``fleet`` (its absolute path, as a trace's) and ``fleet_end_layer`` (1);
- ``conditions.availability`` and ``network.traces``: each trace's absolute path (a
  relative one is looked for beside the scenario file, in the working directory, then
  among the shipped scenarios), so the stored scenario runs again from any folder;
- ``algorithm.split.candidates`` (SplitFed, MultiSFL) and ``algorithm.candidates``
  (FedSGA): every cut of the model, 1 to stages - 1;
- ``algorithm.reference_split`` (FedSGA): the middle candidate;
- ``algorithm.num_branches`` (MultiSFL): min(4, clients); ``replay_min_samples``:
  the dataset's number of classes;
- ``algorithm.header_lr`` (FedGH): ``training.optimizer.lr``;
- ``model.patch_size``, ``depth``, ``hidden_dim``, ``heads`` (ViT): the builder's
  defaults (:data:`~sflsim.config.schema.ModelConfig.VIT_DEFAULTS`);
- ``dataset.image_size`` (tiny_imagenet, domainnet): 64; ``dataset.domains``
  (domainnet): all six, in DomainNet's order.

Left null on purpose, because null is itself the setting or a rule the file
states better than a number: ``round_deadline_s`` (no deadline),
``max_test_samples`` and ``samples_per_client`` (all), ``max_assistants`` (no
cap), ``backhaul`` (no link), ``data_root`` (the dataset's default folder on the
machine that runs it), ``image_folder``'s ``image_size`` and ``channels`` (the
images' own, read from its files) and MultiSFL's ``replay_min_samples`` on it (its
classes, its folders), ``seeds`` (a stream left null follows ``seed``, so
changing ``seed`` in a copy of the file still changes every stream;
``manifest.json`` lists the seeds used) and ``model.mlp_dim`` (4 x the token
width after ``width``, which no ``mlp_dim`` reproduces at every width).

Resolving is idempotent, so a resolved scenario and the scenario it came from
resolve to the same thing: sweeps and resume compare scenarios resolved.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from sflsim.config.scenario import Scenario
from sflsim.config.schema import DOMAINNET_DOMAINS, DatasetConfig, ModelConfig
from sflsim.errors import SflsimError


def resolve_scenario(scenario: Scenario) -> Scenario:
    """``scenario`` with every run-time default filled in (see the module docstring).

    Raises:
        ConfigError: the server profile does not exist.
    """
    from sflsim.hardware import profiles

    data = scenario.model_dump()
    server, alg, model, dataset = data["server"], data["algorithm"], data["model"], data["dataset"]
    if dataset["name"] in DatasetConfig.RESIZABLE and dataset["image_size"] is None:
        dataset["image_size"] = DatasetConfig.RESIZABLE[dataset["name"]]
    if dataset["name"] == "domainnet" and dataset["domains"] is None:
        dataset["domains"] = list(DOMAINNET_DOMAINS)
    if server["slots"] is None:
        server["slots"] = profiles.server_profile(scenario.server.profile).slots
    cuts = list(range(1, num_stages(scenario.model)))
    name = alg["name"]
    if name == "hetero_splitee_sequential" and alg["server_lr_divisor"] is None:
        alg["server_lr_divisor"] = float(scenario.training.participants(scenario.num_clients))
    from sflsim.shipped import trace_path

    if data["conditions"]["availability"] is not None:
        data["conditions"]["availability"] = str(trace_path(data["conditions"]["availability"]))
    if data["fleet"] is not None:  # sflsim.fleet: a file, found as a trace is
        data["fleet"] = str(trace_path(data["fleet"]))
        data["fleet_end_layer"] = data["fleet_end_layer"] or 1
    traces = data["network"]["traces"]
    for key, path in traces.items():
        traces[key] = str(trace_path(path))
    if (name in ("splitfed_v1", "splitfed_v2", "multisfl", "mergesfl", "mu_splitfed")
            and alg["split"]["candidates"] is None):
        alg["split"]["candidates"] = cuts or None
    if name == "multisfl":
        if alg["num_branches"] is None:
            alg["num_branches"] = min(4, scenario.num_clients)
        if alg["replay_min_samples"] is None:
            alg["replay_min_samples"] = scenario.dataset.num_classes
    if name == "fedsga" and alg["candidates"] is None and len(cuts) >= 2:
        alg["candidates"] = cuts
    if name == "fedsga" and alg["reference_split"] is None and alg["candidates"] is not None:
        candidates = sorted(alg["candidates"])
        alg["reference_split"] = candidates[len(candidates) // 2]
    if name == "fedgh" and alg["header_lr"] is None:
        alg["header_lr"] = scenario.training.optimizer.lr
    if model["name"] == "vit":
        for field, default in ModelConfig.VIT_DEFAULTS.items():
            if model[field] is None:
                model[field] = default
    resolved = Scenario.model_validate(data)
    return scenario if resolved == scenario else resolved


#: what :func:`resolved_dump` puts where a stored scenario lacks a field of
#: :data:`BEHAVIOUR_FIELDS`
ABSENT = "(absent: written by an sflsim without this field)"
#: Fields added with a default that changes what a run does: a stored scenario without
#: one was run by an sflsim that did otherwise. (A field added with a default that keeps
#: what runs did before, e.g. ``dataset.augment: null``, is not listed: runs written
#: before it still compare equal.)
BEHAVIOUR_FIELDS = frozenset(f"algorithm.{name}" for name in (
    "backbone", "probe", "harmonizer", "projector", "phi_s", "descriptor", "prototypes",
    "depth_embedding", "prototype_update", "bn_statistics", "zo_client_lr",
    "test_distribution")) | {"energy"}


def resolved_dump(data: Mapping[str, Any], *, stored: bool = False) -> dict[str, Any] | None:
    """A scenario mapping (a ``scenario.yaml``, a checkpoint's copy) validated, resolved and
    dumped as JSON-like data, for comparing runs; None if it is not a valid scenario.

    ``stored``: ``data`` is what a run wrote (every field of its scenario), so a field it
    lacks did not exist in the sflsim that wrote it; where today's default is not what that
    run did (:data:`BEHAVIOUR_FIELDS`) the field reads :data:`ABSENT`, so the run never
    compares equal to one made today (sweeps rerun it, the harness does not reuse it,
    resume names the field)."""
    try:
        dump = resolve_scenario(Scenario.model_validate(data)).model_dump(mode="json")
    except (ValidationError, SflsimError, TypeError, ValueError):
        return None
    if stored:
        _mark_absent(data, dump)
    return dump


def _mark_absent(stored: Mapping[str, Any], dump: dict[str, Any], prefix: str = "") -> None:
    for key, value in dump.items():
        path = prefix + key
        if key not in stored:
            if path in BEHAVIOUR_FIELDS:
                dump[key] = ABSENT
        elif isinstance(value, dict) and isinstance(stored[key], Mapping):
            _mark_absent(stored[key], value, path + ".")


#: Stages of the built-in backbones (``vit``: ``depth + 1``), known without building one
#: (and so without torch); ``tests/test_backbones.py`` checks them against the builders.
BUILTIN_STAGES = {"hetero_splitee_resnet": 6, "resnet18": 5, "small_cnn": 2, "resnet34": 5,
                  "resnet50": 5, "mobilenet_v2": 5, "mobilenet_v3_small": 5,
                  "efficientnet_b0": 5, "shufflenet_v2_x1_0": 4, "vgg11": 5, "vgg5": 6,
                  "vit_b_16": 13}


@functools.cache
def num_stages(model: ModelConfig) -> int:
    """Stages of ``model``'s backbone (cut layers are 1 to this - 1): for the built-in
    backbones from :data:`BUILTIN_STAGES`, else from a tiny copy (which imports torch)."""
    if model.name in BUILTIN_STAGES:
        return BUILTIN_STAGES[model.name]
    if model.name == "vit":
        return (model.depth or ModelConfig.VIT_DEFAULTS["depth"]) + 1
    import sflsim.models  # noqa: F401  (fills the registry)
    from sflsim.models.registry import MODELS

    kwargs = model.builder_kwargs()
    size = kwargs.get("patch_size", 32)
    try:
        tiny = MODELS[model.name](in_channels=1, image_size=size, num_classes=2, width=0.0625,
                                  **kwargs)
    except ValueError:  # a model without a width multiplier: its own width
        tiny = MODELS[model.name](in_channels=1, image_size=size, num_classes=2,
                                  width=model.width, **kwargs)
    return tiny.num_stages
