"""``run_scenario``: the one public entry point that builds and runs a simulation.

The facade users import from (``from sflsim.runner import run_scenario, RunResult``);
the work is done in :mod:`sflsim.run`, one module per step:

- :mod:`sflsim.run.entry`: :func:`run_scenario` (the results folder, a fresh or
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

from sflsim.run.build import build, build_backbone
from sflsim.run.data import load_data
from sflsim.run.entry import run_scenario
from sflsim.run.participation import draw_conditions, round_participants
from sflsim.run.placement import torch_device
from sflsim.run.result import RunResult
from sflsim.run.seeds import SEED_USES, child_seeds

__all__ = [
    "SEED_USES", "RunResult", "build", "build_backbone", "child_seeds", "draw_conditions",
    "load_data", "round_participants", "run_scenario", "torch_device",
]
