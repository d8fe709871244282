"""The import graph of ``rota``: no module reaches itself through its imports.

Two modules that import each other (directly or round a longer loop, a function-level or
type-checking import included) are one concept in two rooms or two concepts tangled; the
layers contract (import-linter) cannot see a loop inside one layer, so this test does."""

from __future__ import annotations

import grimp


def strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The groups of two or more ``modules`` each reachable from every other (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module) & modules:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return groups


def test_no_module_of_rota_imports_itself_round_a_loop() -> None:
    graph = grimp.build_graph("rota")
    modules = {module for module in graph.modules if module.split(".")[0] == "rota"}
    assert len(modules) > 100, "the graph should hold every module of rota"
    assert strongly_connected(graph, modules) == []


def test_the_loop_finder_finds_a_loop() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c", "d"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert strongly_connected(graph, {"a", "b", "c", "d"}) == [["a", "b", "c"]]
