"""Where a result was made: the CPU (torch's CPU kernels, and so trained results, differ
between CPU families), the commit of sflsim's source, with whether it had changes, and the
input files a run read, copied into its folder and hashed.

The machine facts are read once per process; nothing here fails a run (what cannot be
read is ``None``).
"""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from pathlib import Path

#: the folder of sflsim's own source (``sflsim/``)
SOURCE = Path(__file__).resolve().parent


@cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name``), else what :mod:`platform`
    says (``x86_64`` at worst)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def source_commit() -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout sflsim's source lies in: the full hash of
    ``HEAD`` and whether files under ``sflsim/`` differ from it; ``(None, None)`` for an
    installed wheel, a copy without ``.git`` or a machine without git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(SOURCE), *args], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--", "."))
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (commit, dirty) if commit else (None, None)


@cache
def cpu_flags() -> str | None:
    """The CPU's feature flags as ``/proc/cpuinfo`` lists them (``flags`` on x86,
    ``Features`` on ARM), space-separated; None where it cannot be read. torch picks its
    CPU kernels by these (AVX2, AVX-512, NEON ...)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return None


#: the input files a run read besides its profiles (fleet, traces, availability, split
#: schedule), copied as they were: ``inputs/<field>/<file name>``
INPUTS_FOLDER = "inputs"


def sha256_of(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes; of a folder (a table of Parquet parts), of its
    files' relative names and bytes in name order."""
    import hashlib

    digest = hashlib.sha256()
    if path.is_dir():
        for part in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
            digest.update(str(part.relative_to(path)).encode() + b"\0")
            digest.update(part.read_bytes())
    else:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def input_copy(field: str, path: Path) -> str:
    """Where a run folder keeps its copy of input ``field`` read from ``path``, relative
    to the folder: a profile (``devices.<group>.profile``, ``server.profile``, a link, a
    fleet row's profile) under ``profiles/<kind>/``, any other input under
    ``inputs/<field>/``."""
    if path.suffix == ".yaml" and path.parent.name in ("devices", "links", "servers"):
        return f"profiles/{path.parent.name}/{path.name}"
    return f"{INPUTS_FOLDER}/{field}/{path.name}"


def keep_inputs(out: Path, inputs: dict[str, Path]) -> dict[str, dict]:
    """Copy each input file a run reads (``{field: path}``, from
    :func:`sflsim.run.input_files.scenario_inputs`) into the run folder ``out`` (profiles
    are already under ``profiles/``) and describe each for ``manifest.json``.

    Returns:
        ``{field: {"path": where it was read, "sha256": its hash, "copy": its copy in
        out}}``; an input that does not exist (the run refuses it itself) is left out.
    """
    import shutil

    kept = {}
    for field, path in inputs.items():
        path = Path(path)
        if not path.exists():
            continue
        copy = input_copy(field, path)
        target = out / copy
        if copy.startswith(INPUTS_FOLDER + "/") and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns(".*"))
            else:
                shutil.copyfile(path, target)
        kept[field] = {"path": str(path), "sha256": sha256_of(path), "copy": copy}
    return kept


def kept_input(folder: Path, field: str, value: str) -> Path | None:
    """The copy a run folder ``folder`` keeps of input ``field`` whose scenario value is
    ``value`` (:func:`input_copy`), or None: how a stored scenario finds its inputs when
    the paths it names are gone (the folder moved to another machine)."""
    copy = folder / INPUTS_FOLDER / field / Path(value).name
    return copy if copy.exists() else None
