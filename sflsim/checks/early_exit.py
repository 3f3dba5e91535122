"""``early_exit.csv`` is the sweep the scenario asks for, and its numbers can be.

The early-exit sweep (Hetero-SplitEE, "Split Learning of Neural Networks with Early
Exits for Heterogeneous IoT Devices", arXiv 2512.09313, Alg. 3; written by
:mod:`sflsim.algorithms.early_exit`) is checked from its own rows, the scenario and the
last round of ``rounds.csv``, not by the functions that wrote it:

- **Where.** A finished run has the file exactly when ``summary.json``'s ``early_exit``
  says it was written, with the thresholds and end layers it names;
- **Rows.** One row per threshold of the scenario's grid (``tau_min`` to ``tau_max`` in
  steps of ``tau_step``) and end layer of its clients, with that layer's number of
  clients, ``entropy_threshold = -threshold``, every column sflsim writes and a finite
  number in each;
- **Counts.** Per end layer, ``samples`` is its clients x the evaluation's test samples
  (the test split of ``manifest.json``, at most ``evaluation.max_test_samples``) and
  ``latency_samples`` its clients x ``samples_per_client`` (at most that); accuracy and
  exit ratio are shares of ``samples`` (whole samples);
- **Exits.** A sample exits when ``C = -H > tau``: the exit ratio never rises with the
  threshold, and is 0 from ``tau = 0`` on (an entropy is never negative). Where nothing
  exits the accuracy is the last round's ``server_accuracy_l<k>``, where everything
  exits its ``client_accuracy_l<k>``;
- **Bytes.** Only offloaded samples move bytes: ``bytes_down_per_sample`` is
  ``(1 - exit_ratio)`` times the 8 bytes of a prediction, ``bytes_up_per_sample`` that
  share times one activation size per end layer, ``bytes_per_sample`` their sum;
- **Latency.** ``latency_s_mean`` is device + transfer + server queue + server time,
  none negative; the device's time is the same at every threshold (every sample runs the
  client-side model and exit head); transfer and server time never fall as the threshold
  rises (more samples offloaded), and are 0, as is the queue, where everything exits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sflsim.checks.checked_run import Run
from sflsim.checks.report import at_most, close, g
from sflsim.metrics import columns as cols
from sflsim.text import plural

#: the file's key in :attr:`Run.names`
KEY = "early_exit"
#: bytes of one prediction sent back down (an int64 class index; Hetero-SplitEE Alg. 3
#: returns the server's label)
PREDICTION_BYTES = 8
#: ``summary.json``'s ``early_exit`` of a run that wrote the file starts with this
WRITTEN = "early_exit.csv:"
#: the latency parts that add up to ``latency_s_mean``
PARTS = ("device_s_mean", "transfer_s_mean", "server_queue_s_mean", "server_s_mean")


def check_early_exit(run: Run) -> None:
    """Every rule of the module docstring, for a run whose table was read (or whose
    summary says it should be there)."""
    table = run.tables.early_exit
    if not _where(run, table) or table is None:
        return
    missing = [c for c in cols.EARLY_EXIT.columns if c not in table.columns]
    for name in missing:
        run.add(KEY, None, name, "no such column, though sflsim writes it in every early-exit sweep",
                f"{run.names[KEY]}'s columns")
    if missing:
        return
    numbers = table.apply(pd.to_numeric, errors="coerce").astype(float)
    bad = ~np.isfinite(numbers.to_numpy())
    for j in np.flatnonzero(bad.any(axis=0)):
        n, line = int(bad[:, j].sum()), int(np.flatnonzero(bad[:, j])[0]) + 2  # 1: header
        run.add(KEY, None, numbers.columns[j], f"{plural(n, 'row')} {'holds' if n == 1 else 'hold'} "
                f"NaN, infinity or text where sflsim writes a number (the first on line {line} "
                f"of the file: {table.iloc[line - 2, j]!r})", f"{numbers.columns[j]} column")
    if bad.any():
        return
    _note(run, numbers)
    if _rows(run, numbers):
        for layer, rows in numbers.sort_values("threshold").groupby("end_layer"):
            _layer(run, int(layer), rows)


def _note(run: Run, table: pd.DataFrame) -> None:
    """``summary.json``'s ``early_exit`` names the file's thresholds and end layers."""
    note = (run.tables.summary or {}).get("early_exit")
    if not isinstance(note, str) or not note.startswith(WRITTEN):
        return
    layers = ", ".join(str(int(k)) for k in sorted(table["end_layer"].unique()))
    want = f"{WRITTEN} {table['threshold'].nunique()} thresholds x end layers {layers}"
    if note != want:
        run.add("summary", None, "early_exit", f"says {note!r}, but {run.names[KEY]} has "
                f"{want.removeprefix(WRITTEN).strip()}", f"early_exit in {run.names['summary']}")


def _where(run: Run, table: pd.DataFrame | None) -> bool:
    """Whether the file is where ``summary.json`` says (checked once the run has ended)."""
    summary = run.tables.summary or {}
    if run.tables.in_progress or "early_exit" not in summary:
        return True
    note = str(summary["early_exit"])
    if note.startswith(WRITTEN) and table is None:
        run.add("summary", None, "early_exit", f"says {note!r}, but the run has no "
                f"{run.names[KEY]}: the file was deleted", f"the missing {run.names[KEY]}")
        return False
    if not note.startswith(WRITTEN) and table is not None:
        run.add(KEY, None, "", f"is there, but summary.json's early_exit says {note!r}: "
                f"the file is another run's, or the summary was edited")
        return False
    return True


def _grid(cfg: object) -> np.ndarray:
    """The thresholds ``tau_min + k tau_step`` up to ``tau_max`` (with float slack)."""
    count = int(np.floor((cfg.tau_max - cfg.tau_min) / cfg.tau_step * (1 + 1e-12) + 1e-9)) + 1
    return cfg.tau_min + cfg.tau_step * np.arange(count)


def _rows(run: Run, table: pd.DataFrame) -> bool:
    """One row per threshold of the grid and end layer, with its clients; whether the
    rows are sound enough for the per-layer rules."""
    counts = run.clients_per_end_layer()
    grid = _grid(run.scenario.evaluation.early_exit)
    ok = True
    for layer in sorted(set(table["end_layer"].astype(int)) - set(counts)):
        run.add(KEY, None, f"end layer {layer}", f"has rows, but no client of the scenario "
                f"ends at layer {layer} (end layers: {', '.join(map(str, sorted(counts)))})")
        ok = False
    for layer, n in counts.items():
        taus = np.sort(table.loc[table["end_layer"] == layer, "threshold"].to_numpy())
        if len(taus) != len(grid) or not close(taus, grid).all():
            run.add(KEY, None, f"end layer {layer}", f"has {len(taus)} thresholds, but the "
                    f"scenario's grid has {len(grid)} ({_span(grid)} in steps of "
                    f"{g(run.scenario.evaluation.early_exit.tau_step)}): "
                    f"{_off_grid(taus, grid)}", "early_exit.csv's rows")
            ok = False
        wrong = table[(table["end_layer"] == layer) & (table["clients"] != n)]
        if len(wrong):
            run.add(KEY, None, f"end layer {layer}", f"clients {g(wrong['clients'].iloc[0])}, "
                    f"but {n} clients of the scenario end at layer {layer}", "clients column")
    flipped = ~close(table["entropy_threshold"], -table["threshold"])
    if flipped.any():
        i = int(np.flatnonzero(flipped)[0])
        run.add(KEY, None, _who(table.iloc[i]), f"entropy_threshold "
                f"{g(table['entropy_threshold'].iloc[i])} is not -threshold "
                f"({plural(int(flipped.sum()), 'such row')})", "entropy_threshold column")
    return ok


def _off_grid(taus: np.ndarray, grid: np.ndarray) -> str:
    """What tells ``taus`` from the grid: thresholds off it, given twice, or missing."""
    on = [np.flatnonzero(close(grid, t)) for t in taus]
    off = [t for t, k in zip(taus, on) if not len(k)]
    hits = np.concatenate([k[:1] for k in on]) if len(on) else np.array([], int)
    twice = sorted({float(grid[k]) for k in hits if np.sum(hits == k) > 1})
    missing = [t for k, t in enumerate(grid) if k not in set(hits.tolist())]
    parts = [f"{what} {', '.join(g(t) for t in values[:5])}"
             + (f" and {len(values) - 5} more" if len(values) > 5 else "")
             for what, values in (("off the grid:", off), ("given twice:", twice),
                                  ("missing:", missing)) if values]
    return "; ".join(parts)


def _who(row: pd.Series) -> str:
    return f"threshold {row['threshold']:g}, end layer {int(row['end_layer'])}"


def _span(values: np.ndarray) -> str:
    return f"{g(values[0])} to {g(values[-1])}" if len(values) else "none"


def _flag(run: Run, rows: pd.DataFrame, bad: np.ndarray, column: str, message: str) -> None:
    """One violation for the rows of ``bad`` (the first named, the rest counted)."""
    if not np.any(bad):
        return
    first = rows.iloc[int(np.flatnonzero(bad)[0])]
    more = int(np.sum(bad)) - 1
    run.add(KEY, None, _who(first), f"{column} {g(first[column])}: {message}"
            + (f" (and {more} more rows of the layer)" if more else ""), f"{column} column")


def _layer(run: Run, layer: int, rows: pd.DataFrame) -> None:
    """The rules of one end layer's rows, in ascending threshold."""
    def col(name: str) -> np.ndarray:
        return rows[name].to_numpy(dtype=float)

    n = col("samples")
    _counts(run, rows)
    share, acc = col("exit_ratio"), col("accuracy")
    for name, v in (("accuracy", acc), ("exit_ratio", share)):
        whole = np.abs(v * n - np.round(v * n)) <= 1e-6 + n * 1e-10  # written to 10 decimals
        _flag(run, rows, (v < 0) | (v > 1) | ~whole, name, "not a share of whole samples in "
              "[0, 1]")
    rises = np.zeros(len(rows), bool)
    rises[1:] = share[1:] > share[:-1] + 1e-12
    _flag(run, rows, rises, "exit_ratio", "more samples exit than at the threshold below, "
          "though a sample exits only when its confidence is above the threshold")
    _flag(run, rows, (col("threshold") >= 0) & (share > 0), "exit_ratio",
          "samples exit, though the confidence -H is never above 0")
    _accuracies(run, layer, rows, share, acc)
    _bytes(run, rows, share)
    _latency(run, rows, share)


def _counts(run: Run, rows: pd.DataFrame) -> None:
    """``samples``: the layer's clients x the evaluation's test samples (the test split,
    at most ``evaluation.max_test_samples``); ``latency_samples``: its clients x
    ``samples_per_client`` (all of them without one), at most the test samples."""
    clients = rows["clients"].to_numpy(float)
    samples = rows["samples"].to_numpy(float)
    evaluation = run.scenario.evaluation
    dataset = (run.tables.manifest or {}).get("dataset")
    split = dataset.get("test_samples") if isinstance(dataset, dict) else None
    if isinstance(split, int) and not isinstance(split, bool):
        n_test = min(split, evaluation.max_test_samples or split)
        why = (f"manifest.json's {split} test samples" + (
            f", evaluation.max_test_samples {evaluation.max_test_samples}"
            if evaluation.max_test_samples else ""))
    else:  # a run held in memory: the first row's, the same at every threshold
        n_test, why = samples[0] / clients[0], "the first threshold's"
    per = evaluation.early_exit.samples_per_client
    n_lat = min(per or n_test, n_test)
    for name, each, whose in (
            ("samples", n_test, f"test samples each ({why})"),
            ("latency_samples", n_lat, "simulated inferences each (evaluation.early_exit."
                                       f"samples_per_client {per}, at most the test samples)")):
        _flag(run, rows, rows[name].to_numpy(float) != clients * each, name,
              f"not the layer's {g(clients[0])} clients x {g(each)} {whose}")


def _accuracies(run: Run, layer: int, rows: pd.DataFrame, share: np.ndarray,
                acc: np.ndarray) -> None:
    """Where nothing exits, the last round's server-side accuracy of the layer; where
    everything does, its exit head's (the sweep reuses that round's test passes)."""
    last = run.rounds[run.rounds["round"] >= 1].tail(1)
    if run.tables.status != "completed" or not len(last):
        return
    for ends, part in ((share == 0, "server"), (share == 1, "client")):
        column = f"{part}_accuracy_l{layer}"
        want = float(last[column].iloc[0]) if column in last else float("nan")
        if np.isfinite(want):
            _flag(run, rows, ends & ~close(acc, want), "accuracy",
                  f"where {'no' if part == 'server' else 'every'} sample exits, the accuracy "
                  f"is rounds.csv's {column} of round {int(last['round'].iloc[0])}, {g(want)}")


def _bytes(run: Run, rows: pd.DataFrame, share: np.ndarray) -> None:
    """Bytes per sample from the offloaded samples, counted back from the exit ratio (a
    share of whole samples written to 10 decimals, too coarse to divide by as it is)."""
    up, down = rows["bytes_up_per_sample"].to_numpy(float), \
        rows["bytes_down_per_sample"].to_numpy(float)
    n = rows["samples"].to_numpy(float)
    sent = np.round((1.0 - share) * n) / n  # the offloaded share, exactly
    bad = ~close(down, sent * PREDICTION_BYTES)
    _flag(run, rows, bad, "bytes_down_per_sample", _want(
        "the offloaded share (1 - exit_ratio) x 8 bytes (one prediction)", sent * PREDICTION_BYTES,
        bad))
    total = rows["bytes_per_sample"].to_numpy(float)
    bad = ~close(total, up + down)
    _flag(run, rows, bad, "bytes_per_sample", _want(
        "bytes_up_per_sample + bytes_down_per_sample", up + down, bad))
    some = sent > 0
    size = np.where(some, up / np.where(some, sent, 1.0), 0.0)  # bytes per offloaded sample
    sizes = pd.Series(np.round(size[some], 6))
    usual = float(sizes.mode().iloc[0]) if len(sizes) else 0.0  # an edited row is the odd one
    bad = (some & ~close(size, usual)) | (~some & (up != 0))
    _flag(run, rows, bad, "bytes_up_per_sample", _want(
        f"the offloaded share (1 - exit_ratio) x one activation, {g(usual)} bytes at most "
        f"thresholds of the layer", sent * usual, bad))


def _want(rule: str, want: np.ndarray, bad: np.ndarray) -> str:
    """``"not RULE, W"``: the rule and its value at the first row of ``bad``."""
    first = np.flatnonzero(bad)
    return f"not {rule}" + (f": {g(want[first[0]])}" if len(first) else "")


def _latency(run: Run, rows: pd.DataFrame, share: np.ndarray) -> None:
    parts = {p: rows[p].to_numpy(float) for p in PARTS}
    total = rows["latency_s_mean"].to_numpy(float)
    _flag(run, rows, ~close(total, sum(parts.values()), total), "latency_s_mean",
          "not device + transfer + server queue + server time")
    for name, v in parts.items():
        _flag(run, rows, v < 0, name, "a negative time")
    device = parts["device_s_mean"]
    _flag(run, rows, ~close(device, device[0], device), "device_s_mean",
          f"not the {g(device[0])} s of the lowest threshold, though every sample runs the "
          f"client-side model and exit head whatever the threshold")
    for name in ("transfer_s_mean", "server_s_mean"):
        v = parts[name]
        falls = np.zeros(len(v), bool)
        falls[1:] = ~at_most(v[:-1], v[1:], v[:-1])
        _flag(run, rows, falls, name, "less than at the threshold below, though no fewer "
              "samples are offloaded")
    for name in ("transfer_s_mean", "server_queue_s_mean", "server_s_mean"):
        _flag(run, rows, (share == 1) & (parts[name] != 0), name,
              "not 0, though every sample exits on the device")
