"""Zero-row shapes and DISTINCT over declared keys, through the wire (psycopg, pandas).

Real engine, ledger and PostgreSQL (demo data). Properties: ``LIMIT 0`` / ``WHERE false`` /
``WHERE 1 = 0`` over a private table return PostgreSQL's row description of the declared columns
(names and types as direct PostgreSQL gives them) and no row, charge nothing, and run upstream as a
plan that reads no row (PostgreSQL's EXPLAIN of it is a one-time-false Result); a column the
policy does not declare is 42703 as if missing; one row more (``LIMIT 1``) is still refused.
``SELECT DISTINCT k`` of columns with declared keys is the declared domain at epsilon 0; of other
columns it stays refused (42501).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg import errors as pe

from dpsql.server.run import ServerThread
from tests.conftest import IN_CI
from tests.helpers import analyst_dsn, served_with_ledger


def _need(module: str) -> ModuleType:
    """A client library of the test extra: under CI its absence fails the test (never a skip)."""
    if importlib.util.find_spec(module) is None:
        if IN_CI:
            pytest.fail(f"{module} is not installed (pip install -e '.[test]')")
        pytest.skip(f"{module} is not installed")
    return importlib.import_module(module)


ZERO_ROWS = (
    "SELECT * FROM purchases LIMIT 0",
    "SELECT * FROM purchases WHERE false",
    "SELECT * FROM public.purchases WHERE 1 = 0",
    "SELECT p.* FROM purchases AS p WHERE NOT true",
)


@pytest.fixture(scope="module")
def served(
    make_db: Callable[[str], str], demo_dsn: str, demo_policy: Any
) -> Iterator[ServerThread]:
    with served_with_ledger(demo_policy, demo_dsn, make_db("shapes_ledger")) as srv:
        yield srv


@pytest.fixture
def conn(served: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as c:
        yield c


def _history(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT id, epsilon, delta FROM dpsql.history ORDER BY id").fetchall()


@pytest.mark.parametrize("sql", ZERO_ROWS)
def test_zero_row_shapes_describe_for_free(
    conn: psycopg.Connection[Any], demo_dsn: str, demo_policy: Any, sql: str
) -> None:
    declared = list(demo_policy.tables["public.purchases"].columns)
    with psycopg.connect(demo_dsn) as direct:
        cur = direct.execute(f"SELECT {', '.join(declared)} FROM purchases LIMIT 0")
        want = [(d.name, d.type_code, d.internal_size) for d in cur.description or []]
    before = _history(conn)
    cur = conn.execute(sql)
    assert [(d.name, d.type_code, d.internal_size) for d in cur.description or []] == want
    assert cur.fetchall() == []
    assert cur.statusmessage == "SELECT 0"
    assert _history(conn) == before  # nothing released, nothing charged
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall())
    assert "One-Time Filter: false" in plan, plan  # the upstream reads no row


def test_zero_rows_with_pandas_dtypes(served: ServerThread) -> None:
    pd = _need("pandas")
    sqlalchemy = _need("sqlalchemy")
    url = f"postgresql+psycopg://analyst:analyst@127.0.0.1:{served.port}/demo"
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as c:
            df = pd.read_sql("SELECT * FROM purchases LIMIT 0", c)
            assert list(df.columns)[:3] == ["id", "user_id", "email"] and len(df) == 0
            df = pd.read_sql("SELECT DISTINCT category FROM purchases ORDER BY category", c)
            assert df["category"].tolist() == [
                "books", "clothing", "electronics", "groceries", "travel",
            ]  # fmt: skip
    finally:
        engine.dispose()


def test_undeclared_column_is_missing(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(pe.UndefinedColumn) as e:
        conn.execute("SELECT secret FROM purchases LIMIT 0")
    assert str(e.value.diag.message_primary) == 'column "secret" does not exist'


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM purchases LIMIT 1",
        "SELECT * FROM purchases WHERE amount > 0 LIMIT 0 + 1",
        "SELECT * FROM purchases WHERE 1 = 1",
        "SELECT email FROM purchases WHERE false OR true",
    ],
)
def test_rows_stay_refused(conn: psycopg.Connection[Any], sql: str) -> None:
    with pytest.raises(pe.InsufficientPrivilege):
        conn.execute(sql)


def test_distinct_of_declared_keys_is_the_domain(
    conn: psycopg.Connection[Any], demo_dsn: str
) -> None:
    with psycopg.connect(demo_dsn) as direct:
        regions = direct.execute("SELECT code FROM regions ORDER BY code").fetchall()
    before = _history(conn)
    assert (
        conn.execute("SELECT DISTINCT region FROM purchases ORDER BY region").fetchall() == regions
    )  # keys_from: public.regions.code
    got = conn.execute(
        "SELECT DISTINCT category AS category FROM public.purchases WHERE amount > 400 "
        "ORDER BY category LIMIT 1000"
    ).fetchall()  # the declared domain, whatever the filter
    assert got == [("books",), ("clothing",), ("electronics",), ("groceries",), ("travel",)]
    new = _history(conn)[len(before) :]
    assert new and all(eps == 0 and delta == 0 for _, eps, delta in new)
    days = conn.execute("SELECT DISTINCT purchased_at FROM purchases").fetchall()
    assert len(days) == 365  # a bounded date's domain is its days (981062e), free
    assert all(eps == 0 and delta == 0 for _, eps, delta in _history(conn)[len(before) :])
    with pytest.raises(pe.InsufficientPrivilege):
        conn.execute("SELECT DISTINCT amount FROM purchases")  # no declared keys


def test_a_bound_limit_is_a_constant(
    conn: psycopg.Connection[Any], demo_dsn: str, demo_policy: Any
) -> None:
    """psycopg binds ``LIMIT %s`` server-side (``LIMIT $1``): bound to 0 it is the zero-row
    shape ``LIMIT 0`` is (declared columns, no row, nothing charged); any other count is
    refused as ``LIMIT 5`` is (42501); an aggregate's bound LIMIT keeps the rows it says."""
    declared = list(demo_policy.tables["public.purchases"].columns)
    with psycopg.connect(demo_dsn) as direct:
        cur = direct.execute(f"SELECT {', '.join(declared)} FROM purchases LIMIT 0")
        want = [(d.name, d.type_code) for d in cur.description or []]
    before = _history(conn)
    for sql, params in (
        ("SELECT * FROM purchases LIMIT %s", [0]),
        ("SELECT * FROM purchases LIMIT %s OFFSET %s", [0, 10]),
        ("SELECT * FROM purchases WHERE false LIMIT %s", [3]),
    ):
        for prepare in (False, True):
            cur = conn.execute(sql, params, prepare=prepare)
            assert [(d.name, d.type_code) for d in cur.description or []] == want, sql
            assert cur.fetchall() == [] and cur.statusmessage == "SELECT 0"
    assert _history(conn) == before  # nothing released, nothing charged
    for n in (1, 5, None):
        with pytest.raises(pe.InsufficientPrivilege):
            conn.execute("SELECT * FROM purchases LIMIT %s", [n])
    rows = conn.execute(
        "SELECT category, COUNT(*) FROM purchases GROUP BY 1 ORDER BY 1 LIMIT %s", [2]
    ).fetchall()
    assert [r[0] for r in rows] == ["books", "clothing"]


def test_sqlalchemy_limit_zero_with_a_bound_parameter(served: ServerThread) -> None:
    """SQLAlchemy's ``select(...).limit(0)`` sends ``LIMIT %(param_1)s::INTEGER``, bound by
    psycopg as ``$1``: the column discovery pandas and BI tools do, answered for free; over an
    aggregate, its bound LIMIT and OFFSET page the noisy rows (was 0A000 'must be a constant')."""
    pd = _need("pandas")
    sqlalchemy = _need("sqlalchemy")
    url = f"postgresql+psycopg://analyst:analyst@127.0.0.1:{served.port}/demo"
    engine = sqlalchemy.create_engine(url)
    purchases = sqlalchemy.table(
        "purchases", sqlalchemy.column("category"), sqlalchemy.column("amount")
    )
    try:
        with engine.connect() as c:
            q = sqlalchemy.select(purchases).limit(0)
            assert "LIMIT %(param_1)s::INTEGER" in str(q.compile(engine))
            df = pd.read_sql(q, c)
            assert list(df.columns) == ["category", "amount"] and len(df) == 0
            got = c.execute(sqlalchemy.text("SELECT * FROM purchases LIMIT :n"), {"n": 0})
            assert list(got.keys())[:3] == ["id", "user_id", "email"] and got.fetchall() == []
            with pytest.raises(sqlalchemy.exc.ProgrammingError):  # 42501: raw rows
                c.execute(sqlalchemy.select(purchases).limit(3)).fetchall()
            c.rollback()
            top = (  # LIMIT %(param_1)s::INTEGER OFFSET %(param_2)s::INTEGER over an aggregate
                sqlalchemy.select(purchases.c.category, sqlalchemy.func.count().label("n"))
                .group_by(purchases.c.category)
                .order_by(purchases.c.category)
                .limit(2)
                .offset(1)
            )
            assert [r[0] for r in c.execute(top)] == ["clothing", "electronics"]
    finally:
        engine.dispose()


AGGREGATES_LIMIT_0 = (
    (
        "SELECT category, COUNT(*) AS n, AVG(amount) AS a FROM purchases GROUP BY category LIMIT 0",
        (),
    ),
    ("SELECT COUNT(*), SUM(amount) FROM purchases LIMIT 0", ()),
    ("SELECT region, COUNT(*) FROM purchases GROUP BY region ORDER BY 2 DESC LIMIT %s", (0,)),
    (  # a tree (Superset's row count of a paginated query)
        "SELECT COUNT(*) AS rowcount FROM (SELECT region, category, COUNT(*) AS count "
        "FROM purchases GROUP BY region, category LIMIT 50000) AS rowcount_qry LIMIT 0",
        (),
    ),
)


@pytest.mark.parametrize(("sql", "params"), AGGREGATES_LIMIT_0)
def test_an_aggregate_with_limit_0_is_free(
    conn: psycopg.Connection[Any], demo_dsn: str, sql: str, params: tuple[Any, ...]
) -> None:
    """An aggregate whose own LIMIT is 0 (written, or a parameter bound to 0: psycopg binds
    server-side) answers no rows whatever the data: the columns of the real query (names and
    types as PostgreSQL gives them), nothing charged."""
    with psycopg.connect(demo_dsn) as direct:
        want = [(d.name, d.type_code) for d in direct.execute(sql, params).description or ()]
    before = _history(conn)
    cur = conn.execute(sql, params)
    assert cur.fetchall() == []
    assert [(d.name, d.type_code) for d in cur.description or ()] == want
    assert _history(conn) == before  # nothing released, nothing charged
    one = conn.execute(sql.replace("LIMIT 0", "LIMIT 1").replace("%s", "1"), ())
    assert len(one.fetchall()) == 1 and len(_history(conn)) > len(before)  # LIMIT 1 is charged


def test_explain_of_an_aggregate_with_limit_0_says_it_costs_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    """EXPLAIN's cost is what running charges: 0 for an aggregate whose own LIMIT is 0 (and the
    full epsilon with LIMIT 1), in every FORMAT."""
    sql = "SELECT category, COUNT(*) FROM purchases GROUP BY category LIMIT 0"
    text = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall())
    assert text.startswith("DP Nothing  (LIMIT 0: no rows whatever the data)"), text
    assert "epsilon=0, delta=0" in text
    (doc,) = conn.execute("EXPLAIN (FORMAT JSON) " + sql).fetchone()[0]  # type: ignore[index]
    assert doc["Plan"]["Privacy Cost Epsilon"] == 0 and doc["Plan"]["Node Type"] == "DP Nothing"
    for fmt in ("XML", "YAML"):
        (out,) = conn.execute(f"EXPLAIN (FORMAT {fmt}) {sql}").fetchone()  # type: ignore[misc]
        assert "DP Nothing" in out
    one = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql.replace("0", "1")).fetchall())
    assert one.startswith("DP Aggregate") and "epsilon=0," not in one, one
