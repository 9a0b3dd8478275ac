"""Lists the import circles among dpsql's modules (strongly connected components of the import graph).

Every import counts: top-level, function-local (a circle hidden inside a function is still a
circle) and, unless ``--runtime`` is given, those under ``if TYPE_CHECKING:``. A package's
``__init__`` counts as the module it is. Exit status 1 when there is a circle.

    python tools/import_cycles.py            # every circle, with its modules
    python tools/import_cycles.py --runtime  # ignore imports under TYPE_CHECKING
"""

from __future__ import annotations

import sys

import grimp


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        work = [(root, iter(sorted(edges.get(root, ()))))]
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
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1 or node in edges.get(node, ()):
                    found.append(sorted(members))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def main(argv: list[str]) -> int:
    runtime = "--runtime" in argv
    graph = grimp.build_graph("dpsql", exclude_type_checking_imports=runtime, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    circles = sorted(components(edges), key=lambda c: (-len(c), c))
    for circle in circles:
        print(f"{len(circle)} modules: " + " ".join(circle))
    kind = "runtime imports" if runtime else "all imports"
    print(f"{len(circles)} import circles among {len(edges)} modules ({kind})")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
