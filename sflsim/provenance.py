"""Where a result was made: the CPU (torch's CPU kernels, and so trained results, differ
between CPU families) and the commit of sflsim's source, with whether it had changes.

Read once per process; nothing here fails a run (what cannot be read is ``None``).
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
