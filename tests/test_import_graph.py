"""proctor's imports follow its layers: no cycles, no arrow up the layer table, no stale names.

The graph holds every import of a proctor module wherever it stands (module level, inside
functions, inside classes), except under `if TYPE_CHECKING:`. The layer table is written
once, in docs/architecture.md, and read from there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "proctor"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: Known arrows that break the rules, in files whose owners must change them; each says what
#: must change. An arrow listed here is exempt from every check below; once it is gone from
#: the code, `test_every_pending_arrow_still_exists` asks for its entry to go too.
PENDING_ARROWS: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every proctor module by dotted name (a package by its own name)."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def import_statements(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement anywhere in `tree`, except in the body of `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            children: list[ast.AST] = [node.test, *node.orelse]
        else:
            children = list(ast.iter_child_nodes(node))
        for child in children:
            visit(child)

    visit(tree)
    return found


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a `from ... import` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_names(name: str, path: Path, known: set[str]) -> list[tuple[str, Optional[str], int]]:
    """(imported module, the name taken from it or None for the module itself, line) of each
    proctor import in module `name`."""
    out: list[tuple[str, Optional[str], int]] = []
    for node in import_statements(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "proctor"]
            continue
        source = _absolute(node, name, path.name == "__init__.py")
        if source.split(".")[0] != "proctor":
            continue
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            out.append((sub, None, node.lineno) if sub in known else (source, alias.name, node.lineno))
    return out


def graph() -> dict[str, set[str]]:
    """importer -> the proctor modules it imports (itself left out)."""
    found = modules()
    return {name: {m for m, _, _ in imported_names(name, path, set(found)) if m in found and m != name}
            for name, path in found.items()}


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return cycles


def read_layers(text: str) -> list[tuple[str, list[str]]]:
    """(layer name, its entries) from bottom to top: the table under `## Layers`, whose
    `layer` column names a layer and whose `modules` column lists entries in backticks."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    layer, members = header.index("layer"), header.index("modules")
    table = []
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table.append((cells[layer], re.findall(r"`([\w.]+)`", cells[members])))
    return table


def layer_index(module: str, entries: dict[str, int]) -> Optional[int]:
    """The layer of the most specific entry covering `module`: itself, else its nearest
    package listed. `proctor` itself covers only the package's `__init__`."""
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        if ".".join(parts[:n]) in entries:
            return entries[".".join(parts[:n])]
    return entries.get("proctor") if module == "proctor" else None


def layers() -> tuple[list[str], dict[str, int]]:
    """The layer names, bottom first, and each table entry's layer index."""
    table = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    entries: dict[str, int] = {}
    for i, (_, names) in enumerate(table):
        for entry in names:
            assert entry not in entries, f"{entry} is listed in two layers of {ARCHITECTURE}"
            entries[entry] = i
    return [name for name, _ in table], entries


def defined_names(path: Path) -> Optional[set[str]]:
    """Names a module defines at its top level, in any branch of a module-level `if`, `try`,
    `with` or `for` (None: it has a module `__getattr__`, so any name may be there)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For)):
                targets = [node.target]
            elif isinstance(node, ast.With):
                targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            for handler in getattr(node, "handlers", ()):
                visit(handler.body)
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(node, field, []))

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return None if "__getattr__" in names else names


# ---- self-tests --------------------------------------------------------------------------


def test_the_cycle_finder_finds_cycles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_imports_count_anywhere_but_under_type_checking():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import proctor.a\n"
        "if TYPE_CHECKING:\n    from proctor import b\nelse:\n    from proctor import c\n"
        "def f():\n    from proctor.d import x\n"
        "class K:\n    def m(self):\n        import proctor.e\n"
    )
    found = [ast.unparse(n) for n in import_statements(ast.parse(source))]
    assert found == ["from typing import TYPE_CHECKING", "import proctor.a", "from proctor import c",
                     "from proctor.d import x", "import proctor.e"]


def test_the_layer_table_reads_bottom_up_and_the_most_specific_entry_wins():
    table = read_layers("# x\n\n## Layers\n\n| # | layer | modules |\n|---|---|---|\n"
                        "| 1 | low | `proctor.errors`, `proctor.tasks.config` |\n| 2 | high | `proctor.tasks` |\n\n## Next\n")
    assert table == [("low", ["proctor.errors", "proctor.tasks.config"]), ("high", ["proctor.tasks"])]
    entries = {"proctor.errors": 0, "proctor.tasks.config": 0, "proctor.tasks": 1, "proctor": 1}
    assert [layer_index(m, entries) for m in ("proctor.tasks.config", "proctor.tasks.mmlu", "proctor.tasks",
                                              "proctor", "proctor.cli")] == [0, 1, 1, 1, None]


# ---- the rules ---------------------------------------------------------------------------


def test_every_module_has_one_layer_and_every_entry_names_a_module():
    names, entries = layers()
    found = modules()
    unplaced = sorted(m for m in found if layer_index(m, entries) is None)
    assert not unplaced, f"modules the layer table of {ARCHITECTURE.name} does not place: {unplaced}"
    unknown = sorted(e for e in entries if e not in found)
    assert not unknown, f"layer table entries that name no proctor module or package: {unknown}"
    assert len(names) == len(set(names))


def test_no_import_cycles():
    edges = graph()
    assert "proctor.api" in edges["proctor.cli"]  # the graph sees imports inside functions
    pruned = {m: {d for d in deps if (m, d) not in PENDING_ARROWS} for m, deps in edges.items()}
    cycles = find_cycles(pruned)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_every_import_goes_down_the_layers():
    names, entries = layers()
    up = []
    for importer, deps in sorted(graph().items()):
        low = layer_index(importer, entries)
        for dep in sorted(deps):
            high = layer_index(dep, entries)
            if low is not None and high is not None and high > low and (importer, dep) not in PENDING_ARROWS:
                up.append(f"{importer} -> {dep} (layer {names[low]} imports layer {names[high]} above it)")
    assert not up, "imports up the layer table:\n" + "\n".join(up)


def test_every_imported_name_exists():
    """A name moved to another module leaves no import of it behind (imports inside functions
    fail only when they run)."""
    found = modules()
    defined = {name: defined_names(path) for name, path in found.items()}
    stale = []
    for importer, path in sorted(found.items()):
        for module, name, line in imported_names(importer, path, set(found)):
            names = defined.get(module)
            if name is not None and names is not None and name not in names \
                    and (importer, module) not in PENDING_ARROWS:
                stale.append(f"{path.relative_to(ROOT)}:{line}: {module} has no {name}")
    assert not stale, "imports of names that are not there:\n" + "\n".join(stale)


def test_the_engine_knows_no_task_and_no_backend():
    edges = graph()
    engine = {m for m in edges if m.startswith("proctor.engine")}
    assert not {(m, d) for m in engine for d in edges[m]
                if d.startswith(("proctor.backends", "proctor.tasks"))}


def test_every_pending_arrow_still_exists():
    edges = graph()
    gone = [f"{a} -> {b}" for a, b in PENDING_ARROWS if b not in edges.get(a, ())]
    assert not gone, f"fixed: remove from PENDING_ARROWS: {gone}"
