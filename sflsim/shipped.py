"""Files that ship with sflsim: the hardware profile library and the example scenarios.

The repository holds one copy of each, at its top: ``device_profiles/`` and
``scenarios/`` (with ``scenarios/sweeps/``). A wheel carries them inside the package
as ``sflsim/device_profiles/`` and ``sflsim/scenarios/``: ``pyproject.toml`` maps the
two folders into the package when the wheel is built (``[tool.setuptools.package-dir]``).
A checkout, an editable install and an installed wheel therefore all find them, and
a shipped scenario can be named instead of given as a path (``sflsim run quickstart``).
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
    """Names of the shipped scenarios (or sweeps), sorted."""
    return sorted(p.stem for p in scenarios_dir(sweeps).glob("*.yaml"))


def scenario_path(arg: str | Path, sweeps: bool = False) -> Path:
    """The file a command-line scenario argument means.

    An existing path is taken as it is. A bare name (no folder, no suffix, or a
    ``.yaml`` suffix) that is not a file here names a shipped scenario
    (``quickstart`` -> ``<shipped>/scenarios/quickstart.yaml``); with ``sweeps`` a
    shipped sweep. Any other missing path is returned unchanged, for the loader to
    report.

    Raises:
        ConfigError: a bare name with no suffix that is neither a file here nor a
            shipped scenario (the message lists the shipped ones).
    """
    path = Path(arg)
    if path.exists() or len(path.parts) != 1 or path.suffix not in ("", *SUFFIXES):
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
    raise ConfigError(
        f"{what} {str(arg)!r} is neither a file (relative to {Path.cwd()}) nor a shipped "
        f"{what}.{hint} Shipped {what}s: {', '.join(names) or 'none'} (in {scenarios_dir(sweeps)})"
    )
