"""The package's imports run one way, down the request's path: a folder imports only the
folders below it (CONTRIBUTING.md's map), and no module imports itself back through others."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gql_presence"

# Top to bottom; a part may import only the parts with a lower number than its own.
LAYERS = {
    "cli": 9,
    "__main__": 10,
    "app": 8,
    "http": 7,
    "graphql": 6,
    "realtime": 5,
    "policy": 4,
    "running": 4,
    "observability": 3,
    "webhooks": 3,
    "settings": 2,
    "lru": 2,
    "tasks": 2,
    "store": 1,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module of the package that `path` imports, at run time or for types alone."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "gql_presence":
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / (submodule.replace(".", "/") + ".py")).exists()
                found.add(submodule if is_module else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "gql_presence"}
    return found


def part(module: str) -> str:
    """The folder (or top-level module) of the package that a module belongs to."""
    return module.split(".")[1]


GRAPH = {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_every_part_of_the_package_has_its_layer() -> None:
    assert {part(m) for m in GRAPH if m != "gql_presence"} <= set(LAYERS)


def test_imports_only_run_down_the_layers() -> None:
    upward = sorted(
        f"{module} imports {imported}"
        for module, imported_modules in GRAPH.items()
        if module != "gql_presence"
        for imported in imported_modules
        if part(imported) != part(module) and LAYERS[part(imported)] >= LAYERS[part(module)]
    )
    assert upward == []


def test_the_store_imports_nothing_of_the_package_above_it() -> None:
    outside = sorted(
        f"{module} imports {imported}"
        for module, imported_modules in GRAPH.items()
        if module.startswith("gql_presence.store")
        for imported in imported_modules
        if not imported.startswith("gql_presence.store")
    )
    assert outside == []


def test_no_module_imports_itself_back_through_others() -> None:
    circles = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
            return
        if module in done:
            return
        for imported in sorted(GRAPH.get(module, ())):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])
    assert circles == []
