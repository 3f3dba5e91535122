"""Several sets of BatchNorm running statistics for one shared module
(Hetero-SplitEE's ``algorithm.bn_statistics``: per end layer or per client), and the view
of the module that one set's key sees."""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn


class BatchNormStatistics:
    """Several sets of BatchNorm running statistics for one module, one per key (an end
    layer or a client id), the module's own parameters shared by all.

    :meth:`use` puts a key's set in the module's BatchNorm layers (the tensors
    themselves, not copies), so the steps and evaluations that follow update and read
    that set only. Every set starts as a copy of the module's statistics at
    construction (mean 0, variance 1 for a new model).
    """

    def __init__(self, module: nn.Module, keys: Iterable[int]) -> None:
        self.norms = [m for m in module.modules()
                      if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
        self.sets = {key: [(m.running_mean.clone(), m.running_var.clone(),
                            m.num_batches_tracked.clone()) for m in self.norms]
                     for key in keys}

    def use(self, key: int) -> None:
        """Put ``key``'s statistics in the module."""
        for m, (mean, var, count) in zip(self.norms, self.sets[key]):
            m.running_mean, m.running_var, m.num_batches_tracked = mean, var, count


def statistics_view(modules: list[nn.Module], statistics: BatchNormStatistics,
                    key: int) -> nn.Sequential:
    """Stages of a shared server-side model as one key sees them: a plain
    ``nn.Sequential`` of ``modules`` that calls ``statistics.use(key)`` before every
    forward pass (a forward pre-hook), so BatchNorm normalises (in eval mode) and updates
    (in train mode) that key's running statistics. Shapes as the stages'."""
    view = nn.Sequential(*modules)
    view.register_forward_pre_hook(_UseStatistics(statistics, key))
    return view


class _UseStatistics:
    """The forward pre-hook of :func:`statistics_view` (a class, so checkpoints pickle it)."""

    def __init__(self, statistics: BatchNormStatistics, key: int) -> None:
        self.statistics, self.key = statistics, key

    def __call__(self, module: nn.Module, args: tuple) -> None:
        self.statistics.use(self.key)
