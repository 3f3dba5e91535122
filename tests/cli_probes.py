"""CLI commands run in a fresh interpreter, each followed by whether torch is imported.

Tests that a command does not import torch cannot run it in the test process (torch is
there already). A fresh interpreter per command costs a second or more of imports on
2 cores, so :func:`probe_commands` runs the commands one after another in one
interpreter: torch, once imported, stays in ``sys.modules``, so a command after which
it is absent imported it neither itself nor through an earlier command. After a
command that imports torch (or ends the interpreter) the commands after it run in a
new interpreter, so each command's outcome is what it would be in an interpreter of
its own. Each command runs in its own folder; what it writes to ``sys.stdout`` and
``sys.stderr`` is kept apart per command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the driver; {call} is a function body that runs the CLI on ``args`` and returns the
#: exit status
DRIVER = """
import contextlib, io, json, os, sys, traceback


def call(args):
{call}


for name, args, cwd in json.loads(sys.argv[1]):
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = call(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # as an interpreter of its own would end: status 1
            traceback.print_exc()
            code = 1
    torch = "torch" in sys.modules or "torchvision" in sys.modules
    print("PROBE " + json.dumps({{"name": name, "code": code, "torch": torch,
                                  "stdout": out.getvalue(), "stderr": err.getvalue()}}),
          flush=True)
    if torch:
        break
"""


def probe_commands(call: str, cases: list[tuple[str, list[str], Path]],
                   timeout: float = 300) -> dict[str, dict]:
    """Run each ``(name, args, cwd)`` of ``cases`` with ``call`` (a function body with
    ``args`` in scope that returns the exit status, or raises SystemExit), in as few
    fresh interpreters as give each command the outcome it has in one of its own.

    Returns:
        {name: {"code", "torch", "stdout", "stderr"}}: the exit status, whether torch
        (or torchvision) was imported once the command ended, and what it wrote (a command that ended
        its interpreter: code is the interpreter's, stdout and stderr what it wrote).
    """
    code = DRIVER.format(call=textwrap.indent(textwrap.dedent(call).strip("\n"), "    "))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pending = [(name, [str(a) for a in args], str(cwd)) for name, args, cwd in cases]
    results: dict[str, dict] = {}
    while pending:
        done = subprocess.run([sys.executable, "-c", code, json.dumps(pending)], cwd=ROOT,
                              env=env, capture_output=True, text=True,
                              timeout=timeout * len(pending))
        got = [json.loads(line[len("PROBE "):]) for line in done.stdout.splitlines()
               if line.startswith("PROBE ")]
        for result in got:
            results[result.pop("name")] = result
        if len(got) < len(pending) and not (got and got[-1]["torch"]):
            # the interpreter ended in this command
            results[pending[len(got)][0]] = {"code": done.returncode, "torch": None,
                                             "stdout": done.stdout, "stderr": done.stderr}
            got.append(None)
        pending = pending[len(got):]
    return results
