"""Round trips to PostgreSQL of a fresh private statement (issue 18: no slower than 5e50bd1).

Each ``Backend.run`` is one round trip (one message, one wait). A fresh statement (a text never
seen, so nothing memoized for it applies) under fixed bounds, no ledger, makes two: the
zero-row probe with the catalog read after it (one message), and the private query with the
catalog's re-read after it (one message); its post-processing only lists the released values,
computed without PostgreSQL (dpsql.execute.projection). 5e50bd1 made 2 (COUNT) and 3 (grouped). ``bench/trips.py`` counts them at psycopg's libpq binding, ledger included.
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
        engine,
        sent,
        "SELECT category, COUNT(*) FROM purchases WHERE amount < {k} GROUP BY category",
    )
    private = [(q, kw) for q, kw in sent if kw.get("private") and "LIMIT 0" not in q]
    assert len(private) == 1, queries
    then = private[0][1].get("then")
    assert then is not None and "pg_catalog.pg_class" in then
    assert not any("pg_class" in q for q in queries[queries.index(private[0][0]) + 1 :]), queries
    assert len(queries) == 2, queries  # probe + catalog, query + re-read


@pytest.mark.parametrize(
    "text",
    [
        "SELECT COUNT(*) FROM purchases WHERE amount < {k}",
        "SELECT category, PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases "
        "WHERE amount < {k} GROUP BY category",
    ],
    ids=["where", "keys-and-values"],
)
def test_first_probe_rides_with_the_catalog_read(
    engine: Engine, sent: list[tuple[str, dict[str, Any]]], text: str
) -> None:
    """The zero-row probe a new text needs (its WHERE's constants; its keys' and quantile
    arguments' types: one probe for all) goes in the plan's catalog read's message, the probe
    first; nothing else is probed."""
    queries = _fresh(engine, sent, text)
    probes = [(q, kw) for q, kw in sent if q.rstrip().endswith("LIMIT 0")]
    assert len(probes) == 1, queries
    q, kw = probes[0]
    assert kw.get("private") and "pg_catalog.pg_class" in (kw.get("then") or "")
    assert "amount" in q and "< 999" in q  # the statement's own WHERE
    assert len(queries) == 2, queries


def test_a_refused_probe_is_refused_where_it_was(
    engine: Engine, sent: list[tuple[str, dict[str, Any]]]
) -> None:
    """A constant PostgreSQL refuses while planning fails the probe's message: the catalog is
    read alone, and the statement is refused as before (PostgreSQL's words, nothing charged)."""
    from dpsql.errors import DpsqlError

    s = SessionContext(analyst="analyst")
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare("SELECT COUNT(*) FROM purchases WHERE amount > 'abc'"), s)
    assert e.value.sqlstate == "22P02" and "abc" in e.value.message
    assert not any(kw.get("private") and "LIMIT 0" not in q for q, kw in sent)
