"""Imports run one way: no cycle between the project's modules, counting the imports hidden in function
bodies and under ``TYPE_CHECKING`` (a lazy import is still a dependency, and a cycle through one breaks
the day someone hoists it). Read from the source text, nothing is imported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainables", "sweeps", "analysis", "cluster")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _targets(node: ast.AST, here: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """Project modules one import statement names (``from a import b`` names a.b when b is a module)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parent = here.split(".") if is_package else here.split(".")[:-1]
            parent = parent[:len(parent) - node.level + 1]
            base = ".".join(parent + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    found = set()
    for name in names:
        while name and name not in modules:  # `import a.b.c` of a non-module attribute: its module
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for node in ast.walk(tree):  # every import, at any depth
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(node, name, path.name == "__init__.py", modules)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return out


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import(tmp_path, monkeypatch):
    """The check itself can fail: a two-module package whose second module imports the first in a
    function body is a cycle."""
    pkg = tmp_path / "trainables"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from trainables.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from trainables import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_graph()
    assert graph["trainables.c"] == {"trainables.a"}
    assert cycles(graph) == [["trainables.a", "trainables.b"]]


def test_imports_run_one_way():
    graph = import_graph()
    assert len(graph) > 50, "the project's modules were not found"
    found = cycles(graph)
    described = ["; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert not found, "import cycles (lazy imports included):\n" + "\n".join(described)
