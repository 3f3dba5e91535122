"""analysis/reproduce.py and its package analysis/reproduction/: targets, the paper-number file,
claim checks, one smoke run."""

from __future__ import annotations

import importlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.table_files import FORMATS, copy_run

REQUIRED = ("hetero_splitee.table4", "hetero_splitee.table3", "hetero_splitee.fig2",
            "fedsga.table5", "fedsga.table4", "fedsga.fig4", "fedsga.table2", "fedsga.table4_vit",
            "fedsga.table5_vit")


def test_list_names_every_target(reproduce, capsys):
    assert reproduce.main(["--list"]) == 0
    out = capsys.readouterr().out
    for key in REQUIRED:
        assert key in out
    assert "claim centralized_upper_bound" in out


def test_dry_run_validates_every_point(reproduce, capsys):
    assert reproduce.main(["fedsga.table5", "--scale", "cpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "fedsga-dir0.1 (seeds 0..2)" in out and "model width" in out


def test_extra_analyses_register_as_targets(reproduce, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "reproduce_demo.py").write_text(
        "import reproduce as R\n"
        "class Demo(R.Target):\n"
        "    key, paper, title = 'fedsga.demo_analysis', 'fedsga', 'a demo analysis'\n"
        "    def points(self, scale):\n"
        "        return []\n"
        "    def analyse(self, ctx):\n"
        "        return f'demo body under {ctx.root.name}', []\n"
        "R.register(Demo())\n")
    try:
        assert reproduce.load_plugins(plugins) == ["reproduce_demo"]
        report = tmp_path / "R.md"
        assert reproduce.main(["fedsga.demo_analysis", "--scale", "smoke", "-o",
                               str(tmp_path / "runs"), "--report", str(report)]) == 0
        text = report.read_text()
        assert "<!-- reproduce:begin fedsga.demo_analysis@smoke -->" in text
        assert "demo body under smoke" in text
    finally:
        reproduce.TARGETS.pop("fedsga.demo_analysis", None)
        sys.modules.pop("reproduce_demo", None)


def _plugin(tmp_path: Path, text: str, name: str = "reproduce_mine") -> Path:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / f"{name}.py").write_text(text)
    return plugins


#: a target of its own with one claim that names ``REF``; nothing to run
MINE = """import dataclasses
import reproduce as R

PAPER = "{paper}"
if PAPER == "my_paper":  # as README "Adding a target" shows
    R.PAPER_TITLES["my_paper"] = 'MyMethod, "Title of the paper" (Venue 2026, arXiv 2601.00001)'
    R.SCALE_TABLE[("my_paper", "smoke")] = dataclasses.replace(R.FEDSGA_SMOKE, paper="my_paper",
                                                               shrinks=())
class Mine(R.Target):
    key, paper, title = "{paper}.mine", PAPER, "a target of its own"
    def points(self, scale):
        return []
    def claims(self):
        return [R.greater("a_above_b", "A above B", "here", "A", "B", ["x"],
                          ({ref},))]
    def analyse(self, ctx):
        return "mine body", []
R.register(Mine())
"""
FEDAVG_REF = ("fedsga", "Table 2", "FedAvg", "CIFAR-100 IID")


@pytest.mark.parametrize(("text", "fragment"), [
    ("import reproduce as R\n\nR.Targt\n", r"reproduce_mine.py:3: AttributeError: the harness "
                                           r"\(import reproduce as R\) has no 'Targt'; did you "
                                           r"mean 'Target'\?"),
    ("import reproduce as R\ndef broken(:\n", r"reproduce_mine.py:2: SyntaxError: "),
    (MINE.format(paper="fedsga", ref=FEDAVG_REF).replace("R.register(Mine())",
                                                         "R.register(Mine())\nR.register(Mine())"),
     r"reproduce_mine.py:19: ValueError: target 'fedsga.mine' is registered twice"),
])
def test_a_target_file_that_raises_is_one_line_and_registers_nothing(reproduce, tmp_path,
                                                                     monkeypatch, capsys,
                                                                     text, fragment):
    plugins = _plugin(tmp_path, text)
    monkeypatch.setattr(sys.modules["reproduction.cli"], "load_plugins",
                        lambda: reproduce.load_plugins(plugins))
    assert reproduce.main(["fedsga.table5", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"error: .*{fragment}.* \(the harness imports every "
                        rf"analysis/reproduce_\*.py at start-up: fix the file or move it "
                        rf"aside\)\n", err), err
    assert "fedsga.mine" not in reproduce.TARGETS and "reproduce_mine" not in sys.modules


def test_a_claim_naming_a_number_the_file_lacks_stops_before_anything_runs(reproduce, tmp_path,
                                                                          capsys):
    typo = ("fedsga", "Table 2", "FedAvg", "CIFAR-100 iid")
    try:
        reproduce.load_plugins(_plugin(tmp_path, MINE.format(paper="fedsga", ref=typo)))
        assert reproduce.main(["fedsga.mine", "--scale", "smoke", "-o",
                               str(tmp_path / "runs")]) == 2
        assert capsys.readouterr().err == (
            "error: fedsga.mine: claim a_above_b names a number that paper_numbers.csv lacks: "
            "fedsga, Table 2, FedAvg, CIFAR-100 iid; add the row "
            "(paper,table_or_figure,row,column,value,...) or fix the claim's refs\n")
        assert not (tmp_path / "runs").exists()
    finally:
        reproduce.TARGETS.pop("fedsga.mine", None)
        sys.modules.pop("reproduce_mine", None)


def test_a_target_of_another_paper_adds_its_scale_and_citation(reproduce, tmp_path, capsys):
    """README "Adding a target": a paper that is neither FedSGA nor Hetero-SplitEE; and
    without a scale, one message saying which papers have scales."""
    try:
        reproduce.load_plugins(_plugin(tmp_path, MINE.format(paper="my_paper", ref=FEDAVG_REF)))
        report = tmp_path / "R.md"
        assert reproduce.main(["my_paper.mine", "--scale", "smoke", "-o", str(tmp_path / "runs"),
                               "--report", str(report)]) == 0
        text = report.read_text()
        assert 'Paper: MyMethod, "Title of the paper" (Venue 2026, arXiv 2601.00001)' in text
        assert "mine body" in text and "FedSGA" not in text
        capsys.readouterr()
        del reproduce.SCALE_TABLE[("my_paper", "smoke")]
        assert reproduce.main(["my_paper.mine", "--scale", "smoke", "--dry-run"]) == 2
        assert capsys.readouterr().err.startswith(
            "error: my_paper.mine: paper 'my_paper' has no scales; papers with scales: fedsga, "
            "hetero_splitee (SCALE_TABLE)")
    finally:
        reproduce.TARGETS.pop("my_paper.mine", None)
        reproduce.SCALE_TABLE.pop(("my_paper", "smoke"), None)
        reproduce.PAPER_TITLES.pop("my_paper", None)
        sys.modules.pop("reproduce_mine", None)


@pytest.mark.parametrize(("rows", "expected"), [
    ("fedsga,Table 2,FedAvg,IID,1,,,\nfedsga,Table 3,FedAvg,IID,1,,,\n"
     "fedsga,Table 2,FedAvg,IID,2,,,\n",
     r"lines 2 and 4 are the same number \(fedsga, Table 2, FedAvg, IID\); keep one"),
    ("fedsga,Table 2\n", None),
])
def test_a_bad_paper_numbers_file_is_one_message(reproduce, tmp_path, rows, expected):
    from sflsim.errors import ConfigError

    path = tmp_path / "numbers.csv"
    header = ",".join(reproduce.PaperNumbers.COLUMNS)
    path.write_text((header if expected else "paper,table_or_figure") + "\n" + rows)
    with pytest.raises(ConfigError, match=expected or r"missing columns row, column, value, "
                                                       r"std, unit, notes; the header is paper,"):
        reproduce.PaperNumbers(path)


def test_paper_numbers_parse_and_claims_reference_existing_numbers(reproduce):
    numbers = reproduce.PaperNumbers()
    # spot checks against the papers' text
    assert numbers.stat(("hetero_splitee", "Table IV", "Sequential/Server", "CIFAR-100 Layer-3")
                        ).mean == pytest.approx(33.49)
    fedsga = numbers.stat(("fedsga", "Table 2", "FedSGA", "CIFAR-100 Non-IID"))
    assert (fedsga.mean, fedsga.std) == (pytest.approx(55.78), pytest.approx(0.38))
    assert numbers.stat(("fedsga", "Table 5a", "MultiSFL", "CIFAR-100 FLOPs")).mean == 0.62
    assert numbers.setting("fedsga", "local_epochs") == "5"
    for target in reproduce.TARGETS.values():
        claims = target.claims()
        assert claims, target.key
        assert len({c.name for c in claims}) == len(claims), target.key
        for claim in claims:
            assert claim.refs, (target.key, claim.name)
            for ref in claim.refs:
                assert numbers.has(ref), (target.key, claim.name, ref)
        # every view the target compares against is a table of the file
        for scale_name in ("cpu", "smoke"):
            if scale_name not in target.scales:
                continue
            scale = reproduce.SCALE_TABLE[(target.paper, scale_name)]
            for view in target.paper_views(numbers, scale):
                assert view.cells, (target.key, view.name)


def table(reproduce, cells):
    return reproduce.ResultTable({k: reproduce.Stat(*v) if isinstance(v, tuple)
                                  else reproduce.Stat(v) for k, v in cells.items()})


def test_claims_pass_and_fail_on_synthetic_tables(reproduce):
    t4 = {c.name: c for c in reproduce.TARGETS["hetero_splitee.table4"].claims()}
    layers = ("Layer-3", "Layer-4", "Layer-5")

    def hetero(seq, avg, dist, cent):
        return table(reproduce, {(f"{m}/Server", c): v for m, v in
                                 (("Sequential", seq), ("Averaging", avg), ("Distributed", dist),
                                  ("Centralized", cent)) for c in layers})

    # a challenging task (Distributed at most 39%, CIFAR-100's regime): "notable improvements"
    good = hetero(36.0, 35.0, 30.0, 60.0)
    for name in ("centralized_upper_bound", "sequential_above_distributed_on_hard_task",
                 "averaging_above_distributed_on_hard_task", "sequential_averaging_close"):
        assert t4[name].evaluate(good).status == "PASS", name
    # the easy-task claims do not apply there: N/A with the paper's condition, not a verdict
    verdict = t4["sequential_similar_to_distributed_on_easy_task"].evaluate(good)
    assert verdict.status == "N/A" and "condition" in verdict.detail and "30.00%" in verdict.detail
    bad = hetero(30.0, 35.0, 32.0, 34.0)
    for name in ("centralized_upper_bound", "sequential_above_distributed_on_hard_task",
                 "sequential_averaging_close"):
        assert t4[name].evaluate(bad).status == "FAIL", name
    assert t4["averaging_above_distributed_on_hard_task"].evaluate(bad).status == "PASS"
    # an easy task (CIFAR-10's 67-73%): "similar performance", within 4 points at every layer
    easy = hetero(71.0, 74.5, 70.0, 87.0)
    assert t4["sequential_similar_to_distributed_on_easy_task"].evaluate(easy).status == "PASS"
    assert t4["averaging_similar_to_distributed_on_easy_task"].evaluate(easy).status == "FAIL"
    assert t4["sequential_above_distributed_on_hard_task"].evaluate(easy).status == "N/A"
    # between the two regimes (STL-10's 46-51%) neither claim of §IV-B applies
    middle = hetero(52.0, 51.0, 50.0, 75.0)
    assert {t4[n].evaluate(middle).status for n in t4 if "_task" in n} == {"N/A"}
    # a missing number is N/A, not a verdict
    partial = table(reproduce, {("Sequential/Server", "Layer-3"): 60.0})
    assert t4["sequential_above_distributed_on_hard_task"].evaluate(partial).status == "N/A"

    t5 = {c.name: c for c in reproduce.TARGETS["fedsga.table5"].claims()}
    cells = {("FedSGA", "IID Params"): 4.0, ("MultiSFL", "IID Params"): 5.0,
             ("FedSGA", "IID Acc."): (60.0, 1.0, 3), ("MultiSFL", "IID Acc."): (61.0, 1.0, 3)}
    assert t5["fedsga_params_vs_multisfl_iid"].evaluate(table(reproduce, cells)).status == "PASS"
    verdict = t5["fedsga_acc_vs_multisfl_iid"].evaluate(table(reproduce, cells))
    assert verdict.status == "WITHIN NOISE" and verdict.holds is False
    assert "within noise: margin -1 inside the spread 1.41" in verdict.detail

    fig2 = {c.name: c for c in reproduce.TARGETS["hetero_splitee.fig2"].claims()}
    taus = (-4.0, -2.0, -1.0, 0.0)
    rising = table(reproduce, {("Layer-3", f"accuracy@{t:.4f}"): v
                               for t, v in zip(taus, (50.0, 55.0, 54.5, 60.0))})
    assert fig2["accuracy_rises_with_threshold"].evaluate(rising).status == "PASS"
    dipping = table(reproduce, {("Layer-3", f"accuracy@{t:.4f}"): v
                                for t, v in zip(taus, (50.0, 58.0, 52.0, 60.0))})
    assert fig2["accuracy_rises_with_threshold"].evaluate(dipping).status == "FAIL"
    exits = table(reproduce, {("Layer-3", f"exit_ratio@{t:.4f}"): v
                              for t, v in zip(taus, (90.0, 60.0, 61.0, 0.0))})
    assert fig2["exit_ratio_falls_with_threshold"].evaluate(exits).status == "FAIL"

    t4a = {c.name: c for c in reproduce.TARGETS["fedsga.table4"].claims()}
    ablation = table(reproduce, {("full (FedSGA)", "IID"): 60.0, ("w/o Adapt.", "IID"): 58.0,
                                 ("w/o Suff. Est.", "IID"): 55.0, ("w/o Harmon.", "IID"): 57.0})
    assert t4a["sufficiency_matters_most_iid"].evaluate(ablation).status == "PASS"
    assert t4a["removing_adapt_costs_accuracy_iid"].evaluate(ablation).status == "PASS"
    ablation.cells[("w/o Adapt.", "IID")] = reproduce.Stat(61.0)
    assert t4a["removing_adapt_costs_accuracy_iid"].evaluate(ablation).status == "FAIL"


def test_claims_hold_on_the_papers_own_numbers(reproduce):
    """Each check says what the paper says: on the paper's headline dataset it passes."""
    numbers = reproduce.PaperNumbers()
    for key in ("hetero_splitee.table4", "hetero_splitee.table3", "fedsga.table2",
                "fedsga.table5", "fedsga.table4", "fedsga.fig4"):
        target = reproduce.TARGETS[key]
        view = target.paper_views(numbers, reproduce.SCALE_TABLE[(target.paper, "cpu")])[0]
        assert view.name == "paper CIFAR-100"
        for claim in target.claims():
            verdict = claim.evaluate(view)
            # the paper's own margin may be inside its printed ± (then its direction holds)
            assert verdict.status in ("PASS", "N/A") or (
                verdict.status == "WITHIN NOISE" and verdict.holds), (key, claim.name, verdict)


def test_report_sections_are_replaced_independently(reproduce, tmp_path):
    report = tmp_path / "R.md"
    reproduce.update_report(report, "fedsga.table5@cpu", "## fedsga.table5\nfirst")
    reproduce.update_report(report, "hetero_splitee.table4@cpu", "## hetero_splitee.table4\nA")
    reproduce.update_report(report, "fedsga.table5@cpu", "## fedsga.table5\nsecond")
    text = report.read_text()
    assert "second" in text and "first" not in text and "\nA\n" in text
    # registry order: Hetero-SplitEE's Table IV before FedSGA's Table 5
    assert text.index("hetero_splitee.table4") < text.index("## fedsga.table5")


def test_smoke_run_writes_its_section(reproduce, tmp_path, capsys):
    out, report = tmp_path / "runs", tmp_path / "REPRODUCTION.md"
    args = ["hetero_splitee.table4", "--scale", "smoke", "-o", str(out), "--report", str(report),
            "--workers", "1", "--threads", "1"]
    assert reproduce.main(args) == 0
    text = report.read_text()
    assert "<!-- reproduce:begin hetero_splitee.table4@smoke -->" in text
    assert "### Claims" in text and "`centralized_upper_bound`" in text
    points = reproduce.TARGETS["hetero_splitee.table4"].points(
        reproduce.SCALE_TABLE[("hetero_splitee", "smoke")])
    assert len(points) == 9  # 4 methods and 5 readings
    assert "9 of 9 completed" in text and "**Readings**" in text
    assert "physics check (`sflsim check`, every completed run): 9 of 9 pass" in text
    # the verdicts of a 1-round smoke run mean nothing, and say so; that there is one per
    # claim does
    verdicts = re.findall(r"\*\*(PASS|FAIL|WITHIN NOISE|N/A) \(pipeline check only\)\*\*", text)
    assert len(verdicts) == len(reproduce.TARGETS["hetero_splitee.table4"].claims()) == 6
    assert "**PASS**" not in text and "**FAIL**" not in text
    assert "says only that the pipeline runs" in text
    assert "(pipeline check only) |" in text.split("## Summary")[1].split("<!--")[0]
    # a second invocation reuses the finished points and replaces the section
    assert reproduce.main(args + ["--report-only"]) == 0
    again = report.read_text()
    assert again.count("<!-- reproduce:begin hetero_splitee.table4@smoke -->") == 1


def test_fedsga_readings_share_the_default_runs_and_read_the_probes(reproduce, tiny, tmp_path):
    """fedsga.readings: its default-reading points are fedsga.table5's scenarios (linked,
    not rerun), every reading validates, and a run's row reads the cut shares and the
    calibration probes from clients.csv."""
    from sflsim.config import validate_scenario
    from sflsim.runner import run_scenario

    reproduce.load_plugins()
    readings = reproduce.TARGETS["fedsga.readings"]
    scale = reproduce.scale_for(readings, "cpu")
    mine = {p.label: m for p, _, m in reproduce.point_mappings(readings, scale, 1, [])}
    table5 = {p.label: m for p, _, m in reproduce.point_mappings(
        reproduce.TARGETS["fedsga.table5"], scale, 1, [])}
    for label in ("fedsga-iid", "fedsga-dir0.1", "multisfl-iid", "multisfl-dir0.1"):
        assert reproduce.scenario_key(mine[label]) == reproduce.scenario_key(table5[label])
    assert all(reproduce.scenario_key(m) for m in mine.values())  # every reading validates
    assert mine["fedsga-separate-iid"]["algorithm"]["backbone"] == "separate"
    assert {c.name for c in readings.claims()} >= {"fedsga_acc_vs_multisfl",
                                                   "fedsga_earlier_acc_noniid_vs_multisfl"}

    from reproduction import fedsga_readings as readings_module
    tiny["algorithm"] = {"name": "fedsga", "calibration_every": 2}
    tiny["training"]["rounds"] = 3
    run_scenario(validate_scenario(tiny), tmp_path / "run")
    rows, frames = [], []
    for fmt in FORMATS:  # the clients table as Parquet, and as a run before Parquet wrote it
        run = copy_run(tmp_path / "run", tmp_path / fmt, fmt)
        rows.append(readings_module.run_numbers(run))
        frames.append(readings_module.calibration_rounds(run))
    row, frame = rows[0], frames[0]
    assert rows[1] == row
    pd.testing.assert_frame_equal(frames[1], frame, check_exact=True)
    shares = row[readings_module.CUTS]  # pooled over seeds by collect, so numbers here
    assert sum(shares) == pytest.approx(100, abs=1e-9)
    assert row["mean L_p1"] > 0 and 0 <= row["s = 1 (% of probes)"] <= 100
    assert list(frame.index) == [3] and frame["probes"].tolist() == [3]

    # what is left of the Non-IID gap: MultiSFL's Non-IID accuracy minus each reading's
    Stat = reproduce.Stat
    names = readings.NAMES
    ours = reproduce.ResultTable({
        (names["multisfl"], "Non-IID Acc."): Stat.of([70.0, 66.0]),
        (names["multisfl"], "IID Acc."): Stat.of([80.0]),
        (names["fedsga"], "Non-IID Acc."): Stat.of([50.0]),
        (names["fedsga"], "IID Acc."): Stat.of([81.0]),
        (names["fedsga-sequential"], "Non-IID Acc."): Stat.of([61.5])})
    gap = readings.non_iid_gap(ours)
    assert f"{names['fedsga']} +18.0; {names['fedsga-sequential']} +6.5." in gap
    assert f"{names['fedsga']} 31.0; {names['multisfl']} 12.0." in gap
    assert readings.non_iid_gap(reproduce.ResultTable()) == ""


def test_a_run_of_an_earlier_reading_is_reported_stale_not_completed(reproduce, tmp_path):
    """A finished point whose stored scenario lacks a field that changes what runs do
    (an earlier sflsim's FedSGA) is not counted as completed: the report lists it stale."""
    out = tmp_path / "runs"
    args = ["fedsga.table5", "--scale", "smoke", "-o", str(out), "--workers", "1",
            "--threads", "1"]
    assert reproduce.main([*args, "--report", str(tmp_path / "first.md")]) == 0
    points = out / "smoke" / "fedsga.table5" / "points"
    fedsga = next(p for p in sorted(points.iterdir())
                  if yaml.safe_load((p / "scenario.yaml").read_text())["algorithm"]["name"] == "fedsga")
    written = yaml.safe_load((fedsga / "scenario.yaml").read_text())
    del written["algorithm"]["backbone"]
    (fedsga / "scenario.yaml").write_text(yaml.safe_dump(written))
    assert reproduce.main([*args, "--report-only", "--report", str(tmp_path / "again.md")]) == 0
    text = (tmp_path / "again.md").read_text()
    assert "3 of 4 completed" in text
    assert f"({fedsga.name}): stale made by an sflsim whose scenario differs" in text


def test_a_section_is_not_replaced_by_one_with_fewer_runs(reproduce, tmp_path, capsys):
    """``--report-only`` over an empty folder finds no runs: the section that has them is
    kept (exit status 1, a warning that says what was found), unless --replace names it."""
    report = tmp_path / "R.md"
    meta = {"target": "hetero_splitee.table4", "scale": "cpu", "date": "2026-01-01",
            "passed": 2, "failed": 1, "na": 1, "runs": 4, "completed": 4}
    old = f"## old\n<!-- reproduce:meta {json.dumps(meta)} -->\n| 67.55 |"
    reproduce.update_report(report, "hetero_splitee.table4@cpu", old)
    before = report.read_text()
    fewer = old.replace('"completed": 4', '"completed": 0').replace("67.55", "n/a")
    kept = reproduce.update_report(report, "hetero_splitee.table4@cpu", fewer)
    assert kept and "4 of 4 runs completed" in kept and "found 0 of 4 runs" in kept
    assert report.read_text() == before
    args = ["hetero_splitee.table4", "--scale", "cpu", "--report-only", "-o",
            str(tmp_path / "empty"), "--report", str(report)]
    assert reproduce.main(args) == 1
    err = capsys.readouterr().err
    assert "kept the section hetero_splitee.table4@cpu" in err and "--replace" in err
    assert "67.55" in report.read_text()
    assert reproduce.main([*args, "--replace", "hetero_splitee.table4"]) == 0
    assert "67.55" not in report.read_text()
    assert not (tmp_path / "empty").exists()  # a report of runs writes nowhere near them


def test_estimate_says_what_it_costs_and_prints_progress(reproduce, capsys):
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--help"])
    assert "it takes minutes" in " ".join(capsys.readouterr().out.split())
    lines = []
    text = reproduce.estimate(reproduce.TARGETS["hetero_splitee.table4"],
                              reproduce.scale_for(reproduce.TARGETS["hetero_splitee.table4"],
                                                  "smoke"), 1, 1, [], threads=1, log=lines.append)
    configs = len(reproduce.TARGETS["hetero_splitee.table4"].points(
        reproduce.scale_for(reproduce.TARGETS["hetero_splitee.table4"], "smoke")))
    assert lines[0].startswith(f"  timing {configs} configurations, 2 rounds each")
    starts = [line for line in lines if line.endswith("training 2 rounds ...")]
    assert len(starts) == configs and lines[1].startswith(f"  [1/{configs}] ")
    assert "total" in text


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_sigterm_stops_the_harness_and_its_worker_processes(tmp_path):
    """``kill`` of a reproduction (as a batch scheduler sends) ends its points' worker
    processes too, instead of leaving them training on with no one to collect them."""
    script = Path(__file__).resolve().parents[1] / "analysis" / "reproduce.py"
    proc = subprocess.Popen([sys.executable, str(script), "hetero_splitee.table4", "--scale",
                             "smoke", "-o", str(tmp_path), "--no-report", "--workers", "2",
                             "--set", "training.rounds=1000"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        summary = tmp_path / "smoke" / "hetero_splitee.table4" / "points" / "p000" / "summary.json"
        deadline = time.monotonic() + 240
        while not summary.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert summary.exists(), proc.communicate(timeout=30)[0]
        workers = _children(proc.pid)
        assert workers
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert "run the same command again to resume" in out
    deadline = time.monotonic() + 30
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(map(_alive, workers)), f"worker processes left running: {workers}"


def test_an_output_folder_inside_a_file_is_one_message(reproduce, tmp_path, capsys):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    assert reproduce.main(["hetero_splitee.table4", "--scale", "smoke", "-o", str(blocker),
                           "--no-report"]) == 2
    err = capsys.readouterr().err
    assert f"error: -o {blocker / 'smoke'} cannot be made: {blocker} is a file" in err
    assert blocker.read_text() == "not a directory"


def test_table4_readings_section_checks_each_claim_with_the_readings_numbers(reproduce,
                                                                            monkeypatch):
    """Each reading replaces its method's rows and the claims on that method are checked
    again; the default rows come from the default points."""
    t4 = reproduce.TARGETS["hetero_splitee.table4"]
    layers = ("Layer-3", "Layer-4", "Layer-5")

    def cells(**rows):
        return table(reproduce, {(f"{m}/Server", c): v for m, v in rows.items() for c in layers})

    default = cells(Sequential=70.0, Averaging=71.0, Distributed=71.0, Centralized=87.0)
    by_reading = {"sequential-bn-per-client": cells(Sequential=75.5),
                  "averaging-bn-shared": cells(Averaging=66.0)}
    monkeypatch.setattr(type(t4), "collect",
                        lambda self, ctx, reading=None: default if reading is None
                        else by_reading.get(reading, table(reproduce, {})))
    text = t4.readings_markdown(None)
    per_client = next(line for line in text.splitlines() if "per_client` (one set" in line)
    assert "75.50" in per_client and "+5.50" in per_client and "+4.50" in per_client
    # 75.5 vs 71: not "similar" (4 points, Table III's largest CIFAR-10 gap): FAIL
    assert "`sequential_similar_to_distributed_on_easy_task` FAIL" in per_client
    shared = next(line for line in text.splitlines() if "`bn_statistics: shared` (statistics"
                  in line)
    assert "`averaging_similar_to_distributed_on_easy_task` FAIL" in shared
    missing = next(line for line in text.splitlines() if "`server_lr_divisor: 1` (" in line)
    assert "n/a" in missing and "N/A" in missing  # not run yet: no verdict


def test_report_only_names_the_command_that_made_new_runs(reproduce, tmp_path, capsys):
    out, report = tmp_path / "runs", tmp_path / "REPRODUCTION.md"
    args = ["hetero_splitee.fig2", "--scale", "smoke", "-o", str(out), "--report", str(report),
            "--workers", "1", "--threads", "1"]
    assert reproduce.main(args) == 0
    made = "python analysis/reproduce.py hetero_splitee.fig2 --scale smoke --no-report"
    assert reproduce.main(args + ["--report-only", "--made-by", made, "--made-at", "abc1234"]) == 0
    text = report.read_text()
    assert f"- command: `{made}`" in text and "(the last run finished)" in text
    assert "(commit abc1234)" in text
    assert "- rendered again from the stored runs:" in text
    assert "1-min load" not in text.split("- command:")[1]  # the render's load is not the runs'
    assert reproduce.main(args + ["--made-by", made]) == 2
    assert "--made-by names the command" in capsys.readouterr().err
    # a clone keeps no file times: --finished-at says when the runs finished
    assert reproduce.main(args + ["--report-only", "--made-by", made,
                                  "--finished-at", "2026-12-04T20:34:05+00:00"]) == 0
    assert "- date: 2026-12-04T20:34:05+00:00 (the last run finished)" in report.read_text()
    assert reproduce.main(args + ["--report-only", "--made-by", made,
                                  "--finished-at", "yesterday"]) == 2
    assert "--finished-at 'yesterday' is not an ISO 8601" in capsys.readouterr().err
    assert reproduce.main(args + ["--report-only", "--finished-at", "2026-12-04"]) == 2
    assert "--finished-at goes with --made-by" in capsys.readouterr().err


def test_reused_runs_are_copied_whole_tables_included_never_linked(reproduce, tmp_path):
    """A reused finished run brings its tables (folders of Parquet files) with it, as
    copies: rewriting the source afterwards leaves the reusing point's files as they were."""
    source, dest = tmp_path / "a", tmp_path / "b"
    (source / "events.parquet").mkdir(parents=True)
    (source / "events.parquet" / "round-000000.parquet").write_bytes(b"events of round 0")
    (source / "rounds.csv").write_text("round\n0\n")
    (source / "checkpoint.pkl").write_bytes(b"models")
    (source / ".sflsim.lock").write_text("{}")
    (dest / "events.parquet").mkdir(parents=True)
    (dest / "events.parquet" / "round-000007.parquet").write_bytes(b"another attempt")
    reproduce.copy_results(source, dest)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "events.parquet", "events.parquet/round-000000.parquet", "rounds.csv"]
    for rel in ("rounds.csv", "events.parquet/round-000000.parquet"):
        assert (dest / rel).read_bytes() == (source / rel).read_bytes()
        assert (dest / rel).stat().st_ino != (source / rel).stat().st_ino
    with open(source / "rounds.csv", "a") as f:  # an in-place append to the source
        f.write("1\n")
    assert (dest / "rounds.csv").read_text() == "round\n0\n"


def test_vs_multisfl_findings_state_what_the_numbers_show(reproduce):
    """Each finding's direction follows its runs: harmonization reported as a gain or a
    loss by its sign, FLOPs inside or outside MultiSFL's range; only seed 0 of the
    paper-protocol runs is read."""
    module = importlib.import_module("reproduction.fedsga_vs_multisfl")

    def row(run, acc, gflops=1.0, partition="", seed=0):
        return {"run": run, "acc_final_pct": acc, "client_gflops_per_round": gflops,
                "partition": partition, "seed": seed}

    small = [row("multisfl resource 2.0", 70.0, 20.0), row("multisfl resource 10.0", 74.0, 36.0),
             row("fedsga per_client/averaged", 60.0, 24.0),
             row("fedsga sequential/averaged", 65.0, 2.0)]
    paper = [row("fedsga sequential/averaged", 82.0, partition="iid"),
             row("fedsga per_client/averaged", 79.0, partition="iid"),
             row("fedsga per_client/averaged", 10.0, partition="iid", seed=1),
             row("multisfl resource 60.0", 80.0, partition="iid"),
             row("splitfed_v1", 77.0, partition="iid"),
             row("fedsga per_client/averaged split=static", 70.0, partition="iid"),
             row("fedsga per_client/averaged split=static no-harmonize", 75.0, partition="iid")]
    text = module.findings(small, paper, {})
    assert "82.0% with `server_update: sequential` and 79.0% with `per_client`" in text
    assert "(-5.0 points for harmonization)" in text
    assert "24.0 (per_client), 2.0 (sequential); 1 of them inside MultiSFL's range" in text
    paper[-1] = row("fedsga per_client/averaged split=static no-harmonize", 61.5, partition="iid")
    small[2] = row("fedsga per_client/averaged", 60.0, 40.0)
    text = module.findings(small, paper, {})
    assert "(+8.5 points for harmonization)" in text
    assert "outside MultiSFL's range at these budgets" in text


def test_a_section_names_the_cost_model_its_runs_were_made_under(reproduce, tmp_path):
    """Each section says which ``hardware.cost_model`` its runs were made under, read from
    their scenario.yaml: a run without a ``hardware`` section (every run made before the
    field existed) reads ``flops``; runs under ``operators`` say so."""
    report = tmp_path / "REPRODUCTION.md"
    args = ["hetero_splitee.fig2", "--scale", "smoke", "--report", str(report), "--workers", "1",
            "--threads", "1"]
    line = "- cost model (`hardware.cost_model`, from each run's scenario.yaml): "
    assert reproduce.main([*args, "-o", str(tmp_path / "flops")]) == 0
    assert f"{line}`flops` for 3 of 3 runs\n" in report.read_text()
    for scenario in (tmp_path / "flops").rglob("scenario.yaml"):  # as a run made before the field
        written = yaml.safe_load(scenario.read_text())
        del written["hardware"]
        scenario.write_text(yaml.safe_dump(written))
    assert reproduce.main([*args, "-o", str(tmp_path / "flops"), "--report-only"]) == 0
    text = report.read_text()
    assert "3 of 3 completed" in text  # a missing hardware section is today's default: not stale
    assert (f"{line}`flops` for 3 of 3 runs (all without a `hardware` section: they predate the "
            f"field, and a missing one reads `flops`)") in text
    assert reproduce.main([*args, "-o", str(tmp_path / "operators"),
                           "--set", "hardware.cost_model=operators"]) == 0
    assert f"{line}`operators` for 3 of 3 runs\n" in report.read_text()
    # mixed folders, and a target that renders no runs of its own
    report_module = importlib.import_module("reproduction.report")
    runs = sorted(p.parent for p in tmp_path.rglob("scenario.yaml"))
    assert report_module.cost_model_line(runs) == (
        f"{line}`flops` for 3 of 6 runs, `operators` for 3 of 6 runs (3 without a `hardware` "
        f"section: they predate the field, and a missing one reads `flops`)")
    assert "no run's scenario.yaml" in report_module.cost_model_line([])
