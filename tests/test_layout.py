"""The package's layout: modules of one purpose, no import circle, light rooms stay light.

The import graphs are built from the source with :mod:`ast` (every ``import`` and
``from ... import`` in a module, lazy ones inside functions and type-only ones in
``TYPE_CHECKING`` blocks included: a circle of types is a circle of dependencies, even
where it never runs), so the test needs nothing imported. The heavy-library check counts
only imports that run (a type-only ``torch`` loads nothing).

- module graph: one node per module of ``sflsim/``;
- room graph: one node per subpackage or top-level module (``sflsim.config``,
  ``sflsim.runner``), an edge where a module of one room imports a module of another.
  The package's ``__init__`` facade (``sflsim/__init__.py``) is left out: it re-exports
  the public API and imports nothing back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sflsim"

#: the most lines a module of ``sflsim/`` may have
MODULE_LINES = 500
#: the most lines a function or method may span, decorators and docstring included
FUNCTION_LINES = 80
#: the package's facade, left out of both graphs
FACADE = "sflsim"
#: rooms that must not import a library, because users reach them without it
FORBIDDEN = {
    "sflsim.engine": ("torch", "torchvision"),
    "sflsim.hardware": ("torch", "torchvision"),
    "sflsim.network": ("torch", "torchvision"),
    "sflsim.models": ("simpy",),
    "sflsim.data": ("simpy",),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(name: str, path: Path, type_only: bool = True) -> set[str]:
    """Every module name ``path`` imports (absolute, as written); ``type_only=False``
    leaves out the imports of ``TYPE_CHECKING`` blocks, which never run."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if type_only else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _type_checking(node)
        for child in node.body for n in ast.walk(child)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            # ``from sflsim.config import schema`` imports a module too
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def module_graph() -> nx.DiGraph:
    known = {name: path for name, path in modules().items() if name != FACADE}
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, path in known.items():
        for target in imported(name, path):
            if target in known and target != name:
                graph.add_edge(name, target)
    return graph


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def room_graph() -> nx.DiGraph:
    rooms = nx.DiGraph()
    for source, target in module_graph().edges:
        if room(source) != room(target):
            rooms.add_edge(room(source), room(target))
    return rooms


def describe_cycles(graph: nx.DiGraph) -> list[str]:
    """Each circle as its members and the edges between them."""
    found = []
    for members in nx.strongly_connected_components(graph):
        if len(members) > 1:
            edges = sorted(graph.subgraph(members).edges)
            found.append(", ".join(f"{a} -> {b}" for a, b in edges))
    return found


def test_no_import_circle_among_modules():
    assert describe_cycles(module_graph()) == []


def test_no_import_circle_among_rooms():
    assert describe_cycles(room_graph()) == []


@pytest.mark.parametrize("room_name", sorted(FORBIDDEN))
def test_light_rooms_import_no_heavy_library(room_name):
    libraries = FORBIDDEN[room_name]
    offending = []
    for name, path in modules().items():
        if room(name) != room_name:
            continue
        for target in imported(name, path, type_only=False):
            if target.split(".")[0] in libraries:
                offending.append(f"{name} imports {target}")
    assert offending == []


def test_modules_are_short():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > MODULE_LINES}
    assert long == {}


def test_functions_are_short():
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if (n := node.end_lineno - first + 1) > FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {n} lines")
    assert long == []


#: where a caller may import a name through a module of ``sflsim/``
CALLERS = ("sflsim", "tests", "examples", "benchmarks", "analysis", "docs")


def _through(paths: list[Path]) -> set[tuple[str, str]]:
    """``(module, name)`` of every ``from module import name`` and ``module.name`` (a module
    imported whole, under any alias) in ``paths``, and in the Python blocks of the docs."""
    import re

    found: set[tuple[str, str]] = set()
    for path in paths:
        text = path.read_text()
        if path.suffix == ".md":
            for m in re.finditer(r"from (sflsim[\w.]*) import \(?([\w, \n]+)", text):
                found.update((m[1], n) for n in re.findall(r"\w+", m[2]))
            continue
        tree = ast.parse(text)
        alias: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.update((node.module, a.name) for a in node.names)
                alias.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
            elif isinstance(node, ast.Import):
                alias.update({a.asname: a.name for a in node.names if a.asname})
                alias.update({a.name.split(".")[0]: a.name.split(".")[0]
                              for a in node.names if not a.asname})
        for node in ast.walk(tree):
            chain = []
            while isinstance(node, ast.Attribute):
                chain.append(node.attr)
                node = node.value
            if chain and isinstance(node, ast.Name) and node.id in alias:
                parts = alias[node.id].split(".") + chain[::-1]
                found.update((".".join(parts[:i]), parts[i]) for i in range(1, len(parts)))
    return found


def test_no_module_passes_on_a_name_no_caller_takes_from_it():
    """A module that imports a name of another sflsim module and only lists it (``__all__``)
    or never uses it re-exports it: some caller must import it through that module. The
    package's facade (the public API) and registration imports (``_fedavg``) aside."""
    root = PACKAGE.parent
    callers = [p for d in CALLERS for p in (root / d).rglob("*.py")] + [
        *(root / "docs").rglob("*.md"), root / "README.md"]
    taken = _through(callers)
    unused = []
    for name, path in modules().items():
        if name == FACADE:
            continue
        tree = ast.parse(path.read_text())
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        listed = {e.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "__all__" for t in node.targets)
                  for e in node.value.elts}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sflsim"):
                for a in node.names:
                    mine = a.asname or a.name
                    if ((mine in listed or mine not in used) and not mine.startswith("_")
                            and (name, mine) not in taken):
                        unused.append(f"{name}.{mine}")
    assert unused == []


#: rooms whose modules are named after what they mirror: a command (``cli/run.py`` is
#: ``sflsim run``), a figure kind (``plots/sweep.py``), a topic checked (``checks/energy.py``)
MIRRORS = ("sflsim.cli", "sflsim.plots", "sflsim.checks")


def test_a_file_name_has_one_meaning():
    """Two modules share a file name only where one of them mirrors the other by the
    convention of :data:`MIRRORS`: at most one module of a name lives outside them."""
    by_name: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name != "__init__.py":
            by_name.setdefault(name.rpartition(".")[2], []).append(name)
    clashes = {file: names for file, names in by_name.items()
               if len([n for n in names if room(n) not in MIRRORS]) > 1
               or len([n for n in names if room(n) in MIRRORS]) > len({room(n) for n in names
                                                                       if room(n) in MIRRORS})}
    assert clashes == {}


#: the most bases a class of ``sflsim/algorithms`` may list (ABC and generics aside)
ALGORITHM_BASES = 2
#: the most methods a registered algorithm's class may expose through its MRO
ALGORITHM_METHODS = 40
#: bases that do not count: an abstract base or a typing generic is not a part
NOT_PARTS = {"ABC", "Generic", "Protocol", "nn.Module", "Module", "Exception", "NamedTuple"}


def test_an_algorithm_holds_its_parts_as_fields():
    """An algorithm owns its parts as fields, not as mixins: no class of
    ``sflsim/algorithms`` lists more than :data:`ALGORITHM_BASES` bases, and no registered
    algorithm exposes more than :data:`ALGORITHM_METHODS` methods."""
    import importlib
    import inspect
    import pkgutil

    import sflsim.algorithms as algorithms
    from sflsim.algorithms.base import ALGORITHMS

    too_many_bases = []
    for name, path in modules().items():
        if not name.startswith("sflsim.algorithms"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if len([b for b in bases if b.split("[")[0] not in NOT_PARTS]) > ALGORITHM_BASES:
                    too_many_bases.append(f"{name}.{node.name}({', '.join(bases)})")
    assert too_many_bases == []
    for info in pkgutil.walk_packages(algorithms.__path__, "sflsim.algorithms."):
        importlib.import_module(info.name)
    exposed = {name: len([n for n, v in inspect.getmembers(cls)
                          if callable(v) and not (n.startswith("__") and n.endswith("__"))])
               for name, cls in ALGORITHMS.items()}
    assert {n: k for n, k in exposed.items() if k > ALGORITHM_METHODS} == {}
    assert min(exposed.values()) > 5  # the count sees methods at all


def test_no_behaviour_follows_which_methods_a_class_overrides():
    """How an algorithm runs follows the capabilities it declares, never a comparison of
    one of its methods with its base's (``type(self).hook is Base.hook``) or of its class
    with one (``type(self) is SplitFedV1``: a subclass would silently lose the path)."""
    found = [f"{name}: {ast.unparse(node)}" for name, path in modules().items()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot))
                                                      for op in node.ops)
             and "type(self)" in ast.unparse(node)]
    assert found == []


def test_the_graph_sees_lazy_imports(tmp_path):
    """The checker itself: an import inside a function is an edge, and so is a TYPE_CHECKING
    one, unless only the imports that run are asked for."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import sflsim.hidden\n"
        "def f():\n    from sflsim.config import load\n    import sflsim.engine\n")
    found = imported("sflsim.m", source)
    assert {"sflsim.config", "sflsim.config.load", "sflsim.engine", "sflsim.hidden"} <= found
    assert "sflsim.hidden" not in imported("sflsim.m", source, type_only=False)
