"""The claim checks of analysis/reproduction/claims.py on made-up numbers: for each kind a
clear pass, a clear fail and a margin within noise (seeds' std, or one run's test-set
sampling error); and a target added the way the README shows, run on two tiny points."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "reproduce-paper.md"


def table(R, cells):
    """A ResultTable from {(row, column): mean | (mean, std, n) | R.Stat}."""
    return R.ResultTable({k: v if isinstance(v, R.Stat) else
                          R.Stat(*v) if isinstance(v, tuple) else R.Stat(v)
                          for k, v in cells.items()})


def test_sampling_error_and_spread(reproduce):
    R = reproduce
    assert R.sampling_error(80.0, 400) == pytest.approx(2.0)  # 100 sqrt(.8 .2 / 400)
    assert math.isnan(R.sampling_error(80.0, None))
    one = R.Stat.of([80.0], n_test=400)
    assert math.isnan(one.std) and one.spread == pytest.approx(2.0)
    three = R.Stat.of([79.0, 80.0, 81.0], n_test=400)
    assert three.spread == pytest.approx(1.0)  # the seeds' sample std wins
    assert R.spread_of(R.Stat(1.0, 3.0), R.Stat(2.0, 4.0)) == pytest.approx(5.0)


@pytest.mark.parametrize("b, status", [((50.0, 1.0, 3), "PASS"), ((70.0, 1.0, 3), "FAIL"),
                                       ((59.0, 1.0, 3), "WITHIN NOISE")])
def test_greater(reproduce, b, status):
    R = reproduce
    claim = R.greater("a_above_b", "A beats B", "here", "A", "B", ["acc"])
    verdict = claim.evaluate(table(R, {("A", "acc"): (60.0, 1.0, 3), ("B", "acc"): b}))
    assert verdict.status == status, verdict
    assert verdict.holds is (b[0] < 60.0)
    if status == "WITHIN NOISE":
        assert "margin +1 inside the spread 1.41" in verdict.detail


def test_greater_lower_is_better_and_one_seed(reproduce):
    R = reproduce
    claim = R.greater("fewer", "A needs fewer", "here", "A", "B", ["t"], lower_is_better=True)
    assert claim.evaluate(table(R, {("A", "t"): 4.0, ("B", "t"): 5.0})).status == "PASS"
    assert claim.evaluate(table(R, {("A", "t"): 6.0, ("B", "t"): 5.0})).status == "FAIL"
    # one seed each: an accuracy gap of 1 point on 400 test images is inside ~2.8 points
    acc = R.greater("acc", "A more accurate", "here", "A", "B", ["acc"])
    one = {("A", "acc"): R.Stat.of([81.0], 400), ("B", "acc"): R.Stat.of([80.0], 400)}
    assert acc.evaluate(table(R, one)).status == "WITHIN NOISE"
    far = {("A", "acc"): R.Stat.of([90.0], 400), ("B", "acc"): R.Stat.of([80.0], 400)}
    assert acc.evaluate(table(R, far)).status == "PASS"


@pytest.mark.parametrize("b, status", [(61.0, "PASS"), (70.0, "FAIL"), (61.6, "WITHIN NOISE"),
                                       (62.5, "WITHIN NOISE")])
def test_close(reproduce, b, status):
    R = reproduce
    claim = R.close("near", "A and B close", "here", "A", "B", ["acc"], 2.0)
    verdict = claim.evaluate(table(R, {("A", "acc"): (60.0, 0.5, 3), ("B", "acc"): (b, 0.5, 3)}))
    assert verdict.status == status, verdict
    assert verdict.holds is (abs(b - 60.0) <= 2.0)


@pytest.mark.parametrize("other, status", [(50.0, "PASS"), (90.0, "FAIL"),
                                           (80.5, "WITHIN NOISE")])
def test_upper_bound(reproduce, other, status):
    R = reproduce
    claim = R.upper_bound("top", "T is the upper bound", "here", "T", ["X", "Y"], ["c1", "c2"])
    cells = {("T", c): (80.0, 1.0, 3) for c in ("c1", "c2")}
    cells |= {("X", "c1"): (40.0, 1.0, 3), ("X", "c2"): (other, 1.0, 3),
              ("Y", "c1"): (45.0, 1.0, 3), ("Y", "c2"): (30.0, 1.0, 3)}
    assert claim.evaluate(table(R, cells)).status == status


@pytest.mark.parametrize("b, status", [(50.0, "PASS"), (40.0, "FAIL"), (44.5, "WITHIN NOISE")])
def test_lowest(reproduce, b, status):
    R = reproduce
    claim = R.lowest("low", "A is lowest", "here", "A", ["A", "B", "C"], ["acc"])
    cells = {("A", "acc"): (45.0, 1.0, 3), ("B", "acc"): (b, 1.0, 3), ("C", "acc"): (60.0, 1.0, 3)}
    assert claim.evaluate(table(R, cells)).status == status


@pytest.mark.parametrize("values, status", [((50.0, 55.0, 54.8, 60.0), "PASS"),
                                            ((50.0, 58.0, 52.0, 60.0), "FAIL"),
                                            ((50.0, 56.0, 54.5, 60.0), "WITHIN NOISE")])
def test_monotone(reproduce, values, status):
    """Dips of at most 1 point allowed; std 0.4 per point: the dip of 1.5 is 0.5 beyond the
    tolerance, inside the spread 0.57; the dip of 6 is not."""
    R = reproduce
    claim = R.monotone("rises", "accuracy rises", "here", ["L3"], "accuracy", True, 1.0, True)
    cells = {("L3", f"accuracy@{x:.4f}"): (v, 0.4, 3) for x, v in zip((-3, -2, -1, 0), values)}
    assert claim.evaluate(table(R, cells)).status == status


def test_a_target_added_as_the_readme_shows_runs_renders_and_checks(reproduce, tmp_path):
    """The module of README "Adding a target", as a start-up file: registered, run on its
    points at --scale smoke (one seed), rendered into a report section, its claims checked
    on sflsim's numbers and on the paper's."""
    R = reproduce
    section = README.read_text().split("## Adding a target", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    key = re.search(r'key, paper = "([a-z0-9_.]+)"', code).group(1)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "reproduce_readme_example.py").write_text(code)
    try:
        assert R.load_plugins(plugins) == ["reproduce_readme_example"]
        target = R.TARGETS[key]
        scale = R.scale_for(target, "smoke")
        assert [p.label for p in target.points(scale)] == ["fedavg-iid", "splitfed-iid"]
        root = tmp_path / "runs" / "smoke"
        ctx = R.run_target(target, scale, 1, root / key, root, workers=1, executor="process",
                           address=None, overrides=[], run=True)
        assert [r.status for r in ctx.runs] == ["completed", "completed"]
        body, verdicts = target.analyse(ctx)
        assert body.startswith("| method | IID sflsim | IID paper CIFAR-100 |")
        assert "43.01 ± 0.19" in body and "43.10 ± 0.36" in body
        ours = target.collect(ctx)
        acc = ours.get("FedAvg", "IID")
        assert 0 <= acc.mean <= 100 and acc.n == 1 and acc.se > 0  # one run: sampling error
        assert [c.name for c, _, _ in verdicts] == ["fedavg_splitfed_close",
                                                    "splitfed_above_fedavg"]
        for _, verdict, on_paper in verdicts:
            assert verdict.status in ("PASS", "FAIL", "WITHIN NOISE"), verdict
            assert "FedAvg" in verdict.detail and on_paper
        # on the paper's numbers: the gap 0.09 is well inside 1 point, and inside its ±
        paper = target.paper_views(R.PaperNumbers(), scale)[0]
        claims = {c.name: c for c in target.claims()}
        assert claims["fedavg_splitfed_close"].evaluate(paper).status == "PASS"
        noisy = claims["splitfed_above_fedavg"].evaluate(paper)
        assert noisy.status == "WITHIN NOISE" and noisy.holds
        assert "margin +0.09 inside the spread 0.407" in noisy.detail
        text = R.section_markdown(target, scale, 1, body, verdicts, ctx, "cmd",
                                  {"cpu": "c", "cores": 2, "usable_cores": 2, "load_1min": 0,
                                   "torch": "t", "sflsim": "s", "commit": "x", "python": "p"},
                                  1.0, [])
        report = tmp_path / "R.md"
        assert R.update_report(report, R.section_id(key, "smoke"), text) is None
        written = report.read_text()
        assert f"<!-- reproduce:begin {key}@smoke -->" in written
        assert "2 of 2 completed" in written and "`fedavg_splitfed_close`" in written
    finally:
        R.TARGETS.pop(key, None)
        sys.modules.pop("reproduce_readme_example", None)


def test_a_std_is_shown_to_its_means_precision(reproduce):
    """A std left by float rounding (all seeds equal) reads 0.00, not 8.7e-15; a mean
    below 0.1 keeps 3 significant digits, and so does its std."""
    Stat = reproduce.Stat
    assert Stat(43.28, 8.7e-15, 3).fmt() == "43.28 ± 0.00"
    assert Stat(43.26, 0.0265, 3).fmt() == "43.26 ± 0.03"
    assert Stat(0.0111, 0.00962, 3).fmt() == "0.0111 ± 0.00962"
    assert Stat(72.5, 0.7, 3).fmt(1) == "72.5 ± 0.7" and Stat(72.5, float("nan"), 1).fmt() == "72.50"


def test_methods_sharing_seeds_are_compared_seed_by_seed(reproduce):
    """Two methods whose seeds move them together: unpaired, their 2-point gap is inside
    the seeds' spread (about 7 points); paired, every seed shows the same gap: PASS."""
    R = reproduce
    a = R.Stat.of([60.0, 70.0, 80.0], seeds=[0, 1, 2])
    b = R.Stat.of([58.0, 68.1, 77.9], seeds=[0, 1, 2])
    claim = R.greater("a_above_b", "A beats B", "here", "A", "B", ["acc"])
    assert claim.evaluate(table(R, {("A", "acc"): a, ("B", "acc"): b})).status == "PASS"
    unpaired = {("A", "acc"): R.Stat(a.mean, a.std, 3), ("B", "acc"): R.Stat(b.mean, b.std, 3)}
    assert claim.evaluate(table(R, unpaired)).status == "WITHIN NOISE"
    # the paired spread: t(0.975, 2) * s_d / sqrt(3), s_d of the differences 2, 1.9, 2.1
    assert R.difference_spread(a, b) == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)


def test_a_gap_that_changes_sign_across_seeds_stays_within_noise(reproduce):
    R = reproduce
    a = R.Stat.of([60.0, 62.0, 61.0], seeds=[0, 1, 2])
    b = R.Stat.of([59.0, 63.0, 59.5], seeds=[0, 1, 2])  # A ahead at seeds 0 and 2, not 1
    claim = R.greater("a_above_b", "A beats B", "here", "A", "B", ["acc"])
    assert claim.evaluate(table(R, {("A", "acc"): a, ("B", "acc"): b})).status == "WITHIN NOISE"


def test_numbers_of_other_seeds_are_not_paired(reproduce):
    R = reproduce
    a = R.Stat.of([60.0, 70.0, 80.0], seeds=[0, 1, 2])
    b = R.Stat.of([58.0, 68.0, 78.0], seeds=[3, 4, 5])
    assert R.difference_spread(a, b) == pytest.approx(R.spread_of(a, b))
    with pytest.raises(ValueError, match="seeds"):
        R.Stat.of([1.0, 2.0], seeds=[0, 0])


def test_a_mean_over_columns_keeps_the_seeds(reproduce):
    R = reproduce
    t = table(R, {("A", "x"): R.Stat.of([1.0, 3.0], seeds=[0, 1]),
                  ("A", "y"): R.Stat.of([3.0, 5.0], seeds=[0, 1])})
    assert R.mean_of(t, "A", ["x", "y"]).by_seed == ((0, 2.0), (1, 4.0))


def test_every_fail_in_the_report_names_its_cause():
    """Each FAIL of analysis/REPRODUCTION.md carries a measured cause or the words "cause
    not measured" in the claims table's last column."""
    report = Path(__file__).resolve().parents[1] / "analysis" / "REPRODUCTION.md"
    fails = [line for line in report.read_text().splitlines() if line.startswith("| **FAIL")]
    assert fails, "the report has FAIL verdicts to check"
    for line in fails:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 5 and cells[-1], f"a FAIL without a cause: {line[:120]}"


def test_a_fail_without_a_registered_cause_says_so(reproduce, tmp_path):
    from reproduction.causes import NOT_MEASURED, cause_of

    ctx = reproduce.Context(scale=None, runs=[], numbers=reproduce.PaperNumbers(), root=tmp_path)
    assert cause_of("fedsga.table2", "no_such_claim", ctx) == NOT_MEASURED
    # a measured cause whose runs are missing says so too, rather than guessing
    assert cause_of("fedsga.table5", "fedsga_time_vs_multisfl_iid", ctx) == NOT_MEASURED
    claim = reproduce.greater("a_above_b", "A beats B", "here", "A", "B", ["acc"])
    fail = reproduce.Verdict("FAIL", "A 1 vs B 2")
    text = reproduce.claims_markdown([(claim, fail, [])], "cpu", {"a_above_b": NOT_MEASURED})
    assert text.splitlines()[-1].endswith(f"| {NOT_MEASURED} |")


def test_each_section_states_what_its_runs_manifests_say(reproduce):
    """What a report section states about its runs (seeds, test images, commit and CPU)
    equals what the stored runs' manifest.json files record."""
    import json

    from reproduction.report import provenance_line

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "analysis" / "REPRODUCTION.md").read_text()
    sections = re.findall(r"<!-- reproduce:begin ([^@]+)@cpu -->(.*?)<!-- reproduce:end", text,
                          re.S)
    checked = 0
    for key, body in sections:
        points = repo / "analysis" / "measured" / "reproduce" / "cpu" / key / "points"
        runs = sorted(d for d in points.glob("*") if (d / "summary.json").is_file())
        if not runs:
            continue
        manifests = [json.loads((d / "manifest.json").read_text()) for d in runs]
        seeds = re.search(r"^Seeds: (\d+) \(0\.\.(\d+)\)", body, re.M)
        assert seeds, key
        assert {m["seed"] for m in manifests} == set(range(int(seeds.group(1)))), key
        per_config = re.search(r"^\| runs per configuration \| [^|]+ \| ([^|]+) \|", body, re.M)
        assert per_config is None or per_config.group(1).strip() == f"{seeds.group(1)} seeds", \
            (key, per_config.group(1))
        stated = re.search(r"^\| test images \| [^|]+ \| ([\d,]+)", body, re.M)
        assert stated, key
        assert {m["dataset"]["test_samples"] for m in manifests} == \
            {int(stated.group(1).replace(",", ""))}, key
        assert provenance_line(runs) in body, key
        checked += 1
    assert checked >= 5
