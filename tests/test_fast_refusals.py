"""Refusals that need no model are told before torch loads (a second, not the seconds
torch takes): an output folder that holds results or cannot be made, a missing dataset
or bandwidth trace, a resume that cannot be done, an end layer past the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = str(REPO / "scenarios" / "quickstart.yaml")

#: runs the CLI with the arguments in argv[1:], then says whether torch was imported
PROBE = """
import json, sys
from typer.main import get_command
from sflsim.cli.main import app
try:
    code = get_command(app).main(sys.argv[1:], prog_name="sflsim", standalone_mode=False) or 0
except SystemExit as exc:
    code = exc.code
except Exception as exc:  # click's own exceptions carry an exit code
    code = getattr(exc, "exit_code", 1)
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


def probe(args: list[str], cwd: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


@pytest.mark.parametrize("case", ["existing output", "missing cifar", "validate missing cifar",
                                  "resume without checkpoint", "end layer past the model",
                                  "missing fashion_mnist_full", "missing tiny_imagenet",
                                  "sweep without data", "missing bandwidth trace",
                                  "output inside a file"])
def test_refused_before_torch_loads(case: str, tmp_path: Path) -> None:
    (tmp_path / "held").mkdir()
    (tmp_path / "held" / "rounds.csv").write_text("round\n")
    nodata = f"dataset.data_root={tmp_path / 'nodata'}"
    args, expect = {
        "existing output": (["run", QUICKSTART, "-o", "held"], "already holds results"),
        "missing cifar": (["run", QUICKSTART, "-o", "new", "--set", "dataset.name=cifar10",
                           "--set", nodata], "cifar-10-batches-py does not exist"),
        "validate missing cifar": (["validate", QUICKSTART, "--set", "dataset.name=cifar100",
                                    "--set", nodata], "cifar-100-python does not exist"),
        "resume without checkpoint": (["run", QUICKSTART, "-o", "held", "--resume"],
                                      "has no checkpoint"),
        "end layer past the model": (["validate", QUICKSTART, "--set",
                                      "devices.pi4_wifi.end_layer=9"], "is past the end"),
        "missing fashion_mnist_full": (["validate", QUICKSTART, "--set",
                                        "dataset.name=fashion_mnist_full", "--set", nodata],
                                       "not found in"),
        "missing tiny_imagenet": (["run", QUICKSTART, "-o", "new", "--set",
                                   "dataset.name=tiny_imagenet", "--set", nodata],
                                  "tiny-imagenet-200 does not exist"),
        "sweep without data": (["sweep", "device_mix", "-o", "sw", "--set",
                                "dataset.name=cifar10", "--set", nodata],
                               "no point can run: dataset.name: 'cifar10'"),
        "missing bandwidth trace": (["run", QUICKSTART, "-o", "new", "--set",
                                     "network.traces={pi4_wifi: gone.csv}"],
                                    "network.traces.pi4_wifi: bandwidth trace gone.csv: "
                                    "cannot be read"),
        "output inside a file": (["run", QUICKSTART, "-o", "held/rounds.csv/out"],
                                 "cannot be made: held/rounds.csv is a file"),
    }[case]
    result, out = probe(args, tmp_path)
    assert result["code"] == 2, out
    assert expect in out, out
    assert not result["torch"], f"torch was imported before the refusal:\n{out}"
