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

Hashes are equal only on the same CPU and torch build (torch's CPU kernels differ between
an AVX2 and an AVX-512 host): compare runs made on one machine. ``--algorithms`` picks a
subset; ``--set a.b=v`` changes every scenario (e.g. ``training.fuse_clients=true``).
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
#: scenario changes an algorithm needs on top of TINY (none so far)
EXTRA: dict[str, dict] = {}


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


def run_one(name: str, sets: list[str]) -> dict[str, str]:
    from sflsim.config import validate_scenario
    from sflsim.config.load import apply_override
    from sflsim.runner import run_scenario

    data = copy.deepcopy(TINY)
    data["algorithm"] = {"name": name, **EXTRA.get(name, {})}
    data["training"]["rounds"] = 2
    for assignment in sets:
        apply_override(data, assignment)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_scenario(validate_scenario(data), Path(tmp) / "run")
        return {"weights": weights_hash(result.algorithm), "rounds": rounds_hash(result.rounds)}


def main(argv: list[str] | None = None) -> int:
    from sflsim.algorithms.base import ALGORITHMS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, help="write the hashes here (JSON)")
    parser.add_argument("--algorithms", nargs="*", default=sorted(ALGORITHMS))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="A.B=V")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        changed = [f"{name} {what}" for name in sorted(set(before) | set(after))
                   for what in ("weights", "rounds")
                   if before.get(name, {}).get(what) != after.get(name, {}).get(what)]
        print("identical" if not changed else "changed: " + ", ".join(changed))
        return 1 if changed else 0
    torch.set_num_threads(1)
    hashes = {}
    for name in args.algorithms:
        hashes[name] = run_one(name, args.sets)
        print(f"{name:28s} weights {hashes[name]['weights'][:16]}  rounds {hashes[name]['rounds'][:16]}",
              flush=True)
    if args.output:
        args.output.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
