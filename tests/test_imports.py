"""The import graph of src/fedbandits: no cycles, no hidden ones, and the rooms stay layered (#19).

Every module is parsed with ``ast`` (nothing is imported), so the graph holds every import of a
``fedbandits`` module: at module level, under ``if TYPE_CHECKING:`` and inside functions and
methods. A function-level import is the usual way to hide a cycle, so each one needs a reason in
``LAZY_IMPORTS``; heavy optional extras (flwr, ray) are not fedbandits modules and never appear.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "fedbandits"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def discover() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def _is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def _absolute(node: ast.ImportFrom, importer: str, modules: dict[str, Path]) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer, modules):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(node: ast.Import | ast.ImportFrom, importer: str, modules: dict[str, Path]) -> list[str]:
    """The fedbandits modules one import statement loads (a package counts as its ``__init__``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        parent = _absolute(node, importer, modules)
        # `from fedbandits.x import y` imports the submodule fedbandits.x.y when there is one,
        # else the name y from fedbandits.x
        names = [f"{parent}.{a.name}" if f"{parent}.{a.name}" in modules else parent for a in node.names]
    found = []
    for name in names:
        while name and name not in modules:  # `import fedbandits.x.attr` style leftovers
            name = name.rpartition(".")[0]
        if name.split(".")[0] == PACKAGE and name not in found:
            found.append(name)
    return found


def collect_edges(modules: dict[str, Path]) -> list[Edge]:
    edges: list[Edge] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

        def visit(node: ast.AST, in_function: bool, importer: str = importer) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for target in _targets(child, importer, modules):
                        if target != importer:
                            edges.append(Edge(importer, target, child.lineno, in_function))
                nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                visit(child, nested)

        visit(tree, in_function=False)
    return edges


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def a_cycle(component: list[str], edges: list[Edge]) -> list[Edge]:
    """One closed chain of imports inside a strongly connected component (shortest from its first
    module), to show the reader exactly which lines to look at."""
    members = set(component)
    out: dict[str, list[Edge]] = {}
    for edge in edges:
        if edge.importer in members and edge.imported in members:
            out.setdefault(edge.importer, []).append(edge)
    start = component[0]
    previous: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in sorted(out.get(node, []), key=lambda e: (e.imported, e.line)):
                if edge.imported == start:
                    chain = [edge]
                    while chain[0].importer != start:
                        chain.insert(0, previous[chain[0].importer])
                    return chain
                if edge.imported not in previous:
                    previous[edge.imported] = edge
                    following.append(edge.imported)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


MODULES = discover()
EDGES = collect_edges(MODULES)


def _show(edge: Edge) -> str:
    where = "in a function" if edge.in_function else "module level"
    return f"{edge.importer} -> {edge.imported} (line {edge.line}, {where})"


def test_the_walker_sees_the_package() -> None:
    assert "fedbandits" in MODULES
    assert "fedbandits.sim.runner" in MODULES
    assert any(e.importer == "fedbandits" and e.imported == "fedbandits.config" for e in EDGES)
    # a package import counts as its __init__, `from pkg import submodule` as the submodule
    assert any(e.imported == "fedbandits.sim.seeding" for e in EDGES)


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for edge in EDGES:
        graph[edge.importer].add(edge.imported)
    components = strongly_connected(graph)
    report = []
    for component in components:
        chain = a_cycle(component, EDGES)
        report.append(f"cycle among {', '.join(component)}:\n    " + "\n    ".join(_show(edge) for edge in chain))
    assert not components, "import cycles in src/fedbandits:\n" + "\n".join(report)


# Function-level imports of fedbandits modules that are there on purpose, with the reason. Any
# other one fails: a late import that hides a cycle means a shared piece sits in the wrong room.
DEPLOY_STARTUP = (
    "CLI start-up time: every `fedbandits` command builds the `deploy` parser, and only `fedbandits deploy` "
    "should pay for the deployment's cryptography, TLS and HTTP servers and process control (about 0.3 s)"
)
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("fedbandits.cli.deploy", f"fedbandits.federation.{module}"): DEPLOY_STARTUP
    for module in (
        "certs",
        "deployment",
        "flower_setup",
        "parity",
        "processes",
        "server",
        "shuffler",
        "shuffler_client",
    )
}
LAZY_IMPORTS[("fedbandits.cli.deploy", "fedbandits.crypto.signing")] = DEPLOY_STARTUP
SERVE_EXTRA = (
    "the serve extra (starlette, uvicorn, httpx) may be absent: every `fedbandits` command builds the "
    "`serve` parser, and only `fedbandits serve` imports the modules that need the extra"
)
LAZY_IMPORTS[("fedbandits.cli.serve", "fedbandits.cli.serve_run")] = SERVE_EXTRA
LAZY_IMPORTS[("fedbandits.cli.serve", "fedbandits.serve.demo")] = SERVE_EXTRA


def test_function_level_imports_are_allow_listed() -> None:
    unexplained = sorted(
        {_show(edge) for edge in EDGES if edge.in_function and (edge.importer, edge.imported) not in LAZY_IMPORTS}
    )
    assert not unexplained, (
        "function-level imports of fedbandits modules without a reason in LAZY_IMPORTS "
        "(move the shared piece to a lower module instead):\n" + "\n".join(unexplained)
    )


def test_allow_list_has_no_stale_entries() -> None:
    lazy = {(edge.importer, edge.imported) for edge in EDGES if edge.in_function}
    assert not set(LAZY_IMPORTS) - lazy, sorted(set(LAZY_IMPORTS) - lazy)


# The rooms of the house, lowest first; a module may import its own room and lower ones only.
# The key is the module name with the package prefix removed; the longest matching prefix wins.
ROOMS: dict[str, float] = {
    "_version": 0,  # the version string, read by the package and by checkpoints; imports nothing
    "core": 0,  # ridge state, UCB scores, clipping, validation, random streams: pure math
    "plugins": 0,  # the entry types and the entry-point loader every table is read through (stdlib only)
    "envs": 1,  # bandit instances, built on core only
    "privacy": 1,  # mechanisms, calibration and accounting, built on core only
    "crypto": 1,  # secure aggregation, double masking, signing: below both transports, imports no other room
    "protocols": 2,  # P = (R, S, A): privacy mechanisms wired into a synchronisation
    "algorithms": 3,  # policies, which play an environment and sync through a protocol
    "registry": 4,  # every name usable in a config, with its parameters and factory
    "config": 5,  # the validated configuration, checked against the registry
    # the protocol layer, no transport in it: the one silo object (Agent: choose, reward, release,
    # adopt), the server's round-closing arithmetic (Aggregator) and the set-up from a config
    "online": 5.5,
    "sim": 6,  # the time loop, backends, checkpoints and results of a configured run
    "plots": 7,  # figures of sim results
    "api": 7,  # the Python entry point: config + sim + plots
    "integrations": 7,  # adapters to other libraries (coba): on the online agent; the package never imports them
    "experiments": 7,  # paper figures and claims, run through sim
    "federation": 7,  # transport 1: the Flower app driving the protocol layer, checked against sim
    "serve": 7,  # transport 2: the protocol layer behind HTTP, with an event log
    "audit": 7,  # attacks and privacy audits of configured runs
    "evaluation": 7,  # logged bandit data: its formats, off-policy estimators, replay of configured runs
    "cli": 8,  # the command line, on top of everything: one module per command group
    "": 8,  # the package itself: its __init__ re-exports the public API
}


def room_of(module: str) -> float:
    name = module.removeprefix(PACKAGE).removeprefix(".")
    best = ""
    for prefix in ROOMS:
        if (name == prefix or name.startswith(prefix + ".") or prefix == "") and len(prefix) >= len(best):
            best = prefix
    return ROOMS[best]


def test_every_module_has_a_room() -> None:
    tops = {module.removeprefix(PACKAGE + ".").split(".")[0] for module in MODULES if module != PACKAGE}
    assert not tops - set(ROOMS), f"add these to ROOMS: {sorted(tops - set(ROOMS))}"


def test_layers_only_import_downwards() -> None:
    upward = sorted(
        f"{_show(edge)}: room {room_of(edge.importer)} imports room {room_of(edge.imported)}"
        for edge in EDGES
        if room_of(edge.imported) > room_of(edge.importer)
    )
    assert not upward, "a lower room imports a higher one:\n" + "\n".join(upward)
