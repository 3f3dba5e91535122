"""MkDocs hook: adds the generated reference pages (scenario fields, result columns, profile
library) to the site at build time, and lets the names in a table's first column break only
after a dot (``docs/assets/skim.css`` keeps them from breaking inside a word)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).parent))
import gen_columns  # noqa: E402
import gen_profiles  # noqa: E402
import gen_reference  # noqa: E402


def on_files(files, config):
    files.append(File.generated(config, gen_reference.PAGE,
                                content=gen_reference.scenario_fields_markdown()))
    files.append(File.generated(config, gen_columns.PAGE,
                                content=gen_columns.result_columns_markdown()))
    files.append(File.generated(config, gen_profiles.PAGE,
                                content=gen_profiles.profile_library_markdown()))
    return files


#: the code of a table row's first cell, as Python-Markdown writes it
_FIRST_CELL = re.compile(r"(<tr>\s*<td><code>)([^<]*)(</code>)")


#: a name in a table's first column up to this long stays on one line
_ONE_LINE = 32


def _break_at_dots(name: str) -> str:
    if len(re.sub(r"&\w+;", "x", name)) <= _ONE_LINE:
        return name
    return name.replace(".", ".<wbr>")


def first_cells_break_at_dots(html: str) -> str:
    """``html`` with a ``<wbr>`` after each dot of a long name that opens a table row
    (``network.access_points.<name>.link_override.latency_s``), the only place such a
    name may break; a shorter one keeps to one line."""
    return _FIRST_CELL.sub(lambda m: m[1] + _break_at_dots(m[2]) + m[3], html)


def on_page_content(html, page, config, files):
    return first_cells_break_at_dots(html)
