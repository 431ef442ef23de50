"""The layer order docs/architecture.md describes: no module imports a layer above its own.

Imports are read with `ast` as in `tests/test_architecture.py`, so an import inside a function
counts like one at the top of the module (a lazy import up a layer is still an arrow pointing
the wrong way); imports under `if TYPE_CHECKING:` are left out.
"""

from __future__ import annotations

from tests.test_architecture import import_graph, modules

# Bottom to top; a module may import its own layer and the layers below. The first word of a
# module's name under `daemon.` (its package, or the module itself) places it.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "foundation",
        {
            "daemon",
            "background",
            "bus",
            "clock",
            "config_sources",
            "durable",
            "errors",
            "events",
            "faults",
            "lifecycle",
            "log",
            "paths",
            "records",
            "redact",
            "resources",
            "run_log",
            "scheduler",
            "seams",
            "settings",
            "store",
            "systemd",
            "text",
            "tokens",
            "when",
        },
    ),
    ("models and the wire", {"models", "chat", "testing"}),
    ("hands", {"tools"}),
    ("the agent", {"agent"}),
    ("memory and forks", {"memory", "delegate"}),
    ("journal", {"journal"}),
    ("threads and topics", {"threads", "topics"}),
    ("context and time", {"context", "schedule"}),
    ("sleep and channels", {"sleep", "channels"}),
    ("commands and status", {"commands", "status", "status_offline"}),
    ("console", {"web"}),
    ("composition", {"services", "wiring"}),
    ("process", {"app"}),
    ("command line", {"cli"}),
]


def layer_of(module: str) -> int:
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "daemon"
    for level, (_, members) in enumerate(LAYERS):
        if head in members:
            return level
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS and the docs")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in graph.items()
        for b in targets
        if layer_of(b) > layer_of(a)
    )


def test_every_module_has_a_layer() -> None:
    for name in modules():
        layer_of(name)


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports(import_graph()) == []


def test_an_import_up_a_layer_is_found_also_inside_a_function() -> None:
    import ast

    from tests.test_architecture import imported

    source = "def later():\n    from daemon.memory.query import asked_stems\n"
    graph = {"daemon.models.offline": imported(ast.parse(source)) & {"daemon.memory.query"}}
    assert upward_imports(graph) == [
        "daemon.models.offline (models and the wire) imports daemon.memory.query (memory and forks)"
    ]


def test_the_layers_in_the_docs_are_these() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text()
    for name, members in LAYERS:
        line = next((ln for ln in doc.splitlines() if ln.startswith(f"- {name}: ")), None)
        assert line is not None, f"docs/architecture.md has no '- {name}: ' line"
        listed = {w.strip("`,.") for w in line.split(": ", 1)[1].split()}
        assert listed == {f"{m}" for m in members}, (name, listed ^ members)
