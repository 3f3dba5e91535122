"""Reproduce the papers' tables with sflsim and check their claims.

Usage::

    python analysis/reproduce.py --list
    python analysis/reproduce.py hetero_splitee.table4 --scale cpu [-o DIR] [--workers N] [--seeds K]
    python analysis/reproduce.py fedsga.table5 --scale cpu --executor ray --address auto
    python analysis/reproduce.py fedsga.table5 --scale cpu --dry-run       # settings and points only
    python analysis/reproduce.py fedsga.table5 --scale cpu --estimate      # time 2 rounds per config
    python analysis/reproduce.py fedsga.table5 --scale cpu --report-only   # re-render finished runs
    python analysis/reproduce.py hetero_splitee.table4 --scale paper --device cuda  # the datasets needed

The harness itself is the package ``analysis/reproduction/`` (its docstring says what a
target, a claim and a scale are, and where each concern lives); this script is its entry
point, and, as the module ``reproduce``, its namespace for the ``analysis/reproduce_*.py``
files that add targets (``import reproduce as R``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the package sits next to this file
    sys.path.insert(0, str(HERE))
# analysis/reproduce_*.py files do ``import reproduce``: give them this module, not a second copy
sys.modules.setdefault("reproduce", sys.modules[__name__])

from reproduction import *  # noqa: E402, F403
from reproduction import __all__, main  # noqa: E402, F401

if __name__ == "__main__":
    sys.exit(main())
