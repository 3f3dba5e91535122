"""FedScale's device traces as a fleet file and an availability trace.

FedScale (Lai et al., "FedScale: Benchmarking Model and System Performance of Federated
Learning at Scale", ICML 2022, arXiv:2105.11367) ships two pickled dicts keyed by client
id (SymbioticLab/FedScale, ``benchmark/dataset/data/device_info/README.md``):

- the capacity trace (``client_device_capacity``):
  ``{client_id: {"computation": ms per sample, "communication": kbit/s}}``;
- the behaviour trace (``client_behave_trace``): ``{client_id: {"duration": s,
  "active": [s, ...], "inactive": [s, ...], "finish_time": s, "model": name}}``.

How FedScale reads them (``fedscale/cloud/internal/client_metadata.py``,
``ClientMetadata``): ``computation`` is the inference latency in ms per sample and a
training step takes 3x it (``augmentation_factor=3.0``: forward + about 2x for the
backward pass); ``communication`` is in kbit/s with FedScale's model size in kbit taken
as bytes / 1024 x 8 (``fedscale/cloud/aggregation/aggregator.py``), so a kbit there is
1024 bits; a client is active at time t when ``active[k] <= t mod finish_time <=
inactive[k]`` for some k (``is_active``).

The conversion (:func:`convert`):

- ``train_s_per_sample = 3 x computation / 1000`` (s per training sample of the whole
  model); a run turns it into FLOP/s on its own model: the model's forward + backward
  FLOPs per sample / ``train_s_per_sample`` (:mod:`sflsim.fleet`);
- ``uplink_bps = downlink_bps = 1024 x communication`` (bit/s), one rate both ways as
  FedScale uses it; ``latency_s = 0`` (FedScale models none);
- availability: each interval ``[active[k], inactive[k]]`` repeated every
  ``finish_time`` seconds from 0 up to the horizon, one row per interval, ``device`` the
  client id of the fleet (its row order). Past the horizon no client is online.

The pickles are read by :class:`TraceUnpickler`, which builds plain containers and
numbers only and refuses every other global (no code runs while reading).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sflsim.errors import ConfigError
from sflsim.inputs.pickles import PLAIN, AllowlistUnpickler, ForbiddenGlobal
from sflsim.text import span

#: the only globals a trace pickle may name: plain builtin containers and numbers
ALLOWED = PLAIN


class TraceUnpickler(AllowlistUnpickler):
    """An unpickler that builds builtin containers and numbers only (:data:`ALLOWED`);
    any other class or function in the pickle (``os.system``, a numpy array, a
    user's class) raises :class:`ForbiddenType` before it is looked up
    (:class:`~sflsim.inputs.pickles.AllowlistUnpickler`)."""


#: a pickle names a class or function that :class:`TraceUnpickler` does not build
ForbiddenType = ForbiddenGlobal


def load_trace(path: str | Path, what: str) -> dict:
    """A FedScale trace pickle as a dict (read with :class:`TraceUnpickler`).

    Raises:
        ConfigError: the file is missing or unreadable, names anything but plain
            builtin types (one message, naming it; nothing is executed), or is not a dict.
    """
    p = Path(path)
    if not p.is_file():
        state = "is a folder, not a file" if p.is_dir() else "does not exist"
        raise ConfigError(f"--{what}: {str(path)!r} {state}; give FedScale's pickled "
                          f"{what} trace")
    try:
        data = TraceUnpickler(io.BytesIO(p.read_bytes())).load()
    except ForbiddenType as exc:
        raise ConfigError(f"--{what}: {path} refers to {exc}, which is not a plain builtin "
                          f"type; a FedScale trace holds only dicts, lists, numbers and "
                          f"strings, so it was refused unread") from None
    except Exception as exc:  # noqa: BLE001 (a truncated or foreign file: many kinds)
        raise ConfigError(f"--{what}: {path} is not a readable pickle (truncated, or another "
                          f"kind of file: {type(exc).__name__}: {exc}); give FedScale's "
                          f"pickled {what} trace") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"--{what}: {path} holds a {type(data).__name__}"
                          f"{' (empty)' if not data else ''}; expected a dict "
                          f"{{client_id: {{...}}}} with at least one client")
    return data


def _number(value: object, where: str, positive: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and value <= 0) or value < 0:
        valid = "a finite number > 0" if positive else "a finite number >= 0"
        raise ConfigError(f"{where}: {value!r}; valid: {valid}")
    return float(value)


def convert(capacity: dict, behaviour: dict, *, clients: int | None = None, seed: int = 0,
            horizon_s: float | None = None, profile: str | None = None,
            capacity_name: str = "capacity", behaviour_name: str = "behaviour"
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The fleet table and the availability table of FedScale's traces (module docstring).

    Args:
        capacity, behaviour: the two traces as dicts.
        clients: how many clients to keep, drawn without replacement from the ids in
            both traces (``seed``), kept in id order; None: all of them.
        horizon_s: seconds of availability to write; None: the longest ``finish_time``
            of the kept clients (each trace once).
        profile: a device profile whose memory and powers the rows take (compute and
            link come from the traces); None: no memory limit, 0 W.

    Raises:
        ConfigError: no client in both traces, more clients asked for than there are,
            or an entry that is not as FedScale's README describes (naming the trace,
            the client, the key and the value).
    """
    ids = sorted(set(capacity) & set(behaviour), key=lambda k: (str(type(k)), k))
    if not ids:
        raise ConfigError(f"--{capacity_name} and --{behaviour_name} share no client id; "
                          f"FedScale's two traces are keyed by the same ids")
    if clients is not None:
        if not 1 <= clients <= len(ids):
            raise ConfigError(f"--clients: {clients} is out of range; valid: "
                              f"{span(1, len(ids))} (the clients in both traces)")
        keep = np.sort(np.random.default_rng(seed).choice(len(ids), clients, replace=False))
        ids = [ids[i] for i in keep]
    train_s, bps, periods = [], [], []
    for cid in ids:
        cap, beh = capacity[cid], behaviour[cid]
        for trace, entry, keys in ((capacity_name, cap, ("computation", "communication")),
                                   (behaviour_name, beh, ("active", "inactive", "finish_time"))):
            if not isinstance(entry, dict):
                raise ConfigError(f"--{trace}: client {cid!r} is a {type(entry).__name__}; "
                                  f"valid: a dict with {', '.join(keys)}")
            missing = [k for k in keys if k not in entry]
            if missing:
                raise ConfigError(f"--{trace}: client {cid!r} has no {', '.join(missing)}; "
                                  f"valid: a dict with {', '.join(keys)}")
        train_s.append(3 * _number(cap["computation"], f"--{capacity_name}: client {cid!r}, "
                                   f"computation") / 1000)
        bps.append(1024 * _number(cap["communication"], f"--{capacity_name}: client {cid!r}, "
                                  f"communication"))
        where = f"--{behaviour_name}: client {cid!r}"
        period = _number(beh["finish_time"], f"{where}, finish_time")
        active, inactive = beh["active"], beh["inactive"]
        if not isinstance(active, (list, tuple)) or not isinstance(inactive, (list, tuple)) \
                or len(active) != len(inactive):
            raise ConfigError(f"{where}: active and inactive must be lists of equal length, "
                              f"got {type(active).__name__} and {type(inactive).__name__}")
        spans = [(_number(a, f"{where}, active", False), _number(b, f"{where}, inactive", False))
                 for a, b in zip(active, inactive)]
        for k, (a, b) in enumerate(spans):
            if b < a:  # FedScale's is_active would never be true: say so, not "always on"
                raise ConfigError(f"{where}: interval {k} is active {a:g} s to inactive {b:g} "
                                  f"s, which ends before it starts; valid: inactive[k] >= "
                                  f"active[k]")
        periods.append((period, spans))
    fleet = pd.DataFrame({"train_s_per_sample": train_s, "uplink_bps": bps,
                          "downlink_bps": bps, "latency_s": 0.0})
    if profile is not None:
        fleet.insert(0, "profile", profile)
    horizon = horizon_s if horizon_s is not None else max(p for p, _ in periods)
    dev, start, until = [], [], []
    for cid, (period, spans) in enumerate(periods):
        for k in range(int(math.ceil(horizon / period))):
            offset = k * period
            for a, b in spans:
                a, b = offset + min(a, period), offset + min(b, period)
                if b > a and a < horizon:
                    dev.append(cid)
                    start.append(a)
                    until.append(min(b, horizon))
    avail = pd.DataFrame({"device": dev, "online_from_s": start, "online_until_s": until})
    return fleet, avail


def availability_path(fleet_path: str | Path) -> Path:
    """Where the availability trace of a fleet written to ``fleet_path`` goes:
    ``<stem>_availability.csv`` beside it."""
    p = Path(fleet_path)
    return p.with_name(f"{p.stem}_availability.csv")
