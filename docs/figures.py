"""Make the tutorials' figures from real runs: ``python docs/figures.py [--only NAME]``.

For each tutorial page this script runs the page's own ``sflsim run`` / ``sflsim sweep``
commands (same scenarios, same ``--set`` overrides) in subprocesses, then draws the
figure the page talks about with ``sflsim plot`` and writes it as a PNG into
``docs/assets/figures/``. Every command is printed before it runs, with its wall time
after it.

Figures (``--only NAME`` redoes one; repeat it for several):

- ``quickstart`` (``docs/tutorials/quickstart.md``): ``sflsim run scenarios/quickstart.yaml``;
  ``quickstart_tta.png`` (server accuracy against simulated time) and
  ``quickstart_timeline.png`` (round 1: each client's compute and links, the server).
- ``strategies`` (``docs/tutorials/sequential-averaging-distributed.md``): the Sequential,
  Averaging and Distributed runs, then ``analysis/table_iv.py`` on them;
  ``strategies_tta.png``. The Sequential run is the quickstart's command, so when both
  figures are made in one go it runs once and is copied.
- ``fedsga`` (``docs/tutorials/fedsga-vs-multisfl.md``): ``scenarios/fedsga_small.yaml`` with
  FedSGA, MultiSFL, SplitFed v1 and FedAvg, then ``analysis/table5.py`` on them;
  ``fedsga_tta.png`` (accuracy against simulated time, time to 50% marked).
- ``device-mix`` (``docs/tutorials/device-mix-sweep.md``): ``sflsim sweep
  scenarios/sweeps/device_mix.yaml``; ``device_mix_accuracy.png`` (final server accuracy)
  and ``device_mix_time.png`` (simulated time), against the number of Raspberry Pi 4.
- ``what-if`` (``docs/tutorials/what-if.md``): ``sflsim run scenarios/quickstart.yaml
  --no-train`` as it is and with two Raspberry Pi 4 on LTE (``--set``), then ``sflsim
  compare`` on both; ``whatif_wifi.png`` and ``whatif_lte.png`` (round 1 of each).
- ``cut-layer`` (``docs/tutorials/cut-layer.md``): the quickstart with every client at
  end layer 3, 4 and 5 in turn, then ``sflsim compare --target 0.3``;
  ``cut_layer_tta.png`` (accuracy against simulated time, time to 30% marked).

What is shrunk to fit a 2-core CPU (about 15 minutes in all there, with other work on
the machine), and nothing else (no method's settings change):

- ``quickstart`` and ``strategies``: ``--set dataset.fraction=0.15`` on every run (1,800 of
  the 12,000 training images; the test set, the 4 rounds and everything else as the
  scenarios give them). The pages' full-size runs take about 8 minutes each there.
- ``fedsga``: nothing; ``scenarios/fedsga_small.yaml`` is already CPU-sized (3 rounds on
  a fifth of the data, about a minute per algorithm).
- ``device-mix``: ``--set dataset.fraction=0.1`` (1,200 training images instead of the
  sweep's quarter, 3,000); the sweep's 2 rounds and its points as they are.
- ``what-if``: nothing (timing only, seconds at full size).
- ``cut-layer``: nothing beyond what the page's commands give (3 rounds on a tenth of
  the data, ``--set training.rounds=3 --set dataset.fraction=0.1``; about a minute
  per run).

Host settings that change no result: every run gets ``-q`` (no progress bar), the
sweep ``--workers 1`` (the page says 2; points run one at a time), and torch one thread
(``OMP_NUM_THREADS=1`` unless it is set already).

Runs go to a temporary folder, removed at the end, or with ``--runs DIR`` to ``DIR``
(``runs/`` is ignored by git), where they are kept: a later call with the same ``--runs``
resumes each run (``sflsim run --resume``: a completed one is left as it is) and
skips the sweep's finished points, so only the figures are drawn again.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where the PNGs go
FIGURES = ROOT / "docs" / "assets" / "figures"
#: the shrinking of the quickstart-sized runs and of the device-mix sweep
QUICKSTART_SIZE = ["--set", "dataset.fraction=0.15"]
SWEEP_SIZE = ["--set", "dataset.fraction=0.1"]
#: the what-if tutorial's change: two of the four Raspberry Pi 4 on LTE
PI4_LTE = ["--set", "devices.pi4_wifi.count=2",
           "--set", "devices.pi4_lte={profile: rpi4, count: 2, end_layer: 3, link: lte}"]
#: the cut-layer tutorial's size
CUT_SIZE = ["--set", "training.rounds=3", "--set", "dataset.fraction=0.1"]
FEDSGA = "scenarios/fedsga_small.yaml"


@dataclass
class Figure:
    """One tutorial's figures: the runs its page shows, then the commands that draw."""

    page: str
    #: ``(results folder under {runs}, sflsim arguments after ``run``/``sweep``)``
    runs: list[tuple[str, list[str]]]
    #: commands after the runs, ``["sflsim", ...]`` or ``["python", ...]``, where ``{runs}``
    #: stands for the runs folder and ``{figs}`` for :data:`FIGURES`
    draw: list[list[str]] = field(default_factory=list)


def _run(scenario: str, *extra: str) -> list[str]:
    return ["run", scenario, *extra, "-q"]


def _cut(layer: int) -> list[str]:
    """The cut-layer tutorial's run with every client at end layer ``layer``."""
    return _run("scenarios/quickstart.yaml", *CUT_SIZE,
                *[arg for group in ("pi4_wifi", "nano_lte", "orin_wifi")
                  for arg in ("--set", f"devices.{group}.end_layer={layer}")])


FIGURE_LIST: dict[str, Figure] = {
    "quickstart": Figure(
        page="docs/tutorials/quickstart.md",
        runs=[("quickstart", _run("scenarios/quickstart.yaml", *QUICKSTART_SIZE))],
        draw=[["sflsim", "plot", "tta", "{runs}/quickstart", "-o", "{figs}/quickstart_tta.png"],
              ["sflsim", "plot", "timeline", "{runs}/quickstart", "--round", "1",
               "-o", "{figs}/quickstart_timeline.png"]]),
    "strategies": Figure(
        page="docs/tutorials/sequential-averaging-distributed.md",
        runs=[("sequential", _run("scenarios/quickstart.yaml", *QUICKSTART_SIZE)),
              ("averaging", _run("scenarios/hetero_splitee_averaging.yaml", *QUICKSTART_SIZE)),
              ("distributed", _run("scenarios/quickstart.yaml", "--set",
                                   "algorithm.name=distributed", *QUICKSTART_SIZE))],
        draw=[["python", "analysis/table_iv.py", "{runs}/sequential", "{runs}/averaging",
               "{runs}/distributed"],
              ["sflsim", "plot", "tta", "{runs}/sequential", "{runs}/averaging",
               "{runs}/distributed", "-o", "{figs}/strategies_tta.png"]]),
    "fedsga": Figure(
        page="docs/tutorials/fedsga-vs-multisfl.md",
        runs=[("small/fedsga", _run(FEDSGA)),
              ("small/multisfl", _run(FEDSGA, "--set", "algorithm={name: multisfl, split: "
                                      "{name: resource, round_budget_s: 5}}")),
              ("small/splitfed", _run(FEDSGA, "--set", "algorithm={name: splitfed_v1}")),
              ("small/fedavg", _run(FEDSGA, "--set", "algorithm={name: fedavg}"))],
        draw=[["python", "analysis/table5.py", "{runs}/small/fedsga", "{runs}/small/multisfl",
               "{runs}/small/splitfed", "{runs}/small/fedavg"],
              ["sflsim", "plot", "tta", "{runs}/small/fedsga", "{runs}/small/multisfl",
               "{runs}/small/splitfed", "{runs}/small/fedavg", "--target", "0.5",
               "-o", "{figs}/fedsga_tta.png"]]),
    "device-mix": Figure(
        page="docs/tutorials/device-mix-sweep.md",
        runs=[("sweeps/device_mix", ["sweep", "scenarios/sweeps/device_mix.yaml",
                                     "--workers", "1", *SWEEP_SIZE])],
        draw=[["sflsim", "compare", "{runs}/sweeps/device_mix"],
              ["sflsim", "plot", "sweep", "{runs}/sweeps/device_mix", "--x",
               "devices.pi4_wifi.count", "--y", "final_server_accuracy",
               "-o", "{figs}/device_mix_accuracy.png"],
              ["sflsim", "plot", "sweep", "{runs}/sweeps/device_mix", "--x",
               "devices.pi4_wifi.count", "--y", "sim_time_s",
               "-o", "{figs}/device_mix_time.png"]]),
    "what-if": Figure(
        page="docs/tutorials/what-if.md",
        runs=[("whatif/wifi", _run("scenarios/quickstart.yaml", "--no-train")),
              ("whatif/lte", _run("scenarios/quickstart.yaml", "--no-train", *PI4_LTE))],
        draw=[["sflsim", "compare", "{runs}/whatif/wifi", "{runs}/whatif/lte"],
              ["sflsim", "plot", "timeline", "{runs}/whatif/wifi", "--round", "1",
               "-o", "{figs}/whatif_wifi.png"],
              ["sflsim", "plot", "timeline", "{runs}/whatif/lte", "--round", "1",
               "-o", "{figs}/whatif_lte.png"]]),
    "cut-layer": Figure(
        page="docs/tutorials/cut-layer.md",
        runs=[(f"cut/l{layer}", _cut(layer)) for layer in (3, 4, 5)],
        draw=[["sflsim", "compare", "{runs}/cut/l3", "{runs}/cut/l4", "{runs}/cut/l5",
               "--target", "0.3"],
              ["sflsim", "plot", "tta", "{runs}/cut/l3", "{runs}/cut/l4", "{runs}/cut/l5",
               "--target", "0.3", "-o", "{figs}/cut_layer_tta.png"]]),
}


def _shown(path: Path) -> str:
    """A path as printed: relative to the checkout's root when inside it."""
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _execute(words: list[str], env: dict[str, str]) -> None:
    """Print ``words`` as a shell command, run it from the checkout's root, and stop the
    script if it fails."""
    print(f"\n$ {shlex.join(words)}", flush=True)
    start = time.monotonic()
    program = {"sflsim": [sys.executable, "-m", "sflsim"], "python": [sys.executable]}
    done = subprocess.run([*program[words[0]], *words[1:]], cwd=ROOT, env=env)
    print(f"[{time.monotonic() - start:.0f} s]", flush=True)
    if done.returncode != 0:
        sys.exit(f"failed (exit status {done.returncode}): {shlex.join(words)}")


def _fill(words: list[str], runs: Path) -> list[str]:
    return [w.replace("{runs}", _shown(runs)).replace("{figs}", _shown(FIGURES)) for w in words]


def make(name: str, runs: Path, env: dict[str, str], done: dict[tuple[str, ...], Path]) -> None:
    """Run figure ``name``'s runs (a run whose command ran already in this call is copied)
    and draw it."""
    figure = FIGURE_LIST[name]
    print(f"\n=== {name}: {figure.page}", flush=True)
    for folder, args in figure.runs:
        out = runs / folder
        key = tuple(args)
        if key in done and not out.exists():
            print(f"\n{_shown(out)}: the same command as {_shown(done[key])}, copied", flush=True)
            shutil.copytree(done[key], out, ignore=shutil.ignore_patterns(".sflsim.lock"))
            continue
        resume = ["--resume"] if args[0] == "run" and (out / "checkpoint.pkl").exists() else []
        if "--no-train" in args and out.exists():  # no checkpoint to resume: seconds to redo
            resume = ["--overwrite"]
        _execute(["sflsim", *args, "-o", _shown(out), *resume], env)
        done[key] = out
    for words in figure.draw:
        _execute(_fill(words, runs), env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=list(FIGURE_LIST), metavar="NAME",
                        help=f"make only this figure (repeatable): {', '.join(FIGURE_LIST)}")
    parser.add_argument("--runs", type=Path, default=None, metavar="DIR",
                        help="keep the runs in DIR (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    names = args.only or list(FIGURE_LIST)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env.setdefault("OMP_NUM_THREADS", "1")
    FIGURES.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sflsim-figures-") as scratch:
        runs = (args.runs or Path(scratch)).resolve()
        print(f"runs in {_shown(runs)}; figures in {_shown(FIGURES)}", flush=True)
        done: dict[tuple[str, ...], Path] = {}
        for name in names:
            make(name, runs, env, done)
    print(f"\ndone in {time.monotonic() - start:.0f} s:", flush=True)
    for png in sorted(FIGURES.glob("*.png")):
        print(f"  {_shown(png)}  {png.stat().st_size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
