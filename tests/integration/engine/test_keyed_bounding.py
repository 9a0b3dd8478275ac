"""Keyed-hash bounding in the engine: a fresh salt per execution, and no bounding when the catalog
proves one row per privacy unit (dpsql.execute.unique_units), read again at every execution.

With noise off, a query over a table whose unit is its PRIMARY KEY returns exactly the plain
aggregate of clamped values; after the key is dropped (and a unit given two rows) the same prepared
statement is bounded again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.private_sql import SALT_MARKER
from dpsql.execute.unique_units import unit_is_unique
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

COLUMNS = {
    "sex": {"type": "integer", "keys": [0, 1]},
    "age": {"type": "integer", "bounds": [0, 100]},
}
TABLES = {
    name: private_table("pid", COLUMNS, rows=2)
    for name in ("public.pk", "public.uq_null", "public.uq_pair", "public.parent", "public.t")
}
TABLES["public.nk"] = private_table("pid", COLUMNS, rows=2)
ROWS = [(i, i % 2, (i * 37) % 130) for i in range(1, 201)]  # ages up to 129: some clamped


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("keyed")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """
            CREATE TABLE pk (pid integer PRIMARY KEY, sex integer, age integer);
            CREATE TABLE uq_null (pid integer UNIQUE, sex integer, age integer);
            CREATE TABLE uq_pair (pid integer NOT NULL, sex integer, age integer,
                                  UNIQUE (pid, sex));
            CREATE TABLE parent (pid integer PRIMARY KEY, sex integer, age integer);
            CREATE TABLE child () INHERITS (parent);
            CREATE TABLE t (pid integer NOT NULL, sex integer, age integer);
            CREATE UNIQUE INDEX t_pid ON t (pid);
            CREATE TABLE nk (pid integer PRIMARY KEY, sex numeric, age integer);
            """
        )
        for table in ("pk", "uq_null", "uq_pair", "parent", "t", "nk"):
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s)", ROWS)
        # a NUMERIC key column the policy declares integer: 1.0 is not the key '1' as text
        conn.execute("UPDATE nk SET sex = 1.0 WHERE pid % 4 = 1")
    return dsn


@pytest.fixture(scope="module")
def kengine(dsn: str, make_policy: PolicyMaker) -> Iterator[Engine]:
    pf = make_policy(
        "keyed",
        base={"version": 1},
        tables=TABLES,
        analysts={"a": {"budget": {"epsilon": 1000, "delta": 0.1}}},
    )
    e = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def _sql(engine: Engine, sql: str) -> str:
    """The private SQL the engine's plan runs (the plan reads the catalog)."""
    p = engine.prepare(sql)
    return engine.private_sql(p, engine.plan(p, SessionContext(analyst="a")).analysis)


@pytest.mark.parametrize(
    ("table", "unique"),
    [("pk", True), ("t", True), ("uq_null", False), ("uq_pair", False), ("parent", False)],
)
def test_the_catalog_proves_one_row_per_unit(kengine: Engine, table: str, unique: bool) -> None:
    """PRIMARY KEY, or UNIQUE NOT NULL on the unit alone, without inheritance children."""
    p = kengine.prepare(f"SELECT COUNT(*) FROM {table}")
    assert p.analysis is not None
    assert unit_is_unique(kengine.backend, p.analysis) is unique
    a = kengine.plan(p, SessionContext(analyst="a")).analysis
    assert a.unique_unit is unique
    assert ("_dp_parts" not in kengine.private_sql(p, a)) is unique
    # an analysis that does not claim the proof is bounded, whatever the catalog says
    assert "_dp_parts" in kengine.private_sql(p, p.analysis)


def test_unique_unit_answers_the_plain_aggregate(kengine: Engine, dsn: str) -> None:
    sql = "SELECT sex, COUNT(*), SUM(age), COUNT(DISTINCT pid) FROM pk GROUP BY sex"
    got = kengine.execute(kengine.prepare(sql), SessionContext(analyst="a")).rows
    with psycopg.connect(dsn) as conn:
        want = conn.execute(
            "SELECT sex, COUNT(*), SUM(LEAST(age, 100)), COUNT(*) FROM pk GROUP BY sex ORDER BY 1"
        ).fetchall()
    assert sorted((int(r[0]), *(int(v) for v in r[1:])) for r in got) == [
        tuple(int(v) for v in r) for r in want
    ]


def test_the_catalog_is_read_at_every_execution(kengine: Engine, dsn: str) -> None:
    """Drop the key and give a unit three rows: the same statement is bounded again (R = 2)."""
    sql = "SELECT COUNT(*) FROM t"
    p = kengine.prepare(sql)
    assert "_dp_parts" not in _sql(kengine, sql)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX t_pid")
        conn.execute("INSERT INTO t VALUES (1, 1, 5), (1, 1, 6)")
        try:
            assert "_dp_parts" in _sql(kengine, sql)
            rows = kengine.execute(p, SessionContext(analyst="a")).rows
            assert int(rows[0][0]) == len(ROWS) + 1  # unit 1 counts as 2 rows, not 3
        finally:
            conn.execute("DELETE FROM t WHERE pid = 1 AND age IN (5, 6)")
            conn.execute("CREATE UNIQUE INDEX t_pid ON t (pid)")


def test_a_fresh_salt_for_every_execution(kengine: Engine) -> None:
    """Each execution runs the memoized SQL with its own salt from the CSPRNG, never the marker."""
    sent: list[str] = []
    run = kengine.backend.run

    def record(query: str, params: Any = None, **kw: Any) -> Any:
        if kw.get("private"):
            sent.append(query)
        return run(query, params, **kw)

    kengine.backend.run = record  # type: ignore[method-assign]
    try:
        p = kengine.prepare("SELECT sex, COUNT(*) FROM uq_pair GROUP BY sex")
        for _ in range(3):
            kengine.execute(p, SessionContext(analyst="a"))
    finally:
        kengine.backend.run = run  # type: ignore[method-assign]
    bounded = [q for q in sent if "_dp_rows" in q]  # (not the key-type probe)
    salts = {q.split("CONCAT_WS('|', '")[1][:16] for q in bounded}
    assert len(bounded) == 3 and len(salts) == 3, bounded
    assert not any(SALT_MARKER in q for q in sent)
    assert all(len(s) == 16 and int(s, 16) >= 0 for s in salts)


def test_integer_keys_are_compared_as_integers(kengine: Engine, dsn: str) -> None:
    """A key column of an integer type with canonical integer keys is filtered as integers (no
    text conversion per row): the same rows, the same answer as the plain aggregate."""
    sql = "SELECT sex, COUNT(*) FROM pk GROUP BY sex"
    text = _sql(kengine, sql)
    assert '"sex" IN (0, 1)' in text and "AS TEXT) IN" not in text, text
    got = kengine.execute(kengine.prepare(sql), SessionContext(analyst="a")).rows
    with psycopg.connect(dsn) as conn:
        want = conn.execute("SELECT sex, COUNT(*) FROM pk GROUP BY sex ORDER BY 1").fetchall()
    assert sorted((int(r[0]), int(r[1])) for r in got) == [(int(k), int(n)) for k, n in want]


def test_other_key_types_are_compared_as_text(kengine: Engine, dsn: str) -> None:
    """A NUMERIC column declared ``integer``: its keys stay compared as text, so 1.0 (text
    '1.0') is in no declared group, exactly as before."""
    sql = "SELECT sex, COUNT(*) FROM nk GROUP BY sex"
    text = _sql(kengine, sql)
    assert "CAST(\"nk\".\"sex\" AS TEXT) IN ('0', '1')" in text, text
    got = kengine.execute(kengine.prepare(sql), SessionContext(analyst="a")).rows
    with psycopg.connect(dsn) as conn:
        want = conn.execute(
            "SELECT sex::text, COUNT(*) FROM nk WHERE sex::text IN ('0', '1') GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert sorted((str(r[0]), int(r[1])) for r in got) == [(k, int(n)) for k, n in want]
    assert dict(want)["1"] < 100  # the 1.0 rows are left out
