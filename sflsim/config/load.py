"""Load a scenario: read its file, apply ``--set a.b=value`` overrides, validate, check names.

Every mistake becomes one :class:`~sflsim.errors.ConfigError` naming the field,
the value and what is valid; YAML is read with ``yaml.safe_load`` only
(:mod:`sflsim.inputs.yaml_files`). The steps live in modules of their own, whose
public names are importable from here too: overrides (:mod:`sflsim.config.overrides`),
the source of an error (:mod:`sflsim.config.error_sources`), warnings
(:mod:`sflsim.config.input_warnings`), capability and name checks
(:mod:`sflsim.config.capability_checks`, :mod:`sflsim.config.name_checks`) and
scenario differences (:mod:`sflsim.config.differences`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sflsim.config.capability_checks import check_timing_only
from sflsim.config.differences import scenario_differences
from sflsim.config.error_sources import scenario_errors, warning_source
from sflsim.config.input_warnings import bare_number_warnings, input_warnings, warn
from sflsim.config.name_checks import check_names, profile_warnings, with_name_hint
from sflsim.config.overrides import apply_override, override_value, set_option_problem
from sflsim.config.scenario import Scenario
from sflsim.errors import ConfigError
from sflsim.inputs.messages import format_validation_error
from sflsim.inputs.yaml_files import read_yaml_mapping

__all__ = [ "INPUT_FIELDS", "anchor_inputs", "apply_override",
    "check_names", "check_timing_only", "input_warnings", "load_scenario",
    "override_value", "participation_warning", "profile_warnings",
    "read_yaml_mapping", "scenario_differences", "scenario_errors",
    "set_option_problem", "validate_scenario", "with_name_hint",
]


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

    ``overrides`` is a list of ``"FIELD=VALUE"`` strings (one string is taken as one).

    Raises:
        ConfigError: see :func:`read_yaml_mapping`, :func:`apply_override`,
            :func:`validate_scenario` and :func:`sflsim.shipped.scenario_path`; or
            ``path`` is a sweep file (it has ``base`` or ``axes``), named as such.
        TypeError: ``path`` is not a path or name, or ``overrides`` not strings.
    """
    from sflsim.shipped import scenario_path

    if not isinstance(path, (str, Path)):
        raise TypeError(f"load_scenario: path is a scenario file or a shipped scenario's "
                        f"name (str or pathlib.Path), got {type(path).__name__}")
    overrides = [overrides] if isinstance(overrides, str) else list(overrides or ())
    wrong = [o for o in overrides if not isinstance(o, str)]
    if wrong:
        raise TypeError(f"load_scenario: overrides are 'FIELD=VALUE' strings, e.g. "
                        f"['training.rounds=3'], got {wrong[0]!r}")
    path = scenario_path(path)
    data = read_yaml_mapping(path)  # its errors name the file
    sweep_keys = [k for k in ("base", "axes") if k in data]
    if sweep_keys:
        raise ConfigError(f"{path}: this is a sweep file (it has {' and '.join(map(repr, sweep_keys))}), "
                          f"not a scenario; run it with 'sflsim sweep {path}'")
    anchor_inputs(data, path.parent)
    with scenario_errors(path, overrides), input_warnings(
            lambda message: warn(warning_source(message, path, overrides))):
        for assignment in overrides:
            apply_override(data, assignment)
        try:
            return validate_scenario(data, where=str(path))
        except ConfigError as exc:  # "path: problem": the overrides are named below
            raise ConfigError(str(exc).removeprefix(f"{path}: ")) from None


#: the scenario fields that name input files: (path of keys, True for a mapping of files)
INPUT_FIELDS = ((("fleet",), False), (("conditions", "availability"), False),
                (("network", "traces"), True), (("algorithm", "split_schedule"), False))


def anchor_inputs(data: dict[str, Any], folder: Path) -> None:
    """Resolve, in place, the input files a scenario mapping read from ``folder`` names
    (``fleet``, ``conditions.availability``, ``network.traces.<name>``,
    ``algorithm.split_schedule``), as a sweep's ``base:`` is resolved:

    - a relative path that exists relative to ``folder`` becomes that absolute path
      (otherwise the working directory and the shipped scenarios are searched later,
      :func:`sflsim.shipped.trace_path`);
    - a path that exists nowhere, where ``folder`` is a run folder that kept a copy of the
      input (``inputs/<field>/<file>``, :func:`sflsim.provenance.keep_inputs`), becomes
      that copy: a results folder moved to another machine runs again as it ran.

    Values that are not strings (a mistake the schema reports) are left alone.
    """
    from sflsim.provenance import kept_input

    def anchored(field: str, value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        given = Path(value)
        if not given.is_absolute() and (folder / given).exists():
            return str((folder / given).resolve())
        if given.exists():
            return value
        copy = kept_input(folder, field, value)
        return str(copy.resolve()) if copy is not None else value

    for keys, is_mapping in INPUT_FIELDS:
        parent = data
        for key in keys[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or keys[-1] not in parent:
            continue
        field = ".".join(keys)
        value = parent[keys[-1]]
        if is_mapping and isinstance(value, dict):
            parent[keys[-1]] = {name: anchored(f"{field}.{name}", v) for name, v in value.items()}
        elif not is_mapping:
            parent[keys[-1]] = anchored(field, value)
