"""Evaluation is a measurement: it changes no tensor of any model and no module's mode.

For every registered algorithm (:data:`sflsim.algorithms.ALGORITHMS`, so a new
algorithm is covered without touching this file): run one tiny round, snapshot
every parameter and buffer (BatchNorm running statistics included) of every
model the algorithm holds and every module's ``training`` flag, then call
``evaluate`` and, where the algorithm has exit heads, the early-exit passes and
threshold sweep; nothing may change, bit for bit.

Every ``torch.Generator`` reachable the same way (batch order, augmentation) must keep
its state too: training runs with augmentation, and an evaluation that fine-tunes
(FedBABU) must not draw from the generators training draws from.

Before the snapshot a few modules are put in eval mode by hand, so that a helper
which "restores" by calling ``.train()`` on everything (instead of each module's
own previous mode) is caught too.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from sflsim.algorithms import ALGORITHMS, early_exit
from sflsim.config import validate_scenario
from sflsim.runner import run_scenario

#: Algorithm settings beyond ``{"name": ...}`` that keep a tiny 3-client run tiny: FedBABU
#: fine-tunes for one epoch before each evaluation, not its default 5 (the fine-tuning,
#: and its draws, are exercised all the same).
ALGORITHM_SETTINGS: dict[str, dict] = {"fedbabu": {"finetune_epochs": 1}}


def _holdings(root: object) -> tuple[dict[str, nn.Module], dict[str, torch.Tensor]]:
    """Every ``nn.Module`` and loose tensor reachable from ``root``'s attributes through
    dicts, lists, tuples, sets and dataclasses (clients), named by their path."""
    modules: dict[str, nn.Module] = {}
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()

    def walk(obj: object, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 6:
            return
        seen.add(id(obj))
        if isinstance(obj, nn.Module):
            modules[path] = obj
        elif isinstance(obj, torch.Tensor):
            if obj.device.type != "meta":
                tensors[path] = obj
        elif isinstance(obj, torch.Generator):  # batch order, augmentation: its state now
            tensors[path] = obj.get_state()
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}[{k!r}]", depth + 1)
        elif isinstance(obj, (list, tuple, set)):
            for k, v in enumerate(obj):
                walk(v, f"{path}[{k}]", depth + 1)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name), f"{path}.{f.name}", depth + 1)

    for name, value in vars(root).items():
        if name != "ctx":  # the context: data, simulation; its models are walked below
            walk(value, name, 0)
    walk(root.ctx.clients, "clients", 0)
    walk(root.ctx.backbone, "backbone", 0)
    return modules, tensors


def _snapshot(alg: object) -> tuple[dict[str, torch.Tensor], dict[str, bool]]:
    modules, loose = _holdings(alg)
    values = {name: t.detach().clone() for name, t in loose.items()}
    modes = {}
    for name, module in modules.items():
        for key, t in [*module.named_parameters(), *module.named_buffers()]:
            values[f"{name}.{key}"] = t.detach().clone()
        for key, sub in module.named_modules():
            modes[f"{name}/{key}"] = sub.training
    return values, modes


def _changes(before: tuple[dict, dict], after: tuple[dict, dict]) -> list[str]:
    (values0, modes0), (values1, modes1) = before, after
    changed = [k for k, v in values0.items()
               if k not in values1 or v.shape != values1[k].shape
               or not torch.equal(v, values1[k])]
    changed += [f"mode of {k}: {m} -> {modes1.get(k)}" for k, m in modes0.items()
                if modes1.get(k) != m]
    return changed


def _mix_modes(alg: object) -> None:
    """Put some submodules of every held model in eval mode (a mixed state to restore)."""
    modules, _ = _holdings(alg)
    for module in modules.values():
        subs = list(module.modules())
        for sub in subs[1::3]:  # every third submodule, its children following it
            sub.eval()


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_evaluation_changes_no_tensor_and_no_mode(tiny, name):
    tiny["algorithm"] = {"name": name, **ALGORITHM_SETTINGS.get(name, {})}
    tiny["training"]["rounds"] = 1
    tiny["evaluation"]["early_exit"] = {"samples_per_client": 4, "tau_step": 1.0}
    # augmented training: evaluation must not draw from the training generators either
    tiny["dataset"]["augment"] = {"random_crop_padding": 2, "horizontal_flip": True}
    scenario = validate_scenario(tiny)
    alg = run_scenario(scenario).algorithm
    data = alg.ctx.data
    x, y = data.x_test[:64], data.y_test[:64]
    batch = 32

    _mix_modes(alg)
    before = _snapshot(alg)
    assert before[0], "found no tensor to watch"
    accs = alg.evaluate(x, y, batch)
    assert set(accs) == {c.client_id for c in alg.ctx.clients}
    changed = _changes(before, _snapshot(alg))
    assert not changed, f"{name}.evaluate changed {len(changed)}: {changed[:8]}"

    if all(early_exit.exit_models(alg, c) is not None for c in alg.ctx.clients):
        _, passes = early_exit.test_passes(alg, x, y, batch)
        early_exit.early_exit_table(alg, x, y, batch, scenario.evaluation.early_exit, passes)
        early_exit.early_exit_table(alg, x, y, batch, scenario.evaluation.early_exit)
        changed = _changes(before, _snapshot(alg))
        assert not changed, f"{name} early-exit sweep changed {len(changed)}: {changed[:8]}"
