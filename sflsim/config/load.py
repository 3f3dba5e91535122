"""Read a scenario file, apply ``--set a.b=value`` overrides, validate, check names.

Every mistake becomes one :class:`~sflsim.errors.ConfigError` naming the field,
the value and what is valid; YAML is read with ``yaml.safe_load`` only.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import fnmatch
import functools
import re
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sflsim.config import resolve
from sflsim.config.algorithms import algorithms_with, is_builtin
from sflsim.config.messages import (
    closest_name,
    format_validation_error,
    quantity_leaves,
    union_member,
    walk,
)
from sflsim.config.quantities import bare_number_warning
from sflsim.config.schema import Scenario
from sflsim.errors import ConfigError, DatasetError
from sflsim.hardware import profiles
from sflsim.text import plural


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
        raise ConfigError(f"{what} file {str(path)!r} {state}{where}")
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
        raise ConfigError(f"{what} file {str(path)!r} is not valid YAML: {_yaml_problem(exc, what)}"
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


def _yaml_problem(exc: yaml.YAMLError, what: str = "scenario") -> str:
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
                              f"({_yaml_problem(exc, 'value')}); close every '{{' and '[', "
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


# ------------------------------------------------------------------ warnings


#: the warnings of the innermost :func:`input_warnings` block (None: outside every block)
_WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "sflsim_input_warnings", default=None)


def warn(message: str) -> None:
    """Warn about input that is valid but probably not what was meant: kept by the
    innermost :func:`input_warnings` block (once each), else said on standard error."""
    found = _WARNINGS.get()
    if found is None:
        print(f"warning: {message}", file=sys.stderr)
    elif message not in found:
        found.append(message)


@contextlib.contextmanager
def input_warnings(show: Callable[[str], None] | None = None) -> Iterator[list[str]]:
    """Collect the :func:`warn` warnings of the block, each once (a sweep validates the
    same base for every point); on leaving the block, errors included, pass each to
    ``show`` (the command line prints them) or, without ``show``, on to the enclosing
    block (or standard error)."""
    found: list[str] = []
    token = _WARNINGS.set(found)
    try:
        yield found
    finally:
        _WARNINGS.reset(token)
        for message in found:
            (show or warn)(message)


def bare_number_warnings(data: Any, model: Any = Scenario, where: str = "") -> list[str]:
    """A warning for each unit field of ``data`` (a mapping as read, before validation)
    given a bare number far outside what any shipped profile has
    (:func:`~sflsim.config.quantities.bare_number_warning`): ``uplink_bps: 5`` is 5 bit/s,
    ``latency_s: 35`` is 35 s. ``where`` leads each (``profile x.yaml: ``)."""
    out = []
    for path, dimension, value in quantity_leaves(data, model):
        field = next((k for k in reversed(path) if k != "value"), path[-1])
        message = bare_number_warning(".".join(path), field, dimension, value)
        if message is not None:
            out.append(f"{where}{message}")
    return out


def validate_scenario(data: dict[str, Any], where: str = "scenario") -> Scenario:
    """Validate a mapping into a :class:`Scenario` and check every name it uses.

    Raises:
        ConfigError: one message naming the field, the value and what is valid, for
            schema violations (with "did you mean" for misspelled keys and choices),
            unknown profiles, or an end layer past the model's last client stage.
    """
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, where, Scenario)) from None
    try:
        check_names(scenario)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    for message in bare_number_warnings(data):
        warn(message)
    one = participation_warning(scenario)
    if one is not None:
        warn(one)
    return scenario


def participation_warning(scenario: Scenario) -> str | None:
    """A warning when ``training.clients_per_round`` is the count 1 in a fleet of several
    clients: one client trains each round, where 1.0 (a fraction: every client) may have
    been meant; None otherwise."""
    k, n = scenario.training.clients_per_round, scenario.num_clients
    if type(k) is not int or k != 1 or n < 2:
        return None
    return (f"training.clients_per_round: 1 trains 1 of {n} clients per round (a count); "
            f"for every client write 1.0 (a fraction) or leave it out")


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, override (``--set a.b=value``) and validate the scenario at ``path``.

    Every error names the file, and the overrides whose fields it names
    (:func:`scenario_errors`).

    ``path`` may name a shipped scenario as the command line does (``"quickstart"``,
    ``"papers/fedsga/cifar100_resnet18"``: :func:`sflsim.shipped.scenario_path`).

    Raises:
        ConfigError: see :func:`read_yaml_mapping`, :func:`apply_override`,
            :func:`validate_scenario` and :func:`sflsim.shipped.scenario_path`; or
            ``path`` is a sweep file (it has ``base`` or ``axes``), named as such.
    """
    from sflsim.shipped import scenario_path

    path = scenario_path(path)
    data = read_yaml_mapping(path)  # its errors name the file
    sweep_keys = [k for k in ("base", "axes") if k in data]
    if sweep_keys:
        raise ConfigError(f"{path}: this is a sweep file (it has {' and '.join(map(repr, sweep_keys))}), "
                          f"not a scenario; run it with 'sflsim sweep {path}'")
    with scenario_errors(path, overrides), input_warnings(
            lambda message: warn(_warning_source(message, path, overrides))):
        for assignment in overrides:
            apply_override(data, assignment)
        try:
            return validate_scenario(data, where=str(path))
        except ConfigError as exc:  # "path: problem": the overrides are named below
            raise ConfigError(str(exc).removeprefix(f"{path}: ")) from None


def _warning_source(message: str, path: str | Path, overrides: Sequence[str]) -> str:
    """A warning about a scenario led, as its errors are, by the ``--set`` that set the
    field it names, else by the file (a profile's leads with the profile already)."""
    if message.startswith("profile "):
        return message
    source = _source_override(message, overrides)
    return f"--set {source}: {message}" if source is not None else f"{path}: {message}"


@contextlib.contextmanager
def scenario_errors(path: str | Path, overrides: Sequence[str] = ()) -> Iterator[None]:
    """Name the source of the user errors about a scenario raised in the block: the
    ``--set`` override the field in error comes from, else the scenario file and the
    overrides the message mentions.

    Wrap what builds and runs a loaded scenario (data, memory, device checks), as the
    CLI does, so that those errors read like the loader's. An error about a field that an
    override set (the message leads with that field, or a field inside it: ``--set
    algorithm={...}`` and ``algorithm.candidates``) leads with that override, the last
    one where several set it: ``--set training.round=2: training.round: unknown field;
    did you mean 'rounds'?``; so does the error of an override itself (``--set
    'a.b': expected FIELD=VALUE``). Any other error leads with the file, followed by the
    overrides whose fields the message names (a field, a field inside one, or a pattern
    that matches one, ``devices.*.count``) or that set a field inside the mapping it
    leads with (``dataset: ...`` after ``--set dataset.name=...``): ``scenarios/q.yaml (--set
    training.batch_size=4096): memory: ...``.

    Raises:
        ConfigError, DatasetError: raised in the block, again with their source first; a
            message that already starts with the file or a ``--set`` is unchanged.
    """
    try:
        yield
    except (ConfigError, DatasetError) as exc:
        message = str(exc)
        if message.startswith((f"{path}:", f"{path} (--set ", "--set ")):
            raise
        source = _source_override(message, overrides)
        if source is not None:
            raise type(exc)(f"--set {source}: {message}") from None
        named = _named_overrides(message, overrides)
        shown = f" ({', '.join(f'--set {a}' for a in named)})" if named else ""
        raise type(exc)(f"{path}{shown}: {message}") from None


#: Field paths in a message: dotted names (``training.batch_size``, ``devices.*.count``).
_FIELD_PATHS = re.compile(r"(?<![\w.*/-])[A-Za-z_][\w-]*(?:\.(?:[A-Za-z_][\w-]*|\*))+")


def _override_path(assignment: str) -> str:
    """The dotted field path an ``a.b=value`` assignment sets (spaces around keys dropped)."""
    return ".".join(k.strip() for k in assignment.split("=", 1)[0].split("."))


def _source_override(message: str, overrides: Sequence[str]) -> str | None:
    """The last assignment that set the field ``message`` leads with (``field: ...``) or a
    mapping that holds it, or whose path goes through the unknown field the message
    names (``--set trainin.rounds=2``); None when no override is the source."""
    lead, _, rest = message.partition(":")
    lead = lead.strip()
    if not re.fullmatch(r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*", lead):
        return None
    unknown = rest.lstrip().startswith("unknown field")  # a key the override misspelled
    for assignment in reversed(overrides):
        path = _override_path(assignment)
        if lead == path or lead.startswith(path + ".") or (unknown and path.startswith(lead + ".")):
            return assignment
    return None


def _named_overrides(message: str, overrides: Sequence[str]) -> list[str]:
    """The ``a.b=value`` assignments whose field ``message`` names, or that set a field
    inside the mapping it leads with (``dataset: ...`` and ``--set dataset.name=...``; see
    :func:`scenario_errors`), in the order given, each once."""
    lead = message.split(":", 1)[0].strip()
    fields = set(_FIELD_PATHS.findall(message))
    if re.fullmatch(r"[A-Za-z_][\w-]*", lead):  # a top-level field: "seed: -1 is ..."
        fields.add(lead)
    named: list[str] = []
    for assignment in overrides:
        path = _override_path(assignment)
        if assignment not in named and (path.startswith(lead + ".") or any(
                field == path or field.startswith(path + ".") or fnmatch.fnmatchcase(path, field)
                for field in fields)):
            named.append(assignment)
    return named


def check_timing_only(scenario: Scenario) -> None:
    """Refuse ``training.timing_only`` where the timeline depends on training
    (:func:`timing_only_refusal`), ``algorithm.split_schedule`` outside timing-only runs,
    and ``training.fuse_clients`` and ``training.parallel_clients`` for an algorithm that
    has no independent client-side steps.

    Raises:
        ConfigError: naming the field, the value and what is valid.
    """
    name = scenario.algorithm.name
    if scenario.training.timing_only:
        why = timing_only_refusal(scenario)
        if why is not None:
            raise ConfigError(f"training.timing_only (--no-train): {why}")
    elif getattr(scenario.algorithm, "split_schedule", None) is not None:
        raise ConfigError(f"algorithm.split_schedule: {scenario.algorithm.split_schedule!r} is "
                          f"followed only by timing-only runs (training.timing_only: true, "
                          f"--no-train); remove it, and split: sufficiency chooses the cuts")
    if scenario.training.fuse_clients and not scenario.algorithm.supports("fuse_clients"):
        why = _lacks(scenario, "fuse_clients", _NOT_FUSED.get(
            name, "whose client-side steps wait for a server-side model that other clients share"))
        raise ConfigError(f"training.fuse_clients: not available for algorithm {name!r}, {why}; "
                          f"valid: {', '.join(algorithms_with('fuse_clients'))}")
    if scenario.training.parallel_clients > 1 and not scenario.algorithm.supports("parallel_clients"):
        why = _lacks(scenario, "parallel_clients", "which has no per-client training steps that "
                     "are independent within a round")
        raise ConfigError(f"training.parallel_clients: not available for algorithm {name!r}, "
                          f"{why}; valid: {', '.join(algorithms_with('parallel_clients'))} (or 1)")


#: Why a built-in algorithm outside the split-learning family cannot fuse its clients.
_NOT_FUSED = {
    "fedgh": "whose local training sflsim does not batch (clients train one at a time)",
    "fedas": "whose local training sflsim does not batch (clients train one at a time)",
    "centralized": "which trains one model on the pooled data, not clients",
}


def _lacks(scenario: Scenario, capability: str, builtin_reason: str) -> str:
    """Why the scenario's algorithm lacks ``capability``: ``builtin_reason`` for one of
    sflsim's own, else that its configuration does not declare it."""
    if is_builtin(scenario.algorithm.name):
        return builtin_reason
    return (f"whose configuration {type(scenario.algorithm).__qualname__} does not list "
            f"{capability!r} in its capabilities")


def timing_only_refusal(scenario: Scenario) -> str | None:
    """Why ``scenario``'s simulated timeline would depend on what training computes, so
    that a timing-only run could not give the trained run's events; None when it does not.

    Every algorithm whose configuration declares ``timing_only``
    (:data:`~sflsim.config.algorithms.CAPABILITIES`) qualifies but for two settings:
    MultiSFL's adaptive replay (its replay fraction, hence its replay transfers and
    server steps, follows the gradient norms of training) and FedSGA's
    ``split: sufficiency`` without a recorded ``split_schedule`` (its cuts follow the
    trained estimator and probe losses).
    """
    alg, name = scenario.algorithm, scenario.algorithm.name
    if not alg.supports("timing_only"):
        why = _lacks(scenario, "timing_only", "whose timeline depends on training")
        return (f"not available for algorithm {name!r}, {why}; valid: "
                f"{', '.join(algorithms_with('timing_only'))}")
    if (name == "multisfl" and alg.replay and alg.adaptive_replay
            and alg.replay_fraction_max > alg.replay_fraction):
        return ("algorithm.adaptive_replay: true makes MultiSFL's replay fraction (its replay "
                "transfers and server steps) follow the gradient norms of training, so the "
                "timeline depends on what is learned; valid in timing-only runs: "
                "algorithm.adaptive_replay: false (replay at algorithm.replay_fraction every "
                "round) or algorithm.replay: false")
    if name == "fedsga" and alg.split == "sufficiency" and alg.split_schedule is None:
        return ("FedSGA's algorithm.split: sufficiency chooses each cut from trained values "
                "(estimator, probe losses), so the timeline depends on what is learned; give "
                "algorithm.split_schedule (the results directory of a trained run of this "
                "scenario, or its clients table) to replay its cuts, or use algorithm.split: "
                "static, random or resource")
    return None


def check_names(scenario: Scenario) -> None:
    """Check profile names and end layers against what exists.

    The checks that need the model (end layers and cut layers against its stages) come
    last: counting the stages builds a tiny copy of it, which imports torch, and every
    other mistake is told without waiting for that.
    """
    _check_profile("servers", scenario.server.profile, "server.profile")
    check_timing_only(scenario)
    _check_participation(scenario)
    _check_traces(scenario)
    branches = getattr(scenario.algorithm, "num_branches", None)
    if branches is not None and branches > scenario.num_clients:
        raise ConfigError(f"algorithm.num_branches: {plural(branches, 'branch')} need at least as "
                          f"many clients, but the scenario has {scenario.num_clients}; valid: 1 to "
                          f"{scenario.num_clients}")
    for group_name, group in scenario.devices.items():
        for kind, name in (("devices", group.profile), ("links", group.link)):
            field = "profile" if kind == "devices" else "link"
            _check_profile(kind, name, f"devices.{group_name}.{field}")
    for ap_name, ap in scenario.network.access_points.items():
        for field, name in (("link", ap.link), ("backhaul", ap.backhaul)):
            if name is not None:
                _check_profile("links", name, f"network.access_points.{ap_name}.{field}")
    num_stages = resolve.num_stages(scenario.model)  # torch only for a user's own backbone
    _check_split(scenario, num_stages)
    _check_split_schedule(scenario, num_stages)
    # the whole model trains on the device in FedAvg and its family (end_layer unused), so
    # the last stage is a valid end layer there; elsewhere the server needs a stage
    last = num_stages if scenario.algorithm.supports("whole_model") else num_stages - 1
    if scenario.fleet is not None:
        _check_fleet(scenario, num_stages, last)
    for group_name, group in scenario.devices.items():
        if group.end_layer == num_stages and last < num_stages:
            raise ConfigError(
                f"devices.{group_name}.end_layer: {group.end_layer} is the last stage of "
                f"{scenario.model.name}, which leaves the server nothing to train; only "
                f"algorithms that train the whole model on the device (the 'whole_model' "
                f"capability: {', '.join(algorithms_with('whole_model'))}) may end there, "
                f"and {scenario.algorithm.name!r} does not; valid end layers are 1 to {last}")
        if group.end_layer > last:
            raise ConfigError(
                f"devices.{group_name}.end_layer: {group.end_layer} is past the end of "
                f"{scenario.model.name} ({plural(num_stages, 'stage')}); valid end layers are "
                f"1 to {last}"
            )


def _check_fleet(scenario: Scenario, num_stages: int, last: int) -> None:
    """The fleet file reads (:func:`sflsim.fleet.load_fleet`: every cell, profile and link
    name), its end layers are cuts of the model, ``server.priorities`` names its groups."""
    from sflsim.fleet import load_fleet

    fleet = load_fleet(scenario.fleet)
    for message in fleet.warnings:
        warn(message)
    default = scenario.fleet_end_layer or 1
    ends = fleet.end_layers(default)
    bad = (ends > last).nonzero()[0]
    if len(bad):
        i = int(bad[0])
        where = (f"fleet: {scenario.fleet} row {fleet.row(i)}, end_layer" if fleet.end_layer[i]
                 else "fleet_end_layer")
        raise ConfigError(f"{where}: {int(ends[i])} is past the last cut {scenario.algorithm.name!r} "
                          f"may use in {scenario.model.name} ({plural(num_stages, 'stage')}); "
                          f"valid end layers are 1 to {last}")
    for group in scenario.server.priorities:
        if group not in fleet.group_names:
            raise ConfigError(f"server.priorities: {group!r} is not a group of the fleet; "
                              f"valid: {', '.join(fleet.group_names)}")


def _check_profile(kind: str, name: str, field: str) -> None:
    """Load the profile ``name`` of ``kind`` (``devices``, ``links``, ``servers``) that
    ``field`` names, and warn about the bare numbers of its file (:func:`profile_warnings`).

    Raises:
        ConfigError: leading with ``field``: no such profile (with the name that differs
            only in case, ``RPi4`` for ``rpi4``, or another close one), or a broken file.
    """
    try:
        profiles.load_profile(kind, name)
    except ConfigError as exc:
        raise ConfigError(f"{field}: {with_name_hint(str(exc), kind, name)}") from None
    for message in profile_warnings(kind, name):
        warn(message)


def with_name_hint(message: str, kind: str, name: str) -> str:
    """The error of an unknown profile ``name`` of ``kind`` with a "Did you mean" for the
    name that differs only in case (``RPi4`` for ``rpi4``), which the profile library's
    own suggestion, case-sensitive, misses; ``message`` as it is otherwise."""
    names = profiles.available(kind)
    close = closest_name(name, names) if name not in names else None
    if close is None or "Did you mean" in message:
        return message
    case = " (profile names are case-sensitive)" if close.lower() == name.lower() else ""
    return message.replace(f"profile {name!r}.", f"profile {name!r}. Did you mean {close!r}{case}?", 1)


def profile_path(kind: str, name: str) -> Path | None:
    """The file the profile ``name`` of ``kind`` is read from (the first folder of
    :func:`~sflsim.hardware.profiles.profile_dirs` that has it), None if none has."""
    for folder in profiles.profile_dirs():
        path = folder / kind / f"{name}.yaml"
        if path.is_file():
            return path
    return None


def profile_warnings(kind: str, name: str) -> list[str]:
    """Warnings about the bare numbers of a profile file far from real hardware
    (:func:`bare_number_warnings`), each led by ``profile <file>: ``."""
    path = profile_path(kind, name)
    if path is None:
        return []
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return []
    return list(_profile_file_warnings(str(path), kind, stamp))


@functools.cache
def _profile_file_warnings(path: str, kind: str, _stamp: int) -> tuple[str, ...]:
    try:
        data = read_yaml_mapping(path, what="profile")
    except ConfigError:  # load_profile has said what is wrong
        return ()
    model = {"devices": profiles.DeviceProfile, "links": profiles.LinkProfile,
             "servers": profiles.ServerProfile}[kind]
    return tuple(bare_number_warnings(data, model, where=f"profile {path}: "))


def _check_traces(scenario: Scenario) -> None:
    """Read every ``network.traces`` file as the run will (both directions), so that a
    missing or broken trace is told before torch loads; errors name the field."""
    from sflsim.network.trace import read_trace

    for name, path in scenario.network.traces.items():
        for direction in ("uplink", "downlink"):
            try:
                read_trace(path, direction)
            except ConfigError as exc:
                raise ConfigError(f"network.traces.{name}: {exc}") from None


def _check_participation(scenario: Scenario) -> None:
    """``training.clients_per_round`` within the fleet; ``conditions.availability`` a
    readable trace naming the scenario's groups and clients."""
    k, n = scenario.training.clients_per_round, scenario.num_clients
    if isinstance(k, int) and k > n:
        raise ConfigError(f"training.clients_per_round: {k} but the scenario has "
                          f"{plural(n, 'client')}; valid: a count from 1 to {n} or a fraction "
                          f"in (0, 1]")
    if scenario.conditions.availability is not None:
        from sflsim.availability import client_groups, read_availability

        read_availability(scenario.conditions.availability, client_groups(scenario))


def _check_split(scenario: Scenario, num_stages: int) -> None:
    """Candidate cut layers (and FedSGA's reference split) must be stage boundaries."""
    alg = scenario.algorithm
    split = getattr(alg, "split", None)
    field, candidates = "algorithm.split.candidates", getattr(split, "candidates", None)
    if hasattr(alg, "reference_split"):
        field, candidates = "algorithm.candidates", alg.candidates
    valid = f"valid cut layers are 1 to {num_stages - 1} (stage boundaries)"
    if candidates is not None:
        bad = [k for k in candidates if not 1 <= k < num_stages]
        if bad:
            raise ConfigError(f"{field}: {bad} are not cut layers of {scenario.model.name}; {valid}")
    ref = getattr(alg, "reference_split", None)
    if ref is not None:
        cands = sorted(candidates or range(1, num_stages))
        if ref not in cands or ref == cands[0]:
            raise ConfigError(
                f"algorithm.reference_split: {ref} must be one of the candidate cut layers "
                f"{cands} and deeper than the shallowest ({cands[0]})"
            )


def _check_split_schedule(scenario: Scenario, num_stages: int) -> None:
    """FedSGA's ``split_schedule`` must cover the run's rounds and clients with candidate
    cuts (:func:`~sflsim.metrics.schedule.read_split_schedule`)."""
    alg = scenario.algorithm
    path = getattr(alg, "split_schedule", None)
    if path is None:
        return
    from sflsim.metrics.schedule import read_split_schedule

    read_split_schedule(path, rounds=scenario.training.rounds, num_clients=scenario.num_clients,
                        candidates=alg.candidates or range(1, num_stages))


#: a field that one of two scenario dumps lacks (another algorithm's field)
_ABSENT = object()


def scenario_differences(old: object, new: object, path: str = "") -> list[str]:
    """``"a.b: 1 before, null now"`` for every leaf of two scenario dumps that differs,
    values as YAML writes them (``null``, ``true``, text unquoted), a field that one
    side lacks as ``not set``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += scenario_differences(old.get(key, _ABSENT), new.get(key, _ABSENT),
                                        f"{path}.{key}" if path else str(key))
        return out
    return [] if old == new else [f"{path}: {_yaml(old)} before, {_yaml(new)} now"]


def _yaml(value: object) -> str:
    """``value`` as YAML writes it in flow style, on one line (``not set`` for a field
    that is not there)."""
    if value is _ABSENT:
        return "not set"
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()
