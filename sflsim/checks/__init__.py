"""Check a run's results against the simulator's physics and bookkeeping.

:func:`check_run` reads a results directory (``rounds.csv``, the clients and events
tables, ``summary.json`` and the resolved ``scenario.yaml``, whose device, link and
server profiles give the rates, powers, bandwidths, latencies and slots: the copies
the run kept in its ``profiles/`` folder, else today's library) and returns every
:class:`Violation` of the rules of its modules, each worked out again from the scenario,
the profiles and the event times rather than by the functions that wrote the numbers:

- :mod:`~sflsim.checks.timeline`: time moves forward; capacity one;
- :mod:`~sflsim.checks.compute`: compute and server jobs take their FLOPs' time;
- :mod:`~sflsim.checks.transfers`: transfers take their bits' time, shared hops
  replayed;
- :mod:`~sflsim.checks.causality`: nothing uses data before it arrives;
- :mod:`~sflsim.checks.queues`: waits are for busy resources, queue columns add up;
- :mod:`~sflsim.checks.cutoffs`: work is cut off at a cut-off and only then;
- :mod:`~sflsim.checks.energy`: each client row from its events and powers;
- :mod:`~sflsim.checks.tables`: columns, rows, sums and the summary;
- :mod:`~sflsim.checks.early_exit`: ``early_exit.csv``'s rows, exits, bytes and latency.

Numbers compare within the tolerance of :mod:`~sflsim.checks.report`. A run still in
progress is checked for the rounds it has finished. ``sflsim check`` prints at most
:data:`~sflsim.checks.report.MAX_LINES` violations (:func:`report_lines`). With the
environment variable ``SFLSIM_CHECK_RESULTS=1`` (the test suite sets it),
:func:`sflsim.runner.run_scenario` checks every run it finishes (:func:`check_if_asked`)
and raises :class:`ResultCheckError` on a violation.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from sflsim.checks.report import ResultCheckError, Violation, report_lines
from sflsim.checks.run_files import Tables, prepare, read_run
from sflsim.text import plural

__all__ = [ "CHECK_ENV", "ResultCheckError", "Violation",
    "check_if_asked", "check_result", "check_run", "check_tables", "report_lines",
    "run_tables", "summary_line", "verdict",
]

#: the environment variable that makes :func:`check_if_asked` check a run
CHECK_ENV = "SFLSIM_CHECK_RESULTS"


def check_run(run_dir: str | Path) -> list[Violation]:
    """Every :class:`Violation` of the results in ``run_dir``; [] when the run is sound.

    Raises:
        SflsimError: ``run_dir`` is not a results directory, or a file of it cannot be
            read or is another run's (one message naming the file, and where it applies
            the round and the client).
    """
    return run_tables(read_run(run_dir))


def check_tables(scenario: object, rounds: pd.DataFrame, clients: pd.DataFrame,
                 events: pd.DataFrame, summary: dict | None = None,
                 names: dict[str, str] | None = None, *,
                 manifest: dict | None = None,
                 early_exit: pd.DataFrame | None = None) -> list[Violation]:
    """Every :class:`Violation` of a run given as its tables (``summary.json`` as a
    dict, ``early_exit.csv`` as a frame or None), checked against today's profiles;
    ``names`` the file names to report."""
    return run_tables(prepare(scenario, rounds, clients, events, summary, names,
                              manifest=manifest, early_exit=early_exit))


def run_tables(tables: Tables) -> list[Violation]:
    """Every :class:`Violation` of ``tables`` (:func:`~sflsim.checks.run_files.prepare`)."""
    from sflsim.checks.checked_run import Run

    with np.errstate(all="ignore"):  # tampered tables hold inf and NaN: violations, not warnings
        return _run_checks(Run(tables))


def _run_checks(run: object) -> list[Violation]:
    from sflsim.checks import (
        causality,
        compute,
        cutoffs,
        early_exit,
        energy,
        queues,
        timeline,
        transfers,
    )
    from sflsim.checks import (
        tables as table_checks,
    )

    table_checks.check_columns(run)
    timeline.check_rounds_in_time(run)
    timeline.check_events_in_rounds(run)
    table_checks.check_rows(run)
    table_checks.check_fractions(run)
    table_checks.check_signs(run)
    timeline.check_capacity(run)
    compute.check_compute(run)
    transfers.check_transfers(run)
    causality.check_causality(run)
    queues.check_queues(run)
    cutoffs.check_cutoffs(run)
    energy.check_client_rows(run)
    table_checks.check_sums(run)
    table_checks.check_accuracy_means(run)
    table_checks.check_summary(run)
    early_exit.check_early_exit(run)
    run.blame_rounds()
    return run.found


def check_result(result: object) -> list[Violation]:
    """:func:`check_run` of a :class:`~sflsim.runner.RunResult`: its results directory,
    or, for a run without one, its tables in memory."""
    if result.output_dir is not None:
        return check_run(result.output_dir)
    return check_tables(result.scenario, result.rounds, result.clients, result.events,
                        result.summary, manifest=_manifest_of(result),
                        early_exit=getattr(result, "early_exit", None))


def _manifest_of(result: object) -> dict | None:
    """The dataset part of a manifest for a run held in memory (its input's shape)."""
    algorithm = getattr(result, "algorithm", None)
    ctx = getattr(algorithm, "ctx", None)
    backbone = getattr(ctx, "backbone", None)
    if backbone is None:
        return None
    c, h, _ = backbone.input_shape
    return {"dataset": {"channels": c, "image_size": h, "num_classes": backbone.num_classes}}


def check_if_asked(result: object) -> None:
    """With ``SFLSIM_CHECK_RESULTS`` set to ``1`` (the tests), :func:`check_result`;
    raises :class:`ResultCheckError` listing the violations, if any."""
    if os.environ.get(CHECK_ENV, "").strip().lower() not in ("1", "true", "yes"):
        return
    found = check_result(result)
    if found:
        raise ResultCheckError(f"{plural(len(found), 'violation')} of the simulator's physics or "
                               f"bookkeeping ({CHECK_ENV}):\n"
                               + "\n".join(report_lines(found, 50)))


def verdict(tables: Tables | None, run_dir: str | Path, found: list[Violation]) -> str:
    """One line saying what was checked and how it went (for ``sflsim check``); a run in
    progress is checked so far, for its finished rounds, and the line says so."""
    if tables is None:
        return f"{plural(len(found), 'violation')} in {run_dir}"
    rounds = int((tables.rounds["round"] >= 1).sum())
    what = plural(rounds, "round")
    so_far = ""
    if tables.in_progress:
        why = "summary.json says running" if tables.status == "running" else \
            "no summary.json yet"
        if tables.stopped:  # no process holds the folder
            why = ("summary.json says running, but no process is writing the run: it stopped "
                   "before it ended (killed?); --resume continues it"
                   if tables.status == "running" else "no summary.json, and no process is "
                   "writing the run")
        later = tables.unfinished
        left = (f"; {'round' if len(later) == 1 else 'rounds'} {', '.join(map(str, later))} "
                f"not finished, not checked"
                if later else "")
        so_far = f" (so far: {why}{left})"
    if found:
        return f"{plural(len(found), 'violation')} in {what} of {run_dir}{so_far}"
    keep = "keeps" if rounds == 1 else "keep"
    return f"ok: {what} of {run_dir} {keep} the simulator's physics and bookkeeping{so_far}"


def summary_line(run_dir: str | Path, found: list[Violation]) -> str:
    """:func:`verdict` of ``run_dir`` read again (for callers that hold no tables)."""
    try:
        tables = read_run(run_dir)
    except Exception:  # noqa: BLE001 - the line only describes; check_run raised already
        tables = None
    return verdict(tables, run_dir, found)
