"""Generate the profile library page from the shipped profile files (``device_profiles/``).

Run by the MkDocs hook ``docs/hooks.py`` at build time (the page ``reference/profile-library.md``
exists only in the built site), by ``tests/test_docs_reference.py``, or by hand:
``python docs/gen_profiles.py > profile-library.md``.
"""

from __future__ import annotations

from pathlib import Path

PAGE = "reference/profile-library.md"

#: section title of each kind of profile
TITLES = {"devices": "Devices", "links": "Links", "servers": "Servers"}

#: a source that starts with this marks an assumption (the profile files' convention)
ASSUMED = "Assumed."
#: what precedes an assumed number's source in the tables
ASSUMED_BADGE = "**assumed** ·"
#: the parameters of ``operator_costs`` with a value, unit and source, in the file's order
OPERATOR_FIELDS = ("conv_flops", "grouped_conv_flops", "matmul_flops", "elementwise_flops",
                   "memory_bandwidth_bps", "per_operator_s", "per_batch_s")

INTRO = [
    "# Profile library",
    "",
    "<!-- generated at build time by docs/gen_profiles.py from device_profiles/; do not edit -->",
    "",
    "Every profile shipped with sflsim and every number in it, with its unit as written in "
    "the file, its basis (`measured`, `nominal`, `derived` or `fitted`) and its source, generated "
    "from the files under `device_profiles/` when the site is built. What the profiles "
    "are and how the numbers were chosen: [Hardware profiles](profiles.md); to add your "
    "own: [Add a device profile](../how-to/device-profile.md). The same numbers are "
    "printed by `sflsim profiles show NAME`.",
    "",
    "Basis: **measured**, someone ran the hardware and reported this number; **nominal**, "
    "a datasheet or specification value, or an assumption the source says so; "
    "**derived**, computed from other published numbers (the note shows how); **fitted**, "
    "a parameter of the cost model by operation fitted on measured training steps "
    "(`sflsim calibrate`), found only in `operator_costs`.",
    "",
    f"**Assumed values.** A source that starts with `{ASSUMED}` marks a guess, an efficiency "
    "factor applied to a peak, or a proxy from another device, whatever its basis. In the "
    f"tables below such a number's source cell starts with {ASSUMED_BADGE.split()[0]}, and "
    "each profile's assumed fields are listed beside its description.",
    "",
    "**Cost model.** Under `hardware.cost_model: operators` a device whose profile has "
    "`operator_costs` prices each operator by its class's FLOP rate, the memory bandwidth "
    "and fixed costs per operator and per batch (*operators (fitted)*); a device without it "
    "keeps the FLOPs rule, FLOPs / `sustained_flops` (*FLOPs only*). Servers and links have "
    "no cost model by operation.",
    "",
]



def _cell(text: object) -> str:
    """Table-cell text on one line: a pipe would end the cell, ``<`` outside code spans is
    HTML and ``*`` would start emphasis."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    parts[::2] = [t.replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
                  for t in parts[::2]]
    return "`".join(parts)


def is_assumed(entry: object) -> bool:
    """Whether a sourced number is an assumption: its source starts with ``Assumed.``."""
    return isinstance(entry, dict) and str(entry.get("source", "")).strip().startswith(ASSUMED)


def assumed_fields(data: dict) -> list[str]:
    """The fields of a profile file whose source marks them as assumed (those of
    ``operator_costs`` as ``operator_costs.<field>``)."""
    found = [field for field, entry in data.items() if is_assumed(entry)]
    costs = data.get("operator_costs")
    if isinstance(costs, dict):
        found += [f"operator_costs.{field}" for field, entry in costs.items() if is_assumed(entry)]
    return found


def cost_model(data: dict) -> str:
    """``operators (fitted)`` (with the bases of its numbers) for a device file with
    ``operator_costs``, ``FLOPs only`` for one without."""
    costs = data.get("operator_costs")
    if not isinstance(costs, dict):
        return "FLOPs only"
    return f"operators ({', '.join(_bases(costs))})"


def _bases(costs: dict) -> list[str]:
    """The bases of the numbers of an ``operator_costs`` mapping, sorted."""
    return sorted({entry.get("basis", "?") for entry in costs.values()
                   if isinstance(entry, dict) and "value" in entry})


def _sourced(entry: dict) -> str:
    """The source cell of a sourced number: its source (after a badge if it is assumed),
    then its note."""
    text = _cell(entry.get("source", ""))
    if is_assumed(entry):
        text = f"{ASSUMED_BADGE} {text}"
    if entry.get("note"):
        text += f" *Note:* {_cell(entry['note'])}"
    return text


def _stage_latency(entry: dict) -> str:
    """One measured per-stage latency table as a value cell."""
    times = "; ".join(f"`{field}` {entry[field]}" for field in
                      ("forward_s", "backward_s", "update_s", "exit_head_s") if entry.get(field))
    return _cell(f"`{entry.get('model')}` width {entry.get('width')}, input "
                 f"{entry.get('input')}, batch {entry.get('batch_size')}, seconds per stage: "
                 f"{times}")


def _held_out(errors: dict) -> str:
    """``held_out_error`` as a value cell: each row's relative error, as a percentage."""
    if not errors:
        return "none recorded"
    return "; ".join(f"`{_cell(label)}` {float(error):+.1%}" for label, error in errors.items())


def operator_rows(name: str, costs: dict) -> list[str]:
    """Rows of a device's ``operator_costs``: one summary row, one per parameter
    (``operator_costs.conv_flops``, ...), then ``fitted_on`` and ``held_out_error``."""
    rows = [f"| `{name}` | `operator_costs` | {len(costs)} entries, below | "
            f"{', '.join(_bases(costs)) or '—'} | "
            "the cost model by operation, used under `hardware.cost_model: operators` |"]
    for field, entry in costs.items():
        label = f"`operator_costs.{field}`"
        if isinstance(entry, dict) and "value" in entry:
            cells = (f"`{_cell(entry['value'])}`", entry.get("basis", "—"), _sourced(entry))
        elif field == "fitted_on":
            cells = ("; ".join(f"`{_cell(row)}`" for row in entry) or "none listed", "—",
                     "the measured training steps the parameters were fitted on")
        elif field == "held_out_error":
            cells = (_held_out(entry or {}), "—",
                     "(predicted - measured) / measured of each row, its model left out of the fit")
        else:
            cells = (_cell(entry), "—", "—")
        rows.append(f"| `{name}` | {label} | {' | '.join(cells)} |")
    return rows


def cost_model_table(profiles: dict[str, dict]) -> list[str]:
    """One row per device: its cost model and, where it has ``operator_costs``, the
    parameters as written, the rows fitted on and the error on models left out."""
    lines = ["| device | cost model | conv | grouped conv | matmul | elementwise | memory "
             "bandwidth | per operator | per batch | fitted on | held-out error |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, data in profiles.items():
        costs = data.get("operator_costs")
        if not isinstance(costs, dict):
            lines.append(f"| `{name}` | FLOPs only | " + " | ".join(["—"] * 9) + " |")
            continue
        values = [f"`{_cell(costs[f]['value'])}`" if isinstance(costs.get(f), dict) else "—"
                  for f in OPERATOR_FIELDS]
        rows = costs.get("fitted_on") or []
        lines.append(f"| `{name}` | {cost_model(data)} | {' | '.join(values)} | "
                     f"{len(rows)} row{'' if len(rows) == 1 else 's'} | "
                     f"{_held_out(costs.get('held_out_error') or {})} |")
    return lines


def profile_rows(name: str, data: dict) -> list[str]:
    """Markdown rows ``| profile | field | value | basis | source |`` of one profile's file
    (``data`` as read, without ``description``), in the file's order; ``operator_costs``
    is one row per entry (:func:`operator_rows`)."""
    rows = []
    for field, entry in data.items():
        if field == "description":
            continue
        if field == "operator_costs" and isinstance(entry, dict):
            rows += operator_rows(name, entry)
            continue
        if isinstance(entry, dict) and "value" in entry:
            cells = (f"`{_cell(entry['value'])}`", entry.get("basis", "—"), _sourced(entry))
        elif field == "stage_latency" and isinstance(entry, list):
            for table in entry:
                rows.append(f"| `{name}` | `{field}` | {_stage_latency(table)} | "
                            f"{table.get('basis', '—')} | {_sourced(table)} |")
            continue
        elif isinstance(entry, (int, float)) and not isinstance(entry, bool):
            cells = (f"`{entry}`", "—", "a plain count, no unit; see the description above")
        else:
            cells = (_cell(entry), "—", "—")
        rows.append(f"| `{name}` | `{field}` | {' | '.join(cells)} |")
    return rows


def profile_files(kind: str, folder: Path | None = None) -> list[Path]:
    """The shipped profile files of ``kind`` ("devices", "links" or "servers"), by name."""
    from sflsim.hardware.profiles import SHIPPED_PROFILES

    return sorted(((folder or SHIPPED_PROFILES) / kind).glob("*.yaml"))


def read_profile(kind: str, path: Path) -> dict:
    """A profile file as written (sflsim's own reader), checked against its model, so that a
    file sflsim would refuse fails the build instead of being shown."""
    from sflsim.hardware import profiles
    from sflsim.inputs.yaml_files import read_yaml_mapping

    data = read_yaml_mapping(path, what="profile")
    model = {"devices": profiles.DeviceProfile, "links": profiles.LinkProfile,
             "servers": profiles.ServerProfile}[kind]
    model.model_validate({"name": path.stem, **data})
    return data


def profile_library_markdown(folder: Path | None = None) -> str:
    """The page: per kind, a table of the profiles with their descriptions, assumed fields
    (and, for devices, cost model), for devices a table of the cost model by operation, and
    a table of every number of every profile."""
    from sflsim.hardware.profiles import KINDS

    lines = list(INTRO)
    for kind in KINDS:
        files = profile_files(kind, folder)
        profiles = {path.stem: read_profile(kind, path) for path in files}
        devices = kind == "devices"
        lines += [f"## {TITLES[kind]}", "",
                  f"{len(profiles)} profiles in `device_profiles/{kind}/`, one file each "
                  f"(`{files[0].name}` is `{files[0].stem}`).", "",
                  "| profile | description | " + ("cost model | " if devices else "")
                  + "assumed (no measurement found) |",
                  "|---|---|" + ("---|" if devices else "") + "---|"]
        for name, data in profiles.items():
            assumed = ", ".join(f"`{f}`" for f in assumed_fields(data)) or "none"
            model = f"{cost_model(data)} | " if devices else ""
            lines.append(f"| `{name}` | {_cell(data.get('description', ''))} | {model}{assumed} |")
        if devices:
            lines += ["", "### Cost model by operation", "",
                      "The `operator_costs` of each device (values as written: FLOP/s per "
                      "operator class, memory bandwidth in bytes per second, fixed seconds per "
                      "operator and per batch), the measured rows they were fitted on and the "
                      "error on each model left out of the fit; *FLOPs only*: no "
                      "`operator_costs`, so under `hardware.cost_model: operators` the device "
                      "keeps the FLOPs rule (`sustained_flops`).", ""]
            lines += cost_model_table(profiles)
        lines += ["", f"### Numbers of the {kind}", "",
                  "| profile | field | value | basis | source |", "|---|---|---|---|---|"]
        for name, data in profiles.items():
            lines += profile_rows(name, data)
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(profile_library_markdown())
