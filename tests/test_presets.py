"""The papers' presets (``scenarios/papers/``): every base scenario validates on its data
(tiny fixtures of each format) and runs a shrunk round on it, every sweep expands and its
points validate, each header
names the table cells it reproduces with the paper's numbers as ``analysis/paper_numbers.csv``
has them, the sweeps run what ``analysis/reproduce.py --scale paper`` runs, and without the
data a paper-scale run stops before anything runs, saying where to get it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sflsim import shipped
from sflsim.cli.main import app
from sflsim.config import load_scenario
from sflsim.config.load import read_yaml_mapping
from sflsim.config.resolve import resolved_dump
from sflsim.config.schema import DOMAINNET_DOMAINS
from sflsim.runner import run_scenario
from sflsim.sweep import load_sweep
from tests.dataset_files import (
    write_cifar10,
    write_cifar100,
    write_domainnet,
    write_stl10,
    write_tiny_imagenet,
)

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT / "scenarios" / "papers"
BASES = sorted(p for p in PAPERS.rglob("*.yaml") if p.parent.name != "sweeps")
SWEEPS = sorted(PAPERS.rglob("sweeps/*.yaml"))
#: sflsim's dataset name -> how the papers (and paper_numbers.csv) name it
LABELS = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "stl10": "STL-10",
          "tiny_imagenet": "Tiny-ImageNet", "domainnet": "DomainNet"}


def comment_text(path: Path) -> str:
    """A file's comments as one line of text (the ``#`` of each line dropped)."""
    return " ".join(" ".join(line.lstrip("#").split()) for line in path.read_text().splitlines()
                    if line.startswith("#"))


def name_of(path: Path) -> str:
    """How the command line names a preset: ``papers/fedsga/cifar100_resnet18``."""
    return path.relative_to(ROOT / "scenarios").with_suffix("").as_posix()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """Every dataset the presets use, tiny, in its on-disk format (DomainNet: all six
    domains, as the presets use them all)."""
    root = tmp_path_factory.mktemp("data")
    write_cifar10(root)
    write_cifar100(root)
    write_stl10(root)
    write_tiny_imagenet(root)
    write_domainnet(root, domains=DOMAINNET_DOMAINS)
    return root


def test_there_is_a_preset_per_paper_dataset_and_backbone():
    assert [name_of(p) for p in BASES] == [
        "papers/fedsga/cifar100_resnet18", "papers/fedsga/cifar100_vit_b16",
        "papers/fedsga/cifar10_resnet18", "papers/fedsga/domainnet_resnet18",
        "papers/fedsga/domainnet_vit_b16", "papers/fedsga/tiny_imagenet_resnet18",
        "papers/fedsga/tiny_imagenet_vit_b16", "papers/hetero_splitee/cifar10",
        "papers/hetero_splitee/cifar100", "papers/hetero_splitee/stl10"]
    assert len(SWEEPS) == 25
    assert shipped.preset_names() == [name_of(p) for p in BASES]
    assert shipped.preset_names(sweeps=True) == [name_of(p) for p in SWEEPS]


# ------------------------------------------------------------------ validation on the data


@pytest.mark.parametrize("path", BASES, ids=name_of)
def test_every_preset_validates_on_its_data(path, data_root, tv_checks, tmp_path, monkeypatch):
    """``sflsim validate papers/...`` (data, partition, models, memory, algorithm) with
    only ``dataset.data_root`` set, from another folder. FedSGA with ViT-B/16 keeps 20
    per-client server copies: on a machine with less memory than sflsim's estimate the
    refusal is the expected answer, and its estimate is the one the header states."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["validate", name_of(path), "--set",
                                      f"dataset.data_root={data_root}"])
    output = " ".join(result.output.split())
    if result.exit_code == 0:
        assert f"ok {path}" in output
        return
    needed = re.search(r"memory: this run needs about ([\d.]+) GiB but (?:this machine|the "
                       r"SFLSIM_MEMORY_LIMIT_BYTES cap) has ([\d.]+) GiB", output)
    assert needed and "vit_b16" in path.stem, output
    assert float(needed[1]) > float(needed[2])
    stated = re.search(r"need about (\d+) GiB", comment_text(path))
    assert stated and abs(float(stated[1]) - float(needed[1])) < 1.5, (stated, needed[1])


@pytest.mark.parametrize("path", BASES, ids=name_of)
def test_every_preset_runs_one_round_on_its_data(path, data_root, tv_checks, tmp_path):
    """One round of each preset on the fixtures, shrunk only for time (width 1/16, one local
    epoch; ViT-B/16 on 32x32 images, 2x2 patches): augmentation, STL-10's stem, DomainNet's
    domains, FedSGA with both backbones run end to end."""
    small = [f"dataset.data_root={data_root}", "training.rounds=1", "training.local_epochs=1",
             "model.width=0.0625", "evaluation.every_rounds=1"]
    data = read_yaml_mapping(path)
    if data["model"]["name"] == "vit" and "image_size" in data["dataset"]:
        small.append("dataset.image_size=32")
    if data["algorithm"]["name"].startswith("hetero_splitee"):
        small += ["evaluation.early_exit.samples_per_client=2", "evaluation.early_exit.tau_step=1.0"]
    result = run_scenario(load_scenario(path, small), tmp_path)
    assert result.summary["status"] == "completed"
    assert result.rounds["server_accuracy"].between(0.0, 1.0).all()
    assert len(result.clients) == sum(g["count"] for g in data["devices"].values())


@pytest.mark.parametrize("path", SWEEPS, ids=name_of)
def test_every_sweep_expands_and_each_point_validates(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(path)  # validates every point
    base = read_yaml_mapping(sweep.base_path)
    assert sweep.base_path.parent == path.parent.parent and sweep.base_path in BASES
    assert sweep.name == f"{path.parent.parent.name}_{path.stem}"
    assert {p.scenario.dataset.name for p in sweep.points} == {base["dataset"]["name"]}
    result = CliRunner().invoke(app, ["sweep", name_of(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"sweep {sweep.name}: {len(sweep.points)} points" in result.output


# ------------------------------------------------------------------ headers against the paper

#: ``Table IV, CIFAR-10, Sequential/Server: Layer-3 68.19, Layer-4 70.35`` (a header line)
CELL_LINE = re.compile(r"^#\s+((?:Table|Fig\.) [\w.]+), ([\w-]+), (.+?): (.+)$")
CELL = re.compile(r"^(\S+) (?:(-?\d+(?:\.\d+)?)(?: ± (\d+(?:\.\d+)?))?|\(no number printed\))$")


def header_cells(path: Path) -> list[tuple[str, str, str, str, str]]:
    """(table, dataset, row, column, "value ± std" as written) of the header's
    "Reproduces" block."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# Reproduces"))
    cells = []
    for line in lines[start + 1:]:
        if not line.startswith("#"):
            break
        match = CELL_LINE.match(line)
        assert match, f"{path.name}: not a cell line: {line!r}"
        table, dataset, row, items = match.groups()
        for item in items.split(", "):
            cell = CELL.match(item)
            assert cell, f"{path.name}: not 'column value [± std]': {item!r}"
            cells.append((table, dataset, row, f"{dataset} {cell[1]}", item[len(cell[1]) + 1:]))
    assert cells, path
    return cells


def expected_tables(path: Path) -> set[str]:
    """The tables a preset's name says it reproduces."""
    stem, paper = path.stem, path.parts[path.parts.index("papers") + 1]
    vit = stem.endswith("vit_b16")
    if path.parent.name != "sweeps":
        return ({"Table IV"} if paper == "hetero_splitee" else {"Table 4b", "Table 5b"} if vit
                else {"Table 2"} if stem.startswith("cifar10_") else {"Table 2", "Table 5a"})
    kind = stem.split("_")[0]
    if paper == "hetero_splitee":
        return {"table3": {"Table III"}, "table4": {"Table IV"}, "fig2": {"Fig. 2", "Table III"}}[kind]
    return {"table2": {"Table 2"}, "table4": {"Table 4b" if vit else "Table 4a"},
            "table5": {"Table 5b" if vit else "Table 5a"}, "fig4": {"Fig. 4"}}[kind]


@pytest.mark.parametrize("path", BASES + SWEEPS, ids=name_of)
def test_headers_name_the_tables_and_the_papers_numbers(path, reproduce):
    numbers = reproduce.PaperNumbers()
    paper = path.parts[path.parts.index("papers") + 1]
    data = read_yaml_mapping(path)
    base = read_yaml_mapping(path.parent / data["base"]) if "base" in data else data
    dataset = LABELS[base["dataset"]["name"]]
    cells = header_cells(path)
    assert {c[0] for c in cells} == expected_tables(path), path.name
    for table, named, row, column, written in cells:
        assert named == dataset, f"{path.name}: {table} names {named}, the file runs {dataset}"
        key = (paper, table, row, column)
        assert numbers.has(key), f"{path.name}: analysis/paper_numbers.csv has no {key}"
        record = numbers.record(key)
        if written == "(no number printed)":
            assert record["value"] == "", (path.name, key)
            continue
        value, _, std = written.partition(" ± ")
        assert float(value) == pytest.approx(float(record["value"])), (path.name, key)
        assert record["std"] == std or float(std) == pytest.approx(float(record["std"])), \
            (path.name, key, "std")
    if path.parent.name == "sweeps":  # a sweep names every cell its table prints for its dataset
        table_keys = {k for k in numbers.index if k[0] == paper and k[1] in expected_tables(path)
                      and k[3].startswith(dataset + " ")}
        if "fig2" in path.stem:  # Fig. 2 and the Sequential rows of Table III
            table_keys = {k for k in table_keys if k[1] == "Fig. 2" or k[2].startswith("Sequential")}
        named = {(paper, c[0], c[2], c[3]) for c in cells}
        assert table_keys == named, (path.name, sorted(table_keys ^ named))


def test_a_wrong_number_in_a_header_fails(tmp_path, reproduce):
    text = (PAPERS / "hetero_splitee" / "sweeps" / "table4_cifar10.yaml").read_text()
    (tmp_path / "papers" / "hetero_splitee" / "sweeps").mkdir(parents=True)
    bad = tmp_path / "papers" / "hetero_splitee" / "sweeps" / "table4_cifar10.yaml"
    bad.write_text(text.replace("Layer-3 68.19", "Layer-3 68.91"))
    (tmp_path / "papers" / "hetero_splitee" / "cifar10.yaml").write_text(
        (PAPERS / "hetero_splitee" / "cifar10.yaml").read_text())
    with pytest.raises(AssertionError, match="Sequential/Server"):
        test_headers_name_the_tables_and_the_papers_numbers(bad, reproduce)


# ------------------------------------------------------------------ one copy of the settings

#: sweep kind -> (reproduce target, points reproduce runs beyond the paper's grid per dataset)
TARGET_OF = {("hetero_splitee", "table3"): ("hetero_splitee.table3", 0),
             ("hetero_splitee", "table4"): ("hetero_splitee.table4", 0),
             ("hetero_splitee", "fig2"): ("hetero_splitee.fig2", 0),
             ("fedsga", "table2"): ("fedsga.table2", 0),
             ("fedsga", "table4"): ("fedsga.table4", 0),
             ("fedsga", "table5"): ("fedsga.table5", 2),  # + Non-IID (the paper's is IID)
             ("fedsga", "fig4"): ("fedsga.fig4", 2)}      # + the resource-driven split


def _key(dump: dict) -> str:
    return yaml.safe_dump({k: v for k, v in dump.items() if k != "name"}, sort_keys=True)


@pytest.mark.parametrize("path", SWEEPS, ids=name_of)
def test_sweeps_run_what_reproduce_runs_at_paper_scale(path, reproduce):
    """Each preset sweep's points are (resolved) scenarios that ``reproduce.py TARGET --scale
    paper`` runs on the same preset, so the sweeps and the reproduction cannot drift."""
    paper = path.parts[path.parts.index("papers") + 1]
    key, extra = TARGET_OF[(paper, path.stem.split("_")[0])]
    backbone = "vit_b16" if path.stem.endswith("vit_b16") else (
        "resnet18" if paper == "fedsga" else None)
    if backbone == "vit_b16":
        key += "_vit"
    target = reproduce.TARGETS[key]
    sweep = load_sweep(path)
    dataset = LABELS[sweep.points[0].scenario.dataset.name]
    assert dataset in target.datasets and target.backbone == backbone
    scale = reproduce.scale_for(target, "paper").on(dataset, backbone)
    assert scale.preset == sweep.base_path
    ours = {_key(resolved_dump(p.scenario.model_dump(mode="json"))) for p in sweep.points}
    theirs = {_key(resolved_dump(m)) for _, _, m in reproduce.point_mappings(target, scale, 1, [])}
    assert len(ours) == len(sweep.points)
    assert ours <= theirs, f"{path.name}: points reproduce.py does not run"
    assert len(theirs - ours) == extra


def test_paper_scale_keeps_no_copy_of_the_settings(reproduce):
    for scale in (reproduce.HETERO_PAPER, reproduce.FEDSGA_PAPER):
        assert scale.base == {}
    for target in reproduce.TARGETS.values():
        if "paper" not in target.scales or not target.datasets:
            continue
        for variant in reproduce.variants(target, reproduce.scale_for(target, "paper")):
            assert variant.base == read_yaml_mapping(variant.preset)
            assert variant.preset.is_relative_to(PAPERS) and variant.compare_with == (variant.dataset,)


def test_paper_scale_sets_each_dataset_beside_its_own_numbers(reproduce):
    numbers = reproduce.PaperNumbers()
    for key, target in reproduce.TARGETS.items():
        if "paper" not in target.scales or not target.datasets or key == "hetero_splitee.fig2":
            continue  # Fig. 2 prints curves, no numbers
        for variant in reproduce.variants(target, reproduce.scale_for(target, "paper")):
            views = target.paper_views(numbers, variant)
            assert [v.name for v in views] == [f"paper {variant.dataset}"], key
            assert views[0].cells, (key, variant.dataset)


def test_every_target_dry_runs_at_paper_scale(reproduce, capsys):
    reproduce.load_plugins()
    for key, target in list(reproduce.TARGETS.items()):
        if "paper" not in target.scales:  # a cpu-scale analysis (fedsga.readings)
            assert reproduce.main([key, "--scale", "paper", "--dry-run"]) == 2, key
            continue
        assert reproduce.main([key, "--scale", "paper", "--dry-run"]) == 0, key
        out = capsys.readouterr().out
        for dataset in target.datasets:
            preset = reproduce.preset_path(target.paper, dataset, target.backbone)
            assert f"-- {dataset}" in out and preset.relative_to(ROOT).as_posix() in out, key
        assert "| hardware | not stated |" in out, key


def test_vit_targets_run_at_paper_scale_only(reproduce, capsys):
    assert reproduce.main(["fedsga.table5_vit", "--scale", "cpu", "--dry-run"]) == 2
    assert "has no --scale cpu; valid: paper" in capsys.readouterr().err


def test_device_moves_the_algorithms_that_can(reproduce):
    """--device cuda moves the points of every algorithm in CUDA_ALGORITHMS (all of
    Table 2's: FedSGA and its ten baselines)."""
    target = reproduce.TARGETS["fedsga.table2"]
    scale = reproduce.scale_for(target, "paper").on("CIFAR-10", "resnet18")
    devices = {m["algorithm"]["name"]: m["training"]["device"]
               for _, _, m in reproduce.point_mappings(target, scale, 1, [], "cuda")}
    assert len(devices) == 11 and set(devices.values()) == {"cuda"}


# ------------------------------------------------------------------ without the data


def test_without_data_a_paper_run_stops_before_anything_runs(reproduce, tmp_path, monkeypatch,
                                                             capsys):
    monkeypatch.chdir(tmp_path)  # the presets' data_root is null: ./data, not there
    out = tmp_path / "runs"
    assert reproduce.main(["hetero_splitee.table4", "--scale", "paper", "-o", str(out),
                           "--no-report"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{PAPERS / 'hetero_splitee' / 'cifar10.yaml'}: dataset.name: 'cifar10'" in err
    assert str(tmp_path / "data" / "cifar-10-batches-py") in err and "does not exist" in err
    assert "cs.toronto.edu" in err and "dataset.download: true" in err
    assert not out.exists()
    # --set dataset.data_root names the folder looked at, and the override in the message
    assert reproduce.main(["fedsga.table4", "--scale", "paper", "-o", str(out), "--no-report",
                           "--set", f"dataset.data_root={tmp_path / 'elsewhere'}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"(--set dataset.data_root={tmp_path / 'elsewhere'})" in err
    assert str(tmp_path / "elsewhere" / "cifar-100-python") in err and not out.exists()


def test_with_the_data_the_check_passes(reproduce, data_root, tv_checks, tmp_path):
    overrides = [f"dataset.data_root={data_root}"]
    for key in ("hetero_splitee.table4", "fedsga.table2"):
        target = reproduce.TARGETS[key]
        for variant in reproduce.variants(target, reproduce.scale_for(target, "paper")):
            sweep, _ = reproduce.build_sweep(target, variant, 1, tmp_path / variant.slug, overrides)
            reproduce.check_data(sweep, variant.preset, overrides)


def test_readme_says_which_algorithms_run_on_a_gpu():
    """The docs' "A paper table on a GPU machine" names CUDA_ALGORITHMS, which is every
    registered algorithm."""
    import sflsim.algorithms  # noqa: F401  (fills the registry)
    from sflsim.algorithms.base import ALGORITHMS
    from sflsim.config.schema import CUDA_ALGORITHMS

    text = (ROOT / "docs" / "how-to" / "reproduce-paper.md").read_text()
    part = text[text.index("## A paper table on a GPU machine"):]
    part = part[:part.index("```bash")]
    named = set(re.findall(r"`([a-z0-9_]+)`", part)) & set(ALGORITHMS)
    assert named == set(CUDA_ALGORITHMS) == set(ALGORITHMS)
