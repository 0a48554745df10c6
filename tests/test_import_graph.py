"""The package's module-level imports form no cycle, and the engine does not import backends."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "proctor"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path, modules: set[str]) -> set[str]:
    """proctor modules `path` imports when it is imported (not in functions, not TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.module.startswith("proctor"):
                names = [f"{sub.module}.{a.name}" for a in sub.names]
                found.update(n if n in modules else sub.module for n in names)
            elif isinstance(sub, ast.Import):
                found.update(a.name for a in sub.names if a.name.startswith("proctor"))
    return {m for m in found if m in modules}


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: top_level_imports(path, set(paths)) for name, path in paths.items()}


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return cycles


def test_the_cycle_finder_finds_cycles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    edges = graph()
    assert "proctor.engine.engine" in edges["proctor.pipeline"] or "proctor.engine" in edges["proctor.pipeline"]
    assert find_cycles(edges) == []


def test_the_engine_does_not_import_backends():
    edges = graph()
    engine = {m for m in edges if m.startswith("proctor.engine")}
    assert not {(m, d) for m in engine for d in edges[m] if d.startswith("proctor.backends")}
