"""The package reads in one direction: each layer imports only layers below it (the module map
of CONTRIBUTING.md), Hydra only at the doors, and no import circles. Every import counts, also
the ones inside functions (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Layers from the bottom up; a module belongs to the last prefix that matches it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "ground",
        (
            "udcg.errors",
            "udcg.validation",
            "udcg.progress",
            "udcg._threads",
            "udcg._lazy",
        ),
    ),
    ("data", ("udcg.io", "udcg.demo_data")),
    ("kernels", ("udcg.metrics", "udcg.stats")),
    ("trec engine", ("udcg.trec",)),
    ("judge", ("udcg.judge",)),
    ("labels", ("udcg.labels", "udcg.retrieval")),
    ("models", ("udcg.theta",)),
    ("qcare", ("udcg.qcare",)),
    ("integrations", ("udcg.integrations",)),
    ("pipelines", ("udcg.pipeline",)),
    ("doors", ("udcg.cli", "train", "evaluate")),
]
#: Modules outside the layering: the lazy facade (its imports are names for type checkers).
FACADES = {"udcg"}
HYDRA = ("hydra", "omegaconf")


def layer_of(module: str) -> int:
    """Index in LAYERS; ``__main__`` modules are doors."""
    if module == "udcg.__main__" or module.endswith(".__main__"):
        return len(LAYERS) - 1
    found = None
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            found = index
    if found is None:
        raise AssertionError(f"{module} is in no layer of the module map")
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> Iterator[tuple[str, Path]]:
    for path in sorted((REPO / "udcg").rglob("*.py")):
        yield module_name(path), path
    for door in ("train.py", "evaluate.py"):
        yield door.removesuffix(".py"), REPO / door


def imports(path: Path, module: str, known: Iterable[str] = ()) -> Iterator[str]:
    """Every module that ``path`` imports (absolute names; relative ones resolved);
    ``from pkg import sub`` counts as importing ``pkg.sub`` when that is one of ``known``."""
    known = set(known)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in known else base


def graph() -> dict[str, set[str]]:
    known = dict(sources())
    edges: dict[str, set[str]] = {}
    for module, path in known.items():
        targets = {name for name in imports(path, module, known) if name in known}
        edges[module] = targets - {module}
    return edges


def back_edges(edges: dict[str, set[str]]) -> list[str]:
    """``a -> b`` where b sits in a higher layer than a (facades excepted)."""
    found = []
    for source, targets in edges.items():
        if source in FACADES:
            continue
        for target in targets - FACADES:
            if layer_of(target) > layer_of(source):
                low, high = LAYERS[layer_of(source)][0], LAYERS[layer_of(target)][0]
                found.append(f"{source} ({low}) imports {target} ({high})")
    return sorted(found)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_import_points_down_the_module_map() -> None:
    assert back_edges(graph()) == []


def test_no_import_circles() -> None:
    # the facade's imports are for type checkers only: leave them out
    edges = {m: t for m, t in graph().items() if m not in FACADES}
    assert cycles(edges) == []


def test_hydra_only_at_the_doors() -> None:
    doors = len(LAYERS) - 1
    offenders = [
        module
        for module, path in sources()
        if module not in FACADES
        and layer_of(module) != doors
        and any(name.split(".")[0] in HYDRA for name in imports(path, module))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"udcg.metrics.udcg": {"udcg.theta.estimator"}}, "udcg.metrics.udcg (kernels)"),
        ({"udcg.pipeline.datasets": {"udcg.cli.demo"}}, "imports udcg.cli.demo (doors)"),
    ],
)
def test_a_back_edge_is_reported(edges: dict[str, set[str]], expected: str) -> None:
    assert any(expected in line for line in back_edges(edges))


def test_a_circle_is_reported() -> None:
    # made-up modules: a circle of three, and one module that only imports into it
    edges = {"udcg.io.a": {"udcg.io.b"}, "udcg.io.b": {"udcg.io.c"}, "udcg.io.c": {"udcg.io.a"}}
    edges["udcg.io.d"] = {"udcg.io.a"}
    assert cycles(edges) == [["udcg.io.a", "udcg.io.b", "udcg.io.c"]]


def test_every_module_has_a_layer() -> None:
    for module, _ in sources():
        if module not in FACADES:
            layer_of(module)
