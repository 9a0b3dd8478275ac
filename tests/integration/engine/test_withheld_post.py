"""A value computed from a withheld statistic is withheld (NULL), never a default in its place
(null30: the demo's ``COALESCE(AVG(income), 0)`` answered 0, 0, 0 for truths 11,146 / 13,478 /
24,224 where dpsql had withheld the AVGs).

Zero noise (:data:`tests.helpers.EXACT`), so which AVG is withheld is certain: group ``big``
(3,000 rows) is released, ``small`` (5 rows) and ``none`` (no row) are below the AVG's clear
count (:mod:`dpsql.execute.avg_unclear`) and come back NULL. Every shape that turns NULL into a
value (COALESCE, CASE WHEN x IS NULL, NULLIF, IS [NOT] NULL, IS DISTINCT FROM, GREATEST/LEAST,
CONCAT; in a flattened subquery too) is NULL in those groups and keeps its value in ``big``;
a strict one (``||``, ``+``) was NULL already. A HAVING or ORDER BY that rests on a withheld value
keeps SQL's semantics (the group is left out, the row sorts as a NULL) and the notice names the
rows. The analyst's own NULL of a released value stays SQL's: ``COALESCE(NULLIF(COUNT(*), 0),
-5)`` answers -5 for group ``none`` (its released count is 0).

Broken twin: :func:`test_the_twin_without_the_guard_answers_a_confident_default` builds the
engine with the guard removed (``hold_withheld`` as the identity) and gets the bug back (0 for
``small`` and ``none``), so the assertions above catch its absence (checked: with the guard
reverted in select_outer.py, test_every_shape fails on COALESCE's 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import build_policy, demo_doc, private_table

COLUMNS = {
    "g": {"type": "text", "keys": ["big", "none", "small"]},
    "v": {"type": "integer", "bounds": [0, 100]},
}
POLICY = build_policy(
    base={"version": 1},
    dataset="withheld",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={"public.t": private_table("uid", COLUMNS, rows=None, groups=None)},
    analysts={"analyst": demo_doc()["analysts"]["analyst"]},
    fixed_bounds=True,
)
WITHHELD = ("none", "small")


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("withheld")
    rows = [(u, "small", 90 + u % 10) for u in range(5)]
    rows += [(10_000 + u, "big", (u * 37) % 101) for u in range(3000)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (uid int PRIMARY KEY, g text NOT NULL, v int)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", rows)
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    e = Engine(POLICY, dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def _run(e: Engine, sql: str) -> tuple[dict[Any, tuple[Any, ...]], list[str]]:
    r = e.execute(e.prepare(sql, "analyst"), SessionContext(analyst="analyst"), ())
    return {row[0]: tuple(row[1:]) for row in r.rows}, list(r.notices)


SHAPES = [
    "COALESCE(AVG(v), 0)",
    "CASE WHEN AVG(v) IS NULL THEN -1 ELSE AVG(v) END",
    "CASE WHEN AVG(v) > 50 THEN 'high' ELSE 'low' END",
    "NULLIF(0, AVG(v))",
    "AVG(v) IS NULL",
    "AVG(v) IS NOT NULL",
    "AVG(v) IS DISTINCT FROM 1",
    "GREATEST(AVG(v), 0)",
    "LEAST(AVG(v), 1000)",
    "CONCAT('avg ', AVG(v))",
    "CAST(AVG(v) AS text) || ' avg'",
    "COALESCE(SUM(v) / AVG(v), 0)",
]


def test_every_shape_is_withheld_where_its_statistic_is(engine: Engine) -> None:
    cols = ", ".join(SHAPES)
    got, notices = _run(engine, f"SELECT g, {cols} FROM t GROUP BY g")
    assert set(got) == {"big", "none", "small"}
    for g in WITHHELD:
        assert got[g] == (None,) * len(SHAPES), (g, got[g])
    assert None not in got["big"], got["big"]
    assert got["big"][4:7] == (False, True, True)  # IS NULL, IS NOT NULL, IS DISTINCT FROM
    # the notice names the outputs (as written), the rows and what to do, once for all that
    # read the same statistics
    (line,) = [n for n in notices if "withheld (NULL) in 2 of 3 rows" in n]
    assert "; COALESCE(SUM(v) / AVG(v), 0): withheld" in line, line  # SUM(v) is released
    assert line.startswith("COALESCE(AVG(v), 0); CASE WHEN AVG(v) IS NULL THEN -1"), line
    assert "(g none; g small)" in line and "each reads AVG(v)" in line, line
    assert "raise dpsql.epsilon" in line and "drop the COALESCE" in line, line
    # the undefined-value guard's words (a divisor of 0) are not said for a withheld value
    assert not any("where the expression is undefined" in n for n in notices), notices


def test_in_a_subquery_too(engine: Engine) -> None:
    got, _ = _run(
        engine,
        "SELECT g, COALESCE(a, 0), a IS NULL FROM (SELECT g, AVG(v) AS a FROM t GROUP BY g) s",
    )
    assert got["none"] == got["small"] == (None, None), got
    assert got["big"][0] is not None and got["big"][1] is False, got


def test_a_null_of_a_released_value_stays_sql(engine: Engine) -> None:
    got, notices = _run(engine, "SELECT g, COALESCE(NULLIF(COUNT(*), 0), -5) FROM t GROUP BY g")
    assert got == {"big": (3000,), "none": (-5,), "small": (5,)}, got
    assert not any("withheld" in n for n in notices), notices


def test_having_on_a_withheld_value_names_the_groups_it_left_out(engine: Engine) -> None:
    for having in ("AVG(v) >= 0", "COALESCE(AVG(v), 0) >= 0", "AVG(v) IS NULL"):
        got, notices = _run(engine, f"SELECT g, COUNT(*) FROM t GROUP BY g HAVING {having}")
        assert set(got) == ({"big"} if "IS NULL" not in having else set()), (having, got)
        (line,) = [n for n in notices if n.startswith(f"HAVING {having}: 2 groups left out")]
        assert "(g none; g small)" in line and "withheld AVG(v)" in line, line
        assert "in the data each may pass it" in line, line


def test_order_by_a_withheld_value_says_which_rows_rest_on_it(engine: Engine) -> None:
    r = engine.execute(
        engine.prepare(
            "SELECT g, AVG(v) FROM t GROUP BY g ORDER BY AVG(v) DESC LIMIT 2", "analyst"
        ),
        SessionContext(analyst="analyst"),
        (),
    )
    # PostgreSQL's NULL order (first under DESC): the withheld rows come first, and it says so
    assert [row[0] for row in r.rows] == ["none", "small"], r.rows
    (line,) = [n for n in r.notices if n.startswith("ORDER BY AVG(v) DESC: ")]
    assert "2 rows shown (g none; g small) sort by a withheld AVG(v)" in line, line
    _, notices = _run(
        engine, "SELECT g, AVG(v) FROM t GROUP BY g ORDER BY COALESCE(AVG(v), 0) LIMIT 1"
    )
    (line,) = [n for n in notices if n.startswith("ORDER BY COALESCE(AVG(v), 0): ")]
    assert "2 rows not shown (g none; g small)" in line and "rests on withheld" in line, line


def test_the_twin_without_the_guard_answers_a_confident_default(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpsql.sql import select_outer

    monkeypatch.setattr(select_outer, "hold_withheld", lambda node: node)
    e = Engine(POLICY, dsn, pool_size=1, noise=EXACT)
    try:
        got, _ = _run(e, "SELECT g, COALESCE(AVG(v), 0) FROM t GROUP BY g")
    finally:
        e.close()
    assert got["none"] == got["small"] == (0,), got  # the bug: a default for a withheld value


# -- statements of several leaves (dpsql.sql.withheld_post) ------------------------------------

CTE = "WITH s AS (SELECT g, AVG(v) AS a, COUNT(*) AS n FROM t GROUP BY g) "


def test_a_cte_post_processing_holds_every_shape(engine: Engine) -> None:
    got, notices = _run(
        engine,
        CTE + "SELECT g, COALESCE(a, 0), CASE WHEN a IS NULL THEN 'none' ELSE 'some' END, "
        "GREATEST(a, 0), CONCAT('avg ', a), n FROM s",
    )
    for g in WITHHELD:
        assert got[g][:4] == (None,) * 4, (g, got[g])
        assert got[g][4] is not None  # COUNT(*) is released: not held
    assert None not in got["big"], got["big"]
    # (a CTE read once as a table is answered as one flat statement: the flat words)
    (line,) = [n for n in notices if "withheld (NULL) in 2 of 3 rows" in n]
    assert line.startswith("COALESCE(a, 0); CASE WHEN a IS NULL"), line


def test_aggregates_and_windows_over_withheld_values_are_withheld(engine: Engine) -> None:
    got, notices = _run(
        engine, CTE + "SELECT 1, COUNT(a), SUM(a), MAX(COALESCE(a, 0)), COUNT(*), SUM(n) FROM s"
    )
    # COUNT(a) would say 1 (only big's is not NULL), SUM(a) big's alone, MAX 0's or big's
    assert got[1][:3] == (None, None, None) and got[1][3:] == (3, 3005), got
    (line,) = [n for n in notices if "it is withheld too" in n]
    assert line.startswith("COUNT(a) (NULL in 1 of 1 row); SUM(a) (NULL in 1 of 1 row)"), line
    assert "CTE s withheld values" in line and "raise dpsql.epsilon" in line, line
    got, _ = _run(engine, CTE + "SELECT g, SUM(a) OVER (), SUM(n) OVER () FROM s")
    assert all(row[0] is None and row[1] == 3005 for row in got.values()), got
    # over the released rows only (a WHERE on the key, before the window): a value
    got, _ = _run(engine, CTE + "SELECT g, COUNT(a) OVER () FROM s WHERE g = 'big'")
    assert got == {"big": (1,)}, got


def test_a_chain_of_ctes_and_a_flattened_window(engine: Engine) -> None:
    got, _ = _run(
        engine,
        CTE + ", u AS (SELECT g, a + 1 AS b FROM s) SELECT g, COALESCE(b, 0) FROM u",
    )
    assert got["none"] == got["small"] == (None,) and got["big"][0] is not None, got
    got, _ = _run(engine, "SELECT g, COALESCE(AVG(v), 0), SUM(AVG(v)) OVER () FROM t GROUP BY g")
    assert got["none"] == got["small"] == (None, None), got
    assert got["big"][0] is not None and got["big"][1] is None, got


def test_no_row_from_an_outer_join_keeps_sqls_null(engine: Engine) -> None:
    """A group the LEFT JOIN does not find is SQL's "no rows": COALESCE(..., 0) is 0 there;
    one it finds with a withheld value is withheld."""
    got, _ = _run(
        engine,
        "SELECT k.g, COALESCE(s.a, 0), COALESCE(s.n, 0) FROM (SELECT g FROM t GROUP BY g) k "
        "LEFT JOIN (SELECT g, AVG(v) AS a, COUNT(*) AS n FROM t WHERE g = 'small' GROUP BY g) s "
        "ON s.g = k.g",
    )
    assert got["small"] == (None, 5), got  # found, its AVG withheld; its count released
    assert got["big"] == (0, 0) and got["none"] == (0, 0), got  # not found: no rows


# -- outer joins, nested queries, LATERAL and function sources, built values (null31) ----------

SMALL = "WITH s AS (SELECT g, AVG(v) AS a, COUNT(*) AS n FROM t WHERE g <> 'big' GROUP BY g) "


def _postgresql(dsn: str, sql: str) -> dict[Any, tuple[Any, ...]]:
    """PostgreSQL's own answer on the same rows (no dpsql, no noise): group ``none`` has no row
    there, so it has no AVG either."""
    with psycopg.connect(dsn) as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(sql)}


def test_a_row_an_outer_join_does_not_find_keeps_sqls_null(engine: Engine, dsn: str) -> None:
    """RIGHT JOIN (ON, USING): ``big`` is not in ``s``, so COALESCE(s.a, 0) is 0 as in
    PostgreSQL; ``small`` is found with its AVG withheld: NULL (PostgreSQL's own 92 is unknown
    to dpsql at this epsilon). Was NULL for ``big`` too (every NULL read as withheld)."""
    k = "(SELECT g, COUNT(*) AS c FROM t GROUP BY g) k"
    for join in (f"RIGHT JOIN {k} ON s.g = k.g", f"RIGHT JOIN {k} USING (g)"):
        sql = SMALL + f"SELECT k.g, COALESCE(s.a, 0), COALESCE(s.n, 0) FROM s {join}"
        got, notices = _run(engine, sql)
        truth = _postgresql(dsn, sql)
        assert got["big"] == truth["big"] == (0, 0), (got, truth)
        assert got["small"] == (None, 5) and truth["small"][0] == 92, (got, truth)
        assert got["none"] == (None, 0), got  # found (a declared key), its AVG withheld
        (line,) = [n for n in notices if "it is withheld too" in n]
        assert "COALESCE(a, 0) (NULL in 2 of 3 rows: g none; g small)" in line, line
        assert "can't tell the two apart" not in line, line


def test_a_full_join_holds_every_null_and_says_so(engine: Engine) -> None:
    got, notices = _run(
        engine,
        SMALL + "SELECT k.g, COALESCE(s.a, 0) FROM s FULL JOIN "
        "(SELECT g, COUNT(*) AS c FROM t GROUP BY g) k ON s.g = k.g",
    )
    assert got == {"big": (None,), "none": (None,), "small": (None,)}, got
    (line,) = [n for n in notices if "it is withheld too" in n]
    assert "In COALESCE(a, 0), a NULL an outer join made (no row found) is read as" in line, line
    assert "can't tell the two apart there (a FULL JOIN" in line, line


def test_a_nested_querys_withheld_value_is_withheld(engine: Engine, dsn: str) -> None:
    """A scalar subquery reading a withheld value was not traced: COALESCE(..., 0) answered 0
    for ``small`` and ``none``. Its "no row" (``big`` here) keeps SQL's NULL, and 0."""
    sql = (
        SMALL + "SELECT k.g, COALESCE((SELECT a FROM s WHERE s.g = k.g), 0), "
        "(SELECT a FROM s WHERE s.g = k.g) IS NULL, "
        "COALESCE((SELECT MAX(a) FROM s WHERE s.g = k.g), 0) FROM (SELECT g FROM t GROUP BY g) k"
    )  # (a nested query's own held MAX stays inside it: the Citus tier found it copied out)
    got, notices = _run(engine, sql)
    truth = _postgresql(dsn, sql)
    assert got["big"] == truth["big"] == (0, True, 0), (got, truth)
    assert got["small"] == got["none"] == (None, None, None), got
    assert any("(NULL in 2 of 3 rows: g none; g small)" in n for n in notices), notices
    # a scalar leaf in an expression; ARRAY(SELECT ...) and IN (SELECT ...) too
    got, _ = _run(
        engine,
        "SELECT 1, COALESCE((SELECT AVG(v) FROM t WHERE g = 'small'), 0), "
        "COALESCE((SELECT AVG(v) FROM t WHERE g = 'big'), 0)",
    )
    assert got[1][0] is None and got[1][1] is not None, got
    got, _ = _run(
        engine,
        CTE + "SELECT g, ARRAY(SELECT a FROM s s2 WHERE s2.g = s.g), "
        "COALESCE(0 IN (SELECT a FROM s s2 WHERE s2.g = s.g), FALSE) FROM s",
    )
    assert got["small"] == got["none"] == (None, None), got
    assert got["big"][0] is not None and got["big"][1] is False, got


def test_lateral_and_function_sources_are_traced(engine: Engine) -> None:
    """Were not traced: COALESCE(x.a, 0) over a LATERAL subquery, COALESCE(x, 0) over
    unnest(ARRAY[s.a, 1]) answered 0 for a withheld AVG."""
    got, _ = _run(
        engine,
        CTE + "SELECT k.g, COALESCE(x.a, 0) FROM (SELECT g FROM t GROUP BY g) k "
        "CROSS JOIN LATERAL (SELECT a FROM s WHERE s.g = k.g) x",
    )
    assert got["small"] == got["none"] == (None,) and got["big"][0] is not None, got
    r = engine.execute(
        engine.prepare(
            CTE + "SELECT g, COALESCE(x, 0) FROM s, unnest(ARRAY[s.a, 1]) AS u(x)", "analyst"
        ),
        SessionContext(analyst="analyst"),
        (),
    )
    rows = sorted(r.rows, key=repr)
    assert [x for g, x in rows if g == "small"] in ([1, None], [None, 1]), rows
    assert sum(1 for _, x in rows if x is None) == 2, rows  # the 1s are not withheld


def test_arrays_and_json_built_over_a_withheld_value_are_withheld_whole(engine: Engine) -> None:
    """array_to_string(ARRAY[a, 1], ',') answered '1' for a withheld a (a NULL element is
    dropped), format('%s', a) '' and quote_nullable(a) 'NULL'."""
    got, notices = _run(
        engine,
        CTE + "SELECT g, ARRAY[a, 1], array_to_string(ARRAY[a, 1], ','), "
        "json_build_object('a', a), format('%s', a), quote_nullable(a) FROM s",
    )
    assert got["small"] == got["none"] == (None,) * 5, got
    assert None not in got["big"], got
    assert any("an array or JSON value built over it" in n for n in notices), notices


def test_a_window_is_withheld_only_where_it_reads_a_withheld_value(
    engine: Engine, dsn: str
) -> None:
    """LAG/LEAD read one row, a running SUM its frame: only the rows that read ``small``'s
    withheld AVG are NULL (were NULL over the whole partition); the others are PostgreSQL's own
    answer on the same rows (``big``'s AVG is released: zero noise; a LAG of no row keeps its
    NULL and COALESCE's 0). Ordering by a withheld value moves every row: held over it."""
    cte = "WITH s AS (SELECT g, AVG(v) AS a, COUNT(*) AS n FROM t WHERE g <> 'none' GROUP BY g) "
    sql = cte + (
        "SELECT g, COALESCE(LAG(a) OVER (ORDER BY g), 0), COALESCE(LEAD(a) OVER (ORDER BY g), 0), "
        "SUM(a) OVER (ORDER BY g), LAG(n, 1, 0) OVER w, LEAD(n) OVER w FROM s WINDOW w AS "
        "(ORDER BY g)"
    )
    got, _ = _run(engine, sql)
    truth = _postgresql(dsn, sql)
    assert got["big"][0] == truth["big"][0] == 0, (got, truth)  # no row before big
    assert got["big"][1] is None and truth["big"][1] == 92, (got, truth)  # reads small's
    assert round(got["small"][0], 2) == round(truth["small"][0], 2) == Decimal("50.01"), (
        got,
        truth,
    )
    assert got["small"][1] == truth["small"][1] == 0, (got, truth)  # no row after small
    assert round(got["big"][2], 2) == Decimal("50.01") and got["small"][2] is None, got
    assert got["big"][3:] == truth["big"][3:] == (0, 5), (got, truth)  # released counts
    assert got["small"][3:] == truth["small"][3:] == (3000, None), (got, truth)
    # a default is read only where no row is: LAG(n, 1, a) reads big's count in small's row;
    # LEAD(n, 1, a) falls back to small's own withheld AVG (PostgreSQL: 92)
    sql = (
        cte + "SELECT g, LAG(n, 1, a) OVER w, LEAD(n, 1, a) OVER w FROM s WINDOW w AS (ORDER BY g)"
    )
    got, _ = _run(engine, sql)
    truth = _postgresql(dsn, sql)
    assert round(got["big"][0], 2) == round(truth["big"][0], 2) and got["big"][1] == 5, got
    assert got["small"] == (3000, None) and truth["small"] == (3000, 92), (got, truth)
    got, _ = _run(
        engine, cte + "SELECT g, RANK() OVER (ORDER BY a), SUM(n) OVER (ORDER BY a) FROM s"
    )
    assert got == {"big": (None, None), "small": (None, None)}, got


def test_a_trees_words_name_the_rows_and_its_where_having_order_by(engine: Engine) -> None:
    """A statement of several leaves names the rows an output is NULL in by its columns no
    withheld value reaches (``g none``), as the flat words name groups (was a NULL count only),
    and says what a withheld value does to its outermost WHERE, HAVING and ORDER BY (was
    nothing)."""
    got, notices = _run(
        engine, CTE + "SELECT g, SUM(a) OVER (ORDER BY g), n FROM s ORDER BY g DESC LIMIT 2"
    )
    assert got["small"] == (None, 5) and got["none"] == (None, 0), got
    (line,) = [n for n in notices if "it is withheld too" in n]
    assert line.startswith("SUM(a) OVER (ORDER BY g) (NULL in 2 of 2 rows: g small; g none)")
    assert "may also be SQL's own" in line, line
    _, notices = _run(engine, CTE + "SELECT g, LAG(a) OVER (ORDER BY g) AS p FROM s ORDER BY p")
    (line,) = [n for n in notices if n.startswith("ORDER BY p: ")]
    assert "(2 rows shown: g big; g small) stand where PostgreSQL puts NULLs" in line, line
    assert "CTE s withheld values" in line, line
    for clause in ("WHERE a >= 0 OR g = 'x'", "WHERE COALESCE(a, 0) >= 0"):
        got, notices = _run(engine, CTE + f"SELECT g, SUM(n) OVER () FROM s {clause}")
        assert set(got) == {"big"}, got
        (line,) = [n for n in notices if n.startswith(f"{clause}: it reads values withheld")]
        assert "SQL leaves those rows out; in the data each may pass it" in line, line
    got, notices = _run(
        engine,
        CTE + "SELECT g, MAX(COALESCE(a, 0)) FROM (SELECT g, a, SUM(n) OVER () AS z FROM s) x "
        "GROUP BY g HAVING MAX(COALESCE(a, 0)) >= 0",
    )
    assert set(got) == {"big"}, got
    assert any(n.startswith("HAVING MAX(COALESCE(a, 0)) >= 0: it reads values") for n in notices)
