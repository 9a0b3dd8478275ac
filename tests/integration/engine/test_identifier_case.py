"""Unquoted identifiers fold to lower case, quoted ones keep their case, as in PostgreSQL.

Found by the red team (compatibility): ``SELECT COUNT(*) FROM PURCHASES WHERE QUANTITY > 3`` failed
with 42703 because dpsql compared names as written with the policy's. dpsql.sql.parse now folds
unquoted identifiers right after parsing (fold_identifiers), so every stage sees PostgreSQL's names.
Quoted names keep their case: ``"Purchases"`` is not ``purchases``. dpsql used to fold quoted
table names too, so ``SELECT * FROM "Regions"`` was classified as the public table regions and
ran upstream as written, reading a table ``"Regions"`` the policy never declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.policy import load_policy
from dpsql.session import SessionContext
from tests.helpers import analyst_dsn, served_engine
from tests.policies import PolicyMaker, private_table

# (statement, private?) run through dpsql and directly on PostgreSQL: same labels or same SQLSTATE
STATEMENTS = [
    ("SELECT COUNT(*) FROM PURCHASES WHERE QUANTITY > 3", True),
    ("SELECT CATEGORY, Sum(Amount) FROM purchases GROUP BY CATEGORY", True),
    ("SELECT P.Category, COUNT(*) AS N FROM Purchases P GROUP BY P.CATEGORY", True),
    ('SELECT COUNT(*) AS "N", AVG(Quantity) AS "Avg Q" FROM Public.PURCHASES', True),
    ("SELECT category AS Cat, COUNT(*) FROM purchases GROUP BY Cat", True),
    ('SELECT COUNT(*) FROM purchases WHERE "QUANTITY" > 3', True),
    ('SELECT COUNT(*) FROM "Purchases"', True),
    ('SELECT COUNT(*) FROM "PUBLIC".purchases', True),
    ("SELECT Code, NAME FROM REGIONS ORDER BY CODE", False),
    ('SELECT r.Code AS "Code", r.name AS Label FROM Regions R ORDER BY 1', False),
    ('SELECT "Code" FROM regions', False),
    ('SELECT * FROM "Regions"', False),
    ("WITH X AS (SELECT Code FROM regions) SELECT x.CODE FROM X ORDER BY 1", False),
]


def _outcome(conn: psycopg.Connection, sql: str) -> tuple[str, ...]:
    """Column labels, or ("error", SQLSTATE)."""
    try:
        cur = conn.execute(sql)
    except psycopg.Error as e:
        return ("error", e.sqlstate or "")
    return tuple(d.name for d in cur.description or ())


def test_labels_and_errors_match_postgresql(demo_dsn: str, demo_policy: object) -> None:
    with (
        served_engine(demo_policy, demo_dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as proxy,
        psycopg.connect(demo_dsn, autocommit=True) as direct,
    ):
        for sql, private in STATEMENTS:
            got, want = _outcome(proxy, sql), _outcome(direct, sql)
            assert got == want, sql
            if want[0] != "error" and not private:
                assert proxy.execute(sql).fetchall() == direct.execute(sql).fetchall(), sql


def test_upper_case_private_queries_through_the_engine(engine: Engine) -> None:
    s = SessionContext(analyst="analyst")
    r = engine.execute(engine.prepare("SELECT COUNT(*) AS N FROM PURCHASES WHERE QUANTITY > 3"), s)
    assert [c.name for c in r.columns] == ["n"] and r.epsilon_spent > 0
    r = engine.execute(
        engine.prepare("SELECT REGION, Sum(Amount) FROM Purchases GROUP BY Region"), s
    )
    assert [c.name for c in r.columns] == ["region", "sum"]
    assert sorted(row[0] for row in r.rows) == ["C", "E", "N", "S", "W"]


@pytest.mark.parametrize(
    ("sql", "sqlstate", "name"),
    [
        ('SELECT COUNT(*) FROM purchases WHERE "Quantity" > 3', "42703", "Quantity"),
        ('SELECT COUNT(*) FROM "Purchases"', "42P01", "Purchases"),
        ('SELECT "Code" FROM regions', "42703", "Code"),
    ],
)
def test_quoted_names_keep_their_case(engine: Engine, sql: str, sqlstate: str, name: str) -> None:
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    assert e.value.sqlstate == sqlstate
    assert f'"{name}"' in str(e.value)


SETUP = """
CREATE TABLE t (u integer, x integer);
INSERT INTO t SELECT g, g % 3 FROM generate_series(1, 50) AS g;
CREATE TABLE regions (code text);
INSERT INTO regions VALUES ('N'), ('S');
CREATE TABLE "Regions" (secret text);
INSERT INTO "Regions" VALUES ('secret-1'), ('secret-2');
CREATE TABLE "T" (u integer, x integer, s text);
INSERT INTO "T" VALUES (1, 1, 'secret-3');
"""


@pytest.fixture(scope="module")
def mixed_case_db(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Path, str]]:
    """Declared: private t, public regions. Undeclared: "Regions" and "T" (mixed-case twins)."""
    dsn = make_db("casefold")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP)
    pf = make_policy(
        "casefold",
        tables={"public.t": private_table("u", {"x": {"type": "integer", "bounds": [0, 2]}})},
        public_tables=["public.regions"],
    )
    yield pf.path, dsn


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT * FROM "Regions"',
        'SELECT * FROM public."Regions"',
        'SELECT code FROM regions UNION ALL SELECT secret FROM "Regions"',
        'SELECT COUNT(*) FROM "T"',
        'SELECT s FROM "T"',
    ],
)
@pytest.mark.parametrize("prepare", [False, True])
def test_undeclared_mixed_case_twin_is_a_missing_table(
    mixed_case_db: tuple[Path, str], sql: str, prepare: bool
) -> None:
    """Simple query and the extended protocol (the wire's fast path for public statements)."""
    path, dsn = mixed_case_db
    with (
        served_engine(load_policy(path), dsn) as srv,
        psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn,
    ):
        with pytest.raises(psycopg.Error) as err:
            conn.execute(sql, prepare=prepare).fetchall()
        assert err.value.sqlstate == "42P01"
        assert "secret-" not in str(err.value)  # no row of the twin
        rows = conn.execute("SELECT CODE FROM REGIONS ORDER BY Code", prepare=prepare).fetchall()
        assert rows == [("N",), ("S",)]
