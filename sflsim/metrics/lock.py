"""One writer per results folder: the folder's lock file (:func:`hold_folder`).

A run, sweep or export holds its results folder through an OS file lock on
:data:`LOCK_FILE`, which names the holder; a second writer is refused with the holder's
pid, host and command.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

from sflsim.errors import SflsimError
from sflsim.metrics.output import check_output_folder

#: the file in a results folder (a run's, a sweep's) that its holder locks
#: (:func:`hold_folder`); it names the holder while held and is removed when let go
LOCK_FILE = ".sflsim.lock"
#: tries to lock a lock file that its last holder removes meanwhile (:func:`hold_folder`)
LOCK_ATTEMPTS = 20


@contextlib.contextmanager
def hold_folder(folder: str | Path, option: str = "-o") -> Iterator[Path]:
    """Hold ``folder`` for the block: one run, sweep or export writes into a results
    folder at a time.

    The hold is an OS file lock (``flock`` through the ``filelock`` library) on
    :data:`LOCK_FILE` in ``folder``, which also names the holder (pid, host, command,
    since when). The operating system lets go of it when the holding process ends,
    however it ends (SIGKILL included): a lock file left behind by a killed process holds
    nothing, and the next run takes the folder. On a file system that cannot lock files
    (some network mounts) the folder is not held. The folder is made if missing (and
    removed again, with the folders made on its way, if nothing was written in it).
    Holds do not nest: a second hold of the same folder, in this process or another, is
    refused.

    Args:
        folder: the results folder.
        option: how the user named ``folder`` (``-o``, ``--to``; ``""``: the path alone),
            for the messages.

    Yields:
        ``folder`` as a Path.

    Raises:
        SflsimError: another process holds ``folder`` (naming it, :func:`holder_text`),
            or ``folder`` cannot be made or written (:func:`check_output_folder`).
    """
    folder = Path(folder)
    check_output_folder(folder, option=option or "the folder")
    made = []  # the folders this hold makes, outermost first
    missing = folder
    while not missing.exists() and missing != missing.parent:
        made.insert(0, missing)
        missing = missing.parent
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = None
    try:
        fd = _lock(path, option)
        if fd is not None:
            record = {"pid": os.getpid(), "host": platform.node(), "command": _command_line(),
                      "since": time.strftime("%Y-%m-%d %H:%M:%S %z")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        yield folder
    finally:
        if fd is not None:
            _let_go(path, fd)
        for made_folder in reversed(made):  # nothing was written: leave no empty folder
            try:
                made_folder.rmdir()
            except OSError:
                break


def check_not_held(folder: str | Path, option: str = "-o") -> None:
    """Refuse ``folder`` now if another process holds it (:func:`hold_folder`), without
    holding it: so that a command says so before it announces its work. A lock file
    that nobody holds (its holder was killed) is no refusal.

    Raises:
        SflsimError: naming the holder (:func:`holder_text`).
    """
    held, holder = _probe(Path(folder))
    if held:
        raise SflsimError(in_use(Path(folder), holder, option))


def is_held(folder: str | Path) -> bool | None:
    """Whether a process (this one included) holds ``folder`` now (:func:`hold_folder`):
    True while a run, sweep or export writes it; False when none does (no lock file, or
    one its killed holder left); None where that cannot be told (a file system that
    cannot lock files, a lock file this user cannot open). Writes nothing."""
    try:
        held, _ = _probe(Path(folder), missing=False, unreadable=None)
    except OSError:
        return None
    return held


def _probe(folder: Path, missing: bool | None = False,
           unreadable: bool | None = False) -> tuple[bool | None, dict | None]:
    """Whether a process holds ``folder``'s lock file (locked and let go at once if not),
    and its holder's record; ``missing`` when there is no lock file, ``unreadable`` when
    it cannot be opened or locked (a file system without locks: no holds there)."""
    from filelock import lock_descriptor, unlock_descriptor

    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return missing, None
    except OSError:  # one this user cannot lock
        return unreadable, None
    try:
        try:
            locked = lock_descriptor(fd, blocking=False)
        except OSError as exc:  # a file system that cannot lock files: no holds there
            if exc.errno not in _NO_LOCKS:
                raise
            return unreadable, None
        if not locked:
            return True, _holder(fd)
        unlock_descriptor(fd)
        return False, None
    finally:
        os.close(fd)


def in_use(folder: Path, holder: dict | None, option: str = "-o") -> str:
    """The refusal of ``folder``, held by ``holder`` (its lock file's record)."""
    named = f"{option} {folder}" if option else str(folder)
    other = f", or choose another {option}" if option else ""
    return (f"{named} is in use: {holder_text(holder)}; sflsim writes a results folder from "
            f"one run, sweep or export at a time: wait until that one ends{other}")


def holder_text(holder: dict | None) -> str:
    """``pid 4242 on host node1, running `sflsim run s.yaml -o out`, since 2025-06-01
    10:00:03 +0200``; for a holder that has not written its record yet, says so."""
    if not isinstance(holder, dict) or "pid" not in holder:
        return "another sflsim process holds it (it has not written its pid yet)"
    return (f"pid {holder.get('pid')} on host {holder.get('host') or 'unknown'}, running "
            f"`{holder.get('command') or 'sflsim'}`, since {holder.get('since') or 'unknown'}")


#: errors of a file system that cannot lock files (some network mounts): no hold there
_NO_LOCKS = {getattr(errno, name) for name in ("ENOSYS", "ENOLCK", "EOPNOTSUPP", "ENOTSUP")
             if hasattr(errno, name)}


def _lock(path: Path, option: str) -> int | None:
    """An open descriptor of ``path`` with its lock held (see :func:`hold_folder`); None
    on a file system that cannot lock files (the folder is then not held).

    Raises:
        SflsimError: another process holds the lock.
    """
    from filelock import lock_descriptor, unlock_descriptor

    for _ in range(LOCK_ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        try:
            try:
                locked = lock_descriptor(fd, blocking=False)
            except OSError as exc:
                if exc.errno not in _NO_LOCKS:
                    raise
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()
                return None
            if not locked:
                raise SflsimError(in_use(path.parent, _holder(fd), option))
            try:  # the last holder removes the file as it lets go: then lock the new one
                if os.path.samestat(os.stat(path), os.fstat(fd)):
                    return fd
            except FileNotFoundError:
                pass
            unlock_descriptor(fd)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise SflsimError(f"cannot lock {path}: other processes keep replacing it; try again")


def _let_go(path: Path, fd: int) -> None:
    """Remove the lock file (still ours) and let go of its lock."""
    from filelock import unlock_descriptor

    try:
        with contextlib.suppress(OSError):
            if os.path.samestat(os.stat(path), os.fstat(fd)):
                path.unlink()
        with contextlib.suppress(OSError):
            unlock_descriptor(fd)
    finally:
        os.close(fd)


def _holder(fd: int) -> dict | None:
    """The record a holder wrote in its lock file (None while it has not)."""
    try:
        record = json.loads(os.pread(fd, 65536, 0).decode())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _command_line() -> str:
    """This process's command line, as a user would type it (``sflsim run s.yaml``)."""
    import shlex
    import sys

    argv = list(sys.argv) or [""]
    head = Path(argv[0]).name
    if head == "__main__.py" and Path(argv[0]).parent.name == "sflsim":  # python -m sflsim
        head = "sflsim"
    elif head in ("-c", "-m", "-", "") or head.endswith(".py"):
        head = " ".join(filter(None, (Path(sys.executable).name, argv[0])))
    return " ".join([head, *(shlex.quote(a) for a in argv[1:])])
