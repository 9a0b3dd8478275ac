"""Row-level functions over a private table mean what they mean on PostgreSQL: a differential
test of the private path (parse, analysis, the rewrite that makes expressions total, the SQL
sent upstream) against PostgreSQL itself (dpsql/sql/arities.py, dpsql/sql/functions.py).

A private table of one row per person (R = 1, zero noise, no presentation rounding: COUNT(*)
is released exactly) is filtered by ``WHERE`` conditions on each allowed row-level function:
``e IS NULL`` and ``e::text = v`` for the values ``e`` takes. Property: when dpsql answers, its
count is PostgreSQL's count for the statement as written (a function sent as another one, or
an argument dropped, changes which rows pass); where PostgreSQL itself fails on some row, dpsql
may answer (its rewrite makes row-level expressions total: an error there would depend on the
data). A call with surplus or missing arguments is refused before anything runs. Deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from tests.helpers import unrounded
from tests.owner import dpsql_rows, exact_private
from tests.policies import PolicyMaker

EXPRESSIONS = """
round(n, 1) | round(n) | round(f) | round(n, -1) | floor(f) | ceil(n) | ceiling(n) | abs(n)
sign(n) | mod(i, 3) | i % 3 | i / 2 | n / 3 | div(i, 2) | lower(s) | upper(s) | length(s)
char_length(s) | trim(s) | trim(both 'a' from s) | btrim(s, 'a') | ltrim(s, 'a') | rtrim(s, 'c')
substring(s, 2, 2) | substring(s from 2 for 1) | substr(s, -1, 3) | substr(s, 2) | concat(s, i)
s || i | concat_ws('-', s, i) | coalesce(s, 'z') | nullif(i, 3) | greatest(i, 3) | least(n, 1)
greatest(i, NULL, 2) | date_trunc('month', d) | date_trunc('week', ts) | extract(year FROM d)
extract(dow FROM ts) | extract(epoch FROM ts) | date_part('dow', ts) | date_part('month', d)
to_char(d, 'YYYY-MM') | to_char(ts, 'Day') | to_char(ts, 'IYYY-IW')
CASE WHEN i > 2 THEN 'p' ELSE 'n' END | n::int | f::int | f::numeric(10, 1) | s::varchar(2)
d::timestamp | ts::date | i::text | n::numeric(10, 1) | d + 1 | d - DATE '2024-01-01'
f * 2 | f + 0.1 | n + 1 | n * 2 | n - i | (i + 1) * 2 | -(i + 1) | abs(i - 3) | i * 2 + n
round(f, 1) | round(i, 1) | trunc(n, 1) | ts + INTERVAL '1 month' | i IS DISTINCT FROM 3
trunc(f) | trunc(n) | trunc(i) | trunc(n, -1)
f / 3 | f - n | f * i + 1 | -f * 2 | abs(f) / 7 | round(f * 1.1) | date_part('dow', ts) + 0.5
s LIKE 'a%' | s ILIKE 'A%' | i BETWEEN 1 AND 4
"""


# Arithmetic is PostgreSQL's own on the same values (dpsql/sql/rewrite/make_total.py makes each
# operand safe, so that no row can make it fail): numeric ((n + 1)::text is '-0.37', n / 3
# keeps PostgreSQL's 20 decimals), double precision in float8 (f + 0.1 is -2.4499999999999997),
# integer back to an integer type ((i % 3)::text is '0'): every value compared as text.


@pytest.fixture(scope="module")
def private(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Any]]:
    columns = {
        "i": {"type": "integer", "bounds": [-1, 4]},
        "n": {"type": "numeric", "bounds": [-6, 6]},
        "f": {"type": "float8", "bounds": [-6, 6]},
        "s": {"type": "text"},
        "d": {"type": "date", "bounds": ["2024-01-01", "2024-12-31"]},
        "ts": {"type": "timestamp", "bounds": ["2023-12-01 00:00:00", "2024-03-01 00:00:00"]},
    }
    with exact_private(
        make_db,
        make_policy,
        "fidelity_private",
        columns,
        "CREATE TABLE priv (u int, i int, n numeric, f float8, s text, d date, ts timestamp)",
        "INSERT INTO priv SELECT u, CASE WHEN u % 7 = 0 THEN NULL ELSE u % 6 - 1 END,"
        " round((u % 9 - 4) * 1.37, 2), (u % 5 - 2) * 2.55,"
        " CASE WHEN u % 8 = 0 THEN NULL ELSE substr('abcab, ca', 1 + u % 5, 1 + u % 4) END,"
        " DATE '2024-01-28' + u * 3, TIMESTAMP '2023-12-30 22:15:00' + u * INTERVAL '17 hours'"
        " FROM generate_series(1, 60) u",
    ) as got:
        yield got


def _count(conn: Any, where: str) -> int | str:
    try:
        with conn.transaction():
            return int(conn.execute(f"SELECT COUNT(*) FROM priv WHERE {where}").fetchone()[0])
    except psycopg.Error as e:
        return str(e.sqlstate)


def _dpsql(engine: Engine, where: str) -> int | str:
    try:
        rows = dpsql_rows(engine, f"SELECT COUNT(*) FROM priv WHERE {where}")
    except DpsqlError as e:
        return "refused " + e.sqlstate
    return int(rows[0][0])


def test_row_level_functions_filter_as_written(
    private: tuple[Engine, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    unrounded(monkeypatch)
    engine, conn = private
    expressions = [
        e.strip() for line in EXPRESSIONS.strip().splitlines() for e in line.split(" | ")
    ]
    bad, answered = [], 0
    for e in expressions:
        try:
            with conn.transaction():
                values = conn.execute(
                    f"SELECT DISTINCT ({e})::text FROM priv WHERE ({e}) IS NOT NULL ORDER BY 1 LIMIT 3"
                ).fetchall()
        except psycopg.Error:
            values = []
        conditions = [f"({e}) IS NULL"] + [
            f"({e})::text = '{str(v).replace(chr(39), chr(39) * 2)}'" for (v,) in values
        ]
        for where in conditions:
            want, got = _count(conn, where), _dpsql(engine, where)
            if isinstance(got, int):
                answered += 1
                if isinstance(want, int) and got != want:
                    bad.append((where, want, got))
                elif isinstance(want, str) and want.startswith("42"):  # refused whatever the data
                    bad.append((where, want, got))
    assert not bad, "\n".join(map(str, bad))
    assert answered > 150


def test_calls_postgresql_refuses_are_refused_before_running(private: tuple[Engine, Any]) -> None:
    """A surplus or missing argument in a private statement: refused (42883) as PostgreSQL
    refuses it, never run with the argument dropped (round(n, 1, 2) as ROUND(n, 1))."""
    engine, conn = private
    for where in ("round(n, 1, 2) > 0", "substr(s, 1, 2, 3) = 'a'", "mod(i, 2, 3) = 0",
                  "date_trunc('month', d, 'UTC', 1) IS NULL", "log10() > 0", "ifnull(s, 'x') = 'a'"):  # fmt: skip
        assert isinstance(_count(conn, where), str), where  # PostgreSQL refuses it
        assert _dpsql(engine, where) == "refused 42883", where
