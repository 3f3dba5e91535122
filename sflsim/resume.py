"""The checkpoint's header, read without torch: whether a run can be resumed.

:func:`sflsim.checkpoint.save_checkpoint` pickles a small header (the scenario, the
rounds completed, the simulated clock, the learning-rate horizon) before the models, so
that a resume of another scenario, of fewer rounds than done, or from a missing or
older checkpoint is refused here, in a second, before torch loads.

The header also holds ``sha256``: the SHA-256 of the header's other fields (as
canonical JSON) followed by every byte after the header (the models, optimizers and
generators). A file whose bytes changed anywhere (a disk or copy error, an edit) is
refused as damaged (:func:`verify`) before anything is unpickled from it, here and in
:func:`sflsim.checkpoint.load_checkpoint`; a checkpoint written before the checksum
existed has none and is read as before.

The checksum finds damage, not forgery: whoever writes a checkpoint can write its hash.
So no name a checkpoint gives is looked up freely when it is unpickled: the header is read
with plain containers and numbers only (:func:`read_header_pickle`), and the rest with
what a checkpoint holds (:class:`sflsim.checkpoint_globals.CheckpointUnpickler`); a checkpoint
naming anything else (``os.system``) is refused unread (:func:`refused`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import IO

from sflsim.config.load import scenario_differences
from sflsim.config.resolve import resolved_dump
from sflsim.errors import SflsimError
from sflsim.inputs.pickles import AllowlistUnpickler, ForbiddenGlobal
from sflsim.text import plural

CHECKPOINT = "checkpoint.pkl"
#: fields that differ named in a refused resume (the rest are counted)
DIFFERENCES_SHOWN = 3
#: bump when the checkpoint layout changes; older files are refused with a message
VERSION = 8  # 8: an algorithm holds its parts as fields (protocol, cost_model, steps, ...);
#: 7: modules renamed (network.bandwidth_trace, fedsga.server_side, ...);
#: 6: the trace held as rows, the tables on disk a round at a time;
#: 5: images held as uint8; the algorithm keeps augmentation generators;
#: 4: Centralized keeps the clients whose data arrived; 3: channels-last
#: models carry the oneDNN#6035 guard; FedSGA switches
#: (the checksum, :data:`CHECKSUM`, came within version 6: files without one still load)

#: the header field that holds the checkpoint's SHA-256 (see the module docstring)
CHECKSUM = "sha256"
#: bytes read at a time while a checkpoint's checksum is computed
CHUNK_BYTES = 1 << 22


def resumable(path: Path, scenario_data: dict) -> bool:
    """Whether ``path`` is a readable, undamaged checkpoint (its checksum matches, see
    :func:`verify`) of this version for ``scenario_data``."""
    try:
        with open(path, "rb") as f:
            header = read_header_pickle(f)
            if not (isinstance(header, dict) and header.get("version") == VERSION
                    and _same(header.get("scenario"), scenario_data)):
                return False
            verify(header, f, path)
    except Exception:  # noqa: BLE001  (missing or damaged: not resumable)
        return False
    return True


def checksum(header: dict, payload: bytes | memoryview | IO[bytes]) -> str:
    """The SHA-256 (hex) of a checkpoint: ``header``'s fields but :data:`CHECKSUM` as
    canonical JSON, then ``payload`` (the bytes after the header: a buffer, or a binary
    file read from where it stands to its end)."""
    digest = hashlib.sha256(json.dumps({k: v for k, v in header.items() if k != CHECKSUM},
                                       sort_keys=True, allow_nan=True).encode())
    if isinstance(payload, (bytes, bytearray, memoryview)):
        digest.update(payload)
    else:
        while chunk := payload.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def verify(header: dict, payload: bytes | memoryview | IO[bytes], path: Path) -> None:
    """Refuse a checkpoint whose bytes do not match the checksum its header holds (none:
    a checkpoint written before checksums, read as before).

    Args:
        header: the header read from ``path`` (:func:`_read_header`).
        payload: the bytes after the header, or the file positioned just after it.

    Raises:
        SflsimError: :func:`damaged` (the file changed after it was written).
    """
    expected = header.get(CHECKSUM)
    if expected is None:
        return
    try:
        actual = checksum(header, payload)
    except (TypeError, ValueError):  # a header field JSON cannot hold: not as written
        raise damaged(path) from None
    if actual != expected:
        raise damaged(path)


def check_resume(path: Path, scenario_data: dict) -> dict:
    """Refuse a resume that :func:`sflsim.checkpoint.load_checkpoint` would refuse, from the checkpoint's
    small header alone (the models are not unpickled): so that the CLI says so before it
    announces the run.

    Returns:
        The header: ``version``, ``scenario`` (the dump it was saved with), ``round``
        (rounds completed), ``sim_now_s`` and ``lr_horizon_rounds`` (the rounds the
        learning-rate schedule runs over: the run's first ``training.rounds``, whatever
        resumes changed since; absent in checkpoints of older sflsim versions).

    Raises:
        SflsimError: as :func:`sflsim.checkpoint.load_checkpoint`; damage anywhere in the
            file is found by its checksum (:func:`verify`; reading the file takes about
            a second per GB), except in a checkpoint written before checksums, whose
            damage past the header shows only when it is loaded.
    """
    _require_file(path)
    try:
        with open(path, "rb") as f:
            header = _read_header(f, path)
            verify(header, f, path)
    except OSError as exc:
        raise SflsimError(f"cannot read checkpoint {path}: {exc.strerror or exc}; start afresh "
                          f"with --overwrite") from None
    _check_header(header, path, scenario_data)
    return header


def _require_file(path: Path) -> None:
    """Refuse a checkpoint that is not there, saying why there may be none and how on."""
    if not path.is_file():
        # hidden files (the folder's lock, temporary files) are no results to replace
        how = ("start afresh with --overwrite (it replaces the results there)"
               if path.parent.is_dir() and any(not p.name.startswith(".")
                                               for p in path.parent.iterdir())
               else "run without --resume to start afresh")
        raise SflsimError(f"{path.parent} has no checkpoint ({path.name}) to resume from "
                          f"(no round had finished, or the run was timing-only); {how}")


def damaged(path: Path) -> SflsimError:
    """The refusal of a checkpoint whose bytes do not unpickle (truncated, overwritten,
    another file under its name): what it is and how on, without the unpickler's words."""
    return SflsimError(f"cannot read checkpoint {path}: the file is damaged or not an sflsim "
                       f"checkpoint; start afresh with --overwrite (it replaces the results in "
                       f"{path.parent})")


def refused(path: Path, name: str) -> SflsimError:
    """The refusal of a checkpoint that names ``name`` (``posix.system``), a class or
    function no checkpoint of sflsim holds: nothing of it was built or run."""
    return SflsimError(f"{path} names {name}, which a checkpoint never holds: refusing to load "
                       f"it (a checkpoint from someone else can run code when loaded); start "
                       f"afresh with --overwrite (it replaces the results in {path.parent})")


def read_header_pickle(stream: IO[bytes]) -> object:
    """The first pickle of ``stream`` (a checkpoint's header) read with plain builtin
    containers and numbers only (:class:`~sflsim.inputs.pickles.AllowlistUnpickler`).

    Raises:
        ForbiddenGlobal: it names any class or function (nothing is built or run).
        Exception: what a truncated or foreign file raises.
    """
    return AllowlistUnpickler(stream).load()


def _read_header(stream: IO[bytes], path: Path) -> dict:
    """The header pickled first by :func:`save_checkpoint` (the stream is left after it).

    Raises:
        SflsimError: the header names a class or function (:func:`refused`), cannot be
            read (:func:`damaged`) or is of another version.
    """
    try:
        header = read_header_pickle(stream)
    except ForbiddenGlobal as exc:
        raise refused(path, exc.name) from None
    except Exception:  # noqa: BLE001  (any damage: one message)
        raise damaged(path) from None
    if not isinstance(header, dict) or "version" not in header:  # a pickle, not ours
        raise damaged(path)
    if header.get("version") != VERSION:
        raise SflsimError(f"checkpoint {path} was written by another sflsim version; "
                          f"start afresh with --overwrite")
    if not isinstance(header.get("scenario"), dict):
        raise damaged(path)
    return header


def input_files(scenario_data: dict) -> dict[str, str]:
    """The input files a run reads whose contents its scenario does not hold, by field:
    ``conditions.availability``, ``network.traces.<name>`` and ``fleet`` (paths as the
    resolved scenario gives them)."""
    found = {}
    availability = (scenario_data.get("conditions") or {}).get("availability")
    if availability:
        found["conditions.availability"] = availability
    for name, trace in ((scenario_data.get("network") or {}).get("traces") or {}).items():
        found[f"network.traces.{name}"] = trace
    if scenario_data.get("fleet"):
        found["fleet"] = scenario_data["fleet"]
    return found


def input_digests(scenario_data: dict) -> dict[str, str]:
    """SHA-256 of each of :func:`input_files`, by field (``"unreadable"`` for one that
    cannot be read); a resumed run must read the same bytes."""
    import hashlib

    digests = {}
    for field, path in input_files(scenario_data).items():
        try:
            digests[field] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            digests[field] = "unreadable"
    return digests


def _check_header(header: dict, path: Path, scenario_data: dict) -> None:
    """Refuse to resume a checkpoint of another scenario, or with fewer rounds than done."""
    if not _same(header["scenario"], scenario_data):
        diffs = scenario_differences(_comparable(header["scenario"]),
                                     _comparable(scenario_data)) or [
            "the same fields in another order; the order of devices sets the client ids"]
        shown = "; ".join(diffs[:DIFFERENCES_SHOWN])
        more = len(diffs) - DIFFERENCES_SHOWN
        if more > 0:
            shown += f"; {plural(more, 'more field')} differ{'s' if more == 1 else ''}"
        raise SflsimError(f"cannot resume {path.parent}: the scenario differs from the one it was "
                          f"started with ({shown}); resume with the same scenario "
                          f"or start afresh with --overwrite")
    for field, digest in input_digests(scenario_data).items():
        if header.get("inputs", {}).get(field, digest) != digest:
            raise SflsimError(f"cannot resume {path.parent}: the file of {field} "
                              f"({input_files(scenario_data)[field]}) "
                              f"changed since the run started; restore it, or start afresh "
                              f"with --overwrite")
    done, new = header["round"], _rounds(scenario_data)
    if new < done:
        raise SflsimError(f"cannot resume {path.parent} with training.rounds {new}: it has "
                          f"completed {plural(done, 'round')}; use {done} or more")


def check_resume_of(out: Path, scenario_data: dict) -> dict:
    """:func:`check_resume` of the run in ``out``. A run already complete for
    ``scenario_data``'s rounds has nothing to resume, and its checkpoint (a timing-only
    run keeps none; an older sflsim's cannot be read) is not needed: it is checked
    against its ``scenario.yaml`` instead, so that resuming it with another scenario
    names the difference too.

    Returns:
        The checkpoint's header (for a complete run, ``scenario`` and ``round``).
    """
    written = out / "scenario.yaml"
    try:
        import yaml

        done = json.loads((out / "summary.json").read_text())
        complete = (done.get("status") == "completed"
                    and done.get("rounds_completed") == _rounds(scenario_data))
        data = yaml.safe_load(written.read_text()) if complete else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        data = None
    if isinstance(data, dict):
        header = {"scenario": data, "round": done["rounds_completed"]}
        _check_header(header, out / CHECKPOINT, scenario_data)
        return header
    return check_resume(out / CHECKPOINT, scenario_data)


#: scenario fields that change how this host runs a scenario, never its results (tests
#: show them bit-identical), so a run may resume with other values
HOST_ONLY_FIELDS = (("training", "parallel_clients"), ("training", "parallel_backend"),
                    ("training", "ray_address"), ("training", "ray_cpus_per_actor"),
                    ("training", "ray_gpus_per_actor"), ("dataset", "storage"))


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
    rounds, see :func:`sflsim.checkpoint.load_checkpoint`)."""
    resolved = resolved_dump(data, stored=True) if isinstance(data, dict) else None
    data = _results_fields(data if resolved is None else resolved)
    if isinstance(data, dict) and isinstance(data.get("training"), dict):
        data["training"].pop("rounds", None)
    return data


def _same(old: object, new: object) -> bool:
    """Equal once resolved, including the order of mappings (device groups in order give
    client ids), but for what :func:`_comparable` leaves out."""
    return json.dumps(_comparable(old)) == json.dumps(_comparable(new))
