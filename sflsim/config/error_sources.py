"""Name the source of a user error or warning about a scenario: the ``--set`` override
that set the field it names, else the scenario file (and the overrides it mentions).
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from sflsim.errors import ConfigError, DatasetError


def warning_source(message: str, path: str | Path, overrides: Sequence[str]) -> str:
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
    # a check of a whole mapping that names fields inside it ("model: model.hidden_dim (100)
    # must be divisible by model.heads (3)"): the last override of one of those fields
    inner = [f for f in _FIELD_PATHS.findall(rest) if f.startswith(lead + ".")]
    for assignment in reversed(overrides):
        path = _override_path(assignment)
        if any(field == path or field.startswith(path + ".") for field in inner) \
                and path != lead:
            return assignment
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
