"""The checkpoint's header, read without torch: whether a run can be resumed.

:func:`sflsim.checkpoint.save_checkpoint` pickles a small header (the scenario, the
rounds completed, the simulated clock, the learning-rate horizon) before the models, so
that a resume of another scenario, of fewer rounds than done, or from a missing or
older checkpoint is refused here, in a second, before torch loads.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import IO

from sflsim.config.load import scenario_differences
from sflsim.config.resolve import resolved_dump
from sflsim.errors import SflsimError
from sflsim.text import plural

CHECKPOINT = "checkpoint.pkl"
#: fields that differ named in a refused resume (the rest are counted)
DIFFERENCES_SHOWN = 3
#: bump when the checkpoint layout changes; older files are refused with a message
VERSION = 6  # 6: the trace held as rows, the tables on disk a round at a time;
#: 5: images held as uint8; the algorithm keeps augmentation generators;
#: 4: Centralized keeps the clients whose data arrived; 3: channels-last
#: models carry the oneDNN#6035 guard; FedSGA switches


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
    """Refuse a resume that :func:`sflsim.checkpoint.load_checkpoint` would refuse, from the checkpoint's
    small header alone (the models are not unpickled): so that the CLI says so before it
    announces the run.

    Returns:
        The header: ``version``, ``scenario`` (the dump it was saved with), ``round``
        (rounds completed), ``sim_now_s`` and ``lr_horizon_rounds`` (the rounds the
        learning-rate schedule runs over: the run's first ``training.rounds``, whatever
        resumes changed since; absent in checkpoints of older sflsim versions).

    Raises:
        SflsimError: as :func:`sflsim.checkpoint.load_checkpoint`, but for damage past the header.
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


def _require_file(path: Path) -> None:
    """Refuse a checkpoint that is not there, saying why there may be none and how on."""
    if not path.is_file():
        how = ("start afresh with --overwrite (it replaces the results there)"
               if path.parent.is_dir() and any(path.parent.iterdir())
               else "run without --resume to start afresh")
        raise SflsimError(f"{path.parent} has no checkpoint ({path.name}) to resume from "
                          f"(no round had finished, or the run was timing-only); {how}")


def damaged(path: Path) -> SflsimError:
    """The refusal of a checkpoint whose bytes do not unpickle (truncated, overwritten,
    another file under its name): what it is and how on, without the unpickler's words."""
    return SflsimError(f"cannot read checkpoint {path}: the file is damaged or not an sflsim "
                       f"checkpoint; start afresh with --overwrite (it replaces the results in "
                       f"{path.parent})")


def _read_header(stream: IO[bytes], path: Path) -> dict:
    """The header pickled first by :func:`save_checkpoint` (the stream is left after it)."""
    try:
        header = pickle.load(stream)
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


def input_digests(scenario_data: dict) -> dict[str, str]:
    """SHA-256 of each input file a run reads whose contents its scenario does not hold
    (``conditions.availability``), by field; a resumed run must read the same bytes."""
    import hashlib

    path = (scenario_data.get("conditions") or {}).get("availability")
    if not path:
        return {}
    try:
        return {"conditions.availability": hashlib.sha256(Path(path).read_bytes()).hexdigest()}
    except OSError:
        return {"conditions.availability": "unreadable"}


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
                              f"({(scenario_data.get('conditions') or {}).get('availability')}) "
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
