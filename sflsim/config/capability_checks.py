"""What a scenario asks of its algorithm: timing-only runs, fused clients and clients
trained in parallel, each refused for an algorithm whose configuration lacks the
capability (:data:`~sflsim.config.algorithms.CAPABILITIES`).
"""

from __future__ import annotations

import importlib.util

from sflsim.config.algorithms import algorithms_with, is_builtin
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError


def check_timing_only(scenario: Scenario) -> None:
    """Refuse ``training.timing_only`` where the timeline depends on training
    (:func:`timing_only_refusal`), ``algorithm.split_schedule`` outside timing-only runs,
    and ``training.fuse_clients`` and ``training.parallel_clients`` for an algorithm that
    has no independent client-side steps, ``training.parallel_backend: processes`` for
    one that does not train by FedAvg's step (and ``ray``, which repeats it on Ray actors),
    and ``ray`` where Ray is not installed.

    Raises:
        ConfigError: naming the field, the value and what is valid.
    """
    name = scenario.algorithm.name
    if scenario.training.timing_only:
        why = timing_only_refusal(scenario)
        if why is not None:
            raise ConfigError(f"training.timing_only (--no-train): {why}")
    elif getattr(scenario.algorithm, "split_schedule", None) is not None:
        raise ConfigError(f"algorithm.split_schedule: {scenario.algorithm.split_schedule!r} is "
                          f"followed only by timing-only runs (training.timing_only: true, "
                          f"--no-train); remove it, and split: sufficiency chooses the cuts")
    if scenario.training.fuse_clients and not scenario.algorithm.supports("fuse_clients"):
        why = _lacks(scenario, "fuse_clients", _NOT_FUSED.get(
            name, "whose client-side steps wait for a server-side model that other clients share"))
        raise ConfigError(f"training.fuse_clients: not available for algorithm {name!r}, {why}; "
                          f"valid: {', '.join(algorithms_with('fuse_clients'))}")
    if scenario.training.parallel_clients > 1 and not scenario.algorithm.supports("parallel_clients"):
        why = _lacks(scenario, "parallel_clients", "which has no per-client training steps that "
                     "are independent within a round")
        raise ConfigError(f"training.parallel_clients: not available for algorithm {name!r}, "
                          f"{why}; valid: {', '.join(algorithms_with('parallel_clients'))} (or 1)")
    backend = scenario.training.parallel_backend
    if backend in ("processes", "ray") and not scenario.algorithm.supports("parallel_processes"):
        why = _lacks(scenario, "parallel_processes", "whose clients train other than by "
                     "FedAvg's whole-model step")
        raise ConfigError(f"training.parallel_backend: {backend!r} is not available for "
                          f"algorithm {name!r}, {why}; valid: "
                          f"{', '.join(algorithms_with('parallel_processes'))} (or threads)")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError("training.parallel_backend: 'ray' needs Ray, which is not installed: "
                          "pip install \"sflsim[ray]\"; valid without it: threads, processes")


def idle_settings(scenario: Scenario) -> list[str]:
    """Warnings for settings the scenario leaves without effect: a parallel backend other
    than threads with one client at a time, parallel clients in a timing-only run (which
    trains nothing), and server priorities under a first-come, first-served queue. Ray's
    settings under another backend are refused
    (:class:`~sflsim.config.training.TrainingConfig`)."""
    training = scenario.training
    out = []
    if scenario.server.priorities and scenario.server.queue != "priority":
        out.append(f"server.priorities: {dict(scenario.server.priorities)} has no effect with "
                   f"server.queue: {scenario.server.queue!r} (jobs are served in order of "
                   f"arrival); set server.queue: priority to use them")
    if training.parallel_clients == 1 and training.parallel_backend != "threads":
        out.append(f"training.parallel_backend: {training.parallel_backend!r} has no effect "
                   f"with training.parallel_clients: 1 (the clients train one at a time in the "
                   f"run's process); set parallel_clients to the workers wanted, e.g. 2")
    if training.timing_only and training.parallel_clients > 1:
        out.append(f"training.parallel_clients: {training.parallel_clients} has no effect in a "
                   f"timing-only run (training.timing_only, --no-train), which trains nothing")
    return out


#: Why a built-in algorithm outside the split-learning family cannot fuse its clients.
_NOT_FUSED = {
    "fedgh": "whose local training sflsim does not batch (clients train one at a time)",
    "fedas": "whose local training sflsim does not batch (clients train one at a time)",
    "centralized": "which trains one model on the pooled data, not clients",
}


def _lacks(scenario: Scenario, capability: str, builtin_reason: str) -> str:
    """Why the scenario's algorithm lacks ``capability``: ``builtin_reason`` for one of
    sflsim's own, else that its configuration does not declare it."""
    if is_builtin(scenario.algorithm.name):
        return builtin_reason
    return (f"whose configuration {type(scenario.algorithm).__qualname__} does not list "
            f"{capability!r} in its capabilities")


def timing_only_refusal(scenario: Scenario) -> str | None:
    """Why ``scenario``'s simulated timeline would depend on what training computes, so
    that a timing-only run could not give the trained run's events; None when it does not.

    Every algorithm whose configuration declares ``timing_only``
    (:data:`~sflsim.config.algorithms.CAPABILITIES`) qualifies but for two settings:
    MultiSFL's adaptive replay (its replay fraction, hence its replay transfers and
    server steps, follows the gradient norms of training) and FedSGA's
    ``split: sufficiency`` without a recorded ``split_schedule`` (its cuts follow the
    trained estimator and probe losses).
    """
    alg, name = scenario.algorithm, scenario.algorithm.name
    if not alg.supports("timing_only"):
        why = _lacks(scenario, "timing_only", "whose timeline depends on training")
        return (f"not available for algorithm {name!r}, {why}; valid: "
                f"{', '.join(algorithms_with('timing_only'))}")
    if (name == "multisfl" and alg.replay and alg.adaptive_replay
            and alg.replay_fraction_max > alg.replay_fraction):
        return ("algorithm.adaptive_replay: true makes MultiSFL's replay fraction (its replay "
                "transfers and server steps) follow the gradient norms of training, so the "
                "timeline depends on what is learned; valid in timing-only runs: "
                "algorithm.adaptive_replay: false (replay at algorithm.replay_fraction every "
                "round) or algorithm.replay: false")
    if name == "fedsga" and alg.split == "sufficiency" and alg.split_schedule is None:
        return ("FedSGA's algorithm.split: sufficiency chooses each cut from trained values "
                "(estimator, probe losses), so the timeline depends on what is learned; give "
                "algorithm.split_schedule (the results directory of a trained run of this "
                "scenario, or its clients table) to replay its cuts, or use algorithm.split: "
                "static, random or resource")
    return None
