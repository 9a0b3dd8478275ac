"""Key domains through the expressions BI tools group by (newcomer21 #17, #25): checked against
PostgreSQL itself.

1. The key texts :func:`derived_domain` computes from the policy are exactly the texts PostgreSQL
   prints for the expression over every value the bounds allow (a text missing would drop a
   group silently, one too many would release a phantom), in UTC and in two other zones (the
   session's TimeZone: dpsql's upstream prints in it once the session's zone applies upstream).
2. End to end on a table of one row per person (zero noise: PostgreSQL's own answer): no
   partition selection, every group PostgreSQL returns released with its value, the domain's
   other keys 0. On main before this change each of these statements selected its groups
   from the data (``needs_selection``): the test fails there.
3. A domain over the limit falls back to partition selection and the notice says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlglot
from sqlglot import exp

from dpsql.engine import Engine
from dpsql.policy.tables import Column
from dpsql.session import SessionContext
from dpsql.sql.derived_keys import derived_domain
from tests.helpers import EXACT, unrounded
from tests.policies import PolicyMaker, private_table

COLUMNS: dict[str, dict[str, Any]] = {
    "d": {"type": "date", "bounds": ["2024-11-20", "2026-02-10"]},
    "t": {"type": "timestamptz", "bounds": ["2025-01-01T00:00:00", "2025-03-31T23:00:00"]},
    "n": {"type": "integer", "bounds": [-3, 12]},
    "x": {"type": "numeric", "bounds": [0, 500]},
    "kind": {"type": "text", "keys": ["a", "b", "c"]},
    "tier": {"type": "integer", "keys": [1, 2, 3, 4]},
    "flag": {"type": "boolean"},
}

# (expression over the columns, the column(s) generate_series enumerates)
SHAPES = [
    "CAST(DATE_TRUNC('month', d) AS date)",  # Metabase's month
    "DATE_TRUNC('month', CAST(d AS timestamp))",
    "DATE_TRUNC('week', d)",
    "CAST(EXTRACT(dow FROM d) AS integer) + 1",  # Metabase's day of week
    "EXTRACT(year FROM d)",
    "EXTRACT(quarter FROM d)",
    "EXTRACT(isodow FROM d)",
    "EXTRACT(week FROM d)",
    "date_part('month', d)",
    "to_char(d, 'YYYY-MM')",
    "to_char(d, 'Mon YYYY')",
    "to_char(d, 'Day')",
    "to_char(d, 'FMMonth')",
    "to_char(d, 'YYYY-\"Q\"Q')",
    "CAST(d AS text)",
    "CAST(TRUNC(EXTRACT(YEAR FROM d)) AS INTEGER)",  # Tableau's DATEPART (connector dialect)
    "TRUNC(EXTRACT(MONTH FROM t))",
    "floor(extract(epoch from d)/86400)*86400",  # Grafana's $__timeGroup(d, '1d')
    "floor(extract(epoch from d)/604800)*604800",  # ... '7d' (weeks from 1970-01-01)
    "floor(extract(epoch from d)/3600)*3600",  # ... '1h' (a date: one a day)
    "ceil(extract(epoch from d)/90000)",
    "extract(epoch from d)",  # Grafana's $__timeEpoch(d)
    "DATE_TRUNC('month', t)",
    "DATE_TRUNC('day', t)",
    "CAST(DATE_TRUNC('month', t) AS date)",
    "EXTRACT(hour FROM t)",
    "EXTRACT(month FROM t)",
    "to_char(t, 'YYYY-MM-DD')",
]
NOT_DERIVED = [  # None: a quotient PostgreSQL may round; an integer division (newcomer22 #32)
    "FLOOR(x / 3)",
    "FLOOR(n / 2)",
]
NUMBER_SHAPES = [
    "ROUND(x, -2)",
    "FLOOR(x)",
    "TRUNC(x, -1)",
    "TRUNC(n, 1)",
    "CEIL(n)",
    "n * 2 - 1",
    "ROUND(n, 2)",
    "FLOOR(x / 1)",
    "((floor(((x - 0.0) / 50.0)) * 50.0) + 0.0)",  # Metabase's bins (newcomer22 #32)
    "FLOOR(x / 25) * 25",
    "floor((n - 0.0) / 4.0) * 4.0 + 0.5",
    "width_bucket(x, 0, 500, 10)",  # every bucket the bounds allow (x = 500: 11)
    "width_bucket(x, 100, 200.5, 7)",
    "width_bucket(x, 500, 0, 3)",
    "width_bucket(n, 0, 10, 3)",  # an integer with integer bounds: the float8 overload
    "width_bucket(n, -3.5, 12, 5)",
    "width_bucket(x * 2, 0, 1000, 4)",
]
OTHER_SHAPES = [  # over the declared keys (no enumeration: the keys themselves)
    "CAST(kind AS varchar)",
    "CAST(kind AS varchar(1))",
    "UPPER(kind)",
    "COALESCE(kind, 'none')",
    "CAST(tier AS text)",
    "tier + 10",
    "CASE WHEN kind IN ('a', 'b') THEN kind ELSE 'other' END",
    "CASE WHEN tier > 2 THEN 'high' WHEN tier = 1 THEN kind END",
    "n > 3",
    "flag AND n > 3",
]
ZONES = ["UTC", "America/New_York", "Asia/Kolkata"]


def _key_column(name: str) -> Column | None:
    return Column.model_validate(COLUMNS[name]) if name in COLUMNS else None


def _domain(sql: str, zone: str) -> tuple[set[str | None], bool] | None:
    expr = sqlglot.parse_one(sql, read="postgres")
    got = derived_domain(expr, lambda c: _key_column(c.name), None, zone)
    return None if got is None else ({*got.keys, *([None] if got.null else [])}, got.null)


def _pg_texts(dsn: str, sql: str, zone: str) -> set[str | None]:
    """PostgreSQL's distinct texts of ``sql`` over every value the bounds and keys allow
    (dates by day, timestamps by hour, the integers, numbers at the bounds and in between)."""
    expr = sqlglot.parse_one(sql, read="postgres")
    cols = {c.name for c in expr.find_all(exp.Column)}
    if "t" in cols:
        source = (
            "SELECT ts AS t FROM generate_series(TIMESTAMPTZ '2025-01-01 00:00:00+00', "
            "TIMESTAMPTZ '2025-03-31 23:00:00+00', INTERVAL '30 minutes') AS ts"
        )
    elif "d" in cols:
        source = (
            "SELECT day::date AS d FROM generate_series(DATE '2024-11-20', DATE '2026-02-10', "
            "INTERVAL '1 day') AS day"
        )
    elif "x" in cols:
        source = "SELECT i / 100.0 AS x FROM generate_series(0, 50000) AS i"
    else:
        source = (
            "SELECT n, kind, tier, flag FROM generate_series(-3, 12) AS n, "
            "(VALUES ('a'), ('b'), ('c'), (NULL)) AS ks(kind), generate_series(1, 4) AS tier, "
            "(VALUES (true), (false)) AS fs(flag)"
        )
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT set_config('TimeZone', %s, false)", (zone,))
        rows = conn.execute(f"SELECT DISTINCT CAST({sql} AS text) FROM ({source}) AS s").fetchall()
    return {r[0] for r in rows}


@pytest.fixture(scope="module")
def bare_dsn(make_db: Callable[[str], str]) -> str:
    return make_db("derived_texts")


@pytest.mark.parametrize("zone", ZONES)
def test_key_texts_are_postgresqls(zone: str, bare_dsn: str) -> None:
    """Every shape, every zone: dpsql's keys == PostgreSQL's distinct texts over the bounds."""
    for sql in NOT_DERIVED:
        assert _domain(sql, zone) is None, sql
    for sql in [*SHAPES, *NUMBER_SHAPES, *OTHER_SHAPES]:
        got = _domain(sql, zone)
        assert got is not None, sql
        keys, null = got
        want = _pg_texts(bare_dsn, sql, zone)
        if not null:  # a column's own NULL is not a key (none here); a CASE's is
            want.discard(None)
        assert keys == want, (sql, zone, sorted(map(str, keys ^ want))[:10])


VISITS = """
CREATE TABLE visits (user_id integer, d date, n integer, x numeric, kind text, tier integer,
                     flag boolean);
INSERT INTO visits
SELECT u, DATE '2024-11-20' + (u * 7) % 448, u % 16 - 3, (u % 1000) / 2.0, chr(97 + u % 3),
       1 + u % 4, u % 5 = 0
FROM generate_series(1, 3000) AS u;
"""

END_TO_END = [
    "SELECT CAST(DATE_TRUNC('month', d) AS date) AS m, COUNT(*) FROM visits GROUP BY 1",
    "SELECT DATE_TRUNC('month', CAST(d AS timestamp)) AS m, COUNT(*) FROM visits "
    "WHERE d >= '2025-03-01' AND d < '2025-07-01' GROUP BY 1",
    "SELECT CAST(EXTRACT(dow FROM d) AS integer) + 1 AS dow, COUNT(*) FROM visits GROUP BY 1",
    "SELECT EXTRACT(year FROM d) AS y, EXTRACT(quarter FROM d) AS q, COUNT(*) FROM visits "
    "GROUP BY 1, 2",
    "SELECT date_part('month', d), COUNT(*) FROM visits WHERE d >= '2025-03-01' "
    "AND d < '2025-07-01' GROUP BY 1",
    "SELECT to_char(d, 'YYYY-MM') AS ym, COUNT(*) FROM visits GROUP BY 1",
    "SELECT CAST(TRUNC(EXTRACT(YEAR FROM d)) AS INTEGER) AS y, "  # Tableau's DATEPART
    "CAST(TRUNC(EXTRACT(MONTH FROM d)) AS INTEGER) AS m, COUNT(*) FROM visits GROUP BY 1, 2",
    'SELECT floor(extract(epoch from d)/604800)*604800 AS "time", kind AS metric, COUNT(*) '
    "FROM visits WHERE d BETWEEN '2025-01-01T00:00:00Z' AND '2025-06-30T23:59:59Z' "
    "GROUP BY 1, 2 ORDER BY 1",  # Grafana's $__timeGroupAlias(d, '7d'), $__timeFilter(d)
    "SELECT width_bucket(x, 0, 500, 10) AS b, COUNT(*) FROM visits GROUP BY 1",
    "SELECT width_bucket(n, 0, 10, 3) AS b, SUM(x) FROM visits GROUP BY 1",
    "SELECT TRUNC(x, -2) AS r, COUNT(*), SUM(TRUNC(x)) FROM visits WHERE TRUNC(n) > 0 GROUP BY 1",
    "SELECT x > 100 AS big, COUNT(*) FROM visits GROUP BY 1",
    "SELECT ROUND(x, -2) AS r, COUNT(*) FROM visits GROUP BY 1",
    "SELECT ((floor(((x - 0.0) / 50.0)) * 50.0) + 0.0) AS b, COUNT(*) FROM visits GROUP BY 1",
    "SELECT FLOOR(n) AS f, COUNT(*) FROM visits GROUP BY 1",
    "SELECT CAST(kind AS varchar) AS k, COUNT(*) FROM visits GROUP BY 1",
    "SELECT COALESCE(kind, 'none') AS k, COUNT(*) FROM visits GROUP BY 1",
    "SELECT UPPER(kind) AS k, COUNT(*) FROM visits GROUP BY 1",
    "SELECT CASE WHEN tier > 2 THEN 'high' WHEN tier = 1 THEN kind END AS b, COUNT(*) "
    "FROM visits GROUP BY 1",
]


@pytest.fixture(scope="module")
def served(make_policy: PolicyMaker, make_db: Callable[[str], str]) -> Iterator[tuple[Engine, str]]:
    dsn = make_db("derived")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(VISITS)
    cols = {k: v for k, v in COLUMNS.items() if k != "t"}
    policy = make_policy(
        "derived", tables={"public.visits": private_table("user_id", cols, rows=1, groups=1)}
    ).policy
    e = Engine(policy, dsn, pool_size=1, noise=EXACT)
    yield e, dsn
    e.close()


@pytest.mark.parametrize("sql", END_TO_END)
def test_groups_from_the_policy_are_postgresqls(
    sql: str, served: tuple[Engine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    unrounded(monkeypatch)
    engine, dsn = served
    prepared = engine.prepare(sql)
    assert prepared.analysis is not None and not prepared.analysis.needs_selection, sql
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        want = {tuple(r[:-1]): float(r[-1]) for r in conn.execute(sql).fetchall()}
    r = engine.execute(prepared, SessionContext(analyst="analyst"))
    got = {tuple(row[:-1]): float(row[-1]) for row in r.rows}
    assert {k: got.get(k) for k in want} == want, (sql, got, want)  # no group lost
    assert all(v == 0 for k, v in got.items() if k not in want), (sql, got)  # empty keys: 0
    assert not any("come from the data" in n for n in r.notices), r.notices


def test_a_domain_over_the_limit_says_why(served: tuple[Engine, str]) -> None:
    """ROUND(x, 2) over [0, 500]: 50,001 keys > 5,000: partition selection, and the notice says
    that the policy gives the keys but they are too many (and what brings them under)."""
    engine, _ = served
    sql = "SELECT ROUND(x, 2), COUNT(*) FROM visits GROUP BY 1"
    prepared = engine.prepare(sql)
    assert prepared.analysis is not None and prepared.analysis.needs_selection
    r = engine.execute(prepared, SessionContext(analyst="analyst"))
    (line,) = [n for n in r.notices if "come from the data" in n]
    assert "The policy gives the keys of ROUND(visits.x, 2), but the bounds of x give 50,001" in (
        line
    ), line
    assert "above the limit of 5,000" in line
