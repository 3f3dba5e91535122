"""Generate the scenario field reference from the pydantic models of :mod:`sflsim.config.schema`.

Run by the MkDocs hook ``docs/hooks.py`` at build time (the page ``reference/scenario-fields.md``
exists only in the built site), by ``tests/test_docs.py``, or by hand:
``python docs/gen_reference.py > scenario-fields.md``.
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

PAGE = "reference/scenario-fields.md"


@dataclass(frozen=True)
class FieldDoc:
    path: str  # dotted path as written in a scenario or a --set (mapping keys as <key>)
    type: str
    default: str
    description: str


def _unwrap(annotation: object) -> object:
    """``annotation`` without ``Annotated`` and pydantic wrappers such as ``SerializeAsAny``."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        inner = getattr(annotation, "__args__", None)
        if type(annotation).__name__ == "SerializeAsAny" and inner:
            annotation = inner[0]
            continue
        return annotation


def type_name(annotation: object) -> str:
    """A short readable name of a field's type: ``int``, ``str | null``, ``list[int]``,
    ``"iid" | "dirichlet"``, ``mapping of name to DeviceGroup``."""
    annotation = _unwrap(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) if isinstance(a, str) else str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join("null" if a is type(None) else type_name(a) for a in args)
    if origin is list:
        return f"list[{type_name(args[0])}]" if args else "list"
    if origin is dict:
        return f"mapping of name to {type_name(args[1])}" if args else "mapping"
    if isinstance(annotation, type):
        if issubclass(annotation, bool):
            return "bool"
        if issubclass(annotation, BaseModel):
            return "mapping"
        if issubclass(annotation, enum.Enum):
            return " \\| ".join(json.dumps(m.value) for m in annotation)
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _nested(annotation: object) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds (directly, optionally or as the values of a mapping) and the
    path segment that leads into it (``""``, or ``"<name>"`` for a mapping)."""
    annotation = _unwrap(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    if origin in (typing.Union, types.UnionType):
        for a in args:
            model, seg = _nested(a)
            if model is not None:
                return model, seg
    if origin is dict and args:
        model, _ = _nested(args[1])
        if model is not None:
            return model, "<name>"
    return None, ""


def _rst_to_md(text: str) -> str:
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    parts = text.split("`")  # outside code spans, < and > are text, not HTML
    parts[::2] = [t.replace("<", "&lt;").replace(">", "&gt;") for t in parts[::2]]
    return "`".join(parts).replace("|", "\\|").strip()


@functools.cache
def _comments(cls: type) -> dict[str, str]:
    """``#:`` comments above each field of ``cls``'s own body (and a trailing ``# ...``)."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    pending: list[str] = []
    in_string = False  # a docstring's lines ("hidden_dim: 768, ...") are not fields
    for line in lines[1:]:
        stripped = line.strip()
        if line.count('"""') % 2:
            in_string = not in_string
            continue
        if in_string:
            continue
        if line.startswith("    #:"):
            pending.append(stripped[2:].strip())
            continue
        m = re.match(r"    ([A-Za-z_]\w*)\s*:", line)
        if m and not line.startswith("     "):
            desc = " ".join(pending)
            trailing = re.search(r"\)\s+#\s*(.+)$|=\s*[^#]*#\s*(.+)$", line)
            if not desc and trailing:
                desc = (trailing.group(1) or trailing.group(2) or "").strip()
            out.setdefault(m.group(1), desc)
        pending = []
    return out


@functools.cache
def _docstring_items(cls: type) -> dict[str, str]:
    """The items of ``cls``'s own docstring that name a field: ``- ``name``, text`` or
    ``- ``name``: text`` (continued on the lines indented under it)."""
    doc = inspect.cleandoc(vars(cls).get("__doc__") or "")
    out: dict[str, str] = {}
    current: list[str] | None = None
    for line in doc.splitlines():
        m = re.match(r"- ``([A-Za-z_]\w*)``[,:]\s*(.*)$", line)
        if m:
            current = [m.group(2)]
            out[m.group(1)] = current  # type: ignore[assignment]
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return {k: " ".join(v) for k, v in out.items()}  # type: ignore[arg-type]


def _own_doc(model: type[BaseModel]) -> str:
    """The first paragraph of ``model``'s own docstring (not one it inherits)."""
    doc = inspect.cleandoc(vars(model).get("__doc__") or "")
    return doc.split("\n\n")[0].replace("\n", " ").strip()


def _description(model: type[BaseModel], name: str) -> str:
    """A field's description: its pydantic ``description``, else the ``#:`` comment above
    it (or a trailing ``#`` one), else the item naming it in its class's docstring, else,
    for a field that holds a model (or a mapping of them), that model's own docstring."""
    info = model.model_fields[name]
    if info.description:
        return _rst_to_md(info.description)
    owners = [cls for cls in model.__mro__ if name in getattr(cls, "__annotations__", {})]
    for cls in owners:
        text = _comments(cls).get(name, "") or _docstring_items(cls).get(name, "")
        if text:
            return _rst_to_md(text[:1].upper() + text[1:])
    nested, _ = _nested(info.annotation)
    if nested is not None:
        return _rst_to_md(_own_doc(nested))
    return ""


def _default(info) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()
    else:
        value = info.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float) and value == float("inf"):
        return "`inf`"
    try:
        text = json.dumps(value, default=str)
    except TypeError:
        text = repr(value)
    return f"`{text}`".replace("|", "\\|")


def model_fields(model: type[BaseModel], prefix: str) -> Iterator[FieldDoc]:
    """Every field of ``model`` and of the models it holds, depth first, as dotted paths."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield FieldDoc(path, type_name(info.annotation), _default(info), _description(model, name))
        nested, seg = _nested(info.annotation)
        if nested is not None and name != "algorithm":
            yield from model_fields(nested, f"{path}.{seg + '.' if seg else ''}")


def algorithm_configs() -> list[type[BaseModel]]:
    import sflsim.config.schema  # noqa: F401  (registers the built-in configurations)
    from sflsim.config.algorithms import AlgorithmConfig

    return list(AlgorithmConfig.union_members())


def _names(config: type[BaseModel]) -> list[str]:
    return [a for a in typing.get_args(_unwrap(config.model_fields["name"].annotation))
            if isinstance(a, str)]


def _table(rows: list[FieldDoc]) -> list[str]:
    out = ["| field | type | default | description |", "|---|---|---|---|"]
    for f in rows:
        desc = f.description.replace("\n", " ") or "&nbsp;"
        out.append(f"| `{f.path}` | {f.type} | {f.default} | {desc} |")
    return out


def all_fields() -> list[FieldDoc]:
    """Every row of the page: the scenario's fields, then each algorithm configuration's."""
    from sflsim.config.scenario import Scenario

    rows = list(model_fields(Scenario, ""))
    for config in algorithm_configs():
        rows += model_fields(config, "algorithm.")
    return rows


def missing_descriptions() -> list[str]:
    """The dotted paths of the fields the page shows without a description (each once)."""
    return list(dict.fromkeys(f.path for f in all_fields() if not f.description.strip()))


def scenario_fields_markdown() -> str:
    """The page: every field of :class:`sflsim.config.scenario.Scenario`, recursively, one
    section per top-level field, and one per registered algorithm configuration."""
    from sflsim.config.algorithms import is_builtin
    from sflsim.config.scenario import Scenario

    lines = [
        "# Scenario fields",
        "",
        "<!-- generated at build time by docs/gen_reference.py from sflsim.config.schema; "
        "do not edit -->",
        "",
        "Every field of a scenario file, generated from the pydantic models of "
        "`sflsim.config.schema` when the site is built, so it always matches the code. "
        "Paths are dotted as `--set` takes them; `<name>` stands for a key you choose "
        "(a device group, an access point). Quantities with units (`\"20 Mbps\"`, "
        "`\"35 ms\"`) are described in [Scenario files](scenario-files.md); a field "
        "marked *required* has no default. `sflsim validate FILE` checks a file against "
        "these models.",
        "",
    ]
    top_level = [f for f in model_fields(Scenario, "") if "." not in f.path]
    lines += ["## Top level", "", *_table(top_level), ""]
    for name, info in Scenario.model_fields.items():
        nested, _ = _nested(info.annotation)
        if nested is None or name == "algorithm":
            continue
        rows = [f for f in model_fields(Scenario, "") if f.path.startswith(name + ".")]
        lines += [f"## `{name}`", "", *_table(rows), ""]
    lines += [
        "## `algorithm`",
        "",
        "`algorithm.name` picks the configuration below; its other fields are that "
        "algorithm's hyperparameters (see [Algorithms](algorithms.md)). An algorithm of "
        "your own adds its own configuration ([Add your own algorithm]"
        "(../how-to/own-algorithm.md)).",
        "",
    ]
    for config in algorithm_configs():
        names = ", ".join(f"`{n}`" for n in _names(config))
        lines += [f"### {names}", ""]
        doc = inspect.getdoc(config) or ""
        if doc and is_builtin(_names(config)[0]):
            lines += [_rst_to_md(doc.split("\n\n")[0].replace("\n", " ")), ""]
        lines += [*_table(list(model_fields(config, "algorithm."))), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(scenario_fields_markdown())
