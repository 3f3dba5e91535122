"""The targets of Hetero-SplitEE ("Hetero-SplitEE: Split Learning of Neural Networks with
Early Exits for Heterogeneous IoT Devices", arXiv 2512.09313): Tables III and IV, Fig. 2."""

from __future__ import annotations

import copy
import math

from .claims import Claim, close, greater, monotone, upper_bound
from .numbers import PaperNumbers, ResultTable, Stat, seeded_stat
from .report import markdown_table
from .runner import test_set_size
from .scales import Scale
from .targets import Context, Point, Target, register

HETERO_METHODS = {"sequential": ("Sequential", "hetero_splitee_sequential"),
                  "averaging": ("Averaging", "hetero_splitee_averaging"),
                  "distributed": ("Distributed", "distributed"),
                  "centralized": ("Centralized", "centralized")}
LAYERS = ["Layer-3", "Layer-4", "Layer-5"]
HETERO_ROWS = [f"{m}/{loc}" for m, _ in HETERO_METHODS.values() for loc in ("Server", "Client")]
#: the paper's open readings that decide its claims at this scale, each run beside the
#: default points of Table IV (``sflsim.algorithms.hetero_splitee`` quotes the text behind
#: each default): label -> (what it changes, method, algorithm overrides)
HETERO_READINGS = {
    "sequential-bn-per-client": ("Sequential, `bn_statistics: per_client` (one set of "
                                 "BatchNorm statistics per client)", "sequential",
                                 {"bn_statistics": "per_client"}),
    "averaging-bn-shared": ("Averaging, `bn_statistics: shared` (statistics averaged with the "
                            "parameters, as FedAvg's state dicts)", "averaging",
                            {"bn_statistics": "shared"}),
    "sequential-lr-divisor-1": ("Sequential, `server_lr_divisor: 1` (the server's learning rate "
                                "not divided by the 12 clients; Table II divides it)",
                                "sequential", {"server_lr_divisor": 1.0}),
    "sequential-bn-per-depth": ("Sequential, `bn_statistics: per_depth` (one set per end "
                                "layer)", "sequential", {"bn_statistics": "per_depth"}),
    "averaging-bn-per-depth": ("Averaging, `bn_statistics: per_depth` (averaged over the clients "
                               "at one end layer)", "averaging", {"bn_statistics": "per_depth"}),
}
#: the first readings of :data:`HETERO_READINGS`, which a measurement showed to decide a
#: claim (the statistics of Sequential's shared layers and of Averaging's aggregation, the
#: server lr): run before Centralized in each seed
DECISIVE_READINGS = 3
#: §IV-B's two regimes of task difficulty, by the overall accuracy the paper gives for each
#: (server accuracy, mean over end layers, of the Distributed baseline here)
EASY_TASK_MIN_PCT = 67.0   # "CIFAR-10 ... a relatively easy ... task with high overall accuracy (67–73%)"
HARD_TASK_MAX_PCT = 39.0   # "CIFAR-100, a challenging ... task with lower overall accuracy (25–39%)"
#: the largest gap to Distributed that §IV-B calls "similar performance" on CIFAR-10: Table
#: III, Layer-3, Sequential 72.35 vs Distributed 68.35 (points)
SIMILAR_GAP_PCT = 4.0


def _hetero_algorithm(method: str, scale: Scale) -> dict:
    algo = {"name": HETERO_METHODS[method][1]}
    if method == "sequential":
        algo = dict(scale.base["algorithm"])  # keeps the paper's lr divisor of 12 (Table II)
    return algo


class HeteroTable(Target):
    """Table III (homogeneous end layers) or Table IV (4/4/4 clients at end layers 3/4/5)."""

    paper = "hetero_splitee"

    datasets = ("CIFAR-10", "CIFAR-100", "STL-10")

    def __init__(self, key: str, table: str, homogeneous: bool, title: str, estimate: dict):
        self.key, self.table, self.homogeneous, self.title = key, table, homogeneous, title
        self.estimate = estimate

    def points(self, scale: Scale) -> list[Point]:
        points = []
        for method in HETERO_METHODS:
            if self.homogeneous:
                for layer in (3, 4, 5):
                    devices = _scaled_devices(scale, (layer, layer, layer))
                    points.append(Point(f"hetero-{method}-homo-l{layer}",
                                        {"algorithm": _hetero_algorithm(method, scale),
                                         "devices": devices}))
            else:
                points.append(Point(f"hetero-{method}-mixed",
                                    {"algorithm": _hetero_algorithm(method, scale)}))
        if not self.homogeneous and scale.name != "paper":
            # the readings measured to decide a claim before Centralized (the longest run),
            # the others after it: a sweep cut short keeps the decisive ones
            readings = [Point(f"hetero-{label}-mixed",
                              {"algorithm": {**_hetero_algorithm(method, scale), **overrides}})
                        for label, (_, method, overrides) in HETERO_READINGS.items()]
            points[-1:] = [*readings[:DECISIVE_READINGS], points[-1],
                           *readings[DECISIVE_READINGS:]]
        return points

    def reading_labels(self) -> dict[str, str]:
        """Point label -> reading key, for the readings of :data:`HETERO_READINGS`."""
        return {} if self.homogeneous else {f"hetero-{k}-mixed": k for k in HETERO_READINGS}

    def collect(self, ctx: Context, reading: str | None = None) -> ResultTable:
        """sflsim's table from the default points' runs, or, with ``reading`` (a key of
        :data:`HETERO_READINGS`), from that reading's runs alone (its method's rows)."""
        from table_iv import METHOD_NAMES, read_run

        names = {v: k for k, v in METHOD_NAMES.items()}
        per_cell: dict[tuple[str, str], list[tuple[int, float]]] = {}
        n_test: dict[tuple[str, str], int | None] = {}  # test samples behind each cell
        readings = self.reading_labels()
        for run in ctx.runs:
            if run.status != "completed" or readings.get(run.label) != reading:
                continue
            try:
                rows = read_run(run.run_dir)
            except SystemExit:
                continue
            for row in rows:
                method = HETERO_METHODS[_method_of(names[row["method"]])][0]
                key = (f"{method}/{row['location']}", row["end_layer"])
                per_cell.setdefault(key, []).append((run.seed, row["accuracy_pct"]))
                if key not in n_test:
                    n_test[key] = test_set_size(run.run_dir)
        return ResultTable({k: seeded_stat(v, n_test.get(k)) for k, v in per_cell.items()},
                           name="sflsim")

    def paper_views(self, numbers: PaperNumbers, scale: Scale) -> list[ResultTable]:
        cells = [(r, c) for r in HETERO_ROWS for c in LAYERS]
        return [numbers.view(self.paper, self.table, cells, lambda c, d=d: f"{d} {c}", f"paper {d}")
                for d in scale.compare_with]

    def claims(self) -> list[Claim]:
        def refs(rows: list[str], data: str = "CIFAR-100") -> tuple:
            return tuple((self.paper, self.table, r, f"{data} {c}") for r in rows for c in LAYERS)

        server = lambda m: f"{m}/Server"  # noqa: E731
        easy = _difficulty(server("Distributed"), easy=True)
        hard = _difficulty(server("Distributed"), easy=False)
        out = [
            upper_bound("centralized_upper_bound",
                        "\"The Centralized baseline achieves significantly higher accuracy than "
                        "all other approaches, demonstrating the performance upper bound\": its "
                        "server accuracy is at least every other method's at every end layer",
                        f"§IV-B, {self.table}", server("Centralized"),
                        [server("Sequential"), server("Averaging"), server("Distributed")], LAYERS,
                        refs([server(m) for m in ("Centralized", "Sequential", "Averaging",
                                                  "Distributed")])),
        ]
        for method in ("Sequential", "Averaging"):
            key = method.lower()
            out.append(close(
                f"{key}_similar_to_distributed_on_easy_task",
                f"\"For CIFAR-10, which is a relatively easy 10-class classification task with "
                f"high overall accuracy (67–73%), our proposed methods ... show similar "
                f"performance to the Distributed baseline\": on such a task (Distributed's server "
                f"accuracy at least {EASY_TASK_MIN_PCT:g}%), {method}'s server accuracy is within "
                f"{SIMILAR_GAP_PCT:g} points of Distributed's at every end layer (the largest gap "
                f"§IV-B calls similar: Table III, CIFAR-10 Layer-3)",
                f"§IV-B, {self.table}", server(method), server("Distributed"), LAYERS,
                SIMILAR_GAP_PCT, refs([server(method), server("Distributed")], "CIFAR-10"),
                condition=easy))
            out.append(greater(
                f"{key}_above_distributed_on_hard_task",
                f"\"For CIFAR-100, a challenging 100-class classification task with lower "
                f"overall accuracy (25–39%), our proposed methods demonstrate notable "
                f"improvements over the Distributed baseline, particularly for server-side "
                f"outputs\": on such a task (Distributed's server accuracy at most "
                f"{HARD_TASK_MAX_PCT:g}%), {method}'s server accuracy is above Distributed's",
                f"§IV-B, §IV-C, {self.table}", server(method), server("Distributed"), LAYERS,
                refs([server(method), server("Distributed")]), condition=hard))
        if self.homogeneous:
            out.append(greater(
                "sequential_not_below_averaging",
                "\"In the homogeneous setting, the Sequential strategy benefits from processing "
                "intermediate features with consistent dimensions and characteristics across all "
                "clients\": its server accuracy is not below Averaging's (mean over end layers)",
                "§IV-C ¶3, Table III", server("Sequential"), server("Averaging"), LAYERS,
                refs([server("Sequential"), server("Averaging")]), min_margin=-1e-9))
        else:
            out.append(close(
                "sequential_averaging_close",
                "\"Algorithm 1 (Sequential strategy) and Algorithm 2 (Averaging strategy) achieve "
                "more similar performance in the heterogeneous setting\": their server accuracy "
                "is within 2 points at every end layer (the paper's largest gap in Table IV is "
                "1.44)", "§IV-C ¶3, Table IV", server("Sequential"), server("Averaging"),
                LAYERS, 2.0, refs([server("Sequential"), server("Averaging")])))
        return out

    def analyse(self, ctx: Context) -> tuple[str, list]:
        """The table and claims of the default points, then (Table IV) a readings section:
        each reading's server accuracy beside the default's, and the claims on that method
        checked with the reading's numbers in place of the default's."""
        body, verdicts = super().analyse(ctx)
        if not self.reading_labels():
            return body, verdicts
        return body + "\n\n" + self.readings_markdown(ctx), verdicts

    def readings_markdown(self, ctx: Context) -> str:
        ours = self.collect(ctx)
        header = ["reading", *(f"Server {c}" for c in LAYERS), "mean", "vs default",
                  "vs Distributed", "claims on this method"]
        lines = [header]
        dist = _mean_stat(ours, "Distributed/Server")
        defaults = {"sequential": "Sequential, `bn_statistics: shared`, `server_lr_divisor: 12` "
                                  "(default)",
                    "averaging": "Averaging, `bn_statistics: per_client` (default)"}
        rows = [(defaults[m], m, ours) for m in defaults]
        for key, (what, method, _) in HETERO_READINGS.items():
            rows.append((what, method, self._with_reading(ours, self.collect(ctx, key), method)))
        for what, method, table in rows:
            name = HETERO_METHODS[method][0]
            row = f"{name}/Server"
            cells = [table.cells.get((row, c), Stat(float("nan"))).fmt() for c in LAYERS]
            mean = _mean_stat(table, row)
            base = _mean_stat(ours, row)
            verdicts = []
            for claim in self.claims():
                if name.lower() in claim.name and "centralized" not in claim.name:
                    v = claim.evaluate(table)
                    verdicts.append(f"`{claim.name}` {v.status}")
            lines.append([what, *cells, _fmt(mean), _diff(mean, base), _diff(mean, dist),
                          "; ".join(verdicts)])
        return ("**Readings** (the paper's open points that decide its claims here; each row "
                "is the method with one switch changed, at the same seeds; \"vs\" columns are "
                "differences of the means over end layers, in points):\n\n"
                + markdown_table(lines))

    @staticmethod
    def _with_reading(ours: ResultTable, reading: ResultTable, method: str) -> ResultTable:
        """``ours`` with ``method``'s rows replaced by the reading's (missing cells stay
        missing, so a claim on them is N/A)."""
        name = HETERO_METHODS[method][0]
        cells = {k: v for k, v in ours.cells.items() if not k[0].startswith(name + "/")}
        cells.update({k: v for k, v in reading.cells.items() if k[0].startswith(name + "/")})
        return ResultTable(cells, name=ours.name)

    def render(self, ours: ResultTable, papers: list[ResultTable]) -> str:
        header = ["method / location"]
        for col in LAYERS:
            header += [f"{col} sflsim"] + [f"{col} {p.name}" for p in papers]
        lines = [header]
        for row in HETERO_ROWS:
            line = [row]
            for col in LAYERS:
                line.append(ours.cells.get((row, col), Stat(float("nan"))).fmt())
                line += [p.cells.get((row, col), Stat(float("nan"))).fmt() for p in papers]
            lines.append(line)
        note = ("Accuracy (%) at the last evaluation, by end layer: server output and client "
                "early exit. In sflsim no gradient returns to Hetero-SplitEE clients, so for the "
                "same seeds the client rows of Sequential, Averaging and Distributed are "
                "identical by construction.")
        if self.table == "Table IV":
            note += (" The paper's Centralized row is copied from Table III (homogeneous); "
                     "sflsim's trains one centralized model per end layer on all data.")
        return markdown_table(lines) + "\n\n" + note


def _difficulty(row: str, easy: bool):
    """The condition of §IV-B's claims: the task is easy (``row``'s accuracy, mean over
    end layers, at least :data:`EASY_TASK_MIN_PCT`) or challenging (at most
    :data:`HARD_TASK_MAX_PCT`)."""

    def condition(table: ResultTable) -> tuple[bool, str]:
        from .claims import mean_of

        mean = mean_of(table, row, LAYERS).mean
        if easy:
            return mean >= EASY_TASK_MIN_PCT, (f"{row} {mean:.2f}% (an easy task needs at least "
                                               f"{EASY_TASK_MIN_PCT:g}%)")
        return mean <= HARD_TASK_MAX_PCT, (f"{row} {mean:.2f}% (a challenging task: at most "
                                           f"{HARD_TASK_MAX_PCT:g}%)")

    return condition


def _mean_stat(table: ResultTable, row: str) -> Stat:
    from .claims import mean_of
    from .numbers import MissingNumber

    try:
        return mean_of(table, row, LAYERS)
    except MissingNumber:
        return Stat(float("nan"))


def _fmt(stat: Stat) -> str:
    return stat.fmt()


def _diff(a: Stat, b: Stat) -> str:
    d = a.mean - b.mean
    return "n/a" if math.isnan(d) else f"{d:+.2f}"


def tau_key(tau: float) -> str:
    """A threshold as a column suffix (``-0.0`` and ``0.0`` alike)."""
    return f"{float(tau) + 0.0:.4f}"


def _method_of(algorithm: str) -> str:
    return next(k for k, (_, name) in HETERO_METHODS.items() if name == algorithm)


def _scaled_devices(scale: Scale, end_layers: tuple[int, int, int]) -> dict:
    devices = copy.deepcopy(scale.base["devices"])
    for group, layer in zip(devices.values(), end_layers):
        group["end_layer"] = layer
    return devices


class HeteroFig2(Target):
    """Fig. 2: Alg. 3 threshold sweep after Sequential training, homogeneous end layers."""

    key, paper = "hetero_splitee.fig2", "hetero_splitee"
    title = "Fig. 2: early-exit accuracy and exit ratio vs threshold (Sequential, homogeneous)"
    datasets = ("CIFAR-100",)
    #: entropy thresholds shown in the report (the claims use every one)
    SHOWN = (4.0, 3.0, 2.0, 1.5, 1.0, 0.5, 0.25, 0.1, 0.0)

    def __init__(self, estimate: dict):
        self.estimate = estimate

    def points(self, scale: Scale) -> list[Point]:
        return [Point(f"hetero-sequential-homo-l{layer}",
                      {"algorithm": _hetero_algorithm("sequential", scale),
                       "devices": _scaled_devices(scale, (layer, layer, layer))})
                for layer in (3, 4, 5)]

    def collect(self, ctx: Context) -> ResultTable:
        from sflsim.metrics.results import read_result_csv

        values: dict[tuple[str, str], list[tuple[int, float]]] = {}
        samples: dict[tuple[str, str], int] = {}
        for run in ctx.runs:
            path = run.run_dir / "early_exit.csv"
            if run.status != "completed" or not path.is_file():
                continue
            frame = read_result_csv(path)
            for rec in frame.to_dict("records"):
                row, tau = f"Layer-{int(rec['end_layer'])}", tau_key(rec["threshold"])
                for name, column, factor in (("accuracy", "accuracy", 100.0),
                                             ("exit_ratio", "exit_ratio", 100.0),
                                             ("latency_ms", "latency_s_mean", 1000.0)):
                    value = rec.get(column)
                    if value is not None and not (isinstance(value, float) and math.isnan(value)):
                        values.setdefault((row, f"{name}@{tau}"), []).append(
                            (run.seed, factor * value))
                        if name == "accuracy":  # measured on `samples` test samples
                            samples.setdefault((row, f"{name}@{tau}"), int(rec["samples"]))
        return ResultTable({k: seeded_stat(v, samples.get(k)) for k, v in values.items()},
                           name="sflsim")

    def claims(self) -> list[Claim]:
        refs = (("hetero_splitee", "Fig. 2", "Sequential (homogeneous)", "CIFAR-100 curves"),
                ("hetero_splitee", "§III-C", "setting", "threshold_min"),
                ("hetero_splitee", "§III-C", "setting", "threshold_max"),
                ("hetero_splitee", "§III-C", "setting", "threshold_step"))
        return [
            monotone("accuracy_rises_with_threshold",
                     "\"the more conservative the architecture, the more accurate the predictions "
                     "are, regardless of the location of the split points\": accuracy rises as "
                     "the threshold lets fewer samples exit, at every end layer (allowed: dips of "
                     "at most 1 point below the running maximum; the end must be above the start)",
                     "§IV-D, Fig. 2 (top)", LAYERS, "accuracy", True, 1.0, True, refs, unit=" %"),
            monotone("exit_ratio_falls_with_threshold",
                     "\"Larger confidence thresholds make the architecture more conservative by "
                     "rejecting more early-exit inferences and offloading them to the server\": "
                     "fewer samples exit on the device (no increase allowed)",
                     "§IV-D, Fig. 2 (bottom)", LAYERS, "exit_ratio",
                     False, 0.0, True, refs, unit=" %"),
            monotone("latency_rises_with_threshold",
                     "\"conservative architectures with higher thresholds result in slower "
                     "inference because more inputs are transmitted to the server\" (dips of at "
                     "most 0.05 ms allowed)", "§IV-D ¶2", LAYERS,
                     "latency_ms", True, 0.05, True, refs, unit=" ms"),
        ]

    def render(self, ours: ResultTable, papers: list[ResultTable]) -> str:
        header = ["end layer", "metric"] + [f"H<{t:g}" for t in self.SHOWN]
        lines = [header]
        for row in LAYERS:
            for name, label in (("accuracy", "accuracy %"), ("exit_ratio", "exit ratio %"),
                                ("latency_ms", "latency ms/sample")):
                line = [row, label]
                for t in self.SHOWN:
                    stat = ours.cells.get((row, f"{name}@{tau_key(-t)}"), Stat(float("nan")))
                    line.append(stat.fmt(1 if name != "latency_ms" else 2))
                if any(c != "n/a" for c in line[2:]):
                    lines.append(line)
        return (markdown_table(lines) + "\n\nsflsim's threshold tau is on the confidence C = -H "
                "(a sample exits when C > tau); the columns are entropy thresholds -tau, from "
                "most exits (4) to none (0). The paper prints Fig. 2 as curves only (CIFAR-100); "
                "its claims are the trends in §IV-D.")


# ---- registry of the paper targets. Estimates: --scale cpu on a 2-core machine with
# --workers 2 (one torch thread per run), extrapolated from the per-round costs measured
# above (HETERO_CPU, FEDSGA_CPU); all four FedSGA targets share runs: 60 runs, about 274
# CPU-min, 2.3 h. Rerun `--estimate` to measure them on another machine.
register(HeteroTable(
    "hetero_splitee.table4", "Table IV", homogeneous=False,
    title="Table IV: heterogeneous clients (4/4/4 at end layers 3/4/5), "
          "Sequential, Averaging, Distributed, Centralized",
    estimate={"cpu": "27 runs (4 methods and 5 readings x 3 seeds; per seed Sequential 10.7, "
                     "Averaging 9.1, Distributed 9.4, Centralized 18 min, each reading as its "
                     "method, timed at load 3 with augmentation): about 2 h 30 min with "
                     "--workers 2 on an otherwise idle machine",
              "smoke": "about 6 s with --threads 1"}))
register(HeteroTable(
    "hetero_splitee.table3", "Table III", homogeneous=True,
    title="Table III: homogeneous clients (all 12 at end layer 3, 4 or 5)",
    estimate={"cpu": "36 runs on the whole test split; "
                     "measured 2026-12-04 on an idle 2-core Intel Xeon with --workers 2: "
                     "Sequential 400 s a run, Distributed 410-590 s, Centralized 300-310 s: "
                     "about 2 h with --workers 2"}))
register(HeteroFig2(estimate={"cpu": "9 Sequential runs (table3's, reused when done): about "
                                     "33 min with --workers 2"}))
