"""The engine's memos (dpsql/execute/caches.py) and the boundary they draw around Engine."""

from __future__ import annotations

import ast
from pathlib import Path

from dpsql.execute.caches import EngineCaches, Memo

DPSQL = Path(__file__).resolve().parents[3] / "dpsql"


def test_memo_drops_the_oldest_entry_past_its_limit() -> None:
    m = Memo(2)
    m.remember("a", 1)
    m.remember("b", False)  # a remembered "no" is not a miss
    m.remember("c", 3)
    assert (m.get("a"), m.get("b"), m.get("c"), len(m)) == (None, False, 3, 2)


def test_engine_caches_are_sized_from_the_statement_cache() -> None:
    c = EngineCaches.sized(3)
    for i in range(20):
        c.sql.remember(i, i)
        c.key_types.remember(i, i)
    assert (len(c.sql), len(c.key_types), len(c.keys_from)) == (12, 3, 0)


def test_no_module_but_engine_py_touches_an_engine_underscore_attribute() -> None:
    """The execute modules reach the engine through its public methods and ``Engine.caches``."""
    offenders = []
    for path in DPSQL.rglob("*.py"):
        if path == DPSQL / "engine.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("engine", "eng")
                and node.attr.startswith("_")
            ):
                offenders.append(f"{path.relative_to(DPSQL)}:{node.lineno} engine.{node.attr}")
    assert offenders == []


def test_every_private_engine_attribute_engine_py_reads_exists() -> None:
    """A ``self._name`` that Engine no longer has (a rename meeting a concurrent change) fails
    here, not as an AttributeError (XX000) on the first statement that reaches it."""
    tree = ast.parse((DPSQL / "engine.py").read_text())
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    defined = {n.name for n in engine.body if isinstance(n, ast.FunctionDef)}
    used: set[str] = set()
    for node in ast.walk(engine):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr.startswith("_")
        ):
            (defined if isinstance(node.ctx, ast.Store) else used).add(node.attr)
    assert used - defined == set()
