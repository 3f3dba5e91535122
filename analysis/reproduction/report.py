"""The report: each target's section of ``analysis/REPRODUCTION.md`` between its markers,
and the summary at the top, rebuilt from the sections' metadata."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
from pathlib import Path
from typing import Any

from sflsim.text import plural

from .causes import cause_of
from .claims import STATUSES, Claim, Verdict
from .numbers import PaperNumbers
from .papers import BACKBONES, PAPER_TITLES, SCALES
from .scales import FEDSGA_ALGORITHM, Scale
from .targets import TARGETS, Context, Target


def markdown_table(lines: list[list[str]]) -> str:
    head, *body = lines
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(out)


def host_info() -> dict[str, Any]:
    import torch

    import sflsim
    from sflsim.provenance import cpu_model, source_commit

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    full, dirty = source_commit()
    commit = "" if full is None else full[:7] + (
        " + uncommitted changes under sflsim/" if dirty else "")
    cpu = cpu_model()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    info = {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable,
            "torch": torch.__version__, "sflsim": sflsim.__version__,
            "python": platform.python_version(),
            # a copy of the tree without .git (a remote machine) names its commit here
            "commit": commit or os.environ.get("SFLSIM_COMMIT", "unknown"),
            "load_1min": round(load, 2)}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def scale_markdown(scale: Scale, seeds: int, overrides: list[str], numbers: PaperNumbers,
                   variants: list[Scale] | None = None, device: str | None = None) -> str:
    """The scale's departures from the paper (those that concern ``variants``: the
    datasets and backbones run), the command line's, and what is kept from the paper
    (per preset at ``--scale paper``)."""
    variants = variants or [scale]
    concerned = {v.dataset for v in variants} | {v.backbone for v in variants}
    lines = [["what", "paper", f"--scale {scale.name}", "why"]]
    lines += [[s.what, s.paper, s.here.replace("{seeds}", str(seeds)), s.why]
              for s in scale.shrinks
              if not s.applies or concerned & set(s.applies)]
    for o in overrides:
        lines.append([o.split("=", 1)[0], "", o.split("=", 1)[1], "--set on the command line"])
    if device is not None:
        lines.append(["training.device", "", f"{device} for the algorithms that can train there "
                      f"(sflsim.config.schema.CUDA_ALGORITHMS), cpu for the others",
                      "--device on the command line"])
    if any(v.preset for v in variants):
        kept = "".join(f"\n\n- {v.label} (`{_rel(v.preset)}`): {kept_settings(v, numbers)}"
                       for v in variants if v.preset)
        kept = f"Base scenarios (the presets) and what they keep from the paper:{kept}"
    else:
        kept = f"Kept from the paper: {kept_settings(scale, numbers)}"
    return (markdown_table(lines) + f"\n\nSeeds: {seeds} (0..{seeds - 1}); numbers are mean ± "
            f"sample std over seeds.\n\n{kept}")


def kept_settings(scale: Scale, numbers: PaperNumbers) -> str:
    b = scale.base
    if not b:
        return "the base scenarios of scenarios/papers/"
    t = b["training"]
    data = ""
    augmented = (b["dataset"].get("augment") or {}).get("random_crop_padding")
    if scale.dataset:
        data = (f"{scale.dataset}, {t['rounds']} rounds"
                + (f", lr {t['optimizer']['lr']:g}" if scale.paper == "fedsga"
                   else f", batch {t['batch_size']}")
                + (", augmentation pad 4 / random crop / flip (§IV-A1)" if augmented else "")
                + "; ")
    elif augmented:
        data = "augmentation: pad 4, random crop, flip (§IV-A1); "
    if scale.paper not in ("fedsga", "hetero_splitee"):  # a paper added by a target file
        n = sum(g["count"] for g in b["devices"].values())
        return (f"{data}{b['algorithm']['name']} on {b['model']['name']}, "
                f"{plural(n, 'client')}, {plural(t['rounds'], 'round')}, batch "
                f"{t['batch_size']} (the scale's base scenario).")
    if scale.paper == "hetero_splitee":
        n = sum(g["count"] for g in b["devices"].values())
        return (f"{data}{b['model']['name']} (Table I) at width {b['model'].get('width', 1.0):g}, "
                f"{plural(n, 'client')} (paper: "
                f"{numbers.setting('hetero_splitee', 'clients')}) with 100% participation (§IV-A4), "
                f"Adam, lr {t['optimizer']['lr']:g}, cosine to {t['schedule'].get('min_lr', 0):g} "
                f"(Table II), Sequential server lr divided by "
                f"{b['algorithm'].get('server_lr_divisor')} (Table II), IID partition (§IV-A1), "
                f"entropy thresholds 0 to 4 in steps of 0.05 (§III-C).")
    a = {**FEDSGA_ALGORITHM, **b["algorithm"]}
    n = sum(g["count"] for g in b["devices"].values())
    backbone = BACKBONES.get(scale.backbone or "", "ResNet-18")
    non_iid = ("the domain partition with Dirichlet alpha 0.1 within each domain"
               if b["dataset"].get("name") == "domainnet" else "Dirichlet alpha 0.1")
    return (f"{data}{backbone} at width {b['model'].get('width', 1.0):g}, {plural(n, 'client')} all "
            f"participating (paper: N = {numbers.setting('fedsga', 'clients')}), SGD, "
            f"{plural(t['local_epochs'], 'local epoch')}, batch {t['batch_size']} "
            f"(§4.1.3); FedSGA rho "
            f"{a['rho']}, beta {a['beta']}, lambda {a['lambda_align']}, tau_a {a['tau_a']}, "
            f"tau_m {a['tau_m']}, m = {a['num_prompts']}, mu {a['mu']}, calibration every "
            f"{plural(a['calibration_every'], 'round')}, candidate splits "
            f"{a.get('candidates') or 'every stage boundary'}, p_ref "
            f"{a.get('reference_split') or 'the middle one'} (§4.1.3); {non_iid} for Non-IID "
            f"(§4.1.1).")


#: what a verdict of a ``--scale smoke`` run says: its runs last seconds and their numbers
#: are at chance level, so a verdict only shows that the check ran end to end
SMOKE_VERDICTS = ("smoke run: its numbers are at chance level, so this verdict says only "
                  "that the pipeline runs, not whether the claim holds")


def claims_markdown(verdicts: list[tuple[Claim, Verdict, list[str]]], scale: str = "",
                    causes: dict[str, str] | None = None) -> str:
    """The claims table; ``causes`` (claim name -> the cause of its FAIL,
    :func:`reproduction.causes.cause_of`) adds a column that every FAIL fills."""
    lines = [["verdict", "claim", "sflsim", "the same check on the paper's numbers",
              *(["cause of a FAIL"] if causes is not None else [])]]
    for claim, verdict, on_paper in verdicts:
        status = (f"{verdict.status} (pipeline check only)" if scale == "smoke"
                  else verdict.status)
        cause = ([causes.get(claim.name, "") if verdict.status == "FAIL" else ""]
                 if causes is not None else [])
        lines.append([f"**{status}**", f"`{claim.name}`: {claim.statement} ({claim.source})",
                      verdict.detail, "; ".join(on_paper) or "n/a (no numbers printed)", *cause])
    table = markdown_table(lines)
    return f"{SMOKE_VERDICTS[0].upper()}{SMOKE_VERDICTS[1:]}.\n\n{table}" if scale == "smoke" \
        else table


def section_markdown(target: Target, scale: Scale, seeds: int, body: str,
                     verdicts: list[tuple[Claim, Verdict, list[str]]], ctx: Context,
                     command: str, host: dict, wall_s: float, overrides: list[str],
                     variants: list[Scale] | None = None, device: str | None = None,
                     made: list[str] | None = None) -> str:
    """One report section. ``made``: the command, date and host lines of the section that
    ``--report-only`` renders again (the runs were made by that command, on that host);
    this invocation is then named as the one that rendered them."""
    counts = {s: sum(v.status == s for _, v, _ in verdicts) for s in STATUSES}
    done = sum(r.status == "completed" for r in ctx.runs)
    made_on = next((line[len("- date: "):][:10] for line in made or []
                    if line.startswith("- date: ")), None)  # when the runs were made
    meta = {"target": target.key, "scale": scale.name,
            "date": made_on or dt.date.today().isoformat(),
            "passed": counts["PASS"], "failed": counts["FAIL"], "na": counts["N/A"],
            "runs": len(ctx.runs), "completed": done,
            **({"noise": counts["WITHIN NOISE"]} if counts["WITHIN NOISE"] else {})}
    failed = [r for r in ctx.runs if r.status != "completed"]
    problems = ""
    if failed:
        problems = "\n\n**Runs not completed:** " + "; ".join(
            f"{r.label} seed {r.seed} ({r.point_id}): {r.status} {r.error}".strip() for r in failed)
    return "\n".join([
        f"## {target.key} (--scale {scale.name})",
        f"<!-- reproduce:meta {json.dumps(meta)} -->",
        "",
        f"{target.title}. Paper: {PAPER_TITLES.get(target.paper, target.paper)}.",
        "",
        *(made or fresh_made_lines(command, host, dt.datetime.now().astimezone().isoformat(
            timespec="seconds") + f"; wall time of this invocation: {wall_s / 60:.1f} min")),
        *([f"- rendered again from the stored runs: `{command}` "
           f"({dt.datetime.now().astimezone().isoformat(timespec='seconds')}, sflsim "
           f"{host['sflsim']}, commit {host['commit']})"] if made else []),
        f"- runs: {done} of {len(ctx.runs)} completed, under "
        f"`{_rel(Path(os.path.commonpath([r.run_dir.parent.parent for r in ctx.runs])))}`"
        if ctx.runs else "- runs: none",
        cost_model_line([r.run_dir for r in ctx.runs if r.status == "completed"]
                        or target.rendered_runs(ctx)),
        provenance_line([r.run_dir for r in ctx.runs if r.status == "completed"]
                        or target.rendered_runs(ctx)),
        *([physics_line(ctx.runs)] if done else []),
        f"- claims: {counts['PASS']} PASS, {counts['FAIL']} FAIL, "
        + (f"{counts['WITHIN NOISE']} within noise, " if counts["WITHIN NOISE"] else "")
        + f"{counts['N/A']} N/A"
        + (f" ({SMOKE_VERDICTS})" if scale.name == "smoke" else ""),
        "",
        "### Scale",
        "",
        scale_markdown(scale, seeds, overrides, ctx.numbers, variants, device),
        "",
        "### sflsim beside the paper",
        "",
        body + problems,
        "",
        "### Claims",
        "",
        claims_markdown(verdicts, scale.name, {
            c.name: cause_of(target.key, c.name, ctx) for c, v, _ in verdicts
            if v.status == "FAIL"}) if verdicts else "(none)",
    ])


def fresh_made_lines(command: str, host: dict, date: str) -> list[str]:
    """The command, date and host lines of a section whose runs ``command`` made on this
    host (``host``: :func:`host_info`; its ``load_1min`` None leaves the load out: a
    render's load is not the runs')."""
    return [f"- command: `{command}`",
            f"- date: {date}",
            f"- host: {host['cpu']}, {plural(host['cores'], 'core')} ({host['usable_cores']} "
            f"usable)" + (f", GPU {host['gpu']}" if host.get("gpu") else "") + ", "
            + (f"1-min load {host['load_1min']}, " if host.get("load_1min") is not None
               else "") +
            f"torch {host['torch']}, sflsim {host['sflsim']} "
            f"(commit {host['commit']}), Python {host['python']}"]


def last_finished(runs: list, given: str | None = None) -> str:
    """When the last of the completed ``runs`` finished (its ``summary.json`` written), as
    an ISO date and time; "unknown" without any. ``given`` (ISO 8601) replaces the files'
    modification times, which a clone or a restored copy does not keep."""
    if given is not None:
        dt.datetime.fromisoformat(given)  # ValueError: not ISO 8601
        return given + " (the last run finished)"
    times = [(r.run_dir / "summary.json").stat().st_mtime for r in runs
             if r.status == "completed" and (r.run_dir / "summary.json").is_file()]
    if not times:
        return "unknown"
    return (dt.datetime.fromtimestamp(max(times)).astimezone().isoformat(timespec="seconds")
            + " (the last run finished)")


def cost_model_line(run_dirs: list[Path]) -> str:
    """``- cost model: ...``: the ``hardware.cost_model`` each run was made under, read from
    its ``scenario.yaml``; a run without a ``hardware`` section predates the field and was
    made under ``flops`` (the default, the only reading before it existed)."""
    import yaml

    models: dict[str, int] = {}
    absent = unread = 0
    for run_dir in run_dirs:
        try:
            scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
        except (OSError, yaml.YAMLError):
            unread += 1
            continue
        hardware = scenario.get("hardware") if isinstance(scenario, dict) else None
        if not isinstance(hardware, dict) or "cost_model" not in hardware:
            absent += 1
            model = "flops"
        else:
            model = str(hardware["cost_model"])
        models[model] = models.get(model, 0) + 1
    read = sum(models.values())
    if not read:
        return "- cost model (`hardware.cost_model`): no run's scenario.yaml to read it from"
    parts = [f"`{m}` for {n} of {plural(read, 'run')}" for m, n in sorted(models.items())]
    line = "- cost model (`hardware.cost_model`, from each run's scenario.yaml): " + ", ".join(parts)
    if absent:
        line += (f" ({'all' if absent == read else absent} without a `hardware` section: "
                 f"{'they predate' if absent > 1 else 'it predates'} the field, and a missing "
                 f"one reads `flops`)")
    if unread:
        line += f"; {plural(unread, 'run')} without a readable scenario.yaml"
    return line


def provenance_line(run_dirs: list[Path]) -> str:
    """``- made at: ...``: the commits and CPUs the runs were made on, read from each
    run's ``manifest.json`` (``git_commit``, ``git_dirty``, ``cpu``), never typed; runs
    whose manifest predates those fields are counted as "not recorded"."""
    commits: dict[str, int] = {}
    cpus: dict[str, int] = {}
    for run_dir in run_dirs:
        try:
            manifest = json.loads((run_dir / "manifest.json").read_text())
        except (OSError, ValueError):
            manifest = {}
        commit = manifest.get("git_commit")
        key = ("not recorded" if not commit else commit[:7]
               + (" + uncommitted changes under sflsim/" if manifest.get("git_dirty") else ""))
        commits[key] = commits.get(key, 0) + 1
        cpu = manifest.get("cpu") or "not recorded"
        cpus[cpu] = cpus.get(cpu, 0) + 1
    if not run_dirs:
        return "- made at (from the runs' manifest.json): no run to read it from"

    def counted(found: dict[str, int]) -> str:
        return ", ".join(f"{k} ({plural(n, 'run')})" for k, n in sorted(found.items()))
    return (f"- made at (from the runs' manifest.json): commit {counted(commits)}; "
            f"CPU {counted(cpus)}")


def physics_line(runs: list) -> str:
    """``- physics check: ...``: every completed run checked against the simulator's physics
    and bookkeeping (``sflsim check``, :func:`sflsim.checks.check_run`), with the
    first violation of each run that has one."""
    from sflsim.checks import check_run

    done = [r for r in runs if r.status == "completed"]
    bad = []
    for run in done:
        found = check_run(run.run_dir)
        if found:
            v = found[0]
            bad.append(f"{run.label} seed {run.seed}: {len(found)} violations, e.g. {v.file} "
                       f"round {v.round} {v.who}: {v.message}")
    line = (f"- physics check (`sflsim check`, every completed run): {len(done) - len(bad)} of "
            f"{len(done)} pass")
    return line + ("; " + "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more runs"
                                                  if len(bad) > 3 else "") if bad else "")


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


REPORT_HEADER = """# Reproducing the papers with sflsim

Written by `python analysis/reproduce.py` (do not edit by hand: each target's section is
replaced when that target runs again with at least as many completed runs, and this
summary is rebuilt from the sections). The
papers' numbers are in `analysis/paper_numbers.csv`; how each claim is checked is in the
claim's text and in `analysis/reproduction/claims.py`. A claim that fails at CPU scale is reported as
failing; no method is tuned to pass. A claim whose margin is inside the noise (the sample
std over seeds, or for one run the test-set sampling error of an accuracy) is reported as
WITHIN NOISE, with its margin and that spread.
"""
_BEGIN = "<!-- reproduce:begin {} -->"
_END = "<!-- reproduce:end {} -->"
_SECTION = re.compile(r"<!-- reproduce:begin (\S+) -->\n(.*?)\n<!-- reproduce:end \1 -->", re.S)


def section_id(target_key: str, scale: str) -> str:
    return f"{target_key}@{scale}"


def section_meta(text: str) -> dict[str, Any] | None:
    """The ``reproduce:meta`` record of a report section (None without one)."""
    meta = re.search(r"<!-- reproduce:meta (\{.*?\}) -->", text)
    return json.loads(meta.group(1)) if meta else None


def made_lines(path: Path, sid: str) -> list[str] | None:
    """The command, date and host lines of section ``sid`` of the report at ``path`` (the
    invocation that made its runs), None where there is no such section."""
    if not path.is_file():
        return None
    for match in _SECTION.finditer(path.read_text()):
        if match.group(1) == sid:
            lines = [line for line in match.group(2).splitlines()
                     if line.startswith(("- command: ", "- date: ", "- host: "))]
            return lines or None
    return None


def update_report(path: Path, sid: str, text: str, *, replace: bool = False) -> str | None:
    """Replace (or add) section ``sid`` of the report at ``path``; keep every other section;
    order them by target registry order and scale; rebuild the summary.

    A section is never replaced by one with fewer completed runs (a ``--report-only``
    over an empty or partial output folder, runs that failed this time) unless
    ``replace`` says so: the report is then left as it was, and the return value says
    what the old and the new section measured. None when the section was written."""
    sections: dict[str, str] = {}
    if path.is_file():
        for match in _SECTION.finditer(path.read_text()):
            sections[match.group(1)] = match.group(2)
    # a section of a target no longer registered (removed: its runs were stale) goes
    sections = {s: body for s, body in sections.items()
                if not section_meta(body) or section_meta(body)["target"] in TARGETS}
    old, new = section_meta(sections.get(sid, "")), section_meta(text)
    if not replace and old and new and new["completed"] < old["completed"]:
        return (f"kept the section {sid} of {path}: it has {old['completed']} of "
                f"{plural(old['runs'], 'run')} completed ({old['date']}), and this invocation "
                f"found {new['completed']} of {plural(new['runs'], 'run')}")
    sections[sid] = text
    order = {section_id(k, s): i * len(SCALES) + j
             for i, k in enumerate(TARGETS) for j, s in enumerate(SCALES)}
    ids = sorted(sections, key=lambda s: (order.get(s, len(order)), s))
    rows = [["target", "scale", "date", "claims PASS / FAIL / within noise / N/A",
             "runs completed"]]
    for s in ids:
        m = section_meta(sections[s])
        if m:
            rows.append([f"[{m['target']}](#{_anchor(m['target'], m['scale'])})", m["scale"],
                         m["date"], f"{m['passed']} / {m['failed']} / {m.get('noise', 0)} / {m['na']}"
                         + (" (pipeline check only)" if m["scale"] == "smoke" else ""),
                         f"{m['completed']} / {m['runs']}"])
    parts = [REPORT_HEADER, "## Summary", "", markdown_table(rows), ""]
    for s in ids:
        parts += [_BEGIN.format(s), sections[s], _END.format(s), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(parts))
    os.replace(tmp, path)
    return None


def _anchor(key: str, scale: str) -> str:
    heading = f"{key} (--scale {scale})".lower()
    return re.sub(r"[^a-z0-9 _-]", "", heading).replace(" ", "-")
