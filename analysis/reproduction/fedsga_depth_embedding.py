"""FedSGA's depth embedding e(p): what its initial value and its presence do to accuracy.

``python analysis/reproduce.py fedsga.depth_embedding --scale cpu`` runs FedSGA (Yuan et
al., "When Is Shallow Enough? Adaptive Split Federated Learning with Client-Specific
Sufficiency Estimation", CIKM 2026, arXiv 2608.15639) at the ``fedsga.table5`` scale with
each reading of §3.4's "learnable embedding of the selected split depth" that the paper
leaves open: its initial value (``depth_embedding_init``: N(0, 1) as
:class:`torch.nn.Embedding` makes it, the same draw scaled by 1/sqrt(width), zeros) and
which row a client reads (``depth_embedding``: ``representation``, the default; ``cut``;
``none``, no embedding). The paper gives e(p) no width and no initial value.

Every configuration runs the same seeds, and a seed fixes the partition and the initial
weights of everything but e(p) (the initialisations scale one draw), so the table gives
each configuration's accuracy difference from the default seed by seed, beside the means.
All runs of this target are made on one machine (its CPU is in each run's manifest):
torch's kernels differ between CPU families, so runs of another target made elsewhere are
not paired with these.
"""

from __future__ import annotations

import json
from pathlib import Path

from .claims import Claim, greater
from .fedsga import PARTITIONS, fedsga_point
from .fedsga_readings import run_numbers
from .numbers import ResultTable, Stat
from .report import markdown_table
from .runner import test_set_size
from .scales import Scale
from .targets import Context, Point, Target, register

#: label -> (what it changes from the default, algorithm overrides); the first is the default
DEPTH_EMBEDDINGS = {
    "init-normal": ("depth_embedding_init: normal (N(0, 1); default)", {}),
    "init-scaled": ("depth_embedding_init: scaled (N(0, 1/64): the same draw / 8)",
                    {"depth_embedding_init": "scaled"}),
    "init-zeros": ("depth_embedding_init: zeros", {"depth_embedding_init": "zeros"}),
    "none": ("depth_embedding: none (no e)", {"depth_embedding": "none"}),
    "cut": ("depth_embedding: cut (e of the client's cut)", {"depth_embedding": "cut"}),
}
DEFAULT = "init-normal"


def cpu_of(run_dir: Path) -> str:
    """The CPU model a run's manifest records ("not recorded" for older runs)."""
    try:
        return json.loads((run_dir / "manifest.json").read_text()).get("cpu") or "not recorded"
    except (OSError, ValueError):
        return "not recorded"


class FedSGADepthEmbedding(Target):
    """FedSGA's depth embedding readings, 3 seeds, IID and Dirichlet 0.1 (module docstring)."""

    key, paper = "fedsga.depth_embedding", "fedsga"
    title = ("FedSGA's depth embedding e(p): its initial value (N(0, 1), N(0, 1/64), zeros) "
             "and its presence, seed by seed")
    scales = ("cpu", "smoke")
    estimate = {"cpu": "10 configurations x 3 seeds, 5-7 min each on one core: about 1.5 h "
                       "with --workers 2"}

    def points(self, scale: Scale) -> list[Point]:
        base = dict(scale.base["algorithm"])
        return [fedsga_point(f"fedsga-depth-{label}", {**base, **over}, part, scale)
                for label, (_, over) in DEPTH_EMBEDDINGS.items() for part in PARTITIONS]

    def claims(self) -> list[Claim]:
        """§3.4: conditioning the projector on the depth "allows it to compensate for
        systematic shifts induced by different split locations": each initial value of
        e(p), and e of the client's cut, beats no depth embedding (the paper's nearest
        printed numbers: Table 4a, full FedSGA against w/o harmonization)."""
        none = DEPTH_EMBEDDINGS["none"][0]
        out = []
        for label in ("init-normal", "init-scaled", "init-zeros", "cut"):
            for column, part in (("IID", "iid"), ("Non-IID", "noniid")):
                refs = tuple(("fedsga", "Table 4a", row, f"CIFAR-100 {column}")
                             for row in ("full (FedSGA)", "w/o Harmon."))
                out.append(greater(
                    f"depth_embedding_{label.replace('-', '_')}_helps_{part}",
                    f"\"Conditioning the projector on this depth information allows it to "
                    f"compensate for systematic shifts induced by different split locations\": "
                    f"FedSGA with {DEPTH_EMBEDDINGS[label][0]} is more accurate than with none "
                    f"({column})", "§3.4", DEPTH_EMBEDDINGS[label][0], none,
                    [f"{column} Acc."], refs))
        return out

    def collect(self, ctx: Context) -> ResultTable:
        out = ResultTable(name="sflsim")
        #: (label, partition) -> {seed: accuracy %}
        self.accuracy: dict[tuple[str, str], dict[int, float]] = {}
        self.cpus: set[str] = set()
        for label, (text, _) in DEPTH_EMBEDDINGS.items():
            for part, (column, _) in PARTITIONS.items():
                runs = ctx.completed(f"fedsga-depth-{label}-{part}")
                if not runs:
                    continue
                acc = {r.seed: run_numbers(r.run_dir)["Acc. (%)"] for r in runs}
                self.accuracy[(label, part)] = acc
                self.cpus |= {cpu_of(r.run_dir) for r in runs}
                out[(text, f"{column} Acc.")] = Stat.of(list(acc.values()),
                                                         test_set_size(runs[0].run_dir), list(acc))
        return out

    def paired(self, label: str, part: str) -> str:
        """``label``'s accuracy minus the default's, seed by seed, and their mean."""
        ours, ref = self.accuracy.get((label, part), {}), self.accuracy.get((DEFAULT, part), {})
        seeds = sorted(set(ours) & set(ref))
        if not seeds:
            return "n/a"
        diffs = [ours[s] - ref[s] for s in seeds]
        mean = sum(diffs) / len(diffs)
        return f"{mean:+.1f} ({', '.join(f'{d:+.1f}' for d in diffs)})"

    def render(self, ours: ResultTable, papers: list[ResultTable]) -> str:
        if not self.accuracy:
            return "No run of this target has finished yet."
        rows = [["reading", *(f"{c} Acc. (%)" for c, _ in PARTITIONS.values()),
                 *(f"{c}: minus default, per seed" for c, _ in PARTITIONS.values())]]
        for label, (text, _) in DEPTH_EMBEDDINGS.items():
            cells = [ours.get(text, f"{c} Acc.").fmt(1) if ours.has(text, f"{c} Acc.")
                     else "n/a" for c, _ in PARTITIONS.values()]
            diffs = ["" if label == DEFAULT else self.paired(label, part) for part in PARTITIONS]
            rows.append([text, *cells, *diffs])
        seeds = sorted({s for acc in self.accuracy.values() for s in acc})
        note = ("Acc. = final server accuracy, mean ± sample std over seeds "
                f"{', '.join(map(str, seeds))}; 'minus default' = the reading's accuracy minus "
                "depth_embedding_init: normal's at the same seed (same partition, same initial "
                "weights but e), in points, mean then each seed. Made on: "
                f"{'; '.join(sorted(self.cpus))}.")
        return "\n\n".join([markdown_table(rows), note])


register(FedSGADepthEmbedding())
