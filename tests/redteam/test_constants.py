"""Constants reach PostgreSQL as the user wrote them, or the statement is refused.

dpsql sends PostgreSQL SQL written from sqlglot's tree, not the user's text, and sqlglot rewrites
some constants as it reads and writes them. review26 found ``to_char(d, 'fmmonth')`` sent as
``'fMMonth'`` (PostgreSQL answers ``f03onth``: every label of a GROUP BY wrong, with confident
counts beside them) and ``'"dd"'`` sent as ``'"DD"'``; this table found ``INTERVAL '30 days
ago'`` sent as ``'30 DAY'`` (the sign lost: a private count over the wrong month) and five more
(PUBLIC_REFUSED). Each statement is checked against PostgreSQL 15 itself:

* over public tables (PUBLIC_SAME, FORMATS) dpsql's answer must be PostgreSQL's answer to the
  same text, run by the owner: the constants each rewrite below keeps are argued in
  dpsql.sql.pg_constants (a unit's ASCII case, ``'1 day'`` / ``'1 DAY'`` / ``INTERVAL '1' DAY``,
  ``.5`` / ``0.5``, ``int4`` / ``integer``, ``date(x)`` / ``x::date``);
* a statement sqlglot would send with another constant is refused, 0A000, with words naming it
  (PUBLIC_REFUSED: each answered otherwise than PostgreSQL before, or answered where PostgreSQL
  refuses);
* over a private table (PRIVATE) dpsql's zero-noise answer must be that of the same statement
  written with plain constants, and every constant PostgreSQL's parser reads in the user's text
  must be in the SQL dpsql sent (recorded at the backend, read by pglast); the groups of a
  ``to_char`` key must be the ones PostgreSQL's own ``SELECT DISTINCT`` gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import dpsql.sql.pg_reading as pg_reading_module
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.sql.parse import parse_statement
from dpsql.sql.pg_reading import pg_reading
from tests.helpers import EXACT
from tests.owner import dpsql_rows, owner_rows

DAY = "date '2025-03-04'"
TS = "timestamp '2025-03-04 13:05:06.5'"

# to_char / to_date / to_timestamp formats sqlglot's strftime mapping does not give back as
# written (the first four were sent otherwise before: a wrong value each), and some it does
FORMATS = [
    f"to_char({DAY}, 'fmmonth')",  # was 'fMMonth': f03onth
    f"to_char({DAY}, '\"dd\" DD')",  # was '"DD" DD': DD 04
    f"to_char({DAY}, '%Y %m')",  # was 'YYYY MM': 2025 03 (PostgreSQL: %5 %m)
    f"to_char({DAY}, 'YYYY\"%d\"')",  # was 'YYYY"%D"'
    "to_date('2025%03', 'YYYY\"%\"MM')",
    f"to_char({DAY}, 'Month MONTH month Mon MON mon TMMonth')",
    f"to_char({DAY}, 'Day DAY day Dy DY dy d D yyyy-mm-dd ddd iw ww q')",
    f"to_char({TS}, 'HH HH12 HH24 hh24 mi MI ss SS ms MS us US AM am pm')",
    f"to_char({TS}, 'FMHH24:FMMI FMDD fmdd Fmdd DDth ddTH Y,YYY cc J RM rm W')",
    "to_char(1234.5, 'fm9g999d99')",
    "to_date('04 march 2025', 'dd month yyyy')",
    "to_timestamp('2025-03-04 01:05 pm', 'yyyy-mm-dd hh12:mi am')",
    f"to_char({DAY}, $$fmmonth$$)",
]


@pytest.fixture(scope="module")
def engine(demo_dsn: str, demo_policy: Any) -> Iterator[Engine]:
    e = Engine(demo_policy, demo_dsn, pool_size=1, noise=EXACT)
    yield e
    e.close()


def _distinct(dsn: str, sql: str) -> set[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0] for r in conn.execute(sql).fetchall()}


@pytest.mark.parametrize("call", FORMATS)
def test_a_format_reaches_postgresql_as_written(engine: Engine, call: str) -> None:
    sql = f"SELECT {call} AS v FROM regions"
    assert dpsql_rows(engine, sql) == owner_rows(engine, sql)


@pytest.mark.parametrize("fmt", ["fmmonth", '"dd"MM', "YYYY-MM", "Dy"])
def test_a_private_key_of_to_char_has_postgresql_labels(
    engine: Engine, demo_dsn: str, fmt: str
) -> None:
    key = f"to_char(purchased_at, '{fmt}')"
    got = {
        r[0] for r in dpsql_rows(engine, f"SELECT {key} AS k, COUNT(*) FROM purchases GROUP BY 1")
    }
    truth = _distinct(demo_dsn, f"SELECT DISTINCT {key} FROM purchases")
    assert got == truth


PUBLIC_SAME = [
    "SELECT INTERVAL '1' DAY, interval '1 day', INTERVAL '2' YEAR, INTERVAL ' 3 ' HOUR FROM regions",
    "SELECT interval '1day', interval '+1 days', interval '@ 1 day', interval '2 d', "
    "interval '3 ms', interval '1 mon', interval '1.5 days', interval '-1.5 hours' FROM regions",
    "SELECT INTERVAL '1:30' HOUR TO MINUTE, INTERVAL '1-2' YEAR TO MONTH, "
    "CAST('1 day' AS interval hour), interval '1 day 2 hours', interval 'P1Y2M' FROM regions",
    "SELECT date_trunc('MONTH', DATE '2025-03-04'), date_trunc('quarter', DATE '2025-03-04'), "
    "date_trunc('y', DATE '2025-03-04'), date_part('DOW', DATE '2025-03-04'), "
    "extract('YEAR' from DATE '2025-03-04'), date_part('Year', DATE '2025-03-04') FROM regions",
    "SELECT E'a\\nb', E'\\x41', E'\\101', E'it\\'s', U&'d\\0061t', U&'d!0061t' UESCAPE '!', "
    "$$a'b$$, 'it''s' FROM regions",
    "SELECT B'101', X'1F', b'101'::int, 5::bit(4), B'0101' & B'0011' FROM regions",
    "SELECT 1e3, .5, 00012, 1.50, 1.0e3, 2147483648, 9223372036854775808, 1E-2, 0.000, "
    "- -1, 1 - -1, +-1, 12.e2 FROM regions",
    "SELECT '1'::int4, '1'::integer, '1'::int8, '1.5'::float, '1.5'::real, '1.5'::decimal(4,2), "
    "'ab'::char, 'ab'::\"char\", 'ab'::varchar(1), 1.239::numeric(3,1), "
    "'2025-01-01 10:00:00.555'::timestamptz(1) FROM regions",
    "SELECT '{1,2}'::int[], ARRAY[1,2], ARRAY['a','b'], ARRAY[]::int[], '{{1,2},{3,4}}'::int[][] "
    "FROM regions",
    "SELECT 'a_b' LIKE 'a\\_b', 'a_b' LIKE 'a!_b' ESCAPE '!', 'AB' ILIKE 'a%', 'a_b' ~~ 'a\\_b', "
    "'ab' SIMILAR TO 'a(b|c)', 'ab' !~ 'c', 'x' SIMILAR TO 'x#%' ESCAPE '#' FROM regions",
    "SELECT 'a' < 'B' COLLATE \"C\", 'a' COLLATE \"POSIX\" < 'B', "
    "'a' COLLATE pg_catalog.\"default\" < 'B' FROM regions",
    "SELECT substring('abcdef' for 3), substring('abcdef' from 2 for 2), trim(both 'x' from 'xax'), "
    "position('b' in 'abc'), overlay('abc' placing 'x' from 2) FROM regions",
    "SELECT to_number('1,234.5', '9G999D9'), to_char(12.5, 'FM999.00'), to_char(1e6, '9.99EEEE'), "
    "to_char(interval '25 hours', 'HH24') FROM regions",
    "SELECT code FROM regions WHERE code = 'N' AND name <> 'x' ORDER BY 1 LIMIT 2 OFFSET 0",
    "SELECT code FROM regions FETCH FIRST ROW ONLY",
    "SELECT date(TIMESTAMP '2025-03-04 10:00'), date_bin('15 minutes', "
    "TIMESTAMP '2025-03-04 13:07', TIMESTAMP '2001-01-01') FROM regions",
    "SELECT 'a'\n'b' AS s, 'c' -- x\n 'd' AS t FROM regions",  # sent as CONCAT('a', 'b')
    "SELECT ROUND(AVG(n), 2), round(SUM(n)) FROM regions, (VALUES (1.005), (2)) v(n)",
]

# (statement, what sqlglot wrote of it on e61f824 and PostgreSQL's reading of the text)
PUBLIC_REFUSED = [
    ("SELECT interval '1 DAY ago' AS v FROM regions", "'1 DAY': +1 day, not -1 day"),
    ("SELECT interval '1 day 01:02' AS v FROM regions", "'1 DAY': the 01:02 dropped"),
    ("SELECT INTERVAL '1.5' DAY AS v FROM regions", "'1.5 DAY': 1 day 12:00, not 1 day"),
    ("SELECT INTERVAL '1 day 2 hours' DAY FROM regions", "a column named day: 1 day 02:00"),
    ("SELECT interval(3) '1.123456789 seconds' AS v FROM regions", "INTERVAL '3' + ...: 4.12 s"),
    ("SELECT '101'::bit varying FROM regions", "CAST('101' AS BIT) AS varying: 1"),
    ("SELECT interval '1 quarter' AS v FROM regions", "'3 MONTH' (PostgreSQL: 22007)"),
    ("SELECT date_trunc('ſecond', TIMESTAMP '2025-03-04') AS v FROM regions", "'SECOND' (22023)"),
    ("SELECT interval 'PT1H' AS v FROM regions", "'1 HOUR' (the same value: refused all the same)"),
    ("SELECT 1 AS n FROM regions WHERE 1 !=- 1", "1 <> -1: true (PostgreSQL: no operator !=-)"),
]

# (a private statement, the same statement with plain constants)
PRIVATE = [
    (
        "SELECT COUNT(*) FROM purchases WHERE purchased_at > DATE '2025-12-31' - interval '30 days'",
        "SELECT COUNT(*) FROM purchases WHERE purchased_at > DATE '2025-12-01'",
    ),
    (
        "SELECT COUNT(*) FROM purchases WHERE purchased_at >= DATE '2025-12-31' - INTERVAL '1' MONTH",
        "SELECT COUNT(*) FROM purchases WHERE purchased_at >= DATE '2025-11-30'",
    ),
    (
        "SELECT date_trunc('MONTH', purchased_at) AS m, COUNT(*) FROM purchases "
        "WHERE purchased_at < date '2025-03-01' GROUP BY 1",
        "SELECT date_trunc('month', purchased_at) AS m, COUNT(*) FROM purchases "
        "WHERE purchased_at < '2025-03-01' GROUP BY 1",
    ),
    (
        "SELECT COUNT(*), SUM(amount) FROM purchases WHERE amount > .5e2 AND quantity > 00002",
        "SELECT COUNT(*), SUM(amount) FROM purchases WHERE amount > 50 AND quantity > 2",
    ),
    (
        "SELECT COUNT(*) FROM purchases WHERE category LIKE 'b!_oks' ESCAPE '!' "
        "OR category LIKE 'tr_vel' OR category LIKE 'e\\%'",
        "SELECT COUNT(*) FROM purchases WHERE category = 'travel'",
    ),
    (
        "SELECT date(purchased_at) AS d, COUNT(*) FROM purchases "
        "WHERE purchased_at < date '2025-01-03' GROUP BY 1",
        "SELECT CAST(purchased_at AS date) AS d, COUNT(*) FROM purchases "
        "WHERE purchased_at < '2025-01-03' GROUP BY 1",
    ),
    (  # a constant only dpsql's SQL has (MEDIAN is dpsql's PERCENTILE_CONT(0.5)): answered
        "SELECT MEDIAN(quantity), AVG(amount) FROM purchases WHERE quantity > 3",
        "SELECT MEDIAN(quantity), AVG(amount) FROM purchases WHERE quantity >= 4",
    ),
    (
        "SELECT COUNT(*) FROM purchases WHERE region = $x$N$x$ AND category IN ($$books$$, 'travel')",
        "SELECT COUNT(*) FROM purchases WHERE region = 'N' AND category IN ('books', 'travel')",
    ),
]


def _sent(
    engine: Engine, sql: str, private: bool = True
) -> tuple[list[tuple[Any, ...]], list[str]]:
    """dpsql's answer to ``sql`` and the statements it sent upstream (private or public)."""
    sent: list[str] = []
    run = engine.backend.run

    def record(query: str, params: Any = None, **kw: Any) -> Any:
        if kw.get("private") == private:
            sent.append(query)
        return run(query, params, **kw)

    engine.backend.run = record  # type: ignore[method-assign]
    try:
        rows = dpsql_rows(engine, sql)
    finally:
        engine.backend.run = run  # type: ignore[method-assign]
    return rows, sent


@pytest.mark.parametrize("sql", PUBLIC_SAME)
def test_a_public_answer_is_postgresqls(engine: Engine, sql: str) -> None:
    """PostgreSQL's answer; and the statement dpsql sent holds every constant PostgreSQL reads in
    the user's text, as pg_constants reads them (its argued rewrites alone)."""
    rows, sent = _sent(engine, sql, private=False)
    assert rows == owner_rows(engine, sql)
    written = pg_reading(sql).constants()
    assert any(not written - pg_reading(s).constants() for s in sent if "regions" in s), sent


@pytest.mark.parametrize(("sql", "was"), PUBLIC_REFUSED)
def test_a_constant_sqlglot_rewrites_is_refused(engine: Engine, sql: str, was: str) -> None:
    with pytest.raises(DpsqlError) as e:
        engine.prepare(sql, "analyst")
    assert e.value.sqlstate == "0A000", (was, e.value)
    assert "read a constant of this statement differently" in str(e.value)
    assert e.value.hint and "write" in e.value.hint
    with pytest.raises(DpsqlError):  # a refused text is not remembered as agreed
        parse_statement(sql)


@pytest.mark.parametrize(("sql", "plain"), PRIVATE)
def test_a_private_statement_sends_its_constants(engine: Engine, sql: str, plain: str) -> None:
    rows, sent = _sent(engine, sql)
    assert rows == dpsql_rows(engine, plain)
    written = pg_reading(sql).constants()
    seen = [pg_reading(s.replace("%%", "%")).constants() for s in sent]
    for fact in written:
        assert any(fact in facts for facts in seen), fact


def test_the_private_statement_of_the_lost_sign_is_refused(engine: Engine) -> None:
    """On e61f824 ``INTERVAL '30 days ago'`` went upstream as ``INTERVAL '30 DAY'``: the count
    of December answered for a statement that asks for none of it (purchased_at after 30 Jan
    2026)."""
    with pytest.raises(DpsqlError) as e:
        engine.prepare(
            "SELECT COUNT(*) FROM purchases "
            "WHERE purchased_at > DATE '2025-12-31' - interval '30 days ago'",
            "analyst",
        )
    assert e.value.sqlstate == "0A000"
    assert "INTERVAL '30 days ago'" in str(e.value) and "'-1 day'" in str(e.value.hint)


def test_a_repeated_text_is_compared_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison (a second pglast parse, of the SQL dpsql writes) runs once per text: a
    text that passed is remembered, and a repeat never renders or parses it again."""
    sql = "SELECT code FROM regions WHERE name = 'constants once' AND code <> 'X'"
    parse_statement(sql)
    monkeypatch.setattr(pg_reading_module, "pg_reading", None)  # a call would fail
    monkeypatch.setattr(pg_reading_module, "constants", None)
    parse_statement(sql)
