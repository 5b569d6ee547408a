"""No import circle in the package, counting every import a module makes.

The graph is read from the source with ``ast``, not from ``sys.modules``: an import inside a
function counts as much as one at the top (deferring an import hides a circle, it does not
remove it), and so does one under ``if TYPE_CHECKING:``, which is how two modules that
each need the other's types would otherwise hide a circle too. An import of a package
counts as one of its ``__init__``; ``from pkg import mod`` as one of the module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import loop_orchestrator

PACKAGE = Path(loop_orchestrator.__file__).resolve().parent

#: circles that can only be broken inside another branch's modules, each with the reason;
#: the entry goes when that branch lands (the test then fails on the circle if it is back)
ALLOWED: dict[frozenset[str], str] = {}

Graph = dict[str, dict[str, int]]


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file for every module of the package at ``root``."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts)] = path
    return names


def import_graph(root: Path) -> Graph:
    """module -> {module it imports: line of its first such import}, inside the package."""
    names = module_names(root)

    def resolve(name: str) -> str | None:
        if name in names and names[name].name != "__init__.py":
            return name
        return f"{name}.__init__" if f"{name}.__init__" in names else None

    graph: Graph = {}
    for module, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        # the package a relative import starts from
        here = module.split(".")[:-1]
        targets: list[tuple[str | None, int]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets += [(resolve(alias.name), node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    # `from pkg import mod` is an import of mod; `from mod import f` of mod
                    target = resolve(f"{source}.{alias.name}") or resolve(source)
                    targets.append((target, node.lineno))
        edges: dict[str, int] = {}
        for target, line in targets:
            if target is not None and target != module:
                edges[target] = min(line, edges.get(target, line))
        graph[module] = edges
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        # iterative: a deep package must not hit the recursion limit
        nonlocal counter
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
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
                        found.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return sorted(found, key=lambda c: (-len(c), c))


def describe(circle: list[str], graph: Graph) -> str:
    members = set(circle)
    edges = [
        f"    {a} -> {b} (line {line})"
        for a in circle
        for b, line in sorted(graph[a].items())
        if b in members
    ]
    return f"{len(circle)} modules: {', '.join(circle)}\n" + "\n".join(edges)


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 100  # the whole package was read
    found = [c for c in circles(graph) if frozenset(c) not in ALLOWED]
    assert not found, "import circles (move code to where it belongs):\n" + "\n".join(
        describe(c, graph) for c in found
    )


def test_every_allowed_circle_is_still_there() -> None:
    """An allow-list entry for a circle that is gone would let it come back unseen."""
    present = {frozenset(c) for c in circles(import_graph(PACKAGE))}
    assert set(ALLOWED) <= present


# the graph itself, on packages written for the test --------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


@pytest.mark.parametrize(
    "b_imports_a",
    [
        "from pkg import a\n",
        "import pkg.a\n",
        "from pkg.a import thing\n",
        "from . import a\n",
        "from .a import thing\n",
        "def later():\n    from pkg.a import thing\n    return thing\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import thing\n",
    ],
)
def test_a_circle_is_found_however_the_import_is_written(tmp_path: Path, b_imports_a: str) -> None:
    root = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.sub.b import other\nthing = 1\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/b.py": b_imports_a.replace("from . import", "from .. import").replace(
                "from .a", "from ..a"
            )
            + "other = 2\n",
        },
    )
    assert circles(import_graph(root)) == [["pkg.a", "pkg.sub.b"]]


def test_a_package_import_counts_as_its_init_and_a_module_import_does_not(
    tmp_path: Path,
) -> None:
    root = write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.sub import b\n",  # the package imports b
            "pkg/a.py": "",
            "pkg/sub/__init__.py": "from pkg import a\n",
            "pkg/sub/b.py": "from pkg.sub import c\n",  # the module c, not sub/__init__
            "pkg/sub/c.py": "import pkg\n",  # pkg/__init__: a circle with it and b
        },
    )
    graph = import_graph(root)
    assert graph["pkg.sub.b"] == {"pkg.sub.c": 1}
    assert circles(graph) == [["pkg.__init__", "pkg.sub.b", "pkg.sub.c"]]


def test_no_circle_in_a_layered_package(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "import os\n",
            "pkg/mid.py": "from pkg.low import x\nfrom pkg import low\n",
            "pkg/top.py": "def f():\n    from pkg import mid, low\n",
        },
    )
    graph = import_graph(root)
    assert graph["pkg.top"] == {"pkg.mid": 2, "pkg.low": 2}
    assert circles(graph) == []
