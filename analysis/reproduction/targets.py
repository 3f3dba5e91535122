"""Targets (a paper's table or figure, or an extra analysis) and the registry that finds
them."""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .claims import Claim, Verdict
from .numbers import PaperNumbers, ResultTable
from .papers import HERE, SCALES
from .scales import Scale


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

    def rendered_runs(self, ctx: Context) -> list[Path]:
        """The run folders a target with no points of its own renders (its section names
        the cost model they were made under); empty for one that renders its own runs."""
        return []

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


def load_plugins(directory: Path = HERE) -> list[str]:
    """Import ``directory/reproduce_*.py`` (extra targets) once each; returns their names.

    Raises:
        ConfigError: a file raised while it was imported (names the file, its line and
            the exception); what it registered before is forgotten.
    """
    from sflsim.errors import ConfigError

    loaded = []
    for path in sorted(directory.glob("reproduce_*.py")):
        if path.stem in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        before = set(TARGETS)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001  (a user's file: any error is told, once)
            del sys.modules[path.stem]
            for key in set(TARGETS) - before:
                del TARGETS[key]
            text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else exc
            harness = sys.modules.get("reproduce")
            if isinstance(exc, AttributeError) and harness is not None and exc.obj is harness:
                close = difflib.get_close_matches(str(exc.name), dir(harness), n=1)
                text = (f"the harness (import reproduce as R) has no {exc.name!r}"
                        + (f"; did you mean {close[0]!r}?" if close else ""))
            raise ConfigError(f"{_line_of(path, exc)}: {type(exc).__name__}: {text} (the "
                              f"harness imports every analysis/reproduce_*.py at start-up: "
                              f"fix the file or move it aside)") from None
        loaded.append(path.stem)
    return loaded


def _line_of(path: Path, exc: BaseException) -> str:
    """``path:line`` of the innermost frame of ``exc`` in ``path`` (``path`` if none)."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{path}:{exc.lineno}"
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if Path(f.filename) == path]
    return f"{path}:{lines[-1]}" if lines else str(path)


def check_refs(target: Target, numbers: PaperNumbers) -> None:
    """Raises ConfigError when a claim of ``target`` names a number ``numbers`` lacks
    (a typo in ``refs`` would otherwise read as "the paper printed no number")."""
    from sflsim.errors import ConfigError

    for claim in target.claims():
        missing = [ref for ref in claim.refs if not numbers.has(ref)]
        if missing:
            raise ConfigError(
                f"{target.key}: claim {claim.name} names "
                f"{'a number' if len(missing) == 1 else 'numbers'} that {numbers.path.name} "
                f"lacks: {'; '.join(', '.join(ref) for ref in missing)}; add the row "
                f"(paper,table_or_figure,row,column,value,...) or fix the claim's refs")
