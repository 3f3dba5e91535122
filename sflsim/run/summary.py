"""``summary.json``: the sums and final accuracies of a run's rounds, kept as rounds are
added, the run's warnings, and the record of a run that failed.

``warnings`` lists the input warnings of the run (:func:`~sflsim.config.input_warnings.
run_warnings`: its scenario's, its profiles', its fleet's and its build's, as said when
it started), then a warning for an outcome no real deployment has
(:func:`outcome_warnings`): more than a year of simulated time, or more than 1 kWh of
client energy per device and round. Both bounds lie far above the shipped scenarios
(hours of simulated time, joules to kilojoules per device and round), so what crosses
them is almost surely a unit left out (``uplink_bps: 10`` is 10 bit/s) or a profile
number off by a factor of thousands.
"""

from __future__ import annotations

import math
import traceback
from pathlib import Path

from sflsim.config.input_warnings import kept_warnings
from sflsim.config.scenario import Scenario
from sflsim.metrics import results

#: simulated time past which a run's outcome is flagged (s): one year (365.25 days)
MAX_PLAUSIBLE_SIM_TIME_S = 365.25 * 86_400
#: joules in a kilowatt-hour
J_PER_KWH = 3.6e6
#: client energy per device and round past which a run's outcome is flagged (J): 1 kWh
MAX_PLAUSIBLE_DEVICE_ROUND_ENERGY_J = 1 * J_PER_KWH


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
    final, warned = totals.final, kept_warnings()
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
        "warnings": [*warned, *outcome_warnings(scenario, totals, warned)],
    }


def outcome_warnings(scenario: Scenario, totals: Totals, warned: list[str]) -> list[str]:
    """A warning for each implausible outcome of the rounds in ``totals`` (see the module
    docstring): simulated time over :data:`MAX_PLAUSIBLE_SIM_TIME_S`, client energy per
    device and round (``client_energy_j`` over ``num_clients`` x the completed rounds)
    over :data:`MAX_PLAUSIBLE_DEVICE_ROUND_ENERGY_J`. Each ends with the likely cause:
    the gist of each input warning said before it (``warned``: the field and what its
    value was read as), else the inputs to look at."""
    found = []
    sim_time_s = totals.last.get("sim_time_s", 0.0)
    if sim_time_s > MAX_PLAUSIBLE_SIM_TIME_S:
        found.append(f"implausible outcome: simulated time {sim_time_s:,.0f} s "
                     f"({sim_time_s / MAX_PLAUSIBLE_SIM_TIME_S:.1f} years) is over one year")
    device_rounds = scenario.num_clients * totals.trained
    energy_j = totals.sums["client_energy_j"]
    if device_rounds and energy_j / device_rounds > MAX_PLAUSIBLE_DEVICE_ROUND_ENERGY_J:
        found.append(f"implausible outcome: client energy {energy_j:.3g} J is "
                     f"{energy_j / device_rounds / J_PER_KWH:,.1f} kWh per device and round, "
                     f"over {MAX_PLAUSIBLE_DEVICE_ROUND_ENERGY_J / J_PER_KWH:g} kWh")
    if not found:
        return []
    cause = _availability_gap(scenario, sim_time_s) or (
        "likely cause, as warned when the run started: "
        + "; ".join(f'"{gist(message)}"' for message in warned) if warned else
        "no input was warned about; check the units of the links' bandwidths (bit/s) "
        "and latencies (s) and of the devices' compute (FLOP/s) and powers (W), in the "
        "scenario and its profiles (sflsim profiles show NAME)")
    return [f"{message}; {cause}" for message in found]


def _availability_gap(scenario: Scenario, sim_time_s: float) -> str | None:
    """The likely cause when the availability trace leaves no client online for over half
    of the run's ``sim_time_s``, in one gap or several: a round that starts with none
    online waits for the first to come online
    (:func:`sflsim.run.participation.wait_for_clients`), its devices idle. None without a
    trace or such gaps."""
    path = scenario.conditions.availability
    if path is None:
        return None
    from sflsim.availability import read_availability

    gaps = read_availability(path, scenario.client_groups()).gaps(sim_time_s)
    offline_s = sum(b - a for a, b in gaps)
    if offline_s <= sim_time_s / 2:
        return None
    a, b = max(gaps, key=lambda gap: gap[1] - gap[0])
    spans = (f"from {a:,.10g} s to {b:,.10g} s" if len(gaps) == 1 else
             f"for {offline_s:,.10g} s of the run's {sim_time_s:,.10g} s, in {len(gaps)} gaps "
             f"(the longest from {a:,.10g} s to {b:,.10g} s)")
    return (f"likely cause: no client is online {spans} in the availability trace "
            f"(conditions.availability: {path}), and a round that starts with none online "
            "waits, its devices idle, for the first to come online (the trace's times are "
            "seconds of simulated time)")


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


def gist(warning: str) -> str:
    """The head of an input warning, up to its first ``, ``, ``; `` or `` (``: where it
    comes from, the field and what its value was read as (``--set x.uplink_bps=10:
    x.uplink_bps: 10 is read as 10 bit/s``); a ``--set`` value's own commas are kept."""
    start = 0
    if warning.startswith("--set ") and "=" in warning:  # its value may hold ", " itself
        path = warning[len("--set "):warning.index("=")]
        start = max(0, warning.find(f": {path}", warning.index("=")))
    cut = [i for i in (warning.find(", ", start), warning.find("; ", start),
                       warning.find(" (", start)) if i > 0]
    return warning[:min(cut)] if cut else warning
