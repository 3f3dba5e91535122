"""MkDocs hook: adds the generated scenario field reference to the site at build time."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).parent))
import gen_reference  # noqa: E402


def on_files(files, config):
    files.append(File.generated(config, gen_reference.PAGE,
                                content=gen_reference.scenario_fields_markdown()))
    return files
