"""Files that ship with sflsim: the hardware profile library and the example scenarios.

The repository holds one copy of each, at its top: ``device_profiles/`` and
``scenarios/`` (with ``scenarios/sweeps/``, and the papers' presets in
``scenarios/papers/<paper>/`` with their sweeps in ``scenarios/papers/<paper>/sweeps/``).
A wheel carries them inside the package as ``sflsim/device_profiles/`` and
``sflsim/scenarios/``: ``pyproject.toml`` maps the two folders into the package when the
wheel is built (``[tool.setuptools.package-dir]``).
A checkout, an editable install and an installed wheel therefore all find them, and
a shipped scenario can be named instead of given as a path (``sflsim run quickstart``,
``sflsim validate papers/fedsga/cifar100_resnet18``).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from sflsim.errors import ConfigError

#: the ``sflsim`` package folder
PACKAGE = Path(__file__).resolve().parent
SUFFIXES = (".yaml", ".yml")


def shipped_dir(name: str) -> Path:
    """The folder ``name`` (``device_profiles`` or ``scenarios``) as shipped: inside an
    installed wheel's package if it is there, else at the top of the checkout."""
    installed = PACKAGE / name
    return installed if installed.is_dir() else PACKAGE.parent / name


def profiles_dir() -> Path:
    """The shipped profile library (``devices/``, ``links/``, ``servers/``)."""
    return shipped_dir("device_profiles")


def scenarios_dir(sweeps: bool = False) -> Path:
    """The shipped scenarios, or with ``sweeps`` the shipped sweeps."""
    folder = shipped_dir("scenarios")
    return folder / "sweeps" if sweeps else folder


def shipped_names(sweeps: bool = False) -> list[str]:
    """Names of the shipped scenarios (or sweeps) at the top of their folder, sorted."""
    return sorted(p.stem for p in scenarios_dir(sweeps).glob("*.yaml"))


def preset_names(sweeps: bool = False) -> list[str]:
    """Names of the papers' presets (or their sweeps), as the command line takes them:
    ``papers/fedsga/cifar100_resnet18``, ``papers/fedsga/sweeps/table2_cifar100_resnet18``."""
    top = scenarios_dir()
    return sorted(p.relative_to(top).with_suffix("").as_posix()
                  for p in (top / "papers").rglob("*.yaml") if (p.parent.name == "sweeps") == sweeps)


def _hint_shipped(arg: str | Path, rel: Path, sweeps: bool) -> None:
    """Raise ConfigError naming the shipped file ``rel`` (under ``scenarios/``) that the
    missing ``arg`` (``scenarios/<rel>``) would be in a checkout; nothing if none is."""
    if not (scenarios_dir() / rel.with_suffix(".yaml")).is_file():
        return
    name = rel.with_suffix("").as_posix()
    is_sweep = rel.parent.name == "sweeps"  # scenarios/sweeps/, scenarios/papers/*/sweeps/
    if is_sweep and name.startswith("sweeps/") and name.count("/") == 1:
        name = name.removeprefix("sweeps/")
    what = "sweep" if sweeps else "scenario"
    shipped = (f"give its name instead: {name}" if is_sweep == sweeps else
               f"it is a {'sweep' if is_sweep else 'scenario'}: sflsim "
               f"{'sweep' if is_sweep else 'run'} {name}")
    raise ConfigError(f"{what} file {str(arg)!r} does not exist (relative to {Path.cwd()}); "
                      f"it is shipped with sflsim under the name {name}; {shipped}")


def scenario_path(arg: str | Path, sweeps: bool = False) -> Path:
    """The file a command-line scenario argument means.

    An existing path is taken as it is. A bare name (no folder, no suffix, or a
    ``.yaml`` suffix) that is not a file here names a shipped scenario
    (``quickstart`` -> ``<shipped>/scenarios/quickstart.yaml``); with ``sweeps`` a
    shipped sweep (``<shipped>/scenarios/sweeps/``). A relative name with folders that
    is not a file here names a file under the shipped ``scenarios/`` folder, scenario or
    sweep alike (``papers/fedsga/cifar100_resnet18``,
    ``papers/fedsga/sweeps/table2_cifar100_resnet18``). Any other missing path is
    returned unchanged, for the loader to report.

    Raises:
        ConfigError: ``scenarios/<file>`` that is not a file here but is shipped (the
            message gives its name: ``scenarios/quickstart.yaml`` typed outside a
            checkout); a bare name with no suffix that is neither a file here nor a
            shipped scenario (the message lists the shipped ones, and says when the
            name is a shipped sweep, or with ``sweeps`` a shipped scenario).
    """
    path = Path(arg)
    if path.exists() or path.suffix not in ("", *SUFFIXES):
        return path
    if len(path.parts) != 1:  # papers/fedsga/cifar100_resnet18: under the shipped scenarios/
        if path.is_absolute() or ".." in path.parts:
            return path
        nested = scenarios_dir() / path.with_suffix(".yaml")
        if nested.is_file():
            return nested
        if path.parts[0] == "scenarios":  # the checkout's path, typed in another folder
            _hint_shipped(arg, Path(*path.parts[1:]), sweeps)
        return path
    candidate = scenarios_dir(sweeps) / f"{path.stem}.yaml"
    if candidate.is_file():
        return candidate
    if path.suffix:  # "missing.yaml": a file the user meant; the loader says where it looked
        return path
    what = "sweep" if sweeps else "scenario"
    names = shipped_names(sweeps)
    close = difflib.get_close_matches(path.name, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    if path.stem in shipped_names(not sweeps):  # the other kind: 'sflsim run device_mix'
        other, command = ("scenario", "run") if sweeps else ("sweep", "sweep")
        hint = f" It is a shipped {other}: sflsim {command} {path.stem}."
    presets = preset_names(sweeps)
    example = f"; the papers' presets by folder, e.g. {presets[0]}" if presets else ""
    raise ConfigError(
        f"{what} {str(arg)!r} is neither a file (relative to {Path.cwd()}) nor a shipped "
        f"{what}.{hint} Shipped {what}s: {', '.join(names) or 'none'} (in {scenarios_dir(sweeps)})"
        f"{example}"
    )


def trace_path(path: str | Path) -> Path:
    """Where a trace file (availability, bandwidth) named ``path`` is: as given when
    absolute; a relative path in the working directory (made absolute), else among the
    shipped scenarios (``traces/availability_example.csv`` ->
    ``<shipped>/scenarios/traces/availability_example.csv``), else as given (which then
    does not exist)."""
    p = Path(path)
    if p.is_absolute():
        return p
    if p.exists():
        return p.resolve()
    shipped = scenarios_dir() / p
    return shipped if shipped.exists() else p


def input_file(field: str, path: str | Path, expected: str) -> Path:
    """The file an input field names (:func:`trace_path`), refused when it is missing or
    a folder.

    Args:
        field: the scenario field, for the message (``fleet``, ``conditions.availability``).
        path: the path as given.
        expected: what to give instead (``a CSV with columns a, b``).

    Raises:
        ConfigError: naming the field, the path, where it was looked for and ``expected``.
    """
    p = trace_path(path)
    if not p.is_file():
        what = "is a folder, not a file" if p.is_dir() else "does not exist"
        raise ConfigError(f"{field}: {str(path)!r} {what}{looked_for(p)}; give {expected}")
    return p


def looked_for(path: str | Path) -> str:
    """`` (looked for in CWD and among the shipped scenarios, DIR)`` for a relative
    ``path`` that :func:`trace_path` did not find; ``""`` for an absolute one."""
    if Path(path).is_absolute():
        return ""
    return f" (looked for in {Path.cwd()} and among the shipped scenarios, {scenarios_dir()})"
