"""SQL dpsql writes that PostgreSQL refuses is dpsql's fault, told so, and not charged; EXPLAIN
VERBOSE shows the SQL that runs (newcomer22 #29).

The statement here is valid PostgreSQL (``sum(money)`` exists) and dpsql accepts it (the policy
declares the ``money`` column ``numeric``, with bounds): dpsql's clamp compares the column with
numbers (``operator does not exist: money > numeric``), refused by PostgreSQL while parsing it.
Before, the analyst read "the private query failed in the database ... check casts and
divisions" (42000), and with ``auto`` bounds the bound choices (which read the rows) stayed
charged. Now: XX000, "a fault in dpsql, not in your statement", PostgreSQL's words, the
statement's fingerprint and "report it"; with ``auto`` bounds the answer's SQL is parsed with the
default bounds before anything is reserved (nothing charged), with fixed bounds the answer's
reservation is refunded (a Parse failure reads no row: :mod:`dpsql.execute.own_sql`).

``EXPLAIN VERBOSE``'s "Rewritten SQL" was written by another function than the statement's SQL
(without the key types: an enum key hashed by ``hashtextextended`` in the SQL that ran, as its
text in EXPLAIN's): now both read :func:`dpsql.execute.statement_sql.statement_texts`.
Deterministic: no noisy value is asserted on (all fail before).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import DpsqlError, InternalError
from dpsql.execute.private_sql import SALT_MARKER, unsalted
from dpsql.session import SessionContext
from tests.policies import PolicyMaker, private_table

SESSION = SessionContext("analyst", Fraction(1))


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("ownsql")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE dept AS ENUM ('cardiology', 'general', 'oncology')")
        conn.execute("CREATE TABLE t (pid int NOT NULL, m money, department dept, cost numeric)")
        conn.execute(
            "INSERT INTO t SELECT g % 300, (g % 97)::numeric::money,"
            " (enum_range(NULL::dept))[1 + g % 3], g % 50 FROM generate_series(1, 2000) g"
        )
    return dsn


def _engine(make_policy: PolicyMaker, dsn: str, bounds: str) -> tuple[Engine, Ledger]:
    rows: Any = None if bounds == "auto" else 2
    cols = {
        "m": {"type": "numeric", "bounds": [0, 100]},
        "department": {"type": "text", "keys": ["cardiology", "general", "oncology"]},
        "cost": {"type": "numeric", "bounds": [0, 50]},
    }
    if bounds == "fixed":
        cols = {c: {**v, "clamp": "bounds"} if "bounds" in v else v for c, v in cols.items()}
    table = private_table("pid", cols, rows=rows, groups=rows)
    pf = make_policy(f"ownsql_{bounds}", tables={"public.t": table})
    ledger = Ledger.open(dsn, pf.policy, schema=f"dpsql_own{uuid.uuid4().hex[:8]}")
    return Engine(pf.policy, dsn, ledger, pool_size=2), ledger


@pytest.fixture(params=["auto", "fixed"])
def charged(
    make_policy: PolicyMaker, dsn: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Engine, Ledger, str]]:
    engine, ledger = _engine(make_policy, dsn, request.param)
    try:
        yield engine, ledger, request.param
    finally:
        engine.close()
        ledger.close()


def _spent(engine: Engine) -> list[tuple[object, ...]]:
    sql = "SELECT name, epsilon_spent, releases FROM dpsql.budget"
    return engine.execute(engine.prepare(sql, "analyst"), SESSION).rows


def test_dpsql_sql_refused_is_dpsql_fault_and_free(charged: tuple[Engine, Ledger, str]) -> None:
    engine, ledger, bounds = charged
    before = _spent(engine)
    prepared = engine.prepare("SELECT SUM(m) FROM t", "analyst")
    with pytest.raises(InternalError) as e:
        engine.execute(prepared, SESSION)
    err = e.value
    assert err.sqlstate == "XX000"
    assert "a fault in dpsql, not in your statement" in err.message
    assert "operator does not exist: money > numeric" in (err.detail or "")
    assert "SQLSTATE 42883" in (err.detail or "") and "casts and divisions" not in str(err.hint)
    assert f"fingerprint {prepared.fingerprint}" in (err.hint or "")
    assert "report it" in (err.hint or "")
    assert _spent(engine) == before  # nothing charged: not the bound choices, not the answer
    states = {h.state for h in ledger.history("analyst")}
    if bounds == "auto":  # parsed with the default bounds before anything was reserved
        assert states == set() and "Nothing was charged" in (err.detail or "")
    else:  # the answer's reservation, refunded
        assert states == {"refunded"}
    # the session goes on: a valid statement is answered
    assert engine.execute(engine.prepare("SELECT COUNT(*) FROM t", "analyst"), SESSION).rows


def test_explain_verbose_shows_the_sql_that_runs(
    make_policy: PolicyMaker, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An enum key (hashed as its text when groups are ranked, by its type read upstream) and a
    quantile: the SQL sent upstream is, but for the fresh salt, EXPLAIN VERBOSE's."""
    engine, ledger = _engine(make_policy, dsn, "fixed")
    try:
        sql = "SELECT department, MIN(cost) FROM t GROUP BY department"
        got = engine.execute(engine.prepare("EXPLAIN VERBOSE " + sql, "analyst"), SESSION)
        lines = [str(r[0]) for r in got.rows]
        at = lines.index("  Rewritten SQL:")
        shown = "\n".join(line.removeprefix("    ") for line in lines[at + 1 :])
        sent: list[str] = []
        run = engine.backend.run

        def record(query: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(query)
            return run(query, *args, **kwargs)

        monkeypatch.setattr(engine.backend, "run", record)
        assert engine.execute(engine.prepare(sql, "analyst"), SESSION).rows
        ran = [unsalted(q) for q in sent if "_dp_" in q]
        assert ran, sent
        assert shown.replace("'<salt>'", f"'{SALT_MARKER}'") in ran, (shown, ran)
    finally:
        engine.close()
        ledger.close()


def test_explain_verbose_shows_the_sql_each_leaf_of_a_tree_runs(
    make_policy: PolicyMaker, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement of several (UNION ALL, a window over groups, a CTE): each leaf's
    "Rewritten SQL" is, but for the fresh salt, one the statement sends upstream (it was written
    by report(), without the enum key's type: not what ran)."""
    engine, ledger = _engine(make_policy, dsn, "fixed")
    sent: list[str] = []
    run = engine.backend.run

    def record(query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query)
        return run(query, *args, **kwargs)

    try:
        for sql in (
            "SELECT department, COUNT(*) FROM t GROUP BY department UNION ALL "
            "SELECT department, COUNT(*) FROM t WHERE cost > 10 GROUP BY department",
            "SELECT department, SUM(cost), SUM(SUM(cost)) OVER () FROM t GROUP BY department",
            "WITH d AS (SELECT department, MIN(cost) AS lo FROM t GROUP BY department) "
            "SELECT * FROM d WHERE lo IS NOT NULL",
        ):
            got = engine.execute(engine.prepare("EXPLAIN VERBOSE " + sql, "analyst"), SESSION)
            lines = [str(r[0]) for r in got.rows]
            shown = [
                lines[i + 1].strip()
                for i, line in enumerate(lines)
                if line.strip() == "Rewritten SQL:"
            ]
            assert shown, lines
            sent.clear()
            monkeypatch.setattr(engine.backend, "run", record)
            assert engine.execute(engine.prepare(sql, "analyst"), SESSION).rows
            monkeypatch.undo()
            ran = [unsalted(q) for q in sent if "_dp_" in q]
            for text in shown:
                assert text.replace("'<salt>'", f"'{SALT_MARKER}'") in ran, (sql, text, ran)
    finally:
        engine.close()
        ledger.close()


def test_a_type_error_reading_no_row_is_told_as_postgresql_tells_it(
    charged: tuple[Engine, Ledger, str],
) -> None:
    """``upper()`` of an enum column (the policy says text, as ``dpsql init`` writes an enum):
    PostgreSQL's own 42883 and words, read while parsing (the catalog's, not the rows'), nothing
    charged (newcomer22 #19: was 42000 withheld, with a hint about constants)."""
    engine, ledger, _ = charged
    before = _spent(engine)
    sql = "SELECT upper(department) AS d, COUNT(*) FROM t GROUP BY 1"
    with pytest.raises(DpsqlError) as e:
        engine.execute(engine.prepare(sql, "analyst"), SESSION)
    assert e.value.sqlstate == "42883"
    assert e.value.message == "function upper(dept) does not exist"
    assert "nothing was charged" in (e.value.detail or "")
    assert _spent(engine) == before and ledger.history("analyst") == []
    ok = "SELECT upper(department::text) AS d, COUNT(*) FROM t GROUP BY 1"
    assert len(engine.execute(engine.prepare(ok, "analyst"), SESSION).rows) == 3
