"""The import contract of ``proxy/`` (docs/architecture.md), checked on the source without importing it.

Layers, top to bottom; a module imports only from its own layer or the ones below it, and the packages
named together in one layer do not import each other:

    proxy.__main__, then proxy.app          the process, the aiohttp application
    proxy.api.* (one slice per API)         and proxy.api's shared modules: errors, pass-through, health
    proxy.app_keys                          the typed state on the application
    proxy.core                              what the slices share: containers, memories, search
    proxy.store                             every URL, every DSL body, node errors → typed errors
    proxy.config
    proxy.embedding | proxy.filters | proxy.models   stand alone
    proxy.errors, proxy.ids                 the exception tree; the UUID check

Besides: ``proxy.core.goodmem`` serves the GoodMem slice alone, and no module imports itself in a circle
(imports under ``if TYPE_CHECKING:`` count for the layers, not for circles: they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PROXY = Path(__file__).resolve().parent.parent / "proxy"

# Each layer: packages that are independent of each other.
LAYERS: list[tuple[str, ...]] = [
    ("proxy.__main__",),
    ("proxy.app",),
    ("proxy.api.goodmem", "proxy.api.opensearch_memory", "proxy.api.openai", "proxy.api"),
    ("proxy.app_keys",),
    ("proxy.core",),
    ("proxy.store",),
    ("proxy.config",),
    ("proxy.embedding", "proxy.filters", "proxy.models"),
    ("proxy.errors", "proxy.ids"),
]
# Shared modules of the api layer that every slice may use (error middleware, pass-through, health).
API_COMMON = "proxy.api"
# A package only these importers (and itself) may use.
PRIVATE_TO = {"proxy.core.goodmem": ("proxy.api.goodmem",)}

Graph = Mapping[str, Mapping[str, bool]]  # module → imported module → imported only for type checking


def module_name(path: Path) -> str:
    parts = path.relative_to(PROXY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path, modules: set[str]) -> Iterator[tuple[str, bool]]:
    """The proxy modules ``path`` imports, anywhere in it, and whether only for type checking."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = _type_checking_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from proxy.core import memories` imports the module proxy.core.memories.
            names = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
            names = names or [node.module]
        else:
            continue
        for name in names:
            if name == "proxy" or name.startswith("proxy."):
                yield name, node.lineno in typing_only


def import_graph() -> dict[str, dict[str, bool]]:
    paths = sorted(PROXY.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph: dict[str, dict[str, bool]] = {}
    for path in paths:
        edges: dict[str, bool] = {}
        for target, typing_only in imports_of(path, modules):
            edges[target] = edges.get(target, True) and typing_only
        graph[module_name(path)] = edges
    return graph


def _owner(module: str) -> tuple[int, str] | None:
    """(layer index, package) of the most specific package that holds ``module``."""
    best: tuple[int, str] | None = None
    for index, layer in enumerate(LAYERS):
        for package in layer:
            if (module == package or module.startswith(package + ".")) and (
                best is None or len(package) > len(best[1])
            ):
                best = (index, package)
    return best


def layer_violations(graph: Graph) -> list[str]:
    found: list[str] = []
    for source, edges in graph.items():
        mine = _owner(source)
        for target in edges:
            theirs = _owner(target)
            if mine is None or theirs is None or target == "proxy":
                continue
            if theirs[0] < mine[0]:
                found.append(f"{source} imports {target}, a layer above it")
            elif theirs[0] == mine[0] and theirs[1] != mine[1] and theirs[1] != API_COMMON:
                found.append(f"{source} imports {target}: {mine[1]} and {theirs[1]} are independent")
            for private, allowed in PRIVATE_TO.items():
                inside = target == private or target.startswith(private + ".")
                if inside and not any(source == a or source.startswith((a + ".", private)) for a in allowed):
                    found.append(f"{source} imports {target}, which only {', '.join(allowed)} may use")
    return sorted(found)


def circles(graph: Graph) -> list[list[str]]:
    """Strongly connected groups of more than one module over the imports that run (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target, typing_only in graph.get(node, {}).items():
            if typing_only or target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in import_graph() if _owner(m) is None and m != "proxy"] == []


def test_layers_are_respected() -> None:
    assert layer_violations(import_graph()) == []


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_the_checks_can_fail() -> None:
    """The contract's checks on a made-up graph that breaks each rule once."""
    graph = {
        "proxy.store.client": {"proxy.core.containers": False},  # upward
        "proxy.api.openai.routes": {"proxy.api.goodmem.spaces": False, "proxy.api.errors": False},
        "proxy.core.search": {"proxy.core.goodmem.auth": False},  # a GoodMem-only package
        "proxy.filters.a": {"proxy.filters.b": False},
        "proxy.filters.b": {"proxy.filters.a": False, "proxy.filters.c": True},
        "proxy.filters.c": {"proxy.filters.b": False},
    }
    assert layer_violations(graph) == [
        "proxy.api.openai.routes imports proxy.api.goodmem.spaces: "
        "proxy.api.openai and proxy.api.goodmem are independent",
        "proxy.core.search imports proxy.core.goodmem.auth, which only proxy.api.goodmem may use",
        "proxy.store.client imports proxy.core.containers, a layer above it",
    ]
    assert circles(graph) == [["proxy.filters.a", "proxy.filters.b"]]
