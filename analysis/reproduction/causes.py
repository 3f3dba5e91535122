"""Why a claim FAILs here: the measured cause of each FAIL verdict, with the runs that show
it, or the words "cause not measured".

A cause is registered by target and claim name (:data:`CAUSES`): a text naming what was
measured and where (a section's table, a reading's row at the same seeds), or a function
of the target's runs that measures it when the section is rendered (e.g. where the
simulated time of a round goes, from the runs' event traces). A FAIL with no registered
cause is reported as :data:`NOT_MEASURED`: the report never guesses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path

import pandas as pd

from .targets import Context

#: what a FAIL without a registered cause says
NOT_MEASURED = "cause not measured"

#: a cause: its text, or a function of the target's runs that measures it
Cause = str | Callable[[Context], str]


def transfer_time(label: str, other: str) -> Callable[[Context], str]:
    """A cause of "FedSGA takes longer per round than MultiSFL", measured from the runs'
    event traces: seconds per round each spends sending activations and activation
    gradients (summed over clients), and in client compute, means over seeds."""
    def measure(ctx: Context) -> str:
        spent = {name: _activity_seconds(ctx, name) for name in (label, other)}
        if any(s is None for s in spent.values()):
            return NOT_MEASURED
        a, b = spent[label], spent[other]
        return (f"activation traffic: per round, summed over clients, FedSGA spends "
                f"{a['send']:.1f} s sending activations and activation gradients against "
                f"MultiSFL's {b['send']:.1f} s, and {a['compute']:.1f} s in client compute "
                f"against {b['compute']:.1f} s (event traces of `{label}` and `{other}`, "
                f"mean over {plural_seeds(a['seeds'])}): FedSGA's cuts, shallower than MultiSFL's "
                f"(the cut shares are in fedsga.readings), send larger interfaces over the same "
                f"links")
    return measure


def plural_seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def _activity_seconds(ctx: Context, label: str) -> dict[str, float] | None:
    """Mean over the completed runs of ``label``: seconds per round sending activations
    and gradients, and in client forward and backward passes (event trace)."""
    from sflsim.metrics.results import read_run_table

    runs = ctx.completed(label)
    if not runs:
        return None
    send, compute = [], []
    for run in runs:
        events = read_run_table(Path(run.run_dir), "events", ["round", "activity", "start_s",
                                                              "end_s"])
        busy = (events["end_s"] - events["start_s"]).groupby(events["activity"]).sum()
        rounds = events["round"].nunique()
        send.append(sum(busy.get(k, 0.0) for k in ("send_activations", "send_gradients"))
                    / rounds)
        compute.append(sum(busy.get(k, 0.0) for k in ("client_forward", "client_backward"))
                       / rounds)
    return {"send": float(pd.Series(send).mean()), "compute": float(pd.Series(compute).mean()),
            "seeds": len(runs)}


def mean_accuracy(ctx: Context, target: str, label: str) -> tuple[float, int] | None:
    """Mean final server accuracy (%) and number of completed runs of point ``label`` of
    ``target``, read from that target's ``sweep.csv`` under the report's run folder."""
    path = ctx.root / target / "sweep.csv"
    if not path.is_file():
        return None
    table = pd.read_csv(path)
    done = table[(table["status"] == "completed")
                 & table["name"].astype(str).str.fullmatch(re.escape(label) + r"\.s\d+")]
    if done.empty:
        return None
    return 100 * float(done["final_server_accuracy"].mean()), len(done)


def compared(ctx: Context, rows: list[tuple[str, str, str]]) -> str:
    """``"what: 63.1 (3 runs, target)"`` for each ``(what, target, label)`` measured; the
    rows without runs are left out."""
    out = []
    for what, target, label in rows:
        found = mean_accuracy(ctx, target, label)
        if found is not None:
            out.append(f"{what} {found[0]:.1f} ({found[1]} runs, `{target}` `{label}`)")
    return "; ".join(out)


def non_iid_harmonizer(ctx: Context) -> str:
    """FedSGA's Non-IID accuracy, full and with the harmonizer's parts switched, at the
    same seeds: what the stored runs say decides its Non-IID verdicts."""
    measured = compared(ctx, [
        ("full FedSGA", "fedsga.table4", "fedsga-dir0.1"),
        ("w/o harmonization", "fedsga.table4", "fedsga-no-harmonize-dir0.1"),
        ("depth_embedding: none", "fedsga.readings", "fedsga-depth-none-dir0.1"),
        ("depth_embedding_init: scaled", "fedsga.depth_embedding",
         "fedsga-depth-init-scaled-dir0.1"),
        ("depth_embedding_init: zeros", "fedsga.depth_embedding",
         "fedsga-depth-init-zeros-dir0.1"),
        ("server_update: sequential", "fedsga.readings", "fedsga-sequential-dir0.1"),
        ("MultiSFL", "fedsga.table5", "multisfl-dir0.1")])
    if not measured:
        return NOT_MEASURED
    return ("the harmonizer under Dirichlet 0.1, as sflsim reads it where the paper is open: "
            f"Non-IID accuracy {measured}. Removing the harmonizer, or only its depth embedding e(p), "
            "or stepping the server sequentially lifts FedSGA to MultiSFL's level; e(p)'s "
            "width and initial value are not in the paper (fedsga.depth_embedding)")


def switch_cause(label: str, what: str) -> Callable[[Context], str]:
    """The cause of a reading's FAIL that the default reading passes or nearly passes:
    the reading's own switch, measured against the default at the same seeds."""
    def measure(ctx: Context) -> str:
        part = label.rsplit("-", 1)[-1]
        measured = compared(ctx, [(what, "fedsga.readings", label),
                                  ("the default reading", "fedsga.readings", f"fedsga-{part}")])
        return (f"the reading's switch ({what}): {measured}" if measured else NOT_MEASURED)
    return measure


def depth_embedding_init(ctx: Context) -> str:
    """FedSGA's accuracy at each initial value of e(p) and without it, same seeds: what the
    stored runs say of "e(p) helps" where it FAILs."""
    rows = []
    for part in ("iid", "dir0.1"):
        rows += [(f"{what} ({part})", "fedsga.depth_embedding", f"fedsga-depth-{label}-{part}")
                 for what, label in (("N(0, 1)", "init-normal"), ("N(0, 1/64)", "init-scaled"),
                                     ("zeros", "init-zeros"), ("e of the cut", "cut"),
                                     ("no e", "none"))]
    measured = compared(ctx, rows)
    if not measured:
        return NOT_MEASURED
    return ("e(p)'s initial value, which the paper does not give (started at N(0, 1), e is a "
            "second bias of the projector's first layer with a squared norm near its width, "
            "64): accuracy at the same seeds, " + measured)


#: Hetero-SplitEE Table IV's Sequential FAILs, shown by this section's Readings table
SEQUENTIAL_BN = ("Sequential's BatchNorm statistics, shared by the clients it trains in turn "
                 "(bn_statistics: shared, a reading: the paper does not say how Sequential keeps "
                 "them): with bn_statistics: per_client the same seeds give a PASS on "
                 "sequential_similar_to_distributed_on_easy_task and a WITHIN NOISE here (this "
                 "section's Readings table, row 'Sequential, bn_statistics: per_client')")

#: target key -> {claim name or fnmatch pattern: cause}
CAUSES: dict[str, dict[str, Cause]] = {
    "hetero_splitee.table4": {
        "sequential_similar_to_distributed_on_easy_task": SEQUENTIAL_BN,
        "sequential_averaging_close": SEQUENTIAL_BN,
    },
    "fedsga.table2": {"fedsga_above_*_noniid": non_iid_harmonizer},
    "fedsga.table5": {
        "fedsga_time_vs_multisfl_iid": transfer_time("fedsga-iid", "multisfl-iid"),
        "fedsga_time_vs_multisfl_noniid": transfer_time("fedsga-dir0.1", "multisfl-dir0.1"),
        "fedsga_acc_vs_multisfl_noniid": non_iid_harmonizer,
    },
    "fedsga.table4": {"removing_harmonize_costs_accuracy_noniid": non_iid_harmonizer,
                      "components_above_splitfed_noniid": non_iid_harmonizer},
    "fedsga.depth_embedding": {"depth_embedding_*_helps_*": depth_embedding_init},
    "fedsga.readings": {
        "fedsga_acc_noniid_vs_multisfl": non_iid_harmonizer,
        "fedsga_depth_cut_acc_noniid_vs_multisfl": non_iid_harmonizer,
        "fedsga_pool_interface_acc_vs_multisfl": switch_cause(
            "fedsga-pool-interface-iid", "server_backbone: false"),
        "fedsga_harmonizer_per_client_acc_vs_multisfl": switch_cause(
            "fedsga-harmonizer-per-client-iid", "harmonizer: per_client"),
        "fedsga_earlier_acc_vs_multisfl": switch_cause(
            "fedsga-earlier-iid", "sflsim's earlier reading, nine switches"),
        "fedsga_earlier_acc_noniid_vs_multisfl": non_iid_harmonizer,
    },
}


def cause_of(target: str, claim: str, ctx: Context) -> str:
    """The cause registered for ``claim`` of ``target`` (measured now where it is a
    function), else :data:`NOT_MEASURED`."""
    for pattern, cause in CAUSES.get(target, {}).items():
        if fnmatchcase(claim, pattern):
            return cause(ctx) if callable(cause) else cause
    return NOT_MEASURED
