"""Prove that a change which must not change results does not: hash every algorithm's
final weights and ``rounds.csv`` on a tiny reference run, before and after.

    python benchmarks/identity.py -o before.json          # at the old commit (a worktree)
    python benchmarks/identity.py -o after.json           # at the new one
    python benchmarks/identity.py --compare before.json after.json

Each algorithm runs the same tiny scenario (3 clients of the tests' ``TINY`` scenario,
2 rounds, one torch thread, in this process) and is hashed twice:

- ``weights``: SHA-256 over the state dicts of every model the algorithm evaluates
  (each client's client-side model, exit head and server-side model, each module once,
  in client order), tensors as raw bytes;
- ``rounds``: SHA-256 of ``rounds.csv`` without the columns that measure the host
  (``wall_time_s``: wall-clock seconds of this machine).

Trained hashes are equal only on the same kind of CPU and torch build (torch's CPU kernels
differ between an AVX2 and an AVX-512 host): compare runs made on one machine.
``--timing-only`` runs the same scenarios with ``training.timing_only: true`` and hashes
``rounds.csv`` and the events table instead: pure arithmetic, equal on every CPU.
``--algorithms`` picks a subset; ``--set a.b=v`` changes every scenario (e.g.
``training.fuse_clients=true``).

``tests/test_identity.py`` compares every algorithm with the hashes recorded in
``tests/identity_reference.json``: the timing-only ones on any machine, the trained ones
where the reference holds this machine's :func:`fingerprint`. ``--record`` writes this
machine's hashes there (only for a change that is meant to change results, said in its
commit message)::

    python benchmarks/identity.py --record              # trained, this CPU's entry
    python benchmarks/identity.py --record --timing-only
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import TINY  # noqa: E402

#: rounds.csv columns that measure this machine, not the simulation
HOST_COLUMNS = ("wall_time_s",)
#: scenario changes an algorithm needs on top of TINY: settings whose default changed
#: after the reference was recorded, pinned to the reading it was recorded with
EXTRA: dict[str, dict] = {"mu_splitfed": {"zo_client_lr": None}}
#: ... and in a timing-only run, whose timeline must not depend on training
#: (:func:`sflsim.config.load.timing_only_refusal`)
TIMING_ONLY_EXTRA: dict[str, dict] = {"fedsga": {"split": "static"}, "multisfl": {"adaptive_replay": False}}
#: device profiles as they were when the hashes were recorded, searched before the shipped
#: ones (a profile refitted since, e.g. the Jetson Nano's measured powers, would move them)
PINNED_PROFILES = REPO / "benchmarks" / "identity_profiles"
#: the recorded hashes that ``tests/test_identity.py`` compares with
REFERENCE = REPO / "tests" / "identity_reference.json"


def fingerprint() -> str:
    """What decides torch's CPU kernels here: torch's version, the CPU vendor and the
    instruction set torch dispatches to (``torch.backends.cpu.get_cpu_capability``)."""
    vendor = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    version = torch.__version__.split("+")[0]
    return f"torch {version}, {vendor}, {torch.backends.cpu.get_cpu_capability()}"


def weights_hash(algorithm) -> str:
    """SHA-256 of the state dicts of every model ``algorithm`` evaluates, each once."""
    digest, seen = hashlib.sha256(), set()
    for client in algorithm.ctx.clients:
        for module in (client.model, client.exit_head, algorithm.server_model_for(client)):
            if module is None or id(module) in seen:
                continue
            seen.add(id(module))
            for name, tensor in module.state_dict().items():
                digest.update(name.encode())
                buf = io.BytesIO()
                buf.write(tensor.detach().contiguous().cpu().numpy().tobytes())
                digest.update(buf.getvalue())
    return digest.hexdigest()


def rounds_hash(rounds: pd.DataFrame) -> str:
    """SHA-256 of ``rounds`` as CSV, without :data:`HOST_COLUMNS`."""
    kept = rounds[[c for c in rounds.columns if c not in HOST_COLUMNS]]
    return hashlib.sha256(kept.to_csv(index=False).encode()).hexdigest()


def run_one(name: str, sets: list[str], timing_only: bool = False) -> dict[str, str]:
    """Run ``name`` on the reference scenario; its hashes: ``weights`` and ``rounds``
    (trained), or ``rounds`` and ``events`` (``timing_only``)."""
    from sflsim.hardware import profiles

    saved = os.environ.get("SFLSIM_PROFILE_PATH")
    os.environ["SFLSIM_PROFILE_PATH"] = os.pathsep.join(
        p for p in (str(PINNED_PROFILES), saved) if p)
    profiles.load_profile.cache_clear()
    try:
        return _run_one(name, sets, timing_only)
    finally:
        if saved is None:
            del os.environ["SFLSIM_PROFILE_PATH"]
        else:
            os.environ["SFLSIM_PROFILE_PATH"] = saved
        profiles.load_profile.cache_clear()


def _run_one(name: str, sets: list[str], timing_only: bool) -> dict[str, str]:
    from sflsim.config import validate_scenario
    from sflsim.config.load import apply_override
    from sflsim.runner import run_scenario

    data = copy.deepcopy(TINY)
    extra = (TIMING_ONLY_EXTRA if timing_only else EXTRA).get(name, {})
    data["algorithm"] = {"name": name, **extra}
    data["training"]["rounds"] = 2
    data["training"]["timing_only"] = timing_only
    for assignment in sets:
        apply_override(data, assignment)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_scenario(validate_scenario(data), Path(tmp) / "run")
        if timing_only:
            events = hashlib.sha256(result.events.to_csv(index=False).encode()).hexdigest()
            return {"rounds": rounds_hash(result.rounds), "events": events}
        return {"weights": weights_hash(result.algorithm), "rounds": rounds_hash(result.rounds)}


def timing_only_algorithms() -> list[str]:
    """The algorithms that run timing-only."""
    from sflsim.config.algorithms import algorithms_with

    return sorted(algorithms_with("timing_only"))


def record(hashes: dict[str, dict[str, str]], timing_only: bool) -> str:
    """Write ``hashes`` into :data:`REFERENCE`: under ``timing_only``, or under this
    machine's :func:`fingerprint`; returns the key written."""
    reference = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {}
    key = "timing_only" if timing_only else fingerprint()
    if timing_only:
        reference["timing_only"] = hashes
    else:
        reference.setdefault("trained", {})[key] = hashes
    REFERENCE.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
    return key


def main(argv: list[str] | None = None) -> int:
    from sflsim.algorithms.base import ALGORITHMS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, help="write the hashes here (JSON)")
    parser.add_argument("--algorithms", nargs="*", default=sorted(ALGORITHMS))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="A.B=V")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--timing-only", action="store_true",
                        help="hash timing-only runs (rounds and events), equal on every CPU")
    parser.add_argument("--record", action="store_true",
                        help=f"write the hashes into {REFERENCE.relative_to(REPO)}")
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        changed = [f"{name} {what}" for name in sorted(set(before) | set(after))
                   for what in ("weights", "rounds", "events")
                   if before.get(name, {}).get(what) != after.get(name, {}).get(what)]
        print("identical" if not changed else "changed: " + ", ".join(changed))
        return 1 if changed else 0
    torch.set_num_threads(1)
    names = args.algorithms
    if args.timing_only:
        names = [name for name in names if name in timing_only_algorithms()]
    hashes = {}
    for name in names:
        hashes[name] = run_one(name, args.sets, args.timing_only)
        print(f"{name:28s} " + "  ".join(f"{what} {value[:16]}" for what, value in hashes[name].items()),
              flush=True)
    if args.output:
        args.output.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    if args.record:
        if args.sets or set(args.algorithms) != set(ALGORITHMS):
            parser.error("--record records the reference scenario of every algorithm: "
                         "no --set, no --algorithms")
        print(f"recorded under {record(hashes, args.timing_only)!r} in {REFERENCE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
