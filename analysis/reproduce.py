"""Reproduce the papers' tables with sflsim and check their claims.

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

**Extra analyses.** Any ``analysis/reproduce_*.py`` module is imported at start-up and
may register further targets, which then run, resume and write their own report section
like the paper targets; e.g. for the FedSGA-vs-MultiSFL investigation::

    # analysis/reproduce_fedsga_vs_multisfl.py
    import reproduce as R

    class TimeBreakdown(R.Target):
        key, paper = "fedsga.vs_multisfl", "fedsga"
        title = "FedSGA vs MultiSFL: where the simulated time goes"

        def points(self, scale):   # its own runs; [] to read only other targets' runs
            return [R.Point("fedsga-iid", {"dataset.partition": {"scheme": "iid"}})]

        def analyse(self, ctx):    # -> (markdown, [(Claim, Verdict, [paper notes])])
            runs = ctx.completed("fedsga-iid")  # or ctx.root / "fedsga.table5" / "points"
            return "| activity | FedSGA s | MultiSFL s |", []

    R.register(TimeBreakdown())
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import glob
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sflsim.text import plural

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PAPER_NUMBERS = HERE / "paper_numbers.csv"
REPORT = HERE / "REPRODUCTION.md"
DEFAULT_OUT = Path("runs") / "reproduce"
#: the papers' preset scenarios, the base scenarios of ``--scale paper`` (one per paper,
#: dataset and, for FedSGA, backbone: ``<paper>/<dataset>[_<backbone>].yaml``)
PRESETS = REPO / "scenarios" / "papers"
#: a paper's dataset (as paper_numbers.csv names it) -> sflsim's dataset name
DATASET_NAMES = {"CIFAR-10": "cifar10", "CIFAR-100": "cifar100", "STL-10": "stl10",
                 "Tiny-ImageNet": "tiny_imagenet", "DomainNet": "domainnet"}
#: a backbone of the FedSGA presets -> how the paper names it
BACKBONES = {"resnet18": "ResNet-18", "vit_b16": "ViT-B/16"}
SCALES = ("cpu", "smoke", "paper")
PAPER_TITLES = {
    "hetero_splitee": ('Hetero-SplitEE, "Hetero-SplitEE: Split Learning of Neural Networks with '
                       'Early Exits for Heterogeneous IoT Devices" (arXiv 2512.09313)'),
    "fedsga": ('FedSGA, "When Is Shallow Enough? Adaptive Split Federated Learning with '
               'Client-Specific Sufficiency Estimation" (CIKM 2026, arXiv 2608.15639)'),
}

if str(HERE) not in sys.path:  # table5.py and table_iv.py sit next to this file
    sys.path.insert(0, str(HERE))
# plugins do ``import reproduce``: give them this module, not a second copy
sys.modules.setdefault("reproduce", sys.modules[__name__])


# ============================================================== numbers and tables


@dataclass(frozen=True)
class Stat:
    """A number with its spread: mean, sample std over ``n`` runs (paper: as printed)."""

    mean: float
    std: float = float("nan")
    n: int = 1

    @staticmethod
    def of(values: Iterable[float]) -> Stat:
        vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
        if not vals:
            return Stat(float("nan"), float("nan"), 0)
        mean = sum(vals) / len(vals)
        std = (math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
               if len(vals) > 1 else float("nan"))
        return Stat(mean, std, len(vals))

    @property
    def missing(self) -> bool:
        return math.isnan(self.mean)

    def fmt(self, digits: int = 2) -> str:
        """``mean ± std`` with ``digits`` decimals (3 significant digits below 0.1)."""
        if self.missing:
            return "n/a"
        text = _num(self.mean, digits)
        if not math.isnan(self.std):
            text += f" ± {_num(self.std, digits)}"
        return text


class MissingNumber(KeyError):
    """A claim needs a number that the result table does not have."""


class ResultTable:
    """Numbers by (row, column): sflsim's (mean ± std over seeds) or one view of a paper's."""

    def __init__(self, cells: dict[tuple[str, str], Stat] | None = None, name: str = ""):
        self.cells = dict(cells or {})
        self.name = name

    def __setitem__(self, key: tuple[str, str], value: Stat) -> None:
        self.cells[key] = value

    def get(self, row: str, column: str) -> Stat:
        stat = self.cells.get((row, column))
        if stat is None or stat.missing:
            raise MissingNumber(f"{row} / {column}")
        return stat

    def has(self, row: str, column: str) -> bool:
        stat = self.cells.get((row, column))
        return stat is not None and not stat.missing

    def rows(self) -> list[str]:
        return list(dict.fromkeys(r for r, _ in self.cells))

    def series(self, row: str, prefix: str) -> list[tuple[float, Stat]]:
        """``[(x, stat)]`` of the columns ``f"{prefix}@{x}"`` of ``row``, sorted by x."""
        out = []
        for (r, c), stat in self.cells.items():
            if r == row and c.startswith(prefix + "@") and not stat.missing:
                out.append((float(c.split("@", 1)[1]), stat))
        if not out:
            raise MissingNumber(f"{row} / {prefix}@...")
        return sorted(out)


class PaperNumbers:
    """``analysis/paper_numbers.csv``: one row per number a paper prints.

    Columns: ``paper`` (``fedsga`` | ``hetero_splitee``), ``table_or_figure`` (as the
    paper names it, or the section of a setting), ``row``, ``column``, ``value`` (a
    number, a setting's text, or empty when a figure prints none), ``std`` (FedSGA's
    ±), ``unit``, ``notes``.
    """

    COLUMNS = ("paper", "table_or_figure", "row", "column", "value", "std", "unit", "notes")

    def __init__(self, path: Path = PAPER_NUMBERS):
        self.path = path
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        missing = [c for c in self.COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{path}: missing columns {missing}")
        self.frame = frame
        self.index: dict[tuple[str, str, str, str], dict[str, str]] = {}
        for record in frame.to_dict("records"):
            key = (record["paper"], record["table_or_figure"], record["row"], record["column"])
            if key in self.index:
                raise ValueError(f"{path}: {key} appears twice")
            self.index[key] = record

    def has(self, key: tuple[str, str, str, str]) -> bool:
        return key in self.index

    def record(self, key: tuple[str, str, str, str]) -> dict[str, str]:
        try:
            return self.index[key]
        except KeyError:
            raise KeyError(f"{self.path.name} has no number {key}") from None

    def stat(self, key: tuple[str, str, str, str]) -> Stat:
        """The number at ``key`` (NaN when the paper prints none, e.g. a bar chart)."""
        rec = self.record(key)
        value = _float(rec["value"])
        return Stat(value, _float(rec["std"]), 1)

    def setting(self, paper: str, name: str) -> str:
        """A setting's value as printed (``row == "setting"``), whatever section holds it."""
        for (p, _, row, col), rec in self.index.items():
            if p == paper and row == "setting" and col == name:
                return rec["value"]
        raise KeyError(f"{self.path.name} has no setting {name!r} of {paper}")

    def view(self, paper: str, table: str, cells: Iterable[tuple[str, str]],
             column_of: Callable[[str], str], name: str) -> ResultTable:
        """A :class:`ResultTable` with ``cells`` (row, our column) read from ``table`` at
        (row, ``column_of(our column)``); cells the file lacks are left out."""
        out = ResultTable(name=name)
        for row, col in cells:
            key = (paper, table, row, column_of(col))
            if key in self.index:
                out[(row, col)] = self.stat(key)
        return out


def _num(x: float, digits: int = 2) -> str:
    return f"{x:.3g}" if 0 < abs(x) < 0.1 else f"{x:.{digits}f}"


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


# ============================================================== claims


@dataclass(frozen=True)
class Verdict:
    status: str  # PASS | FAIL | N/A
    detail: str


@dataclass(frozen=True)
class Claim:
    """One claim of a paper: a direction checked on a :class:`ResultTable`.

    ``check(table)`` returns ``(holds, numbers as text)`` and may raise
    :class:`MissingNumber`; ``refs`` are the keys of ``paper_numbers.csv`` the claim
    rests on (the test checks that they exist).
    """

    name: str
    statement: str
    source: str
    check: Callable[[ResultTable], tuple[bool, str]]
    refs: tuple[tuple[str, str, str, str], ...] = ()

    def evaluate(self, table: ResultTable) -> Verdict:
        try:
            holds, detail = self.check(table)
        except MissingNumber as exc:
            return Verdict("N/A", f"missing {exc.args[0]}")
        return Verdict("PASS" if holds else "FAIL", detail)


def _f(x: float) -> str:
    return _num(x)


def _noise(a: Stat, b: Stat) -> str:
    """`` (within 1 std)`` when the difference of two means is inside their spread."""
    spread = math.sqrt(sum(s.std ** 2 for s in (a, b) if not math.isnan(s.std)))
    if spread > 0 and abs(a.mean - b.mean) < spread:
        return " (within 1 std)"
    return ""


def mean_of(table: ResultTable, row: str, columns: Iterable[str]) -> Stat:
    """Mean over ``columns`` of ``row`` (std: root mean square of the cells' stds)."""
    stats = [table.get(row, c) for c in columns]
    stds = [s.std for s in stats if not math.isnan(s.std)]
    std = math.sqrt(sum(s ** 2 for s in stds) / len(stds)) if stds else float("nan")
    return Stat(sum(s.mean for s in stats) / len(stats), std, min(s.n for s in stats))


def greater(name: str, statement: str, source: str, row: str, other: str, columns: list[str],
            refs: tuple = (), lower_is_better: bool = False, min_margin: float = 0.0) -> Claim:
    """``row`` beats ``other`` on the mean over ``columns`` (by more than ``min_margin``)."""

    def check(table: ResultTable) -> tuple[bool, str]:
        a, b = mean_of(table, row, columns), mean_of(table, other, columns)
        diff = a.mean - b.mean
        holds = (-diff > min_margin) if lower_is_better else (diff > min_margin)
        over = "" if len(columns) == 1 else f" (mean over {', '.join(columns)})"
        return holds, (f"{row} {a.fmt()} vs {other} {b.fmt()}: {'+' if diff >= 0 else ''}"
                       f"{_num(diff)}{over}"
                       f"{_noise(a, b)}")

    return Claim(name, statement, source, check, refs)


def upper_bound(name: str, statement: str, source: str, top: str, others: list[str],
                columns: list[str], refs: tuple = ()) -> Claim:
    """``top`` is at least every row of ``others`` in every one of ``columns``."""

    def check(table: ResultTable) -> tuple[bool, str]:
        parts, holds = [], True
        for col in columns:
            t = table.get(top, col)
            best_row = max(others, key=lambda r: table.get(r, col).mean)
            best = table.get(best_row, col)
            holds &= t.mean >= best.mean
            parts.append(f"{col}: {_f(t.mean)} vs {best_row} {_f(best.mean)}")
        return holds, "; ".join(parts)

    return Claim(name, statement, source, check, refs)


def close(name: str, statement: str, source: str, a: str, b: str, columns: list[str],
          tolerance: float, refs: tuple = ()) -> Claim:
    """``a`` and ``b`` differ by at most ``tolerance`` in every one of ``columns``."""

    def check(table: ResultTable) -> tuple[bool, str]:
        diffs = {c: table.get(a, c).mean - table.get(b, c).mean for c in columns}
        worst = max(abs(d) for d in diffs.values())
        shown = ", ".join(f"{c} {d:+.2f}" for c, d in diffs.items())
        return worst <= tolerance, f"{a} − {b}: {shown}; largest |diff| {worst:.2f} (≤ {tolerance:g}?)"

    return Claim(name, statement, source, check, refs)


def lowest(name: str, statement: str, source: str, row: str, among: list[str], columns: list[str],
           refs: tuple = ()) -> Claim:
    """``row`` has the lowest mean over ``columns`` of the rows ``among`` (itself included)."""

    def check(table: ResultTable) -> tuple[bool, str]:
        means = {r: mean_of(table, r, columns).mean for r in among}
        low = min(means, key=means.get)
        return low == row, ", ".join(f"{r} {_f(v)}" for r, v in means.items())

    return Claim(name, statement, source, check, refs)


def monotone(name: str, statement: str, source: str, rows: list[str], prefix: str,
             increasing: bool, tolerance: float, overall: bool, refs: tuple = (),
             scale: float = 1.0, unit: str = "") -> Claim:
    """The series ``prefix@x`` of each of ``rows`` never moves against the direction by more
    than ``tolerance`` from its running extreme (and, with ``overall``, ends strictly beyond
    where it starts). Rows the table lacks are skipped; none at all is N/A."""

    def check(table: ResultTable) -> tuple[bool, str]:
        parts, holds, seen = [], True, 0
        for row in rows:
            try:
                series = table.series(row, prefix)
            except MissingNumber:
                continue
            seen += 1
            sign = 1.0 if increasing else -1.0
            extreme, worst = -math.inf, 0.0
            for _, stat in series:
                v = sign * stat.mean
                extreme = max(extreme, v)
                worst = max(worst, extreme - v)
            first, last = series[0][1].mean, series[-1][1].mean
            ok = worst <= tolerance + 1e-12 and (not overall or sign * (last - first) > 0)
            holds &= ok
            parts.append(f"{row}: {first * scale:.3g} -> {last * scale:.3g}{unit}, largest move "
                         f"against the trend {worst * scale:.3g}{unit}")
        if not seen:
            raise MissingNumber(f"{prefix}@... of {', '.join(rows)}")
        return holds, "; ".join(parts)

    return Claim(name, statement, source, check, refs)


# ============================================================== scales


@dataclass(frozen=True)
class Shrink:
    """One way a scale departs from the paper: what, the paper's value, ours, and why;
    ``applies``: the datasets (as the paper names them) or backbones it concerns, empty
    for all."""

    what: str
    paper: str
    here: str
    why: str
    applies: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scale:
    """A paper's settings at one scale: the base scenario, the departures, default seeds.

    At ``--scale paper`` the base scenarios are the preset files of ``scenarios/papers/``
    (the one copy of the papers' settings): :meth:`on` gives the scale on one of the
    paper's datasets, with that dataset's preset as its base and its numbers beside.
    """

    name: str
    paper: str
    base: dict[str, Any]
    shrinks: tuple[Shrink, ...]
    seeds: int
    #: the paper's dataset whose numbers sflsim's are set beside first (columns of views)
    compare_with: tuple[str, ...]
    #: the paper's dataset this scale runs on (:meth:`on`); None: the base's own data
    dataset: str | None = None
    #: the backbone of the FedSGA preset (``resnet18``, ``vit_b16``); None: the base's
    backbone: str | None = None
    #: the preset file the base was read from
    preset: Path | None = None

    def on(self, dataset: str, backbone: str | None = None) -> Scale:
        """This scale on ``dataset`` (as the paper names it): the base scenario read from
        its preset file, sflsim's numbers set beside that dataset's.

        Raises:
            ConfigError: the preset file is missing or not a scenario mapping.
        """
        from sflsim.config.load import read_yaml_mapping

        path = preset_path(self.paper, dataset, backbone)
        return replace(self, base=read_yaml_mapping(path), compare_with=(dataset,),
                       dataset=dataset, backbone=backbone, preset=path)

    @property
    def slug(self) -> str:
        """The preset's name (``cifar100_resnet18``); empty without one."""
        return self.preset.stem if self.preset is not None else ""

    @property
    def label(self) -> str:
        """``CIFAR-100``, ``CIFAR-100, ViT-B/16``; empty without a dataset."""
        if self.dataset is None:
            return ""
        return self.dataset + (f", {BACKBONES[self.backbone]}" if self.backbone == "vit_b16" else "")


def preset_path(paper: str, dataset: str, backbone: str | None = None) -> Path:
    """``scenarios/papers/<paper>/<dataset>[_<backbone>].yaml`` (``dataset`` as the paper
    names it: ``CIFAR-10``)."""
    name = DATASET_NAMES[dataset] + (f"_{backbone}" if backbone else "")
    return PRESETS / paper / f"{name}.yaml"


def _hetero_devices(end_layers: tuple[int, int, int] = (3, 4, 5), count: int = 4) -> dict:
    """The quickstart's 12-device fleet: 4 Raspberry Pi 4 (Wi-Fi), 4 Jetson Nano (LTE),
    4 Jetson Orin Nano (Wi-Fi), at the given end layers."""
    return {
        "pi4_wifi": {"profile": "rpi4", "count": count, "end_layer": end_layers[0], "link": "wifi"},
        "nano_lte": {"profile": "jetson_nano", "count": count, "end_layer": end_layers[1],
                     "link": "lte", "link_override": {"uplink_bps": "5 Mbps", "latency_s": "35 ms"}},
        "orin_wifi": {"profile": "jetson_orin_nano", "count": count, "end_layer": end_layers[2],
                      "link": "wifi"},
    }


def _fedsga_devices(scale: float = 1.0) -> dict:
    """The 20-device fleet of scenarios/fedsga_vs_multisfl.yaml (FedSGA's N = 20; the paper
    names no hardware): 8 Pi 4, 6 Jetson Nano, 4 Orin Nano, 2 phones; ``end_layer`` is the
    cut of the static split policy."""
    counts = {k: max(1, round(v * scale)) for k, v in
              {"pi4_wifi": 8, "nano_lte": 6, "orin_wifi": 4, "phone_5g": 2}.items()}
    return {
        "pi4_wifi": {"profile": "rpi4", "count": counts["pi4_wifi"], "end_layer": 1, "link": "wifi"},
        "nano_lte": {"profile": "jetson_nano", "count": counts["nano_lte"], "end_layer": 2,
                     "link": "lte"},
        "orin_wifi": {"profile": "jetson_orin_nano", "count": counts["orin_wifi"], "end_layer": 3,
                      "link": "wifi"},
        "phone_5g": {"profile": "phone_midrange", "count": counts["phone_5g"], "end_layer": 2,
                     "link": "5g"},
    }


#: FedSGA's hyperparameters, §4.1.3 (sflsim's field names; they are also sflsim's defaults).
FEDSGA_ALGORITHM = {"name": "fedsga", "rho": 0.1, "beta": 0.05, "lambda_align": 0.1, "tau_a": 0.5,
                    "tau_m": 0.5, "num_prompts": 4, "mu": 0.9, "calibration_every": 5}

# ---- Hetero-SplitEE: Table II, §IV-A. Measured cost at this scale (2026-11-30, AMD EPYC,
# 1 torch thread per run, 1-min load about 2.7 from other jobs on the 2 cores), from timed
# 1- and 2-round trials of the 12-client runs at 3,000 training images and width 0.25:
# a round with evaluation and the early-exit sweep takes 19 s (Sequential), 18 s
# (Averaging), 20 s (Distributed), 36 s (Centralized, three models); a Sequential round
# without evaluation 11 s, evaluation + early-exit sweep 7 s. With evaluation every 10 of
# 30 rounds: about 5.6 min per Sequential/Averaging/Distributed run, 16 min per
# heterogeneous Centralized run (three models), 5.5 min per homogeneous one. Repeat with
# `python analysis/reproduce.py TARGET --scale cpu --estimate --workers 2`.
HETERO_CPU = Scale(
    name="cpu", paper="hetero_splitee",
    base={
        "name": "hetero", "seed": 0,
        "dataset": {"name": "fashion_mnist", "fraction": 0.25, "partition": {"scheme": "iid"}},
        "model": {"name": "hetero_splitee_resnet", "width": 0.25},
        "devices": _hetero_devices(),
        "server": {"profile": "a100"},
        "algorithm": {"name": "hetero_splitee_sequential", "server_lr_divisor": 12.0},
        "training": {"rounds": 30, "local_epochs": 1, "batch_size": 64,
                     "optimizer": {"name": "adam", "lr": 1.0e-3},
                     "schedule": {"name": "cosine", "min_lr": 1.0e-6}},
        "evaluation": {"every_rounds": 10, "max_test_samples": None,
                       "early_exit": {"enabled": True}},
    },
    shrinks=(
        Shrink("dataset", "CIFAR-10 / CIFAR-100 / STL-10", "embedded Fashion-MNIST subset "
               "(28x28 grey, 10 classes)", "the only dataset on a fresh machine (no download); "
               "sflsim's CIFAR readers need the files (README \"Data\")"),
        Shrink("training images", "50,000 (4,167 per client)", "3,000 (250 per client; fraction "
               "0.25 of the 12,000-image subset)", "time; few samples per client also make the "
               "task 'hard enough' in the paper's sense (collaboration pays)"),
        Shrink("test images", "10,000", "500 (dataset.fraction shrinks the test split too)",
               "sflsim has no separate test fraction; ±2 points of sampling noise"),
        Shrink("model width", "1.0 (channels 64-64-64-128-256-512)", "0.25 (16-16-16-32-64-128)",
               "time: about 16x fewer FLOPs"),
        Shrink("rounds (epochs)", "600", "30 (cosine T_max 600 -> 30, same lr range)", "time"),
        Shrink("batch size", "1024", "64", "keeps the paper's steps per client epoch "
               "(4,167/1024 = 4.1; 250/64 = 3.9) at 1/17 of the data"),
        Shrink("evaluation", "every epoch (not stated)", "every 10 rounds and after the last",
               "time: a full evaluation costs about 40% of a round"),
        Shrink("augmentation", "pad 4, random crop, flip (§IV-A1)", "none",
               "the runs stored at this scale were made without dataset.augment; the paper "
               "presets (--scale paper) augment"),
        Shrink("hardware", "not stated", "4 Raspberry Pi 4 (Wi-Fi), 4 Jetson Nano (LTE), 4 Jetson "
               "Orin Nano (Wi-Fi), A100 server (the quickstart's fleet)",
               "only simulated time depends on it; accuracy does not"),
    ),
    seeds=1, compare_with=("CIFAR-100", "CIFAR-10"),
)
HETERO_SMOKE = Scale(
    name="smoke", paper="hetero_splitee",
    base={**copy.deepcopy(HETERO_CPU.base),
          "dataset": {"name": "fashion_mnist", "fraction": 0.02, "partition": {"scheme": "iid"}},
          "model": {"name": "hetero_splitee_resnet", "width": 0.0625},
          "devices": _hetero_devices(count=1),
          "algorithm": {"name": "hetero_splitee_sequential", "server_lr_divisor": 3.0},
          "training": {"rounds": 1, "local_epochs": 1, "batch_size": 16,
                       "optimizer": {"name": "adam", "lr": 1.0e-3},
                       "schedule": {"name": "cosine", "min_lr": 1.0e-6}},
          "evaluation": {"every_rounds": 1, "max_test_samples": 40,
                         "early_exit": {"enabled": True, "tau_step": 0.5, "samples_per_client": 4}}},
    shrinks=(Shrink("everything", "the paper", "3 clients, 240 images, width 1/16, 1 round",
                    "a seconds-long check of the harness, not of the paper"),),
    seeds=1, compare_with=("CIFAR-100", "CIFAR-10"),
)
#: --scale paper: Table II's settings, read from scenarios/papers/hetero_splitee/<dataset>.yaml
#: (Scale.on); here only what still departs from the paper at that scale.
HETERO_PAPER = Scale(
    name="paper", paper="hetero_splitee", base={},
    shrinks=(
        Shrink("hardware", "not stated", "4 Raspberry Pi 4 (Wi-Fi), 4 Jetson Nano (LTE, 5 Mbps up, "
               "35 ms), 4 Jetson Orin Nano (Wi-Fi), A100 server (the quickstart's fleet)",
               "the paper names none; only simulated time, bytes and energy depend on it, not "
               "accuracy"),
        Shrink("evaluation", "not stated", "every 10 rounds and after the last, whole test set",
               "time: a full evaluation with the early-exit sweep costs a good part of a round"),
        Shrink("optimizer details", "Adam (Table II); betas, eps, weight decay not stated",
               "torch's defaults (betas 0.9, 0.999; eps 1e-8), no weight decay",
               "the paper states none"),
        Shrink("STL-10 stem", "Table I: 7x7 conv, 3x3 stride-2 max-pool, padding not given",
               "max-pool padding 1 (torchvision's ResNet)", "as sflsim/models/resnet.py says",
               applies=("STL-10",)),
    ),
    seeds=1, compare_with=("CIFAR-100", "CIFAR-10"),
)

# ---- FedSGA: §4.1.3. Measured cost at this scale (2026-11-30, AMD EPYC, 1 torch thread per
# run, 1-min load about 2.6 from other jobs on the 2 cores): one round (5 local epochs) of a
# 20-client run at 2,400 training images, width 0.125, with a full evaluation: FedSGA 20 s,
# MultiSFL 15 s (`--estimate`, 2-round trials), FedAvg 14 s (6-round trial); at width 0.25
# and 1,200 images FedSGA took 23 s, MultiSFL 21 s, FedAvg and SplitFed V1 19 s. So one
# 15-round run: FedSGA (any variant) about 5 min, MultiSFL 3.8, FedAvg/SplitFed about 3.5
# (upper bounds: evaluation runs every 5 rounds, the trials evaluated every round).
# At lr 0.01 (the CIFAR-100 value) no method left chance level within 3 rounds; at lr 0.1
# FedAvg reached 73% and FedSGA 25% after 6 rounds (IID).
#: what FedSGA's paper leaves open, at every scale
FEDSGA_UNSTATED = (
    Shrink("hardware", "not stated", "8 Raspberry Pi 4, 6 Jetson Nano, 4 Jetson Orin Nano, "
           "2 phones, A100 server (scenarios/fedsga_vs_multisfl.yaml)",
           "only simulated time, FLOPs by cut and MultiSFL's resource cuts depend on it"),
    Shrink("optimizer details", "SGD; momentum, weight decay, schedule not stated",
           "SGD, momentum 0, no weight decay, constant lr", "the paper states none"),
    Shrink("MultiSFL split budget", "not stated (\"adjusts split strategies according to "
           "heterogeneous client resources\")", "sflsim's default: resource policy, 60 s "
           "per device and round (FedSGA's resource split in Fig. 4: the same 60 s)",
           "not tuned; the fedsga.vs_multisfl target compares budgets"),
    Shrink("SplitFed and static cuts", "not stated", "each device group's end layer: 1 (Pi 4), "
           "2 (Nano, phone), 3 (Orin) of ResNet-18's 4 cuts (ViT-B/16: 3, 6, 9 of 12); SplitFed "
           "is sflsim's splitfed_v1", "the fleet's scenario; sflsim's static policy"),
    Shrink("baselines' own settings (Table 2)", "not stated",
           "each baseline's defaults in sflsim (FedProx mu 0.01, FedMut alpha 4, FedAS and "
           "FedGH as their authors' code, MergeSFL and MU-SplitFed as their docstrings); "
           "FedBABU fine-tunes each client's copy for 5 epochs and is scored on the common "
           "test set (test_distribution: global), averaged over clients",
           "not tuned. \"All methods are evaluated under the same ... training protocol\" "
           "(§4.1.3): one test set for every row. FedBABU's own personalised score "
           "(test_distribution: client) would not be comparable with the other rows"),
)
FEDSGA_CPU = Scale(
    name="cpu", paper="fedsga",
    base={
        "name": "fedsga", "seed": 0,
        "dataset": {"name": "fashion_mnist", "fraction": 0.2, "partition": {"scheme": "iid"}},
        "model": {"name": "resnet18", "width": 0.125},
        "devices": _fedsga_devices(),
        "server": {"profile": "a100"},
        "algorithm": dict(FEDSGA_ALGORITHM),
        "training": {"rounds": 15, "local_epochs": 5, "batch_size": 64,
                     "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0},
                     "schedule": {"name": "constant"}},
        "evaluation": {"every_rounds": 5, "max_test_samples": None},
    },
    shrinks=(
        Shrink("dataset", "CIFAR-10 / CIFAR-100 / Tiny-ImageNet / DomainNet",
               "embedded Fashion-MNIST subset (28x28 grey, 10 classes)",
               "the only dataset on a fresh machine; sflsim's CIFAR readers need the files "
               "(README \"Data\"). Numbers are set beside CIFAR-100 (Tables 4, 5, Fig. 4 print no "
               "CIFAR-10) and, in Table 2, CIFAR-10"),
        Shrink("learning rate", "0.1 (CIFAR-10), 0.01 (CIFAR-100 and the rest)", "0.1",
               "Fashion-MNIST is a 10-class task: the CIFAR-10 protocol; at 0.01 no method "
               "left chance level in 3 rounds of the cpu scale"),
        Shrink("training images", "50,000 (2,500 per client: 40 steps per local epoch)",
               "2,400 (120 per client: 2 steps per local epoch; fraction 0.2 of the "
               "12,000-image subset)", "time: 5 local epochs over all data per round"),
        Shrink("test images", "10,000", "400 (dataset.fraction shrinks the test split too)",
               "sflsim has no separate test fraction; about ±2.5 points of sampling noise per run"),
        Shrink("model width", "1.0 (ResNet-18, 64-512 channels)", "0.125 (8-64 channels)",
               "time: 2.5x faster per round than width 0.25 on this CPU"),
        Shrink("rounds", "100 (CIFAR-10), 300 (CIFAR-100)", "15 (calibration rounds 1, 6, 11)",
               "time"),
        Shrink("evaluation", "not stated", "every 5 rounds and after the last", "time"),
        *FEDSGA_UNSTATED,
    ),
    seeds=3, compare_with=("CIFAR-100", "CIFAR-10"),
)
FEDSGA_SMOKE = Scale(
    name="smoke", paper="fedsga",
    base={**copy.deepcopy(FEDSGA_CPU.base),
          "dataset": {"name": "fashion_mnist", "fraction": 0.02, "partition": {"scheme": "iid"}},
          "model": {"name": "resnet18", "width": 0.0625},
          "devices": _fedsga_devices(scale=0.25),
          "training": {"rounds": 1, "local_epochs": 1, "batch_size": 16,
                       "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0},
                       "schedule": {"name": "constant"}},
          "evaluation": {"every_rounds": 1, "max_test_samples": 40}},
    shrinks=(Shrink("everything", "the paper", "6 clients, 240 images, width 1/16, 1 round, "
                    "1 local epoch", "a seconds-long check of the harness, not of the paper"),),
    seeds=1, compare_with=("CIFAR-100", "CIFAR-10"),
)
#: --scale paper: §4.1.3's settings, read from scenarios/papers/fedsga/<dataset>_<backbone>.yaml
#: (Scale.on); here only what still departs from the paper at that scale.
FEDSGA_PAPER = Scale(
    name="paper", paper="fedsga", base={},
    shrinks=(
        Shrink("torch device", "not stated", "with --device cuda the algorithms of "
               "sflsim.config.schema.CUDA_ALGORITHMS train on the GPU (FedSGA and all its "
               "variants, FedAvg, FedProx, FedBABU, FedMut, SplitFed, MultiSFL); FedGH, FedAS, "
               "MergeSFL and MU-SplitFed stay on the CPU",
               "wall time only: simulated times come from the profiles, and the results agree "
               "to float tolerance"),
        Shrink("evaluation", "not stated", "every 10 rounds and after the last, whole test set",
               "time"),
        Shrink("runs per configuration", "\"multiple runs\" (how many not stated)", "3 seeds",
               "mean ± std as the paper prints them"),
        *FEDSGA_UNSTATED,
        Shrink("DomainNet", "Table 1: 586,575 / 34,000 images at 224x224; Non-IID: \"the same "
               "partitioning protocol ... within its multi-domain data\" (§4.1.1)",
               "the official train/test lists of all six domains (about 410,000 / 176,000) at "
               "224x224; Non-IID: client i holds domain i mod 6, Dirichlet 0.1 labels within it "
               "(partition scheme domain); IID: uniform over all domains",
               "sflsim's reading of §4.1.1; the paper's split sizes are not the official lists'",
               applies=("DomainNet",)),
        Shrink("ViT-B/16", "input size and initialisation not stated",
               "trained from scratch on the datasets' own sizes: 32x32 (CIFAR-100, 2x2 patches "
               "of 16), 64x64 (Tiny-ImageNet, 4x4), 224x224 (DomainNet, 14x14); its 20 "
               "per-client server copies need about 29, 31 and 65 GiB of host memory",
               "sflsim resizes only Tiny-ImageNet and DomainNet", applies=("vit_b16",)),
    ),
    seeds=3, compare_with=("CIFAR-100", "CIFAR-10"),
)

SCALE_TABLE = {(s.paper, s.name): s for s in (HETERO_CPU, HETERO_SMOKE, HETERO_PAPER, FEDSGA_CPU,
                                              FEDSGA_SMOKE, FEDSGA_PAPER)}


# ============================================================== targets


@dataclass(frozen=True)
class Point:
    """One configuration a target needs, run once per seed: a label (the row it feeds)
    and overrides of the scale's base scenario (dotted path -> value)."""

    label: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    """One finished (or failed) point: label, seed, where its results are."""

    label: str
    seed: int
    point_id: str
    status: str
    error: str
    run_dir: Path


@dataclass
class Context:
    """What a target's analysis gets: the scale, its runs, the paper numbers, and where
    runs live (``root``: every target's sweep directory at this scale, ``root/<key>``)."""

    scale: Scale
    runs: list[Run]
    numbers: PaperNumbers
    root: Path = Path(".")

    def completed(self, label: str) -> list[Run]:
        return [r for r in self.runs if r.label == label and r.status == "completed"]


class Target:
    """A paper's table or figure (or an extra analysis): its runs, numbers and claims.

    Subclasses set the class attributes and implement :meth:`points` and
    :meth:`analyse`; the paper targets implement :meth:`collect` and :meth:`render` and
    inherit :meth:`analyse`, which checks :attr:`claims` on sflsim's table and on each
    of the paper's views.
    """

    key = ""
    paper = ""
    title = ""
    #: measured (or extrapolated) run time per scale, written from timed trials
    estimate: dict[str, str] = {}
    #: the scales it runs at
    scales: tuple[str, ...] = SCALES
    #: ``--scale paper``: the paper's datasets it runs on, one preset each (empty: none)
    datasets: tuple[str, ...] = ()
    #: ``--scale paper``: the backbone of its FedSGA presets
    backbone: str | None = None

    def points(self, scale: Scale) -> list[Point]:
        raise NotImplementedError

    def claims(self) -> list[Claim]:
        return []

    def collect(self, ctx: Context) -> ResultTable:
        raise NotImplementedError

    def paper_views(self, numbers: PaperNumbers, scale: Scale) -> list[ResultTable]:
        return []

    def render(self, ours: ResultTable, papers: list[ResultTable]) -> str:
        raise NotImplementedError

    def analyse(self, ctx: Context) -> tuple[str, list[tuple[Claim, Verdict, list[str]]]]:
        """The section body (markdown) and each claim's verdict with the paper's."""
        ours = self.collect(ctx)
        papers = self.paper_views(ctx.numbers, ctx.scale)
        verdicts = []
        for claim in self.claims():
            on_paper = []
            for view in papers:
                v = claim.evaluate(view)
                if v.status != "N/A":
                    on_paper.append(f"{v.status} on {view.name} ({v.detail})")
            verdicts.append((claim, claim.evaluate(ours), on_paper))
        return self.render(ours, papers), verdicts


TARGETS: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add a target to the registry (plugins call this); the key must be new."""
    if not re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+", target.key):
        raise ValueError(f"target key {target.key!r}: use paper.name (lower case, digits, _)")
    if target.key in TARGETS:
        raise ValueError(f"target {target.key!r} is registered twice")
    TARGETS[target.key] = target
    return target


# ---------------------------------------------------------------- Hetero-SplitEE

HETERO_METHODS = {"sequential": ("Sequential", "hetero_splitee_sequential"),
                  "averaging": ("Averaging", "hetero_splitee_averaging"),
                  "distributed": ("Distributed", "distributed"),
                  "centralized": ("Centralized", "centralized")}
LAYERS = ["Layer-3", "Layer-4", "Layer-5"]
HETERO_ROWS = [f"{m}/{loc}" for m, _ in HETERO_METHODS.values() for loc in ("Server", "Client")]


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
        return points

    def collect(self, ctx: Context) -> ResultTable:
        from table_iv import METHOD_NAMES, read_run

        names = {v: k for k, v in METHOD_NAMES.items()}
        per_cell: dict[tuple[str, str], list[float]] = {}
        for run in ctx.runs:
            if run.status != "completed":
                continue
            try:
                rows = read_run(run.run_dir)
            except SystemExit:
                continue
            for row in rows:
                method = HETERO_METHODS[_method_of(names[row["method"]])][0]
                key = (f"{method}/{row['location']}", row["end_layer"])
                per_cell.setdefault(key, []).append(row["accuracy_pct"])
        return ResultTable({k: Stat.of(v) for k, v in per_cell.items()}, name="sflsim")

    def paper_views(self, numbers: PaperNumbers, scale: Scale) -> list[ResultTable]:
        cells = [(r, c) for r in HETERO_ROWS for c in LAYERS]
        return [numbers.view(self.paper, self.table, cells, lambda c, d=d: f"{d} {c}", f"paper {d}")
                for d in scale.compare_with]

    def claims(self) -> list[Claim]:
        def refs(rows: list[str]) -> tuple:
            return tuple((self.paper, self.table, r, f"CIFAR-100 {c}") for r in rows for c in LAYERS)

        server = lambda m: f"{m}/Server"  # noqa: E731
        out = [
            upper_bound("centralized_upper_bound",
                        "Centralized training is the upper bound: its server accuracy is at least "
                        "every other method's at every end layer",
                        f"§IV-A4, §IV-B, {self.table}", server("Centralized"),
                        [server("Sequential"), server("Averaging"), server("Distributed")], LAYERS,
                        refs([server(m) for m in ("Centralized", "Sequential", "Averaging",
                                                  "Distributed")])),
            greater("sequential_above_distributed",
                    "On a hard enough task (here: few samples per client) Sequential's server "
                    "accuracy is above Distributed's", f"§IV-B, §IV-C, {self.table}",
                    server("Sequential"), server("Distributed"), LAYERS,
                    refs([server("Sequential"), server("Distributed")])),
            greater("averaging_above_distributed",
                    "On a hard enough task Averaging's server accuracy is above Distributed's",
                    f"§IV-B, §IV-C, {self.table}", server("Averaging"), server("Distributed"),
                    LAYERS, refs([server("Averaging"), server("Distributed")])),
        ]
        if self.homogeneous:
            out.append(greater(
                "sequential_not_below_averaging",
                "With homogeneous clients Sequential benefits from features of one depth: its "
                "server accuracy is not below Averaging's (mean over end layers)",
                "§IV-C ¶2, Table III", server("Sequential"), server("Averaging"), LAYERS,
                refs([server("Sequential"), server("Averaging")]), min_margin=-1e-9))
        else:
            out.append(close(
                "sequential_averaging_close",
                "Sequential and Averaging reach similar server accuracy with heterogeneous "
                "clients (tolerance 2 points per end layer; the paper's largest gap in Table IV "
                "is 1.44)", "§IV-C ¶2, Table IV", server("Sequential"), server("Averaging"),
                LAYERS, 2.0, refs([server("Sequential"), server("Averaging")])))
        return out

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
                "early exit. In sflsim no gradient returns to Hetero-SplitEE clients, so with one "
                "seed the client rows of Sequential, Averaging and Distributed are identical by "
                "construction.")
        if self.table == "Table IV":
            note += (" The paper's Centralized row is copied from Table III (homogeneous); "
                     "sflsim's trains one centralized model per end layer on all data.")
        return markdown_table(lines) + "\n\n" + note


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

        values: dict[tuple[str, str], list[float]] = {}
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
                        values.setdefault((row, f"{name}@{tau}"), []).append(factor * value)
        return ResultTable({k: Stat.of(v) for k, v in values.items()}, name="sflsim")

    def claims(self) -> list[Claim]:
        refs = (("hetero_splitee", "Fig. 2", "Sequential (homogeneous)", "CIFAR-100 curves"),
                ("hetero_splitee", "§III-C", "setting", "threshold_min"),
                ("hetero_splitee", "§III-C", "setting", "threshold_max"),
                ("hetero_splitee", "§III-C", "setting", "threshold_step"))
        return [
            monotone("accuracy_rises_with_threshold",
                     "A more conservative threshold (fewer early exits) gives more accurate "
                     "predictions at every split point (allowed: dips of at most 1 point below "
                     "the running maximum; the end must be above the start)",
                     "§IV-D, Fig. 2 (top)", LAYERS, "accuracy", True, 1.0, True, refs, unit=" %"),
            monotone("exit_ratio_falls_with_threshold",
                     "A more conservative threshold exits fewer samples on the device "
                     "(no increase allowed)", "§IV-D, Fig. 2 (bottom)", LAYERS, "exit_ratio",
                     False, 0.0, True, refs, unit=" %"),
            monotone("latency_rises_with_threshold",
                     "A more conservative threshold makes inference slower (more samples go to "
                     "the server; dips of at most 0.05 ms allowed)", "§IV-D ¶2", LAYERS,
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


# ---------------------------------------------------------------- FedSGA

PARTITIONS = {"iid": ("IID", {"scheme": "iid"}), "dir0.1": ("Non-IID", {"scheme": "dirichlet",
                                                                       "alpha": 0.1})}


def _partition(scale: Scale, partition: str) -> dict:
    """The partition of ``PARTITIONS`` on the scale's data: DomainNet's Non-IID is the
    domain partition with Dirichlet 0.1 labels within each domain (§4.1.1)."""
    spec = dict(PARTITIONS[partition][1])
    if spec["scheme"] == "dirichlet" and scale.base.get("dataset", {}).get("name") == "domainnet":
        spec["scheme"] = "domain"
    return spec


def _fedsga_point(label: str, algorithm: dict, partition: str, scale: Scale) -> Point:
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
        "fedbabu": {"name": "fedbabu", "test_distribution": "global"},
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
        return [_fedsga_point(label, variants[label], part, scale)
                for label in self.rows for part in PARTITIONS]

    def collect(self, ctx: Context) -> ResultTable:
        out = ResultTable(name="sflsim")
        for label, row in self.rows.items():
            for part, (column, _) in PARTITIONS.items():
                accs = [_summary(r).get("final_server_accuracy") for r in
                        ctx.completed(f"{label}-{part}")]
                out[(row, column)] = Stat.of(100 * a for a in accs if a is not None)
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
        return (markdown_table(lines) + "\n\nFinal test accuracy (%), mean ± std over seeds "
                "(sflsim) and as printed (paper); Non-IID is Dirichlet alpha = 0.1.")


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
                f"FedSGA is more accurate than {other} ({col})", "§4.2, Table 2",
                "FedSGA", other, [col], (t.ref("FedSGA", col), t.ref(other, col))))

    def margin_grows(table: ResultTable) -> tuple[bool, str]:
        margins = {}
        for col in ("IID", "Non-IID"):
            others = [table.get(r, col).mean for r in baselines]
            margins[col] = table.get("FedSGA", col).mean - sum(others) / len(others)
        return margins["Non-IID"] > margins["IID"], (
            f"FedSGA minus the mean of the {len(baselines)} baselines: IID "
            f"{margins['IID']:+.2f}, Non-IID {margins['Non-IID']:+.2f}")

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
                               f"Removing {row[4:]} costs accuracy ({col})", "§4.3, Table 4",
                               "full (FedSGA)", row, [col],
                               (t.ref("full (FedSGA)", col), t.ref(row, col))))
        out.append(lowest(f"sufficiency_matters_most_{c}",
                          f"Of the three removals, removing Suff. Est. costs most ({col})",
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
                               f"Sufficiency-guided splits beat {other.lower()} splits ({col})",
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
        return [_fedsga_point(label, variants[label], part, scale)
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
                for metric, (name, _) in self.METRICS.items():
                    out[(row, f"{column} {metric}")] = Stat.of(frame[name])
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
                                   f"FedSGA {what} than MultiSFL{paper}", "§4.5, Table 5",
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


# ---- registry of the paper targets. Estimates: --scale cpu on a 2-core machine with
# --workers 2 (one torch thread per run), extrapolated from the per-round costs measured
# above (HETERO_CPU, FEDSGA_CPU); all four FedSGA targets share runs: 60 runs, about 274
# CPU-min, 2.3 h. Rerun `--estimate` to measure them on another machine.
register(HeteroTable(
    "hetero_splitee.table4", "Table IV", homogeneous=False,
    title="Table IV: heterogeneous clients (4/4/4 at end layers 3/4/5), "
          "Sequential, Averaging, Distributed, Centralized",
    estimate={"cpu": "4 runs (3 x 5.6 min + Centralized 16 min): about 17 min with --workers 2",
              "smoke": "about 6 s with --threads 1"}))
register(HeteroTable(
    "hetero_splitee.table3", "Table III", homogeneous=True,
    title="Table III: homogeneous clients (all 12 at end layer 3, 4 or 5)",
    estimate={"cpu": "12 runs (9 x 5.6 min + 3 x 5.5 min): about 34 min with --workers 2"}))
register(HeteroFig2(estimate={"cpu": "3 Sequential runs (table3's, reused when done): about "
                                     "11 min with --workers 2"}))
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


# ============================================================== running


def get_path(data: dict, path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return node


def set_path(data: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = copy.deepcopy(value)


def point_mappings(target: Target, scale: Scale, seeds: int, overrides: list[str],
                   device: str | None = None) -> list[tuple[Point, int, dict]]:
    """Every (point, seed, full scenario mapping) of a target at a scale, seed by seed
    (every point of seed 0 first): a sweep cut short still holds whole tables. With
    ``device`` (``cuda``), the points whose algorithm can train there
    (:data:`sflsim.config.schema.CUDA_ALGORITHMS`) get ``training.device``; the others
    stay where the scenario says."""
    from sflsim.config.load import apply_override
    from sflsim.config.schema import CUDA_ALGORITHMS

    out = []
    for seed in range(seeds):
        for point in target.points(scale):
            data = copy.deepcopy(scale.base)
            for path, value in point.overrides.items():
                set_path(data, path, value)
            for assignment in overrides:
                apply_override(data, assignment)
            if device is not None and data["algorithm"]["name"] in CUDA_ALGORITHMS:
                data.setdefault("training", {})["device"] = device
            data["seed"] = seed
            data["name"] = f"{point.label}.s{seed}"
            out.append((point, seed, data))
    return out


def build_sweep(target: Target, scale: Scale, seeds: int, out: Path, overrides: list[str],
                device: str | None = None):
    """The target's points as one :class:`sflsim.sweep.Sweep` (zip mode over the
    top-level scenario fields that differ between points); writes ``out/base.yaml``."""
    from sflsim.sweep.spec import Sweep, SweepSpec, expand

    mappings = point_mappings(target, scale, seeds, overrides, device)
    first = mappings[0][2]
    varying = [k for k in first if k in ("name", "seed")
               or any(m.get(k) != first[k] for _, _, m in mappings)]
    base = copy.deepcopy(first)
    out.mkdir(parents=True, exist_ok=True)
    base_path = out / "base.yaml"
    text = yaml.safe_dump(base, sort_keys=False)
    if not base_path.is_file() or base_path.read_text() != text:
        base_path.write_text(text)
    name = f"{target.key.replace('.', '-')}-{scale.name}" + (f"-{scale.slug}" if scale.slug else "")
    axes = {k: [copy.deepcopy(m[k]) for _, _, m in mappings] for k in varying}
    spec = SweepSpec(base=str(base_path), name=name, mode="zip", axes=axes)
    sweep = Sweep(spec=spec, name=name, base_path=base_path.resolve(),
                  points=expand(spec, base, where=f"target {target.key}", name=name))
    labels = {p.point_id: (pt.label, seed) for p, (pt, seed, _) in zip(sweep.points, mappings)}
    return sweep, labels


def scenario_key(data: dict) -> str | None:
    """A canonical text of a scenario mapping that a run wrote (validated, defaults filled
    and resolved as runs write them: ``sflsim.config.resolve``; a full dump also does), or
    None."""
    from sflsim.config.resolve import resolved_dump

    resolved = resolved_dump(data, stored=True) if isinstance(data, dict) else None
    return None if resolved is None else json.dumps(resolved, sort_keys=True)


def finished_runs(root: Path) -> dict[str, Path]:
    """Completed runs anywhere under ``root`` by :func:`scenario_key`."""
    index = {}
    for summary in glob.glob(str(root / "**" / "summary.json"), recursive=True):
        run_dir = Path(summary).parent
        try:
            if json.loads(Path(summary).read_text()).get("status") != "completed":
                continue
            key = scenario_key(yaml.safe_load((run_dir / "scenario.yaml").read_text()))
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if key is not None:
            index.setdefault(key, run_dir)
    return index


def reuse_finished(sweep, out: Path, root: Path) -> list[str]:
    """Link the results of identical, completed runs elsewhere under ``root`` into the
    points of ``sweep`` that are not finished; move a point directory that holds another
    scenario aside to ``root/_replaced/`` (kept for reuse). Returns the point ids reused."""
    from sflsim.sweep.run import finished_summary

    index = None
    reused = []
    for point in sweep.points:
        run_dir = out / "points" / point.point_id
        if finished_summary(run_dir, point.scenario) is not None:
            continue
        old = run_dir / "scenario.yaml"
        if old.is_file():
            try:
                same = scenario_key(yaml.safe_load(old.read_text())) == scenario_key(
                    point.scenario.model_dump(mode="json"))
            except (OSError, yaml.YAMLError):
                same = False
            if not same:
                aside = root / "_replaced" / f"{out.name}-{point.point_id}-{time.time_ns()}"
                aside.parent.mkdir(parents=True, exist_ok=True)
                os.replace(run_dir, aside)
        if index is None:
            index = finished_runs(root)
        source = index.get(scenario_key(point.scenario.model_dump(mode="json")))
        if source is None or source.resolve() == run_dir.resolve():
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        for file in source.iterdir():
            if file.is_file() and file.name != "checkpoint.pkl":
                dest = run_dir / file.name
                dest.unlink(missing_ok=True)
                try:
                    os.link(file, dest)
                except OSError:
                    dest.write_bytes(file.read_bytes())
        reused.append(point.point_id)
    return reused


class _Progress:
    """A line per finished point, and while points run a heartbeat line at least every
    30 s (``sflsim.cli.progress.SweepHeartbeat``); use as a context manager."""

    def __init__(self, labels: dict[str, tuple[str, int]], out: Path):
        from sflsim.cli.progress import SweepHeartbeat

        self.labels = labels
        self.beat = SweepHeartbeat(lambda line: print(f"  {line}", flush=True), out)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.beat.stop()

    def start(self, total: int, skipped: int) -> None:
        self.beat.say(f"{plural(total, 'point')}, {skipped} already finished")
        self.beat.start(total, skipped)

    def point_done(self, row: dict) -> None:
        label, seed = self.labels.get(row["point"], ("?", -1))
        acc = row.get("final_server_accuracy")
        shown = f"{100 * acc:.2f}%" if isinstance(acc, float) and not math.isnan(acc) else "n/a"
        self.beat.point_done()
        self.beat.say(f"{row['point']} {label} seed {seed}: {row['status']} accuracy {shown} "
                      f"wall {row.get('wall_time_s') or 0:.0f} s {row.get('error') or ''}")


def check_data(sweep, where: str | Path, overrides: list[str]) -> None:
    """Read every dataset the sweep's points use, once each, before anything runs: a
    dataset that is missing or broken stops the target here with sflsim's message (the
    folder looked at, the layout expected, how to get it), instead of failing every point.

    Raises:
        DatasetError, ConfigError: naming ``where`` (the preset file) and the ``--set``
            overrides behind the problem.
    """
    from sflsim.config.load import scenario_errors
    from sflsim.data import load_dataset

    seen = set()
    for point in sweep.points:
        ds = point.scenario.dataset
        key = (ds.name, ds.data_root, ds.image_size, tuple(ds.domains or ()), ds.download)
        if key in seen:
            continue
        seen.add(key)
        with scenario_errors(where, overrides):
            load_dataset(ds.name, data_root=ds.data_root, image_size=ds.image_size,
                         domains=ds.domains, download=ds.download)


def run_target(target: Target, scale: Scale, seeds: int, out: Path, root: Path, *, workers: int,
               executor: str, address: str | None, overrides: list[str], run: bool,
               device: str | None = None, check: bool = True) -> Context:
    """Run (unless ``run`` is false) and gather the target's points.

    Raises:
        DatasetError: with ``run`` and ``check``, a dataset the points need cannot be read
            (:func:`check_data`); nothing has run.
    """
    from sflsim.sweep import read_table, run_sweep

    if not target.points(scale):  # an analysis of other targets' runs
        return Context(scale=scale, runs=[], numbers=PaperNumbers(), root=root)
    sweep, labels = build_sweep(target, scale, seeds, out, overrides, device)
    if run:
        if check:
            check_data(sweep, scale.preset or f"{target.key} --scale {scale.name}", overrides)
        reused = reuse_finished(sweep, out, root)
        if reused:
            print(f"  reused {plural(len(reused), 'finished run')} of identical scenarios: "
                  f"{', '.join(reused)}")
        with _Progress(labels, out) as progress:
            run_sweep(sweep, out, workers=workers, executor=executor, address=address,
                      progress=progress)
    try:
        table = read_table(out)
    except Exception:  # noqa: BLE001  (no sweep.csv yet: nothing has run)
        table = pd.DataFrame(columns=["point", "status", "error"])
    status = {r["point"]: (r["status"], r.get("error", "")) for r in table.to_dict("records")}
    runs = []
    for point in sweep.points:
        st, err = status.get(point.point_id, ("missing", ""))
        from sflsim.sweep.run import finished_summary
        finished = finished_summary(out / "points" / point.point_id, point.scenario) is not None
        if st == "missing" and finished:
            st = "completed"
        elif st == "completed" and not finished:  # a run of an earlier sflsim's reading
            st, err = "stale", ("made by an sflsim whose scenario differs from today's "
                                "(rerun the target to refresh it)")
        label, seed = labels[point.point_id]
        runs.append(Run(label, seed, point.point_id, st, str(err or ""),
                        out / "points" / point.point_id))
    return Context(scale=scale, runs=runs, numbers=PaperNumbers(), root=root)


def estimate(target: Target, scale: Scale, seeds: int, workers: int, overrides: list[str],
             threads: int | None = None, device: str | None = None,
             log: Callable[[str], None] | None = None) -> str:
    """Time two rounds of one seed of every configuration (training every round,
    evaluation after each) with the torch threads a sweep worker gets (cores / workers,
    or ``threads``); extrapolate to the scale's rounds, seeds and workers.

    This trains: it takes as long as two rounds of every configuration (minutes at
    ``--scale cpu``). ``log`` gets a line before each configuration starts and one when
    it is timed (default: printed at once), so a long estimate shows where it is."""
    log = log or (lambda line: print(line, flush=True))
    import torch

    from sflsim.config.load import validate_scenario
    from sflsim.metrics.results import training_rounds
    from sflsim.runner import run_scenario

    threads = threads or max(1, (os.cpu_count() or 1) // max(1, workers))
    torch.set_num_threads(threads)
    per_point, lines = [], []
    configs = []
    for point, _seed, data in point_mappings(target, scale, 1, overrides, device):
        if point.label not in {p.label for p, _ in configs}:
            configs.append((point, data))
    log(f"  timing {plural(len(configs), 'configuration')}, 2 rounds each (as long as 2 "
        f"rounds of each run take)")
    for i, (point, data) in enumerate(configs, 1):
        log(f"  [{i}/{len(configs)}] {point.label}: training 2 rounds ...")
        data = copy.deepcopy(data)
        rounds = data["training"]["rounds"]
        data["training"]["rounds"] = min(2, rounds)
        data["evaluation"]["every_rounds"] = 1
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            result = run_scenario(validate_scenario(data), Path(tmp))
        total = time.perf_counter() - start
        walls = training_rounds(result.rounds)["wall_time_s"].tolist()
        per_round = walls[-1] - walls[-2] if len(walls) > 1 else walls[-1]
        est = total + (rounds - len(walls)) * per_round
        per_point += [est] * seeds
        lines.append(f"  {point.label}: {plural(len(walls), 'round')} in {total:.1f} s (last "
                     f"round {per_round:.1f} s) -> {plural(rounds, 'round')} about "
                     f"{est / 60:.1f} min per seed")
        log(f"  [{i}/{len(configs)}] {lines[-1].strip()}")
    loads = [0.0] * max(1, workers)
    for est in sorted(per_point, reverse=True):  # longest first onto the least loaded worker
        loads[loads.index(min(loads))] += est
    lines.append(f"  total {plural(len(per_point), 'run')} on {plural(workers, 'worker')} x "
                 f"{plural(threads, 'torch thread')}: about {max(loads) / 60:.0f} min (upper "
                 f"bound: evaluation every round)")
    return "\n".join(lines)


# ============================================================== report


def markdown_table(lines: list[list[str]]) -> str:
    head, *body = lines
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(out)


def host_info() -> dict[str, Any]:
    import torch

    import sflsim

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "sflsim"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if commit and dirty:
            commit += " + uncommitted changes under sflsim/"
    except (OSError, subprocess.SubprocessError):
        commit = ""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    info = {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable,
            "torch": torch.__version__, "sflsim": sflsim.__version__,
            "python": platform.python_version(),
            # a copy of the tree without .git (a remote machine) names its commit here
            "commit": commit or os.environ.get("SFLSIM_COMMIT", "unknown"),
            "load_1min": round(load, 2)}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def scale_markdown(scale: Scale, seeds: int, overrides: list[str], numbers: PaperNumbers,
                   variants: list[Scale] | None = None, device: str | None = None) -> str:
    """The scale's departures from the paper (those that concern ``variants``: the
    datasets and backbones run), the command line's, and what is kept from the paper
    (per preset at ``--scale paper``)."""
    variants = variants or [scale]
    concerned = {v.dataset for v in variants} | {v.backbone for v in variants}
    lines = [["what", "paper", f"--scale {scale.name}", "why"]]
    lines += [[s.what, s.paper, s.here, s.why] for s in scale.shrinks
              if not s.applies or concerned & set(s.applies)]
    for o in overrides:
        lines.append([o.split("=", 1)[0], "", o.split("=", 1)[1], "--set on the command line"])
    if device is not None:
        lines.append(["training.device", "", f"{device} for the algorithms that can train there "
                      f"(sflsim.config.schema.CUDA_ALGORITHMS), cpu for the others",
                      "--device on the command line"])
    if any(v.preset for v in variants):
        kept = "".join(f"\n\n- {v.label} (`{_rel(v.preset)}`): {kept_settings(v, numbers)}"
                       for v in variants if v.preset)
        kept = f"Base scenarios (the presets) and what they keep from the paper:{kept}"
    else:
        kept = f"Kept from the paper: {kept_settings(scale, numbers)}"
    return (markdown_table(lines) + f"\n\nSeeds: {seeds} (0..{seeds - 1}); numbers are mean ± "
            f"sample std over seeds.\n\n{kept}")


def kept_settings(scale: Scale, numbers: PaperNumbers) -> str:
    b = scale.base
    if not b:
        return "the base scenarios of scenarios/papers/"
    t = b["training"]
    data = ""
    if scale.dataset:
        data = (f"{scale.dataset}, {t['rounds']} rounds"
                + (f", lr {t['optimizer']['lr']:g}" if scale.paper == "fedsga"
                   else f", batch {t['batch_size']}")
                + (", augmentation pad 4 / random crop / flip (§IV-A1)"
                   if (b["dataset"].get("augment") or {}).get("random_crop_padding") else "")
                + "; ")
    if scale.paper == "hetero_splitee":
        n = sum(g["count"] for g in b["devices"].values())
        return (f"{data}{b['model']['name']} (Table I) at width {b['model'].get('width', 1.0):g}, "
                f"{plural(n, 'client')} (paper: "
                f"{numbers.setting('hetero_splitee', 'clients')}) with 100% participation (§IV-A4), "
                f"Adam, lr {t['optimizer']['lr']:g}, cosine to {t['schedule'].get('min_lr', 0):g} "
                f"(Table II), Sequential server lr divided by "
                f"{b['algorithm'].get('server_lr_divisor')} (Table II), IID partition (§IV-A1), "
                f"entropy thresholds 0 to 4 in steps of 0.05 (§III-C).")
    a = {**FEDSGA_ALGORITHM, **b["algorithm"]}
    n = sum(g["count"] for g in b["devices"].values())
    backbone = BACKBONES.get(scale.backbone or "", "ResNet-18")
    non_iid = ("the domain partition with Dirichlet alpha 0.1 within each domain"
               if b["dataset"].get("name") == "domainnet" else "Dirichlet alpha 0.1")
    return (f"{data}{backbone} at width {b['model'].get('width', 1.0):g}, {plural(n, 'client')} all "
            f"participating (paper: N = {numbers.setting('fedsga', 'clients')}), SGD, "
            f"{plural(t['local_epochs'], 'local epoch')}, batch {t['batch_size']} "
            f"(§4.1.3); FedSGA rho "
            f"{a['rho']}, beta {a['beta']}, lambda {a['lambda_align']}, tau_a {a['tau_a']}, "
            f"tau_m {a['tau_m']}, m = {a['num_prompts']}, mu {a['mu']}, calibration every "
            f"{plural(a['calibration_every'], 'round')}, candidate splits "
            f"{a.get('candidates') or 'every stage boundary'}, p_ref "
            f"{a.get('reference_split') or 'the middle one'} (§4.1.3); {non_iid} for Non-IID "
            f"(§4.1.1).")


#: what a verdict of a ``--scale smoke`` run says: its runs last seconds and their numbers
#: are at chance level, so a verdict only shows that the check ran end to end
SMOKE_VERDICTS = ("smoke run: its numbers are at chance level, so this verdict says only "
                  "that the pipeline runs, not whether the claim holds")


def claims_markdown(verdicts: list[tuple[Claim, Verdict, list[str]]], scale: str = "") -> str:
    lines = [["verdict", "claim", "sflsim", "the same check on the paper's numbers"]]
    for claim, verdict, on_paper in verdicts:
        status = (f"{verdict.status} (pipeline check only)" if scale == "smoke"
                  else verdict.status)
        lines.append([f"**{status}**", f"`{claim.name}`: {claim.statement} ({claim.source})",
                      verdict.detail, "; ".join(on_paper) or "n/a (no numbers printed)"])
    table = markdown_table(lines)
    return f"{SMOKE_VERDICTS[0].upper()}{SMOKE_VERDICTS[1:]}.\n\n{table}" if scale == "smoke" \
        else table


def section_markdown(target: Target, scale: Scale, seeds: int, body: str,
                     verdicts: list[tuple[Claim, Verdict, list[str]]], ctx: Context,
                     command: str, host: dict, wall_s: float, overrides: list[str],
                     variants: list[Scale] | None = None, device: str | None = None,
                     made: list[str] | None = None) -> str:
    """One report section. ``made``: the command, date and host lines of the section that
    ``--report-only`` renders again (the runs were made by that command, on that host);
    this invocation is then named as the one that rendered them."""
    counts = {s: sum(v.status == s for _, v, _ in verdicts) for s in ("PASS", "FAIL", "N/A")}
    done = sum(r.status == "completed" for r in ctx.runs)
    made_on = next((line[len("- date: "):][:10] for line in made or []
                    if line.startswith("- date: ")), None)  # when the runs were made
    meta = {"target": target.key, "scale": scale.name,
            "date": made_on or dt.date.today().isoformat(),
            "passed": counts["PASS"], "failed": counts["FAIL"], "na": counts["N/A"],
            "runs": len(ctx.runs), "completed": done}
    failed = [r for r in ctx.runs if r.status != "completed"]
    problems = ""
    if failed:
        problems = "\n\n**Runs not completed:** " + "; ".join(
            f"{r.label} seed {r.seed} ({r.point_id}): {r.status} {r.error}".strip() for r in failed)
    return "\n".join([
        f"## {target.key} (--scale {scale.name})",
        f"<!-- reproduce:meta {json.dumps(meta)} -->",
        "",
        f"{target.title}. Paper: {PAPER_TITLES.get(target.paper, target.paper)}.",
        "",
        *(made or [
            f"- command: `{command}`",
            f"- date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}; "
            f"wall time of this invocation: {wall_s / 60:.1f} min",
            f"- host: {host['cpu']}, {plural(host['cores'], 'core')} ({host['usable_cores']} "
            f"usable)" + (f", GPU {host['gpu']}" if host.get("gpu") else "") + ", "
            f"1-min load {host['load_1min']}, torch {host['torch']}, sflsim {host['sflsim']} "
            f"(commit {host['commit']}), Python {host['python']}"]),
        *([f"- rendered again from the stored runs: `{command}` "
           f"({dt.datetime.now().astimezone().isoformat(timespec='seconds')}, sflsim "
           f"{host['sflsim']}, commit {host['commit']})"] if made else []),
        f"- runs: {done} of {len(ctx.runs)} completed, under "
        f"`{_rel(Path(os.path.commonpath([r.run_dir.parent.parent for r in ctx.runs])))}`"
        if ctx.runs else "- runs: none",
        f"- claims: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['N/A']} N/A"
        + (f" ({SMOKE_VERDICTS})" if scale.name == "smoke" else ""),
        "",
        "### Scale",
        "",
        scale_markdown(scale, seeds, overrides, ctx.numbers, variants, device),
        "",
        "### sflsim beside the paper",
        "",
        body + problems,
        "",
        "### Claims",
        "",
        claims_markdown(verdicts, scale.name) if verdicts else "(none)",
    ])


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


REPORT_HEADER = """# Reproducing the papers with sflsim

Written by `python analysis/reproduce.py` (do not edit by hand: each target's section is
replaced when that target runs again with at least as many completed runs, and this
summary is rebuilt from the sections). The
papers' numbers are in `analysis/paper_numbers.csv`; how each claim is checked is in the
claim's text and in `analysis/reproduce.py`. A claim that fails at CPU scale is reported as
failing; no method is tuned to pass.
"""
_BEGIN = "<!-- reproduce:begin {} -->"
_END = "<!-- reproduce:end {} -->"
_SECTION = re.compile(r"<!-- reproduce:begin (\S+) -->\n(.*?)\n<!-- reproduce:end \1 -->", re.S)


def section_id(target_key: str, scale: str) -> str:
    return f"{target_key}@{scale}"


def section_meta(text: str) -> dict[str, Any] | None:
    """The ``reproduce:meta`` record of a report section (None without one)."""
    meta = re.search(r"<!-- reproduce:meta (\{.*?\}) -->", text)
    return json.loads(meta.group(1)) if meta else None


def made_lines(path: Path, sid: str) -> list[str] | None:
    """The command, date and host lines of section ``sid`` of the report at ``path`` (the
    invocation that made its runs), None where there is no such section."""
    if not path.is_file():
        return None
    for match in _SECTION.finditer(path.read_text()):
        if match.group(1) == sid:
            lines = [line for line in match.group(2).splitlines()
                     if line.startswith(("- command: ", "- date: ", "- host: "))]
            return lines or None
    return None


def update_report(path: Path, sid: str, text: str, *, replace: bool = False) -> str | None:
    """Replace (or add) section ``sid`` of the report at ``path``; keep every other section;
    order them by target registry order and scale; rebuild the summary.

    A section is never replaced by one with fewer completed runs (a ``--report-only``
    over an empty or partial output folder, runs that failed this time) unless
    ``replace`` says so: the report is then left as it was, and the return value says
    what the old and the new section measured. None when the section was written."""
    sections: dict[str, str] = {}
    if path.is_file():
        for match in _SECTION.finditer(path.read_text()):
            sections[match.group(1)] = match.group(2)
    old, new = section_meta(sections.get(sid, "")), section_meta(text)
    if not replace and old and new and new["completed"] < old["completed"]:
        return (f"kept the section {sid} of {path}: it has {old['completed']} of "
                f"{plural(old['runs'], 'run')} completed ({old['date']}), and this invocation "
                f"found {new['completed']} of {plural(new['runs'], 'run')}")
    sections[sid] = text
    order = {section_id(k, s): i * len(SCALES) + j
             for i, k in enumerate(TARGETS) for j, s in enumerate(SCALES)}
    ids = sorted(sections, key=lambda s: (order.get(s, len(order)), s))
    rows = [["target", "scale", "date", "claims PASS / FAIL / N/A", "runs completed"]]
    for s in ids:
        m = section_meta(sections[s])
        if m:
            rows.append([f"[{m['target']}](#{_anchor(m['target'], m['scale'])})", m["scale"],
                         m["date"], f"{m['passed']} / {m['failed']} / {m['na']}"
                         + (" (pipeline check only)" if m["scale"] == "smoke" else ""),
                         f"{m['completed']} / {m['runs']}"])
    parts = [REPORT_HEADER, "## Summary", "", markdown_table(rows), ""]
    for s in ids:
        parts += [_BEGIN.format(s), sections[s], _END.format(s), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(parts))
    os.replace(tmp, path)
    return None


def _anchor(key: str, scale: str) -> str:
    heading = f"{key} (--scale {scale})".lower()
    return re.sub(r"[^a-z0-9 _-]", "", heading).replace(" ", "-")


# ============================================================== command line


def load_plugins(directory: Path = HERE) -> list[str]:
    """Import ``directory/reproduce_*.py`` (extra targets) once each; returns their names."""
    loaded = []
    for path in sorted(directory.glob("reproduce_*.py")):
        if path.stem in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        loaded.append(path.stem)
    return loaded


def scale_for(target: Target, name: str) -> Scale:
    from sflsim.errors import ConfigError

    valid = [s for p, s in SCALE_TABLE if p == target.paper and s in target.scales]
    if name not in valid:
        raise ConfigError(f"{target.key} has no --scale {name}; valid: {', '.join(valid)}")
    return SCALE_TABLE[(target.paper, name)]


def variants(target: Target, scale: Scale) -> list[Scale]:
    """What the target runs at ``scale``: the scale itself, or at ``--scale paper`` the
    scale on each of the target's datasets, its base read from that dataset's preset."""
    if scale.name != "paper" or not target.datasets:
        return [scale]
    return [scale.on(d, target.backbone) for d in target.datasets]


def analyse_variants(target: Target, contexts: list[tuple[Scale, Context]]
                     ) -> tuple[str, list[tuple[Claim, Verdict, list[str]]]]:
    """:meth:`Target.analyse` of each variant; several (one per dataset) make one body with
    a part per dataset, and each claim is checked per dataset (``name [dataset]``)."""
    if len(contexts) == 1:
        return target.analyse(contexts[0][1])
    bodies, verdicts = [], []
    for scale, ctx in contexts:
        body, checked = target.analyse(ctx)
        bodies.append(f"#### {scale.label}\n\n{body}")
        verdicts += [(replace(claim, name=f"{claim.name} [{scale.label}]"), verdict, on_paper)
                     for claim, verdict, on_paper in checked]
    return "\n\n".join(bodies), verdicts


def list_targets() -> str:
    lines = []
    for key, target in TARGETS.items():
        scale = SCALE_TABLE.get((target.paper, "cpu"))
        lines.append(f"{key}\n    {target.title}")
        if scale and "cpu" in target.scales:
            lines.append(f"    cpu scale: {plural(len(target.points(scale)), 'configuration')} x "
                         f"{plural(scale.seeds, 'seed')}; {target.estimate.get('cpu', 'no estimate')}")
        if target.datasets and "paper" in target.scales:
            presets = ", ".join(_rel(preset_path(target.paper, d, target.backbone))
                                for d in target.datasets)
            lines.append(f"    paper scale: {', '.join(target.datasets)} ({presets})"
                         + ("" if "cpu" in target.scales else "; paper scale only"))
        for claim in target.claims():
            lines.append(f"    claim {claim.name}: {claim.statement} ({claim.source})")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python analysis/reproduce.py",
        description="Run a paper's table or figure with sflsim, print it beside the paper's "
                    "numbers, check the paper's claims, and update analysis/REPRODUCTION.md.")
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="see --list")
    parser.add_argument("--list", action="store_true", help="name the targets and their claims")
    parser.add_argument("--scale", default="cpu", choices=SCALES,
                        help="cpu: what 2 CPU cores allow (default); smoke: seconds, chance-level "
                             "numbers, checks only that the pipeline runs; paper: the papers' "
                             "settings (needs the datasets)")
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT,
                        help="runs go to OUTPUT/<scale>/<target>/ (default runs/reproduce)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="points run at once, each with cores / workers torch threads "
                             "(default: 2, or 1 on a 1-core machine); 1 runs them in this process")
    parser.add_argument("--executor", default="process", choices=("process", "ray"))
    parser.add_argument("--address", default=None, help="Ray cluster address (with --executor ray)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of a run in this process (--workers 1, --estimate; "
                             "default: torch's). On a busy machine 1 can be 10-30x faster than "
                             "2 for these small models")
    parser.add_argument("--device", default=None, metavar="cuda|cuda:N",
                        help="train the points whose algorithm can (sflsim.config.schema."
                             "CUDA_ALGORITHMS) on this torch device; the others stay on "
                             "the CPU")
    parser.add_argument("--seeds", type=int, default=None,
                        help="runs per configuration, seeds 0..K-1 (default: the scale's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="A.B=V",
                        help="override a scenario field in every point (reported as a deviation)")
    parser.add_argument("--report", type=Path, default=None,
                        help="report file (default analysis/REPRODUCTION.md; smoke: "
                             "OUTPUT/REPRODUCTION.md)")
    parser.add_argument("--no-report", action="store_true", help="print only")
    parser.add_argument("--replace", action="append", default=[], metavar="TARGET",
                        help="write TARGET's report section even when it has fewer completed "
                             "runs than the one in the report (without it that section is "
                             "kept, and the exit status is 1)")
    parser.add_argument("--dry-run", action="store_true", help="print the scale and points only")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing; analyse the runs that exist")
    parser.add_argument("--estimate", action="store_true",
                        help="time two rounds of every configuration and extrapolate; this "
                             "trains each configuration for two rounds, so it takes minutes "
                             "at --scale cpu (a line per configuration as it goes)")
    args = parser.parse_args(argv)
    if args.workers < 1 or (args.seeds is not None and args.seeds < 1):
        parser.error("--workers and --seeds must be at least 1")
    if not args.list and not args.targets:
        parser.error("name a TARGET (see --list)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Exit status 0; 1 when a run did not complete or a report section was kept (it has
    more completed runs than this invocation found); 2 for a bad target, scale or --set;
    130 on Ctrl-C (the finished runs are kept: the same command resumes)."""
    from sflsim.errors import SflsimError

    load_plugins()
    args = parse_args(argv)
    try:
        return _main(args, argv)
    except SflsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; run the same command again to resume",
              file=sys.stderr)
        return 130


def _main(args: argparse.Namespace, argv: list[str] | None) -> int:
    if args.list:
        print(list_targets())
        return 0
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        print(f"error: unknown target {', '.join(unknown)}; valid: {', '.join(TARGETS)}",
              file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch

        torch.set_num_threads(max(1, args.threads))
    numbers = PaperNumbers()
    root = args.output / args.scale
    report = args.report or (args.output / "REPRODUCTION.md" if args.scale == "smoke" else REPORT)
    command = shlex.join(["python", "analysis/reproduce.py", *(argv if argv is not None
                                                              else sys.argv[1:])])
    status = 0
    for key in args.targets:
        target = TARGETS[key]
        scale = scale_for(target, args.scale)
        seeds = args.seeds or scale.seeds
        runs_on = variants(target, scale)
        print(f"== {key} (--scale {scale.name}, {plural(seeds, 'seed')}): {target.title}")
        print(scale_markdown(scale, seeds, args.overrides, numbers, runs_on, args.device))
        if args.dry_run:
            for v in runs_on:
                if not target.points(v):
                    continue
                if v.preset is not None:
                    print(f"  -- {v.label}: {_rel(v.preset)}")
                for point in target.points(v):
                    print(f"  {point.label} (seeds 0..{seeds - 1}): {json.dumps(point.overrides)}")
                with tempfile.TemporaryDirectory() as tmp:  # validates every point
                    build_sweep(target, v, seeds, Path(tmp), args.overrides, args.device)
            continue
        if args.estimate:
            for v in runs_on:
                if v.preset is not None:
                    print(f"  -- {v.label}: {_rel(v.preset)}")
                print(estimate(target, v, seeds, args.workers, args.overrides, args.threads,
                               args.device))
            continue
        host = host_info()
        start = time.perf_counter()
        if not args.report_only:  # every dataset is read before anything runs
            for v in runs_on:
                if target.points(v):
                    with tempfile.TemporaryDirectory() as tmp:
                        sweep, _ = build_sweep(target, v, seeds, Path(tmp), args.overrides,
                                               args.device)
                    check_data(sweep, v.preset or f"{key} --scale {scale.name}", args.overrides)
        contexts = []
        for v in runs_on:
            if v.preset is not None:
                print(f"  -- {v.label}: {_rel(v.preset)}")
            contexts.append((v, run_target(target, v, seeds, root / key / v.slug, root,
                                           workers=args.workers, executor=args.executor,
                                           address=args.address, overrides=args.overrides,
                                           run=not args.report_only, device=args.device,
                                           check=False)))
        ctx = Context(scale=scale, runs=[r for _, c in contexts for r in c.runs], numbers=numbers,
                      root=root)
        incomplete = [r for r in ctx.runs if r.status != "completed"]
        if incomplete and not args.report_only:
            status = 1
            print(f"warning: {len(incomplete)} of {plural(len(ctx.runs), 'run')} did not complete; "
                  f"their numbers are missing (see the report)", file=sys.stderr)
        body, verdicts = analyse_variants(target, contexts)
        print(body)
        print(claims_markdown(verdicts, scale.name) if verdicts else "(no claims)")
        if not args.no_report:
            made = (made_lines(report, section_id(key, scale.name)) if args.report_only
                    else None)
            text = section_markdown(target, scale, seeds, body, verdicts, ctx, command, host,
                                    time.perf_counter() - start, args.overrides, runs_on,
                                    args.device, made)
            kept = update_report(report, section_id(key, scale.name), text,
                                 replace=key in args.replace)
            if kept:
                status = status or 1
                print(f"warning: {kept}; the runs are looked for under {_rel(root / key)}. "
                      f"Point -o at the folder that holds them, or add --replace {key} to "
                      f"write this section anyway", file=sys.stderr)
            else:
                print(f"wrote {report} (section {section_id(key, scale.name)})")
    return status


if __name__ == "__main__":
    sys.exit(main())
