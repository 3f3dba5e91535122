"""Checkpoints: everything a run needs to continue after its last completed round.

After every completed round the runner pickles, into ``DIR/checkpoint.pkl``
(written to a temporary name and renamed, like every result file):

- the run context and the algorithm as one object graph, so shared tensors stay
  shared: every client-side model, exit head and optimizer (with its state and
  scheduler), every server-side model and copy, FedSGA's prompts, prototypes and
  estimator, MultiSFL's branches and label scores, the split policies, every
  client's batch generator and augmentation generator, the cost table, the simulated clock and the event
  trace, the links' and server's queues (empty between rounds), and the
  partition (each client's sample indices);
- the runner's rows so far, its ``conditions`` generator, and the global torch,
  NumPy and Python random states.

Not pickled, rebuilt on resume: the SimPy environment and its resources (a new
environment starts at the saved clock with idle resources of the same capacity;
between rounds no simulated work is pending, see :func:`save_checkpoint`), the
dataset (reloaded from the scenario, and decoded into memory or kept on disk
anew, :func:`sflsim.runner.run_data`; loading and decoding are deterministic) and
the progress callback. Augmentation draws continue from the saved generators.

The file is a pickle: load only checkpoints you wrote (as with ``torch.load``).
"""

from __future__ import annotations

import copy
import io
import json
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import simpy
import torch

from sflsim.config.load import scenario_differences
from sflsim.config.resolve import resolved_dump
from sflsim.engine import FifoResource, TraceEvent
from sflsim.errors import SflsimError
from sflsim.text import plural

CHECKPOINT = "checkpoint.pkl"
#: bump when the checkpoint layout changes; older files are refused with a message
VERSION = 5  # 5: images held as uint8; the algorithm keeps augmentation generators;
#: 4: Centralized keeps the clients whose data arrived; 3: channels-last
#: models carry the oneDNN#6035 guard; FedSGA switches


@dataclass
class RunState:
    """What :func:`load_checkpoint` returns: the runner's state after ``round`` rounds."""

    round: int
    ctx: Any  # sflsim.algorithms.base.RunContext
    algorithm: Any  # sflsim.algorithms.base.Algorithm
    round_rows: list[dict]
    client_rows: list[dict]
    conditions_rng: np.random.Generator
    wall_time_s: float
    #: ``training.rounds`` before each resume that changed it (oldest first)
    rounds_before: list[int] = field(default_factory=list)


_PLAIN = frozenset({int, float, str, bool, bytes, tuple, list, dict, type(None), TraceEvent,
                    torch.Tensor, torch.nn.Parameter})


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, data: object, on_batch: object):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.data, self.on_batch = data, on_batch

    def persistent_id(self, obj: object) -> object:
        if type(obj) in _PLAIN:  # most of what is pickled; skip the checks below
            return None
        if isinstance(obj, simpy.Resource):  # FIFO and priority; queues are empty between rounds
            if obj.users or obj.queue:
                raise RuntimeError(f"checkpoint taken while {obj!r} is in use")
            return ("resource", id(obj), isinstance(obj, simpy.PriorityResource), obj.capacity)
        if isinstance(obj, FifoResource) and (obj.users or obj.queue):
            raise RuntimeError(f"checkpoint taken while {obj!r} is in use")
        if obj is self.data:
            return "data"
        if obj is self.on_batch:
            return "on_batch"
        if isinstance(obj, simpy.Environment):
            return "env"
        if isinstance(obj, simpy.Event):
            if not obj.processed:  # a bug in an algorithm, not a user error
                raise RuntimeError(f"checkpoint taken while simulated work is pending: {obj!r}")
            return "processed_event"  # a finished process kept in a list; stale
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, refs: dict[str, object]):
        super().__init__(file)
        self.refs = refs
        self.resources: dict[int, simpy.Resource] = {}

    def persistent_load(self, pid: object) -> object:
        if isinstance(pid, tuple):  # a resource: a new, idle one on the new environment
            _, key, priority, capacity = pid
            if key not in self.resources:
                kind = simpy.PriorityResource if priority else simpy.Resource
                self.resources[key] = kind(self.refs["env"], capacity=capacity)
            return self.resources[key]
        return self.refs[pid]


def save_checkpoint(path: Path, state: RunState) -> None:
    """Write ``state`` to ``path`` atomically.

    Raises:
        RuntimeError: a simulated process is still pending (an algorithm left work
            running past the end of its round; between rounds there is none).
    """
    from sflsim.metrics.results import atomic_write

    buf = io.BytesIO()
    # a small header first, so a mismatch is found without unpickling the models
    pickle.dump({"version": VERSION, "scenario": state.ctx.scenario.model_dump(mode="json"),
                 "round": state.round, "sim_now_s": state.ctx.sim.now_s},
                buf, protocol=pickle.HIGHEST_PROTOCOL)
    _Pickler(buf, state.ctx.data, state.ctx.on_batch).dump({
        "state": state,
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                "python": random.getstate()},
    })
    atomic_write(path, lambda tmp: tmp.write_bytes(buf.getbuffer()))


def resumable(path: Path, scenario_data: dict) -> bool:
    """Whether ``path`` is a readable checkpoint of this version for ``scenario_data``."""
    try:
        with open(path, "rb") as f:
            header = pickle.load(f)
    except Exception:  # noqa: BLE001  (missing or damaged: not resumable)
        return False
    return (isinstance(header, dict) and header.get("version") == VERSION
            and _same(header.get("scenario"), scenario_data))


def check_resume(path: Path, scenario_data: dict) -> dict:
    """Refuse a resume that :func:`load_checkpoint` would refuse, from the checkpoint's
    small header alone (the models are not unpickled): so that the CLI says so before it
    announces the run.

    Returns:
        The header: ``version``, ``scenario`` (the dump it was saved with), ``round``
        (rounds completed) and ``sim_now_s``.

    Raises:
        SflsimError: as :func:`load_checkpoint`, but for damage past the header.
    """
    _require_file(path)
    try:
        with open(path, "rb") as f:
            header = _read_header(f, path)
    except OSError as exc:
        raise SflsimError(f"cannot read checkpoint {path}: {exc.strerror or exc}; start afresh "
                          f"with --overwrite") from None
    _check_header(header, path, scenario_data)
    return header


def load_checkpoint(path: Path, scenario_data: dict, data: object, on_batch: object) -> RunState:
    """Read a checkpoint written by :func:`save_checkpoint` for the same scenario,
    reattach ``data`` (the reloaded dataset) and ``on_batch``, restore the global
    random states, and start a fresh SimPy environment at the saved clock.

    Args:
        scenario_data: the scenario (``model_dump(mode="json")``) the run is resumed
            with; resolved (:func:`~sflsim.config.resolve.resolve_scenario`), it must
            equal the checkpoint's, except ``training.rounds``, which may be raised
            ("train 50 more rounds") or lowered down to the rounds already completed
            (the change is appended to :attr:`RunState.rounds_before`).

    Raises:
        SflsimError: no checkpoint, an unreadable or older one, one of another
            scenario (naming the first fields that differ), or fewer rounds than the
            run has completed.
    """
    _require_file(path)
    stream = io.BytesIO(path.read_bytes())
    header = _read_header(stream, path)
    _check_header(header, path, scenario_data)
    env = simpy.Environment(initial_time=header["sim_now_s"])
    try:
        blob = _Unpickler(stream, {"data": data, "on_batch": on_batch, "env": env,
                                   "processed_event": None}).load()
    except Exception as exc:  # noqa: BLE001  (a truncated or damaged file: one message)
        raise SflsimError(f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}; "
                          f"start afresh with --overwrite") from None
    rng = blob["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    state: RunState = blob["state"]
    old, new = _rounds(header["scenario"]), _rounds(scenario_data)
    if new != old:
        state.rounds_before.append(old)
    return state


def _require_file(path: Path) -> None:
    """Refuse a checkpoint that is not there, saying why there may be none and how on."""
    if not path.is_file():
        how = ("start afresh with --overwrite (it replaces the results there)"
               if path.parent.is_dir() and any(path.parent.iterdir())
               else "run without --resume to start afresh")
        raise SflsimError(f"{path.parent} has no checkpoint ({path.name}) to resume from "
                          f"(no round had finished, or the run was timing-only); {how}")


def _read_header(stream: IO[bytes], path: Path) -> dict:
    """The header pickled first by :func:`save_checkpoint` (the stream is left after it)."""
    try:
        header = pickle.load(stream)
    except Exception as exc:  # noqa: BLE001  (any damage: one message)
        raise SflsimError(f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}; "
                          f"start afresh with --overwrite") from None
    if not isinstance(header, dict) or header.get("version") != VERSION:
        raise SflsimError(f"checkpoint {path} was written by another sflsim version; "
                          f"start afresh with --overwrite")
    return header


def _check_header(header: dict, path: Path, scenario_data: dict) -> None:
    """Refuse to resume a checkpoint of another scenario, or with fewer rounds than done."""
    if not _same(header["scenario"], scenario_data):
        diffs = scenario_differences(_comparable(header["scenario"]),
                                     _comparable(scenario_data)) or [
            "the same fields in another order; the order of devices sets the client ids"]
        raise SflsimError(f"cannot resume {path.parent}: the scenario differs from the one it was "
                          f"started with ({'; '.join(diffs[:3])}); resume with the same scenario "
                          f"or start afresh with --overwrite")
    done, new = header["round"], _rounds(scenario_data)
    if new < done:
        raise SflsimError(f"cannot resume {path.parent} with training.rounds {new}: it has "
                          f"completed {plural(done, 'round')}; use {done} or more")


#: scenario fields that change how this host runs a scenario, never its results (tests
#: show them bit-identical), so a run may resume with other values
HOST_ONLY_FIELDS = (("training", "parallel_clients"), ("dataset", "storage"))


def _results_fields(data: object) -> object:
    """``data`` (a scenario dump) without :data:`HOST_ONLY_FIELDS`."""
    if not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    for section, name in HOST_ONLY_FIELDS:
        if isinstance(data.get(section), dict):
            data[section].pop(name, None)
    return data


def _rounds(data: dict) -> int:
    return data["training"]["rounds"]


def _comparable(data: object) -> object:
    """A scenario dump resolved (run-time defaults filled in, as the runner does; a
    checkpoint written before scenarios were resolved still matches) without
    :data:`HOST_ONLY_FIELDS` and ``training.rounds`` (a run may be resumed with more
    rounds, see :func:`load_checkpoint`)."""
    resolved = resolved_dump(data, stored=True) if isinstance(data, dict) else None
    data = _results_fields(data if resolved is None else resolved)
    if isinstance(data, dict) and isinstance(data.get("training"), dict):
        data["training"].pop("rounds", None)
    return data


def _same(old: object, new: object) -> bool:
    """Equal once resolved, including the order of mappings (device groups in order give
    client ids), but for what :func:`_comparable` leaves out."""
    return json.dumps(_comparable(old)) == json.dumps(_comparable(new))
