"""The project's import graph, read from the source with ``ast`` (nothing is imported).

Every import counts: module level, function-local and under ``if TYPE_CHECKING:`` alike, because a circle held
apart by a local or type-only import is still a circle a reader must keep in mind. A module depends on the
module it names: ``from pkg import sub`` on ``pkg.sub`` when that is a module, otherwise on ``pkg``; a package's
``__init__`` running first when a submodule is imported is Python's business and not counted (so a package that
re-exports or registers its own submodules is not a circle).

The rules:

- no import circle between modules anywhere under ``agent/``, ``tui/``, ``shared/`` and ``nodeside/`` (the app
  depends on its screens, the screens on widgets, messages and state; never back);
- no circle between the packages of ``tui/`` (``tui.launch``, ``tui.checks``, ``tui.doctor``, ...; a module directly
  under ``tui/`` counts as its own package);
- no class name defined twice (at module level) under ``agent/``, ``tui/``, ``shared/`` and ``nodeside/``: one name
  per concept;
- ``shared/`` is the pure contract and imports nothing from ``tui/``, ``agent/`` or ``nodeside/``;
- the controller (``tui/``) never imports the agent daemon's package (``agent/``): what both sides need is in
  ``shared/``, what runs on nodes outside the daemon in ``nodeside/``;
- ``nodeside/`` runs under a node's plain interpreter: it and every project module it reaches import only the
  standard library, and it reaches nothing of ``tui/`` or ``agent/``;
- the controller (``tui/``) and the agent daemon (``agent/`` except ``agent/workloads/``) never import torch,
  directly or through any project module they import.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tui", "agent", "shared", "nodeside")
HEAVY = ("torch",)

# Known exceptions, each to be removed by the change that fixes it (the tests below fail once one is stale).
# None are left: a new one is a design question to answer, not a line to add here.
KNOWN_MODULE_CYCLES: list[set[str]] = []
KNOWN_PACKAGE_BACK_EDGES: set[tuple[str, str]] = set()
KNOWN_DUPLICATE_CLASSES: set[str] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imported_names(name: str, tree: ast.AST) -> Iterator[tuple[str, int]]:
    """Every absolute module name an import statement in ``tree`` names, with its line (relative ones resolved)."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield (candidate if candidate in MODULES else base), node.lineno


def _graph() -> tuple[dict[str, set[str]], dict[str, list[tuple[str, int]]]]:
    """Project-internal edges, and every import (internal or not) with its line, per module."""
    edges: dict[str, set[str]] = {}
    imports: dict[str, list[tuple[str, int]]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found = list(_imported_names(name, tree))
        imports[name] = found
        edges[name] = {target for target, _ in found if target in MODULES and target != name}
    return edges, imports


EDGES, IMPORTS = _graph()


def _cycles(nodes: set[str]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), restricted to ``nodes``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        # Iterative DFS: (node, iterator over its successors).
        work = [(start, iter(sorted(EDGES[start] & nodes)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(EDGES[succ] & nodes))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def _in(package: str) -> set[str]:
    return {name for name in MODULES if name == package or name.startswith(package + ".")}


def _reachable(start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for succ in EDGES[todo.pop()]:
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


def _chain(start: str, goal: str) -> list[str]:
    """One import path from ``start`` to ``goal`` (breadth first), for the failure message."""
    previous: dict[str, str] = {}
    todo = [start]
    seen = {start}
    while todo:
        node = todo.pop(0)
        if node == goal:
            path = [goal]
            while path[-1] != start:
                path.append(previous[path[-1]])
            return path[::-1]
        for succ in sorted(EDGES[node]):
            if succ not in seen:
                seen.add(succ)
                previous[succ] = node
                todo.append(succ)
    return [start, goal]


def _where(module: str, target: str) -> str:
    lines = [line for name, line in IMPORTS[module] if name == target or name.startswith(target + ".")]
    return f"{MODULES[module].relative_to(ROOT)}:{lines[0] if lines else '?'}"


def test_the_graph_is_read():
    """The parser sees the project: every package, and the edges everyone knows exist."""
    assert {"tui.cli", "agent.main", "shared.config", "tui.app.app"} <= set(MODULES)
    assert "shared.config" in EDGES["tui.cli"] or any(target.startswith("shared") for target in EDGES["tui.cli"])
    assert any(name.startswith("torch") for name, _ in IMPORTS["agent.workloads.sft"])


def test_the_cycle_finder_finds_a_circle_held_apart_by_local_imports():
    """The cycle finder itself, on a tiny graph made here (a -> b at module level, b -> a inside a function)."""
    source = {"pkg.a": "from pkg import b\n", "pkg.b": "def f():\n    from pkg.a import x\n"}
    saved_modules, saved_edges = dict(MODULES), dict(EDGES)
    try:
        for name in source:
            MODULES[name] = ROOT / "pkg" / (name.split(".")[-1] + ".py")
        for name, text in source.items():
            EDGES[name] = {t for t, _ in _imported_names(name, ast.parse(text)) if t in MODULES and t != name}
        assert _cycles({"pkg.a", "pkg.b"}) == [["pkg.a", "pkg.b"]]
    finally:
        MODULES.clear()
        MODULES.update(saved_modules)
        EDGES.clear()
        EDGES.update(saved_edges)


def _describe(cycles: list[list[str]], edges: dict[str, set[str]], where) -> str:
    return "\n".join(
        "  " + " <-> ".join(cycle) + "\n" + "\n".join(
            f"    {where(a, b)} imports {b}" for a in cycle for b in sorted(edges[a] & set(cycle)))
        for cycle in cycles)


def test_no_import_circle_between_modules():
    cycles = _cycles(set(MODULES))
    known = [c for c in cycles if set(c) in KNOWN_MODULE_CYCLES]
    new = [c for c in cycles if set(c) not in KNOWN_MODULE_CYCLES]
    assert not new, f"import circles (module-level, local and TYPE_CHECKING imports all count):\n{_describe(new, EDGES, _where)}"
    stale = [sorted(c) for c in KNOWN_MODULE_CYCLES if sorted(c) not in known]
    assert not stale, f"fixed, so remove from KNOWN_MODULE_CYCLES: {stale}"


def _tui_package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _package_imports() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) under ``tui/`` -> the import lines that make the edge."""
    found: dict[tuple[str, str], list[str]] = {}
    for module in sorted(_in("tui")):
        for target, line in IMPORTS[module]:
            if target in MODULES and target.startswith("tui.") and _tui_package(target) != _tui_package(module):
                edge = (_tui_package(module), _tui_package(target))
                text = f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}"
                if text not in found.setdefault(edge, []):
                    found[edge].append(text)
    return found


def test_no_import_circle_between_the_packages_of_tui():
    lines = _package_imports()
    edges: dict[str, set[str]] = {}
    for (source, target) in lines:
        edges.setdefault(source, set())
        edges.setdefault(target, set())
        if (source, target) not in KNOWN_PACKAGE_BACK_EDGES:
            edges[source].add(target)
    saved = dict(EDGES)
    try:  # the cycle finder walks EDGES: give it the package graph
        EDGES.clear()
        EDGES.update(edges)
        cycles = _cycles(set(edges))
    finally:
        EDGES.clear()
        EDGES.update(saved)
    detail = "\n".join(
        "  " + " <-> ".join(cycle) + "\n" + "\n".join(
            f"    {text}" for a in cycle for b in sorted(edges[a] & set(cycle)) for text in lines[(a, b)])
        for cycle in cycles)
    assert not cycles, f"import circles between the packages of tui/:\n{detail}"
    stale = sorted(edge for edge in KNOWN_PACKAGE_BACK_EDGES if edge not in lines or tuple(reversed(edge)) not in lines)
    assert not stale, f"no longer a circle, so remove from KNOWN_PACKAGE_BACK_EDGES: {stale}"


def test_no_class_name_defined_twice():
    defined: dict[str, list[str]] = {}
    for path in MODULES.values():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    twice = {name: where for name, where in defined.items() if len(where) > 1}
    new = {name: where for name, where in twice.items() if name not in KNOWN_DUPLICATE_CLASSES}
    assert not new, "one name per concept; classes defined more than once:\n" + "\n".join(
        f"  {name}: {', '.join(where)}" for name, where in sorted(new.items()))
    stale = sorted(KNOWN_DUPLICATE_CLASSES - set(twice))
    assert not stale, f"defined once now, so remove from KNOWN_DUPLICATE_CLASSES: {stale}"


def test_shared_imports_nothing_from_tui_or_agent():
    bad = [f"{_where(module, target)} imports {target}"
           for module in sorted(_in("shared")) for target, _ in IMPORTS[module]
           if target.split(".")[0] in ("tui", "agent", "nodeside")]
    assert not bad, "shared/ is the pure contract; move what it needs into shared/:\n" + "\n".join(bad)


def test_the_controller_never_imports_the_agent_daemon():
    bad = [f"{_where(module, target)} imports {target}"
           for module in sorted(_in("tui")) for target, _ in IMPORTS[module] if target.split(".")[0] == "agent"]
    assert not bad, ("tui/ must not import agent/ (the daemon): a wire rule goes to shared/, node-side code to "
                     "nodeside/:\n" + "\n".join(bad))


def test_the_node_side_needs_only_the_standard_library():
    reached = set().union(*(_reachable(module) for module in _in("nodeside")))
    bad = [f"{MODULES[module].relative_to(ROOT)} is reached from nodeside/ (via {' -> '.join(_chain(start, module))})"
           for module in sorted(reached) if module.split(".")[0] in ("tui", "agent")
           for start in [next(s for s in sorted(_in("nodeside")) if module in _reachable(s))]]
    bad += [f"{_where(module, target)} imports {target}, not the standard library"
            for module in sorted(reached) for target, _ in IMPORTS[module]
            if target not in MODULES and target.split(".")[0] not in sys.stdlib_module_names]
    assert not bad, "nodeside/ runs under the node's plain python3 (-I -S): standard library only\n" + "\n".join(bad)


@pytest.mark.parametrize("side", ["tui", "agent daemon"])
def test_controller_and_agent_daemon_never_import_torch(side):
    if side == "tui":
        roots = _in("tui")
    else:
        roots = _in("agent") - _in("agent.workloads")
    bad = []
    for root in sorted(roots):
        for module in sorted(_reachable(root)):
            for target, line in IMPORTS[module]:
                if target.split(".")[0] in HEAVY:
                    chain = " -> ".join(_chain(root, module))
                    bad.append(f"{root}: {chain} imports {target} ({MODULES[module].relative_to(ROOT)}:{line})")
    assert not bad, f"{side} must not import torch (only agent/workloads/ runs under torchrun):\n" + "\n".join(bad)
