"""``sflsim check`` of ``early_exit.csv``: a finished run's sweep checks clean, and every
edit of its rows, counts, exits, bytes or latency is a violation naming the column."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from sflsim.checks import check_run, report_lines


def _copy(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    return run, pd.read_csv(run / "early_exit.csv")


def _found(run) -> list[str]:
    return [str(v) for v in check_run(run)]


def test_a_finished_runs_early_exit_csv_checks_clean(tiny_run):
    table = pd.read_csv(tiny_run / "early_exit.csv")
    assert len(table) and (table["exit_ratio"] > 0).any() and (table["exit_ratio"] < 1).any()
    assert check_run(tiny_run) == []


def _up(t):  # the offloaded share times one activation size
    t["bytes_up_per_sample"] *= 1.5
    t["bytes_per_sample"] = t["bytes_up_per_sample"] + t["bytes_down_per_sample"]


def _device(t):
    t.loc[len(t) // 2, "device_s_mean"] *= 0.5
    t["latency_s_mean"] = t[["device_s_mean", "transfer_s_mean", "server_queue_s_mean",
                             "server_s_mean"]].sum(axis=1)


def _rises(t):  # exit ratios of the layer in reverse threshold order
    t["exit_ratio"] = t["exit_ratio"].to_numpy()[::-1]


def _server_falls(t):
    i = t.index[t["server_s_mean"] > 0][-1]
    t.loc[i, "server_s_mean"] /= 4
    t.loc[i, "latency_s_mean"] = t.loc[i, ["device_s_mean", "transfer_s_mean",
                                           "server_queue_s_mean", "server_s_mean"]].sum()


EDITS = {
    "a row deleted": (lambda t: t.drop(index=3), "has 80 thresholds"),
    "a threshold moved": (lambda t: t.assign(threshold=t["threshold"] + 0.01),
                          "but the scenario's grid has 81"),
    "entropy threshold": (lambda t: t.assign(entropy_threshold=t["threshold"]),
                          "entropy_threshold"),
    "clients": (lambda t: t.assign(clients=t["clients"] + 1), "clients of the scenario end"),
    "samples": (lambda t: t.assign(samples=t["samples"] + np.arange(len(t))),
                "test samples each (manifest.json's"),
    "samples of a whole layer": (lambda t: t.assign(samples=t["samples"] * 2),
                                 "samples 80: not the layer's 1 clients x 40 test samples"),
    "latency samples": (lambda t: t.assign(latency_samples=t["latency_samples"] // 2),
                        "latency_samples 20: not the layer's 1 clients x 40 simulated"),
    "a threshold off the grid": (lambda t: t.assign(threshold=t["threshold"].where(
        t.index != 3, -3.33)), "off the grid: -3.33; missing: -3.95"),
    "a row twice": (lambda t: pd.concat([t, t.iloc[[5]]]), "given twice: -3.95"),
    "accuracy not whole samples": (lambda t: t.assign(accuracy=t["accuracy"] + 1e-4),
                                   "not a share of whole samples"),
    "exit ratio above 1": (lambda t: t.assign(exit_ratio=t["exit_ratio"] * 2), "exit_ratio"),
    "exit ratio rises": (_rises, "more samples exit than at the threshold below"),
    "server accuracy": (lambda t: t.assign(accuracy=t["accuracy"].where(t["exit_ratio"] > 0,
                                                                        0.0)),
                        "where no sample exits, the accuracy is rounds.csv's server_accuracy_l"),
    "bytes down": (lambda t: t.assign(bytes_down_per_sample=t["bytes_down_per_sample"] * 2),
                   "bytes_down_per_sample"),
    "bytes total": (lambda t: t.assign(bytes_per_sample=t["bytes_per_sample"] + 1),
                    "not bytes_up_per_sample + bytes_down_per_sample"),
    "bytes up, one row": (lambda t: t.assign(bytes_up_per_sample=t["bytes_up_per_sample"]
                                             .where(t.index != t.index[-1], 1.0)),
                          "bytes_up_per_sample 1: not the offloaded share"),
    "bytes up of a whole layer": (lambda t: t.assign(
        bytes_up_per_sample=t["bytes_up_per_sample"] * 2,
        bytes_per_sample=t["bytes_up_per_sample"] * 3 + t["bytes_down_per_sample"]),
        "bytes_per_sample"),
    "latency sum": (lambda t: t.assign(latency_s_mean=t["latency_s_mean"] * 0.9),
                    "not device + transfer + server queue + server time"),
    "device time": (_device, "device_s_mean"),
    "server time falls": (_server_falls, "server_s_mean"),
    "negative queue": (lambda t: t.assign(server_queue_s_mean=-1.0), "server_queue_s_mean"),
    "text": (lambda t: t.assign(accuracy="high"), "where sflsim writes a number"),
    "a column gone": (lambda t: t.drop(columns="exit_ratio"), "exit_ratio: no such column"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_each_edit_of_early_exit_csv_is_a_violation(tiny_run, tmp_path, edit):
    change, expected = EDITS[edit]
    run, table = _copy(tiny_run, tmp_path)
    out = change(table)
    (table if out is None else out).to_csv(run / "early_exit.csv", index=False)
    found = _found(run)
    assert any(line.startswith("early_exit.csv") and expected in line for line in found), \
        "\n".join(report_lines(check_run(run)))


def test_early_exit_csv_where_the_summary_says(tiny_run, tmp_path):
    """Deleted while summary.json says written; present while it says disabled."""
    run, _ = _copy(tiny_run, tmp_path)
    (run / "early_exit.csv").unlink()
    assert any(line.startswith("summary.json: early_exit: says 'early_exit.csv:")
               for line in _found(run)), _found(run)
    shutil.copy(tiny_run / "early_exit.csv", run / "early_exit.csv")
    summary = json.loads((run / "summary.json").read_text())
    summary["early_exit"] = "disabled (evaluation.early_exit.enabled: false)"
    (run / "summary.json").write_text(json.dumps(summary))
    assert any(line.startswith("early_exit.csv: is there, but summary.json's early_exit says")
               for line in _found(run)), _found(run)
    summary["early_exit"] = "early_exit.csv: 81 thresholds x end layers 3, 4"
    (run / "summary.json").write_text(json.dumps(summary))
    assert any(line.startswith("summary.json: early_exit: says 'early_exit.csv: 81 thresholds "
                               "x end layers 3, 4', but early_exit.csv has 81 thresholds x end "
                               "layers 3, 4, 5") for line in _found(run)), _found(run)
