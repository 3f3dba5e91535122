"""What the cost model by operation changes in the reproduction targets' simulated numbers.

Every point of every reproduction target (``analysis/reproduce.py --list``) at ``--scale
cpu``, seed 0, built as the harness builds it (:func:`reproduction.runner.point_mappings`),
runs timing-only (``training.timing_only: true``) under three readings:

* ``a_flops_pinned``: ``hardware.cost_model: flops`` with the Jetson Nano profile as it was
  when the stored reproduction runs were made (``benchmarks/identity_profiles``, put first
  on ``$SFLSIM_PROFILE_PATH``: nominal 10 W active power, 1.0 / 0.7 W radio);
* ``b_flops``: ``flops`` with today's profiles (the Nano at its measured 7.25 W and
  0.32 / 0.26 W radio);
* ``c_operators``: ``hardware.cost_model: operators`` with today's profiles (the Raspberry
  Pi 4 and the Jetson Nano have ``operator_costs``; the Orin Nano, the phone and the A100
  server keep the FLOPs rule).

A point whose algorithm refuses timing-only gets a row with the refusal. FedSGA's
``split: sufficiency`` is refused (its cuts follow training); where the stored trained run of
the point (``analysis/measured/reproduce/cpu``, seed 0) exists, the point also runs with
``algorithm.split_schedule`` set to it, replaying that run's cuts (``cuts_source``:
``replayed from ...``). MultiSFL's default ``adaptive_replay: true`` is refused; a proxy
point (label ``... [proxy: adaptive_replay false]``: replay at ``replay_fraction`` every
round) runs instead: its resource cuts are chosen before training, from estimates, so they
are the cuts the refused point would take under each reading.

``fedsga.vs_multisfl`` has no points of its own: its rows are the points of the two sweeps
it renders (``analysis/investigation/fedsga_vs_multisfl_small.yaml`` and
``fedsga_paper_protocol_readings.yaml``; a stored run without a ``git_commit`` in its
manifest was made by an earlier sflsim, and is marked so), and its
claims are checked again on the timing-only runs of readings (b) and (c)
(``vs_multisfl_claims.csv``: FLOPs, parameters and time from those runs, accuracy from the
stored runs).

One CSV row per (target, point, reading): the columns a run writes in ``summary.json`` and
``rounds.csv`` for simulated time, FLOPs, bytes and energy; each device profile's summed
compute seconds and energy (``clients`` table); the cut per device group (split policies);
``server_order_changed`` (share of server steps whose client differs, position by
position, from the previous reading's order: training that shares a server-side model
trains in that order); the stored trained run's ``sim_time_s`` and ``client_energy_j``
where one exists; and ``ratio_to`` with the ratios of this reading to the previous one
((b)/(a) on ``b_flops`` rows, (c)/(b) on ``c_operators`` rows).

Usage::

    python analysis/cost_model_impact.py --threads 1                # every target
    python analysis/cost_model_impact.py fedsga.table5 --threads 1  # some
    python analysis/cost_model_impact.py --threads 1 --trained multisfl-iid mergesfl-iid

Runs go to ``runs/cost_model_impact/<reading>/`` (not committed); the table to
``analysis/measured/cost_model_impact/timing_only.csv`` and its summary to
``timing_only.md`` there. ``--trained POINT ...`` instead trains those points (seed 0)
under ``operators`` into ``runs/cost_model_impact/trained/<point>`` and writes
``trained.csv`` and ``trained.md``: each trained run beside the stored run of the same
point and seed, with the stored seeds' mean and spread.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import re
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import reproduce as R  # noqa: E402  (the harness: targets, scales, points)
from reproduction.fedsga_vs_multisfl import FedSGAvsMultiSFL  # noqa: E402

# fedsga.vs_multisfl is no report section any more (its runs predate today's code); its
# claims on the stored runs were measured here, so it is a target in this process
if "fedsga.vs_multisfl" not in R.TARGETS:
    R.register(FedSGAvsMultiSFL())

REPO = HERE.parent
PINNED = REPO / "benchmarks" / "identity_profiles"
STORED = HERE / "measured" / "reproduce" / "cpu"
OUT = HERE / "measured" / "cost_model_impact"
RUNS = REPO / "runs" / "cost_model_impact"
#: reading -> (hardware.cost_model, profile folder put first on $SFLSIM_PROFILE_PATH)
READINGS = {"a_flops_pinned": ("flops", PINNED), "b_flops": ("flops", None),
            "c_operators": ("operators", None)}
PREVIOUS = {"b_flops": "a_flops_pinned", "c_operators": "b_flops"}
#: summary.json columns
SUMMARY = ("sim_time_s", "bytes_up", "bytes_down", "client_flops", "server_flops",
           "client_energy_j")
#: rounds.csv columns, summed over rounds
ROUNDS = ("client_compute_energy_j", "client_radio_energy_j", "client_idle_energy_j",
          "server_busy_s")
PROFILES = ("rpi4", "jetson_nano", "jetson_orin_nano", "phone_midrange")
RATIOS = ("sim_time_s", "client_flops", "server_flops", "bytes_up", "client_energy_j",
          *(f"compute_s_{p}" for p in PROFILES))


#: targets that render other runs than their own points -> the sweep files of those runs
#: and where they are stored (their points are added under the target's name)
EXTRA_SWEEPS = {"fedsga.vs_multisfl": (
    (HERE / "investigation" / "fedsga_vs_multisfl_small.yaml",
     HERE / "measured" / "fedsga_vs_multisfl_small"),
    (HERE / "investigation" / "fedsga_paper_protocol_readings.yaml",
     HERE / "measured" / "fedsga_paper_protocol_readings"))}
PROXY = " [proxy: adaptive_replay false]"


def points(keys: list[str]) -> list[tuple[str, str, dict, Path | None]]:
    """(target, point label, scenario mapping at seed 0, its stored run folder if known
    by path) of every cpu-scale point of the targets ``keys``, built as
    ``analysis/reproduce.py`` builds them; for a target in :data:`EXTRA_SWEEPS`, the
    points of the sweeps it renders (labelled ``sweep/point algorithm``)."""
    from reproduction.fedsga_vs_multisfl import describe

    from sflsim.sweep.spec import load_sweep

    out = []
    for key in keys:
        target = R.TARGETS[key]
        if "cpu" not in target.scales:
            continue
        scale = R.scale_for(target, "cpu")
        for variant in R.variants(target, scale):
            for point, _seed, data in R.point_mappings(target, variant, 1, []):
                out.append((key, point.label, data, None))
        for spec, stored in EXTRA_SWEEPS.get(key, ()):
            sweep = load_sweep(spec)
            for point in sweep.points:
                data = point.scenario.model_dump(mode="json")
                out.append((key, f"{sweep.name}/{point.point_id} {describe(data['algorithm'])}",
                            data, stored / "points" / point.point_id))
    # MultiSFL's adaptive replay refuses timing-only: a proxy with a fixed replay fraction
    # (its resource cuts are chosen before training, from estimates, so they are the same)
    proxies = []
    for key, label, data, stored in out:
        alg = data["algorithm"]
        if alg["name"] == "multisfl" and alg.get("adaptive_replay", True) is not False:
            proxy = copy.deepcopy(data)
            proxy["algorithm"]["adaptive_replay"] = False
            proxies.append((key, label + PROXY, proxy, stored))
    return out + proxies


def scenario_id(data: dict) -> str:
    """A short id of a scenario mapping without its name (targets share points)."""
    body = {k: v for k, v in data.items() if k != "name"}
    return hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]


def timing_mapping(data: dict, cost_model: str, schedule: Path | None = None) -> dict:
    data = copy.deepcopy(data)
    data.setdefault("training", {})["timing_only"] = True
    data["hardware"] = {"cost_model": cost_model}
    if schedule is not None:
        data["algorithm"]["split_schedule"] = str(schedule)
    return data


#: in a run folder: the fingerprint of the profiles it was made with (a run is reused only
#: when today's profiles are the same: a refitted profile changes the readings' numbers)
PROFILES_STAMP = "cost_model_impact.profiles"


def profiles_fingerprint(folder: Path | None) -> str:
    """SHA-1 of every profile file in force: ``folder`` (put first on the search path) and
    the shipped library."""
    from sflsim.hardware.profiles import SHIPPED_PROFILES

    digest = hashlib.sha1()
    for root in (folder, SHIPPED_PROFILES):
        if root is None:
            continue
        for path in sorted(Path(root).rglob("*.yaml")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def stored_reading(run: Path) -> str | None:
    """The FLOPs-rule reading (``a_flops_pinned`` or ``b_flops``) whose profiles a stored
    run was made with: every number of every profile the run copied into ``profiles/``
    equals that of the profile the reading loads (sources, notes and a device's
    ``operator_costs`` aside: the FLOPs rule does not read them); None when neither
    reading's profiles are the run's."""
    from sflsim.hardware import profiles

    copies = sorted((run / "profiles").glob("*/*.yaml"))

    def fields(model) -> dict:  # the numbers, without their sources and notes
        return {k: v["value"] if isinstance(v, dict) and "value" in v else v
                for k, v in model.model_dump(mode="json").items()
                if k not in ("operator_costs", "description")}

    def loaded(folder: Path | None) -> dict:
        with profiles.searched_first(folder):
            return {c: fields(profiles.load_profile(c.parent.name, c.stem)) for c in copies}

    with profiles.searched_first(run / "profiles"):
        own = {c: fields(profiles.load_profile(c.parent.name, c.stem)) for c in copies}
    for reading in ("a_flops_pinned", "b_flops"):
        if copies and loaded(READINGS[reading][1]) == own:
            return reading
    return None


def run_reading(mapping: dict, reading: str, run_dir: Path) -> tuple[str, str]:
    """Run ``mapping`` under ``reading`` into ``run_dir`` (kept when already complete);
    ("completed" | "refused" | "failed", the reason)."""
    from sflsim.config.load import validate_scenario
    from sflsim.errors import SflsimError
    from sflsim.hardware import profiles
    from sflsim.runner import run_scenario

    summary = run_dir / "summary.json"
    _, folder = READINGS[reading]
    stamp, fingerprint = run_dir / PROFILES_STAMP, profiles_fingerprint(folder)
    if (summary.is_file() and json.loads(summary.read_text()).get("status") == "completed"
            and stamp.is_file() and stamp.read_text() == fingerprint):
        return "completed", ""  # made with these very profiles
    saved = os.environ.get("SFLSIM_PROFILE_PATH")
    if folder is not None:
        os.environ["SFLSIM_PROFILE_PATH"] = os.pathsep.join(p for p in (str(folder), saved) if p)
    profiles.load_profile.cache_clear()
    try:
        scenario = validate_scenario(mapping)
        run_scenario(scenario, run_dir, overwrite=True)
        stamp.write_text(fingerprint)
        return "completed", ""
    except SflsimError as exc:
        text = str(exc)
        return ("refused" if "timing_only" in text else "failed"), text
    finally:
        if folder is not None:
            if saved is None:
                del os.environ["SFLSIM_PROFILE_PATH"]
            else:
                os.environ["SFLSIM_PROFILE_PATH"] = saved
        profiles.load_profile.cache_clear()


def run_numbers(run_dir: Path) -> dict:
    """The simulated numbers of a finished run (see the module docstring)."""
    from sflsim.metrics.results import read_result, read_run_table, training_rounds

    summary, rounds = read_result(run_dir)
    rounds = training_rounds(rounds)
    row = {k: summary.get(k) for k in SUMMARY}
    row["rounds"] = len(rounds)
    for k in ROUNDS:
        row[k] = float(rounds[k].sum()) if k in rounds else math.nan
    clients = read_run_table(run_dir, "clients", ["group", "profile", "cut_layer", "compute_s",
                                                  "energy_j", "status"])
    by = clients.groupby("profile")
    for p in PROFILES:
        row[f"compute_s_{p}"] = float(by["compute_s"].sum().get(p, math.nan))
        row[f"energy_j_{p}"] = float(by["energy_j"].sum().get(p, math.nan))
    row["cuts"] = cut_shares(clients)
    return row


def cut_shares(clients: pd.DataFrame) -> str:
    """Per device group, the share of its trained client-rounds at each cut
    (``pi4_wifi=1:33%/4:67%``)."""
    trained = clients[clients["status"] == "trained"].dropna(subset=["cut_layer"])
    shares = trained.groupby("group")["cut_layer"].agg(
        lambda s: "/".join(f"{int(k)}:{100 * v:.0f}%" for k, v in
                           s.value_counts(normalize=True).sort_index().items()))
    return " ".join(f"{g}={v}" for g, v in shares.items())


def server_order(run_dir: Path) -> list[int]:
    """The client of each server-side step, in the order the server ran them."""
    from sflsim.metrics.results import read_run_table

    events = read_run_table(run_dir, "events", ["round", "actor", "activity", "client_id",
                                                "start_s", "seq"])
    server = events[events["actor"] == "server"].sort_values(["round", "start_s", "seq"])
    return [int(c) for c in server["client_id"]]


def order_changed(before: list[int], after: list[int]) -> float:
    """Share of positions whose client differs (1 where the lengths differ)."""
    if not before and not after:
        return math.nan
    if len(before) != len(after):
        return 1.0
    return sum(x != y for x, y in zip(before, after)) / len(before)


_OWN: dict[str, dict] = {}


def made_earlier(run: Path) -> bool:
    """Whether a stored run (one of :data:`EXTRA_SWEEPS`') was made by an sflsim older
    than the provenance every manifest now records (no ``git_commit`` entry): its
    scenario may be an earlier version of its sweep file's."""
    manifest = run / "manifest.json"
    return not manifest.is_file() or "git_commit" not in json.loads(manifest.read_text())


def stored_run(target: str, data: dict, index: dict) -> Path | None:
    """The stored trained run of this point (seed 0), if the harness has one (matched as
    the harness matches runs to reuse: :func:`reproduction.runner.reuse_finished`), in the
    target's own folder first."""
    from sflsim.config.load import validate_scenario

    if target not in _OWN:
        _OWN[target] = R.finished_runs(STORED / target)
    key = R.scenario_key(validate_scenario(data).model_dump(mode="json"))
    return _OWN[target].get(key) or index.get(key)


#: why a point's training depends on simulated time (algorithm -> reason), for --trained
TIME_DEPENDENT = {
    "multisfl": "resource split policy: each device's cut is the deepest whose estimated round "
                "time fits round_budget_s (60 s); branch server parts train in order of arrival",
    "mergesfl": "batch size regulation: each client's batch is proportional to its estimated "
                "speed (compute + transfer per sample)",
    "fedsga-resource": "split: resource: cuts by estimated round time against round_budget_s "
                       "(60 s); shared harmonizer stepped in order of arrival",
    "fedsga": "shared harmonizer (and sufficiency cuts that follow training) stepped in order "
              "of simulated arrival",
    "hetero_splitee_sequential": "one shared server-side model trained in order of arrival",
}


def trained(labels: list[str], keys: list[str], runs: Path, out: Path) -> None:
    """Run each point ``labels`` (seed 0) trained under ``hardware.cost_model: operators``
    into ``runs/trained/<label>`` (kept when complete), then write ``trained.csv`` and
    ``trained.md`` in ``out`` comparing every trained run found there with the stored run
    of the same point and seed (and the stored seeds' spread)."""
    from sflsim.metrics.results import read_run_table

    where: dict[str, tuple[list[str], dict]] = {}
    for target, label, data, _ in points(keys):
        where.setdefault(label, ([], data))[0].append(target)
    unknown = [lb for lb in labels if lb not in where]
    if unknown:
        raise SystemExit(f"unknown point {', '.join(unknown)}; valid: {', '.join(where)}")
    for label in labels:
        data = copy.deepcopy(where[label][1])
        data["hardware"] = {"cost_model": "operators"}
        run_dir = runs / "trained" / label
        t0 = time.perf_counter()
        status, why = run_reading(data, "c_operators", run_dir)
        print(f"trained {label}: {status} ({time.perf_counter() - t0:.0f} s) {why}", flush=True)
    index = R.finished_runs(STORED)
    rows = []
    for label, (targets, data) in where.items():
        run_dir = runs / "trained" / label
        if not (run_dir / "summary.json").is_file():
            continue
        stored = stored_run(targets[0], data, index)
        seeds = []
        sweep = STORED / targets[0] / "sweep.csv"
        if sweep.is_file():
            frame = pd.read_csv(sweep)
            seeds = [100 * a for a in frame[frame["name"].str.rsplit(".s", n=1).str[0] == label]
                     ["final_server_accuracy"].dropna()]
        algo = data["algorithm"]
        kind = ("fedsga-resource" if algo["name"] == "fedsga" and algo.get("split") == "resource"
                else algo["name"])
        for name, folder in (("stored (flops, Nano as it was)", stored), ("operators", run_dir)):
            if folder is None:
                continue
            summary = R.run_summary(folder)
            clients = read_run_table(folder, "clients", ["group", "cut_layer", "status"])
            rows.append({
                "point": label, "targets": " ".join(targets), "algorithm": algo["name"],
                "why_time_dependent": TIME_DEPENDENT.get(kind, ""), "run": name,
                "run_dir": str(folder.resolve().relative_to(REPO)),
                "final_server_accuracy_pct": 100 * (summary.get("final_server_accuracy")
                                                    or math.nan),
                "stored_seeds_accuracy_mean_pct": (sum(seeds) / len(seeds)) if seeds else math.nan,
                "stored_seeds_accuracy_std_pct": (pd.Series(seeds).std() if len(seeds) > 1
                                                  else math.nan),
                "stored_seeds": len(seeds),
                **{k: summary.get(k) for k in SUMMARY},
                "rounds": summary.get("rounds_completed"),
                "cuts_share_per_group": cut_shares(clients),
                "wall_time_s": summary.get("wall_time_s"),
            })
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "trained.csv", index=False, float_format="%.6g")
    lines = ["| point | targets | why its training depends on simulated time | run | "
             "final_server_accuracy (%) | stored seeds (%), mean ± std (n) | sim_time_s | "
             "client_flops | "
             "client_energy_j | cuts (share of client-rounds) | wall_time_s |",
             "|" + "---|" * 11]
    for rec in frame.to_dict("records"):
        lines.append(
            f"| {rec['point']} | {rec['targets']} | {rec['why_time_dependent']} | {rec['run']} | "
            f"{rec['final_server_accuracy_pct']:.2f} | {rec['stored_seeds_accuracy_mean_pct']:.2f} "
            f"± {rec['stored_seeds_accuracy_std_pct']:.2f} ({rec['stored_seeds']}) | "
            f"{rec['sim_time_s']:.1f} | "
            f"{rec['client_flops']:.4g} | {rec['client_energy_j']:.0f} | "
            f"{rec['cuts_share_per_group']} | {rec['wall_time_s']:.0f} |")
    (out / "trained.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'trained.csv'} and trained.md ({len(frame)} rows)")


def latency_check(runs: Path, out: Path) -> None:
    """hetero_splitee.fig2's latency claim under both readings, with the exit masks held
    fixed: ``hetero-sequential-homo-l3``'s scenario with the Averaging strategy (whose
    training reads no simulated time, so both readings train the same models), 1 round,
    early-exit sweep after it, once per cost model; writes ``latency_check.csv`` (per
    threshold: exit ratio and latency under each, and the latency's rise from the previous
    threshold under each)."""
    from sflsim.metrics.results import read_result_csv

    target = R.TARGETS["hetero_splitee.fig2"]
    scale = R.scale_for(target, "cpu")
    point, _, data = next(m for m in R.point_mappings(target, scale, 1, [])
                          if m[0].label == "hetero-sequential-homo-l3")
    data = copy.deepcopy(data)
    data["algorithm"] = {"name": "hetero_splitee_averaging"}
    data["training"]["rounds"] = 1
    data["evaluation"]["every_rounds"] = 1
    frames = {}
    for reading in ("b_flops", "c_operators"):
        data["hardware"] = {"cost_model": READINGS[reading][0]}
        run_dir = runs / "latency_check" / reading
        status, why = run_reading(data, reading, run_dir)
        if status != "completed":
            raise SystemExit(f"latency check {reading}: {status} {why}")
        frames[reading] = read_result_csv(run_dir / "early_exit.csv").set_index(
            ["end_layer", "threshold"])
    b, c = frames["b_flops"], frames["c_operators"]
    table = pd.DataFrame({
        "exit_ratio (b)": b["exit_ratio"], "exit_ratio (c)": c["exit_ratio"],
        "latency_ms (b)": 1000 * b["latency_s_mean"], "latency_ms (c)": 1000 * c["latency_s_mean"],
        "device_ms (b)": 1000 * b["device_s_mean"], "device_ms (c)": 1000 * c["device_s_mean"],
        "server_queue_ms (b)": 1000 * b["server_queue_s_mean"],
        "server_queue_ms (c)": 1000 * c["server_queue_s_mean"]}).reset_index()
    for r in ("b", "c"):
        table[f"rise_ms ({r})"] = table.groupby("end_layer")[f"latency_ms ({r})"].diff()
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "latency_check.csv", index=False, float_format="%.6g")
    diff = (table["rise_ms (c)"] - table["rise_ms (b)"]).abs().max()
    print(f"wrote {out / 'latency_check.csv'}: exit masks the same: "
          f"{bool((table['exit_ratio (b)'] == table['exit_ratio (c)']).all())}; device_ms "
          f"{table['device_ms (b)'].iloc[0]:.4g} -> {table['device_ms (c)'].iloc[0]:.4g}; largest "
          f"difference of the rise between thresholds {diff:.3g} ms; largest fall (b) "
          f"{-table['rise_ms (b)'].min():.3g} ms, (c) {-table['rise_ms (c)'].min():.3g} ms")


def what_if(runs: Path, out: Path) -> None:
    """Each target's claims checked again with every stored seed-0 run that has a trained
    ``operators`` run (``runs/trained/<point>``) replaced by it, seeds 1 and 2 as stored;
    writes ``whatif_verdicts.csv`` (per target and claim: the verdict and its numbers on
    the stored runs and with the replacement) and prints the verdicts that change."""
    from dataclasses import replace as swap

    trained_dirs = {d.name: d for d in (runs / "trained").glob("*")
                    if (d / "summary.json").is_file()}
    rows = []
    for key, target in R.TARGETS.items():
        if "cpu" not in target.scales or not target.points(R.scale_for(target, "cpu")):
            continue
        scale = R.scale_for(target, "cpu")
        ctx = R.run_target(target, scale, scale.seeds, STORED / key, STORED, workers=1,
                           executor="process", address=None, overrides=[], run=False)
        ctx.numbers = R.PaperNumbers()
        swapped = [swap(r, run_dir=trained_dirs[r.label])
                   if r.seed == 0 and r.label in trained_dirs and r.status == "completed"
                   else r for r in ctx.runs]
        if swapped == ctx.runs:
            continue
        replaced = sorted({r.label for r in swapped if r.seed == 0 and r.label in trained_dirs})
        before = {c.name: v for c, v, _ in target.analyse(ctx)[1]}
        after = {c.name: v for c, v, _ in target.analyse(swap(ctx, runs=swapped))[1]}
        for name, v in before.items():
            rows.append({"target": key, "claim": name, "replaced_seed0": " ".join(replaced),
                         "verdict_stored": v.status, "verdict_with_operators_seed0":
                         after[name].status, "moves": v.status != after[name].status,
                         "detail_stored": v.detail, "detail_with_operators_seed0":
                         after[name].detail})
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "whatif_verdicts.csv", index=False)
    moved = frame[frame["moves"]]
    print(f"wrote {out / 'whatif_verdicts.csv'}: {len(frame)} claims of "
          f"{frame['target'].nunique()} targets checked, {len(moved)} move")
    for rec in moved.to_dict("records"):
        print(f"  {rec['target']} {rec['claim']}: {rec['verdict_stored']} -> "
              f"{rec['verdict_with_operators_seed0']} ({rec['detail_with_operators_seed0']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python analysis/cost_model_impact.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET",
                        help="reproduction targets (default: every one)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--runs", type=Path, default=RUNS, help=f"run folders (default {RUNS})")
    parser.add_argument("-o", "--output", type=Path, default=OUT,
                        help="where timing_only.csv and timing_only.md go")
    parser.add_argument("--trained", nargs="*", default=None, metavar="POINT",
                        help="instead: train these points (labels, seed 0) under operators, "
                             "then write trained.csv comparing every trained run with the "
                             "stored one (no POINT: only write trained.csv)")
    parser.add_argument("--latency-check", action="store_true",
                        help="instead: hetero_splitee.fig2's latency with the exit masks held "
                             "fixed, under both cost models (latency_check.csv)")
    parser.add_argument("--what-if", action="store_true",
                        help="instead: every target's claims with the stored seed-0 runs "
                             "replaced by the trained operators runs (whatif_verdicts.csv)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(max(1, args.threads))
    R.load_plugins()
    keys = args.targets or list(R.TARGETS)
    unknown = [k for k in keys if k not in R.TARGETS]
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)}; valid: {', '.join(R.TARGETS)}")
    if args.what_if:
        what_if(args.runs, args.output)
        return 0
    if args.latency_check:
        latency_check(args.runs, args.output)
        return 0
    if args.trained is not None:
        trained(args.trained, keys, args.runs, args.output)
        return 0
    index = R.finished_runs(STORED)
    rows, orders, done = [], {}, {}
    order = {k: i for i, k in enumerate(keys)}
    start = time.perf_counter()
    skipped = [k for k in keys if "cpu" not in R.TARGETS[k].scales]
    no_points = [k for k in keys if k not in skipped
                 and not R.TARGETS[k].points(R.scale_for(R.TARGETS[k], "cpu"))]
    for target, label, data, stored in sorted(points(keys), key=lambda p: order[p[0]]):
        sid = scenario_id(data)
        earlier = stored is not None and made_earlier(stored)  # matched by its folder
        if stored is None and PROXY not in label:
            stored = stored_run(target, data, index)
        if stored is not None and not (stored / "summary.json").is_file():
            stored = None
        stored_numbers = R.run_summary(stored) if stored else {}
        # a point whose cuts may be replayed from its stored run is run once per stored run
        # (targets that share a scenario keep their own stored runs, made on other CPUs),
        # and again when the run stored there is a new one (its summary changed)
        replay = "" if stored is None else hashlib.sha1(
            str(stored).encode() + (stored / "summary.json").read_bytes()).hexdigest()[:6]
        for reading, (cost_model, _) in READINGS.items():
            if (sid, reading, replay) not in done:
                folder = re.sub(r"[^A-Za-z0-9_.-]+", "_", label.replace(PROXY, "-proxy"))
                run_dir = args.runs / reading / f"{folder}-{sid}"
                t0 = time.perf_counter()
                status, why = run_reading(timing_mapping(data, cost_model), reading, run_dir)
                cuts = ""
                if status == "refused" and stored is not None and PROXY not in label and \
                        data["algorithm"]["name"] == "fedsga" and \
                        data["algorithm"].get("split", "sufficiency") == "sufficiency":
                    run_dir = args.runs / reading / f"{folder}-{sid}-replayed-{replay}"
                    status, why2 = run_reading(timing_mapping(data, cost_model, stored),
                                               reading, run_dir)
                    cuts = f"replayed from {stored.relative_to(REPO)}"
                    why = why2 or f"split: sufficiency refused; cuts {cuts}"
                numbers = run_numbers(run_dir) if status == "completed" else {}
                if status == "completed":
                    orders[(sid, reading, replay)] = server_order(run_dir)
                numbers["run_folder"] = run_dir.name
                done[(sid, reading, replay)] = (status, why, cuts, numbers)
                print(f"{target} {label} {reading}: {status} "
                      f"({time.perf_counter() - t0:.1f} s) "
                      f"{numbers.get('sim_time_s', '')} {why[:120]}", flush=True)
            status, why, cuts, numbers = done[(sid, reading, replay)]
            row = {"target": target, "point": label, "seed": 0,
                   "algorithm": data["algorithm"]["name"], "reading": reading,
                   "cost_model": cost_model,
                   "profiles": ("benchmarks/identity_profiles (Jetson Nano as stored runs)"
                                if READINGS[reading][1] else "device_profiles (today)"),
                   "status": status, "cuts_source": cuts or ("" if status != "completed"
                                                             else "the run's own policy"),
                   "note": (why.replace("\n", " ") if status != "completed" or cuts else
                            "proxy of the refused point above: replay at "
                            "algorithm.replay_fraction every round" if PROXY in label else ""),
                   **numbers,
                   "stored_run": (str(stored.relative_to(REPO)) + (
                       " (made by an earlier sflsim, from an earlier version of the sweep "
                       "file)" if earlier else "")) if stored else "",
                   "stored_sim_time_s": stored_numbers.get("sim_time_s"),
                   "stored_client_energy_j": stored_numbers.get("client_energy_j")}
            prev = PREVIOUS.get(reading)
            row["ratio_to"] = prev or ""
            if prev and (sid, prev, replay) in done and done[(sid, prev, replay)][0] == "completed" \
                    and status == "completed":
                before = done[(sid, prev, replay)][3]
                for k in RATIOS:
                    a, b = before.get(k), numbers.get(k)
                    row[f"{k}_ratio"] = (b / a if a and b is not None and not math.isnan(a)
                                         and not math.isnan(b) else math.nan)
                row["server_order_changed"] = order_changed(orders[(sid, prev, replay)],
                                                            orders[(sid, reading, replay)])
            rows.append(row)
    frame = pd.DataFrame(rows)
    args.output.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.output / "timing_only.csv", index=False, float_format="%.6g")
    wall = time.perf_counter() - start
    command = shlex.join(["python", "analysis/cost_model_impact.py",
                          *(argv if argv is not None else sys.argv[1:])])
    claims = (vs_multisfl_claims(frame, args.runs) if "fedsga.vs_multisfl" in keys
              else pd.DataFrame())
    if len(claims):
        claims.to_csv(args.output / "vs_multisfl_claims.csv", index=False)
    (args.output / "timing_only.md").write_text(summary_markdown(frame, command, wall, skipped,
                                                                 no_points, claims))
    print(f"wrote {args.output / 'timing_only.csv'} and timing_only.md ({wall / 60:.1f} min)")
    return 0


def vs_multisfl_claims(frame: pd.DataFrame, runs: Path) -> pd.DataFrame:
    """fedsga.vs_multisfl's claims on ``scenarios/fedsga_small.yaml`` checked with the
    timing-only runs of reading (b) and of reading (c): FedSGA's cuts replayed from its
    stored runs, MultiSFL's resource cuts chosen by each reading (the proxy runs: a fixed
    replay fraction), FLOPs, parameters and time from those runs, accuracy from the stored
    runs (unchanged: timing-only runs have none). One row per claim and reading."""
    from reproduction.fedsga_vs_multisfl import FedSGAvsMultiSFL, run_row

    part = frame[(frame["target"] == "fedsga.vs_multisfl")
                 & frame["point"].str.startswith("fedsga_vs_multisfl_small/")
                 & (frame["status"] == "completed")]
    out = []
    for reading in ("b_flops", "c_operators"):
        rows, dirs = [], {}
        for rec in part[part["reading"] == reading].to_dict("records"):
            folder = runs / reading / rec["run_folder"]
            row = run_row(folder)
            stored = REPO / rec["stored_run"].split(" (")[0]
            row["acc_final_pct"] = run_row(stored)["acc_final_pct"]
            rows.append(row)
            dirs[row["run"]] = stored
        for claim, verdict, _ in FedSGAvsMultiSFL().verdicts(rows, R.PaperNumbers(), dirs):
            out.append({"claim": claim.name, "reading": reading, "verdict": verdict.status,
                        "detail": verdict.detail})
    return pd.DataFrame(out)


def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.{digits}f}"


def _span(values: pd.Series) -> str:
    values = values.dropna()
    if not len(values):
        return ""
    lo, hi = values.min(), values.max()
    return f"{lo:.3f}" if hi - lo < 0.0005 else f"{lo:.3f} to {hi:.3f}"


def method_table(frame: pd.DataFrame) -> str:
    """Per target and algorithm, the range over its points of the ratios (b)/(a) and (c)/(b)
    (proxy rows apart), and the points refused timing-only."""
    head = ("| target | algorithm | points run | sim_time_s (b)/(a) | sim_time_s (c)/(b) | "
            "client_energy_j (b)/(a) | client_energy_j (c)/(b) | compute_s rpi4 (c)/(b) | "
            "compute_s jetson_nano (c)/(b) | server order changed (c) vs (b) | refused |")
    lines = [head, "|" + "---|" * 11]
    frame = frame.assign(kind=frame["algorithm"] + frame["point"].str.contains(
        re.escape(PROXY)).map({True: " (proxy)", False: ""}))
    for (target, kind), part in frame.groupby(["target", "kind"], sort=False):
        b = part[(part["reading"] == "b_flops") & (part["status"] == "completed")]
        c = part[(part["reading"] == "c_operators") & (part["status"] == "completed")]
        refused = part[(part["reading"] == "b_flops") & (part["status"] != "completed")]
        lines.append(
            f"| {target} | {kind} | {len(c)} | {_span(b['sim_time_s_ratio'])} | "
            f"{_span(c['sim_time_s_ratio'])} | {_span(b['client_energy_j_ratio'])} | "
            f"{_span(c['client_energy_j_ratio'])} | {_span(c['compute_s_rpi4_ratio'])} | "
            f"{_span(c['compute_s_jetson_nano_ratio'])} | {_span(c['server_order_changed'])} | "
            f"{len(refused) or ''} |")
    return "\n".join(lines)


def summary_markdown(frame: pd.DataFrame, command: str, wall_s: float, skipped: list[str],
                     no_points: list[str], claims: pd.DataFrame | None = None) -> str:
    """The Markdown summary of the CSV: per target, per point, the sim time of the three
    readings and the ratios (generated; do not edit)."""
    from reproduction.report import host_info

    host = host_info()
    lines = [
        "# Timing-only: the three readings of simulated cost, per reproduction target",
        "",
        f"Command: `{command}` (with `$SFLSIM_PROFILE_PATH` unset; the script sets it for "
        "reading (a)). Written by it; do not edit by hand.",
        "",
        f"- made: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, sflsim {host['sflsim']} (commit "
        f"{host['commit']}), {host['cpu']}, torch {host['torch']}; wall time "
        f"{wall_s / 60:.1f} min",
        "- readings: (a) `a_flops_pinned`: `hardware.cost_model: flops`, Jetson Nano profile "
        "of the stored runs (benchmarks/identity_profiles); (b) `b_flops`: `flops`, today's "
        "profiles; (c) `c_operators`: `operators`, today's profiles. Every point at "
        "`--scale cpu`, seed 0, `training.timing_only: true`.",
        "- full numbers: `timing_only.csv` (one row per target, point and reading; "
        "`*_ratio` columns: this reading over `ratio_to`).",
    ]
    if skipped:
        lines.append(f"- no cpu scale (paper scale only): {', '.join(skipped)}")
    if no_points:
        lines.append(f"- no points of their own: {', '.join(no_points)} (rows: the points of "
                     f"the sweeps it renders)")
    stored = frame[(frame["status"] == "completed") & frame["stored_sim_time_s"].notna()
                   & ~frame["stored_run"].fillna("").str.contains("earlier sflsim")
                   & ~frame["point"].str.contains(PROXY, regex=False)]  # not its scenario
    made_under = {run: stored_reading(REPO / run) for run in stored["stored_run"].unique()}
    a = stored[stored["reading"] == stored["stored_run"].map(made_under)]
    if len(a):
        dt_s = (a["sim_time_s"] - a["stored_sim_time_s"]).abs().max()
        de = ((a["client_energy_j"] - a["stored_client_energy_j"]).abs()
              / a["stored_client_energy_j"]).max()
        under = a["reading"].value_counts()
        lines.append(
            f"- check: the reading whose FLOPs-rule profiles a stored trained run was made with "
            f"gives its numbers (timing-only runs have the trained runs' events): "
            f"{len(a)} rows with a stored run of today's scenario ("
            + ", ".join(f"{n} made under ({r[0]})" for r, n in sorted(under.items()))
            + f"), largest |sim_time_s - stored| {dt_s:.3g} s, largest relative "
            f"client_energy_j difference {de:.3g}")
    unmatched = sorted(r for r, m in made_under.items() if m is None)
    if unmatched:
        lines.append(f"- stored runs whose profiles are neither reading's: {len(unmatched)} "
                     f"({', '.join(unmatched[:3])}{', ...' if len(unmatched) > 3 else ''})")
    lines += ["", "## Per target and method", "", method_table(frame)]
    lines.append("")
    for target, part in frame.groupby("target", sort=False):
        lines += [f"## {target}", "",
                  "| point | algorithm | sim_time_s (a) | sim_time_s (b) | sim_time_s (c) | "
                  "(b)/(a) | (c)/(b) | client_energy_j (b)/(a) | client_energy_j (c)/(b) | "
                  "compute_s rpi4 (c)/(b) | compute_s jetson_nano (c)/(b) | "
                  "server order changed (c) vs (b) | cuts (b) -> (c) | stored sim_time_s | note |",
                  "|" + "---|" * 15]
        for label, p in part.groupby("point", sort=False):
            by = {r["reading"]: r for r in p.to_dict("records")}
            a, b, c = (by.get(k, {}) for k in READINGS)
            if b.get("status") != "completed":
                lines.append(f"| {label} | {b.get('algorithm', '')} | | | | | | | | | | | | "
                             f"{_fmt(b.get('stored_sim_time_s'), 1)} | {b.get('status')}: "
                             f"{str(b.get('note', ''))[:300]} |")
                continue
            cuts = (b.get("cuts") or "") + (
                f" -> {c.get('cuts')}" if c.get("cuts") != b.get("cuts") else " (same)")
            note = b.get("cuts_source") if b.get("cuts_source", "").startswith("replayed") else ""
            lines.append(
                f"| {label} | {b.get('algorithm')} | {_fmt(a.get('sim_time_s'), 1)} | "
                f"{_fmt(b.get('sim_time_s'), 1)} | {_fmt(c.get('sim_time_s'), 1)} | "
                f"{_fmt(b.get('sim_time_s_ratio'))} | {_fmt(c.get('sim_time_s_ratio'))} | "
                f"{_fmt(b.get('client_energy_j_ratio'))} | {_fmt(c.get('client_energy_j_ratio'))} | "
                f"{_fmt(c.get('compute_s_rpi4_ratio'))} | {_fmt(c.get('compute_s_jetson_nano_ratio'))} | "
                f"{_fmt(c.get('server_order_changed'), 2)} | {cuts.strip()} | "
                f"{_fmt(b.get('stored_sim_time_s'), 1)} | {note} |")
        lines.append("")
    if claims is not None and len(claims):
        wide = claims.pivot(index="claim", columns="reading", values=["verdict", "detail"])
        lines += ["## fedsga.vs_multisfl's claims under (b) and (c)", "",
                  "Checked as the harness checks them (`FedSGAvsMultiSFL.verdicts`) on the "
                  "timing-only runs above: FedSGA's cuts replayed from its stored runs, MultiSFL's "
                  "chosen by each reading (proxy runs, fixed replay fraction), accuracy from the "
                  "stored runs (`vs_multisfl_claims.csv`).", "",
                  "| claim | verdict (b) | verdict (c) | (b) | (c) |", "|---|---|---|---|---|"]
        for name in dict.fromkeys(claims["claim"]):
            row = wide.loc[name]
            lines.append(f"| `{name}` | {row[('verdict', 'b_flops')]} | "
                         f"{row[('verdict', 'c_operators')]} | {row[('detail', 'b_flops')]} | "
                         f"{row[('detail', 'c_operators')]} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
