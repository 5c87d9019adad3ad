"""An import-linter contract type: no import cycle between any two modules of a package.

The built-in ``acyclic_siblings`` contract compares sibling packages as wholes, so it would
flag a package that holds both a low module and a high one (``periodic.entries`` under
``config``, ``periodic.admin`` above it) though no module imports itself back. This one
looks at modules: every import counts (inside a function or under ``TYPE_CHECKING`` too), and
a broken contract names each cycle with the import lines that close it.

    [[tool.importlinter.contracts]]
    name = "No import cycles"
    type = "acyclic_modules"
    packages = ["cogworker"]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The groups of ``modules`` that import each other in a circle (Tarjan's algorithm,
    iterative: a package's import chains can be deeper than Python's recursion limit)."""
    search = _Tarjan(graph, modules)
    for root in sorted(modules):
        if root not in search.index:
            search.visit(root)
    return sorted(search.groups)


class _Tarjan:
    def __init__(self, graph: grimp.ImportGraph, modules: set[str]) -> None:
        self.graph, self.modules = graph, modules
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.work: list[tuple[str, Iterator[str]]] = []
        self.groups: list[list[str]] = []

    def visit(self, root: str) -> None:
        self._enter(root)
        while self.work:
            module, pending = self.work[-1]
            following = next(pending, None)
            if following is None:
                self._leave(module)
            elif following not in self.index:
                self._enter(following)
            elif following in self.on_stack:
                self.low[module] = min(self.low[module], self.index[following])

    def _enter(self, module: str) -> None:
        self.index[module] = self.low[module] = len(self.index)
        self.stack.append(module)
        self.on_stack.add(module)
        imported = self.graph.find_modules_directly_imported_by(module) & self.modules
        self.work.append((module, iter(sorted(imported))))

    def _leave(self, module: str) -> None:
        self.work.pop()
        if self.work:
            caller = self.work[-1][0]
            self.low[caller] = min(self.low[caller], self.low[module])
        if self.low[module] != self.index[module]:
            return
        group: list[str] = []
        while not group or group[-1] != module:
            group.append(self.stack.pop())
            self.on_stack.discard(group[-1])
        if len(group) > 1:
            self.groups.append(sorted(group))


def cycle_through(graph: grimp.ImportGraph, group: list[str]) -> list[str]:
    """One circle inside ``group``, as the modules in import order, the first one repeated
    at the end (the shortest one back to the group's first module)."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for module in frontier:
            for imported in sorted(graph.find_modules_directly_imported_by(module) & members):
                if imported == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if imported not in came_from:
                    came_from[imported] = module
                    following.append(imported)
        frontier = following
    raise ValueError(f"{start} is in no cycle of {group}")


class AcyclicModulesContract(Contract):
    """Kept when no module of ``packages`` imports itself back through other modules."""

    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        modules = {
            module
            for package in self.packages  # type: ignore[attr-defined]
            for module in graph.find_descendants(package) | {package}
        }
        groups = strongly_connected(graph, modules)
        cycles = []
        for group in groups:
            path = cycle_through(graph, group)
            steps = [
                (importer, imported, _lines(graph, importer, imported))
                for importer, imported in itertools.pairwise(path)
            ]
            cycles.append({"modules": group, "steps": steps})
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            modules = cycle["modules"]
            output.print_error(f"{len(modules)} modules import each other: {', '.join(modules)}")
            output.print_error("One of the circles:")
            for importer, imported, lines in cycle["steps"]:
                output.indent_cursor()
                output.print_error(f"{importer} -> {imported} (l. {lines})", bold=False)
            output.new_line()


def _lines(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    return ", ".join(str(detail["line_number"]) for detail in details) or "?"
