"""Per-stage latency tables: measured seconds win over the FLOPs rule.

FLOPs alone mispredict: the same device runs different layers at very different
FLOP/s (depthwise convolutions, small feature maps, memory-bound layers). A device
profile may therefore carry ``stage_latency`` tables (written by
``sflsim profile-host``): per-stage forward and backward seconds of one model
(name, width, per-sample input shape) at a few batch sizes.

:func:`stage_time_s` predicts a batch of ``batch`` samples through a range of
stages: it sums the stages' times, linearly interpolated in batch size between
the two nearest measured batch sizes, linearly extrapolated from the two nearest
outside the measured range (below the smallest, never less than that measurement
scaled proportionally to ``batch``), or scaled proportionally from the one
measured batch size when there is only one. When no table matches the model,
width and input, it returns ``None`` and the caller uses the FLOPs rule
(``FLOPs / sustained_flops``).

Optional parts of a table: ``update_s`` (the optimizer update of each stage's
parameters) and ``exit_head_s`` (the exit head after each stage: forward, loss,
backward, its update). A client-side training step at end layer ``l`` is then
forward + backward + update of stages ``1..l`` plus ``exit_head_s[l-1]``. A table
without them neglects them (they count 0 s).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from sflsim.hardware.profiles import DeviceProfile, StageLatency

Direction = Literal["forward", "backward", "update", "exit_head"]
_FIELD = {"forward": "forward_s", "backward": "backward_s", "update": "update_s",
          "exit_head": "exit_head_s"}


def matching_tables(profile: DeviceProfile, model_name: str, width: float,
                    input_shape: Sequence[int]) -> list[StageLatency]:
    """The profile's tables of this model, width and per-sample input, by batch size."""
    tables = [t for t in (profile.stage_latency or [])
              if t.model == model_name and abs(t.width - width) <= 1e-9 * max(1.0, width)
              and tuple(t.input) == tuple(input_shape)]
    return sorted(tables, key=lambda t: t.batch_size)


def _interpolate(points: list[tuple[int, float]], batch: int) -> float:
    """Piecewise-linear in batch size through ``points`` (sorted by batch, distinct)."""
    if len(points) == 1:
        b0, t0 = points[0]
        return t0 * batch / b0
    if batch <= points[0][0]:
        (b0, t0), (b1, t1) = points[0], points[1]
    elif batch >= points[-1][0]:
        (b0, t0), (b1, t1) = points[-2], points[-1]
    else:
        i = next(k for k in range(1, len(points)) if points[k][0] >= batch)
        (b0, t0), (b1, t1) = points[i - 1], points[i]
    t = t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
    # Extrapolating a noisy slope can go to zero or below for small batches; a batch
    # never costs less than the nearest measurement scaled down proportionally.
    nearest_b, nearest_t = min(points, key=lambda p: abs(p[0] - batch))
    return max(t, nearest_t * batch / nearest_b) if batch < points[0][0] else t


def stage_time_s(profile: DeviceProfile, model_name: str, width: float,
                 input_shape: Sequence[int], stages: Iterable[int], batch: int,
                 direction: Direction) -> float | None:
    """Seconds for ``batch`` samples through ``stages`` (1-based) in ``direction``.

    Args:
        profile: the device.
        model_name, width, input_shape: the scenario's model and per-sample input
            ``(C, H, W)``; a table must match all three.
        stages: 1-based stage numbers, e.g. ``range(1, end_layer + 1)``.
        batch: samples in the batch (>= 1).
        direction: ``"forward"``, ``"backward"``, ``"update"`` (optimizer update of
            the stages' parameters) or ``"exit_head"`` (the exit head after each of
            ``stages``; pass ``[end_layer]``). The last two count 0 s in tables that
            do not carry them.

    Returns:
        The summed seconds, or ``None`` when no table matches (or a table lacks
        one of the stages): the caller then uses the FLOPs rule.
    """
    tables = matching_tables(profile, model_name, width, input_shape)
    stages = list(stages)
    if not tables or batch < 1:
        return None
    # one table per batch size (the last one listed wins on duplicates)
    by_batch = {t.batch_size: t for t in tables}
    total = 0.0
    for stage in stages:
        points = []
        for b, t in sorted(by_batch.items()):
            if not 1 <= stage <= len(t.forward_s):
                return None
            times = getattr(t, _FIELD[direction])
            if times is not None:
                points.append((b, times[stage - 1]))
        if not points:  # optional part not measured: neglected
            continue
        total += _interpolate(points, batch)
    return total
