"""Measured training steps as a CSV: what ``sflsim profile-host --steps`` writes and
``sflsim calibrate`` fits on.

One row per (device, model, batch size). Columns:

- ``model`` (required): a model name a scenario can give (``model.name``).
- ``input_shape`` (required): the per-sample input, ``CxHxW`` (e.g. ``3x224x224``), each
  1 to :data:`MAX_SIDE`.
- ``batch`` (required): samples per step (1 to :data:`MAX_BATCH`).
- ``seconds_per_batch`` (required): the measured seconds of one step (above 0, at most
  :data:`MAX_STEP_S`, one day).
- ``device``: the device's name (default: ``calibrate --device``).
- ``width``: the model's width multiplier (default 1; at most a scenario's ``model.width``).
- ``classes``: output classes (default 10; at most :data:`MAX_CLASSES`).
- ``phase``: ``train`` (forward, backward, optimizer; the default) or ``inference``.
- ``optimizer``: ``sgd`` (the default), ``sgd_momentum`` or ``adam``.
- ``threads``: the torch threads the step ran on (empty: not known, taken as several).
  One thread changes PyTorch's kernel for 1x1 convolutions below batch 16
  (:func:`sflsim.hardware.operator_cost.pointwise_rule`); a device's rows must agree on
  one thread or several.
- ``patch_size``, ``depth``, ``hidden_dim``, ``heads``, ``mlp_dim``: a ViT's sizes
  (``model: vit`` only; empty: the builder's default; bounded as a scenario's).
- ``source``: where the number comes from (free text).

Any other column is ignored (notes, a date), except one spelled close to a known column
(``patchsize``, ``optimiser``), which is refused as a likely typo. Rows that measure the
same step twice (a measurement repeated) are kept, each its own row, their labels told
apart by ``#2``, ``#3``... Nothing here imports torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from sflsim.errors import ConfigError

REQUIRED = ("model", "input_shape", "batch", "seconds_per_batch")
VIT_FIELDS = ("patch_size", "depth", "hidden_dim", "heads", "mlp_dim")
PHASES = ("train", "inference")
OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
COLUMNS = ("device", "model", "width", "input_shape", "classes", "batch", "phase", "optimizer",
           "threads", *VIT_FIELDS, "seconds_per_batch", "source")


@dataclass(frozen=True)
class StepRow:
    """One measured step (see the module docstring for the columns)."""

    device: str
    model: str
    input_shape: tuple[int, ...]
    batch: int
    seconds_per_batch: float
    width: float = 1.0
    classes: int = 10
    phase: str = "train"
    optimizer: str = "sgd"
    vit: dict[str, int] = field(default_factory=dict)
    #: torch threads the step ran on (None: not known)
    threads: int | None = None
    source: str = ""
    #: tells apart rows whose other fields give the same label ("#2"; see read_steps)
    tag: str = ""

    @property
    def architecture(self) -> str:
        """``model[ w0.5][ ViT sizes]``: the network, whatever its input and batch (the unit
        a leave-one-model-out test holds out)."""
        width = "" if self.width == 1 else f" w{self.width:g}"
        return f"{self.model}{width}" + "".join(f" {k}={v}" for k, v in self.vit.items())

    @property
    def label(self) -> str:
        """``device/architecture/3x32x32/b16[/inference]``: the row's name in reports."""
        phase = "" if self.phase == "train" else f"/{self.phase}"
        shape = "x".join(str(d) for d in self.input_shape)
        extra = "".join(f"/{v}" for v, default in ((self.optimizer, "sgd"),
                                                  (f"{self.classes} classes", "10 classes"))
                        if v != default)
        return (f"{self.device}/{self.architecture}/{shape}/b{self.batch}{phase}{extra}"
                f"{' ' + self.tag if self.tag else ''}")


#: The largest input side (and channel count) a row or ``sflsim profile-host`` takes, as a
#: scenario's synthetic image and ``profile-host --image-size``.
MAX_SIDE = 1024
#: The largest batch, class count and step time (s) a row takes: beyond them a row is a typo
#: (and a model or batch that big does not fit in memory).
MAX_BATCH = 100_000
MAX_CLASSES = 100_000
MAX_STEP_S = 86_400.0
#: The largest width multiplier (a scenario's ``model.width``; kept equal by a test).
MAX_WIDTH = 4.0


def _shape(text: str) -> tuple[int, ...]:
    parts = re.split(r"\s*[x×,]\s*", text.strip().strip("()[]"))
    dims = tuple(int(p) for p in parts)
    if len(dims) != 3 or min(dims) < 1 or max(dims) > MAX_SIDE:
        raise ValueError
    return dims


#: The largest ViT sizes a row takes: a scenario's (``model.*``; kept equal by a test).
VIT_MAX = {"patch_size": 1024, "depth": 1000, "hidden_dim": 65_536, "heads": 1024,
           "mlp_dim": 262_144}


def read_steps(path: str | Path, device: str | None = None) -> list[StepRow]:
    """Read and check a steps CSV.

    Args:
        path: the CSV file.
        device: the device of rows without a ``device`` column or value.

    Returns:
        The rows, in file order.

    Raises:
        ConfigError: the file is missing or not a CSV, a required column is missing,
            or a value is invalid (the message names the row, column, value and what is
            valid).
    """
    table = _read_table(path)
    if table.empty:
        raise ConfigError(f"steps CSV {path}: no rows")
    rows = [_row(rec, f"steps CSV {path}, row {k + 2}", device)  # the header is line 1
            for k, rec in enumerate(table.to_dict("records"))]
    seen: dict[str, int] = {}
    out = []
    for r in rows:  # a step measured again: its own row, its label told apart
        n = seen[r.label] = seen.get(r.label, 0) + 1
        out.append(r if n == 1 else replace(r, tag=f"#{n}"))
    return out


def _read_table(path: str | Path):
    """The CSV as text cells, its columns checked (see :func:`read_steps`)."""
    import difflib

    import pandas as pd

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"steps CSV {path} is a folder, not a file; give the CSV file")
    if not path.is_file():
        raise ConfigError(f"steps CSV {path}: no such file")
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, comment="#")
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        why = " ".join(str(exc).split())
        raise ConfigError(f"steps CSV {path}: not a readable CSV ({why})") from None
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise ConfigError(f"steps CSV {path}: missing {'column' if len(missing) == 1 else 'columns'} "
                          f"{', '.join(missing)}; "
                          f"required: {', '.join(REQUIRED)} (optional: device, width, classes, "
                          f"phase, optimizer, threads, {', '.join(VIT_FIELDS)}, source)")
    for col in table.columns:
        close = difflib.get_close_matches(str(col), COLUMNS, n=1, cutoff=0.8)
        if col not in COLUMNS and close:
            raise ConfigError(f"steps CSV {path}: unknown column {col!r}; did you mean "
                              f"{close[0]!r}? (columns: {', '.join(COLUMNS)})")
    return table


def check_appendable(path: str | Path) -> None:
    """Refuse to append rows to an existing file that is not a steps CSV with
    :func:`write_steps`'s columns (its header would not fit the rows).

    Raises:
        ConfigError: naming the file, its columns and the expected ones.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            header = next((line for line in f if not line.startswith("#")), "")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--steps {path}: cannot be read to append to ({exc})") from None
    columns = header.strip().split(",") if header.strip() else []
    if columns and columns != list(COLUMNS):
        missing = [c for c in COLUMNS if c not in columns]
        extra = [c for c in columns if c not in COLUMNS]
        why = "; ".join(part for part in (
            f"it lacks {', '.join(missing)}" if missing else "",
            f"it has {', '.join(extra)} besides" if extra else "",
            "its columns are in another order" if not (missing or extra) else "") if part)
        raise ConfigError(f"--steps {path} exists with other columns than this sflsim writes "
                          f"({why}; a file of an earlier sflsim lacks threads); rows are "
                          f"appended only to a file with the columns {','.join(COLUMNS)}; give "
                          f"a new file, or add the missing columns to it")


def _positive_int(t: str, most: float = math.inf) -> int:
    f = float(t)
    if not math.isfinite(f) or f < 1 or f != int(f) or f > most:
        raise ValueError
    return int(f)


def _positive_float(t: str, most: float = math.inf) -> float:
    v = float(t)
    if not math.isfinite(v) or v <= 0 or v > most:
        raise ValueError
    return v


def _up_to(convert, most: float):
    return lambda t: convert(t, most)


def _choice(options: tuple[str, ...]):
    def check(t: str) -> str:
        if t not in options:
            raise ValueError
        return t
    return check


def _row(rec: dict, where: str, device: str | None) -> StepRow:
    """One CSV record (text cells) as a :class:`StepRow`; ``where`` names it in errors."""

    def value(col: str, convert, valid: str, default=None):
        text = str(rec.get(col, "")).strip()
        if text == "":
            if default is None:
                raise ConfigError(f"{where}: {col} is empty; valid: {valid}")
            return default
        try:
            return convert(text)
        except (ValueError, TypeError):
            raise ConfigError(f"{where}: {col} = {text!r}; valid: {valid}") from None

    name = value("device", str, "a device name (or give calibrate --device)", device or "")
    if not name:
        raise ConfigError(f"{where}: device is empty; give a device column or "
                          f"calibrate --device NAME")
    vit = {f: value(f, _up_to(_positive_int, VIT_MAX[f]),
                    f"a whole number from 1 to {VIT_MAX[f]}", 0) for f in VIT_FIELDS}
    return StepRow(
        device=name,
        model=value("model", str, "a model name, e.g. resnet18"),
        input_shape=value("input_shape", _shape,
                          f"CxHxW with whole numbers from 1 to {MAX_SIDE}, e.g. 3x224x224"),
        batch=value("batch", _up_to(_positive_int, MAX_BATCH),
                    f"a whole number from 1 to {MAX_BATCH}"),
        seconds_per_batch=value("seconds_per_batch", _up_to(_positive_float, MAX_STEP_S),
                                f"a number of seconds above 0 and at most {MAX_STEP_S:g} "
                                f"(one day)"),
        width=value("width", _up_to(_positive_float, MAX_WIDTH),
                    f"a number above 0 and at most {MAX_WIDTH:g}", 1.0),
        classes=value("classes", _up_to(_positive_int, MAX_CLASSES),
                      f"a whole number from 1 to {MAX_CLASSES}", 10),
        phase=value("phase", _choice(PHASES), " or ".join(PHASES), "train"),
        optimizer=value("optimizer", _choice(OPTIMIZERS), ", ".join(OPTIMIZERS), "sgd"),
        vit={f: v for f, v in vit.items() if v},
        threads=value("threads", _positive_int, "a whole number >= 1, or empty", 0) or None,
        source=str(rec.get("source", "")).strip(),
    )


def write_steps(path: str | Path, rows: list[StepRow], append: bool = False) -> None:
    """Write ``rows`` as a steps CSV (appending to an existing file when ``append``)."""
    import pandas as pd

    records = [{"device": r.device, "model": r.model, "width": r.width,
                "input_shape": "x".join(str(d) for d in r.input_shape), "classes": r.classes,
                "batch": r.batch, "phase": r.phase, "optimizer": r.optimizer,
                "threads": r.threads or "", **{f: r.vit.get(f, "") for f in VIT_FIELDS},
                "seconds_per_batch": f"{r.seconds_per_batch:.6g}", "source": r.source}
               for r in rows]
    path = Path(path)
    exists = append and path.is_file()
    if exists:  # a file of nothing but comments or blank lines takes the header too
        with open(path, encoding="utf-8") as f:
            exists = any(line.strip() and not line.startswith("#") for line in f)
    pd.DataFrame.from_records(records, columns=list(COLUMNS)).to_csv(
        path, mode="a" if append and path.is_file() else "w", header=not exists, index=False)
