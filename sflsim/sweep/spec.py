"""Sweep files: a base scenario plus axes, expanded into validated scenarios (points).

A sweep file names a base scenario (relative to the sweep file), optional fixed
overrides and axes, each a scenario field by its dotted path with a list of
values (STYLE.md §12; Mesa's ``batch_run(parameters=...)``)::

    base: ../quickstart.yaml
    name: device_mix                  # default: the file's stem
    set: {training.rounds: 2}         # fixed overrides, dotted path -> value
    mode: zip                         # product (default): every combination
    axes:
      devices.pi4_wifi.count: [0, 3, 6, 9, 12]
      devices.orin_wifi.count: [12, 9, 6, 3, 0]
    seeds: [0, 1, 2]                  # optional: every combination once per seed

A configuration is one combination of axis values (``product``: the last axis
varies fastest; ``zip``: the ``i``-th value of every axis); with ``seeds`` each
configuration runs once per seed (the scenario's ``seed`` set; seeds vary fastest,
whatever the ``mode``), else once. Points are numbered in that order: the id
``p000``, ``p001``, ... and the configuration id ``c000``, ``c001``, ... depend only
on the sweep definition, so the seeds of one configuration share its ``c`` id. Every
point is validated as a scenario before anything runs.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from sflsim.config.input_warnings import input_warnings
from sflsim.config.load import (
    anchor_inputs,
    apply_override,
    override_value,
    read_yaml_mapping,
    validate_scenario,
)
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.inputs.messages import format_validation_error
from sflsim.inputs.quantities import FROZEN
from sflsim.sweep.nesting import check_nested_paths
from sflsim.text import as_yaml, plural


class SweepSpec(BaseModel):
    """A sweep file: a base scenario, fixed overrides and axes."""

    model_config = FROZEN
    #: Base scenario file; a relative path is relative to the sweep file, and a bare name
    #: that is no file there names a shipped scenario (``base: quickstart``).
    base: str
    #: Sweep name (output folder ``runs/sweeps/<name>``); default: the file's stem.
    name: str | None = None
    description: str = ""
    #: Fixed overrides applied to the base before the axes: dotted path -> value.
    set: dict[str, Any] = Field(default_factory=dict)
    #: ``product``: every combination of axis values; ``zip``: the i-th value of each axis.
    mode: Literal["product", "zip"] = "product"
    #: Dotted path of a scenario field -> the values it takes (YAML values; mappings allowed).
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    #: Seeds each configuration runs at (the scenario's ``seed``), crossed with the axes;
    #: None: each configuration runs once, at the base's seed. Also as ``--seeds`` gives
    #: them: ``"0-4"``, ``"0,1,2"``, ``"0-2,10"``.
    seeds: list[int] | None = None

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds_as_text(cls, value: Any) -> Any:
        """``seeds`` written as ``--seeds`` takes them (a range ``0-4``, a list ``0,1,2``);
        a single number is refused (is ``seeds: 3`` three seeds, or seed 3?)."""
        if isinstance(value, str):
            try:
                return parse_seeds(value)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix(f"--seeds {value}: ")) from None
        if isinstance(value, int) and not isinstance(value, bool):
            raise ValueError("a single number; give the seeds as a list, [0, 1, 2], or a "
                             "range, '0-2' (as --seeds takes them)")
        return value


#: the most points one sweep may expand to (each is validated before any runs)
MAX_POINTS = 100_000


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: its id, its axis values and the scenario they make."""

    point_id: str
    #: Axis dotted path -> value, in the order of the sweep file's axes, then ``seed``
    #: when the sweep has ``seeds``.
    values: dict[str, Any]
    scenario: Scenario
    #: The configuration (axis values without the seed) as ``c000``, ``c001``, ...:
    #: the points of one configuration at different ``seeds`` share it.
    config_id: str = ""
    #: The input warnings of this point's scenario (its base with its axis values), as
    #: said when it was validated: its run keeps them in ``summary.json`` and
    #: ``manifest.json`` (:func:`sflsim.config.input_warnings.run_warnings`).
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sweep:
    """A loaded sweep: the validated file, its resolved base path and every point."""

    spec: SweepSpec
    name: str
    base_path: Path
    points: list[SweepPoint]
    #: the sweep file it was read from (None: built in Python)
    path: Path | None = None

    def resolved(self, folder: Path | None = None) -> dict[str, Any]:
        """The sweep file as run: name filled in, base as an absolute path, or relative to
        ``folder`` when the base lies inside it (a sweep directory that holds its own base
        scenario, and reads it again wherever the directory is moved)."""
        data = self.spec.model_dump(mode="json")
        base = self.base_path
        if folder is not None and base.is_relative_to(folder := folder.resolve()):
            base = base.relative_to(folder)
        return {**data, "name": self.name, "base": base.as_posix()}


def load_sweep(path: str | Path, overrides: list[str] | tuple[str, ...] = (),
               seeds: list[int] | None = None,
               on_point: Callable[[int, int], None] | None = None) -> Sweep:
    """Read a sweep file, expand its axes and validate every point.

    Args:
        path: the sweep YAML file.
        overrides: extra ``a.b=value`` fixed overrides (applied after the file's ``set``).
        seeds: seeds to run each configuration at, in place of the file's ``seeds``
            (``sflsim sweep --seeds``; :func:`parse_seeds`); None: the file's.
        on_point: called as ``on_point(done, total)`` after each point is validated
            (progress; a sweep of 10,000 points takes about 100 s to check).

    Raises:
        ConfigError: the sweep file is invalid (unknown key, an empty axis, zipped axes of
            unequal length, an axis naming a field the scenario does not have, seeds
            beside a ``seed`` axis or a repeated seed, a field and a field inside it
            among the axes, ``set`` and ``overrides``), is a scenario file, or a point is
            not a valid scenario; the message names the axis or the point.
    """
    path = Path(path)
    data = read_yaml_mapping(path, what="sweep")
    if "base" not in data and "axes" not in data and "devices" in data:
        raise ConfigError(f"{path}: this is a scenario file (it has 'devices' and no 'base' or "
                          f"'axes'), not a sweep; run it with 'sflsim run {path}', or sweep it "
                          f"from a sweep file whose 'base:' names it")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path), SweepSpec)) from None
    cli_set = {_split_assignment(a)[0]: a for a in overrides}
    if seeds is not None:
        spec = spec.model_copy(update={"seeds": list(seeds)})
    if overrides:
        extra = dict(_split_assignment(a) for a in overrides)
        spec = spec.model_copy(update={"set": {**spec.set, **extra}})
    base_path = (path.parent / spec.base).resolve()
    if not base_path.exists() and len(Path(spec.base).parts) == 1:
        from sflsim.shipped import scenarios_dir  # base: quickstart, a shipped scenario

        shipped = scenarios_dir() / Path(spec.base).with_suffix(".yaml")
        base_path = shipped if shipped.is_file() else base_path
    try:
        base = read_yaml_mapping(base_path)
    except ConfigError as exc:
        raise ConfigError(f"{path}: base: {exc}") from None
    check_base_is_a_scenario(base, base_path, where=str(path))
    anchor_inputs(base, base_path.parent)  # its input files: relative to the base file
    name = spec.name or path.stem
    return Sweep(spec=spec, name=name, base_path=base_path,
                 points=expand(spec, base, where=str(path), name=name, cli_set=cli_set,
                               on_point=on_point),
                 path=path)


def check_base_is_a_scenario(base: dict[str, Any], base_path: Path, where: str) -> None:
    """Refuse a ``base:`` that is itself a sweep file (sweeps do not nest).

    Raises:
        ConfigError: naming the base file, the sweep fields it holds and, when it names
            one, the scenario file that sweep is based on.
    """
    if "axes" not in base and "base" not in base:
        return  # a scenario (a stray 'set:' or 'mode:' is the schema's to report)
    sweep_only = [k for k in SweepSpec.model_fields
                  if k in base and k not in Scenario.model_fields]
    inner = base.get("base")
    hint = (f" (that sweep's base is {(base_path.parent / inner).resolve()})"
            if isinstance(inner, str) else "")
    raise ConfigError(f"{where}: base: {base_path} is a sweep file (it has "
                      f"{', '.join(repr(k) for k in sweep_only)}), but base must be a scenario "
                      f"file; point base at a scenario{hint} and put the other sweep's axes and "
                      f"set here")


def _split_assignment(assignment: str) -> tuple[str, Any]:
    """``"a.b=value"`` -> ``("a.b", value read as YAML)`` (checked like ``--set``)."""
    if "=" not in assignment or not assignment.split("=", 1)[0].strip():
        raise ConfigError(f"--set {assignment!r}: expected FIELD=VALUE, e.g. training.rounds=3")
    path, raw = assignment.split("=", 1)
    return path.strip(), override_value(assignment, raw)


def expand(spec: SweepSpec, base: dict[str, Any], where: str = "sweep",
           name: str | None = None, cli_set: dict[str, str] | None = None,
           on_point: Callable[[int, int], None] | None = None) -> list[SweepPoint]:
    """Every point of ``spec`` applied to the base scenario mapping, each validated.

    Args:
        spec: the sweep.
        base: the base scenario as read from YAML (not modified).
        where: what to name first in error messages (the sweep file).
        name: sweep name; each point's scenario is named ``<name>.<point id>``
            unless ``name`` is itself set or swept.
        cli_set: the ``set`` entries that came from the command line, ``{path:
            "path=value"}``: their errors lead with ``--set path=value``, not the file.
        on_point: see :func:`load_sweep`.

    Raises:
        ConfigError: see :func:`load_sweep`.
    """
    check_seeds(spec, where, cli_set)
    check_axes(spec, where)
    paths = list(spec.axes)
    both = [p for p in paths if p in spec.set]
    if both:
        cli = [cli_set[p] for p in both if p in (cli_set or {})]
        if cli:  # the command line's --set, not the file's set:
            raise ConfigError(f"--set {cli[0]}: {both[0]} is an axis of {where}; a --set "
                              f"cannot fix an axis (remove the axis, or the --set)")
        raise ConfigError(f"{where}: {', '.join(both)} is both in set and in axes; keep one")
    check_nested_paths(spec.set, spec.axes, where, cli_set)
    count = (math.prod(len(v) for v in spec.axes.values()) if spec.mode == "product"
             else min((len(v) for v in spec.axes.values()), default=1))
    count *= len(spec.seeds) if spec.seeds is not None else 1
    if count > MAX_POINTS:
        raise ConfigError(f"{where}: {count:,} points; valid: at most {MAX_POINTS:,} in one "
                          f"sweep (split it, or sweep fewer values or seeds)")
    combos = (list(itertools.product(*spec.axes.values())) if spec.mode == "product"
              else list(zip(*spec.axes.values())))
    cli_set = cli_set or {}
    fixed = copy.deepcopy(base)
    for path, value in spec.set.items():
        assign(fixed, path, value,
               f"--set {cli_set[path]}" if path in cli_set else f"{where}: set {path!r}")
    seeds: list[int | None] = list(spec.seeds) if spec.seeds is not None else [None]
    width = max(3, len(str(len(combos) * len(seeds) - 1)))
    config_width = max(3, len(str(len(combos) - 1)))
    runs = [(c, combo, seed) for c, combo in enumerate(combos) for seed in seeds]
    points = []
    for i, (c, combo, seed) in enumerate(runs):
        point_id = f"p{i:0{width}d}"
        values = dict(zip(paths, combo))
        if seed is not None:
            values["seed"] = seed
        data = copy.deepcopy(fixed)
        for path, value in values.items():
            assign(data, path, value, f"{where}: axis {path!r}")
        if name is not None and "name" not in values and "name" not in spec.set:
            data["name"] = f"{name}.{point_id}"
        try:  # the point's own warnings, passed on to the caller's block as well
            with input_warnings() as warned:
                scenario = validate_scenario(data, where=f"{where}: point {point_id} "
                                                        f"({describe_values(values)})")
        except ConfigError as exc:
            raise _blame(base, spec.set, fixed, values, where, cli_set,
                         seeded=spec.seeds is not None) or exc from None
        points.append(SweepPoint(point_id=point_id, values=values, scenario=scenario,
                                 config_id=f"c{c:0{config_width}d}", warnings=tuple(warned)))
        if on_point is not None:
            on_point(i + 1, len(runs))
    _refuse_twins(points, where)
    return points


def _refuse_twins(points: list[SweepPoint], where: str) -> None:
    """Refuse two points that are the same scenario once validated (``[1, 1]``, ``"1 s"``
    and ``"1000 ms"``, a value that is the default): a run is deterministic, so the
    second would repeat the first.

    Raises:
        ConfigError: naming both points and their axis values.
    """
    seen: dict[str, SweepPoint] = {}
    for point in points:  # the name differs by point id, unless it is what is swept
        data = point.scenario.model_dump(mode="json",
                                         exclude=set() if "name" in point.values else {"name"})
        key = json.dumps(data, sort_keys=True)
        first = seen.setdefault(key, point)
        if first is not point:
            raise ConfigError(
                f"{where}: points {first.point_id} ({describe_values(first.values)}) and "
                f"{point.point_id} ({describe_values(point.values)}) are the same scenario "
                f"(a value equal to another, or to its default); a run is deterministic, so "
                f"remove one of the values (for repeats, give the sweep seeds: [0, 1, 2])")


def check_axes(spec: SweepSpec, where: str) -> None:
    """Refuse a sweep without axes (and without seeds), an empty axis, or zipped axes of
    unequal length.

    Raises:
        ConfigError: naming the axes and their lengths.
    """
    if not spec.axes and not spec.seeds:
        raise ConfigError(f"{where}: axes: a sweep needs at least one axis, e.g. "
                          f"'axes: {{training.rounds: [1, 2, 4]}}', or seeds, e.g. "
                          f"'seeds: [0, 1, 2]'")
    empty = [p for p, values in spec.axes.items() if not values]
    if empty:
        raise ConfigError(f"{where}: axes: {', '.join(map(repr, empty))} "
                          f"{'is an empty axis' if len(empty) == 1 else 'are empty axes'}; "
                          f"give every axis at least one value")
    lengths = {p: len(values) for p, values in spec.axes.items()}
    if spec.mode == "zip" and len(set(lengths.values())) > 1:
        shown = ", ".join(f"{p} has {plural(n, 'value')}" for p, n in lengths.items())
        raise ConfigError(f"{where}: mode zip needs axes of equal length, but {shown}; "
                          f"make them equal or use mode: product")


def check_seeds(spec: SweepSpec, where: str, cli_set: dict[str, str] | None = None) -> None:
    """Refuse ``seeds`` that are empty or repeat a seed, or that sit beside a ``seed``
    axis or a fixed ``seed`` (each point would be given two seeds).

    Raises:
        ConfigError: naming the seeds and what clashes with them.
    """
    if spec.seeds is None:
        return
    if not spec.seeds:
        raise ConfigError(f"{where}: seeds: an empty list; give at least one seed, e.g. "
                          f"'seeds: [0, 1, 2]', or leave seeds out")
    repeated = sorted({s for s in spec.seeds if spec.seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"{where}: seeds {spec.seeds}: seed {repeated[0]} is given twice; "
                          f"a run is deterministic, so give each seed once")
    if "seed" in spec.axes:
        raise ConfigError(f"{where}: seeds {spec.seeds} and the axis 'seed' both set the seed; "
                          f"keep one (seeds: to repeat every configuration)")
    if "seed" in spec.set:
        which = (f"--set {(cli_set or {})['seed']}" if "seed" in (cli_set or {})
                 else "set 'seed'")
        raise ConfigError(f"{where}: seeds {spec.seeds} and {which} both set the seed; keep "
                          f"one")


def parse_seeds(text: str) -> list[int]:
    """``--seeds`` as a list: ``"0-4"`` -> ``[0, 1, 2, 3, 4]``, ``"0,1,2"``, ``"7"``, or
    ranges and seeds mixed (``"0-2,10"``), in the order given.

    Raises:
        ConfigError: a part is not a whole number >= 0 or a range ``A-B`` with A <= B, a
            seed repeats, or there are more than :data:`MAX_POINTS` seeds; naming the part
            and the valid forms.
    """
    import collections

    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            first = last = -1
        if low.strip().isdigit() and dash and high.strip().isdigit() and first > last:
            raise ConfigError(f"--seeds {text}: the range {part!r} runs backwards; write it "
                              f"from the lower seed, {last}-{first}")
        if not low.strip().isdigit() or (dash and not high.strip().isdigit()) or first > last:
            raise ConfigError(f"--seeds {text}: {part!r} is not a seed or a range; valid: a "
                              f"range 0-4, a list 0,1,2 or both, 0-2,10 (whole numbers >= 0)")
        if len(seeds) + last - first + 1 > MAX_POINTS:
            raise ConfigError(f"--seeds {text}: {len(seeds) + last - first + 1:,} seeds or more; "
                              f"valid: at most {MAX_POINTS:,} points in one sweep")
        seeds.extend(range(first, last + 1))
    repeated = sorted(s for s, n in collections.Counter(seeds).items() if n > 1)
    if repeated:
        raise ConfigError(f"--seeds {text}: seed {repeated[0]} is given twice; give each seed "
                          f"once")
    return seeds


def assign(data: dict[str, Any], path: str, value: Any, where: str) -> None:
    """Set the field at dotted ``path`` of a scenario mapping to (a copy of) ``value``.

    The path is checked as ``--set`` checks it (no path through a non-mapping, no new
    device group made by setting one of its fields); unknown fields are left for the
    schema to report.

    Raises:
        ConfigError: prefixed with ``where``.
    """
    try:
        apply_override(data, f"{path}=null")
    except ConfigError as exc:
        message = str(exc).split(": ", 1)[1] if str(exc).startswith("--set ") else str(exc)
        raise ConfigError(f"{where}: {message}") from None
    *parents, last = (k.strip() for k in path.split("."))
    node = data
    for key in parents:
        node = node[key]
    node[last] = copy.deepcopy(value)


def _blame(base: dict[str, Any], fixed_values: dict[str, Any], fixed: dict[str, Any],
           values: dict[str, Any], where: str, cli_set: dict[str, str],
           seeded: bool = False) -> ConfigError | None:
    """The error of the one override (axis, else ``set`` entry) that is wrong on its own
    and without which the point is valid: the point is validated whole, and its error
    blamed on that override (an axis with the point's other axis values named, since
    they are its context: the fields of the ``algorithm`` another axis set). None if no
    single override is to blame (the point is reported whole). A ``set`` entry from the command line
    (``cli_set``, see :func:`expand`) is named as ``--set path=value``, and the point's
    ``seed`` from the sweep's ``seeds`` (``seeded``) as one of its seeds."""

    def applied(start: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        data = copy.deepcopy(start)
        for path, value in overrides.items():  # in the point's order
            assign(data, path, value, where)
        return data

    for start, overrides, kind in ((fixed, values, "axis"), (base, fixed_values, "set")):
        if not _valid(start):
            continue
        for path, value in overrides.items():
            others = {p: v for p, v in overrides.items() if p != path}
            # to blame: wrong on its own, and the point is right without it (several
            # that are wrong only together, every group at count 0, are the point's)
            if _valid(applied(start, {path: value})) or not _valid(applied(start, others)):
                continue
            if kind == "set" and path in cli_set:
                label = f"--set {cli_set[path]}"
            elif kind == "axis" and path == "seed" and seeded:  # no axis: from seeds:
                label = f"{where}: seed {as_yaml(value)} of seeds"
            else:
                label = f"{where}: {kind} {path!r} = {as_yaml(value)}"
            if kind == "axis" and others:
                label += f" (with {describe_values(others)})"
            try:
                validate_scenario(applied(start, overrides), where=label)
            except ConfigError as exc:
                return exc
        return None
    return None


def _valid(data: dict[str, Any]) -> bool:
    try:
        validate_scenario(copy.deepcopy(data))
    except ConfigError:
        return False
    return True


def format_value(value: Any) -> Any:
    """An axis value for a table cell: scalars as they are, mappings and lists as JSON,
    None as ``null`` (YAML's word for it: an empty cell would read back as NaN, and the
    axis's whole numbers beside it as floats)."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "))
    return value


def describe_values(values: dict[str, Any]) -> str:
    """``a.b=1, c={name: x}, d=null``: a point's axis values in one line, as YAML
    writes them."""
    return ", ".join(f"{p}={as_yaml(v)}" for p, v in values.items())
