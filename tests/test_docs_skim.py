"""Docs a researcher skims: every how-to page opens with its command, the generated field
reference describes every field, and names in the reference tables do not break mid-word.

Needs no MkDocs build; runs in a few seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_docs import docs_module

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HOW_TO = sorted((DOCS / "how-to").glob("*.md"))

#: at most this many lines of prose between a how-to page's H1 and its first code block
MAX_LEAD_LINES = 2
#: a command line in a code block: ``sflsim ...`` or ``python ...``, with an optional ``$ ``
#: prompt and leading ``VAR=value`` assignments
COMMAND = re.compile(r"^(\$ )?(\w+=\S+\s+)*(sflsim|python)\s")


def opening_problem(text: str) -> str | None:
    """Why ``text`` (a how-to page) does not open with its command, or None when it does.

    The rule: the page starts with an H1; between it and the first fenced code block stand at
    most :data:`MAX_LEAD_LINES` non-blank lines of plain prose (no table, list, heading or
    image); that block is a ``bash`` or ``console`` block holding a ``sflsim``/``python``
    command line, or a ``python`` block that imports sflsim."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        return "no H1 on the first line"
    lead: list[str] = []
    for i, line in enumerate(lines[1:], start=1):
        if line.startswith("```"):
            fence = i
            break
        if line.strip():
            lead.append(line)
    else:
        return "no code block"
    if len(lead) > MAX_LEAD_LINES:
        return f"{len(lead)} lines before the first code block (at most {MAX_LEAD_LINES})"
    if any(re.match(r"\s*([|#!]|[-*] |\d+\. )", line) for line in lead):
        return "a table, list, heading or image before the first code block"
    lang = lines[fence][3:].strip()
    body = []
    for line in lines[fence + 1:]:
        if line.startswith("```"):
            break
        body.append(line)
    if lang in ("bash", "console", "sh", "shell"):
        if any(COMMAND.match(line.strip()) for line in body):
            return None
        return f"the first block ({lang}) holds no sflsim or python command"
    if lang == "python" and any(re.match(r"\s*(from|import) sflsim\b", line) for line in body):
        return None
    return f"the first block is {lang or 'untyped'}, not a command"


@pytest.mark.parametrize("page", HOW_TO, ids=lambda p: p.name)
def test_how_to_page_opens_with_its_command(page):
    assert opening_problem(page.read_text()) is None, (page.name, opening_problem(page.read_text()))


def test_there_are_how_to_pages():
    assert len(HOW_TO) >= 10


@pytest.mark.parametrize(("text", "ok"), [
    ("# T\n\n```bash\nsflsim run quickstart\n```\n", True),
    ("# T\n\nOne sentence:\n\n```console\n$ sflsim validate quickstart\nok\n```\n", True),
    ("# T\n\n```bash\nPYTHONPATH=x sflsim run f.yaml\n```\n", True),
    ("# T\n\n```python\nfrom sflsim import run_scenario\n```\n", True),
    ("# T\n\nA\nlong\nparagraph.\n\n```bash\nsflsim run q\n```\n", False),
    ("# T\n\n| a | b |\n\n```bash\nsflsim run q\n```\n", False),
    ("# T\n\n```yaml\ntraining: {rounds: 1}\n```\n", False),
    ("# T\n\n```bash\nmkdir x\n```\n", False),
    ("# T\n\nNo code at all.\n", False),
])
def test_the_opening_rule_can_fail(text, ok):
    assert (opening_problem(text) is None) is ok


# ------------------------------------------------------------ generated field reference


def test_every_field_has_a_description():
    missing = docs_module("gen_reference").missing_descriptions()
    assert missing == [], f"scenario fields without a description: {missing}"


def test_the_seeds_fields_are_described():
    rows = {f.path: f.description for f in docs_module("gen_reference").all_fields()}
    for stream in ("partition", "model", "training"):
        assert rows[f"seeds.{stream}"].strip()


def test_every_described_field_is_in_the_page():
    gen = docs_module("gen_reference")
    page = gen.scenario_fields_markdown()
    for field in gen.all_fields():
        if field.description:
            assert f"| `{field.path}` |" in page


# ------------------------------------------------------------ names do not break mid-word


def test_table_code_breaks_between_words_only():
    css = (DOCS / "assets" / "skim.css").read_text()
    rule = re.search(r"\.md-typeset td code\s*\{([^}]*)\}", css)
    assert rule and "word-break: normal" in rule[1] and "overflow-wrap: normal" in rule[1]
    assert re.search(r"pre > code\s*\{[^}]*white-space: pre-wrap", css)
    assert "assets/skim.css" in (ROOT / "mkdocs.yml").read_text()


def test_long_names_break_only_after_a_dot():
    hooks = docs_module("hooks")
    long = "network.access_points.&lt;name&gt;.link_override.latency_s"
    html = f"<tr>\n<td><code>{long}</code></td>\n<td>float</td>"
    out = hooks.first_cells_break_at_dots(html)
    assert out.count("<wbr>") == long.count(".")
    assert all(part.endswith(".") for part in out.split("<wbr>")[:-1])
    short = "<tr>\n<td><code>server.profile</code></td>"
    assert hooks.first_cells_break_at_dots(short) == short
