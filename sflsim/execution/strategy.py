"""The runner's choice of how a run's rounds execute (:func:`choose_execution`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sflsim.config.scenario import Scenario

#: how clients train ahead of the simulated round: fused into batched steps, on host
#: threads, in worker processes, on Ray actors; None: client by client, each step as its
#: simulated work completes
Ahead = Literal["fused", "threads", "processes", "ray"]


@dataclass(frozen=True)
class Execution:
    """How a run's rounds execute (:mod:`sflsim.execution`). Chosen once per run by
    :func:`choose_execution`; a round that something may cut short (a deadline, a client
    going offline, over-commitment) runs client by client whatever is chosen.

    Attributes:
        array_booking: timing-only rounds booked as arrays (:mod:`sflsim.execution.booked`).
        ahead: how a trained run's clients train ahead of the simulated round; None:
            client by client.
        threads: host threads for work spread over clients (``training.parallel_clients``).
    """

    array_booking: bool = False
    ahead: Ahead | None = None
    threads: int = 1


def choose_execution(scenario: Scenario, timing_only: bool) -> Execution:
    """The execution of ``scenario``'s rounds from the capabilities its algorithm's
    configuration declares (:data:`sflsim.config.algorithms.CAPABILITIES`) and its
    training settings; ``timing_only``: no torch step runs. A setting the algorithm does
    not declare was refused when the scenario was validated
    (:mod:`sflsim.config.capability_checks`); here it only falls back to client by client.

    Example: FedAvg with ``parallel_clients: 4`` and ``parallel_backend: processes`` trains
    ahead in worker processes; a timing-only FedAvg run books its rounds as arrays.
    """
    algorithm, training = scenario.algorithm, scenario.training
    threads = training.parallel_clients
    if timing_only:
        return Execution(array_booking=algorithm.supports("array_booking"), threads=threads)
    ahead: Ahead | None = None
    if training.fuse_clients and algorithm.supports("fuse_clients"):
        ahead = "fused"
    elif threads > 1 and training.parallel_backend in ("processes", "ray") \
            and algorithm.supports("parallel_processes"):
        ahead = training.parallel_backend
    elif threads > 1 and algorithm.supports("parallel_clients"):
        ahead = "threads"
    return Execution(ahead=ahead, threads=threads)
