"""Refusals that need no model are told before torch loads (a second, not the seconds
torch takes): an output folder that holds results or cannot be made, a missing dataset
or bandwidth trace, a resume that cannot be done, an end layer past the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_probes import probe_commands

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = str(REPO / "scenarios" / "quickstart.yaml")

#: runs the CLI on ``args`` (tests/cli_probes.py: the cases share an interpreter, each
#: checked for torch once it has ended, as if it ran in one of its own)
CALL = """
from typer.main import get_command
from sflsim.cli.main import app
try:
    return get_command(app).main(args, prog_name="sflsim", standalone_mode=False) or 0
except SystemExit as exc:
    return exc.code
except Exception as exc:  # click's own exceptions carry an exit code
    return getattr(exc, "exit_code", 1)
"""


def _cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """{case: (arguments, what the refusal says)}, run in a folder of its own under tmp."""
    nodata = f"dataset.data_root={tmp / 'nodata'}"
    return {
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
    }


CASES = list(_cases(Path("tmp")))


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> tuple[dict[str, dict], dict]:
    """Every case run once: ({case: its probe result}, {case: (arguments, message)}).
    Each case's folder holds ``held`` (a results folder: ``rounds.csv``)."""
    tmp = tmp_path_factory.mktemp("refusals")
    cases = _cases(tmp)
    runs = []
    for i, (case, (args, _)) in enumerate(cases.items()):
        cwd = tmp / f"case{i}"
        (cwd / "held").mkdir(parents=True)
        (cwd / "held" / "rounds.csv").write_text("round\n")
        runs.append((case, args, cwd))
    return probe_commands(CALL, runs, timeout=120), cases


@pytest.mark.parametrize("case", CASES)
def test_refused_before_torch_loads(case: str, refusals) -> None:
    results, cases = refusals
    result, expect = results[case], cases[case][1]
    out = result["stdout"] + result["stderr"]
    assert result["code"] == 2, out
    assert expect in out, out
    assert not result["torch"], f"torch was imported before the refusal:\n{out}"
