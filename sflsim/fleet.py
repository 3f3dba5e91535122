"""Fleet files: one row per device, an alternative to ``devices:`` groups.

A scenario gives ``fleet: FILE`` (CSV, or Parquet when the name ends in ``.parquet``)
instead of ``devices:``; client ``i`` is the file's ``i``-th device row. Columns (any
order; a column may be left out, a cell left empty):

- compute: ``profile`` (a device profile name) and/or ``flops_per_s`` (sustained
  training FLOP/s) or ``train_s_per_sample`` (seconds to train one sample through the
  whole model: converted to FLOP/s on the scenario's model, its forward + backward FLOPs
  per sample / this); ``memory_bytes``, ``active_power_w``, ``idle_power_w``,
  ``radio_tx_power_w``, ``radio_rx_power_w``. A figure given overrides the profile's;
  without a profile, memory defaults to unlimited (no memory check) and powers to 0 W
  (no energy counted). A row needs a profile or a compute figure. A device with
  ``flops_per_s`` or ``train_s_per_sample`` drops its profile's measured stage latencies.
- link: ``link`` (a link profile name) and/or ``uplink_bps``, ``downlink_bps``,
  ``latency_s`` (one-way); figures override the profile's; without a profile all three
  are needed.
- ``group``: a label (default: the row's profile name, else ``fleet``); the clients and
  events tables, ``server.priorities`` and availability traces name it.
- ``end_layer``: the cut layer (default: the scenario's ``fleet_end_layer``, 1 unless set).
- ``availability``: a label an availability trace's ``device`` column may name (every
  client whose row carries it), besides group names and client ids.

Units as everywhere in sflsim (:mod:`sflsim.units`): a bare number is SI (bit/s, s,
bytes, FLOP/s, W); text may carry a unit (``"5 Mbit/s"``, ``"20 ms"``). Rows are counted
as a spreadsheet shows them: the CSV header is row 1, the first device row 2 (Parquet
likewise: its first record is row 2). A bad cell raises one
:class:`~sflsim.errors.ConfigError` naming the file, the row, the column, the value and
what is valid.

The table is read column by column into numpy arrays (no object per row), so a fleet of
100,000 devices loads in about a second; :func:`load_fleet` keeps it per file (path,
size and modification time) for the life of the process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from sflsim.errors import ConfigError
from sflsim.inputs.csv_files import check_csv_shape
from sflsim.inputs.quantities import PLAUSIBLE, bare_number_warning
from sflsim.shipped import input_file, trace_path
from sflsim.text import as_written, did_you_mean, plural
from sflsim.units import NOUNS, UnknownUnit, parse_quantity

#: quantity columns -> (dimension, smallest valid value, what is valid)
QUANTITIES: dict[str, tuple[str, float, str]] = {
    "flops_per_s": ("flops", 0.0, 'FLOP/s above 0, e.g. 25e9 or "25 GFLOPS"'),
    "train_s_per_sample": ("time", 0.0, 'seconds above 0, e.g. 0.02 or "20 ms"'),
    "memory_bytes": ("bytes", 0.0, 'bytes above 0, e.g. 6442450944 or "6 GiB"'),
    "active_power_w": ("power", -1.0, 'watts >= 0, e.g. 4 or "4 W"'),
    "idle_power_w": ("power", -1.0, 'watts >= 0, e.g. 0.5 or "500 mW"'),
    "radio_tx_power_w": ("power", -1.0, 'watts >= 0, e.g. 2.5 or "2.5 W"'),
    "radio_rx_power_w": ("power", -1.0, 'watts >= 0, e.g. 1.5 or "1.5 W"'),
    "uplink_bps": ("bandwidth", 1.0, 'bit/s of at least 1, e.g. 5e6 or "5 Mbit/s"'),
    "downlink_bps": ("bandwidth", 1.0, 'bit/s of at least 1, e.g. 20e6 or "20 Mbit/s"'),
    "latency_s": ("time", -1.0, 'seconds >= 0, e.g. 0.02 or "20 ms"'),
}
TEXT = ("profile", "link", "group", "availability")
COLUMNS = (*TEXT, *QUANTITIES, "end_layer")
POWERS = ("active_power_w", "idle_power_w", "radio_tx_power_w", "radio_rx_power_w")
#: the ``profile`` recorded for a device given by figures alone
CUSTOM = "custom"


class Figure(NamedTuple):
    """A profile figure as :class:`~sflsim.hardware.profiles.DeviceProfile` holds it
    (``.value``, SI)."""

    value: float


@dataclass(eq=False)
class FleetDevice:
    """A device of a fleet row, read as a :class:`~sflsim.hardware.profiles.DeviceProfile`
    is (the attributes the simulator reads, each figure's ``.value`` in SI)."""

    name: str
    sustained_flops: Figure
    memory_bytes: Figure
    active_power_w: Figure
    idle_power_w: Figure
    radio_tx_power_w: Figure
    radio_rx_power_w: Figure
    stage_latency: list | None = None
    #: the profile's cost model by operation (rows that keep the profile's compute)
    operator_costs: object | None = None


@dataclass(eq=False)
class Fleet:
    """A fleet file as arrays, one entry per client (see the module docstring).

    Quantities are SI floats; NaN in ``flops_per_s`` means "from ``train_s_per_sample``".
    """

    path: str
    num_clients: int
    #: group index of each client into :attr:`group_names` (order of first appearance)
    group: np.ndarray
    group_names: tuple[str, ...]
    #: profile name per client (None: figures only)
    profile: np.ndarray
    end_layer: np.ndarray  # 0: the scenario's fleet_end_layer
    availability: np.ndarray | None
    figures: dict[str, np.ndarray]
    #: whether the row overrides any device figure of its profile
    overridden: np.ndarray
    #: bare numbers far outside what any shipped profile has (``uplink_bps`` ``5`` is
    #: 5 bit/s; :func:`_bare_number_warning`) and device figures more than 10x outside
    #: the shipped devices' range (:func:`_range_warning`), one warning per column and kind
    warnings: tuple[str, ...] = ()

    def client_groups(self) -> dict[str, list[int]]:
        """``{group: client ids}``, then ``{availability label: client ids}``.

        Raises:
            ConfigError: an availability label that is also a group name.
        """
        out = {name: np.flatnonzero(self.group == k).tolist()
               for k, name in enumerate(self.group_names)}
        if self.availability is not None:
            labels = pd.Series(self.availability).dropna()
            for label, ids in labels.groupby(labels).groups.items():
                if label in out:
                    raise ConfigError(f"fleet: {self.path}, availability: {label!r} is also a "
                                      f"group name; give the availability label another name")
                out[str(label)] = [int(i) for i in ids]
        return out

    def end_layers(self, default: int) -> np.ndarray:
        """Each client's end layer (``default`` where the row gives none)."""
        return np.where(self.end_layer > 0, self.end_layer, default)

    def row(self, client_id: int) -> int:
        """The row (as a spreadsheet counts: header row 1) of ``client_id``."""
        return client_id + 2

    def devices(self, whole_model_flops_per_sample: float | None = None) -> list:
        """One device object per client: the profile itself for a row that overrides
        none of its figures, else a :class:`FleetDevice`.

        Args:
            whole_model_flops_per_sample: forward + backward FLOPs of one sample through
                the scenario's whole model (converts ``train_s_per_sample`` to FLOP/s).
        """
        from sflsim.hardware import profiles

        f = self.figures
        flops = f["flops_per_s"]
        if np.isnan(flops).any():
            flops = np.where(np.isnan(flops),
                             (whole_model_flops_per_sample or math.nan) / f["train_s_per_sample"],
                             flops)
        cache: dict[float, Figure] = {}

        def fig(v: float) -> Figure:
            got = cache.get(v)
            if got is None:
                got = cache[v] = Figure(v)
            return got

        cols = [flops.tolist(), *(f[c].tolist() for c in ("memory_bytes", *POWERS))]
        out: list = []
        for i, name in enumerate(self.profile.tolist()):
            if name is not None and not self.overridden[i]:
                out.append(profiles.device_profile(name))
                continue
            latency = operators = None
            if name is not None and math.isnan(f["flops_per_s_given"][i]) \
                    and math.isnan(f["train_s_per_sample"][i]):
                profile = profiles.device_profile(name)
                latency, operators = profile.stage_latency, profile.operator_costs
            out.append(FleetDevice(name or CUSTOM, *(fig(c[i]) for c in cols), latency,
                                   operators))
        return out


#: a cell that reads as a number that is not finite (``nan``, ``-inf``, ``Infinity``)
_NOT_FINITE = r"[-+]?(?:nan|inf|infinity)"


def _where(path: object, row: int, column: str) -> str:
    return f"fleet: {path} row {row}, {column}"


def _quantity(column: str, series: pd.Series, path: object, first_row: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """A quantity column as SI floats (NaN where empty), checked, and which of its cells
    were bare numbers (no unit: read in the SI unit)."""
    dimension, low, valid = QUANTITIES[column]
    if pd.api.types.is_bool_dtype(series):
        raise ConfigError(f"{_where(path, first_row, column)}: "
                          f"{str(bool(series.iat[0])).lower()} is not a quantity; valid: {valid}")
    if pd.api.types.is_numeric_dtype(series):
        values = series.to_numpy(dtype=float, copy=True)
        bare = ~np.isnan(values)
    else:
        text = series.astype(object).where(series.notna(), "").astype(str).str.strip()
        values = np.array(pd.to_numeric(text, errors="coerce"), dtype=float)
        bare = ~np.isnan(values)
        not_finite = np.flatnonzero(text.str.fullmatch(_NOT_FINITE, case=False).to_numpy(bool))
        if len(not_finite):  # nan, inf as written: the range is what they miss
            i = int(not_finite[0])
            raise ConfigError(f"{_where(path, i + first_row, column)}: {text.iat[i]} is out of "
                              f"range; valid: {valid}")
        # NaN from text that is not a plain number: parse its units, once per distinct text
        todo = np.flatnonzero(np.isnan(values) & (text != "").to_numpy())
        parsed: dict[str, float] = {}
        for i in todo:
            cell = text.iat[i]
            if cell not in parsed:
                where = _where(path, i + first_row, column)
                try:
                    parsed[cell] = parse_quantity(cell, dimension)
                except UnknownUnit as exc:  # it lists the valid units
                    raise ConfigError(f"{where}: {exc}") from None
                except ValueError:
                    raise ConfigError(f"{where}: cannot read {as_written(cell)} as "
                                      f"{NOUNS[dimension]}; valid: {valid}") from None
            values[i] = parsed[cell]
    given = ~np.isnan(values)
    if low == 1.0:
        ok = values >= 1.0
    elif low == 0.0:
        ok = values > 0.0
    else:
        ok = values >= 0.0
    bad = given & ~(np.isfinite(values) & ok)
    if bad.any():
        rows = np.flatnonzero(bad)
        more = f" (and {plural(len(rows) - 1, 'more row')})" if len(rows) > 1 else ""
        raise ConfigError(f"{_where(path, int(rows[0]) + first_row, column)}: "
                          f"{values[rows[0]]:g} is out of range; valid: {valid}{more}")
    return values, bare


def _implausible_bare(column: str, values: np.ndarray, bare: np.ndarray) -> np.ndarray:
    """Which cells of a quantity column are bare numbers far outside what any shipped
    profile has (:data:`sflsim.inputs.quantities.PLAUSIBLE`: ``5`` in ``uplink_bps``)."""
    dimension = QUANTITIES[column][0]
    implausible = np.zeros(len(values), dtype=bool)
    for rule in PLAUSIBLE:
        if rule.dimension != dimension or (
                rule.field_suffix is not None and not column.endswith(rule.field_suffix)):
            continue
        if rule.low is not None:
            implausible |= bare & (values < rule.low)
        if rule.high is not None:
            implausible |= bare & (values > rule.high)
    return implausible


def _first_of(rows: np.ndarray, message: str | None) -> str | None:
    """``message`` (about the first of ``rows``) with how many more rows are like it."""
    more = f" ({plural(len(rows) - 1, 'more row')} like it)" if len(rows) > 1 else ""
    return None if message is None else message + more


def _bare_number_warning(path: object, column: str, values: np.ndarray, bare: np.ndarray,
                         first_row: int) -> str | None:
    """The warning of the first bare number of a quantity column far outside what any
    shipped profile has (:func:`sflsim.inputs.quantities.bare_number_warning`: ``5`` in
    ``uplink_bps`` is 5 bit/s), with how many more rows have one; None if none has."""
    rows = np.flatnonzero(_implausible_bare(column, values, bare))
    if not len(rows):
        return None
    return _first_of(rows, bare_number_warning(_where(path, int(rows[0]) + first_row, column),
                                               column, QUANTITIES[column][0],
                                               float(values[rows[0]])))


def _range_warning(path: object, column: str, values: np.ndarray, bare: np.ndarray,
                   first_row: int) -> str | None:
    """The warning of the first device figure of a column more than 10x outside the
    shipped devices' range (:func:`sflsim.hardware.plausible.far_outside`), with how many
    more rows have one; None if none has, or if its warning is the one on units."""
    from sflsim.hardware import plausible

    rows = np.flatnonzero(plausible.far_outside(column, values)
                          & ~_implausible_bare(column, values, bare))
    if not len(rows):
        return None
    return _first_of(rows, plausible.range_warning(
        "devices", plausible.FLEET_FIELDS[column], float(values[rows[0]]),
        _where(path, int(rows[0]) + first_row, column)))


def _text(series: pd.Series) -> np.ndarray:
    """A text column as an object array, None where empty."""
    # built in Python: pandas turns a None that .where or .map returns back into NaN
    return np.array([None if pd.isna(v) or str(v).strip() == "" else str(v).strip()
                     for v in series.astype(object).tolist()], dtype=object)


def read_table(path: str | Path) -> tuple[pd.DataFrame, Path]:
    """The fleet table as read (text cells kept as text), and where it was found.

    Raises:
        ConfigError: missing, unreadable, empty, or with an unknown column.
    """
    p = input_file("fleet", path, f"a CSV or Parquet file with one row per device (columns: "
                                  f"{', '.join(COLUMNS)})")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            table = pd.read_parquet(p)
        else:
            check_csv_shape(p, f"fleet: {path}", f"a header row naming its columns (e.g. "
                                                 f"profile,link; any of {', '.join(COLUMNS)}), "
                                                 f"then one row per device")
            # numbers parse as floats (fast); text, units and empty cells stay text;
            # index_col=False: a row's first cell is never taken as an index
            table = pd.read_csv(p, dtype={c: str for c in (*TEXT, "end_layer")},
                                keep_default_na=False,
                                na_values=[""], encoding="utf-8-sig", skipinitialspace=True,
                                index_col=False)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 (pandas and pyarrow raise many kinds)
        raise ConfigError(f"fleet: cannot read {path}: {str(exc).splitlines()[0]}") from None
    table.columns = [str(c).strip() for c in table.columns]
    unknown = [c for c in table.columns if c not in COLUMNS]
    if unknown:
        raise ConfigError(f"fleet: {path} row 1, {unknown[0]}: unknown column"
                          f"{did_you_mean(unknown[0], list(COLUMNS))} (valid: {', '.join(COLUMNS)})")
    if not len(table):
        raise ConfigError(f"fleet: {path} has no device rows; give one row per device")
    return table, p


def read_fleet(path: str | Path) -> Fleet:
    """Read and check a fleet file (see the module docstring), resolving profile names.

    Raises:
        ConfigError: the file is missing or unreadable, a column is unknown, a cell is
            not valid (naming the row, the column, the value and what is valid), a
            profile or link name is unknown, a row has no compute or link figures.
    """
    table, _ = read_table(path)
    n, first = len(table), 2
    col = {c: table[c] for c in table.columns}
    empty_text = np.full(n, None, dtype=object)
    text = {c: _text(col[c]) if c in col else empty_text for c in TEXT}
    figures, warnings = _read_figures(path, col, n, first)
    device_cols = ("flops_per_s", "train_s_per_sample", "memory_bytes", *POWERS)
    overridden = np.zeros(n, dtype=bool)
    for c in device_cols:
        overridden |= ~np.isnan(figures[c])
    _fill_from_profiles(path, figures, text, first)
    _check_complete(path, figures, first)
    figures["memory_bytes"][np.isnan(figures["memory_bytes"])] = math.inf
    for c in POWERS:
        figures[c][np.isnan(figures[c])] = 0.0
    end_layer = _end_layers(path, col, n, first)
    labels = np.where(pd.isna(text["group"]), np.where(pd.isna(text["profile"]), "fleet",
                                                       text["profile"]), text["group"])
    codes, names = pd.factorize(pd.Series(labels, dtype=object), sort=False)
    return Fleet(path=str(path), num_clients=n, group=codes.astype(np.int32),
                 group_names=tuple(str(x) for x in names), profile=text["profile"],
                 end_layer=end_layer,
                 availability=None if "availability" not in col else text["availability"],
                 figures=figures, overridden=overridden, warnings=tuple(warnings))


def _read_figures(path: str | Path, col: dict[str, pd.Series], n: int,
                  first: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """The quantity columns in SI (NaN: empty or left out), with ``flops_per_s_given``
    (``flops_per_s`` as the file gives it), and the warnings on bare numbers out of the
    plausible range and on device figures far outside the shipped devices'; a row giving
    both ``flops_per_s`` and ``train_s_per_sample`` is refused."""
    figures, warnings = {}, []
    for c in QUANTITIES:
        if c not in col:
            figures[c] = np.full(n, np.nan)
            continue
        figures[c], bare = _quantity(c, col[c], path, first)
        for warning in (_bare_number_warning(path, c, figures[c], bare, first),
                        _range_warning(path, c, figures[c], bare, first)):
            if warning is not None:
                warnings.append(warning)
    figures["flops_per_s_given"] = figures["flops_per_s"].copy()
    both = ~np.isnan(figures["flops_per_s"]) & ~np.isnan(figures["train_s_per_sample"])
    if both.any():
        i = int(np.flatnonzero(both)[0])
        raise ConfigError(f"{_where(path, i + first, 'train_s_per_sample')}: the row also gives "
                          f"flops_per_s; valid: one of the two")
    return figures, warnings


def _fill_from_profiles(path: str | Path, figures: dict[str, np.ndarray],
                        text: dict[str, np.ndarray], first: int) -> None:
    """Profiles fill in what a row leaves empty: the device profile its compute, memory
    and powers (not ``flops_per_s`` where the row gives ``train_s_per_sample``), the link
    profile its bandwidths and latency (in place, in ``figures``)."""
    from sflsim.hardware import profiles

    for kind, names, cols in (
            ("devices", text["profile"], ("flops_per_s", "memory_bytes", *POWERS)),
            ("links", text["link"], ("uplink_bps", "downlink_bps", "latency_s"))):
        column = "profile" if kind == "devices" else "link"
        named = pd.Series(names).dropna()
        for name, rows in named.groupby(named).groups.items():
            rows = np.asarray(rows)
            try:
                prof = profiles.load_profile(kind, name)
            except ConfigError as exc:
                raise ConfigError(f"{_where(path, int(rows[0]) + first, column)}: {exc}") from None
            for c in cols:
                field = "sustained_flops" if c == "flops_per_s" else c
                v = figures[c][rows]
                if c == "flops_per_s":  # train_s_per_sample given: it wins over the profile
                    keep = np.isnan(v) & np.isnan(figures["train_s_per_sample"][rows])
                else:
                    keep = np.isnan(v)
                v[keep] = getattr(prof, field).value
                figures[c][rows] = v


def _check_complete(path: str | Path, figures: dict[str, np.ndarray], first: int) -> None:
    """Refuse a row left without compute figures or link figures once profiles filled in."""
    from sflsim.hardware import profiles

    no_compute = np.isnan(figures["flops_per_s"]) & np.isnan(figures["train_s_per_sample"])
    if no_compute.any():
        i = int(np.flatnonzero(no_compute)[0])
        raise ConfigError(f"{_where(path, i + first, 'profile')}: empty, and the row gives no "
                          f"flops_per_s or train_s_per_sample; valid: a device profile name "
                          f"({', '.join(profiles.available('devices'))}) or a compute figure")
    for c in ("uplink_bps", "downlink_bps", "latency_s"):
        missing = np.isnan(figures[c])
        if missing.any():
            i = int(np.flatnonzero(missing)[0])
            raise ConfigError(f"{_where(path, i + first, c)}: empty, and the row names no link "
                              f"profile; valid: {QUANTITIES[c][2]}, or a link column naming "
                              f"one of {', '.join(profiles.available('links'))}")


def _end_layers(path: str | Path, col: dict[str, pd.Series], n: int, first: int) -> np.ndarray:
    """The ``end_layer`` column as whole numbers >= 1 (0: empty or left out, the
    scenario's ``fleet_end_layer``)."""
    end_layer = np.zeros(n, dtype=np.int64)
    if "end_layer" in col:
        given = col["end_layer"]
        if pd.api.types.is_bool_dtype(given):  # a Parquet column of flags
            given = given.map({True: "true", False: "false"})
        cells = given.astype(object).where(given.notna(), "").astype(str).str.strip()
        numbers = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=float)
        bad = (cells != "").to_numpy() & ~(np.isfinite(numbers) & (numbers >= 1)
                                           & (numbers == np.floor(numbers)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{_where(path, i + first, 'end_layer')}: "
                              f"{as_written(cells.iat[i])} is not a cut layer; valid: a whole "
                              f"number >= 1 (a stage boundary of the model), or empty for "
                              f"fleet_end_layer")
        end_layer = np.where(np.isnan(numbers), 0, numbers).astype(np.int64)
    return end_layer


_LOADED: dict[tuple[str, int, int], Fleet] = {}


def load_fleet(path: str | Path) -> Fleet:
    """:func:`read_fleet`, kept per file (its resolved path, size and modification time)
    for the life of the process; same errors."""
    p = trace_path(path)
    try:
        stat = p.stat()
    except OSError:
        return read_fleet(path)  # raises the missing-file message
    key = (str(p.resolve()), stat.st_size, stat.st_mtime_ns)
    fleet = _LOADED.get(key)
    if fleet is None:
        if len(_LOADED) > 8:
            _LOADED.clear()
        fleet = _LOADED[key] = read_fleet(path)
    return fleet
