"""MkDocs hook: adds the generated reference pages (scenario fields, result columns, profile
library) to the site at build time."""

from __future__ import annotations

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
