"""Time-varying bandwidth read from a CSV trace, interpolated step-wise.

A trace file has a header row and one row per change of bandwidth::

    time_s,bandwidth_bps
    0,20000000
    5.0,5000000
    12.5,20000000

or, for different directions, ``time_s,uplink_bps,downlink_bps``. Bare values are SI
(seconds of simulated time, bit/s); a cell may also carry its unit (``20 Mbit/s``,
``500 ms``), as scenarios and fleet files do. A value holds from its time until the next
row's time; before the first time the first value applies and after the last
time the last value applies. Times must be finite, non-negative and strictly
increasing; bandwidths finite and greater than 0. A transfer's serialisation
time integrates its bits over the steps it crosses.
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from pathlib import Path

from sflsim.errors import ConfigError


@dataclass(frozen=True)
class BandwidthTrace:
    """Bandwidth (bit/s) as a step function of simulated time (s).

    Attributes:
        times_s: strictly increasing change times, ``times_s[0]`` usually 0.
        bandwidth_bps: value holding from ``times_s[k]`` to ``times_s[k + 1]``.
    """

    times_s: tuple[float, ...]
    bandwidth_bps: tuple[float, ...]

    @classmethod
    def constant(cls, bandwidth_bps: float) -> BandwidthTrace:
        return cls((0.0,), (float(bandwidth_bps),))

    def value_at(self, t_s: float) -> float:
        """Bandwidth in force at ``t_s`` (a step at exactly ``t_s`` already applies)."""
        k = bisect.bisect_right(self.times_s, t_s) - 1
        return self.bandwidth_bps[max(k, 0)]

    def next_change_after(self, t_s: float) -> float:
        """Time of the first step strictly after ``t_s``, or ``inf``."""
        k = bisect.bisect_right(self.times_s, t_s)
        return self.times_s[k] if k < len(self.times_s) else math.inf

    def finish_time(self, start_s: float, bits: float) -> float:
        """When ``bits`` sent alone from ``start_s`` have all been serialised."""
        t, left = start_s, float(bits)
        while True:
            rate, nxt = self.value_at(t), self.next_change_after(t)
            if left <= rate * (nxt - t):
                return t + left / rate
            left -= rate * (nxt - t)
            t = nxt

    def mean_bps(self) -> float:
        """Time-weighted mean over the trace's span (its only value if it has one row)."""
        if len(self.times_s) == 1:
            return self.bandwidth_bps[0]
        span = self.times_s[-1] - self.times_s[0]
        area = sum(b * (t1 - t0) for b, t0, t1 in
                   zip(self.bandwidth_bps, self.times_s, self.times_s[1:]))
        return area / span


#: what each column's cells may be
_VALID = {"time": "0 s or more", "bandwidth": "greater than 0 bit/s"}


def _number(text: str, where: str, dimension: str) -> float:
    """A cell as a number in SI (``dimension``: ``"time"`` or ``"bandwidth"``): bare, or
    with its unit (``20 Mbit/s``, ``500 ms``) as scenarios and fleet files take it, and
    within :data:`_VALID`."""
    from sflsim.text import as_written
    from sflsim.units import number_or_quantity

    try:
        value = number_or_quantity(text, dimension)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}; a bare number is in "
                          f"{'seconds' if dimension == 'time' else 'bit/s'}") from None
    if not math.isfinite(value) or value < 0 or (dimension == "bandwidth" and value == 0):
        raise ConfigError(f"{where}: {as_written(text)} is out of range; valid: "
                          f"{_VALID[dimension]}")
    return value


def read_trace(path: str | Path, direction: str = "uplink") -> BandwidthTrace:
    """Read a bandwidth trace CSV (see the module docstring) for ``direction``.

    Args:
        path: the CSV file, absolute, or relative to the working directory or else to
            the shipped scenarios (:func:`sflsim.shipped.trace_path`).
        direction: ``"uplink"`` or ``"downlink"``; picks ``<direction>_bps`` when the
            file has per-direction columns, else ``bandwidth_bps`` is used.

    Raises:
        ConfigError: missing file or column, a non-number, times not strictly
            increasing or negative, a bandwidth <= 0; names the file, row and field.
    """
    from sflsim.shipped import looked_for, trace_path

    path, given = trace_path(path), path
    try:
        text = path.read_text()
    except OSError as exc:
        where = looked_for(path) if not path.exists() else ""
        raise ConfigError(f"bandwidth trace {given}: cannot be read ({exc.strerror}){where}; "
                          f"expected a CSV file with columns time_s and {direction}_bps or "
                          f"bandwidth_bps") from None
    except UnicodeDecodeError:
        raise ConfigError(f"bandwidth trace {path}: not UTF-8 text; expected a CSV file with "
                          f"columns time_s and {direction}_bps or bandwidth_bps") from None
    reader = csv.DictReader(line for line in text.splitlines() if line.strip())
    rows = list(reader)
    columns = [c.strip() for c in (reader.fieldnames or [])]
    rows = [{(k or "").strip(): (v or "").strip() for k, v in r.items()} for r in rows]
    field = f"{direction}_bps" if f"{direction}_bps" in columns else "bandwidth_bps"
    for need in ("time_s", field):
        if need not in columns:
            raise ConfigError(
                f"bandwidth trace {path}: no column {need!r} (columns: "
                f"{', '.join(columns) or 'none'}); "
                f"valid: a header 'time_s,bandwidth_bps' or 'time_s,uplink_bps,downlink_bps' "
                f"and at least one row")
    if not rows:
        raise ConfigError(f"bandwidth trace {path}: a header and no rows; valid: at least one "
                          f"row of time_s and {field}")
    times: list[float] = []
    values: list[float] = []
    for row_no, row in enumerate(rows, start=2):  # row 1 is the header
        where = f"bandwidth trace {path}, row {row_no}"
        t = _number(row["time_s"], f"{where}, time_s", "time")
        b = _number(row[field], f"{where}, {field}", "bandwidth")
        if times and t <= times[-1]:
            raise ConfigError(f"{where}, time_s: {t:g} is not after the previous row's "
                              f"{times[-1]:g}; times must be strictly increasing")
        times.append(t)
        values.append(b)
    return BandwidthTrace(tuple(times), tuple(values))
