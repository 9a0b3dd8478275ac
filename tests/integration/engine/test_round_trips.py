"""Round trips to PostgreSQL of a fresh private statement (issue 18: no slower than 5e50bd1).

Each ``Backend.run`` is one round trip (one message, one wait). A fresh statement (a text never
seen, so nothing memoized for it applies) under fixed bounds, no ledger, makes: the catalog read,
the zero-row probe, the private query with the catalog's re-read after it (the same message), and
the post-processing. ``bench/trips.py`` counts them at psycopg's libpq binding, ledger included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext


@pytest.fixture
def sent(engine: Engine) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    real = engine.backend.run

    def run(query: str, params: Any = None, **kw: Any) -> Any:
        calls.append((query, kw))
        return real(query, params, **kw)

    engine.backend.run = run  # type: ignore[method-assign]
    yield calls
    del engine.backend.run


def _fresh(engine: Engine, sent: list[tuple[str, dict[str, Any]]], text: str) -> list[str]:
    s = SessionContext(analyst="analyst")
    engine.execute(engine.prepare(text.format(k=1000)), s)  # what the first statement reads
    sent.clear()
    engine.execute(engine.prepare(text.format(k=999)), s)
    return [q for q, _ in sent]


def test_grouped_statement_reads_the_catalog_again_in_the_query_round_trip(
    engine: Engine, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    """The catalog token its key checks were made under is read again right after the private
    query, in the query's own message (``then``), not in a round trip of its own."""
    queries = _fresh(
        engine, sent, "SELECT category, COUNT(*) FROM purchases WHERE amount < {k} GROUP BY category"
    )
    private = [(q, kw) for q, kw in sent if kw.get("private") and "LIMIT 0" not in q]
    assert len(private) == 1, queries
    then = private[0][1].get("then")
    assert then is not None and "pg_catalog.pg_class" in then
    assert not any("pg_class" in q for q in queries[queries.index(private[0][0]) + 1 :]), queries
    assert len(queries) == 4, queries  # catalog, probe, query + re-read, post-processing
