"""The core's import graph: acyclic, and every import of the core at module level.

The graph has one node per module under ``tracker_core/`` and an edge for each
``import tracker_core...`` / ``from tracker_core... import ...`` that runs when the module
is imported. Imports under ``if TYPE_CHECKING:`` never run, so they are left out; the
implicit import of a module's parent packages is left out as Python runs those first.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "tracker_core"


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(CORE.rglob("*.py"))}


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The core modules ``node`` imports (``from package import module`` names the module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in MODULES]
    if node.module is None or node.module not in MODULES:
        return []
    return [node.module, *(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES)]


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (module and class bodies, outside TYPE_CHECKING)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or _is_type_checking_block(node):
            continue
        else:
            pending.extend(ast.iter_child_nodes(node))
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        graph[name] = {target for node in _runtime_imports(tree) for target in _imported(node)} - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a list of modules (first == last), or [] if the graph is acyclic."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        path.append(module)
        for target in sorted(graph[module]):
            found = visit(target)
            if found:
                return found
        path.pop()
        done.add(module)
        return []

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return []


def test_the_core_import_graph_has_no_cycle() -> None:
    assert _cycle(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_core_module_imports_the_core_inside_a_function() -> None:
    inside = []
    for name, path in MODULES.items():
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inside.extend(
                    f"{name}:{node.lineno}"
                    for node in ast.walk(function)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_the_core(node)
                )
    assert inside == []


def _imports_the_core(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "tracker_core" for alias in node.names)
    return node.module is not None and node.module.split(".")[0] == "tracker_core"


def test_no_core_module_runs_generated_code() -> None:
    calls = [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("exec", "eval", "compile")
    ]
    assert calls == []
