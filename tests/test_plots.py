"""Every figure renders from small synthetic result files; bad directories give one clear error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sflsim.cli.main import app
from sflsim.errors import SflsimError
from sflsim.plots import (
    front_text,
    pareto_front,
    parse_formats,
    plot_early_exit,
    plot_splits,
    plot_timeline,
    plot_tradeoff,
    plot_tta,
    tradeoff_figure,
    tradeoff_points,
    tta_figure,
)
from sflsim.plots.timeline import queue_steps, server_lanes
from sflsim.plots.tradeoff import X_REL_TOL
from tests.table_files import FORMATS, to_parquet

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(path: Path, algorithm: str = "hetero_splitee_sequential",
              accuracies: tuple[float, ...] = (0.5, 0.72, 0.8), round_time_s: float = 10.0,
              early_exit: bool = True, untrained: float | None = 0.1,
              dataset: str | None = None, fmt: str = "csv") -> Path:
    """A small results directory with the columns ``sflsim run`` writes: 3 clients; round 0
    (the untrained model at time 0, accuracy ``untrained``) unless ``untrained`` is None;
    a ``scenario.yaml`` naming ``dataset`` if given; the ``events`` and ``clients`` tables
    in ``fmt`` (``csv`` or ``parquet``)."""
    path.mkdir(parents=True, exist_ok=True)
    if dataset is not None:
        (path / "scenario.yaml").write_text(f"name: {path.name}\ndataset: {{name: {dataset}}}\n")
    n = len(accuracies)
    sim = [round_time_s * (r + 1) for r in range(n)]
    rounds = pd.DataFrame({
        "round": range(1, n + 1), "sim_time_s": sim, "round_time_s": [round_time_s] * n,
        "wall_time_s": [1.0] * n, "server_accuracy": accuracies,
        "client_accuracy": [a - 0.05 for a in accuracies],
        "server_accuracy_l3": accuracies, "client_accuracy_l3": accuracies,
        "bytes_up": [1e6] * n, "bytes_down": [5e5] * n, "client_flops": [2e9] * n,
        "client_flops_mean": [2e9 / 3] * n, "activated_params_mean": [1e5] * n,
        "server_flops": [4e9] * n, "client_energy_j": [12.0] * n,
    })
    if untrained is not None:
        zero = {c: 0.0 for c in rounds.columns} | {
            "round": 0, "server_accuracy": untrained, "client_accuracy": untrained,
            "server_accuracy_l3": untrained, "client_accuracy_l3": untrained,
            "client_flops_mean": None, "activated_params_mean": None, "note": "untrained model"}
        rounds = pd.concat([pd.DataFrame([zero]), rounds.assign(note="")], ignore_index=True)
    rounds.to_csv(path / "rounds.csv", index=False)
    pd.DataFrame([
        {"round": r, "client_id": c, "group": ["pi4_wifi", "nano_lte", "orin_wifi"][c],
         "profile": ["rpi4", "jetson_nano", "jetson_orin_nano"][c], "end_layer": 3 + c,
         "cut_layer": 1 + (c + r) % 4, "samples": 100, "compute_s": 1.0, "uplink_s": 0.5,
         "energy_j": 4.0}
        for r in range(1, n + 1) for c in range(3)
    ]).to_csv(path / "clients.csv", index=False)
    events = []
    for r in range(1, n + 1):
        t0 = sim[r - 1] - round_time_s
        for c in range(3):
            for b in range(2):
                start = t0 + b * 3.0 + c
                events += [
                    (r, f"client{c}", "client_forward", c, start, start + 1.0, 0.0, 0, 1e8),
                    (r, f"client{c}:uplink", "send_activations", c, start + 1.0, start + 1.5, 0.0,
                     4096, 0.0),
                    (r, "server", "server_train", c, start + 1.6, start + 2.4, 0.1 * c, 0, 2e8),
                    (r, f"client{c}:downlink", "send_gradients", c, start + 2.4, start + 2.8, 0.0,
                     4096, 0.0),
                ]
    frame = pd.DataFrame(events, columns=["round", "actor", "activity", "client_id", "start_s",
                                          "end_s", "queue_s", "payload_bytes", "flops"])
    frame["seq"] = range(len(frame))
    frame.to_csv(path / "events.csv", index=False)
    (path / "summary.json").write_text(json.dumps({
        "name": path.name, "algorithm": algorithm, "status": "completed", "sim_time_s": sim[-1],
        "final_server_accuracy": accuracies[-1], "final_client_accuracy": accuracies[-1] - 0.05,
        "bytes_up": 1e6 * n, "bytes_down": 5e5 * n, "client_flops": 2e9 * n,
        "server_flops": 4e9 * n, "client_energy_j": 12.0 * n, "wall_time_s": float(n),
    }))
    if early_exit:
        rows = []
        for layer in (3, 4, 5):
            for tau in np.linspace(-4, 0, 9):
                ratio = float(np.clip(-tau / 3 - 0.1 * (layer - 3), 0, 1))
                rows.append({"threshold": tau, "entropy_threshold": -tau, "end_layer": layer,
                             "accuracy": 0.9 - 0.2 * ratio + 0.02 * layer, "exit_ratio": ratio,
                             "latency_s_mean": 0.01 + 0.05 * (1 - ratio), "device_s_mean": 0.01,
                             "transfer_s_mean": 0.04 * (1 - ratio), "server_queue_s_mean": 0.0,
                             "server_s_mean": 0.01 * (1 - ratio),
                             "bytes_per_sample": 4096 * (1 - ratio), "samples": 100})
        pd.DataFrame(rows).to_csv(path / "early_exit.csv", index=False)
    return to_parquet(path) if fmt == "parquet" else path


def write_sweep(path: Path) -> Path:
    """A sweep of three points over ``server.slots``, the last one failed."""
    rows = []
    for i, (slots, acc) in enumerate([(1, (0.4, 0.6)), (2, (0.5, 0.7)), (4, (0.45, 0.55))]):
        run_dir = f"points/p{i:03d}"
        status = "failed" if i == 2 else "completed"
        if status == "completed":
            write_run(path / run_dir, accuracies=acc, round_time_s=10.0 / slots)
        rows.append({"point": f"p{i:03d}", "status": status, "error": "" if i < 2 else "boom",
                     "run_dir": run_dir, "server.slots": slots, "algorithm": "splitfed_v2",
                     "final_server_accuracy": acc[-1], "sim_time_s": 20.0 / slots})
    pd.DataFrame(rows).to_csv(path / "sweep.csv", index=False)
    return path


def assert_images(paths: list[Path]) -> None:
    assert sorted(p.suffix for p in paths) == [".pdf", ".png"]
    for p in paths:
        head = p.read_bytes()[:8]
        if p.suffix == ".png":
            assert head == PNG_MAGIC
            image = matplotlib.image.imread(p)
            assert image.shape[0] > 100 and image.shape[1] > 500  # ~3.4 in at 300 dpi
        else:
            assert head.startswith(b"%PDF")


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    return {"seq": write_run(tmp_path / "seq"),
            "avg": write_run(tmp_path / "avg", "hetero_splitee_averaging", (0.4, 0.6, 0.65), 8.0),
            "sweep": write_sweep(tmp_path / "sweep")}


@pytest.mark.parametrize("kind", ["tradeoff-runs", "tradeoff-sweep", "tradeoff-latency", "tta",
                                  "tta-sweep", "timeline", "early-exit", "splits"])
def test_each_figure_renders(kind, runs, tmp_path):
    out = tmp_path / "figs" / kind
    draw = {
        "tradeoff-runs": lambda: plot_tradeoff([runs["seq"], runs["avg"]], out),
        "tradeoff-sweep": lambda: plot_tradeoff([runs["sweep"]], out),
        "tradeoff-latency": lambda: plot_tradeoff([runs["seq"], runs["avg"]], out, x="latency_s_mean"),
        "tta": lambda: plot_tta([runs["seq"], runs["avg"]], out, target=0.7),
        "tta-sweep": lambda: plot_tta([runs["sweep"]], out),
        "timeline": lambda: plot_timeline(runs["seq"], out, round_=2),
        "early-exit": lambda: plot_early_exit(runs["seq"], out),
        "splits": lambda: plot_splits(runs["seq"], out),
    }[kind]
    assert_images(draw())


@pytest.mark.parametrize("kind", ["timeline", "splits"])
def test_figures_of_the_trace_and_clients_read_either_format(kind, tmp_path):
    """The same figure from a run whose tables are Parquet (no CSV left to read) and from
    one written before Parquet."""
    from sflsim.plots.splits import splits_figure
    from sflsim.plots.timeline import timeline_figure

    figure = {"timeline": lambda d: timeline_figure(d, round_=2), "splits": splits_figure}[kind]
    drawn = {}
    for fmt in FORMATS:
        run = write_run(tmp_path / fmt / "run", fmt=fmt)
        assert not (run / "events.csv").exists() if fmt == "parquet" else (run / "events.csv").exists()
        fig = figure(run)
        drawn[fmt] = [[tuple(t.get_text() for t in ax.get_yticklabels()), ax.get_xlim()]
                      for ax in fig.axes]
    assert drawn["parquet"] == drawn["csv"]
    assert "C0 pi4_wifi" in drawn["csv"][0][0]  # the device groups, from the clients table


def test_a_missing_path_a_file_or_a_sweep_given_as_a_run_says_which(tmp_path):
    sweep = write_sweep(tmp_path / "sweep")
    (tmp_path / "notes.txt").write_text("x")
    for given, said in ((tmp_path / "nowhere", f"{tmp_path / 'nowhere'} does not exist; give an "
                                                "sflsim results directory (it holds summary.json "
                                                "and rounds.csv)"),
                        (tmp_path / "notes.txt", "notes.txt is a file, not an sflsim results "
                                                 "directory"),
                        (sweep, f"{sweep} is a sweep directory, not one run's results; give one "
                                f"of its points, e.g. {sweep / 'points' / 'p000'} (sweep.csv "
                                f"lists them)")):
        result = CliRunner().invoke(app, ["plot", "timeline", str(given), "-o",
                                          str(tmp_path / "t")])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "nowhere does not exist" in result.output
    # a sweep whose sweep.csv is gone: compare and plot sweep say how to write it again
    (sweep / "sweep.yaml").write_text("base: base.yaml\naxes: {seed: [0]}\n")
    (sweep / "sweep.csv").unlink()
    said = (f"{sweep} holds a sweep (sweep.yaml) without its table sweep.csv; write it with "
            f"`sflsim sweep {sweep / 'sweep.yaml'} -o {sweep}`")
    for args in (["compare", str(sweep)], ["plot", "sweep", str(sweep), "--x", "seed"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


def test_a_timing_only_run_is_named_as_such_where_accuracy_is_asked_for(tmp_path):
    nan = float("nan")
    run = write_run(tmp_path / "timing", accuracies=(nan, nan), untrained=None,
                    early_exit=False)
    (run / "scenario.yaml").write_text("name: timing\ntraining: {timing_only: true}\n")
    said = "the run is timing-only (--no-train): it trained nothing, so it has no"
    with pytest.raises(SflsimError, match=re.escape(f"{said} accuracy to plot")):
        plot_tta([run], tmp_path / "t")
    with pytest.raises(SflsimError, match=re.escape(f"{said} early-exit results")):
        plot_early_exit(run, tmp_path / "e")
    result = CliRunner().invoke(app, ["compare", str(run)], env={"COLUMNS": "200"})
    row = next(line for line in result.output.splitlines() if line.startswith(" timing"))
    assert "n/a" in row and "never" not in row, result.output


def test_not_a_result_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    for draw in (lambda d: plot_tta([d], tmp_path / "x"), lambda d: plot_timeline(d, tmp_path / "x"),
                 lambda d: plot_splits(d, tmp_path / "x"), lambda d: plot_early_exit(d, tmp_path / "x"),
                 lambda d: plot_tradeoff([d], tmp_path / "x")):
        with pytest.raises(SflsimError, match="is not an sflsim results directory"):
            draw(tmp_path / "empty")
    assert not list(tmp_path.glob("x.*"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_tables_are_named(tmp_path, fmt):
    run = write_run(tmp_path / "run", early_exit=False, fmt=fmt)
    with pytest.raises(SflsimError, match="has no early_exit.csv.*early_exit.enabled: true"):
        plot_early_exit(run, tmp_path / "x")
    with pytest.raises(SflsimError, match="has no early_exit.csv"):
        plot_tradeoff([run], tmp_path / "x", x="latency_s_mean")
    with pytest.raises(SflsimError, match="no events in round 9 .*rounds recorded: 1-3"):
        plot_timeline(run, tmp_path / "x", round_=9)
    (run / f"events.{fmt}").unlink()
    with pytest.raises(SflsimError, match=r"has no events\.parquet or events\.csv; it is written"):
        plot_timeline(run, tmp_path / "x")
    (run / f"clients.{fmt}").unlink()
    with pytest.raises(SflsimError, match=r"has no clients\.parquet or clients\.csv"):
        plot_splits(run, tmp_path / "x")
    with pytest.raises(SflsimError, match="unknown --x"):
        plot_tradeoff([run], tmp_path / "x", x="speed")
    with pytest.raises(SflsimError, match="unknown --x 'energy'; did you mean 'client_energy_j'"):
        plot_tradeoff([run], tmp_path / "x", x="energy")


def test_pareto_front_keeps_undominated_points():
    x = np.array([1.0, 2.0, 2.0, 3.0, 4.0, np.nan])
    y = np.array([50.0, 60.0, 55.0, 58.0, 70.0, 99.0])
    assert pareto_front(x, y).tolist() == [0, 1, 4]


def test_pareto_front_ties_within_the_tolerance_are_all_on_it():
    # the case: Sequential, Averaging, Distributed 0.0003 s apart at 9.07 s, equal
    # accuracy (float noise in its last digits): no ranking, all three on the front
    x = np.array([9.0700, 9.0698, 9.0697])
    y = np.array([0.61, 0.61 + 1e-12, 0.61 - 1e-12])
    assert sorted(pareto_front(x, y).tolist()) == [0, 1, 2]
    assert 9.0700 - 9.0697 < X_REL_TOL * 9.07
    # equal time within the tolerance: the higher accuracy wins
    assert pareto_front(x, np.array([0.62, 0.61, 0.61])).tolist() == [0]
    # beyond the tolerance the faster one ranks: 0.01 s at 9.07 s is 0.11%
    assert pareto_front(np.array([9.08, 9.07]), np.array([0.61, 0.61])).tolist() == [1]
    # exact duplicates are ties too
    assert sorted(pareto_front(np.array([5.0, 5.0, 6.0]), np.array([0.7, 0.7, 0.7])).tolist()) == [
        0, 1]


def test_tradeoff_marks_every_tied_run_on_the_front(tmp_path):
    runs = []
    for name, t in (("seq", 9.0700), ("avg", 9.0698), ("dist", 9.0697), ("slow", 9.5)):
        run = write_run(tmp_path / name)
        summary = json.loads((run / "summary.json").read_text())
        summary.update(sim_time_s=t, final_server_accuracy=0.61)
        (run / "summary.json").write_text(json.dumps(summary))
        runs.append(run)
    points = tradeoff_points(runs)
    assert points.set_index("label")["on_front"].to_dict() == {
        "seq": True, "avg": True, "dist": True, "slow": False}
    rings = [line for line in tradeoff_figure(runs).axes[0].get_lines()
             if line.get_marker() == "o" and line.get_markersize() == 7]
    assert sorted(rings[0].get_xdata()) == pytest.approx([9.0697, 9.0698, 9.0700])
    text = front_text(points, "sim_time_s")
    assert "0.01%" in text and "1e-09" in text and "ties" in text
    assert [line.split()[0] for line in text.splitlines()[2:]] == ["dist", "avg", "seq"]


def _legend_texts(fig) -> list[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def test_every_figure_labels_runs_with_their_names(runs, tmp_path):
    """One kind of label: the run's name, in every figure that names runs (tta, tradeoff
    with either x); sweep points by their names too; not algorithm names."""
    named = [runs["seq"], runs["avg"]]
    assert _legend_texts(tta_figure(named)) == ["seq", "avg"]
    assert _legend_texts(tradeoff_figure(named)) == ["Pareto front", "seq", "avg"]
    assert _legend_texts(tradeoff_figure(named, x="latency_s_mean")) == [
        "Pareto front", "seq", "avg"]
    # sweep points by what varies, as sflsim compare names them (not the point's scenario
    # name, which write_sweep makes its folder's)
    from sflsim.metrics.compare import compare_runs

    sweep = list(compare_runs([runs["sweep"]])["run"])
    assert sweep == ["p000 (server.slots=1)", "p001 (server.slots=2)"]
    # the figures add the points' algorithm (compare has a column for it)
    sweep = [label.replace(")", ", algorithm=hetero_splitee_sequential)") for label in sweep]
    assert _legend_texts(tta_figure([runs["sweep"]])) == sweep
    assert _legend_texts(tradeoff_figure([runs["sweep"]])) == ["Pareto front", *sweep]
    assert not tradeoff_figure([runs["sweep"]]).axes[0].texts  # no second kind of label
    # the same name twice: told apart by the shortest distinguishing path
    twins = [write_run(tmp_path / "a" / "run"), write_run(tmp_path / "b" / "run", "distributed")]
    assert _legend_texts(tta_figure(twins)) == ["run (a/run)", "run (b/run)"]


@pytest.mark.parametrize(("out", "formats", "written"), [
    ("fig.png", None, ["fig.png"]),
    ("fig.svg", None, ["fig.svg"]),
    ("fig.PDF", None, ["fig.PDF"]),
    ("fig.png", ["png"], ["fig.png"]),
    ("fig", None, ["fig.png", "fig.pdf"]),
    ("fig", ["svg"], ["fig.svg"]),
    ("tta_0.7", None, ["tta_0.7.png", "tta_0.7.pdf"]),  # not an image extension: a prefix
])
def test_output_extension_is_the_format(runs, tmp_path, out, formats, written):
    paths = plot_tta([runs["seq"]], tmp_path / out, formats=formats)
    assert [p.name for p in paths] == written
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(written)
    heads = {".png": PNG_MAGIC, ".pdf": b"%PDF", ".svg": b"<?xml"}
    for p in paths:
        assert p.read_bytes().startswith(heads[p.suffix.lower()])


@pytest.mark.parametrize(("out", "formats", "message"), [
    ("fig.jpg", None, r"cannot write a figure as \.jpg"),
    ("fig.eps", None, r"cannot write a figure as \.eps.*\.png, \.pdf, \.svg"),
    ("fig.png", ["pdf"], "names the format png but the formats asked for are pdf"),
    ("fig.png", ["png", "pdf"], "without an extension"),
])
def test_output_extension_errors(runs, tmp_path, out, formats, message):
    with pytest.raises(SflsimError, match=message):
        plot_tta([runs["seq"]], tmp_path / out, formats=formats)
    assert not list(tmp_path.glob("fig*"))


def test_server_lanes_and_queue():
    assert server_lanes(np.array([0.0, 0.5, 1.0, 1.2]), np.array([1.0, 1.5, 2.0, 1.4])).tolist() == [
        0, 1, 0, 2]
    events = pd.DataFrame({"actor": ["server"] * 3, "start_s": [2.0, 3.0, 3.0],
                           "queue_s": [1.0, 1.5, 0.0]})
    t, waiting = queue_steps(events)
    assert t.tolist() == [1.0, 1.5, 2.0, 3.0]
    assert waiting.tolist() == [1, 2, 1, 0]


def test_formats():
    assert parse_formats("png, PDF,png") == ["png", "pdf"]
    with pytest.raises(SflsimError, match="unknown figure format jpg"):
        parse_formats("png,jpg")


def test_cli_plot_writes_files(runs, tmp_path):
    out = tmp_path / "cli" / "tta"
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), str(runs["avg"]),
                                      "-o", str(out), "--target", "0.7"])
    assert result.exit_code == 0, result.output
    assert (out.parent / "tta.png").is_file() and (out.parent / "tta.pdf").is_file()
    assert "tta.png" in result.output
    result = CliRunner().invoke(app, ["plot", "timeline", str(runs["seq"]), "--round", "2",
                                      "--format", "png", "-o", str(tmp_path / "cli" / "tl")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli" / "tl.png").is_file() and not (tmp_path / "cli" / "tl.pdf").exists()


def test_cli_plot_output_extension(runs, tmp_path):
    out = tmp_path / "p.png"
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("p.*")) == ["p.png"]
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), "-o", str(tmp_path / "q.jpg")])
    assert result.exit_code == 2 and "cannot write a figure as .jpg" in result.output
    result = CliRunner().invoke(app, ["plot", "splits", str(runs["seq"]), "-o", str(out),
                                      "--format", "svg"])
    assert result.exit_code == 2 and "names the format png" in result.output
    assert not list(tmp_path.glob("q.*"))


def test_cli_plot_prints_times_to_target_and_the_front(runs, tmp_path):
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), str(runs["avg"]),
                                      "-o", str(tmp_path / "t"), "--target", "0.7"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["run", "time", "to", "70%", "(s)"]
    assert lines[1].split() == ["seq", "20"] and lines[2].split() == ["avg", "not", "reached"]
    result = CliRunner().invoke(app, ["plot", "tradeoff", str(runs["seq"]), str(runs["avg"]),
                                      "-o", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    assert "Pareto front" in result.output and "ties" in result.output
    assert "seq" in result.output and "avg" in result.output  # faster vs more accurate


def test_cli_plot_early_exit_tau_min(runs, tmp_path):
    run = write_run(tmp_path / "run", dataset="fashion_mnist")
    result = CliRunner().invoke(app, ["plot", "early-exit", str(run), "--tau-min", "-4",
                                      "-o", str(tmp_path / "e.png")])
    assert result.exit_code == 0, result.output
    assert "-ln(number of classes)" not in result.output  # the user chose the start
    result = CliRunner().invoke(app, ["plot", "early-exit", str(run), "-o", str(tmp_path / "d.png")])
    assert result.exit_code == 0, result.output
    assert "thresholds from tau = -ln(number of classes) = -2.30" in result.output  # 10 classes
    result = CliRunner().invoke(app, ["plot", "tta", str(run), "--tau-min", "-4"])
    assert result.exit_code == 2 and "--tau-min applies to `sflsim plot early-exit`" in result.output
    result = CliRunner().invoke(app, ["plot", "--help"], env={"COLUMNS": "200"})
    assert "-ln(number of classes" in result.output
    header = (run / "early_exit.csv").read_text().splitlines()[0]
    (run / "early_exit.csv").write_text(header + "\n")  # cut to its header
    result = CliRunner().invoke(app, ["plot", "early-exit", str(run), "-o", str(tmp_path / "h")])
    assert result.exit_code == 2 and "early_exit.csv has no rows (its header only)" in \
        result.output and "nan" not in result.output, result.output


def test_cli_plot_bad_input(runs, tmp_path):
    result = CliRunner().invoke(app, ["plot", "splits", str(tmp_path), "-o", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "is not an sflsim results directory" in result.output
    result = CliRunner().invoke(app, ["plot", "timeline", str(runs["seq"]), str(runs["avg"])])
    assert result.exit_code == 2
    assert "takes one results directory" in result.output
    result = CliRunner().invoke(app, ["plot", "bars", str(runs["seq"])])
    assert result.exit_code == 2
    assert "tradeoff" in result.output


def test_binned_queue_is_the_time_weighted_mean_and_the_peak():
    from sflsim.plots.timeline import binned_queue

    # 1 job waits over [0, 1), 2 over [1, 1.5), none after; two bins of [0, 2)
    t, waiting = np.array([0.0, 1.0, 1.5]), np.array([1.0, 2.0, 0.0])
    edges, mean, most = binned_queue(t, waiting, 0.0, 2.0, bins=2)
    assert edges.tolist() == [0.0, 1.0, 2.0]
    assert mean.tolist() == pytest.approx([1.0, 1.0]) and most.tolist() == [1.0, 2.0]


def test_timeline_of_many_waiting_jobs_is_binned_not_a_solid_block(tmp_path):
    """Thousands of short waits: the waiting-jobs panel draws a mean per bin and the peak,
    not one step per change (which fills the panel)."""
    from sflsim.plots.timeline import QUEUE_BINS, timeline_figure

    run = write_run(tmp_path / "many", accuracies=(0.5,))
    rng = np.random.default_rng(0)
    starts = np.sort(rng.uniform(0.0, 10.0, 3000))
    waits = rng.uniform(0.001, 0.05, 3000)
    frame = pd.DataFrame({"round": 1, "actor": "server", "activity": "server_train",
                          "client_id": np.arange(3000) % 3, "start_s": starts,
                          "end_s": starts + 0.001, "queue_s": waits, "payload_bytes": 0,
                          "flops": 1e6})
    frame["seq"] = range(len(frame))
    frame.to_csv(run / "events.csv", index=False)
    fig = timeline_figure(run)
    queue = fig.axes[1]
    lines = [line for line in queue.get_lines() if len(line.get_xdata()) > 2]
    assert lines and all(len(line.get_xdata()) <= QUEUE_BINS + 1 for line in lines)
    # named in the figure's legend below the panels, not over the curve
    assert queue.get_legend() is None
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "Waiting jobs, mean per 0.05 s" in labels and "Waiting jobs, most per 0.05 s" in labels


def test_timeline_of_a_thousand_clients_keeps_the_queue_panel_readable(tmp_path):
    """1,000 client rows fill the tallest figure; the waiting-jobs panel keeps its height
    (it was squeezed to a sliver by the rows' share of the height)."""
    from sflsim.plots.timeline import MAX_HEIGHT_IN, timeline_figure

    run = write_run(tmp_path / "fleet", accuracies=(0.5,))
    n = 1000
    frame = pd.DataFrame({"round": 1, "actor": [f"client{i}" for i in range(n)] + ["server"] * n,
                          "activity": ["client_train"] * n + ["server_train"] * n,
                          "client_id": list(range(n)) * 2,
                          "start_s": [0.0] * n + [0.1 + 0.001 * i for i in range(n)],
                          "end_s": [0.1] * n + [0.101 + 0.001 * i for i in range(n)],
                          "queue_s": [0.0] * n + [0.001 * i for i in range(n)],
                          "payload_bytes": 0, "flops": 1e6})
    frame["seq"] = range(len(frame))
    frame.to_csv(run / "events.csv", index=False)
    fig = timeline_figure(run)
    fig.draw_without_rendering()
    height_in = fig.get_figheight()
    assert height_in <= MAX_HEIGHT_IN + 1e-9
    assert fig.axes[1].get_position().height * height_in > 1.0


def test_cli_plot_into_a_folder_or_an_empty_path(runs, tmp_path):
    """``-o FOLDER`` (an existing one, ``.`` too) writes the default names in it; an empty
    ``-o`` is refused before anything is drawn (it was a matplotlib traceback)."""
    folder = tmp_path / "figs"
    folder.mkdir()
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), "-o", str(folder)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == ["tta.pdf", "tta.png"]
    result = CliRunner().invoke(app, ["plot", "tta", str(runs["seq"]), "-o", ""])
    assert result.exit_code == 2 and "-o '': an empty path" in result.output
    assert "Traceback" not in result.output
