"""The shape of the package, checked from its source: the import graph has no
cycle (imports under TYPE_CHECKING and inside functions count too), the layers
import only downward, and only fastio.dataset touches a Dataset's privates."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    """Every Python module of the package by dotted name (tuners/ is fastio.tuners)."""
    found: dict[str, Path] = {}
    for base, package in ((ROOT / "fastio", "fastio"), (ROOT / "tuners", "fastio.tuners")):
        for path in base.rglob("*.py"):
            parts = [package, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    found["fastio._native"] = ROOT / "fastio" / "_native.pyi"  # the extension, by its stub
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The fastio modules ``name`` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from a import b` imports module a.b when there is one, else a name of a.
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {target for target in targets if target in MODULES and target != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_imports_it_checks() -> None:
    # The checks below are only as good as the graph: spot-check known edges.
    assert "fastio.reader._reader" in GRAPH["fastio"]
    assert "fastio.fairness._monitor" in GRAPH["fastio.dataset._dataset"]
    assert "fastio.tuners._window" in GRAPH["fastio.tuners._tuner"]  # relative import
    assert "fastio.reader._reader" in GRAPH["fastio.fairness._publish"]  # under TYPE_CHECKING
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    assert _cycles(GRAPH) == []


@pytest.mark.parametrize("layer", ["fastio.fairness", "fastio.tiering"])
def test_observers_import_nothing_from_the_dataset(layer: str) -> None:
    offending = {name: sorted(t for t in targets if t.startswith("fastio.dataset"))
                 for name, targets in GRAPH.items() if name.startswith(layer)}  # fmt: skip
    assert not {name: targets for name, targets in offending.items() if targets}


def test_tuners_import_nothing_else_of_fastio() -> None:
    for name, targets in GRAPH.items():
        if name.startswith("fastio.tuners"):
            assert all(t.startswith("fastio.tuners") for t in targets), (name, targets)


def test_only_the_public_face_errors_and_stubs_sit_at_the_top() -> None:
    top = {path.name for path in (ROOT / "fastio").iterdir() if path.is_file()}
    # __main__: what `python -m fastio` runs (fastio-bench).
    assert {name for name in top if name.endswith(".py")} == {"__init__.py", "_errors.py",
                                                              "__main__.py"}  # fmt: skip


def _dataset_privates() -> set[str]:
    """Private attributes a Dataset (or its Batches) sets on itself."""
    tree = ast.parse(MODULES["fastio.dataset._dataset"].read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in ("Dataset", "Batches"):
            for inner in ast.walk(node):
                if (isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name)
                        and inner.value.id == "self" and inner.attr.startswith("_")
                        and not inner.attr.startswith("__")):  # fmt: skip
                    names.add(inner.attr)
    return names


def test_no_module_outside_the_dataset_touches_its_privates() -> None:
    privates = _dataset_privates()
    assert {"_cursor", "_policy", "_reads"} <= privates
    touched = []
    for name, path in MODULES.items():
        if name.startswith("fastio.dataset"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in privates
                    and not (isinstance(node.value, ast.Name)
                             and node.value.id in ("self", "cls"))):  # fmt: skip
                touched.append(f"{name}:{node.lineno} .{node.attr}")
    assert not touched


def _layout_lines() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- layout: one line per folder -->", 1)[1].split("```")[1]
    return [line for line in block.splitlines()[1:] if line and not line.startswith(" ")]


def test_the_readmes_layout_is_the_folders() -> None:
    listed = [line.split()[0] for line in _layout_lines() if line.split()[0].endswith("/")]
    assert len(listed) == len(set(listed)), "a folder listed twice"
    skipped = {"__pycache__", "results", "build"}
    found = {
        f"{path.relative_to(ROOT).as_posix()}/"
        for path in ROOT.rglob("*")
        if path.is_dir() and not any(part.startswith(".") and part != ".ci"
                                     for part in path.relative_to(ROOT).parts)
        and not skipped & set(path.parts) and not path.name.endswith(".egg-info")
    }  # fmt: skip
    assert set(listed) == found
