"""torch and torchvision as installed: a failure to import them told in one line, and the
versions and build ``sflsim --version`` prints.

sflsim imports torch only when a command needs it (a run, a sweep, ``profile-host``), so
a broken install shows first there, as an exception deep inside torch's or torchvision's
own import. :func:`install_problem` turns such an exception into one line saying what is
wrong and how to fix it; ``sflsim`` prints it instead of the traceback
(:class:`sflsim.cli.main.SflsimGroup`). The cases:

- torch or torchvision missing (``ModuleNotFoundError``);
- torchvision built for another torch than the one installed: its C++ operators do not
  register (``RuntimeError: operator torchvision::nms does not exist``, the classic
  symptom), or its import fails while torch's version is outside what torchvision's
  metadata asks for;
- any other error raised while torch's or torchvision's modules load (a shared library
  that is missing or built for another CUDA, ``undefined symbol``).

Versions come from the installed packages' metadata (:mod:`importlib.metadata`), which
can be read when the packages themselves cannot be imported.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import traceback
import warnings

#: the packages whose import failures are told in one line
PACKAGES = ("torch", "torchvision")
#: how to reinstall the two together
REINSTALL = "`pip install --force-reinstall torch torchvision` from one index"
#: the message of torchvision's operators missing from the torch loaded
_MISSING_OPERATOR = re.compile(r"operator torchvision::\w+ does not exist")


def installed_version(package: str) -> str | None:
    """``package``'s version from its metadata (``2.5.1+cu121``), None if not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_requirement() -> str | None:
    """The torch versions the installed torchvision asks for (``==2.5.1``, ``>=2.14.0``),
    from its metadata; None when it is not installed or names no version."""
    try:
        requires = importlib.metadata.requires("torchvision") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requires:
        found = re.fullmatch(r"torch\s*\(?\s*([<>=!~][^;()]*?)\s*\)?\s*", line.split(";")[0])
        if found:
            return found.group(1).replace(" ", "")
    return None


def _meets(version: str, requirement: str) -> bool | None:
    """Whether ``version`` (its local part, ``+cu121``, left out) meets ``requirement``;
    None when that cannot be told (``packaging`` missing, an unusual version)."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        return Version(version.split("+")[0]) in SpecifierSet(requirement)
    except Exception:  # noqa: BLE001  (no packaging, or a version it cannot read)
        return None


def mismatch_message() -> str:
    """One line: torchvision was built for another torch than the one installed, and how
    to fix it; names the torch torchvision asks for where its metadata says and torch's
    version does not meet it."""
    vision, torch = installed_version("torchvision") or "?", installed_version("torch") or "?"
    wanted = torch_requirement()
    needs = (f" (it asks for torch {wanted})"
             if wanted is not None and _meets(torch, wanted) is False else "")
    return (f"torchvision {vision} was built for another torch than the torch {torch} "
            f"installed here{needs}: reinstall them together, {REINSTALL}")


def _loading_package(exc: BaseException) -> str | None:
    """The package of :data:`PACKAGES` whose modules were loading (a module's top-level
    code on the stack) when ``exc`` was raised, the innermost; None if neither was."""
    found = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        package = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if package in PACKAGES and frame.f_code.co_name == "<module>":
            found = package
    return found


def install_problem(exc: BaseException) -> str | None:
    """One line saying what is wrong with the torch or torchvision installed and how to
    fix it, when ``exc`` was raised importing them (see the module docstring); None for
    any other error."""
    if isinstance(exc, ModuleNotFoundError) and exc.name is not None:
        package = exc.name.partition(".")[0]
        if package in PACKAGES and exc.name == package:
            return (f"{package} is not installed for this Python ({sys.executable}): install "
                    f"torch and torchvision together, `pip install torch torchvision` (or "
                    f"`pip install -e .` in sflsim's checkout)")
    if _MISSING_OPERATOR.search(str(exc)):
        return mismatch_message()
    package = _loading_package(exc)
    if package is None:
        return None
    wanted, torch = torch_requirement(), installed_version("torch")
    if package == "torchvision" and wanted and torch and _meets(torch, wanted) is False:
        return mismatch_message()
    said = " ".join(str(exc).split("\n", 1)[0].split()) or "no message"
    name = " ".join(filter(None, (package, installed_version(package))))
    return (f"{name} cannot be imported ({type(exc).__name__}: {said}): reinstall torch "
            f"and torchvision together, {REINSTALL}")


def version_lines() -> list[str]:
    """``sflsim --version``'s lines after sflsim's own: torch's version, build (the CUDA or
    ROCm version it was built for, or cpu), CPU capability (the widest vector instructions
    its kernels use here) and whether CUDA works here, then torchvision's version.

    Raises:
        Exception: importing torch or torchvision failed (:func:`install_problem` says
            what is wrong).
    """
    import torch
    import torchvision

    build = (f"CUDA {torch.version.cuda}" if torch.version.cuda else
             f"ROCm {torch.version.hip}" if getattr(torch.version, "hip", None) else "cpu")
    with warnings.catch_warnings(record=True) as said:  # a driver too old, say
        warnings.simplefilter("always")
        works = torch.cuda.is_available()
    why = ""
    if not works and said:
        why = " (" + " ".join(str(said[0].message).split("\n", 1)[0].split()) + ")"
    return [f"torch {torch.__version__} (build: {build}; CPU capability: "
            f"{torch.backends.cpu.get_cpu_capability()}; CUDA available: "
            f"{'yes' if works else 'no'}{why})",
            f"torchvision {torchvision.__version__}"]
