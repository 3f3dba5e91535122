"""The reproduction harness: the papers' tables and figures as sflsim sweeps, beside the
papers' numbers, with their claims checked.

The entry point is the script ``analysis/reproduce.py`` (``from reproduction import *``).

Usage::

    python analysis/reproduce.py --list
    python analysis/reproduce.py hetero_splitee.table4 --scale cpu [-o DIR] [--workers N] [--seeds K]
    python analysis/reproduce.py fedsga.table5 --scale cpu --executor ray --address auto
    python analysis/reproduce.py fedsga.table5 --scale cpu --dry-run       # settings and points only
    python analysis/reproduce.py fedsga.table5 --scale cpu --estimate      # time 2 rounds per config
    python analysis/reproduce.py fedsga.table5 --scale cpu --report-only   # re-render finished runs
    python analysis/reproduce.py hetero_splitee.table4 --scale paper --device cuda  # the datasets needed

A **target** is one table or figure of a paper (``--list`` names them). Running a target
builds the scenarios it needs, runs them as one sflsim sweep (:mod:`sflsim.sweep`:
resumable, ``--workers`` local processes or Ray), prints sflsim's numbers beside the
paper's, and checks each of the paper's **claims** as a named check with its numbers and
a verdict (PASS, FAIL, or N/A when a number is missing). Each claim is also checked on
the paper's own numbers, which shows that the check says what the paper says.

The paper's numbers live in one data file, ``analysis/paper_numbers.csv`` (paper,
table_or_figure, row, column, value, std, unit, notes), typed in from the papers
(:data:`PAPER_TITLES`). Nothing here tunes a method to pass: every method runs with the
same settings, the papers' where sflsim has them.

Scales (``--scale``): ``cpu`` shrinks only what a 2-core CPU forces (data, width,
rounds) and prints every shrink factor with its reason (FedSGA targets keep 3 seeds per
configuration: the paper reports mean ± std over runs); ``smoke`` is seconds-long
(tests); ``paper`` is the papers' settings, read from the preset scenarios of
``scenarios/papers/`` (one per paper, dataset and, for FedSGA, backbone; the one copy of
those settings): a target runs on each dataset its table covers, each from its own
preset, and reports a part per dataset; what still departs from the paper is listed as
at the other scales. It needs the datasets (README "Data"): one that is missing stops the
target before anything runs, with the folder, layout and download hint. ``--device cuda``
trains the points whose algorithm can (``sflsim.config.schema.CUDA_ALGORITHMS``, FedSGA
among them) on the GPU. Runs go to ``DIR/<scale>/<target>/`` (default ``runs/reproduce``),
one sweep directory per target (``--scale paper``: ``DIR/paper/<target>/<preset>/``). A
point already finished by another target with an identical scenario (FedSGA's
Table 2, 4, 5 and Fig. 4 share runs) is linked, not re-run. Every point's scenario is
``name: <label>.s<seed>``.

``analysis/REPRODUCTION.md`` is written by this script, never by hand: one section per
(target, scale) between ``<!-- reproduce:begin KEY -->`` and ``<!-- reproduce:end KEY -->``
markers, replaced when that target runs again, but never by a section with fewer completed
runs (``--report-only`` over an empty folder, say) unless ``--replace TARGET`` asks for it;
the summary at the top is rebuilt from the sections' metadata. ``--report PATH`` writes
elsewhere (a smoke run defaults to ``DIR/REPRODUCTION.md``, so the committed report only
takes cpu and paper results).

One module per concern: :mod:`.papers` (paths, the papers' titles), :mod:`.numbers`
(:class:`Stat`, :class:`ResultTable`, :class:`PaperNumbers`), :mod:`.claims` (the checks
and their noise rule), :mod:`.scales` (the scales and their shrink tables), :mod:`.targets`
(:class:`Target` and the registry), :mod:`.runner` (points, seeds, workers, resume, reuse),
:mod:`.report` (sections, summary, markers), :mod:`.cli`; the targets of each paper in
:mod:`.hetero_splitee` and :mod:`.fedsga`, the extra analyses in :mod:`.fedsga_readings` and
:mod:`.fedsga_vs_multisfl`.

**Extra analyses and new targets.** A module named in :data:`TARGET_MODULES` is imported
with the package (in that order, which is also the report's), and any
``analysis/reproduce_*.py`` file is imported at start-up; either may register further
targets, which then run, resume and write their own report section like the paper targets
(README "Adding a target"); e.g.::

    # analysis/reproduce_time_breakdown.py
    import reproduce as R   # the script's namespace: everything this package exports

    class TimeBreakdown(R.Target):
        key, paper = "fedsga.time_breakdown", "fedsga"
        title = "FedSGA vs MultiSFL: where the simulated time goes"

        def points(self, scale):   # its own runs; [] to read only other targets' runs
            return [R.Point("fedsga-iid", {"dataset.partition": {"scheme": "iid"}})]

        def analyse(self, ctx):    # -> (markdown, [(Claim, Verdict, [paper notes])])
            runs = ctx.completed("fedsga-iid")  # or ctx.root / "fedsga.table5" / "points"
            return "| activity | FedSGA s | MultiSFL s |", []

    R.register(TimeBreakdown())
"""

from __future__ import annotations

import importlib
import sys

from .papers import HERE

if str(HERE) not in sys.path:  # table5.py and table_iv.py sit in analysis/
    sys.path.insert(0, str(HERE))

from .claims import (  # noqa: E402
    STATUSES,
    Claim,
    Comparison,
    Verdict,
    close,
    difference_spread,
    greater,
    judge,
    lowest,
    mean_of,
    monotone,
    paired_half_width,
    spread_of,
    upper_bound,
)
from .cli import analyse_variants, list_targets, main, parse_args, scale_for, variants  # noqa: E402
from .numbers import (  # noqa: E402
    MissingNumber,
    PaperNumbers,
    ResultTable,
    Stat,
    sampling_error,
    seeded_stat,
)
from .papers import (  # noqa: E402
    BACKBONES,
    DATASET_NAMES,
    DEFAULT_OUT,
    PAPER_NUMBERS,
    PAPER_TITLES,
    PRESETS,
    REPO,
    REPORT,
    SCALES,
)
from .report import (  # noqa: E402
    REPORT_HEADER,
    SMOKE_VERDICTS,
    claims_markdown,
    host_info,
    kept_settings,
    made_lines,
    markdown_table,
    scale_markdown,
    section_id,
    section_markdown,
    section_meta,
    update_report,
)
from .runner import (  # noqa: E402
    build_sweep,
    check_data,
    copy_results,
    estimate,
    finished_runs,
    get_path,
    point_mappings,
    reuse_finished,
    run_summary,
    run_target,
    scenario_key,
    set_path,
    test_set_size,
)
from .scales import (  # noqa: E402
    FEDSGA_ALGORITHM,
    FEDSGA_CPU,
    FEDSGA_PAPER,
    FEDSGA_SMOKE,
    FEDSGA_UNSTATED,
    HETERO_CPU,
    HETERO_PAPER,
    HETERO_SMOKE,
    SCALE_TABLE,
    Scale,
    Shrink,
    preset_path,
)
from .targets import TARGETS, Context, Point, Run, Target, load_plugins, register  # noqa: E402

#: the modules that register targets, imported in this order (the report's order)
TARGET_MODULES = ("hetero_splitee", "fedsga", "fedsga_readings", "fedsga_depth_embedding")
for _name in TARGET_MODULES:
    importlib.import_module(f"{__name__}.{_name}")

from .fedsga import PARTITIONS, TABLE2_BASELINES, TABLE4_ROWS, fedsga_point  # noqa: E402
from .hetero_splitee import HETERO_METHODS, HETERO_ROWS, LAYERS, tau_key  # noqa: E402

__all__ = [
    "BACKBONES", "DATASET_NAMES", "DEFAULT_OUT", "FEDSGA_ALGORITHM", "FEDSGA_CPU", "FEDSGA_PAPER",
    "FEDSGA_SMOKE", "FEDSGA_UNSTATED", "HERE", "HETERO_CPU", "HETERO_METHODS", "HETERO_PAPER",
    "HETERO_ROWS", "HETERO_SMOKE", "LAYERS", "PAPER_NUMBERS", "PAPER_TITLES", "PARTITIONS",
    "PRESETS", "REPO", "REPORT", "REPORT_HEADER", "SCALES", "SCALE_TABLE", "SMOKE_VERDICTS",
    "TABLE2_BASELINES", "TABLE4_ROWS", "TARGETS", "TARGET_MODULES", "Claim", "Comparison",
    "STATUSES", "spread_of", "difference_spread", "judge", "paired_half_width",
    "sampling_error", "seeded_stat",
    "Context", "MissingNumber", "PaperNumbers", "Point", "ResultTable", "Run", "Scale", "Shrink",
    "Stat", "Target", "Verdict", "analyse_variants", "build_sweep", "check_data",
    "claims_markdown", "close", "estimate", "fedsga_point", "finished_runs", "get_path",
    "greater", "host_info", "kept_settings", "list_targets", "load_plugins", "lowest", "made_lines",
    "main", "markdown_table", "mean_of", "monotone", "parse_args", "point_mappings", "preset_path",
    "copy_results", "register", "reuse_finished", "run_summary", "run_target", "scale_for",
    "scale_markdown", "scenario_key",
    "section_id", "section_markdown", "section_meta", "set_path", "tau_key", "test_set_size", "update_report",
    "upper_bound", "variants",
]
