"""A NULL value never sits beside a non-NULL interval (SET dpsql.show_intervals).

``CAST(AVG(income) AS smallint)``: the noisy average (about 46,000 for one group) is out of
smallint's range, so dpsql answers NULL where PostgreSQL would error (post_guards), while its ``c_low`` /
``c_high`` were the interval of the average ([0, 500,000], not even smallints): an interval of a
value not shown. Whatever the expression, value and interval agree: both NULL. Deterministic
(the zero-noise engine: one true average is above 32,767, the other below).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from dpsql.engine import Engine
from dpsql.session import SessionContext


def test_a_null_cast_has_no_interval(exact_engine: Engine) -> None:
    sql = (
        "SELECT sex, CAST(AVG(income) AS smallint) AS c, CAST(AVG(income) AS int) AS i "
        "FROM pums GROUP BY sex"
    )
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
    r = exact_engine.execute(exact_engine.prepare(sql, "analyst"), s)
    names = [c.name for c in r.columns]
    assert names == ["sex", "c", "i", "c_low", "c_high", "i_low", "i_high"]
    assert len(r.rows) == 2
    nulls = 0
    for row, iv in zip(r.rows, r.intervals or [], strict=True):
        assert row[2] is not None and row[5] is not None  # int holds every average
        if row[1] is None:  # smallint does not hold this one: no interval either
            nulls += 1
            assert row[3] is None and row[4] is None and iv[1] is None, row
        else:
            assert row[3] is not None and row[4] is not None, row
    assert nulls == 1, r.rows  # (the true averages: about 46,000 and 24,000)
    assert any(n.startswith("c: NULL") for n in r.notices), r.notices


def test_a_null_cast_over_a_cte_has_no_interval(exact_engine: Engine) -> None:
    """The same through post-processing over a released part (a tree statement)."""
    sql = (
        "WITH q AS (SELECT sex, AVG(income) AS m FROM pums GROUP BY sex) "
        "SELECT sex, CAST(m AS smallint) AS c FROM q"
    )
    s = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
    r = exact_engine.execute(exact_engine.prepare(sql, "analyst"), s)
    assert [c.name for c in r.columns] == ["sex", "c", "c_low", "c_high"]
    assert any(row[1] is None for row in r.rows), r.rows
    for row in r.rows:
        assert (row[1] is None) == (row[2] is None) == (row[3] is None), r.rows


def test_every_null_average_or_spread_says_why(exact_engine: Engine) -> None:
    """A group whose AVG (STDDEV) is NULL says so in its statistic's notice line, on every path
    of that line: AVG(income - 5) has no estimate of what the bounds changed (its line is the
    noise's only) and said nothing of its NULL groups (session 20's newcomer)."""
    sql = (
        "SELECT sex, AVG(income - 5) AS a, STDDEV(age) AS d, AVG(income) AS m FROM pums "
        "WHERE age < 0 GROUP BY sex"  # no row: every noisy count (exact here) is 0
    )
    s = SessionContext(analyst="analyst", epsilon=Fraction(1))
    r = exact_engine.execute(exact_engine.prepare(sql, "analyst"), s)
    assert len(r.rows) == 2 and all(x is None for row in r.rows for x in row[1:]), r.rows
    (line,) = [n for n in r.notices if n.startswith("STDDEV(age): ")]
    assert (
        "It is NULL in 2 of 2 groups: the noisy count of rows there came out below 1, so no spread"
        in line
    ), line
    # an AVG is NULL below its clear count (session 27: dpsql.execute.avg_unclear), and says so
    (line,) = [n for n in r.notices if n.startswith("AVG(income - 5): ")]
    assert re.search(
        r"It is NULL in 2 of 2 groups, with its _low/_high interval columns: its noisy count of "
        r"rows came out below [\d,]+ there",
        line,
    ), line
    (line,) = [n for n in r.notices if n.startswith("AVG(income): ")]
    assert "It is NULL in 2 of 2 groups" in line, line


def test_a_median_null_in_every_group_describes_no_interval(
    demo_dsn: str, demo_policy_auto: Any
) -> None:
    """newcomer27 #12: MEDIAN(income) by married at epsilon 1 is NULL in both groups (about 500
    people each, below the 2,041 kept rows a clear median needs: deterministic at zero noise),
    and its notice says so; the next notice then described its interval ("MEDIAN(income)
    (column med): the interval holds the median of all the rows ... with probability 95%"),
    which no row has. Now that line says first that no row has it. Fails before."""
    from dpsql.engine import Engine
    from tests.helpers import EXACT

    sql = (
        "SELECT married, MEDIAN(income) AS med, COUNT(DISTINCT pid) AS people FROM pums "
        "GROUP BY married"
    )
    e = Engine(demo_policy_auto, demo_dsn, pool_size=1, noise=EXACT)
    try:
        s = SessionContext(analyst="analyst", epsilon=Fraction(1), show_intervals=True)
        r = e.execute(e.prepare(sql, "analyst"), s)
    finally:
        e.close()
    assert [row[1] for row in r.rows] == [None, None], r.rows
    assert any(n.startswith("MEDIAN(income) is NULL in 2 of 2 groups") for n in r.notices)
    (line,) = [n for n in r.notices if n.startswith("MEDIAN(income) (column med):")]
    assert line.startswith(
        "MEDIAN(income) (column med): NULL in every row (as said above), so no row has the "
        "interval this describes; where answered, the interval holds the median"
    ), line


def test_a_cast_of_a_condition_over_released_values_answers(exact_engine: Engine) -> None:
    """``(COUNT(*) > 5)::int``: a boolean's cast to integer cannot fail, so it is not guarded
    (the guard compared the boolean with the integer range: 42883 'operator does not exist:
    boolean >= integer' after the charge; ``CAST(COUNT(*) > 5 AS integer)`` lost its brackets:
    'bigint > boolean'; redteam31, over the wire). PostgreSQL's values: 1 (true) and 0."""
    sql = (
        "SELECT sex, (COUNT(*) > 5)::int AS a, CAST(COUNT(*) > 100000 AS integer) AS b, "
        "CAST(COUNT(*) + 1 AS integer) - COUNT(*) AS c FROM pums GROUP BY sex"
    )
    s = SessionContext(analyst="analyst", epsilon=Fraction(1))
    r = exact_engine.execute(exact_engine.prepare(sql, "analyst"), s)
    assert [tuple(row[1:]) for row in r.rows] == [(1, 0, 1), (1, 0, 1)], r.rows
