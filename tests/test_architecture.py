"""The import contract of ``proxy/`` (docs/architecture.md), checked on the source without importing it.

Layers, top to bottom; a module imports only from its own layer or the ones below it, and the packages
named together in one layer do not import each other:

    proxy.__main__, then proxy.serve, then proxy.app   the process (a supervisor and its workers, or one
                                            process: proxy.serve), the aiohttp application
    proxy.api.* (one slice per API)         and proxy.api's shared modules: errors, pass-through, health;
                                            proxy.api.admin (container export / import) is a slice too
    proxy.app_keys                          the typed state on the application
    proxy.core                              what the slices share: containers, memories, search
    proxy.store                             every URL, every DSL body, node errors → typed errors
    proxy.config
    proxy.embedding | proxy.filters | proxy.models | proxy.cli   stand alone (the CLI is a client of the
                                            HTTP APIs: it reaches no server code, none of the layers above)
    proxy.documents                         stands alone too, and imports nothing else of proxy
    proxy.errors, proxy.ids, proxy.observability   the exception tree; the UUID check; request ids, logs

Besides: ``proxy.core.goodmem`` serves the GoodMem slice and the inspection console alone, no module
imports itself in a circle (imports under ``if TYPE_CHECKING:`` count for the layers, not for circles:
they never run), and only ``proxy.core.metrics`` imports prometheus-client (the embedding engine, the
caches and the store expose plain counters that it reads).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PROXY = Path(__file__).resolve().parent.parent / "proxy"

# Each layer: packages that are independent of each other.
LAYERS: list[tuple[str, ...]] = [
    ("proxy.__main__",),
    ("proxy.serve",),
    ("proxy.app",),
    (
        "proxy.api.goodmem",
        "proxy.api.opensearch_memory",
        "proxy.api.openai",
        "proxy.api.console",
        "proxy.api.admin",
        "proxy.api",
    ),
    ("proxy.app_keys",),
    ("proxy.core",),
    ("proxy.store",),
    ("proxy.config",),
    ("proxy.embedding", "proxy.filters", "proxy.models", "proxy.cli", "proxy.documents"),
    ("proxy.errors", "proxy.ids", "proxy.observability"),
]
# Shared modules of the api layer that every slice may use (error middleware, pass-through, health).
API_COMMON = "proxy.api"
# A package only these importers (and itself) may use.
# The console runs GoodMem retrieval itself (its search playground), so it may use the GoodMem core too.
PRIVATE_TO = {"proxy.core.goodmem": ("proxy.api.goodmem", "proxy.api.console")}

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


def importers_of(top_level: str) -> set[str]:
    """The proxy modules that import the third-party package ``top_level`` (anywhere in them)."""
    found: set[str] = set()
    for path in sorted(PROXY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            if any(name == top_level or name.startswith(top_level + ".") for name in names):
                found.add(module_name(path))
    return found


def test_only_the_metrics_module_imports_prometheus() -> None:
    assert importers_of("prometheus_client") == {"proxy.core.metrics"}
    # The same walk finds a package that many modules import, so an empty answer above would be a real one.
    assert {"proxy.api.metrics", "proxy.app"} <= importers_of("aiohttp")


def test_documents_stand_alone() -> None:
    """proxy.documents has its own errors and is called by the lead's job code, never the reverse; and only
    its PDF module calls PDFium, whose one lock (proxy.documents.pdf.PDFIUM_LOCK) is what makes it safe."""
    graph = import_graph()
    outside = {
        (source, target)
        for source, edges in graph.items()
        if source.startswith("proxy.documents")
        for target in edges
        if not target.startswith("proxy.documents")
    }
    assert outside == set()
    assert any(source.startswith("proxy.documents.") for source in graph)
    assert importers_of("pypdfium2") == {"proxy.documents.pdf"}


def test_the_checks_can_fail() -> None:
    """The contract's checks on a made-up graph that breaks each rule once."""
    graph = {
        "proxy.store.client": {"proxy.core.containers": False},  # upward
        "proxy.api.openai.routes": {"proxy.api.goodmem.spaces": False, "proxy.api.errors": False},
        "proxy.core.search": {"proxy.core.goodmem.auth": False},  # a GoodMem-only package
        "proxy.filters.a": {"proxy.filters.b": False},
        "proxy.filters.b": {"proxy.filters.a": False, "proxy.filters.c": True},
        "proxy.filters.c": {"proxy.filters.b": False},
        "proxy.cli.search": {"proxy.store.client": False, "proxy.cli.client": False},  # the CLI's data access
    }
    assert layer_violations(graph) == [
        "proxy.api.openai.routes imports proxy.api.goodmem.spaces: "
        "proxy.api.openai and proxy.api.goodmem are independent",
        "proxy.cli.search imports proxy.store.client, a layer above it",
        "proxy.core.search imports proxy.core.goodmem.auth, "
        "which only proxy.api.goodmem, proxy.api.console may use",
        "proxy.store.client imports proxy.core.containers, a layer above it",
    ]
    assert circles(graph) == [["proxy.filters.a", "proxy.filters.b"]]
