"""The child seed of every use of randomness in a run.

Seeds (STYLE.md §10): each stream's seed (``seeds.partition``, ``seeds.model``,
``seeds.training``, each ``seed`` unless given; see
:class:`~sflsim.config.schema.SeedsConfig` for what each drives) is split with
``numpy.random.SeedSequence`` into independent child seeds, one per use
(:data:`SEED_USES`), so changing one use or stream leaves the others alone.
"""

from __future__ import annotations

import numpy as np

from sflsim.config.scenario import Scenario

#: Each use of randomness that has a child seed -> the stream it belongs to. The order
#: numbers the children: use ``i`` is child ``i`` of its stream's ``SeedSequence``.
SEED_USES = {"partition": "partition", "model": "model", "batches": "training",
             "test_subset": "partition", "split": "training", "conditions": "training",
             "augment": "training", "sampling": "training"}


def child_seeds(scenario: Scenario) -> dict[str, int]:
    """The child seed of every use in :data:`SEED_USES`, from its stream's seed.

    With every stream at ``seed`` (no ``seeds`` given) these are the children of one
    ``SeedSequence(seed)``, as in runs made before ``seeds`` existed.
    """
    streams = scenario.stream_seeds._asdict()
    return {use: int(np.random.SeedSequence(streams[stream], spawn_key=(i,)).generate_state(1)[0])
            for i, (use, stream) in enumerate(SEED_USES.items())}
