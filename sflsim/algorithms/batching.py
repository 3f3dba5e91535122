"""Batching: the index batches a client trains on, and how much work a round makes.

Each local epoch a client shuffles its sample indices with its own generator
(:attr:`Client.generator <sflsim.algorithms.context.Client>`) and cuts them into
batches of ``batch_size``; the last, shorter batch is kept. A client with fewer
samples than the batch size therefore trains on one short batch per epoch (the
partitioner guarantees at least one sample). In timing-only runs
(``training.timing_only``) only the batches' sizes matter: they are ranges, and no
generator draws.

:class:`Batching` is one part of :class:`~sflsim.algorithms.base.Algorithm` (its
``batching``).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from sflsim.algorithms.context import Client, RunContext


def shuffled_batches(indices: torch.Tensor, batch_size: int, generator: torch.Generator
                     ) -> Iterator[torch.Tensor]:
    """One epoch of ``indices`` (int64 ``(n,)``) in batches of ``batch_size``, in an order
    drawn from ``generator`` (short last batch kept). A generator: the permutation is
    drawn when the first batch is asked for."""
    order = torch.randperm(len(indices), generator=generator)
    yield from torch.split(indices[order], batch_size)


def timing_batches(n: int, batch_size: int) -> tuple[range, ...]:
    """The batches of one epoch of ``n`` samples as ranges (timing-only runs: only their
    sizes matter, and no order is drawn)."""
    return tuple(range(i, min(i + batch_size, n)) for i in range(0, n, batch_size))


class Batching:
    """The batches of a client's local epochs.

    Given the run context (its ``timing_only`` and the scenario's ``training.batch_size``
    and ``training.local_epochs``); owns :meth:`batches`, :meth:`round_batches`,
    :meth:`round_batch_sizes` and the timing-only ranges' cache.
    """

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        #: client id -> the timing-only ranges of one epoch
        self._timing_batches: dict[int, tuple[range, ...]] = {}

    def batches(self, client: Client) -> Iterator[torch.Tensor]:
        """Index batches of one local epoch (short last batch kept); in timing-only runs,
        only their sizes matter (no generator draws; the indices are a range)."""
        if self.ctx.timing_only:  # ranges, the same every epoch: only len() is used
            ranges = self._timing_batches.get(client.client_id)
            if ranges is None:
                ranges = self._timing_batches[client.client_id] = timing_batches(
                    len(client.indices), self.ctx.scenario.training.batch_size)
            return iter(ranges)  # type: ignore[arg-type]
        return self._shuffled_batches(client)

    def round_batches(self, client: Client) -> Iterator[torch.Tensor]:
        """The client's index batches of a round, every local epoch in turn; each epoch's
        order is drawn when its first batch is asked for."""
        return (idx for _ in range(self.ctx.scenario.training.local_epochs)
                for idx in self.batches(client))

    def round_batch_sizes(self, client: Client) -> list[int]:
        """The sizes (samples) of this class's :meth:`round_batches` batches, without
        making them: full batches, then the short last one, every local epoch (what the
        ``array_booking`` capability promises an algorithm keeps)."""
        n, size = len(client.indices), self.ctx.scenario.training.batch_size
        epoch = [size] * (n // size) + ([n % size] if n % size else [])
        return epoch * self.ctx.scenario.training.local_epochs

    def _shuffled_batches(self, client: Client) -> Iterator[torch.Tensor]:
        # a generator: the epoch's permutation is drawn when its first batch is asked for
        yield from shuffled_batches(torch.as_tensor(client.indices),
                                    self.ctx.scenario.training.batch_size, client.generator)
