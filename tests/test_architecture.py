"""The shape of `daemon/`: no import cycles, no SQL outside the store, and sizes that hold.

Imports are read with `ast`, so a function-level (lazy) import counts like a module-level one:
hiding an import in a function does not break a cycle, it only delays it. Imports under
`if TYPE_CHECKING:` are left out: they never run.

Sizes are hard limits (issue 36): a module of at most `MAX_LINES` lines unless it is one of the
at most three named in `BIG_MODULES` with its reason, a function of at most
`MAX_FUNCTION_LINES`, a class of at most `MAX_METHODS` methods. No excuse line in a docstring
lets a module pass.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "daemon"
MAX_LINES = 600
MAX_FUNCTION_LINES = 100
MAX_METHODS = 30
MOST_BIG_MODULES = 3

# The modules allowed past MAX_LINES (three at most), each kept whole for the reason given.
BIG_MODULES: dict[str, str] = {
    "daemon/sleep/cycle.py": "the nightly sleep's phases and their order, resumable, in one place",
    "daemon/when.py": "the time-phrase grammar, its bounds and its refusals read in one place",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(tree: ast.AST) -> set[str]:
    """Every module name an import in `tree` may load, at any depth, except TYPE_CHECKING's."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            # `from daemon.memory import index` imports the module daemon.memory.index
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        visit(node)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {
        name: {m for m in imported(ast.parse(path.read_text())) if m in mods and m != name}
        for name, path in mods.items()
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the import graph is deep enough to matter)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function() -> None:
    lazy = ast.parse("def f():\n    from daemon.b import x\n")
    typing_only = ast.parse("if TYPE_CHECKING:\n    from daemon.c import y\n")
    assert imported(lazy) == {"daemon.b", "daemon.b.x"}
    assert imported(typing_only) == set()
    graph = {"daemon.a": {"daemon.b"}, "daemon.b": {"daemon.c"}, "daemon.c": {"daemon.a"}}
    assert [c for c in strongly_connected(graph) if len(c) > 1] == [
        ["daemon.a", "daemon.b", "daemon.c"]
    ]


def test_daemon_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 50, "the walk found too few modules to mean anything"
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    described = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c)
        for c in cycles
    ]
    assert not cycles, "import cycles in daemon/:\n" + "\n".join(described)


def test_only_the_command_line_imports_the_command_line() -> None:
    """`daemon.cli` is the top layer: the daemon's systems never reach up into it."""
    upward = {
        name: sorted(m for m in deps if m == "daemon.cli" or m.startswith("daemon.cli."))
        for name, deps in import_graph().items()
        if name != "daemon.cli" and not name.startswith("daemon.cli.")
    }
    assert not {k: v for k, v in upward.items() if v}, upward


def long_functions(tree: ast.AST, limit: int) -> list[tuple[str, int]]:
    """Every function (method, nested function) of `tree` longer than `limit` lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def crowded_classes(tree: ast.AST, limit: int) -> list[tuple[str, int]]:
    """Every class of `tree` defining more than `limit` methods."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
            if methods > limit:
                out.append((node.name, methods))
    return out


SIZES = """
class Wide:
    def a(self): pass
    def b(self): pass
    def c(self): pass

def long(x):
    y = 1
    y += 1
    y += 2
    return y

def short(x):
    return x
"""


def test_the_size_finders_measure_what_they_name() -> None:
    tree = ast.parse(SIZES)
    assert long_functions(tree, 4) == [("long", 5)]
    assert long_functions(tree, 5) == []
    assert crowded_classes(tree, 2) == [("Wide", 3)]
    assert crowded_classes(tree, 3) == []


def test_no_module_is_over_the_limit_but_the_few_named() -> None:
    assert len(BIG_MODULES) <= MOST_BIG_MODULES, (
        f"at most {MOST_BIG_MODULES} modules may pass {MAX_LINES} lines: split one"
    )
    over = []
    for path in modules().values():
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and rel not in BIG_MODULES:
            over.append(f"{rel} ({lines} lines)")
    assert not over, f"modules over {MAX_LINES} lines (split where the code divides): {over}"


def test_every_allowed_big_module_is_still_big() -> None:
    """An allow-list entry whose module shrank or went away is dropped, not kept for later."""
    for rel in BIG_MODULES:
        path = ROOT / rel
        assert path.exists(), f"{rel} is gone: drop it from BIG_MODULES"
        assert len(path.read_text().splitlines()) > MAX_LINES, (
            f"{rel} is small now: drop it from BIG_MODULES"
        )


def test_no_function_is_over_the_limit() -> None:
    found = {
        f"{path.relative_to(ROOT).as_posix()}:{name}": n
        for path in modules().values()
        for name, n in long_functions(ast.parse(path.read_text()), MAX_FUNCTION_LINES)
    }
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split into steps): {found}"


def test_no_class_has_more_methods_than_the_limit() -> None:
    found = {
        f"{path.relative_to(ROOT).as_posix()}:{name}": n
        for path in modules().values()
        for name, n in crowded_classes(ast.parse(path.read_text()), MAX_METHODS)
    }
    assert not found, f"classes with over {MAX_METHODS} methods (split by concern): {found}"


# ----- SQL lives in the store ----------------------------------------------------------------
# Every statement is written in the repository of its system under `daemon/store/` (issue 36);
# `scripts/sql_census.py` counts what is outside.


def sql_census() -> Any:
    spec = importlib.util.spec_from_file_location("sql_census", ROOT / "scripts" / "sql_census.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLE = '''
A = "SELECT id FROM t WHERE x = ?"
B = f"UPDATE {table} SET v = ?"
C = f"SELECT {cols} FROM notices"
D = "INSERT OR IGNORE INTO kv(key) VALUES (?)"
E = """
  WITH recent AS (SELECT 1) SELECT * FROM recent"""
F = "CREATE INDEX i ON t(x)"
def f():
    "Create the home if it is new; drop the cache; select a model."
G = "Update the schedule set by the person"
H = "delete from kv where key = ?"
'''


def test_the_sql_finder_tells_statements_from_prose() -> None:
    found = sql_census().statements(SAMPLE)
    assert [line for line, _ in found] == [2, 3, 4, 5, 6, 8, 12]


def test_no_sql_outside_the_store() -> None:
    """Every SQL statement lives under `daemon/store/`, in the repository of its system;
    feature code calls typed methods."""
    counts = sql_census().census()
    assert not counts, (
        "SQL outside daemon/store/ (write it in the system's repository under daemon/store/ "
        f"and call that): {counts}"
    )
