"""Sweeps: a base scenario plus axes, each point a normal run, one table of all points.

Public API::

    from sflsim.sweep import load_sweep, run_sweep
    sweep = load_sweep("scenarios/sweeps/device_mix.yaml")   # every point validated
    result = run_sweep(sweep, "runs/sweeps/device_mix", workers=2)
    result.table  # pandas DataFrame, one row per point (sweep.csv)
"""

from sflsim.sweep.run import SweepResult, read_table, run_sweep
from sflsim.sweep.spec import Sweep, load_sweep

__all__ = ["Sweep", "SweepResult", "load_sweep",
           "read_table", "run_sweep"]
