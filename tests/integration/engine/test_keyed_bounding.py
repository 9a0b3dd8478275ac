"""Keyed-hash bounding in the engine: a fresh salt per execution, and no bounding when the catalog
proves one row per privacy unit (dpsql.execute.unique_units), read again at every execution.

With noise off, a query over a table whose unit is its PRIMARY KEY returns exactly the plain
aggregate of clamped values; after the key is dropped (and a unit given two rows) the same prepared
statement is bounded again.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.private_sql import SALT_MARKER, bounded_sql, integer_keys, salt_of
from dpsql.execute.unique_units import unit_is_unique
from dpsql.session import SessionContext
from tests.helpers import EXACT, unrounded
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
# keys 2, -1 and NULL are not declared; ages NULL, below 0 and above 100 (clamped)
TABLES["public.k3"] = private_table("pid", COLUMNS, rows=2)  # PRIMARY KEY
TABLES["public.k3n"] = private_table("pid", COLUMNS, rows=2, groups=2)  # units of ~5 rows
K3 = """SELECT {pid}, CASE i % 5 WHEN 0 THEN 0 WHEN 1 THEN 1 WHEN 2 THEN 2 WHEN 3 THEN -1 END,
               CASE WHEN i % 7 = 0 THEN NULL ELSE (i * 37) % 160 - 20 END
        FROM generate_series(1, 300) i"""
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
        conn.execute("CREATE TABLE k3 (pid integer PRIMARY KEY, sex integer, age integer)")
        conn.execute("CREATE TABLE k3n (pid integer NOT NULL, sex integer, age integer)")
        conn.execute("INSERT INTO k3 " + K3.format(pid="i"))
        conn.execute("INSERT INTO k3n " + K3.format(pid="i % 60"))
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
    salts = {salt_of(q) for q in bounded}
    assert len(bounded) == 3 and len(salts) == 3, bounded
    assert not any(SALT_MARKER in q for q in sent)
    assert all(len(s) == 16 and int(s, 16) >= 0 for s in salts)


def test_integer_keys_are_compared_as_integers(kengine: Engine, dsn: str) -> None:
    """A key column of an integer type with canonical integer keys is filtered as integers (no
    text conversion per row): the same rows, the same answer as the plain aggregate. With one
    row per unit the groups are tested, not the rows (bound_contributions.late_keys)."""
    sql = "SELECT sex, COUNT(*) FROM pk GROUP BY sex"
    text = _sql(kengine, sql)
    assert "OFFSET 0) AS _dp_groups WHERE _dp_g0 IN (0, 1)" in text, text
    assert '"sex" IN' not in text and "AS TEXT) IN" not in text, text
    bounded = _sql(kengine, "SELECT sex, COUNT(*) FROM uq_pair GROUP BY sex")
    assert '"sex" IN (0, 1)' in bounded and "_dp_groups" not in bounded, bounded
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


def test_undeclared_keys_are_left_out_of_the_groups(
    kengine: Engine, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One row per unit, keys tested on the groups (after GROUP BY): rows whose key is 2, -1 or
    NULL are in no released group, exactly as when every row is tested: the plain aggregate
    over the rows with a declared key."""
    unrounded(monkeypatch)
    sql = "SELECT sex, COUNT(*), SUM(age), AVG(age) FROM k3 GROUP BY sex"
    assert "_dp_groups WHERE _dp_g0 IN (0, 1)" in _sql(kengine, sql)
    # epsilon 5: each group's rows pass the AVG's clear count (below it an AVG is NULL since
    # session 27: dpsql.execute.avg_unclear)
    s = SessionContext(analyst="a", epsilon=Fraction(5))
    got = kengine.execute(kengine.prepare(sql), s).rows
    with psycopg.connect(dsn) as conn:
        want = conn.execute(
            "SELECT sex, COUNT(*), SUM(v), AVG(v) FROM (SELECT sex,"
            " CASE WHEN age IS NOT NULL THEN LEAST(GREATEST(age, 0), 100) END AS v FROM k3) r"
            " WHERE sex IN (0, 1) GROUP BY sex ORDER BY 1"
        ).fetchall()
    assert [(int(r[0]), int(r[1]), int(r[2])) for r in want] == sorted(
        (int(r[0]), int(r[1]), int(r[2])) for r in got
    )
    mean = {int(r[0]): float(r[3]) for r in got}
    assert all(abs(mean[int(r[0])] - float(r[3])) < 1e-9 for r in want), (got, want)


# NULL where the clamp of age is 0 or 100: ages below 0 and above 100 too, but not their raw age
NULLIF_SQL = "SELECT AVG(NULLIF(age, 0)), VARIANCE(NULLIF(age, 100)) FROM {t}"
SUMS = [
    "SELECT sex, SUM(age), AVG(age), VARIANCE(age), STDDEV(age) FROM {t} GROUP BY sex",
    "SELECT AVG(age), COUNT(age) FROM {t}",
    NULLIF_SQL,
]


@pytest.mark.parametrize("table", ["k3", "k3n"])
@pytest.mark.parametrize("sql", SUMS)
def test_counting_the_column_counts_the_clamped_values(
    kengine: Engine, sql: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sum over a column counts its values with ``COUNT(column)``, not ``COUNT(clamped
    value)`` (row_values.count_column): the same noise-free outputs, on one row per unit
    and on bounded partials, with NULLs and values clamped at both ends; an expression
    (``NULLIF``, NULL for values whose clamp is not) keeps counting its clamped value."""
    # the module (dpsql.sql.rewrite's attribute of that name is its function)
    bound_contributions = sys.modules["dpsql.sql.rewrite.bound_contributions"]
    sql = sql.format(t=table)
    p = kengine.prepare(sql)
    assert isinstance(p, PrivateQuery)
    a = kengine.plan(p, SessionContext(analyst="a")).analysis
    assert a.unique_unit is (table == "k3")
    typed = replace(a, integer_keys=integer_keys(a, kengine.group_types(p, a)))
    text = bounded_sql(p, typed).replace(SALT_MARKER, "0123456789abcdef")
    with monkeypatch.context() as m:
        m.setattr(bound_contributions, "count_column", lambda *args: None)
        before = bounded_sql(p, typed).replace(SALT_MARKER, "0123456789abcdef")

    def counted_clamps(q: str) -> set[str]:
        """The value columns ``q`` counts that are not the bare column."""
        return {v for v in re.findall(r"COUNT\((_dp_v\d+)\)", q) if f'"age" AS {v}' not in q}

    if "NULLIF" in sql:
        assert text == before  # nothing to spare: the expression's clamp is counted
    else:
        assert counted_clamps(before) and not counted_clamps(text), (before, text)
    got = kengine.backend.run(text, private=True).rows
    want = kengine.backend.run(before, private=True).rows
    assert got == want and got, (got, want)


@pytest.mark.parametrize("table", ["k3", "k3n"])
def test_counting_an_expression_unclamped_is_caught(
    kengine: Engine, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broken twin of count_column: counting ``NULLIF(age, 0)`` unclamped counts the ages
    below 0, whose clamp (0) the NULLIF makes NULL: the outputs differ from counting the clamped
    value, so the comparison above can fail."""
    bound_contributions = sys.modules["dpsql.sql.rewrite.bound_contributions"]
    p = kengine.prepare(NULLIF_SQL.format(t=table))
    assert isinstance(p, PrivateQuery)
    a = kengine.plan(p, SessionContext(analyst="a")).analysis
    right = bounded_sql(p, a).replace(SALT_MARKER, "0123456789abcdef")

    def broken(a: Any, m: Any, inner: Any, vcols: Any) -> Any:
        if m.arg is None or m.kind not in ("sum_centered", "sum_sq_centered"):
            return None
        return bound_contributions.value_column(
            bound_contributions.make_total(m.arg, a.column), inner, vcols
        )

    with monkeypatch.context() as m:
        m.setattr(bound_contributions, "count_column", broken)
        wrong = bounded_sql(p, a).replace(SALT_MARKER, "0123456789abcdef")
    got = kengine.backend.run(wrong, private=True).rows
    want = kengine.backend.run(right, private=True).rows
    assert got != want
