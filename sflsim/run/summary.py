"""``summary.json``: the sums and final accuracies of a run's rounds, kept as rounds are
added, and the record of a run that failed."""

from __future__ import annotations

import math
import traceback
from pathlib import Path

from sflsim.config.schema import Scenario
from sflsim.metrics import results


class Totals:
    """The sums and last evaluated round of ``summary.json``, kept as rounds are added,
    so writing the summary after a round costs the same in round 10 as in round 10,000."""

    SUMMED = ("bytes_up", "bytes_down", "client_flops", "server_flops", "client_energy_j")

    def __init__(self, rows: list[dict] = ()) -> None:
        self.sums = dict.fromkeys(self.SUMMED, 0)
        self.trained, self.last, self.final = 0, {}, {}
        for row in rows:
            self.add(row)

    def add(self, row: dict) -> None:
        """Count one ``rounds.csv`` row (in round order)."""
        for k in self.SUMMED:
            self.sums[k] += row[k]
        self.last = row
        if row["round"] >= 1:
            self.trained += 1
            if not math.isnan(row["server_accuracy"]):
                self.final = row


def summarize(scenario: Scenario, totals: Totals, status: str, wall_time_s: float) -> dict:
    """Final numbers of a run for ``summary.json`` from ``totals`` of its rounds (round 0,
    the untrained model, is not a completed round and gives no final accuracy)."""
    final = totals.final
    return {
        "name": scenario.name, "algorithm": scenario.algorithm.name, "seed": scenario.seed,
        "status": status, "rounds_completed": totals.trained,
        "rounds_planned": scenario.training.rounds,
        "num_clients": scenario.num_clients,
        "sim_time_s": totals.last.get("sim_time_s", 0.0), "wall_time_s": wall_time_s,
        "final_server_accuracy": final.get("server_accuracy"),
        "final_client_accuracy": final.get("client_accuracy"),
        "final_accuracy_by_end_layer": {
            k: v for k, v in final.items() if k.startswith(("server_accuracy_l", "client_accuracy_l"))
        },
        **totals.sums,
    }


def failure_record(exc: BaseException, round_: int, out: Path | None) -> dict:
    """``summary.json``'s ``"error"`` of a run that failed in ``round_`` (1-based, the round
    in progress): the exception's type and message, and, with a results directory, the
    file its traceback was written to (:data:`sflsim.metrics.results.TRACEBACK_FILE`)."""
    record = {"type": type(exc).__name__, "message": str(exc), "round": round_}
    if out is not None:
        try:
            text = "".join(traceback.format_exception(exc))
            (out / results.TRACEBACK_FILE).write_text(text)
            record["traceback"] = results.TRACEBACK_FILE
        except OSError:  # a full disk must not hide the original error
            pass
    return record
