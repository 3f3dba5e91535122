"""``run_scenario``: the one public entry point that builds and runs a simulation.

The facade users import from (``from sflsim.runner import run_scenario, RunResult``);
the work is done in :mod:`sflsim.run`, one module per step:

- :mod:`sflsim.run.scenario`: :func:`run_scenario` (the results folder, a fresh or
  resumed run, then its rounds);
- :mod:`sflsim.run.build`: :func:`build`, the run from the resolved scenario;
- :mod:`sflsim.run.seeds`: the child seed of every use of randomness (:func:`child_seeds`);
- :mod:`sflsim.run.data`, :mod:`sflsim.run.placement`, :mod:`sflsim.run.device_memory`:
  the dataset, where the tensors live, the refusal of a device that cannot train;
- :mod:`sflsim.run.loop`: the round loop, round 0 (the untrained model) first;
- :mod:`sflsim.run.participation`: each round's conditions and participants;
- :mod:`sflsim.run.progress`, :mod:`sflsim.run.summary`, :mod:`sflsim.run.result`:
  what a run reports, ``summary.json``, what it returns;
- :mod:`sflsim.run.host`: torch determinism and Python's cycle collector during a run.
"""

from __future__ import annotations

from sflsim.run.build import build, build_backbone, fleet_clients, run_data
from sflsim.run.data import check_augment, client_domain, hold_data, load_data
from sflsim.run.device_memory import (
    check_devices,
    check_fleet_memory,
    check_memory,
    memory_need_bytes,
)
from sflsim.run.host import deterministic_torch, fewer_gc_passes, gc_paused
from sflsim.run.participation import draw_conditions, round_participants, wait_for_clients
from sflsim.run.placement import data_on, memory_format, torch_device
from sflsim.run.progress import Progress, batches_per_round, work_per_round, work_plan
from sflsim.run.result import RunResult
from sflsim.run.scenario import run_scenario
from sflsim.run.seeds import SEED_USES, child_seeds
from sflsim.run.summary import Totals, failure_record, summarize

__all__ = [
    "SEED_USES", "Progress", "RunResult", "Totals", "batches_per_round", "build", "build_backbone",
    "check_augment", "check_devices", "check_fleet_memory", "check_memory", "child_seeds",
    "client_domain", "data_on", "deterministic_torch", "draw_conditions", "failure_record",
    "fewer_gc_passes", "fleet_clients", "gc_paused", "hold_data", "load_data", "memory_format",
    "memory_need_bytes", "round_participants", "run_data", "run_scenario", "summarize",
    "torch_device", "wait_for_clients", "work_per_round", "work_plan",
]
