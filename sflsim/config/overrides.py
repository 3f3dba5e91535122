"""``--set a.b=value`` overrides: applied to a scenario mapping before it is validated.

Each value is read as YAML; a path through a device group the scenario lacks, or a
value that opens a mapping or list but is not valid YAML, is refused with one
:class:`~sflsim.errors.ConfigError` naming the assignment.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from typing import Any

import yaml

from sflsim.config.algorithms import is_builtin
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.inputs.messages import union_member, walk
from sflsim.inputs.yaml_files import glued_key, yaml_problem


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.path=value`` to ``data`` in place; the value is read as YAML.

    Numbers, ``true``/``false`` and ``{...}`` mappings are typed as in YAML; the schema
    converts the rest (``1e-3`` for a float field becomes 0.001).

    Raises:
        ConfigError: the assignment has no ``=``, an empty field name, a value that opens a
            mapping or list (``{``, ``[``) but is not valid YAML, a path through a
            non-mapping or through a device group that the scenario does not have.
    """
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected FIELD=VALUE, e.g. training.rounds=3")
    path, raw = assignment.split("=", 1)
    keys = [k.strip() for k in path.strip().split(".")]
    if not all(keys):
        raise ConfigError(f"--set {assignment!r}: empty field name in {path.strip()!r}; "
                          f"expected FIELD=VALUE, e.g. training.rounds=3")
    value = override_value(assignment, raw)
    node = data
    for depth, key in enumerate(keys[:-1]):
        if key not in node:
            _check_new_key(node, keys[: depth + 1], assignment)
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(
                f"--set {assignment!r}: {'.'.join(keys[: depth + 1])} is {child!r}, not a mapping"
            )
        node = child
    if keys[-1] == "name" and node.get("name") != value:
        _switch_member(node, keys, value)
    node[keys[-1]] = value


def set_option_problem(args: Sequence[str], extra_argument: bool = False) -> str | None:
    """What is wrong with the ``--set`` options of a command line (``args``, as typed),
    in one line, or None: a value without ``=`` (``--set training.rounds 2``, where the
    shell makes ``2`` a word of its own, which the command would report as an unexpected
    extra argument); with ``extra_argument`` (the command found a word too many) also
    a value ending in ``=`` followed by a word (``--set training.rounds= 2``)."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            break
        if word == "--set" and i + 1 < len(args):
            value, at = args[i + 1], i + 2
        elif word.startswith("--set="):
            value, at = word.removeprefix("--set="), i + 1
        else:
            i += 1
            continue
        after = args[at] if at < len(args) and not args[at].startswith("-") else None
        rule = "--set takes a.b=value (FIELD=VALUE as one word, no space around '=')"
        if "=" not in value:
            shown = f"--set {value!r}" + (f" {after}" if after is not None else "")
            example = f"{value.strip()}={after if after is not None else 'VALUE'}"
            return f"{shown}: {rule}; e.g. --set {example}"
        if extra_argument and value.endswith("=") and after is not None:
            return f"--set {value!r} {after}: {rule}; e.g. --set {value}{after}"
        i = at
    return None


def override_value(assignment: str, raw: str) -> Any:
    """The value of an ``a.b=value`` override, ``raw``, read as YAML; text that YAML
    cannot read stays text (the schema reads it), unless it opens a mapping or list.

    Raises:
        ConfigError: ``raw`` starts with ``{`` or ``[`` but is not valid YAML (naming the
            assignment and where the YAML breaks); a key glued to its value
            (``{name:fedavg}``, :func:`glued_key`).
    """
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        if raw.strip()[:1] in ("{", "["):  # meant as a mapping or list: say why it is not one
            raise ConfigError(f"--set {assignment!r}: the value is not valid YAML "
                              f"({yaml_problem(exc, 'value')}); close every '{{' and '[', "
                              f"and quote the whole --set for the shell") from None
        return raw
    glued = glued_key(value, assignment.split("=", 1)[0].strip())
    if glued is not None:
        raise ConfigError(f"--set {assignment}: {glued}")
    return value


def _switch_member(node: dict[str, Any], keys: list[str], name: object) -> None:
    """``--set algorithm.name=fedprox`` on a file whose algorithm is another one: drop the
    fields of the old algorithm that the new one does not have (FedSGA's
    ``calibration_every`` means nothing to FedProx), so the switch gives the new
    algorithm with the file's shared fields and its own defaults. Other ``name`` fields
    (not the tag of a union of configurations) are left alone."""
    if keys[:-1] == ["algorithm"] and isinstance(node.get("module"), str):
        from sflsim.config.user_algorithms import import_algorithm_module

        import_algorithm_module(node["module"])  # X may be one it registers; problems: later
    member = union_member(walk(Scenario, keys[:-1]).annotation, name)
    if member is not None:
        for key in [k for k in node if k not in member.model_fields]:
            del node[key]
    if keys[:-1] == ["algorithm"] and "module" in node and is_builtin(str(name)):
        del node["module"]  # a built-in needs no user module (nor its PYTHONPATH)


def _check_new_key(node: dict[str, Any], keys: list[str], assignment: str) -> None:
    """Refuse to create a dict entry (a device group) from a path that only sets one field."""
    spot = walk(Scenario, keys)
    parent = walk(Scenario, keys[:-1]).annotation
    if typing.get_origin(parent) is not dict or spot.annotation is None:
        return  # a model field (defaults fill it) or unknown key (the schema reports it)
    names = [str(k) for k in node]
    close = difflib.get_close_matches(keys[-1], names, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"--set {assignment!r}: {'.'.join(keys[:-1])} has no entry {keys[-1]!r}.{hint} "
        f"Valid: {', '.join(names) or 'none'}"
    )
