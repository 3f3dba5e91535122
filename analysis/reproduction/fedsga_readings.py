"""FedSGA's readings side by side: what each switch does to accuracy, cuts and probes.

``python analysis/reproduce.py fedsga.readings --scale cpu`` runs FedSGA (Yuan et al.,
"When Is Shallow Enough? Adaptive Split Federated Learning with Client-Specific
Sufficiency Estimation", CIKM 2026) at the ``fedsga.table5`` scale once per reading that
sflsim offers where the paper is open (``sflsim.algorithms.fedsga``'s docstring quotes the
text behind each), beside MultiSFL and SplitFed at the same settings, and reports per
run: accuracy, the share of client-rounds at each cut, the calibration probes (mean
``L_p1``, ``L_pref`` and the share labelled sufficient, ``s = 1``), activated client
parameters, client FLOPs and simulated time; per calibration round of the default
reading, ``L_p1``, ``L_pref`` and ``s``. The default reading's runs are ``fedsga.table5``'s
(the same scenario: linked, not rerun).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sflsim.metrics.results import read_result, read_run_table, run_table_columns, training_rounds

from .claims import Claim, greater
from .fedsga import PARTITIONS, fedsga_point
from .numbers import ResultTable, Stat
from .report import markdown_table
from .runner import test_set_size
from .scales import Scale
from .targets import Context, Point, Target, register

#: label -> (what it changes from the default reading, algorithm overrides)
READINGS = {
    "fedsga": ("default: one backbone, adapted-prefix probe, shared two-layer harmonizer", {}),
    "fedsga-separate": ("backbone: separate (server's own stages 2..L)", {"backbone": "separate"}),
    "fedsga-probe-shared": ("probe: shared (both probes through the shared stages)",
                            {"probe": "shared"}),
    "fedsga-pool-interface": ("server_backbone: false (the server pools the interface)",
                              {"server_backbone": False}),
    "fedsga-harmonizer-per-client": ("harmonizer: per_client", {"harmonizer": "per_client"}),
    "fedsga-projector-per-depth": ("projector: per_depth", {"projector": "per_depth"}),
    "fedsga-sequential": ("server_update: sequential", {"server_update": "sequential"}),
    "fedsga-depth-cut": ("depth_embedding: cut (e(p) of the client's cut, also after the "
                         "server's stages)", {"depth_embedding": "cut"}),
    "fedsga-depth-none": ("depth_embedding: none", {"depth_embedding": "none"}),
    "fedsga-earlier": ("sflsim's earlier reading (all nine switches)", {
        "backbone": "separate", "probe": "shared", "harmonizer": "per_client",
        "projector": "per_depth", "phi_s": "projector", "descriptor": "after_training",
        "prototypes": "live", "depth_embedding": "cut", "prototype_update": "per_step"}),
    "fedsga-per-step-prototypes": ("prototype_update: per_step (the EMA moves every server "
                                   "step)", {"prototype_update": "per_step"}),
}
#: the readings also run under Dirichlet 0.1 (the Non-IID gap)
NON_IID = ("fedsga", "fedsga-sequential", "fedsga-earlier", "fedsga-depth-cut",
           "fedsga-depth-none", "multisfl", "splitfed")
#: FedSGA's calibration probes in a run's ``clients`` table (other algorithms have none)
PROBE_COLUMNS = ("probe_loss_p1", "probe_loss_pref", "sufficient_s")
#: the cut shares' column: client-rounds of every seed pooled (each seed's runs have the same
#: number of client-rounds, so this is the mean of the seeds' shares)
CUTS = "cuts 1/2/3/4 (% of client-rounds, all seeds)"
COLUMNS = ("Acc. (%)", CUTS, "mean L_p1", "median L_pref",
           "s = 1 (% of probes)", "Params (M)", "FLOPs (G)", "Time (s/round)")


def run_numbers(run_dir: Path) -> dict[str, float | str]:
    """One run's row: accuracy, cut shares (a tuple, % of the run's trained client-rounds
    at cuts 1..4), probe means, parameters, FLOPs, time."""
    summary, rounds = read_result(run_dir)
    rounds = training_rounds(rounds)
    probed = set(PROBE_COLUMNS) <= set(run_table_columns(run_dir, "clients"))
    clients = read_run_table(run_dir, "clients",
                             ["status", "cut_layer", *(PROBE_COLUMNS if probed else ())])
    trained = clients[clients["status"] == "trained"]
    shares = trained["cut_layer"].value_counts(normalize=True)
    row: dict[str, float | str] = {
        "Acc. (%)": 100 * (summary.get("final_server_accuracy") or float("nan")),
        CUTS: tuple(100 * shares.get(k, 0.0) for k in (1, 2, 3, 4)),
        "Params (M)": rounds["activated_params_mean"].mean() / 1e6,
        "FLOPs (G)": rounds["client_flops_mean"].mean() / 1e9,
        "Time (s/round)": summary["sim_time_s"] / max(1, len(rounds)),
    }
    probes = clients.dropna(subset=["probe_loss_p1"]) if probed else None
    if probes is not None and len(probes):
        row.update({"mean L_p1": probes["probe_loss_p1"].mean(),
                    "median L_pref": probes["probe_loss_pref"].median(),
                    "s = 1 (% of probes)": 100 * probes["sufficient_s"].mean()})
    return row


def calibration_rounds(run_dir: Path) -> pd.DataFrame:
    """Per calibration round: mean ``L_p1``, median ``L_pref``, share ``s = 1``, mean ``r``
    of the round's decisions and mean cut (from the ``clients`` table)."""
    needed = ["round", *PROBE_COLUMNS, "sufficiency_r", "cut_layer"]
    if not set(needed) <= set(run_table_columns(run_dir, "clients")):
        return pd.DataFrame()
    clients = read_run_table(run_dir, "clients", needed)
    by = clients.groupby("round")
    frame = pd.DataFrame({
        "probes": by["probe_loss_p1"].count(),
        "mean L_p1": by["probe_loss_p1"].mean(), "median L_pref": by["probe_loss_pref"].median(),
        "s = 1 (%)": 100 * by["sufficient_s"].mean(),
        "mean r": by["sufficiency_r"].mean(), "mean cut": by["cut_layer"].mean(),
    })
    return frame[frame["probes"] > 0]


class FedSGAReadings(Target):
    """Every FedSGA reading at the table5 scale (module docstring)."""

    key, paper = "fedsga.readings", "fedsga"
    title = ("FedSGA's readings where the paper is open: accuracy, cuts, calibration probes "
             "and cost per switch, beside MultiSFL and SplitFed")
    scales = ("cpu", "smoke")
    estimate = {"cpu": "16 runs at 5-15 min each (2 cores), 5 shared with fedsga.table5 and "
                       "fedsga.table2: about 1 h with --workers 2"}
    NAMES = {**{label: text for label, (text, _) in READINGS.items()},
             "multisfl": "MultiSFL (resource policy)", "splitfed": "SplitFed V1"}

    def points(self, scale: Scale) -> list[Point]:
        base = dict(scale.base["algorithm"])
        variants = {label: {**base, **over} for label, (_, over) in READINGS.items()}
        variants |= {"multisfl": {"name": "multisfl"}, "splitfed": {"name": "splitfed_v1"}}
        return [fedsga_point(label, algorithm, part, scale)
                for label, algorithm in variants.items() for part in PARTITIONS
                if part == "iid" or label in NON_IID]

    def claims(self) -> list[Claim]:
        """For each reading, the directions of Table 5 (IID accuracy, client FLOPs) and of
        Table 2 (Non-IID accuracy) against MultiSFL."""
        out = []
        for label in READINGS:
            for column, metric, what, lower, refs in (
                    ("IID Acc.", "acc", "is more accurate (IID)", False,
                     (("fedsga", "Table 5a", "FedSGA", "CIFAR-100 Acc."),
                      ("fedsga", "Table 5a", "MultiSFL", "CIFAR-100 Acc."))),
                    ("IID FLOPs", "flops", "needs fewer client FLOPs (IID)", True,
                     (("fedsga", "Table 5a", "FedSGA", "CIFAR-100 FLOPs"),
                      ("fedsga", "Table 5a", "MultiSFL", "CIFAR-100 FLOPs"))),
                    ("Non-IID Acc.", "acc_noniid", "is more accurate (Dirichlet 0.1)", False,
                     (("fedsga", "Table 2", "FedSGA", "CIFAR-100 Non-IID"),
                      ("fedsga", "Table 2", "MultiSFL", "CIFAR-100 Non-IID")))):
                if column.startswith("Non-IID") and label not in NON_IID:
                    continue
                out.append(greater(f"{label.replace('-', '_')}_{metric}_vs_multisfl",
                                     f"FedSGA ({self.NAMES[label]}) {what} than MultiSFL",
                                     "§4.2, §4.5; Tables 2, 5", self.NAMES[label],
                                     self.NAMES["multisfl"], [column], refs,
                                     lower_is_better=lower))
        return out

    def collect(self, ctx: Context) -> ResultTable:
        out = ResultTable(name="sflsim")
        self.rows, self.dirs = [], {}
        for label, text in self.NAMES.items():
            for part, (column, _) in PARTITIONS.items():
                runs = ctx.completed(f"{label}-{part}")
                if not runs:
                    continue
                numbers = [run_numbers(r.run_dir) for r in runs]
                self.dirs[(label, part)] = runs[0].run_dir
                line = [text, column]
                for col in COLUMNS:
                    values = [n.get(col, float("nan")) for n in numbers]
                    line.append("/".join(f"{sum(v) / len(v):.0f}" for v in zip(*values))
                                if col == CUTS else Stat.of(values).fmt(3))
                self.rows.append(line)
                seeds = [r.seed for r in runs]
                out[(text, f"{column} Acc.")] = Stat.of([n["Acc. (%)"] for n in numbers],
                                                         test_set_size(runs[0].run_dir), seeds)
                out[(text, f"{column} FLOPs")] = Stat.of([n["FLOPs (G)"] for n in numbers],
                                                          seeds=seeds)
        return out

    def render(self, ours: ResultTable, papers: list[ResultTable]) -> str:
        if not self.rows:
            return "No run of this target has finished yet."
        parts = [markdown_table([["reading", "partition", *COLUMNS], *self.rows]),
                 "Params = activated client-side parameters (millions, mean over clients and "
                 "rounds); FLOPs = client GFLOPs per client and round; Time = simulated "
                 "seconds per round; L_p1 and L_pref are the probe losses of eq. 7 (nats; "
                 "L_pref as a median, since an adapted prefix can be far off on a batch) over "
                 "every calibration probe; s = 1 is eq. 7's label 'the shallow interface "
                 "suffices'."]
        gap = self.non_iid_gap(ours)
        if gap:
            parts.append(gap)
        for part, (column, _) in PARTITIONS.items():
            run_dir = self.dirs.get(("fedsga", part))
            frame = calibration_rounds(run_dir) if run_dir else pd.DataFrame()
            if frame.empty:
                continue
            parts.append(f"Calibration rounds of the default reading, {column} "
                         f"({run_dir.name}):")
            parts.append(markdown_table(
                [["round", *frame.columns]]
                + [[str(i), *(f"{v:.3g}" for v in row)] for i, row in
                   zip(frame.index, frame.itertuples(index=False))]))
        return "\n\n".join(parts)


    def non_iid_gap(self, ours: ResultTable) -> str:
        """What is left of the Non-IID gap, in accuracy points: MultiSFL's Non-IID accuracy
        minus each reading's (and SplitFed's), and each one's drop from IID to Non-IID."""
        multisfl = self.NAMES["multisfl"]
        if not ours.has(multisfl, "Non-IID Acc."):
            return ""
        reference = ours.get(multisfl, "Non-IID Acc.").mean
        gaps, drops = [], []
        for label in NON_IID:
            name = self.NAMES[label]
            if not ours.has(name, "Non-IID Acc."):
                continue
            non_iid = ours.get(name, "Non-IID Acc.").mean
            if label != "multisfl":
                gaps.append(f"{name} {reference - non_iid:+.1f}")
            if ours.has(name, "IID Acc."):
                drops.append(f"{name} {ours.get(name, 'IID Acc.').mean - non_iid:.1f}")
        return ("The Non-IID gap (Dirichlet 0.1), MultiSFL's accuracy minus each one's, in "
                f"points (means over seeds; the spreads are in the table): {'; '.join(gaps)}. "
                f"The drop from IID to Non-IID: {'; '.join(drops)}.")


register(FedSGAReadings())
