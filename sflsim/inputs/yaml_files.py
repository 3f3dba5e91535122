"""YAML input files read safely: no Python tags, no repeated keys, one-line errors.

Scenario, profile and sweep files are all read here (:func:`read_yaml_mapping`), so
that each mistake in one (not UTF-8, bad YAML, a tag, a key written twice, a key glued
to its value) becomes one :class:`~sflsim.errors.ConfigError` naming the file and the
line; YAML is read with ``yaml.safe_load``'s loader only.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml

from sflsim.errors import ConfigError


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no Python tags) that refuses a key repeated in one mapping,
    which plain YAML silently resolves by keeping the last one.

    Merge keys (``<<: *anchor`` or ``<<: [*a, *b]``) work as in ``yaml.safe_load``: the
    merged mappings' entries are copied in one level deep, a key written in the mapping
    itself wins over a merged one (it replaces the whole value: nested mappings are not
    merged), and of several merged mappings the first listed wins. Only the keys
    written in one mapping must be distinct; ``<<`` may appear once.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()  # ids of the mapping nodes whose own keys were checked

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # PyYAML flattens a merged mapping in place, possibly before it is constructed
        # itself, so its own keys are checked here, once, before any merge
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._check_keys(node)
        super().flatten_mapping(node)

    def _check_keys(self, node: yaml.MappingNode) -> None:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                key: object = "<<"
            else:
                key = self.construct_object(key_node)
            if not isinstance(key, typing.Hashable):  # a '? ' complex key: a list or mapping
                kind = "mapping" if isinstance(key, dict) else _yaml_kind(key)
                raise yaml.constructor.ConstructorError(
                    None, None, f"a {kind} cannot be a key; keys are names such as 'devices' "
                    f"(a line starting with '? ' makes a complex key)", key_node.start_mark)
            if key in seen:
                hint = ("; merge several mappings with one '<<: [*a, *b]'" if key == "<<"
                        else "")
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping; keep one{hint}",
                    key_node.start_mark)
            seen.add(key)


def safe_load(text: str) -> Any:
    """Parse YAML safely (:class:`UniqueKeyLoader`)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


#: top-level keys starting with this are extension fields, dropped when a file is read: a
#: place for YAML anchors (``x-pi: &pi {profile: rpi4, link: wifi}``), as in docker-compose
EXTENSION_PREFIX = "x-"


def read_yaml_mapping(path: str | Path, what: str = "scenario") -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (safe loader: no Python tags, no
    repeated keys), without its extension fields (top-level keys starting with
    :data:`EXTENSION_PREFIX`, ``x-``): they hold anchors for the rest of the file and
    are not validated.

    Raises:
        ConfigError: the file is missing, unreadable, not text, not YAML or not a mapping.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} file {str(path)!r} is a directory; expected a YAML file")
    if not path.is_file():
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        state = "does not exist" if not path.exists() else "is not a regular file"
        raise ConfigError(f"{what} file {str(path)!r} {state}{where}{close_file(path)}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} file {str(path)!r} is not UTF-8 text (byte {exc.start}); expected YAML"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {str(path)!r}: {exc.strerror}") from None
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} file {str(path)!r} is not valid YAML: {yaml_problem(exc, what)}"
                          ) from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {_yaml_kind(data)}"
        example = _EXAMPLE_FIELDS.get(what, "")
        raise ConfigError(f"{what} file {str(path)!r} is {kind}; expected a mapping of fields"
                          f"{example}")
    glued = glued_key(data)
    if glued is not None:
        raise ConfigError(f"{what} file {str(path)!r}: {glued}")
    return {k: v for k, v in data.items()
            if not (isinstance(k, str) and k.startswith(EXTENSION_PREFIX))}


def close_file(path: Path) -> str:
    """``"; did you mean 'scenarios/quickstart.yaml'?"`` for the YAML file in the folder
    of the missing ``path`` whose name is closest to its name (``quickstrat.yaml``; a name
    without a suffix is compared with the files' names without theirs), as the path would
    be typed; ``""`` when the folder has none close, or does not exist."""
    import difflib

    try:
        files = sorted(p for p in path.parent.iterdir()
                       if p.suffix in (".yaml", ".yml") and p.is_file())
    except OSError:
        return ""
    names = {(p.name if path.suffix else p.stem): p.name for p in files}
    close = difflib.get_close_matches(path.name, list(names), n=1, cutoff=0.75)
    if not close:
        return ""
    return f"; did you mean {str(path.with_name(names[close[0]]))!r}?"


_EXAMPLE_FIELDS = {"scenario": " such as 'devices:' and 'training:'",
                   "profile": " such as 'description:'"}


def glued_key(data: Any, path: str = "") -> str | None:
    """What is wrong with a key written without a space after its colon, if ``data`` has
    one: in a flow mapping YAML reads ``{name:fedavg}`` as the key ``name:fedavg`` with no
    value (null), which the schema would report as a missing ``name``. None if none."""
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and value is None and re.fullmatch(r"[A-Za-z_]\w*:\S.*", key):
                field, rest = key.split(":", 1)
                shown = f"{path}.{field}" if path else field
                return (f"{shown}: {{{key}}} reads as the key {key!r} with no value; YAML "
                        f"needs a space after the colon: {{{field}: {rest}}}")
            found = glued_key(value, where)
            if found is not None:
                return found
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found = glued_key(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def yaml_problem(exc: yaml.YAMLError, what: str = "scenario") -> str:
    """PyYAML's error in one line: ``line L, column C: problem``."""
    mark = getattr(exc, "problem_mark", None)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = str(getattr(exc, "problem", None) or exc).strip()
    tag = re.search(r"constructor for the tag '([^']*)'", problem)
    if tag:
        shown = tag[1].replace("tag:yaml.org,2002:", "!!")
        return (f"{at}the tag {shown!r} is not allowed; {what} files hold plain YAML "
                f"(mappings, lists, strings, numbers, true/false)")
    if "for merging" in problem:  # '<<: 3': a merge key needs mappings
        found = problem.rsplit(" ", 1)[-1]
        return (f"{at}the merge key '<<' takes an alias of a mapping ('<<: *name') or a list "
                f"of them ('<<: [*a, *b]'), not a {found}")
    context = getattr(exc, "context", None)
    return at + (f"{context}: " if context else "") + problem


def _yaml_kind(value: object) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__)
