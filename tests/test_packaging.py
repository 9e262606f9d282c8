"""What memproxy imports at run time is what its runtime dependencies install (no node needed).

``scripts/run-local`` installs memproxy without its test extras, so a module that only a test tool happens
to bring (Pillow came with llama-index-core) works in the test venv and fails on a user's first start.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

PROXY = Path(__file__).resolve().parents[1] / "proxy"


def _imported_modules() -> set[str]:
    """Top-level names of every module any file of proxy/ imports, at any depth (lazy imports too)."""
    names: set[str] = set()
    for path in PROXY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"proxy"}


def _runtime_closure() -> set[str]:
    """Normalised names of memproxy's runtime dependencies and everything they require, no extras."""
    seen: set[str] = set()
    todo = deque(Requirement(r) for r in metadata.requires("memproxy") or [])
    while todo:
        req = todo.popleft()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement (test, dev, bench) or another platform's
        name = req.name.lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (another platform's); its own imports are not ours
        todo.extend(Requirement(r) for r in requires)
    return seen


def test_every_import_of_proxy_comes_with_the_runtime_dependencies() -> None:
    providers = metadata.packages_distributions()
    runtime = _runtime_closure()
    missing = {}
    for module in sorted(_imported_modules()):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & runtime:
            missing[module] = sorted(dists) or "not installed"
    assert not missing, f"imported by proxy/ but not installed by `pip install memproxy`: {missing}"
