"""FedSGA vs MultiSFL in sflsim: what drives the gap (issue 13 §2), as a report section.

``python analysis/reproduce.py fedsga.vs_multisfl --scale cpu`` renders, into
``analysis/REPRODUCTION.md``, the analysis of two sets of finished runs:

* the investigation sweep ``analysis/investigation/fedsga_vs_multisfl_small.yaml`` (the
  issue's ``scenarios/fedsga_small.yaml`` at 20 rounds: FedSGA under both readings of how
  the server updates ``w_s`` and of the client fronts, MultiSFL at three round budgets,
  FedAvg), run with ``sflsim sweep ... -o analysis/measured/fedsga_vs_multisfl_small``;
* the ``fedsga.table5`` target's runs at the same scale (the paper's protocol, §4.1.3).

For each run: accuracy (at round 6, as the issue measured, and final), client FLOPs,
activated parameters, simulated time, the cut layers chosen per device group, and where
the simulated time of a round goes (``events.csv``: per activity, seconds summed over
clients, and the share of the round each device spends in it). It runs nothing itself.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import reproduce as R
import yaml

from sflsim.metrics.results import read_result

SWEEP = R.HERE / "measured" / "fedsga_vs_multisfl_small"
SWEEP_COMMAND = ("sflsim sweep analysis/investigation/fedsga_vs_multisfl_small.yaml "
                 "-o analysis/measured/fedsga_vs_multisfl_small")


def describe(algorithm: dict) -> str:
    """A short label of a run's algorithm settings."""
    name = algorithm["name"]
    if name == "fedsga":
        return (f"fedsga {algorithm.get('server_update', 'per_client')}/"
                f"{algorithm.get('client_fronts', 'averaged')}")
    if name == "multisfl":
        split = algorithm.get("split") or {}
        return f"multisfl {split.get('name', '')} {split.get('round_budget_s', '')}".strip()
    return name


def run_row(run_dir: Path) -> dict:
    """Numbers of one run: accuracy, FLOPs, parameters, time, cuts."""
    summary, rounds = read_result(run_dir)
    scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    clients = pd.read_csv(run_dir / "clients.csv")
    acc = rounds.set_index("round")["server_accuracy"]
    at6 = acc.get(6, float("nan"))
    trained = clients[clients["status"] == "trained"]
    cuts = trained.groupby("group")["cut_layer"].mean()
    return {
        "run": describe(scenario["algorithm"]),
        "rounds": len(rounds),
        "acc_r6_pct": 100 * at6,
        "acc_final_pct": 100 * (summary.get("final_server_accuracy") or float("nan")),
        "client_gflops_per_round": rounds["client_flops_mean"].mean() / 1e9,
        "activated_params_m": rounds["activated_params_mean"].mean() / 1e6,
        "sim_s_per_round": summary["sim_time_s"] / max(1, len(rounds)),
        "mean_cut_by_group": ", ".join(f"{g} {c:.1f}" for g, c in cuts.items()),
    }


def markdown(frame: pd.DataFrame, digits: int = 3) -> str:
    """``frame`` (index included) as a markdown table, numbers rounded."""
    def cell(v: object) -> str:
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    head = [frame.index.name or "", *map(str, frame.columns)]
    return R.markdown_table([head] + [[str(i), *map(cell, row)] for i, row in
                                      zip(frame.index, frame.itertuples(index=False))])


def time_breakdown(run_dir: Path) -> pd.Series:
    """Seconds per round spent in each activity, summed over the run's actors (clients,
    links, server), from ``events.csv``; plus the mean round time."""
    events = pd.read_csv(run_dir / "events.csv")
    events["busy_s"] = events["end_s"] - events["start_s"]
    rounds = events["round"].nunique()
    per = events.groupby("activity")["busy_s"].sum() / rounds
    per["server queue (waiting)"] = events["queue_s"].sum() / rounds
    per["round time"] = pd.read_csv(run_dir / "rounds.csv")["round_time_s"].mean()
    return per


class FedSGAvsMultiSFL(R.Target):
    key, paper = "fedsga.vs_multisfl", "fedsga"
    title = "FedSGA vs MultiSFL in sflsim: what drives the gap (issue 13 §2)"
    estimate = {"cpu": "renders finished runs only (the sweep: about 4 min per point on one "
                       "core, 8 points; fedsga.table5 for the paper's protocol)"}

    def points(self, scale: R.Scale) -> list[R.Point]:
        return []  # an analysis of finished runs

    def analyse(self, ctx: R.Context) -> tuple[str, list]:
        parts = []
        rows, dirs = [], {}
        table = SWEEP / "sweep.csv"
        if table.is_file():
            for rec in pd.read_csv(table).to_dict("records"):
                run_dir = SWEEP / "points" / rec["point"]
                if rec["status"] != "completed" and not (run_dir / "rounds.csv").is_file():
                    continue
                row = run_row(run_dir)
                row["status"] = rec["status"]
                rows.append(row)
                dirs[row["run"]] = run_dir
        if rows:
            frame = pd.DataFrame(rows).set_index("run")
            parts.append(f"### `scenarios/fedsga_small.yaml` at 20 rounds\n\nRuns: `{SWEEP_COMMAND}` "
                         "(Adam 1e-3, 1 local epoch, batch 32, 8 devices, Dirichlet 0.1, 20% of "
                         "the embedded data; the issue's table used 6 rounds). Accuracy is the "
                         "server-side model's on 500 test images.\n\n" + markdown(frame))
            pick = [r for r in ("fedsga per_client/averaged", "fedsga sequential/averaged",
                                "multisfl resource 5") if r in dirs]
            if pick:
                breakdown = pd.DataFrame({r: time_breakdown(dirs[r]) for r in pick}).fillna(0.0)
                breakdown = breakdown.sort_values(pick[0], ascending=False)
                parts.append("### Where the simulated time goes\n\nSeconds per round in each "
                             "activity, summed over all clients, links and the server "
                             "(activities overlap, so the sum exceeds the round time; "
                             "`round time` is the mean round length).\n\n"
                             + markdown(breakdown))
        paper = ctx.root / "fedsga.table5" / "points"
        if paper.is_dir():
            prows = []
            for run_dir in sorted(paper.iterdir()):
                if (run_dir / "rounds.csv").is_file():
                    row = run_row(run_dir)
                    part = yaml.safe_load((run_dir / "scenario.yaml").read_text())["dataset"]["partition"]
                    row["partition"] = part["scheme"] + (f" {part['alpha']}" if part["scheme"] == "dirichlet"
                                                          else "")
                    prows.append(row)
            if prows:
                parts.append("### The paper's protocol (runs of `fedsga.table5 --scale cpu`)\n\n"
                             + markdown(pd.DataFrame(prows).set_index("run")))
        if not parts:
            parts.append(f"No runs yet: `{SWEEP_COMMAND}`, then "
                         "`python analysis/reproduce.py fedsga.table5 --scale cpu`.")
        return "\n\n".join(parts), []


R.register(FedSGAvsMultiSFL())
