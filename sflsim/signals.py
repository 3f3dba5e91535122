"""Ctrl-C and SIGTERM stop a run within seconds, even from inside a long torch call.

Python runs a signal handler only between bytecodes of the main thread. A run whose
main thread is inside one long C call (a torch kernel that takes minutes, or one
that never returns, like the oneDNN hang in :mod:`sflsim.models.layout`) therefore
ignores SIGTERM until that call returns, and batch schedulers, ``timeout`` and CI
fall back to SIGKILL.

:func:`stop_on_signals` makes SIGINT and SIGTERM raise :class:`KeyboardInterrupt`
in the main thread (the clean path: the runner writes ``summary.json`` with
``"status": "interrupted"`` and the CLI prints how to resume), and starts a watcher
thread that the C-level signal handler wakes at once through
:func:`signal.set_wakeup_fd`. Torch releases the GIL inside its kernels, so the
watcher runs while the main thread is stuck. If the main thread has not taken the
signal within ``grace_s``, the watcher calls ``on_stuck(signum)`` (which marks the
results as interrupted) and ends the process with :func:`os._exit`. Files are never
cut off half-written: the round's results are written inside :func:`uninterrupted`,
which holds a signal back until the block ends and which the watcher waits for.

This module imports no torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

__all__ = ["EXIT_INTERRUPTED", "GRACE_S", "stop_on_signals", "uninterrupted"]

#: Seconds the main thread has to take a signal before the process is ended anyway.
GRACE_S = 5.0
#: Exit status of a run stopped by a signal (as for Ctrl-C in a shell).
EXIT_INTERRUPTED = 130

#: Seconds a forced stop waits for a block of :func:`uninterrupted` to end.
WRITE_WAIT_S = 60.0

_writing = threading.Lock()  # held while a round's results are written
_state: dict = {"taken": threading.Event(), "pending": None, "owner": None, "depth": 0}


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """A block (writing results) that a signal does not cut short: under
    :func:`stop_on_signals`, SIGINT/SIGTERM arriving inside it raise
    :class:`KeyboardInterrupt` when it ends, and a forced stop waits for it.
    Blocks may nest."""
    me = threading.get_ident()
    if _state["owner"] != me:
        _writing.acquire()
        _state["owner"] = me
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0:
            _state["owner"] = None
            _writing.release()
    if _state["depth"] == 0 and _state["pending"] is not None:
        _state["pending"] = None
        raise KeyboardInterrupt


def _take(signum: int, frame: object) -> None:
    """The Python-level handler (main thread): interrupt, or hold back inside
    :func:`uninterrupted`."""
    _state["taken"].set()
    if _state["owner"] == threading.get_ident():
        _state["pending"] = signum
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_on_signals(on_stuck: Callable[[int], None], *, grace_s: float = GRACE_S,
                    exit_code: int = EXIT_INTERRUPTED) -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`KeyboardInterrupt` in the main thread during the
    block; a main thread stuck in a C call is not waited for longer than ``grace_s``.

    Args:
        on_stuck: called in the watcher thread with the signal number when the main
            thread did not take the signal within ``grace_s`` seconds (after any
            :func:`uninterrupted` block has ended); the process then ends with
            ``os._exit(exit_code)``. It must not wait for the main thread.
        grace_s: seconds given to the main thread.
        exit_code: exit status of a forced stop.

    Raises:
        ValueError: not called from the main thread (signal handlers live there).
    """
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("stop_on_signals must be used in the main thread")
    receive, send = socket.socketpair()
    send.setblocking(False)
    _state["taken"].clear()
    _state["pending"] = None
    old = {s: signal.signal(s, _take) for s in (signal.SIGINT, signal.SIGTERM)}
    old_fd = signal.set_wakeup_fd(send.fileno(), warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(receive, on_stuck, grace_s, exit_code),
                               name="sflsim-signal-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, handler in old.items():
            signal.signal(s, handler)
        send.setblocking(True)
        send.send(b"\0")  # no signal is 0: tells the watcher to end
        watcher.join()
        receive.close()
        send.close()


def _watch(receive: socket.socket, on_stuck: Callable[[int], None], grace_s: float,
           exit_code: int) -> None:
    while True:
        data = receive.recv(64)
        signums = [b for b in data if b in (signal.SIGINT, signal.SIGTERM)]
        if not data or 0 in data:
            return
        if not signums or _state["taken"].wait(grace_s):
            continue  # the main thread took it: the clean path runs
        _writing.acquire(timeout=WRITE_WAIT_S)  # a round being written is finished first
        try:
            on_stuck(signums[0])
        finally:
            sys.stderr.flush()
            os._exit(exit_code)
