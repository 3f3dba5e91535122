"""Pydantic validation errors rendered as one message a user can act on.

:func:`format_validation_error` turns a pydantic :class:`~pydantic.ValidationError`
into one message whose lines each name the field (as written in the file), the
value given and what is valid, e.g.::

    scenario.yaml: dataset.fraction: 1.5 is out of range; valid: greater than 0 and at most 1
"""

from __future__ import annotations

import contextlib
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from sflsim.inputs.quantities import OUT_OF_RANGE, FlagText
from sflsim.text import as_yaml


def format_validation_error(
    exc: ValidationError, where: str, model: type[BaseModel] | None = None
) -> str:
    """Render a pydantic error as one message of ``where: field.path: problem`` lines.

    Args:
        exc: the error raised by ``model.model_validate``.
        where: what was validated (a file name), put first.
        model: the validated model; with it the message lists valid field names
            (with a "did you mean" for misspellings), valid choices and full ranges,
            and drops the union tags pydantic puts in paths.
    """
    errors = exc.errors()
    problems: list[str] = []
    renamed: set[tuple] = set()  # required fields that an unknown (misspelled) key explains
    if model is not None:
        missing = {tuple(e["loc"]) for e in errors if e["type"] == "missing"}
        for err in errors:
            if err["type"] == "extra_forbidden":
                spot = walk(model, err["loc"])
                close = _closest(str(err["loc"][-1]), spot.valid_keys)
                if close and (*err["loc"][:-1], close) in missing:
                    renamed.add((*err["loc"][:-1], close))
    for err in errors:
        if tuple(err["loc"]) in renamed:
            continue
        problems.append(describe_error(err, model))
    if len(problems) == 1:
        return f"{where}: {problems[0]}"
    return f"{where}: {len(problems)} problems:\n  " + "\n  ".join(problems)


def describe_error(err: Any, model: type[BaseModel] | None = None) -> str:
    """One pydantic error dict as ``field.path: problem (got value)``."""
    kind, got, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    spot = walk(model, err["loc"]) if model is not None else _Spot(list(map(str, err["loc"])))
    path = ".".join(spot.path) or "(top level)"
    shown = f" (got {_show(got)})"

    if err["loc"] and err["loc"][-1] == "[key]" or kind == "invalid_key":
        if spot.path and spot.path[-1] == "[key]":
            spot.path.pop()
        path = ".".join(spot.path) or "(top level)"
        return f"{path}: names must be text; quote {_show(got)} as '{got}'"
    if kind == "extra_forbidden":
        close = _closest(str(err["loc"][-1]), spot.valid_keys)
        if close is None and model is not None:  # training.lr: training.optimizer.lr
            close = nested_field(model, err["loc"])
        hint = f"; did you mean {close!r}?" if close else ""
        valid = f" (valid fields: {', '.join(spot.valid_keys)})" if spot.valid_keys else ""
        if len(err["loc"]) == 1 and not close:  # a top-level key made to hold anchors?
            valid += "; a top-level key starting with 'x-' is ignored (a place for YAML anchors)"
        return f"{path}: unknown field{hint}{valid}"
    if kind == "missing":
        return f"{path}: required field is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tag_field = str(ctx.get("discriminator", "name")).strip("'\"")
        tags = spot.union_tags or _split_expected(str(ctx.get("expected_tags", "")))
        valid = f"valid: {', '.join(tags)}"
        if kind == "union_tag_not_found":
            return f"{path}.{tag_field}: required field is missing; {valid}"
        tag = ctx.get("tag")
        close = _closest(str(tag), tags)
        hint = f"; did you mean {close!r}?" if close else ""
        more = getattr(spot.annotation, "unknown_name_hint", "")  # an open union's advice
        return f"{path}.{tag_field}: {tag!r} is not valid{hint} ({valid}){more}"
    if kind == "literal_error":
        choices = spot.choices or _split_expected(str(ctx.get("expected", "")))
        close = _closest(str(got), choices) if isinstance(got, str) else None
        hint = f"; did you mean {close!r}?" if close else ""
        return f"{path}: {_show(got)} is not valid{hint} (valid: {', '.join(choices)})"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        # the field's own bounds, and the one a validator of every field enforced
        bounds = {**{k: v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le")},
                  **(spot.bounds or {})}
        if ctx.get("item"):  # an item of a list or mapping (SchemaModel's integer bound)
            path += "".join(f".{k}" for k in ctx["item"])
            got = ctx["item_input"]
        finite = "a finite number, " if _not_finite(got) else ""
        return f"{path}: {_show(got)} is out of range; valid: {finite}{_range_text(bounds)}"
    expected = _EXPECTED.get(kind)
    if expected == "text" and isinstance(got, bool):
        # YAML 1.1 reads an unquoted yes/no/on/off/true/false as a boolean
        return (f"{path}: expected text (got {str(got).lower()}: YAML reads unquoted yes, no, "
                f"on, off as true/false; put the text in quotes, e.g. "
                f"{spot.path[-1] if spot.path else 'name'}: '{'yes' if got else 'no'}')")
    if kind == "finite_number":  # nan, inf: out of the field's range, whatever it is
        valid = f"a finite number, {_range_text(spot.bounds)}" if spot.bounds else \
            "a finite number"
        return f"{path}: {_show(got)} is {OUT_OF_RANGE}{valid}"
    if expected is not None:
        if expected == "a mapping":
            expected = _mapping_text(spot)
        rng = f", {_range_text(spot.bounds)}" if spot.bounds else ""
        return f"{path}: expected {expected}{rng}{shown}"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if msg.startswith(OUT_OF_RANGE):  # a validator's range (quantities with units)
        return f"{path}: {_show(got)} is {msg}"
    # Validators that report the value they computed ("must be greater than 0, got -5e+06").
    m = re.fullmatch(r"(.*), got (\S+)", msg, flags=re.DOTALL)
    if m and isinstance(got, str):
        shown_got = _show(got)
        same = shown_got == m[2]
        return f"{path}: {m[1]} (got {shown_got}{'' if same else f' = {m[2]}'})"
    if m or (isinstance(got, str) and repr(got) in msg):
        return f"{path}: {msg}"
    if isinstance(got, dict) and _takes_mapping(spot):  # a whole mapping's check names fields
        return msg if not spot.path else _under(path, msg, spot)
    return f"{path}: {msg}{shown}"


def _under(path: str, msg: str, spot: _Spot) -> str:
    """The message of a check of the whole mapping at ``path``, led by the field it names
    once: ``dataset.download: ...`` as it is, ``access_points.a.upstream: ...`` (a field
    of the mapping) as ``network.access_points.a.upstream: ...``, else ``path: msg``."""
    lead, sep, _ = msg.partition(": ")
    if sep and re.fullmatch(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*", lead):
        if lead == path or lead.startswith(path + "."):
            return msg
        if lead.split(".")[0] in spot.field_names:
            return f"{path}.{msg}"
    return f"{path}: {msg}"


def _mapping_text(spot: _Spot) -> str:
    ann = _strip(spot.annotation)
    if spot.union_tags:
        return f"a mapping with a 'name' field (valid names: {', '.join(spot.union_tags)})"
    if spot.field_names:
        return f"a mapping with the fields {', '.join(spot.field_names)}"
    if typing.get_origin(ann) is dict:
        values = _models_in(typing.get_args(ann)[1])
        if len(values) == 1:
            return f"a mapping of names to {{{', '.join(values[0].model_fields)}}}"
    return "a mapping"


_EXPECTED = {
    "int_parsing": "a whole number", "int_type": "a whole number",
    "int_from_float": "a whole number", "float_parsing": "a number", "float_type": "a number",
    "finite_number": "a finite number", "string_type": "text", "bool_type": "true or false",
    "bool_parsing": "true or false", "dict_type": "a mapping", "model_type": "a mapping",
    "model_attributes_type": "a mapping", "list_type": "a list",
}


def _takes_mapping(spot: _Spot) -> bool:
    """Whether the field at ``spot`` is a mapping (a section, an algorithm, a dict)."""
    return bool(spot.union_tags or spot.field_names) or \
        typing.get_origin(_strip(spot.annotation)) is dict


def _not_finite(value: object) -> bool:
    """Whether ``value`` reads as NaN or an infinity (``nan``, ``.inf``, ``float('inf')``)."""
    if isinstance(value, bool):
        return False
    try:
        return not math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _show(value: Any, limit: int = 80) -> str:
    """``value`` as a message shows it: text quoted and numbers as Python writes them
    (``nan`` and ``inf`` too, given as text or not), null, flags, mappings and lists as
    YAML does (``null``, ``true``, ``{a: 1}``)."""
    text = str(value) if isinstance(value, FlagText) else repr(value)
    if isinstance(value, str) and _NOT_FINITE.fullmatch(value.strip()):  # --set x=nan
        text = value.strip()
    if value is None or isinstance(value, (bool, dict, list)):
        with contextlib.suppress(yaml.YAMLError):  # an object YAML has no form for: Python's
            text = as_yaml(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: text that reads as a number that is not finite (``nan``, ``-inf``): shown unquoted,
#: as the number it stands for
_NOT_FINITE = re.compile(r"[-+]?\.?(?:nan|inf|infinity)", re.IGNORECASE)


def _closest(word: str, choices: list[str]) -> str | None:
    return closest_name(word, choices)


def nested_field(model: type[BaseModel], loc: typing.Sequence[Any]) -> str | None:
    """The field path (as written from the top: ``training.optimizer.lr``) that the
    unknown key at ``loc`` (``training.lr``) probably meant, searching the fields nested
    under its parent, then the whole schema: a field named exactly so (the shortest
    path), else, under its parent, the field whose name is closest; None when none is.
    Unions (the algorithm's fields) and mappings are not searched."""
    key = str(loc[-1])
    parent = walk(model, loc[:-1])
    models = _models_in(parent.annotation) if loc[:-1] else [model]
    under = _nested_paths(models[0], tuple(parent.path)) if len(models) == 1 else []
    everywhere = _nested_paths(model, ())
    for paths in (under, everywhere):
        exact = [p for p in paths if p[-1].lower() == key.lower()]
        if exact:
            return ".".join(min(exact, key=len))
    close = closest_name(key, {p[-1] for p in under})
    found = [p for p in under if p[-1] == close]
    return ".".join(min(found, key=len)) if found else None


def _nested_paths(model: type[BaseModel], path: tuple[str, ...], depth: int = 4
                  ) -> list[tuple[str, ...]]:
    """Every field path under ``model`` (prefixed by ``path``), through fields that hold
    one model, ``depth`` levels down at most."""
    out = []
    for name, info in model.model_fields.items():
        out.append((*path, name))
        inner = _models_in(info.annotation)
        if len(inner) == 1 and depth > 1 and inner[0] is not model:
            out += _nested_paths(inner[0], (*path, name), depth - 1)
    return out


def closest_name(word: str, choices: typing.Iterable[str]) -> str | None:
    """The choice closest to ``word``, case aside (``RPi4`` -> ``rpi4``, ``FedAvg`` ->
    ``fedavg``): one that differs only in case, else :func:`difflib.get_close_matches`
    on the lower-case names; None when none is close."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def _split_expected(text: str) -> list[str]:
    """``"'a', 'b' or 'c'"`` (pydantic's wording) -> ``["a", "b", "c"]``."""
    return re.findall(r"'([^']*)'", text)


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _range_text(bounds: dict[str, Any]) -> str:
    """``{"ge": 1, "le": 5}`` -> ``"1 to 5"``; ``{"gt": 0, "le": 1}`` -> words."""
    if "ge" in bounds and "le" in bounds:
        return f"{_fmt(bounds['ge'])} to {_fmt(bounds['le'])}"
    words = {"gt": "greater than", "ge": "at least", "lt": "less than", "le": "at most"}
    return " and ".join(f"{words[k]} {_fmt(bounds[k])}" for k in ("gt", "ge", "lt", "le")
                        if k in bounds)


# ---------------------------------------------------------------- walking a schema


@dataclass
class _Spot:
    """What the schema says about the place a pydantic error location points at."""

    path: list[str]
    info: FieldInfo | None = None
    annotation: Any = None
    #: Field names of the model the last path part was looked up in.
    valid_keys: list[str] = field(default_factory=list)

    @property
    def bounds(self) -> dict[str, Any]:
        metas = list(self.info.metadata) if self.info is not None else []
        metas += _annotated_metadata(self.annotation)
        return {k: getattr(m, k) for m in metas for k in ("gt", "ge", "lt", "le")
                if getattr(m, k, None) is not None}

    @property
    def choices(self) -> list[str]:
        ann = _strip(self.annotation)
        if typing.get_origin(ann) is typing.Literal:
            return [str(a) for a in typing.get_args(ann)]
        return []

    @property
    def union_tags(self) -> list[str]:
        return [t for m in _models_in(self.annotation) for t in _tags(m)]

    @property
    def field_names(self) -> list[str]:
        models = _models_in(self.annotation)
        return list(models[0].model_fields) if len(models) == 1 else []


def walk(model: type[BaseModel], loc: typing.Sequence[Any]) -> _Spot:
    """Follow a pydantic error location through ``model``'s fields.

    Dict keys (device group names) are kept, union tags (``algorithm.<name>``) are
    dropped from the shown path; unknown parts are kept as they are.
    """
    spot = _Spot(path=[], annotation=model)
    for part in loc:
        ann = _strip(spot.annotation)
        key = str(part)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            spot.valid_keys = list(ann.model_fields)
            info = ann.model_fields.get(key)
            spot.path.append(key)
            spot.info = info
            spot.annotation = info.annotation if info is not None else None
        elif typing.get_origin(ann) is dict:
            spot.path.append(key)
            spot.info, spot.valid_keys = None, []
            spot.annotation = typing.get_args(ann)[1] if key != "[key]" else str
        elif len(_models_in(ann)) > 1:  # a union member chosen by its tag or class name
            chosen = [m for m in _models_in(ann) if key in _tags(m) or key == m.__name__]
            if chosen:
                spot.annotation, spot.info = chosen[0], None
            else:
                spot.path.append(key)
                spot.annotation = None
        else:
            spot.path.append(key)
            spot.info, spot.annotation, spot.valid_keys = None, None, []
    return spot


def _strip(ann: Any) -> Any:
    """``Optional[X]`` -> ``X``; ``Annotated[X, ...]`` -> ``X``; a model class that itself
    defines ``union_members()`` (the algorithm configurations' base, whose members are
    registered at run time) -> the union of those members."""
    while True:
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            ann = typing.get_args(ann)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            if len(args) != 1:
                return ann
            ann = args[0]
        elif isinstance(ann, type) and "union_members" in vars(ann):
            members = ann.union_members()
            return members[0] if len(members) == 1 else typing.Union[tuple(members)]  # noqa: UP007
        else:
            return ann


def _annotated_metadata(ann: Any) -> list[Any]:
    out: list[Any] = []
    while ann is not None:
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            out.extend(ann.__metadata__)
            ann = typing.get_args(ann)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            ann = args[0] if len(args) == 1 else None
        else:
            break
    return out


def _models_in(ann: Any) -> list[type[BaseModel]]:
    ann = _strip(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(ann) for m in _models_in(arg)]
    return []


def quantity_leaves(data: Any, ann: Any, path: tuple[str, ...] = ()
                    ) -> typing.Iterator[tuple[tuple[str, ...], str, Any]]:
    """``(path, dimension, value)`` of every value in ``data`` (a mapping as read from a
    file, before validation) that the schema ``ann`` reads as a quantity with a unit (a
    field type marked :class:`~sflsim.inputs.quantities.Unit`). A union of models is
    followed into the member that the mapping's ``name`` picks; keys the schema does not
    have are skipped (validation reports them)."""
    from sflsim.inputs.quantities import Unit

    def dimension(info: FieldInfo | None, annotation: Any) -> str | None:
        metas = [*(info.metadata if info is not None else []), *_annotated_metadata(annotation)]
        return next((m.dimension for m in metas if isinstance(m, Unit)), None)

    stripped = _strip(ann)
    if isinstance(data, dict):
        models = _models_in(ann)
        model = models[0] if len(models) == 1 else union_member(ann, data.get("name"))
        if model is not None:
            for key, value in data.items():
                info = model.model_fields.get(key) if isinstance(key, str) else None
                if info is None:
                    continue
                found = dimension(info, info.annotation)
                if found is not None:
                    yield (*path, key), found, value
                else:
                    yield from quantity_leaves(value, info.annotation, (*path, key))
        elif typing.get_origin(stripped) is dict:
            inner = typing.get_args(stripped)[1]
            found = dimension(None, inner)
            for key, value in data.items():
                if found is not None:
                    yield (*path, str(key)), found, value
                else:
                    yield from quantity_leaves(value, inner, (*path, str(key)))
    elif isinstance(data, list) and typing.get_origin(stripped) in (list, tuple):
        args = [a for a in typing.get_args(stripped) if a is not Ellipsis]
        if len(args) == 1:
            found = dimension(None, args[0])
            for i, value in enumerate(data):
                where = (*path[:-1], f"{path[-1]}[{i}]") if path else (f"[{i}]",)
                if found is not None:
                    yield where, found, value
                else:
                    yield from quantity_leaves(value, args[0], where)


def union_member(ann: Any, tag: object) -> type[BaseModel] | None:
    """The member of the discriminated union ``ann`` whose ``name`` tag is ``tag``; None
    when ``ann`` is not such a union or no member (or more than one) has that tag."""
    members = [m for m in _models_in(ann) if str(tag) in _tags(m)]
    return members[0] if len(_models_in(ann)) > 1 and len(members) == 1 else None


def _tags(model: type[BaseModel]) -> list[str]:
    """Values of the ``name: Literal[...]`` tag of a discriminated-union member."""
    info = model.model_fields.get("name")
    if info is None or typing.get_origin(_strip(info.annotation)) is not typing.Literal:
        return []
    return [str(a) for a in typing.get_args(_strip(info.annotation))]
