"""The documented result columns (:mod:`sflsim.metrics.columns`, the generated page
``reference/result-columns.md``) against the files real runs write: every column a file has
is documented, and every documented column is in the file, both ways.

Two small runs: the tiny scenario trained for one round (``hetero_splitee_sequential``,
which writes ``early_exit.csv``; the session's shared ``tiny_run``) and a timing-only
FedSGA run of two rounds (the clients-table columns an algorithm adds).
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from sflsim.algorithms import ALGORITHMS, Algorithm
from sflsim.metrics import columns
from sflsim.metrics.results import read_result_csv, run_table_columns
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LAYERS = sorted({g["end_layer"] for g in TINY["devices"].values()})


@pytest.fixture(scope="module")
def fedsga_timing_run(tmp_path_factory) -> Path:
    """The tiny scenario as a timing-only FedSGA run of 2 rounds (static split)."""
    from sflsim.config import validate_scenario
    from sflsim.runner import run_scenario

    scenario = copy.deepcopy(TINY)
    scenario["algorithm"] = {"name": "fedsga", "split": "static"}
    scenario["training"].update(rounds=2, timing_only=True)
    out = tmp_path_factory.mktemp("fedsga_timing") / "run"
    run_scenario(validate_scenario(scenario), out)
    return out


@pytest.fixture(params=["trained", "fedsga_timing"])
def run_dir(request) -> Path:
    return request.getfixturevalue("tiny_run" if request.param == "trained"
                                   else "fedsga_timing_run")


def gen_columns():
    """``docs/gen_columns.py``, the generator the MkDocs hook (``docs/hooks.py``) runs."""
    if "gen_columns" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gen_columns", DOCS / "gen_columns.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["gen_columns"] = module
    return sys.modules["gen_columns"]


def written_columns(run: Path, table: str) -> list[str]:
    """The columns (keys, for ``summary.json``) of ``table`` as the run wrote it."""
    if table == "summary":
        return list(json.loads((run / "summary.json").read_text()))
    if table in ("clients", "events"):
        return run_table_columns(run, table)
    return list(read_result_csv(run / columns.TABLES[table].file, nrows=0).columns)


def algorithm_of(run: Path) -> str:
    return json.loads((run / "summary.json").read_text())["algorithm"]


def differences(written: list[str], documented: list[str]) -> str:
    missing = [c for c in written if c not in documented]
    extra = [c for c in documented if c not in written]
    return (f"written but not documented in sflsim/metrics/columns.py: {missing}; "
            f"documented but not written: {extra}")


@pytest.mark.parametrize("table", ["rounds", "clients", "events"])
def test_each_table_has_exactly_the_documented_columns_in_order(run_dir, table):
    written = written_columns(run_dir, table)
    documented = columns.expand(columns.TABLES[table], LAYERS, algorithm_of(run_dir))
    assert set(written) == set(documented), differences(written, documented)
    assert written == documented, "the columns are documented in another order"


def test_early_exit_csv_has_exactly_the_documented_columns(tiny_run):
    written = written_columns(tiny_run, "early_exit")
    documented = columns.expand(columns.EARLY_EXIT, LAYERS)
    assert set(written) == set(documented), differences(written, documented)
    assert written == documented, "the columns are documented in another order"


def test_summary_has_the_documented_keys(run_dir):
    written = written_columns(run_dir, "summary")
    always = columns.expand(columns.SUMMARY, optional=False)
    every = columns.expand(columns.SUMMARY)
    assert set(written) <= set(every), differences(written, every)
    assert set(always) <= set(written), differences(written, always)
    by_layer = json.loads((run_dir / "summary.json").read_text())["final_accuracy_by_end_layer"]
    per_layer = [c for c in columns.expand(columns.ROUNDS, LAYERS)
                 if c not in columns.expand(columns.ROUNDS)]
    if by_layer:  # a run with an evaluated round (the timing-only one has none)
        assert sorted(by_layer) == sorted(per_layer)


def test_every_algorithm_that_adds_client_columns_documents_them():
    """An algorithm's own clients-table columns (``Algorithm.client_columns``) are
    documented under its name, and only registered algorithms are."""
    adds = {name for name, cls in ALGORITHMS.items()
            if cls.client_columns is not Algorithm.client_columns}
    assert adds == set(columns.ALGORITHM_CLIENT_COLUMNS)


def test_the_columns_module_is_data_only():
    """No torch, no SimPy, nothing of sflsim: the site's build imports it."""
    tree = ast.parse(Path(columns.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "collections", "typing"}


def test_the_generated_page_lists_every_documented_column():
    page = gen_columns().result_columns_markdown()
    listed = []
    for table in columns.TABLES.values():
        assert f"## `{table.file}`" in page
        listed += [f"| `{name}`" for name in table.columns]
    listed += [f"| `{name}` |" for extra in columns.ALGORITHM_CLIENT_COLUMNS.values()
               for name in extra]
    assert not [row for row in listed if row not in page]
    assert "| `server_accuracy_l<k>` | fraction 0-1 |" in page
    assert "| `energy_j` | J |" in page and "| `payload_bytes` | bytes |" in page


def test_the_hook_adds_the_page_and_the_pages_link_it():
    assert "result_columns_markdown" in (DOCS / "hooks.py").read_text()
    page = gen_columns().PAGE
    assert f"Result columns: {page}" in (ROOT / "mkdocs.yml").read_text()
    assert "(result-columns.md)" in (DOCS / "reference" / "results.md").read_text()
