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

INTRO = [
    "# Profile library",
    "",
    "<!-- generated at build time by docs/gen_profiles.py from device_profiles/; do not edit -->",
    "",
    "Every profile shipped with sflsim and every number in it, with its unit as written in "
    "the file, its basis (`measured`, `nominal` or `derived`) and its source, generated "
    "from the files under `device_profiles/` when the site is built. What the profiles "
    "are and how the numbers were chosen: [Hardware profiles](profiles.md); to add your "
    "own: [Add a device profile](../how-to/device-profile.md). The same numbers are "
    "printed by `sflsim profiles show NAME`.",
    "",
    "Basis: **measured**, someone ran the hardware and reported this number; **nominal**, "
    "a datasheet or specification value, or an assumption the source says so; "
    "**derived**, computed from other published numbers (the note shows how).",
    "",
]


def _cell(text: object) -> str:
    """Table-cell text on one line: a pipe would end the cell, ``<`` outside code spans is
    HTML and ``*`` would start emphasis."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    parts[::2] = [t.replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
                  for t in parts[::2]]
    return "`".join(parts)


def _sourced(entry: dict) -> str:
    """The source cell of a sourced number: its source, then its note."""
    text = _cell(entry.get("source", ""))
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


def profile_rows(name: str, data: dict) -> list[str]:
    """Markdown rows ``| profile | field | value | basis | source |`` of one profile's file
    (``data`` as read, without ``description``), in the file's order."""
    rows = []
    for field, entry in data.items():
        if field == "description":
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
    """The page: per kind, a table of the profiles with their descriptions and a table of
    every number of every profile."""
    from sflsim.hardware.profiles import KINDS

    lines = list(INTRO)
    for kind in KINDS:
        files = profile_files(kind, folder)
        profiles = {path.stem: read_profile(kind, path) for path in files}
        lines += [f"## {TITLES[kind]}", "",
                  f"{len(profiles)} profiles in `device_profiles/{kind}/`, one file each "
                  f"(`{files[0].name}` is `{files[0].stem}`).", "",
                  "| profile | description |", "|---|---|"]
        lines += [f"| `{name}` | {_cell(data.get('description', ''))} |"
                  for name, data in profiles.items()]
        lines += ["", f"### Numbers of the {kind}", "",
                  "| profile | field | value | basis | source |", "|---|---|---|---|---|"]
        for name, data in profiles.items():
            lines += profile_rows(name, data)
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(profile_library_markdown())
