"""Every collected client catalog query through the real Engine (parse, classify, bind, catalog
check, upstream run): it is answered, and hidden objects stay hidden."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.fixtures.catalog.collect import SCHEMA
from tests.fixtures.catalog.fixtures import CatalogQuery, all_catalog_queries
from tests.integration.catalog.test_catalog_upstream import EXTRA, HIDDEN_WORDS
from tests.unit.catalog.test_catalog import POLICY


@pytest.fixture(scope="module")
def engine(make_db: Callable[[str], str]) -> Iterator[Engine]:
    dsn = make_db("catalog_engine")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(EXTRA)
    eng = Engine(POLICY, dsn)
    yield eng
    eng.close()


def _marks(q: CatalogQuery) -> list[pytest.MarkDecorator]:
    # UNPARSABLE queries fail in sqlglot itself; dpsql's parser respells `oid[]` as `_oid`, so the
    # engine answers them (tests/unit/sql/test_analyze.py checks the respelling).
    return []


@pytest.mark.parametrize(
    "query",
    [pytest.param(q, id=q.id, marks=_marks(q)) for q in all_catalog_queries()],
)
def test_engine_answers_catalog_query(engine: Engine, query: CatalogQuery) -> None:
    prepared = engine.prepare(query.text)
    assert prepared.kind == ("public" if query.text.strip().upper() == "SELECT 1" else "catalog")
    result = engine.execute(prepared, SessionContext(analyst="ann"), list(query.params))
    text = repr(result.rows).lower()
    for word in HIDDEN_WORDS:
        assert word not in text, f"{query.id} shows {word!r}"
    if prepared.kind == "catalog":
        described = engine.describe(prepared, SessionContext(analyst="ann"))
        assert [c.name for c in described] == [c.name for c in result.columns]
