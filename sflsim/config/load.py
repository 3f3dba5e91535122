"""Read a scenario file, apply ``--set a.b=value`` overrides, validate, check names.

Every mistake becomes one :class:`~sflsim.errors.ConfigError` naming the field,
the value and what is valid; YAML is read with ``yaml.safe_load`` only.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sflsim.config.schema import Scenario
from sflsim.errors import ConfigError, format_validation_error
from sflsim.hardware import profiles


def read_yaml_mapping(path: str | Path, what: str = "scenario") -> dict[str, Any]:
    """Read a YAML file that must hold a mapping.

    Raises:
        ConfigError: the file is missing, unreadable, not text, not YAML or not a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} file {str(path)!r} does not exist (or is not a file)")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} file {str(path)!r} is not UTF-8 text; expected YAML") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {str(path)!r}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} file {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{what} file {str(path)!r} is {kind}; expected a mapping of fields")
    return data


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.path=value`` to ``data`` in place; the value is read as YAML.

    Raises:
        ConfigError: the assignment has no ``=`` or its path runs through a non-mapping.
    """
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected FIELD=VALUE, e.g. training.rounds=3")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(
                f"--set {assignment!r}: {'.'.join(keys[: depth + 1])} is {child!r}, not a mapping"
            )
        node = child
    node[keys[-1]] = value


def validate_scenario(data: dict[str, Any], where: str = "scenario") -> Scenario:
    """Validate a mapping into a :class:`Scenario` and check every name it uses.

    Raises:
        ConfigError: schema violations (with "did you mean" for misspelled keys),
            unknown profiles, or an end layer past the model's last client stage.
    """
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_with_suggestions(format_validation_error(exc, where), exc)) from None
    check_names(scenario)
    return scenario


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, override and validate the scenario at ``path`` (see :func:`validate_scenario`)."""
    data = read_yaml_mapping(path)
    for assignment in overrides:
        apply_override(data, assignment)
    return validate_scenario(data, where=str(path))


def check_names(scenario: Scenario) -> None:
    """Check profile names and end layers against what exists."""
    from sflsim.models.registry import MODELS  # registry of backbones (light import)

    try:
        profiles.server_profile(scenario.server.profile)
    except ConfigError as exc:
        raise ConfigError(f"server.profile: {exc}") from None
    num_stages = _num_stages(scenario.model.name, MODELS)
    for group_name, group in scenario.devices.items():
        for kind, name in (("devices", group.profile), ("links", group.link)):
            field = "profile" if kind == "devices" else "link"
            try:
                profiles.load_profile(kind, name)
            except ConfigError as exc:
                raise ConfigError(f"devices.{group_name}.{field}: {exc}") from None
        if group.end_layer >= num_stages:
            raise ConfigError(
                f"devices.{group_name}.end_layer: {group.end_layer} is past the end of "
                f"{scenario.model.name} ({num_stages} stages); valid end layers are "
                f"1 to {num_stages - 1}"
            )


def _num_stages(model_name: str, registry: dict) -> int:
    import sflsim.models  # noqa: F401  (fills the registry)

    tiny = registry[model_name](in_channels=1, image_size=32, num_classes=2, width=0.0625)
    return tiny.num_stages


def _with_suggestions(message: str, exc: ValidationError) -> str:
    """Add "did you mean" hints for unknown keys that are close to a valid one."""
    hints = []
    for err in exc.errors():
        if err["type"] != "extra_forbidden":
            continue
        *parent, key = err["loc"]
        valid = _valid_keys(Scenario, parent)
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
        if close:
            hints.append(f"{'.'.join(map(str, err['loc']))}: did you mean {close[0]!r}?")
        elif valid:
            hints.append(f"{'.'.join(map(str, err['loc']))}: valid fields: {', '.join(valid)}")
    return message + ("\n  " + "\n  ".join(hints) if hints else "")


def _valid_keys(model: type[BaseModel], path: list) -> list[str]:
    """Field names of the sub-model at ``path`` (best effort, for hints only)."""
    candidates: list[type[BaseModel]] = [model]
    for part in path:
        by_tag = [m for m in candidates if m.model_fields.get("name") is not None
                  and part in typing.get_args(m.model_fields["name"].annotation)]
        if by_tag:  # a discriminated-union member chosen by its ``name`` tag
            candidates = by_tag
            continue
        fields = [m.model_fields[str(part)] for m in candidates if str(part) in m.model_fields]
        if fields:
            candidates = _models_in(fields[0].annotation)
        # else: a dict key (device group name); stay on the value's model
    return list(candidates[0].model_fields) if len(candidates) == 1 else []


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
