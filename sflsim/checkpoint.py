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
- the runner's ``rounds.csv`` rows so far (the client rows and events are on disk
  already, a file per round: :class:`sflsim.metrics.results.RunTables`), its
  ``conditions`` generator, and the global torch, NumPy and Python random states.

Not pickled, rebuilt on resume: the SimPy environment and its resources (a new
environment starts at the saved clock with idle resources of the same capacity;
between rounds no simulated work is pending, see :func:`save_checkpoint`), the
dataset (reloaded from the scenario, and decoded into memory or kept on disk
anew, :func:`sflsim.runner.run_data`; loading and decoding are deterministic) and
the progress callback. Augmentation draws continue from the saved generators.

The header holds a SHA-256 of the header's fields and of every byte after it
(:func:`sflsim.resume.checksum`): a checkpoint damaged anywhere is refused as damaged
before anything is unpickled from it, and the run's files stay as they were.

The file is a pickle, and the checksum finds damage, not forgery. So it is read with
only the classes and functions a checkpoint holds
(:class:`sflsim.checkpoint_globals.CheckpointUnpickler`, its header with plain data
only: :func:`sflsim.resume.read_header_pickle`): a checkpoint naming anything else
(``os.system``) is refused by name, and nothing of it is built or run.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch

from sflsim.checkpoint_globals import CheckpointUnpickler
from sflsim.engine import FifoResource, TraceEvent
from sflsim.inputs.pickles import ForbiddenGlobal
from sflsim.resume import (  # noqa: F401  (re-exported: the header needs no torch)
    CHECKPOINT,
    CHECKSUM,
    VERSION,
    _check_header,
    _read_header,
    _require_file,
    _rounds,
    _same,
    checksum,
    damaged,
    refused,
    resumable,
    verify,
)


@dataclass
class RunState:
    """What :func:`load_checkpoint` returns: the runner's state after ``round`` rounds."""

    round: int
    ctx: Any  # sflsim.algorithms.base.RunContext
    algorithm: Any  # sflsim.algorithms.base.Algorithm
    round_rows: list[dict]
    conditions_rng: np.random.Generator
    wall_time_s: float
    #: ``training.rounds`` before each resume that changed it (oldest first)
    rounds_before: list[int] = field(default_factory=list)


_PLAIN = frozenset({int, float, str, bool, bytes, tuple, list, dict, type(None), TraceEvent,
                    torch.Tensor, torch.nn.Parameter})


def _cpu_storage(raw: bytearray, dtype: torch.dtype) -> torch.TypedStorage:
    """A CPU tensor storage of ``dtype`` over the bytes ``raw`` (no copy):
    :func:`_reduce_storage`'s inverse."""
    untyped = (torch.frombuffer(raw, dtype=torch.uint8).untyped_storage() if raw
               else torch.UntypedStorage(0))
    return torch.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


def _reduce_storage(storage: torch.TypedStorage) -> tuple:
    """A CPU storage as its raw bytes (written in place with pickle protocol 5).

    torch's own reduction saves every storage as a small ``torch.save`` file of its own:
    a model's few hundred tensors cost 0.1 ms each to write and more to read, most of a
    small run's checkpoint. Bytes give the same tensors (dtype, shape, strides and offset
    come from the tensor's own reduction) several times faster. Other devices keep
    torch's reduction.
    """
    untyped = storage._untyped_storage
    if untyped.device.type != "cpu":
        return storage.__reduce__()
    raw = torch.empty(0, dtype=torch.uint8).set_(untyped).numpy()
    return _cpu_storage, (pickle.PickleBuffer(raw) if raw.size else bytearray(), storage.dtype)


class _Pickler(pickle.Pickler):
    dispatch_table = {**copyreg.dispatch_table, torch.TypedStorage: _reduce_storage}

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


class _Unpickler(CheckpointUnpickler):
    """Reads what :class:`_Pickler` wrote: what a checkpoint holds
    (:class:`~sflsim.checkpoint_globals.CheckpointUnpickler`), with the persistent ids
    reattached to this run's dataset, progress callback and new SimPy environment."""

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
    from sflsim import resume
    from sflsim.metrics.results import atomic_write

    payload = io.BytesIO()
    _Pickler(payload, state.ctx.data, state.ctx.on_batch).dump({
        "state": state,
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                "python": random.getstate()},
    })
    # a small header first, so a mismatch is found without unpickling the models
    header = {"version": VERSION, "scenario": state.ctx.scenario.model_dump(mode="json"),
              "round": state.round, "sim_now_s": state.ctx.sim.now_s,
              # the learning-rate schedule's horizon, kept across resumes that change
              # training.rounds (the scenario above has the latest rounds)
              "lr_horizon_rounds": state.algorithm.steps.lr_horizon_rounds,
              # files the run read whose contents the scenario does not hold
              "inputs": resume.input_digests(state.ctx.scenario.model_dump(mode="json"))}
    # damage anywhere in the file is found before anything is unpickled (sflsim.resume)
    header[CHECKSUM] = checksum(header, payload.getbuffer())
    head = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(payload.getbuffer())

    atomic_write(path, write)


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
        SflsimError: no checkpoint, an unreadable or older one, a damaged one (its
            checksum does not match its bytes: :func:`sflsim.resume.verify`; nothing is
            unpickled from it), one that names a class or function no checkpoint holds
            (:func:`sflsim.resume.refused`; nothing of it is built or run), one of
            another scenario (naming the first fields that differ), or fewer rounds than
            the run has completed.
    """
    _require_file(path)
    raw = path.read_bytes()
    stream = io.BytesIO(raw)
    header = _read_header(stream, path)
    verify(header, memoryview(raw)[stream.tell():], path)
    _check_header(header, path, scenario_data)
    env = simpy.Environment(initial_time=header["sim_now_s"])
    try:
        blob = _Unpickler(stream, {"data": data, "on_batch": on_batch, "env": env,
                                   "processed_event": None}).load()
    except ForbiddenGlobal as exc:  # a class or function no checkpoint holds: none is built
        raise refused(path, exc.name) from None
    except Exception:  # noqa: BLE001  (a truncated or damaged file: one message)
        raise damaged(path) from None
    rng = blob["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    state: RunState = blob["state"]
    old, new = _rounds(header["scenario"]), _rounds(scenario_data)
    if new != old:
        state.rounds_before.append(old)
    return state
