"""The targets of FedSGA ("When Is Shallow Enough? Adaptive Split Federated Learning with
Client-Specific Sufficiency Estimation", CIKM 2026, arXiv 2608.15639): Tables 2, 4, 5 and
Fig. 4."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from .claims import MIN_PAIRED, Claim, Comparison, greater, lowest, paired_half_width, spread_of
from .numbers import PaperNumbers, ResultTable, Stat
from .papers import BACKBONES, SCALES
from .report import markdown_table
from .runner import test_set_size
from .scales import Scale
from .targets import Context, Point, Run, Target, register

PARTITIONS = {"iid": ("IID", {"scheme": "iid"}), "dir0.1": ("Non-IID", {"scheme": "dirichlet",
                                                                       "alpha": 0.1})}


def _partition(scale: Scale, partition: str) -> dict:
    """The partition of ``PARTITIONS`` on the scale's data: DomainNet's Non-IID is the
    domain partition with Dirichlet 0.1 labels within each domain (§4.1.1)."""
    spec = dict(PARTITIONS[partition][1])
    if spec["scheme"] == "dirichlet" and scale.base.get("dataset", {}).get("name") == "domainnet":
        spec["scheme"] = "domain"
    return spec


def fedsga_point(label: str, algorithm: dict, partition: str, scale: Scale) -> Point:
    return Point(f"{label}-{partition}", {"algorithm": algorithm,
                                          "dataset.partition": _partition(scale, partition)})


#: FedSGA Table 2's baselines in the paper's order (row label -> the paper's name):
#: FL (FedAvg, FedProx, FedBABU, FedGH, FedAS), then SFL (SplitFed, MergeSFL, FedMut,
#: MU-SplitFed, MultiSFL), §4.1.2. FedMut is an FL method (Hu et al., AAAI 2024) that the
#: paper lists among the SFL baselines; sflsim runs it as its authors describe it.
TABLE2_BASELINES = {
    "fedavg": "FedAvg", "fedprox": "FedProx", "fedbabu": "FedBABU", "fedgh": "FedGH",
    "fedas": "FedAS", "splitfed": "SplitFed", "mergesfl": "MergeSFL", "fedmut": "FedMut",
    "mu_splitfed": "MU-SplitFed", "multisfl": "MultiSFL",
}


#: the personalised baselines of Table 2 (scored two ways: sflsim.algorithms.personal_scores)
PERSONALISED = ("fedbabu", "fedgh", "fedas")

#: FedSGA Table 4's rows (ResNet-18 and ViT-B/16): the full method, each ablation, none.
TABLE4_ROWS = {"fedsga": "full (FedSGA)", "fedsga-no-adapt": "w/o Adapt.",
               "fedsga-no-sufficiency": "w/o Suff. Est.", "fedsga-no-harmonize": "w/o Harmon.",
               "splitfed": "none (= SplitFed)"}


def _fedsga_variants(scale: Scale) -> dict[str, dict]:
    """Row label -> the algorithm mapping of every FedSGA-paper configuration."""
    fedsga = dict(scale.base["algorithm"])
    return {
        "fedsga": fedsga,
        "multisfl": {"name": "multisfl"},
        "fedavg": {"name": "fedavg"},
        "splitfed": {"name": "splitfed_v1"},
        **{name: {"name": name} for name in TABLE2_BASELINES if name not in ("fedavg", "splitfed",
                                                                             "multisfl")},
        # the personalised baselines on the shared test set, as every row (§4.1.3: "the
        # same ... training protocol"); their own-distribution scores are shown beside
        **{name: {"name": name, "test_distribution": "global"} for name in PERSONALISED},
        "fedsga-no-adapt": {**fedsga, "adapt": False},
        "fedsga-no-sufficiency": {**fedsga, "sufficiency": False},
        "fedsga-no-harmonize": {**fedsga, "harmonize": False},
        "fedsga-static": {**fedsga, "split": "static"},
        "fedsga-random": {**fedsga, "split": "random"},
        "fedsga-resource": {**fedsga, "split": "resource", "round_budget_s": 60.0},
    }


class FedSGAAccuracy(Target):
    """An accuracy table of FedSGA (rows: configurations; columns: IID, Non-IID)."""

    paper = "fedsga"

    def __init__(self, key: str, title: str, rows: dict[str, str], table: str,
                 paper_rows: dict[str, str], claims: Callable[[FedSGAAccuracy], list[Claim]],
                 estimate: dict, paper_datasets: tuple[str, ...] = (),
                 datasets: tuple[str, ...] = (), backbone: str = "resnet18",
                 scales: tuple[str, ...] = SCALES):
        self.key, self.title, self.rows, self.table = key, title, rows, table
        self.paper_rows, self._claims, self.estimate = paper_rows, claims, estimate
        self.paper_datasets = paper_datasets
        self.datasets, self.backbone, self.scales = datasets or paper_datasets, backbone, scales

    def points(self, scale: Scale) -> list[Point]:
        variants = _fedsga_variants(scale)
        return [fedsga_point(label, variants[label], part, scale)
                for label in self.rows for part in PARTITIONS]

    def collect(self, ctx: Context) -> ResultTable:
        out = ResultTable(name="sflsim")
        #: (row, column) -> the personalised baselines' score on each client's own test
        #: distribution (the compared one is the shared test set's)
        self.own_distribution: dict[tuple[str, str], Stat] = {}
        for label, row in self.rows.items():
            for part, (column, _) in PARTITIONS.items():
                runs = ctx.completed(f"{label}-{part}")
                if label in PERSONALISED:
                    self.own_distribution[(row, column)] = Stat.of(
                        [own_distribution_accuracy(r.run_dir) for r in runs],
                        seeds=[r.seed for r in runs])
                accs = [_summary(r).get("final_server_accuracy") for r in runs]
                out[(row, column)] = Stat.of([None if a is None else 100 * a for a in accs],
                                             test_set_size(runs[0].run_dir) if runs else None,
                                             seeds=[r.seed for r in runs])
        return out

    def paper_views(self, numbers: PaperNumbers, scale: Scale) -> list[ResultTable]:
        cells = [(row, col) for row in self.rows.values() for col, _ in PARTITIONS.values()]
        views = []
        for d in (scale.dataset,) if scale.dataset else self.paper_datasets or scale.compare_with:
            view = ResultTable(name=f"paper {d}")
            for row, col in cells:
                key = (self.paper, self.table, self.paper_rows.get(row, row), f"{d} {col}")
                if numbers.has(key):
                    view[(row, col)] = numbers.stat(key)
            views.append(view)
        return views

    def claims(self) -> list[Claim]:
        return self._claims(self)

    def ref(self, row: str, column: str, dataset: str = "CIFAR-100") -> tuple:
        return (self.paper, self.table, self.paper_rows.get(row, row), f"{dataset} {column}")

    def render(self, ours: ResultTable, papers: list[ResultTable]) -> str:
        self.last = ours
        header = ["method"]
        for col, _ in PARTITIONS.values():
            header += [f"{col} sflsim"] + [f"{col} {p.name}" for p in papers]
        lines = [header]
        for row in self.rows.values():
            line = [row]
            for col, _ in PARTITIONS.values():
                line.append(ours.cells.get((row, col), Stat(float("nan"))).fmt())
                line += [p.cells.get((row, col), Stat(float("nan"))).fmt() for p in papers]
            lines.append(line)
        text = (markdown_table(lines) + "\n\nFinal test accuracy (%), mean ± std over seeds "
                "(sflsim) and as printed (paper); Non-IID is Dirichlet alpha = 0.1.")
        return text + self.personal_note()

    def personal_note(self) -> str:
        """The personalised baselines scored both ways, where their rows are in the table."""
        rows = [r for label, r in self.rows.items() if label in PERSONALISED]
        if not rows:
            return ""
        lines = [["method", *(f"{c} {how}" for c, _ in PARTITIONS.values()
                              for how in ("shared test set (compared)", "own distribution"))]]
        for row in rows:
            line = [row]
            for col, _ in PARTITIONS.values():
                line.append(self.last.cells.get((row, col), Stat(float("nan"))).fmt())
                own = self.own_distribution.get((row, col), Stat(float("nan")))
                line.append(own.fmt() if not own.missing else "n/a (runs predate the column)")
            lines.append(line)
        return ("\n\nThe table compares every method on the shared test set (§4.1.3: \"the same "
                "... training protocol\"). FedBABU, FedGH and FedAS are personalised methods "
                "whose papers score each client on test data distributed like its own; sflsim "
                "scores them both ways in the same runs (the clients table's "
                "`accuracy_own_distribution`: the test set reweighted to the client's "
                "training labels), mean over clients of the last evaluation:\n\n"
                + markdown_table(lines))


def own_distribution_accuracy(run_dir) -> float | None:
    """Mean over clients, in %, of a personalised run's ``accuracy_own_distribution`` at its
    last evaluated round (clients table); None where the run predates the column."""
    from sflsim.metrics.results import read_run_table, run_table_columns

    if "accuracy_own_distribution" not in run_table_columns(run_dir, "clients"):
        return None
    clients = read_run_table(run_dir, "clients", ["round", "accuracy_own_distribution"])
    scored = clients.dropna(subset=["accuracy_own_distribution"])
    if scored.empty:
        return None
    last = scored[scored["round"] == scored["round"].max()]
    return 100 * float(last["accuracy_own_distribution"].mean())


def _gain_by_seed(table: ResultTable, baselines: list[str]) -> list[float]:
    """Per seed, FedSGA's margin over the baselines' mean under Non-IID minus that under
    IID; empty unless every number was measured at the same seeds."""
    stats = {(r, c): table.get(r, c) for r in ("FedSGA", *baselines) for c in ("IID", "Non-IID")}
    seeds = {tuple(sorted(dict(s.by_seed))) for s in stats.values()}
    if len(seeds) != 1 or not next(iter(seeds)):
        return []
    gains = []
    for seed in next(iter(seeds)):
        margin = {c: dict(stats[("FedSGA", c)].by_seed)[seed]
                  - sum(dict(stats[(r, c)].by_seed)[seed] for r in baselines) / len(baselines)
                  for c in ("IID", "Non-IID")}
        gains.append(margin["Non-IID"] - margin["IID"])
    return gains


def _table2_claims(t: FedSGAAccuracy) -> list[Claim]:
    """§4.2: "FedSGA consistently achieves the best performance" (above each of the ten
    baselines, IID and Non-IID) and "shows more pronounced advantages under Non-IID"
    (its margin over the baselines' mean is larger under Non-IID)."""
    out = []
    baselines = list(TABLE2_BASELINES.values())
    for col in ("IID", "Non-IID"):
        for other in baselines:
            out.append(greater(
                f"fedsga_above_{other.lower()}_{col.lower().replace('-', '')}",
                f"\"FedSGA consistently achieves the best performance across all datasets, data "
                f"partitions, and backbone architectures\": FedSGA is more accurate than {other} "
                f"({col})", "§4.2, Table 2",
                "FedSGA", other, [col], (t.ref("FedSGA", col), t.ref(other, col))))

    def margin_grows(table: ResultTable) -> tuple[bool, str, list[Comparison]]:
        margins, spreads = {}, []
        for col in ("IID", "Non-IID"):
            others = [table.get(r, col) for r in baselines]
            fedsga = table.get("FedSGA", col)
            margins[col] = fedsga.mean - sum(s.mean for s in others) / len(others)
            # the spread of FedSGA's number and of the baselines' mean (each's / count)
            spreads += [spread_of(fedsga), spread_of(*others) / len(others)]
        known = [s for s in spreads if not math.isnan(s)]
        spread = math.sqrt(sum(s ** 2 for s in known)) if known else float("nan")
        gain = margins["Non-IID"] - margins["IID"]
        per_seed = _gain_by_seed(table, baselines)
        if len(per_seed) >= MIN_PAIRED:  # every number at the same seeds: paired
            spread = paired_half_width(per_seed)
        return gain > 0, (
            f"FedSGA minus the mean of the {len(baselines)} baselines: IID "
            f"{margins['IID']:+.2f}, Non-IID {margins['Non-IID']:+.2f}"), [
            Comparison(gain, spread, gain > 0)]

    out.append(Claim("fedsga_gain_larger_non_iid",
                     "FedSGA's advantage over the baselines is more pronounced under Non-IID",
                     "§4.2", margin_grows,
                     tuple(t.ref(r, c) for r in ("FedSGA", *baselines)
                           for c in ("IID", "Non-IID"))))
    return out


def _table4_claims(t: FedSGAAccuracy) -> list[Claim]:
    out = []
    removals = ("w/o Adapt.", "w/o Suff. Est.", "w/o Harmon.")
    for col in ("IID", "Non-IID"):
        c = col.lower().replace("-", "")
        for row, short in zip(removals, ("adapt", "sufficiency", "harmonize")):
            out.append(greater(f"removing_{short}_costs_accuracy_{c}",
                               f"\"all three components contribute positively across datasets, "
                               f"data partitions, and backbone architectures\": removing "
                               f"{row[4:]} costs accuracy ({col})", "§4.3, Table 4",
                               "full (FedSGA)", row, [col],
                               (t.ref("full (FedSGA)", col), t.ref(row, col))))
        out.append(lowest(f"sufficiency_matters_most_{c}",
                          f"\"the shallow sufficiency estimator plays a central role in split "
                          f"selection\": of the three removals, removing Suff. Est. costs most "
                          f"({col})",
                          "§4.3 (\"plays a central role\"), Table 4", "w/o Suff. Est.",
                          list(removals), [col], tuple(t.ref(r, col) for r in removals)))
        out.append(greater(f"components_above_splitfed_{c}",
                           f"FedSGA with all three components beats none of them (SplitFed; {col})",
                           "§4.3, Table 4 row 1", "full (FedSGA)", "none (= SplitFed)", [col],
                           (t.ref("full (FedSGA)", col), t.ref("none (= SplitFed)", col))))
    return out


def _fig4_claims(t: FedSGAAccuracy) -> list[Claim]:
    out = []
    for col in ("IID", "Non-IID"):
        c = col.lower().replace("-", "")
        for other in ("Static", "Random"):
            out.append(greater(f"sufficiency_above_{other.lower()}_{c}",
                               f"\"FedSGA consistently achieves the highest accuracy under both "
                               f"IID and Non-IID settings\": sufficiency-guided splits beat "
                               f"{other.lower()} splits ({col})",
                               "§4.6, Fig. 4", "FedSGA", other, [col],
                               (t.ref("FedSGA", col), t.ref(other, col))))
        out.append(greater(f"sufficiency_above_resource_{c}",
                           f"Sufficiency-guided splits beat resource-driven splits ({col}; "
                           f"the paper argues it in §1-2 but plots no resource bar)",
                           "§1, §2.2, §4.6", "FedSGA", "Resource", [col],
                           (t.ref("FedSGA", col),)))
    return out


def _summary(run: Run) -> dict:
    try:
        return json.loads((run.run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


class FedSGATable5(Target):
    """Table 5: FedSGA vs MultiSFL, activated client parameters, client FLOPs, time, accuracy;
    (a) ResNet-18 (``table="Table 5a"``), (b) ViT-B/16 (``"Table 5b"``)."""

    paper = "fedsga"
    datasets = ("CIFAR-100", "Tiny-ImageNet", "DomainNet")
    METRICS = {"Params": ("activated_client_params_m", "M"), "FLOPs": ("client_gflops_per_round", "G"),
               "Time": ("sim_time_per_round_s", "s"), "Acc.": ("accuracy_pct", "%")}
    #: where each table's Non-IID accuracies are printed: table -> {row: (table, its row)}
    NON_IID = {"Table 5a": {"MultiSFL": ("Table 2", "MultiSFL"), "FedSGA": ("Table 2", "FedSGA")},
               "Table 5b": {"FedSGA": ("Table 4b", "full (FedSGA)")}}

    def __init__(self, estimate: dict, key: str = "fedsga.table5", table: str = "Table 5a",
                 backbone: str = "resnet18", scales: tuple[str, ...] = SCALES):
        self.estimate, self.key, self.table, self.backbone = estimate, key, table, backbone
        self.scales = scales
        sub = table[-1]
        which = sub if backbone == "resnet18" else f"{sub}, {BACKBONES[backbone]}"
        self.title = f"Table 5 ({which}): FedSGA vs MultiSFL: activated parameters, FLOPs, time, accuracy"

    def points(self, scale: Scale) -> list[Point]:
        variants = _fedsga_variants(scale)
        return [fedsga_point(label, variants[label], part, scale)
                for label in ("multisfl", "fedsga") for part in PARTITIONS]

    def collect(self, ctx: Context) -> ResultTable:
        from table5 import table5

        out = ResultTable(name="sflsim")
        for label, row in (("multisfl", "MultiSFL"), ("fedsga", "FedSGA")):
            for part, (column, _) in PARTITIONS.items():
                runs = ctx.completed(f"{label}-{part}")
                if not runs:
                    continue
                frame = table5([r.run_dir for r in runs])
                rounds = [max(1, _summary(r).get("rounds_completed") or 1) for r in runs]
                frame["sim_time_per_round_s"] = frame["sim_time_s"].to_numpy() / rounds
                n_test = test_set_size(runs[0].run_dir)
                for metric, (name, _) in self.METRICS.items():
                    out[(row, f"{column} {metric}")] = Stat.of(
                        frame[name], n_test if metric == "Acc." else None,
                        seeds=[r.seed for r in runs])
        return out

    def paper_views(self, numbers: PaperNumbers, scale: Scale) -> list[ResultTable]:
        dataset = scale.dataset or "CIFAR-100"
        view = ResultTable(name=f"paper {dataset}")
        for row in ("MultiSFL", "FedSGA"):
            for metric in self.METRICS:
                key = ("fedsga", self.table, row, f"{dataset} {metric}")
                if numbers.has(key):
                    view[(row, f"IID {metric}")] = numbers.stat(key)
            table, paper_row = self.NON_IID[self.table].get(row, ("", ""))
            key = ("fedsga", table, paper_row, f"{dataset} Non-IID")
            if numbers.has(key):
                view[(row, "Non-IID Acc.")] = numbers.stat(key)
        return [view]

    def claims(self) -> list[Claim]:
        def ref(row: str, metric: str) -> tuple:
            return ("fedsga", self.table, row, f"CIFAR-100 {metric}")

        out = []
        for col in ("IID", "Non-IID"):
            c = col.lower().replace("-", "")
            paper = "" if col == "IID" else " (the paper's Table 5 is IID; here the Non-IID runs)"
            for metric, what, lower in (("Params", "activates fewer client-side parameters", True),
                                        ("FLOPs", "needs fewer client FLOPs", True),
                                        ("Time", "trains in less time (simulated, per round)", True),
                                        ("Acc.", "is more accurate", False)):
                refs = (ref("FedSGA", metric), ref("MultiSFL", metric))
                if metric == "Acc." and col == "Non-IID":
                    refs = tuple(("fedsga", table, paper_row, "CIFAR-100 Non-IID") for table, paper_row
                                 in self.NON_IID[self.table].values())
                out.append(greater(f"fedsga_{metric.lower().rstrip('.')}_vs_multisfl_{c}",
                                   f"\"Compared with MultiSFL, FedSGA consistently achieves higher "
                                   f"accuracy while reducing client-side computational cost across "
                                   f"all datasets\": FedSGA {what} than MultiSFL{paper}",
                                   "§4.5, Table 5",
                                   "FedSGA", "MultiSFL", [f"{col} {metric}"], refs,
                                   lower_is_better=lower))
        return out

    def render(self, ours: ResultTable, papers: list[ResultTable]) -> str:
        paper = papers[0] if papers else ResultTable(name="paper")
        lines = [["method", "partition"]]
        for metric in self.METRICS:
            lines[0] += [f"{metric} sflsim", f"{metric} {paper.name}"]
        for row in ("MultiSFL", "FedSGA"):
            for col, _ in PARTITIONS.values():
                line = [row, col]
                for metric in self.METRICS:
                    line.append(ours.cells.get((row, f"{col} {metric}"), Stat(float("nan"))).fmt())
                    line.append(paper.cells.get((row, f"{col} {metric}"), Stat(float("nan"))).fmt())
                lines.append(line)
        return (markdown_table(lines) + "\n\nsflsim: Params = activated client-side parameters "
                "(millions, mean over clients and rounds); FLOPs = client GFLOPs per client and "
                "round; Time = simulated seconds per round; Acc. = final accuracy (%). The paper "
                "prints Params (M), FLOPs (G) and Time (s) without saying per what, so only the "
                "directions are compared. Table 5 uses the IID accuracies of Table "
                f"{'2' if self.table == 'Table 5a' else '3'}.")


register(FedSGAAccuracy(
    "fedsga.table2", "Table 2 (ResNet-18): FedSGA and its ten baselines; IID and Dirichlet 0.1",
    rows={**TABLE2_BASELINES, "fedsga": "FedSGA"},
    table="Table 2", paper_rows={}, claims=_table2_claims,
    datasets=("CIFAR-10", "CIFAR-100", "Tiny-ImageNet", "DomainNet"),
    estimate={"cpu": "22 runs per seed; measured 2026-12-01: the 14 runs of the seven newer "
                     "baselines took 79.6 min with --workers 2 at load about 4 (the other 8 "
                     "about 12 min; fewer when table5's, table4's or fig4's runs are there)"}))
register(FedSGATable5(estimate={"cpu": "12 runs (6 x 5 min FedSGA, 6 x 3.8 min MultiSFL): about "
                                       "27 min with --workers 2"}))
register(FedSGAAccuracy(
    "fedsga.table4", "Table 4 (a): ablations of FedSGA's adaptation channel, sufficiency "
                     "estimator and harmonization",
    rows=TABLE4_ROWS,
    table="Table 4a", paper_rows={}, claims=_table4_claims, paper_datasets=("CIFAR-100",),
    datasets=("CIFAR-100", "Tiny-ImageNet", "DomainNet"),
    estimate={"cpu": "30 runs, about 140 CPU-min: about 70 min with --workers 2 (about 45 "
                     "min when table2's FedSGA and SplitFed runs are there)"}))
register(FedSGAAccuracy(
    "fedsga.fig4", "Fig. 4: split strategies: sufficiency (FedSGA) vs static, random, resource",
    rows={"fedsga": "FedSGA", "fedsga-static": "Static", "fedsga-random": "Random",
          "fedsga-resource": "Resource"},
    table="Fig. 4", paper_rows={}, claims=_fig4_claims, paper_datasets=("CIFAR-100",),
    datasets=("CIFAR-100", "DomainNet"),
    estimate={"cpu": "24 runs, about 120 CPU-min: about 60 min with --workers 2 (about 45 "
                     "min when table2's FedSGA runs are there)"}))
# the ViT-B/16 halves of Tables 4 and 5: --scale paper only (their presets are ViT-B/16's)
register(FedSGAAccuracy(
    "fedsga.table4_vit", "Table 4 (b, ViT-B/16): ablations of FedSGA's adaptation channel, "
                         "sufficiency estimator and harmonization",
    rows=TABLE4_ROWS,
    table="Table 4b", paper_rows={}, claims=_table4_claims, paper_datasets=("CIFAR-100",),
    datasets=("CIFAR-100", "Tiny-ImageNet", "DomainNet"), backbone="vit_b16", scales=("paper",),
    estimate={}))
register(FedSGATable5(estimate={}, key="fedsga.table5_vit", table="Table 5b", backbone="vit_b16",
                      scales=("paper",)))
