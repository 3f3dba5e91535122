"""The times of the steps a run prices by stage: a measured ``stage_latency`` table of
the device's profile, or the cost model by operation (``hardware.cost_model:
operators``, for a profile with ``operator_costs``).

Worked out here from the model as the scenario defines it: the check builds the
backbone, counts each stage's operators (:func:`sflsim.models.ops.count_ops`) and
prices them with the cost model's
own formulas (:mod:`sflsim.hardware.operator_cost`), or interpolates the profile's
table by batch size as :mod:`sflsim.hardware.latency` documents it, with its own
arithmetic. The steps so priced: a Hetero-SplitEE client step (``client_train``:
forward, backward and update of stages ``1..end_layer`` and its exit head), a split
step's client forward (``client_forward``, of stages ``1..cut``, possibly several
passes) and backward (``client_backward``: backward and update) and a zeroth-order
update (``client_update``). A step's batch is not recorded: its time must be that of
some batch (from one sample to the most a client's batch can hold).
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from sflsim.checks.checked_run import Run
from sflsim.checks.report import close, g

#: per activity: (directions priced, whether its time depends on the batch)
PRICED = {
    "client_train": (("forward", "backward", "update", "exit_head"), True),
    "client_forward": (("forward",), True),
    "client_backward": (("backward", "update"), True),
    "client_update": (("update",), False),
}
#: passes a priced forward may hold (a zeroth-order step's perturbed forwards)
MAX_PASSES = 16


class StageTimes:
    """Stage-priced step times of one run (see the module docstring)."""

    def __init__(self, run: Run, shape: tuple[int, ...], num_classes: int) -> None:
        self.run, self.shape, self.num_classes = run, shape, num_classes
        m = run.scenario.model
        self.tabled = {d.client_id for d in run.hw.devices if _tables(d, m, shape)}
        self.operators = {d.client_id for d in run.hw.devices
                          if run.hw.cost_model == "operators" and d.operator_costs is not None
                          and d.client_id not in self.tabled}
        self._cache: dict[tuple, np.ndarray] = {}

    @classmethod
    def for_run(cls, run: Run) -> StageTimes | None:
        """The run's stage-priced times, None when no device is priced by stage."""
        uses_tables = any(d.stage_latency for d in run.hw.devices)
        uses_ops = run.hw.cost_model == "operators" and any(
            d.operator_costs is not None for d in run.hw.devices)
        if not (uses_tables or uses_ops):
            return None
        cached = getattr(run, "_stage_times", None)
        if cached is None:
            shape, classes = input_of(run)
            cached = run._stage_times = cls(run, shape, classes)  # type: ignore[attr-defined]
        return cached

    @cached_property
    def backbone(self):
        from sflsim.models import MODELS

        m = self.run.scenario.model
        return MODELS[m.name](in_channels=self.shape[0], image_size=self.shape[-1],
                              num_classes=self.num_classes, width=m.width, seed=0,
                              **m.builder_kwargs())

    def priced(self, cid: int) -> bool:
        return cid in self.tabled or cid in self.operators

    def explains(self, i: int, took: float, slowdown: float) -> bool:
        """Whether event ``i``'s duration ``took`` is the stage-priced time of a step of
        some batch size (and, for a forward, some number of passes); one cut off took no
        longer than the longest such step."""
        run = self.run
        cid, activity = int(run.owner[i]), run.activity[i]
        if not self.priced(cid) or activity not in PRICED:
            return False
        directions, counted = PRICED[activity]
        times = self._times(cid, self._layer(i), directions) * slowdown
        passes = MAX_PASSES if activity == "client_forward" else 1
        if run.cut[i]:
            return bool(took <= times.max() * passes * (1 + 1e-9) + 1e-12 * run.scale[i])
        if not counted:  # the update alone: the same whatever the batch
            times = times[:1]
        return any(bool(np.any(close(took, times * p, run.scale[i])))
                   for p in range(1, passes + 1))

    def why(self, i: int) -> str:
        """What the stage-priced time of event ``i`` would be, for its message."""
        run = self.run
        cid, activity = int(run.owner[i]), run.activity[i]
        if not self.priced(cid) or activity not in PRICED:
            return ""
        source = "its stage_latency table" if cid in self.tabled else "the cost model by operation"
        directions, _ = PRICED[activity]
        times = self._times(cid, self._layer(i), directions) * run.slowdown.get(
            (int(run.rnd[i]), cid), 1.0)
        b = run.scenario.training.batch_size
        return (f"; nor is it {source}'s time of any batch: from {g(times[0])} s for 1 sample "
                f"to {g(times[min(b, len(times)) - 1])} s for {b}")

    def _times(self, cid: int, layer: int, directions: tuple[str, ...]) -> np.ndarray:
        """Stage-priced seconds of ``directions`` at ``layer`` on client ``cid``'s device
        for batches of 1, 2, ... samples, before the slowdown."""
        device = self.run.hw.devices[cid]
        key = (device.profile, cid in self.tabled, layer, directions)
        times = self._cache.get(key)
        if times is None:
            t = self.run.scenario.training
            limit = t.batch_size * max(self.run.n, 8)
            times = self._cache[key] = np.array([self.seconds(cid, layer, n, directions)
                                                 for n in range(1, limit + 1)])
        return times

    def _layer(self, i: int) -> int:
        run = self.run
        cid = int(run.owner[i])
        if run.activity[i] == "client_train":
            return run.device(cid).end_layer
        cut = run.cut_layer.get((int(run.rnd[i]), cid), math.nan)
        return int(cut) if cut == cut else run.device(cid).end_layer

    def seconds(self, cid: int, layer: int, batch: int, directions: tuple[str, ...]) -> float:
        """Seconds of ``directions`` of stages ``1..layer`` at ``batch`` on client ``cid``'s
        device, before its slowdown."""
        device = self.run.hw.devices[cid]
        if cid in self.tabled:
            m = self.run.scenario.model
            return sum(_table_time(_tables(device, m, self.shape), layer, batch, d)
                       for d in directions)
        return self._ops.seconds(device.operator_costs.params(), layer, batch, directions)

    @cached_property
    def _ops(self) -> _Operators:
        return _Operators(self.backbone, self.run.scenario.training.optimizer)


def input_of(run: Run) -> tuple[tuple[int, ...], int]:
    """The per-sample input shape ``(C, H, W)`` and class count of the run's data: the
    scenario's synthetic images, else the manifest's dataset."""
    ds = run.scenario.dataset
    manifest = (run.tables.manifest or {}).get("dataset") or {}
    classes = int(manifest.get("num_classes") or getattr(getattr(ds, "synthetic", None),
                                                          "num_classes", 10) or 10)
    if ds.name == "synthetic":
        return tuple(int(x) for x in ds.synthetic.image_shape), classes
    return (int(manifest["channels"]), int(manifest["image_size"]),
            int(manifest["image_size"])), classes


def _tables(device, model, shape: tuple[int, ...]) -> list:
    """The device's tables of this model, width and input, one per batch size (the last
    listed wins), by batch size."""
    found = {t.batch_size: t for t in (device.stage_latency or [])
             if t.model == model.name and abs(t.width - model.width) <= 1e-9 * max(1.0, model.width)
             and tuple(t.input) == tuple(shape)}
    return [found[b] for b in sorted(found)]


def _table_time(tables: list, layer: int, batch: int, direction: str) -> float:
    """Seconds of ``direction`` through stages ``1..layer`` (the exit head: after
    ``layer``) at ``batch``, interpolated linearly in batch size between the two nearest
    measured sizes (extrapolated from the two nearest outside them; below the smallest
    never less than it scaled to ``batch``; one size: scaled)."""
    field = {"forward": "forward_s", "backward": "backward_s", "update": "update_s",
             "exit_head": "exit_head_s"}[direction]
    total = 0.0
    for stage in ([layer] if direction == "exit_head" else range(1, layer + 1)):
        points = [(t.batch_size, getattr(t, field)[stage - 1]) for t in tables
                  if getattr(t, field) is not None]
        if not points:
            continue
        if len(points) == 1:
            total += points[0][1] * batch / points[0][0]
            continue
        k = int(np.searchsorted([b for b, _ in points], batch))
        (b0, t0), (b1, t1) = points[min(max(k - 1, 0), len(points) - 2)], \
            points[min(max(k, 1), len(points) - 1)]
        t = t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        if batch < points[0][0]:
            nb, nt = points[0]
            t = max(t, nt * batch / nb)
        total += t
    return total


class _Operators:
    """The backbone's operators per stage and exit head, priced with the cost model's
    formulas (:mod:`sflsim.hardware.operator_cost`)."""

    def __init__(self, backbone, optimizer) -> None:
        from sflsim.hardware.operator_cost import optimizer_kind

        self.backbone = backbone
        self.optimizer = optimizer_kind(optimizer.name, optimizer.momentum)
        self.stages: list = []
        self.heads: dict[int, object] = {}

    def stage(self, k: int):
        from sflsim.models.ops import count_ops

        while len(self.stages) < k:
            j = len(self.stages)
            shape = self.backbone.input_shape if j == 0 else self.stages[j - 1].output_shape
            self.stages.append(count_ops(self.backbone.stages[j], tuple(shape),
                                         input_requires_grad=j > 0))
        return self.stages[k - 1]

    def head(self, layer: int):
        from sflsim.models.ops import count_ops

        if layer not in self.heads:
            self.heads[layer] = count_ops(self.backbone.exit_head(layer),
                                          tuple(self.stage(layer).output_shape),
                                          input_requires_grad=True)
        return self.heads[layer]

    def seconds(self, params, layer: int, batch: int, directions: tuple[str, ...]) -> float:
        from sflsim.hardware.operator_cost import pass_seconds, update_seconds

        stages = [self.stage(k) for k in range(1, layer + 1)]
        total = 0.0
        for d in directions:
            if d == "forward":
                total += params.per_batch_s + sum(pass_seconds(params, s.forward, batch)
                                                  for s in stages)
            elif d == "backward":
                total += sum(pass_seconds(params, s.backward, batch) for s in stages)
            elif d == "update":
                total += update_seconds(params, sum(s.params for s in stages),
                                        sum(s.param_tensors for s in stages), self.optimizer)
            else:
                h = self.head(layer)
                total += (pass_seconds(params, h.forward, batch)
                          + pass_seconds(params, h.backward, batch)
                          + update_seconds(params, h.params, h.param_tensors, self.optimizer))
        return total


def operator_rates(run: Run) -> dict[int, float]:
    """Under the cost model by operation, per client whose profile has
    ``operator_costs``: the FLOP/s of its FLOPs-rule steps, the counted FLOPs of a
    whole-model training step at ``training.batch_size`` over its predicted seconds."""
    from torch import nn

    from sflsim.hardware.operator_cost import Workload, counted_flops, effective_flops_per_s
    from sflsim.models.ops import count_ops

    shape, classes = input_of(run)
    times = StageTimes.for_run(run)
    b = times.backbone
    ops = _Operators(b, run.scenario.training.optimizer)
    whole = count_ops(nn.Sequential(*b.stages, b.head), tuple(b.input_shape))
    work = Workload(forward=whole.forward, backward=whole.backward, trained_params=whole.params,
                    param_tensors=whole.param_tensors, batch=run.scenario.training.batch_size,
                    optimizer=ops.optimizer)
    flops = counted_flops(work)
    return {d.client_id: effective_flops_per_s(d.operator_costs.params(), work, flops)
            for d in run.hw.devices if d.operator_costs is not None}
