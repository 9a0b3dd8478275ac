"""No import circle among dpsql's modules (issue 18), every import counted: at module level,
inside functions and under ``TYPE_CHECKING``, as grimp (import-linter's graph) reads them.

import-linter's ``no-cycles`` contract (``acyclic_siblings``, pyproject.toml) forbids circles
between the siblings of each package, which covers most of this; a circle through a package's
own ``__init__`` (``dpsql.x`` imports ``dpsql.x.y``, which imports ``dpsql.x``) is not between
siblings, so the strongly connected groups of the whole module graph are checked here as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import grimp


def circles(edges: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """The groups of two or more modules that import each other, directly or not (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]  # iterative: deep import chains need no recursion
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, targets = work[-1]
            w = next(targets, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_circles_finds_a_circle_and_only_it() -> None:
    edges = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e2"], "e2": ["e"]}
    assert sorted(circles(edges)) == [["a", "b", "c"], ["e", "e2"]]
    assert circles({"a": ["b"], "b": ["c"], "c": []}) == []


def test_no_import_circle_among_dpsql_modules() -> None:
    graph = grimp.build_graph("dpsql", cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert len(edges) > 200  # the whole package was read
    assert circles(edges) == []
