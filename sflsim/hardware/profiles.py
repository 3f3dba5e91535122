"""Hardware profiles: devices, links and servers as data files with units and sources.

Profiles live in ``device_profiles/{devices,links,servers}/<name>.yaml``. Every
number is written as ``{value: "16 GFLOPS", basis: measured|nominal|derived,
source: "..."}`` so that a reader can check where it comes from. Scenarios only
refer to profiles by name and say how many of each.

The search path is ``$SFLSIM_PROFILE_PATH`` (``os.pathsep``-separated folders,
each holding ``devices/``, ``links/``, ``servers/``), then the shipped library: the
repository's ``device_profiles/``, which an installed wheel carries as
``sflsim/device_profiles/`` (:mod:`sflsim.shipped`).
"""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, ValidationError, model_validator

from sflsim.errors import ConfigError
from sflsim.hardware.operator_cost import OperatorParams
from sflsim.inputs.messages import format_validation_error
from sflsim.inputs.quantities import (
    FROZEN,
    BandwidthBps,
    Bytes,
    FlopsPerS,
    PowerW,
    TimeS,
    WholeNumber,
    out_of_range,
)
from sflsim.inputs.yaml_files import read_yaml_mapping
from sflsim.shipped import profiles_dir
from sflsim.text import plural

Basis = Literal["measured", "nominal", "derived", "fitted"]
KINDS = ("devices", "links", "servers")
#: the shipped profile library: the checkout's ``device_profiles/`` or a wheel's copy
SHIPPED_PROFILES = profiles_dir()


def _positive(v: float) -> float:
    if not v > 0:
        raise out_of_range("greater than 0")
    return v


# A profile describes real hardware: zero latency or zero power is a mistake in the file, not a
# modelling choice (a scenario can still set latency_s: 0 in a link_override).
ProfileTimeS = Annotated[TimeS, AfterValidator(_positive)]
ProfilePowerW = Annotated[PowerW, AfterValidator(_positive)]


class _Sourced(BaseModel):
    model_config = FROZEN
    basis: Basis
    source: str
    note: str | None = None


class SourcedFlops(_Sourced):
    value: FlopsPerS


class SourcedBandwidth(_Sourced):
    value: BandwidthBps


class SourcedTime(_Sourced):
    value: ProfileTimeS


class SourcedBytes(_Sourced):
    value: Bytes


class SourcedPower(_Sourced):
    value: ProfilePowerW


class SourcedBatch(_Sourced):
    value: Annotated[int, Field(ge=0, le=1 << 20, strict=True)]


def _finite_positive_list(v: list[float]) -> list[float]:
    if not v:
        raise ValueError("must list at least one time")
    for t in v:
        if not math.isfinite(t) or not t > 0:
            raise ValueError(f"every time must be a finite number greater than 0, got {t!r}")
    return v


StageTimes = Annotated[list[float], AfterValidator(_finite_positive_list)]


class StageLatency(BaseModel):
    """Measured seconds per stage of one model at one batch size on this device.

    ``forward_s[k]`` and ``backward_s[k]`` are stage ``k+1``'s forward and backward
    times for a whole batch of ``batch_size``; ``update_s[k]`` its optimizer update and
    ``exit_head_s[k]`` the exit head after it (optional); see :mod:`sflsim.hardware.latency`.
    """

    model_config = FROZEN
    model: str
    width: float = Field(gt=0)
    input: tuple[int, ...]
    batch_size: WholeNumber = Field(ge=1)
    forward_s: StageTimes
    backward_s: StageTimes
    #: optimizer (Adam) update of each stage's parameters; omitted = neglected
    update_s: StageTimes | None = None
    #: exit head after each stage: forward, loss, backward and its update; omitted = neglected
    exit_head_s: StageTimes | None = None
    basis: Basis
    source: str
    note: str | None = None

    @model_validator(mode="after")
    def _same_length(self) -> StageLatency:
        for field in ("backward_s", "update_s", "exit_head_s"):
            times = getattr(self, field)
            if times is not None and len(times) != len(self.forward_s):
                raise ValueError(f"forward_s has {plural(len(self.forward_s), 'stage')} but {field} has "
                                 f"{len(times)}")
        return self


class OperatorCosts(BaseModel):
    """A device's parameters of the cost model by operation
    (:mod:`sflsim.hardware.operator_cost`), each with its value, unit, basis and source.

    ``fitted_on`` names the measured rows the parameters were fitted on (``sflsim
    calibrate``) and ``held_out_error`` the relative error of each model left out of the
    fit, ``{"device/model/batch": (predicted - measured) / measured}``.
    """

    model_config = FROZEN
    conv_flops: SourcedFlops
    grouped_conv_flops: SourcedFlops
    matmul_flops: SourcedFlops
    elementwise_flops: SourcedFlops
    memory_bandwidth_bps: SourcedBandwidth
    per_operator_s: SourcedTime
    per_batch_s: SourcedTime
    #: below this batch, 1x1 stride-1 convolutions read their weights once per sample
    #: (:attr:`sflsim.hardware.operator_cost.OperatorParams.pointwise_per_sample_below_batch`);
    #: absent: 0, never
    pointwise_per_sample_below_batch: SourcedBatch | None = None
    fitted_on: list[str] = []
    held_out_error: dict[str, float] = {}

    def params(self) -> OperatorParams:
        """The parameters as plain SI floats."""
        return OperatorParams(
            rates_flops=(self.conv_flops.value, self.grouped_conv_flops.value,
                         self.matmul_flops.value, self.elementwise_flops.value),
            memory_bandwidth_bps=self.memory_bandwidth_bps.value,
            per_operator_s=self.per_operator_s.value, per_batch_s=self.per_batch_s.value,
            pointwise_per_sample_below_batch=(self.pointwise_per_sample_below_batch.value
                                              if self.pointwise_per_sample_below_batch else 0))


class DeviceProfile(BaseModel):
    """An IoT device: sustained training throughput, memory and power.

    ``sustained_flops`` is what training really achieves (FLOP/s, 2 FLOPs per
    multiply-add), not the datasheet peak: the FLOPs-only reading
    (``hardware.cost_model: flops``). ``operator_costs`` optionally holds the
    parameters of the cost model by operation (``hardware.cost_model: operators``,
    :mod:`sflsim.hardware.operator_cost`). ``stage_latency`` optionally holds
    measured per-stage times of named models, which win over both
    (:mod:`sflsim.hardware.latency`).
    """

    model_config = FROZEN
    name: str
    description: str
    sustained_flops: SourcedFlops
    memory_bytes: SourcedBytes
    active_power_w: SourcedPower
    idle_power_w: SourcedPower
    radio_tx_power_w: SourcedPower
    radio_rx_power_w: SourcedPower
    operator_costs: OperatorCosts | None = None
    stage_latency: list[StageLatency] | None = None


class LinkProfile(BaseModel):
    """A network link between a device and the server (one direction each way)."""

    model_config = FROZEN
    name: str
    description: str
    uplink_bps: SourcedBandwidth
    downlink_bps: SourcedBandwidth
    latency_s: SourcedTime


class ServerProfile(BaseModel):
    """The server accelerator: sustained throughput of one job, concurrent slots."""

    model_config = FROZEN
    name: str
    description: str
    sustained_flops: SourcedFlops
    memory_bytes: SourcedBytes
    active_power_w: SourcedPower
    idle_power_w: SourcedPower
    slots: WholeNumber = Field(default=1, ge=1)


_MODELS: dict[str, type[BaseModel]] = {
    "devices": DeviceProfile, "links": LinkProfile, "servers": ServerProfile,
}


def profile_dirs() -> list[Path]:
    """Folders searched for profiles, in order (see module docstring). A folder of
    ``$SFLSIM_PROFILE_PATH`` that is missing, or holds none of the kinds' folders, is
    searched all the same (it may be filled later) and warned about once
    (:func:`_warn_profile_dir`)."""
    extra = [Path(p) for p in os.environ.get("SFLSIM_PROFILE_PATH", "").split(os.pathsep) if p]
    for folder in extra:
        _warn_profile_dir(folder)
    return [*extra, SHIPPED_PROFILES]


#: the ``$SFLSIM_PROFILE_PATH`` folders already warned about (once per process)
_WARNED: set[str] = set()


def _warn_profile_dir(folder: Path) -> None:
    """Say on standard error, once, that a folder of ``$SFLSIM_PROFILE_PATH`` can hold no
    profile: it does not exist, is a file, or has no ``devices/``, ``links/`` or
    ``servers/`` in it (a path to ``devices/`` itself, say)."""
    if str(folder) in _WARNED:
        return
    if not folder.exists():
        problem = "which does not exist"
    elif not folder.is_dir():
        problem = "which is a file, not a folder"
    elif not any((folder / kind).is_dir() for kind in KINDS):
        problem = (f"which holds none of {', '.join(f'{k}/' for k in KINDS)} (a profile goes "
                   f"in one of them, e.g. {folder / 'devices' / 'myboard.yaml'})")
    else:
        return
    _WARNED.add(str(folder))
    print(f"warning: SFLSIM_PROFILE_PATH names {folder}, {problem}; no profile is found "
          f"there", file=sys.stderr)


def _described(folder: Path) -> str:
    """``folder`` for an error message, marked if it does not exist."""
    return str(folder) if folder.is_dir() else f"{folder} (no such folder)"


def available(kind: str) -> list[str]:
    """Names of the profiles of ``kind`` ("devices", "links" or "servers")."""
    names = {p.stem for d in profile_dirs() for p in (d / kind).glob("*.yaml")}
    return sorted(names)


def profile_path(kind: str, name: str) -> Path | None:
    """The file the profile ``name`` of ``kind`` is read from (the first folder of
    :func:`profile_dirs` that has it), None if none has."""
    for folder in profile_dirs():
        path = folder / kind / f"{name}.yaml"
        if path.is_file():
            return path
    return None


@cache
def load_profile(kind: str, name: str) -> BaseModel:
    """Load the profile ``name`` of ``kind``.

    Raises:
        ConfigError: no such profile (the message lists the valid names and the
            closest match), or the file is not a valid profile.
    """
    for folder in profile_dirs():
        path = folder / kind / f"{name}.yaml"
        if path.is_file():
            break
    else:
        names = available(kind)
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        if "/" in name or name.endswith((".yaml", ".yml")):  # a file given for a name
            hint += (f" A scenario names a profile, not its file: put {Path(name).name} in "
                     f"DIR/{kind}/, add DIR to SFLSIM_PROFILE_PATH and give "
                     f"{Path(name).stem!r}.")
        raise ConfigError(
            f"unknown {kind[:-1]} profile {name!r}.{hint} Valid: {', '.join(names) or 'none'} "
            f"(searched {', '.join(_described(d / kind) for d in profile_dirs())})"
        )
    # the scenario reader: not UTF-8, bad YAML, Python tags, repeated keys -> one line
    data = read_yaml_mapping(path, what="profile")
    try:
        return _MODELS[kind].model_validate({"name": name, **data})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, f"profile {path}", _MODELS[kind])) from None


@contextlib.contextmanager
def searched_first(folder: Path | None) -> Iterator[None]:
    """Within the block, look for profiles in ``folder`` (holding ``devices/``,
    ``links/``, ``servers/``) before every other folder; ``None`` changes nothing. A run's
    results folder keeps the profiles it ran with this way (``profiles/``)."""
    if folder is None:
        yield
        return
    saved = os.environ.get("SFLSIM_PROFILE_PATH")
    os.environ["SFLSIM_PROFILE_PATH"] = os.pathsep.join(p for p in (str(folder), saved) if p)
    load_profile.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["SFLSIM_PROFILE_PATH"]
        else:
            os.environ["SFLSIM_PROFILE_PATH"] = saved
        load_profile.cache_clear()


def device_profile(name: str) -> DeviceProfile:
    return load_profile("devices", name)  # type: ignore[return-value]


def link_profile(name: str) -> LinkProfile:
    return load_profile("links", name)  # type: ignore[return-value]


def server_profile(name: str) -> ServerProfile:
    return load_profile("servers", name)  # type: ignore[return-value]
