"""The types of a private statement's group keys and quantile arguments (the engine's zero-row
type probe, memoized) follow the catalog: after ``ALTER TABLE ... ALTER COLUMN ... TYPE`` the
same statement text runs with the new types.

Before, the memo was keyed by the statement text alone: a key column changed from integer to
text still answered as int4, and a quantile argument changed from integer to numeric was still
clamped and bucketed as an integer (wrong cells). Deterministic: no noise is asserted on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute.group_keys import value_types
from dpsql.execute.prepared import PrivateQuery
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

COLUMNS = {
    "g": {"type": "integer", "keys": [0, 1, 2]},
    "x": {"type": "integer", "bounds": [0, 10]},
}
INT4, TEXT = 23, 25


@pytest.fixture
def engine(make_db: Callable[[str], str], make_policy: PolicyMaker) -> Iterator[Engine]:
    dsn = make_db("probe")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE q (uid integer, g integer, x integer)")
        conn.execute("INSERT INTO q SELECT i % 50, i % 3, i % 11 FROM generate_series(1, 600) AS i")
    pf = make_policy(
        "probe",
        base={"version": 1},
        tables={"public.q": private_table("uid", COLUMNS, rows=5, groups=3)},
        analysts={"a": {"budget": {"epsilon": 1000, "delta": 0.1}}},
    )
    e = Engine(pf.policy, dsn, pool_size=2, noise=EXACT)
    try:
        yield e
    finally:
        e.close()


def _alter(engine: Engine, sql: str) -> None:
    with psycopg.connect(engine.backend.dsn, autocommit=True) as conn:
        conn.execute(sql)


def test_group_key_types_follow_alter_column_type(engine: Engine) -> None:
    s = SessionContext(analyst="a", epsilon=1)  # type: ignore[arg-type]
    p = engine.prepare("SELECT g, COUNT(*) AS n FROM q GROUP BY g", "a")
    first = engine.execute(p, s)
    assert first.columns[0].type_oid == INT4 and sorted(r[0] for r in first.rows) == [0, 1, 2]
    _alter(engine, "ALTER TABLE q ALTER COLUMN g TYPE text USING g::text")
    again = engine.execute(p, s)
    assert again.columns[0].type_oid == TEXT, again.columns
    assert sorted(r[0] for r in again.rows) == ["0", "1", "2"]
    assert engine.describe(p, s)[0].type_oid == TEXT


def test_quantile_argument_types_follow_alter_column_type(engine: Engine) -> None:
    s = SessionContext(analyst="a", epsilon=1)  # type: ignore[arg-type]
    p = engine.prepare("SELECT MEDIAN(x) AS m FROM q", "a")
    assert isinstance(p, PrivateQuery)
    engine.execute(p, s)
    assert value_types(engine, p, p.analysis) == {'"q"."x"': "int4"}
    # fractions now: an integer clamp and bucket would be wrong for them
    _alter(engine, "ALTER TABLE q ALTER COLUMN x TYPE numeric USING x + 0.5")
    engine.execute(p, s)
    assert value_types(engine, p, p.analysis) == {'"q"."x"': "numeric"}
    text = engine.private_sql(p, p.analysis)
    assert "NUMERIC_LARGER" in text and 'CASE WHEN "q"."x"' not in text  # NUMERIC clamp


def test_unit_type_probe_shared_by_new_statements_follows_the_catalog(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unit's type probe names the source alone: a new statement over the same table reuses
    its answer (no probe sent), and after ``ALTER COLUMN uid TYPE`` a new statement probes
    again and gets the new type (the catalog token is part of the key)."""
    from dpsql.execute.group_keys import unit_type

    sent: list[str] = []
    real = engine.backend.run
    monkeypatch.setattr(
        engine.backend, "run", lambda text, *a, **k: sent.append(text) or real(text, *a, **k)
    )

    def probes() -> int:
        return sum(1 for t in sent if t.endswith(' AS u FROM public.q AS "q" LIMIT 0'))

    s = SessionContext(analyst="a", epsilon=1)  # type: ignore[arg-type]
    engine.execute(engine.prepare("SELECT COUNT(*) AS n FROM q WHERE x > 1", "a"), s)
    assert probes() == 1
    p = engine.prepare("SELECT g, SUM(x) AS t FROM q WHERE x < 9 GROUP BY g", "a")
    assert isinstance(p, PrivateQuery)
    engine.execute(p, s)
    assert probes() == 1 and unit_type(engine, p, p.analysis) == "int4"
    _alter(engine, "ALTER TABLE q ALTER COLUMN uid TYPE bigint")
    p = engine.prepare("SELECT COUNT(*) AS n FROM q WHERE x > 2", "a")
    assert isinstance(p, PrivateQuery)
    engine.execute(p, s)
    assert probes() == 2 and unit_type(engine, p, p.analysis) == "int8"
