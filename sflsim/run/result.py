"""What a run returns: :class:`RunResult`, the same tables as its results directory."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sflsim.algorithms.base import Algorithm
from sflsim.config.scenario import Scenario
from sflsim.engine import Trace, TraceEvent
from sflsim.metrics import results


@dataclass
class RunResult:
    """Everything a run produced; the same tables as the results directory.

    With a results directory the per-client rows and the events went to disk round by
    round (memory stays flat however many rounds run): :attr:`clients` and
    :attr:`events` read them back from there. Without one they are held in memory.
    """

    scenario: Scenario
    #: one dict per round (``rounds.csv``)
    round_rows: list[dict] = field(repr=False)
    #: per round, its clients-table rows as columns (empty when streamed to disk)
    client_columns: list[dict] = field(repr=False)
    #: the events held in memory (every one without a results directory)
    trace: Trace = field(repr=False)
    summary: dict
    output_dir: Path | None = None
    algorithm: Algorithm | None = field(default=None, repr=False)
    #: early-exit sweep (``early_exit.csv``), None when disabled or not applicable
    early_exit: pd.DataFrame | None = None

    # the tables are built on first use: large timing-only runs have millions of rows

    @functools.cached_property
    def rounds(self) -> pd.DataFrame:
        """One row per round (``rounds.csv``)."""
        return pd.DataFrame(self.round_rows)

    @functools.cached_property
    def clients(self) -> pd.DataFrame:
        """One row per client and round (``clients.parquet``)."""
        if self.output_dir is not None and not self.client_columns:
            return results.read_run_table(self.output_dir, "clients")
        return pd.concat([pd.DataFrame(c) for c in self.client_columns], ignore_index=True) \
            if self.client_columns else pd.DataFrame()

    @functools.cached_property
    def events(self) -> pd.DataFrame:
        """One row per simulated activity (``events.parquet``)."""
        if self.output_dir is not None and not len(self.trace):
            return results.read_run_table(self.output_dir, "events")
        # text as text, whether the rows were recorded one by one or booked as a block of
        # categorical columns (:meth:`sflsim.engine.Trace.add_columns`)
        columns = {name: np.asarray(values, dtype=object) if hasattr(values, "categories")
                   else values for name, values in self.trace.columns().items()}
        return pd.DataFrame(columns, columns=TraceEvent._fields)
