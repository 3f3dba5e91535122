"""Running a target: its points as one sflsim sweep (seeds, workers, resume), the reuse of
finished runs of identical scenarios, the data check, and ``--estimate``."""

from __future__ import annotations

import copy
import glob
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sflsim.text import plural

from .numbers import PaperNumbers
from .scales import Scale
from .targets import Context, Point, Run, Target


def get_path(data: dict, path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return node


def set_path(data: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = copy.deepcopy(value)


def point_mappings(target: Target, scale: Scale, seeds: int, overrides: list[str],
                   device: str | None = None) -> list[tuple[Point, int, dict]]:
    """Every (point, seed, full scenario mapping) of a target at a scale, seed by seed
    (every point of seed 0 first): a sweep cut short still holds whole tables. With
    ``device`` (``cuda``), the points whose algorithm can train there
    (:data:`sflsim.config.schema.CUDA_ALGORITHMS`) get ``training.device``; the others
    stay where the scenario says."""
    from sflsim.config.load import apply_override
    from sflsim.config.schema import CUDA_ALGORITHMS

    out = []
    for seed in range(seeds):
        for point in target.points(scale):
            data = copy.deepcopy(scale.base)
            for path, value in point.overrides.items():
                set_path(data, path, value)
            for assignment in overrides:
                apply_override(data, assignment)
            if device is not None and data["algorithm"]["name"] in CUDA_ALGORITHMS:
                data.setdefault("training", {})["device"] = device
            data["seed"] = seed
            data["name"] = f"{point.label}.s{seed}"
            out.append((point, seed, data))
    return out


def build_sweep(target: Target, scale: Scale, seeds: int, out: Path, overrides: list[str],
                device: str | None = None, *, write: bool = True):
    """The target's points as one :class:`sflsim.sweep.Sweep` (zip mode over the
    top-level scenario fields that differ between points); writes ``out/base.yaml``
    (unless ``write`` is false: a report of stored runs changes none of their files)."""
    from sflsim.sweep.spec import Sweep, SweepSpec, expand

    mappings = point_mappings(target, scale, seeds, overrides, device)
    first = mappings[0][2]
    varying = [k for k in first if k in ("name", "seed")
               or any(m.get(k) != first[k] for _, _, m in mappings)]
    base = copy.deepcopy(first)
    base_path = out / "base.yaml"
    text = yaml.safe_dump(base, sort_keys=False)
    if write and (not base_path.is_file() or base_path.read_text() != text):
        out.mkdir(parents=True, exist_ok=True)
        base_path.write_text(text)
    name = f"{target.key.replace('.', '-')}-{scale.name}" + (f"-{scale.slug}" if scale.slug else "")
    axes = {k: [copy.deepcopy(m[k]) for _, _, m in mappings] for k in varying}
    spec = SweepSpec(base=str(base_path), name=name, mode="zip", axes=axes)
    sweep = Sweep(spec=spec, name=name, base_path=base_path.resolve(),
                  points=expand(spec, base, where=f"target {target.key}", name=name))
    labels = {p.point_id: (pt.label, seed) for p, (pt, seed, _) in zip(sweep.points, mappings)}
    return sweep, labels


def scenario_key(data: dict) -> str | None:
    """A canonical text of a scenario mapping that a run wrote (validated, defaults filled
    and resolved as runs write them: ``sflsim.config.resolve``; a full dump also does), or
    None."""
    from sflsim.config.resolve import resolved_dump

    resolved = resolved_dump(data, stored=True) if isinstance(data, dict) else None
    return None if resolved is None else json.dumps(resolved, sort_keys=True)


def finished_runs(root: Path) -> dict[str, Path]:
    """Completed runs anywhere under ``root`` by :func:`scenario_key`."""
    index = {}
    for summary in glob.glob(str(root / "**" / "summary.json"), recursive=True):
        run_dir = Path(summary).parent
        try:
            if json.loads(Path(summary).read_text()).get("status") != "completed":
                continue
            key = scenario_key(yaml.safe_load((run_dir / "scenario.yaml").read_text()))
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if key is not None:
            index.setdefault(key, run_dir)
    return index


def copy_results(source: Path, run_dir: Path) -> None:
    """Copy every result a finished run wrote in ``source`` into ``run_dir``: files and
    folders (the events and clients tables are folders of Parquet files), but not its
    checkpoint or hidden files (its folder lock, temporary files). Copies, never links:
    a later resume or rerun of one run cannot change the other's files."""
    import shutil

    run_dir.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name == "checkpoint.pkl" or item.name.startswith("."):
            continue
        dest = run_dir / item.name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        else:
            dest.unlink(missing_ok=True)
        if item.is_dir():
            shutil.copytree(item, dest, ignore=shutil.ignore_patterns(".*"))
        else:
            shutil.copy2(item, dest)


def reuse_finished(sweep, out: Path, root: Path) -> list[str]:
    """Copy the results of identical, completed runs elsewhere under ``root`` into the
    points of ``sweep`` that are not finished; move a point directory that holds another
    scenario aside to ``root/_replaced/`` (kept for reuse). Returns the point ids reused."""
    from sflsim.sweep.run import finished_summary

    index = None
    reused = []
    for point in sweep.points:
        run_dir = out / "points" / point.point_id
        if finished_summary(run_dir, point.scenario) is not None:
            continue
        old = run_dir / "scenario.yaml"
        if old.is_file():
            try:
                same = scenario_key(yaml.safe_load(old.read_text())) == scenario_key(
                    point.scenario.model_dump(mode="json"))
            except (OSError, yaml.YAMLError):
                same = False
            if not same:
                aside = root / "_replaced" / f"{out.name}-{point.point_id}-{time.time_ns()}"
                aside.parent.mkdir(parents=True, exist_ok=True)
                os.replace(run_dir, aside)
        if index is None:
            index = finished_runs(root)
        source = index.get(scenario_key(point.scenario.model_dump(mode="json")))
        if source is None or source.resolve() == run_dir.resolve():
            continue
        copy_results(source, run_dir)
        reused.append(point.point_id)
    return reused


class _Progress:
    """A line per finished point, and while points run a heartbeat line at least every
    30 s (``sflsim.cli.progress_display.SweepHeartbeat``); use as a context manager."""

    def __init__(self, labels: dict[str, tuple[str, int]], out: Path):
        from sflsim.cli.progress_display import SweepHeartbeat

        self.labels = labels
        self.beat = SweepHeartbeat(lambda line: print(f"  {line}", flush=True), out)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.beat.stop()

    def start(self, total: int, skipped: int) -> None:
        self.beat.say(f"{plural(total, 'point')}, {skipped} already finished")
        self.beat.start(total, skipped)

    def point_done(self, row: dict) -> None:
        label, seed = self.labels.get(row["point"], ("?", -1))
        acc = row.get("final_server_accuracy")
        shown = f"{100 * acc:.2f}%" if isinstance(acc, float) and not math.isnan(acc) else "n/a"
        self.beat.point_done()
        self.beat.say(f"{row['point']} {label} seed {seed}: {row['status']} accuracy {shown} "
                      f"wall {row.get('wall_time_s') or 0:.0f} s {row.get('error') or ''}")


def check_data(sweep, where: str | Path, overrides: list[str]) -> None:
    """Read every dataset the sweep's points use, once each, before anything runs: a
    dataset that is missing or broken stops the target here with sflsim's message (the
    folder looked at, the layout expected, how to get it), instead of failing every point.

    Raises:
        DatasetError, ConfigError: naming ``where`` (the preset file) and the ``--set``
            overrides behind the problem.
    """
    from sflsim.config.load import scenario_errors
    from sflsim.data import load_dataset

    seen = set()
    for point in sweep.points:
        ds = point.scenario.dataset
        key = (ds.name, ds.data_root, ds.image_size, tuple(ds.domains or ()), ds.download)
        if key in seen:
            continue
        seen.add(key)
        with scenario_errors(where, overrides):
            load_dataset(ds.name, data_root=ds.data_root, image_size=ds.image_size,
                         domains=ds.domains, download=ds.download)


def run_target(target: Target, scale: Scale, seeds: int, out: Path, root: Path, *, workers: int,
               executor: str, address: str | None, overrides: list[str], run: bool,
               device: str | None = None, check: bool = True) -> Context:
    """Run (unless ``run`` is false) and gather the target's points.

    Raises:
        DatasetError: with ``run`` and ``check``, a dataset the points need cannot be read
            (:func:`check_data`); nothing has run.
    """
    from sflsim.sweep import read_table, run_sweep

    if not target.points(scale):  # an analysis of other targets' runs
        return Context(scale=scale, runs=[], numbers=PaperNumbers(), root=root)
    sweep, labels = build_sweep(target, scale, seeds, out, overrides, device, write=run)
    if run:
        if check:
            check_data(sweep, scale.preset or f"{target.key} --scale {scale.name}", overrides)
        reused = reuse_finished(sweep, out, root)
        if reused:
            print(f"  reused {plural(len(reused), 'finished run')} of identical scenarios: "
                  f"{', '.join(reused)}")
        with _Progress(labels, out) as progress:
            run_sweep(sweep, out, workers=workers, executor=executor, address=address,
                      progress=progress)
    try:
        table = read_table(out)
    except Exception:  # noqa: BLE001  (no sweep.csv yet: nothing has run)
        table = pd.DataFrame(columns=["point", "status", "error"])
    status = {r["point"]: (r["status"], r.get("error", "")) for r in table.to_dict("records")}
    runs = []
    for point in sweep.points:
        st, err = status.get(point.point_id, ("missing", ""))
        from sflsim.sweep.run import finished_summary
        finished = finished_summary(out / "points" / point.point_id, point.scenario) is not None
        if st in ("missing", "pending") and finished:
            st = "completed"
        elif st == "completed" and not finished:  # a run of an earlier sflsim's reading
            st, err = "stale", ("made by an sflsim whose scenario differs from today's "
                                "(rerun the target to refresh it)")
        label, seed = labels[point.point_id]
        runs.append(Run(label, seed, point.point_id, st, str(err or ""),
                        out / "points" / point.point_id))
    return Context(scale=scale, runs=runs, numbers=PaperNumbers(), root=root)


def estimate(target: Target, scale: Scale, seeds: int, workers: int, overrides: list[str],
             threads: int | None = None, device: str | None = None,
             log: Callable[[str], None] | None = None) -> str:
    """Time two rounds of one seed of every configuration (training every round,
    evaluation after each) with the torch threads a sweep worker gets (cores / workers,
    or ``threads``); extrapolate to the scale's rounds, seeds and workers.

    This trains: it takes as long as two rounds of every configuration (minutes at
    ``--scale cpu``). ``log`` gets a line before each configuration starts and one when
    it is timed (default: printed at once), so a long estimate shows where it is."""
    log = log or (lambda line: print(line, flush=True))
    import torch

    from sflsim.config.load import validate_scenario
    from sflsim.metrics.results import training_rounds
    from sflsim.runner import run_scenario

    threads = threads or max(1, (os.cpu_count() or 1) // max(1, workers))
    torch.set_num_threads(threads)
    per_point, lines = [], []
    configs = []
    for point, _seed, data in point_mappings(target, scale, 1, overrides, device):
        if point.label not in {p.label for p, _ in configs}:
            configs.append((point, data))
    log(f"  timing {plural(len(configs), 'configuration')}, 2 rounds each (as long as 2 "
        f"rounds of each run take)")
    for i, (point, data) in enumerate(configs, 1):
        log(f"  [{i}/{len(configs)}] {point.label}: training 2 rounds ...")
        data = copy.deepcopy(data)
        rounds = data["training"]["rounds"]
        data["training"]["rounds"] = min(2, rounds)
        data["evaluation"]["every_rounds"] = 1
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            result = run_scenario(validate_scenario(data), Path(tmp))
        total = time.perf_counter() - start
        walls = training_rounds(result.rounds)["wall_time_s"].tolist()
        per_round = walls[-1] - walls[-2] if len(walls) > 1 else walls[-1]
        est = total + (rounds - len(walls)) * per_round
        per_point += [est] * seeds
        lines.append(f"  {point.label}: {plural(len(walls), 'round')} in {total:.1f} s (last "
                     f"round {per_round:.1f} s) -> {plural(rounds, 'round')} about "
                     f"{est / 60:.1f} min per seed")
        log(f"  [{i}/{len(configs)}] {lines[-1].strip()}")
    loads = [0.0] * max(1, workers)
    for est in sorted(per_point, reverse=True):  # longest first onto the least loaded worker
        loads[loads.index(min(loads))] += est
    lines.append(f"  total {plural(len(per_point), 'run')} on {plural(workers, 'worker')} x "
                 f"{plural(threads, 'torch thread')}: about {max(loads) / 60:.0f} min (upper "
                 f"bound: evaluation every round)")
    return "\n".join(lines)


def run_summary(run_dir: Path) -> dict:
    """A run's ``summary.json`` (``final_server_accuracy`` a fraction in [0, 1],
    ``sim_time_s`` simulated seconds, ...); empty when it cannot be read."""
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


_TEST_SIZES: dict[str, int | None] = {}


def test_set_size(run_dir: Path) -> int | None:
    """How many test samples the run's accuracies were measured on: the test split of its
    dataset (at its ``dataset.test_fraction``, else ``dataset.fraction``) capped by
    ``evaluation.max_test_samples``, as the runner evaluates (``sflsim.runner``). None when
    the run's scenario or dataset cannot be read (its accuracies then carry no sampling
    error). Cached by dataset."""
    from sflsim.config.load import validate_scenario
    from sflsim.data import load_dataset

    try:
        scenario = validate_scenario(yaml.safe_load((run_dir / "scenario.yaml").read_text()))
    except Exception:  # noqa: BLE001  (no scenario, or one an earlier sflsim wrote)
        return None
    ds = scenario.dataset
    key = json.dumps(ds.model_dump(mode="json"), sort_keys=True)
    if key not in _TEST_SIZES:
        try:
            data = load_dataset(ds.name, data_root=ds.data_root, fraction=ds.fraction,
                                test_fraction=ds.test_fraction,
                                seed=scenario.stream_seeds.partition, image_size=ds.image_size,
                                domains=ds.domains, download=False, synthetic=ds.synthetic,
                                channels=ds.channels)
            _TEST_SIZES[key] = len(data.y_test)
        except Exception:  # noqa: BLE001  (the data are not on this machine)
            _TEST_SIZES[key] = None
    n = _TEST_SIZES[key]
    cap = scenario.evaluation.max_test_samples
    return min(n, cap) if n is not None and cap else n
