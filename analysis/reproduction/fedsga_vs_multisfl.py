"""FedSGA vs MultiSFL in sflsim: what drives the gap, from two sets of finished runs.

No longer a section of ``analysis/REPRODUCTION.md``: the stored runs of its sweeps are
1-seed runs (made again with today's sweep files at commit 89e8070, the whole test split),
and a verdict needs the seeds' spread. :class:`FedSGAvsMultiSFL` is kept, unregistered,
because ``analysis/cost_model_impact.py`` re-checks its claims on those runs (it registers
it in its own process), and the helpers here (:func:`run_row`, :func:`time_breakdown`)
read any run. Rerun both sweeps at 3 seeds (``--seeds 0-2``) before making it a report
section again. The runs:

* the investigation sweep ``analysis/investigation/fedsga_vs_multisfl_small.yaml``
  (``scenarios/fedsga_small.yaml`` at 20 rounds: FedSGA under both readings of how the
  server updates ``w_s`` and of the client fronts, MultiSFL at three round budgets,
  FedAvg), run with ``sflsim sweep ... -o analysis/measured/fedsga_vs_multisfl_small``;
* the ``fedsga.table5`` target's runs at the same scale (the paper's protocol, §4.1.3),
  and the sweep ``analysis/investigation/fedsga_paper_protocol_readings.yaml`` on the
  same scenario (IID): FedSGA with ``server_update: sequential``, FedSGA at the devices'
  static cuts, SplitFed V1.

For each run: accuracy (at round 6 and final), client FLOPs,
activated parameters, simulated time, the cut layers chosen per device group, and where
the simulated time of a round goes (the event trace: per activity, seconds summed over
clients, and the share of the round each device spends in it). It runs nothing itself.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd
import yaml

from sflsim.metrics.results import read_result, read_result_csv, read_run_table, training_rounds

from .claims import Claim, Verdict, greater
from .numbers import PaperNumbers, ResultTable, Stat, sampling_error
from .papers import HERE
from .report import markdown_table
from .runner import test_set_size
from .scales import Scale
from .targets import Context, Point, Target

SWEEP = HERE / "measured" / "fedsga_vs_multisfl_small"
SWEEP_COMMAND = ("sflsim sweep analysis/investigation/fedsga_vs_multisfl_small.yaml "
                 "-o analysis/measured/fedsga_vs_multisfl_small")
READINGS = HERE / "measured" / "fedsga_paper_protocol_readings"
READINGS_COMMAND = ("sflsim sweep analysis/investigation/fedsga_paper_protocol_readings.yaml "
                    "-o analysis/measured/fedsga_paper_protocol_readings")


def describe(algorithm: dict) -> str:
    """A short label of a run's algorithm settings."""
    name = algorithm["name"]
    if name == "fedsga":
        label = (f"fedsga {algorithm.get('server_update', 'per_client')}/"
                 f"{algorithm.get('client_fronts', 'averaged')}")
        split = algorithm.get("split")
        if split not in (None, "sufficiency"):
            label += f" split={split if isinstance(split, str) else split.get('name')}"
        return label + "".join(f" no-{k}" for k in ("adapt", "sufficiency", "harmonize")
                               if algorithm.get(k) is False)
    if name == "multisfl":
        split = algorithm.get("split") or {}
        return f"multisfl {split.get('name', '')} {split.get('round_budget_s', '')}".strip()
    return name


def run_row(run_dir: Path) -> dict:
    """Numbers of one run: accuracy, FLOPs, parameters, time, cuts."""
    summary, rounds = read_result(run_dir)
    rounds = training_rounds(rounds)  # without round 0, the untrained model
    scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    clients = read_run_table(run_dir, "clients", ["status", "group", "cut_layer"])
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


def markdown(frame: pd.DataFrame, digits: int = 4) -> str:
    """``frame`` (index included) as a markdown table, numbers to ``digits`` significant
    digits."""
    def cell(v: object) -> str:
        return f"{v:.{digits}g}" if isinstance(v, float) else str(v)

    head = [frame.index.name or "", *map(str, frame.columns)]
    return markdown_table([head] + [[str(i), *map(cell, row)] for i, row in
                                      zip(frame.index, frame.itertuples(index=False))])


def sweep_rows(sweep_dir: Path, partition: bool = False) -> tuple[list[dict], dict[str, Path]]:
    """:func:`run_row` of every point of a sweep directory that has rounds (finished or
    not: ``status`` says), and each row's run directory by its label."""
    rows, dirs = [], {}
    table = sweep_dir / "sweep.csv"
    status = ({rec["point"]: rec["status"] for rec in read_result_csv(table).to_dict("records")}
              if table.is_file() else {})
    for run_dir in sorted((sweep_dir / "points").glob("*")):
        rounds_csv = run_dir / "rounds.csv"
        if not rounds_csv.is_file() or training_rounds(read_result_csv(rounds_csv)).empty:
            continue
        row = run_row(run_dir)
        row["status"] = status.get(run_dir.name, "running")
        if partition:
            scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
            part = scenario["dataset"]["partition"]
            row["partition"] = part["scheme"] + (f" {part['alpha']}" if part["scheme"] == "dirichlet"
                                                  else "")
            row["seed"] = scenario.get("seed", 0)
        rows.append(row)
        dirs[row["run"]] = run_dir
    return rows, dirs


@functools.cache  # the findings and the table read the same runs
def time_breakdown(run_dir: Path) -> pd.Series:
    """Seconds per round spent in each activity, summed over the run's actors (clients,
    links, server), from the event trace; plus the mean round time."""
    events = read_run_table(run_dir, "events", ["round", "activity", "start_s", "end_s", "queue_s"])
    events["busy_s"] = events["end_s"] - events["start_s"]
    rounds = events["round"].nunique()
    per = events.groupby("activity")["busy_s"].sum() / rounds
    per["server queue (waiting)"] = events["queue_s"].sum() / rounds
    per["round time"] = training_rounds(read_result_csv(run_dir / "rounds.csv"))["round_time_s"].mean()
    return per


def findings(rows: list[dict], paper_rows: list[dict], dirs: dict[str, Path]) -> str:
    """What the runs say about the gap, in sentences whose numbers and whose direction come
    from the runs (a sentence whose runs are missing is left out). The paper-protocol rows
    are read at seed 0, the seed of the readings sweep."""
    small = {r["run"]: r for r in rows}
    paper = {(r["run"], r.get("partition", "")): r for r in paper_rows if r.get("seed", 0) == 0}

    def acc(table: dict, key: object) -> float | None:
        row = table.get(key)
        return None if row is None else row["acc_final_pct"]

    def compared(a: float, b: float) -> str:
        return "above" if a > b else "below" if a < b else "level with"

    out = []
    seq = acc(paper, ("fedsga sequential/averaged", "iid"))
    per = acc(paper, ("fedsga per_client/averaged", "iid"))
    mult = acc(paper, ("multisfl resource 60.0", "iid"))
    s_seq, s_per = acc(small, "fedsga sequential/averaged"), acc(small, "fedsga per_client/averaged")
    s_mult = max((r["acc_final_pct"] for k, r in small.items() if k.startswith("multisfl")), default=None)
    if None not in (seq, per, mult):
        text = (f"1. **How the server updates w_s.** Under FedSGA's own protocol (IID, seed 0) "
                f"FedSGA reaches {seq:.1f}% with `server_update: sequential` and {per:.1f}% with "
                f"`per_client` (the default), against MultiSFL's {mult:.1f}%.")
        if None not in (s_seq, s_per, s_mult):
            text += (f" On `fedsga_small` (Dirichlet 0.1, Adam): {s_seq:.1f}% and {s_per:.1f}% "
                     f"(MultiSFL at best {s_mult:.1f}%).")
        out.append(text)
    static, plain = (acc(paper, ("fedsga per_client/averaged split=static", "iid")),
                     acc(paper, ("fedsga per_client/averaged split=static no-harmonize", "iid")))
    sfl = acc(paper, ("splitfed_v1", "iid"))
    if None not in (static, plain, sfl):
        out.append(f"2. **Harmonization at the devices' static cuts.** With the split policy out of "
                   f"the way (each device at its static cut) FedSGA reaches {static:.1f}% with "
                   f"harmonization and {plain:.1f}% without it ({static - plain:+.1f} points "
                   f"for harmonization); SplitFed V1 at the same cuts {sfl:.1f}%.")
    pick = [k for k in ("fedsga per_client/averaged", "multisfl resource 5.0") if k in dirs]
    if len(pick) == 2:
        f, m = (time_breakdown(dirs[k]) for k in pick)
        queue = f.get("server queue (waiting)", 0.0)
        sent_f, sent_m = f.get("send_activations", 0.0), m.get("send_activations", 0.0)
        out.append(f"3. **Where simulated time goes.** FedSGA's split policy (eq. 8) depends on "
                   f"the sufficiency estimate and rho only, not on the device or its link; "
                   f"MultiSFL's resource policy picks the deepest cut that fits each device's "
                   f"budget. On `fedsga_small`, `send_activations` takes {sent_f:.1f} s per round "
                   f"summed over FedSGA's clients (round {f['round time']:.1f} s), "
                   f"{compared(sent_f, sent_m)} MultiSFL's {sent_m:.1f} s (round "
                   f"{m['round time']:.1f} s at a 5 s budget). Calibration probes add "
                   f"{f.get('send_probe_activations', 0):.1f} s; clients wait "
                   f"{queue:.3f} s per round in total for the server.")
    flops = {k: r["client_gflops_per_round"] for k, r in small.items()}
    ms = {k: v for k, v in flops.items() if k.startswith("multisfl")}
    fs = {k: v for k, v in flops.items() if k.endswith("/averaged")}
    if ms and fs:
        inside = [k for k, v in fs.items() if min(ms.values()) <= v <= max(ms.values())]
        out.append(f"4. **Client FLOPs.** MultiSFL's client GFLOPs per round run from "
                   f"{min(ms.values()):.1f} to {max(ms.values()):.1f} over budgets of 2 to 10 s "
                   f"(accuracy {min(small[k]['acc_final_pct'] for k in ms):.1f}-"
                   f"{max(small[k]['acc_final_pct'] for k in ms):.1f}%), FedSGA's "
                   + ", ".join(f"{v:.1f} ({k.split()[1].split('/')[0]})" for k, v in fs.items())
                   + (f"; {len(inside)} of them inside MultiSFL's range" if inside else
                      ": outside MultiSFL's range at these budgets")
                   + ". The claims below compare each reading with the budget whose client "
                     "FLOPs are closest.")
    local = acc(small, "fedsga per_client/local"), acc(small, "fedsga sequential/local")
    if None not in (*local, s_per, s_seq):
        out.append(f"5. **Client fronts kept local** on `fedsga_small`: {local[0]:.1f}% "
                   f"(per_client) and {local[1]:.1f}% (sequential) against {s_per:.1f}% and "
                   f"{s_seq:.1f}% with averaged fronts.")
    return "### What the runs say\n\n" + "\n".join(out) if out else ""


class FedSGAvsMultiSFL(Target):
    key, paper = "fedsga.vs_multisfl", "fedsga"
    title = "FedSGA vs MultiSFL in sflsim: what drives the gap"
    estimate = {"cpu": "renders finished runs only (the sweep: about 4 min per point on one "
                       "core, 8 points; fedsga.table5 for the paper's protocol)"}

    def points(self, scale: Scale) -> list[Point]:
        return []  # an analysis of finished runs

    def rendered_runs(self, ctx: Context) -> list[Path]:
        """The runs :meth:`analyse` reads: the two sweeps' and fedsga.table5's."""
        return [d for folder in (SWEEP, ctx.root / "fedsga.table5", READINGS)
                for d in sorted((folder / "points").glob("*")) if (d / "rounds.csv").is_file()]

    def analyse(self, ctx: Context) -> tuple[str, list]:
        parts = []
        rows, dirs = sweep_rows(SWEEP)
        if rows:
            n_test = test_set_size(next(iter(dirs.values())))
            parts.append(f"### `scenarios/fedsga_small.yaml` at 20 rounds\n\nRuns: `{SWEEP_COMMAND}` "
                         "(Adam 1e-3, 1 local epoch, batch 32, 8 devices, Dirichlet 0.1, 20% of "
                         "the embedded data; round 6 is shown too). Accuracy is the "
                         "server-side model's on "
                         + (f"{n_test:,} test images" if n_test else "the run's test split")
                         + ".\n\n"
                         + markdown(pd.DataFrame(rows).set_index("run")))
            pick = [r for r in ("fedsga per_client/averaged", "fedsga sequential/averaged",
                                "multisfl resource 5.0") if r in dirs]
            if pick:
                breakdown = pd.DataFrame({r: time_breakdown(dirs[r]) for r in pick}).fillna(0.0)
                breakdown = breakdown.sort_values(pick[0], ascending=False)
                parts.append("### Where the simulated time goes\n\nSeconds per round in each "
                             "activity, summed over all clients, links and the server "
                             "(activities overlap, so the sum exceeds the round time; "
                             "`round time` is the mean round length).\n\n"
                             + markdown(breakdown))
        paper_rows = [{**row, "source": "fedsga.table5"} for row in
                      sweep_rows(ctx.root / "fedsga.table5", partition=True)[0]]
        paper_rows += [{**row, "source": "readings sweep"} for row in
                       sweep_rows(READINGS, partition=True)[0]]
        if paper_rows:
            parts.append("### The paper's protocol (FedSGA §4.1.3 at CPU scale)\n\nRuns of "
                         "`python analysis/reproduce.py fedsga.table5 --scale cpu` (3 seeds) and "
                         f"`{READINGS_COMMAND}` (the same scenario, IID: the other server-update "
                         "reading, FedSGA at the devices' static cuts, SplitFed V1).\n\n"
                         + markdown(pd.DataFrame(paper_rows).set_index("run")))
        if not parts:
            parts.append(f"No runs yet: `{SWEEP_COMMAND}`, then "
                         "`python analysis/reproduce.py fedsga.table5 --scale cpu`.")
        else:
            parts.insert(0, findings(rows, paper_rows, dirs))
        return "\n\n".join(parts), self.verdicts(rows, ctx.numbers, dirs)

    #: FedSGA's readings in the sweep: (server_update, client_fronts)
    READINGS = ("per_client/averaged", "sequential/averaged", "per_client/local", "sequential/local")
    METRICS = {"Acc.": ("acc_final_pct", False, "is more accurate"),
               "FLOPs": ("client_gflops_per_round", True, "needs fewer client FLOPs"),
               "Time": ("sim_s_per_round", True, "takes less simulated time per round"),
               "Params": ("activated_params_m", True, "activates fewer client-side parameters")}

    def claims(self) -> list[Claim]:
        """Table 5's four claims for each FedSGA reading, against MultiSFL at the round
        budget whose client FLOPs are closest to that reading's."""
        out = []
        for reading in self.READINGS:
            for metric, (_, lower, what) in self.METRICS.items():
                refs = (("fedsga", "Table 5a", "FedSGA", f"CIFAR-100 {metric}"),
                        ("fedsga", "Table 5a", "MultiSFL", f"CIFAR-100 {metric}"))
                out.append(greater(
                    f"{metric.lower().rstrip('.')}_{reading.replace('/', '_')}",
                    f"FedSGA ({reading}) {what} than MultiSFL at the budget with the closest "
                    f"client FLOPs", "§4.5, Table 5", f"FedSGA {reading}",
                    f"MultiSFL @ {reading}", [metric], refs, lower_is_better=lower))
        return out

    def verdicts(self, rows: list[dict], numbers: PaperNumbers,
                 dirs: dict[str, Path] | None = None) -> list:
        """:meth:`claims` on the sweep's runs, and on the paper's Table 5 (CIFAR-100);
        ``dirs`` (run -> its folder) give the accuracies their test-set sampling error."""
        dirs = dirs or {}

        def stat(run: str, metric: str, column: str) -> Stat:
            value = float(frame.loc[run, column])
            n_test = test_set_size(dirs[run]) if metric == "Acc." and run in dirs else None
            return Stat(value, se=sampling_error(value, n_test))

        frame = pd.DataFrame(rows).set_index("run") if rows else pd.DataFrame()
        multisfl = [r for r in frame.index if r.startswith("multisfl")]
        ours, paper = ResultTable(name="sflsim"), ResultTable(name="paper CIFAR-100")
        matches: dict[str, str] = {}  # FedSGA's row -> the MultiSFL run it is compared with
        for reading in self.READINGS:
            label = f"fedsga {reading}"
            for metric in self.METRICS:
                for row, other in (("FedSGA", f"FedSGA {reading}"),
                                   ("MultiSFL", f"MultiSFL @ {reading}")):
                    paper[(other, metric)] = numbers.stat(("fedsga", "Table 5a", row,
                                                           f"CIFAR-100 {metric}"))
            if label not in frame.index or not multisfl:
                continue
            flops = frame.loc[label, "client_gflops_per_round"]
            match = min(multisfl, key=lambda m: abs(frame.loc[m, "client_gflops_per_round"] - flops))
            for metric, (column, _, _) in self.METRICS.items():
                ours[(f"FedSGA {reading}", metric)] = stat(label, metric, column)
                ours[(f"MultiSFL @ {reading}", metric)] = stat(match, metric, column)
            matches[f"FedSGA {reading}"] = match
        out = []
        for claim in self.claims():
            verdict = claim.evaluate(ours)
            row = next((r for r in matches if claim.statement.startswith(
                f"FedSGA ({r.split(' ', 1)[1]})")), None)
            if row is not None:
                verdict = Verdict(verdict.status, f"{verdict.detail} (MultiSFL: {matches[row]})",
                                  verdict.holds)
            on_paper = [f"{v.status} on {paper.name} ({v.detail})"
                        for v in [claim.evaluate(paper)] if v.status != "N/A"]
            out.append((claim, verdict, on_paper))
        return out

