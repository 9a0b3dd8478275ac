"""GROUP BY ROLLUP / CUBE / GROUPING SETS on a real PostgreSQL: shapes, budget, EXPLAIN, refusals.

On the zero-noise source (tests.helpers.EXACT) and data that contribution bounding leaves
untouched (one row per unit, values inside the declared bounds, every declared key present),
dpsql's answer must be PostgreSQL's own answer to the same statement: the same rows (NULLs in the
rolled-up columns, GROUPING() values), the same column names and types.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.execute.disowned import NULLED_WORDS
from dpsql.session import SessionContext
from dpsql.sql.grouping_sets import SetsPlan
from tests.helpers import EXACT, unrounded
from tests.policies import build_policy, private_table

BASE = {
    "version": 1,
    "dataset": "grouping",
    "defaults": {"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    "tables": {
        "public.sales": private_table(
            "uid",
            {
                "cat": {"type": "text", "keys": ["a", "b", "c"]},
                "reg": {"type": "text", "keys": ["n", "s"]},
                "shop": {"type": "text"},  # no declared keys: partition selection
                "day": {"type": "date"},
                "amt": {"type": "numeric", "bounds": [0, 100], "clamp": "bounds"},
                "qty": {"type": "integer", "bounds": [0, 10], "clamp": "bounds"},
            },
        )
    },
    "public_tables": ["public.shops"],
}
ANALYST = {"budget": {"epsilon": 100, "delta": 1e-3}}
POLICY = build_policy(base=BASE, analysts={"analyst": ANALYST})

LOAD = """
CREATE TABLE sales (uid integer, cat text, reg text, shop text, day date, amt numeric, qty integer);
INSERT INTO sales
SELECT u, (ARRAY['a','b','c'])[1 + u % 3], (ARRAY['n','s'])[1 + (u / 3) % 2],
       'shop' || (u % 4), DATE '2024-01-01' + (u % 50), (u * 37) % 100, u % 11
FROM generate_series(1, 600) u;
CREATE TABLE shops (code text PRIMARY KEY, city text);
INSERT INTO shops VALUES ('shop0', 'Lyon'), ('shop1', 'Nice'), ('shop2', 'Lyon'), ('shop3', 'Nice');
"""


@pytest.fixture(scope="module")
def sales_dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("grouping")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LOAD)
    return dsn


@pytest.fixture(scope="module")
def exact(sales_dsn: str) -> Iterator[Engine]:
    e = Engine(POLICY, sales_dsn, pool_size=2, noise=EXACT)
    yield e
    e.close()


def session(**kw: Any) -> SessionContext:
    s = SessionContext(analyst="analyst")
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def ask(engine: Engine, sql: str, **kw: Any):  # type: ignore[no-untyped-def]
    return engine.execute(engine.prepare(sql), session(**kw))


def postgres(dsn: str, sql: str) -> tuple[list[tuple[Any, ...]], list[tuple[str, int]]]:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql)
        assert cur.description is not None
        cols = [(d.name, d.type_code) for d in cur.description]
        return cur.fetchall(), cols


def _norm(v: Any) -> Any:
    if isinstance(v, float | Decimal):
        return round(float(v), 6)
    return v


def same_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> bool:
    return Counter(tuple(map(_norm, r)) for r in got) == Counter(tuple(map(_norm, r)) for r in want)


SHAPES = [
    "SELECT cat, reg, COUNT(*), SUM(amt) FROM sales GROUP BY ROLLUP (cat, reg)",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY CUBE (cat, reg)",
    "SELECT cat, reg, COUNT(*), SUM(qty) FROM sales GROUP BY GROUPING SETS ((cat, reg), (cat), ())",
    "SELECT cat, reg, shop, COUNT(*) FROM sales GROUP BY cat, ROLLUP (reg, shop)",
    "SELECT cat, reg, COUNT(*), GROUPING(cat, reg) AS g, GROUPING(reg) FROM sales "
    "GROUP BY ROLLUP (cat, reg)",
    "SELECT shop, COUNT(*), AVG(amt) FROM sales GROUP BY ROLLUP (shop)",
    "SELECT cat, COUNT(*) FROM sales GROUP BY GROUPING SETS ((cat), (cat), ())",
    "SELECT cat, COUNT(*) FROM sales GROUP BY DISTINCT GROUPING SETS ((cat), (cat), ())",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY ROLLUP (cat), ROLLUP (reg)",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY GROUPING SETS (cat, ROLLUP (reg), ())",
    "SELECT cat, reg, COUNT(*) FROM sales GROUP BY ROLLUP ((cat, reg))",
    "SELECT cat AS c, COUNT(*) AS n FROM sales GROUP BY ROLLUP (1) HAVING COUNT(*) > 250 "
    "ORDER BY n DESC",
    "SELECT COALESCE(cat, 'All') AS cat, reg, COUNT(*) AS n FROM sales "
    "GROUP BY ROLLUP (cat, reg) ORDER BY GROUPING(cat, reg), 1, 2 LIMIT 4",
    "SELECT date_trunc('month', day) AS m, cat, COUNT(*) FROM sales "
    "GROUP BY ROLLUP (date_trunc('month', day), cat)",
    "SELECT cat, COUNT(*) FROM sales WHERE amt > 50 GROUP BY ROLLUP (cat) "
    "HAVING GROUPING(cat) = 1 OR COUNT(*) > 0",
    'SELECT "t"."cat", "t"."n" FROM (SELECT cat, COUNT(*) AS "n" FROM sales '
    'GROUP BY ROLLUP (cat)) AS "t" ORDER BY "t"."n", "t"."cat" LIMIT 1000',
    "SELECT cat, reg, COUNT(*), GROUPING(cat) FROM sales GROUP BY cat, reg",
    "SELECT s.city, t.cat, COUNT(*), SUM(t.qty) FROM sales t JOIN shops s ON t.shop = s.code "
    "GROUP BY ROLLUP (s.city, t.cat)",
    "WITH x AS (SELECT cat, amt * 2 AS v FROM sales WHERE qty > 2) "
    "SELECT cat, COUNT(*), SUM(v) FROM x GROUP BY CUBE (cat)",
    "SELECT upper(cat) AS u, COUNT(*) FILTER (WHERE amt > 10) FROM sales GROUP BY ROLLUP (cat)",
    "SELECT COUNT(*) FROM sales GROUP BY GROUPING SETS (())",
    "SELECT COUNT(*) FROM sales GROUP BY ROLLUP (cat)",
    "SELECT cat, COUNT(*) FROM sales GROUP BY ROLLUP (cat) HAVING GROUPING(cat) = 0 AND COUNT(*) > 1",
    # keys only (no statistic): declared keys, or partition selection (zero noise: every key)
    "SELECT cat FROM sales GROUP BY ROLLUP (cat)",
    "SELECT DISTINCT cat FROM sales GROUP BY ROLLUP (cat, reg)",
    "SELECT shop FROM sales GROUP BY shop",
    "SELECT shop, cat FROM sales GROUP BY CUBE (shop, cat)",
]


@pytest.mark.parametrize("sql", SHAPES)
def test_shape_is_postgresql(
    sql: str, exact: Engine, sales_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unrounded(monkeypatch)
    got = ask(exact, sql)
    want, cols = postgres(sales_dsn, sql)
    assert [(c.name, c.type_oid) for c in got.columns] == cols
    if "ORDER BY" in sql:  # (every ORDER BY here is total: no ties)
        assert [tuple(map(_norm, r)) for r in got.rows] == [tuple(map(_norm, r)) for r in want]
    assert same_rows(got.rows, want), (got.rows, want)
    described = exact.describe(exact.prepare(sql), session())
    assert [(c.name, c.type_oid) for c in described] == cols


# -- budget: split, ledger charge, repeats -------------------------------------------------------


@pytest.fixture
def charged(sales_dsn: str) -> Iterator[Engine]:
    ledger = Ledger.open(sales_dsn, POLICY, schema=f"dpsql_g{uuid.uuid4().hex[:8]}")
    e = Engine(POLICY, sales_dsn, ledger=ledger, pool_size=2)
    yield e
    e.close()
    ledger.close()


def test_epsilon_is_split_evenly_over_the_sets(exact: Engine) -> None:
    sql = "SELECT cat, reg, COUNT(*), SUM(amt) FROM sales GROUP BY ROLLUP (cat, reg)"
    plan = exact.plan(exact.prepare(sql), session(epsilon=Fraction(3, 2)))
    assert isinstance(plan, SetsPlan)
    assert [sp.keys for sp in plan.sets] == [(0, 1), (0,), ()]
    assert all(sp.plan.epsilon == Fraction(1, 2) for sp in plan.sets)
    assert plan.cost.epsilon == Fraction(3, 2) and plan.cost.delta == 0
    # each set is bounded on its own: G = 1 groups per unit in every set, R = 1 row per group
    for sp in plan.sets:
        assert [mp.sensitivity for mp in sp.plan.measures] == [1, 100]


def test_delta_goes_to_the_sets_with_partition_selection(exact: Engine) -> None:
    sql = "SELECT cat, shop, COUNT(*) FROM sales GROUP BY ROLLUP (cat, shop)"
    plan = exact.plan(exact.prepare(sql), session())
    assert isinstance(plan, SetsPlan)
    by_keys = {sp.keys: sp.plan for sp in plan.sets}
    assert by_keys[(0, 1)].selection is not None and by_keys[(0, 1)].delta == Fraction(1, 10**6)
    assert by_keys[(0,)].selection is None and by_keys[(0,)].delta == 0
    assert by_keys[()].selection is None and by_keys[()].delta == 0
    assert plan.cost.epsilon == 1 and plan.cost.delta == Fraction(1, 10**6)
    with pytest.raises(DpsqlError) as e:  # selection needs a delta, as for a plain GROUP BY
        ask(exact, sql, delta=Fraction(0))
    assert e.value.sqlstate == "22023"


def test_gaussian_sets_share_the_delta(exact: Engine) -> None:
    sql = "SELECT cat, COUNT(*) FROM sales GROUP BY ROLLUP (cat)"
    s = session(mechanism="gaussian", delta=Fraction(1, 10**6))
    plan = exact.plan(exact.prepare(sql), s)
    assert isinstance(plan, SetsPlan)
    assert [sp.plan.mechanism for sp in plan.sets] == ["gaussian", "gaussian"]
    assert plan.delta_for_rho == Fraction(1, 10**6) and plan.cost.rho > 0
    assert len(ask(exact, sql, mechanism="gaussian", delta=Fraction(1, 10**6)).rows) == 4


def test_ledger_charges_the_statement_total_once_and_repeats_are_free(charged: Engine) -> None:
    sql = "SELECT cat, reg, COUNT(*), AVG(amt) FROM sales GROUP BY CUBE (cat, reg)"
    first = ask(charged, sql, epsilon=Fraction(2))
    assert not first.cached and first.epsilon_spent == 2
    assert len(first.rows) == 6 + 3 + 2 + 1  # declared keys: every group of every set
    again = ask(charged, sql.replace("COUNT", "count"), epsilon=Fraction(2))
    assert again.cached and again.rows == first.rows and again.epsilon_spent == 0
    history = charged.ledger.history("analyst")  # type: ignore[union-attr]
    assert [(float(h.epsilon), h.state) for h in history if not h.cached] == [(2.0, "committed")]
    (mine,) = [b for b in charged.ledger.remaining("analyst") if b.budget == "analyst"]  # type: ignore[union-attr]
    assert mine.epsilon_spent == 2


def test_intervals_per_row_follow_each_sets_noise(sales_dsn: str) -> None:
    e = Engine(POLICY, sales_dsn, pool_size=1)
    try:
        sql = "SELECT cat, COUNT(*), SUM(amt) / COUNT(*) AS mean FROM sales GROUP BY ROLLUP (cat)"
        # a small group's answer may all come from units beyond the cap (9362b34): its mean's
        # interval is NULL, with a notice that says so (about 3 runs in 10 here); try again at
        # another epsilon for a run with every interval, and accept the NULL where it is said
        for k in range(3):
            r = ask(e, sql, show_intervals=True, epsilon=Fraction(2000 + k, 1000))
            if all(x is not None for row in r.rows for x in row[3:]):
                break
            assert any(w in n for n in r.notices for w in NULLED_WORDS), r.notices
    finally:
        e.close()
    names = [c.name for c in r.columns]
    assert names == ["cat", "count", "mean", "count_low", "count_high", "mean_low", "mean_high"]
    assert r.intervals is not None and len(r.intervals) == len(r.rows) == 4
    for row, iv in zip(r.rows, r.intervals, strict=True):
        assert iv[1] == (row[3], row[4]) and row[3] <= row[4] and row[1] <= row[4]
        if iv[2] is None:
            assert row[5] is None and row[6] is None
            assert any(w in n for n in r.notices for w in NULLED_WORDS), r.notices
        else:
            assert iv[2] == (row[5], row[6])
    # every set has epsilon 1 and count sensitivity 1: the same count noise half-width in every
    # set's accuracy notice (the intervals themselves also hold each group's removed rows)
    import re

    # each set's lines say which set they are of ("grouping set (cat): COUNT(*): ...")
    label = re.compile(r"grouping set (\([^)]*\)): ")
    sets = {m.group(1) for n in r.notices if (m := label.match(n))}
    assert len(sets) > 1, r.notices
    bodies = [label.sub("", n, count=1) for n in r.notices]
    noise = r"COUNT\(\*\).*?noise ±([0-9.,]+?),? "
    widths = {m.group(1) for n in bodies if (m := re.match(noise, n))}
    assert len(widths) == 1
    assert not any("cat" in n for n in bodies)  # keys are exact, never "without interval"


# -- EXPLAIN and refusals ------------------------------------------------------------------------


def test_explain_shows_each_set_and_its_share() -> None:
    from dpsql.explain.report import explain

    sql = "SELECT cat, shop, COUNT(*), GROUPING(cat, shop) FROM sales GROUP BY ROLLUP (cat, shop)"
    rep = explain(POLICY, sql, session())
    assert len(rep.sets) == 3
    assert "epsilon=0.333333 (1/3 of 1)" in rep.sets[0] and "partition selection" in rep.sets[0]
    assert "public keys" in rep.sets[1]
    assert rep.sets[2].startswith("(): ") and "grand total, always released" in rep.sets[2]
    assert rep.cost.startswith("epsilon=1, delta=1e-06") and "3 grouping sets" in rep.cost
    assert rep.rewritten.count("-- grouping set") == 3
    assert {m.measure.split(")")[0] + ")" for m in rep.measures} == {
        "(cat, shop)",
        "(cat)",
        "()",
    }
    grouping = [o for o in rep.outputs if o.column.endswith(" grouping")]
    assert len(grouping) == 3 and all(o.half_width == "exact" for o in grouping)
    rolled = [o for o in rep.outputs if o.column == "() cat"]
    assert rolled and rolled[0].statistic == "NULL (rolled up)"


REFUSED = [
    ("SELECT cat, COUNT(*) FROM sales GROUP BY CUBE (cat, reg, shop, qty, day)", "54000"),
    (
        "SELECT COUNT(*) FROM sales GROUP BY ROLLUP (cat, reg), ROLLUP (shop, qty), ROLLUP (day)",
        "54000",
    ),
    ("SELECT COUNT(*) FROM sales GROUP BY ROLLUP (uid)", "42501"),
    ("SELECT COUNT(*) FROM sales GROUP BY ROLLUP (cat, uid % 2)", "42501"),
    ("SELECT cat, amt, COUNT(*) FROM sales GROUP BY ROLLUP (cat)", "42501"),
    ("SELECT GROUPING(reg), COUNT(*) FROM sales GROUP BY ROLLUP (cat)", "42803"),
    ("SELECT GROUPING(cat), COUNT(*) FROM sales", "42803"),
    ("SELECT cat, COUNT(*) FROM sales GROUP BY ROLLUP (cat) ORDER BY GROUPING(amt)", "42803"),
    ("SELECT cat, COUNT(*) FROM sales GROUP BY ROLLUP (cat, (SELECT 1))", "0A000"),
    ("SELECT cat, COUNT(*) FROM sales GROUP BY ROLLUP (cat, random())", "0A000"),
    ("SELECT cat, COUNT(*) FROM sales GROUP BY ROLLUP (cat, ROLLUP (reg))", "42601"),
]


@pytest.mark.parametrize(("sql", "state"), REFUSED)
def test_refusals(sql: str, state: str, exact: Engine) -> None:
    with pytest.raises(DpsqlError) as e:
        ask(exact, sql)
    assert e.value.sqlstate == state, e.value
    assert e.value.hint or state == "42601"  # a syntax error, as in PostgreSQL


def test_too_many_sets_says_how_many(exact: Engine) -> None:
    with pytest.raises(DpsqlError) as e:
        exact.prepare("SELECT COUNT(*) FROM sales GROUP BY CUBE (cat, reg, shop, qty, day)")
    assert "32 grouping sets" in e.value.message and "at most 16" in e.value.message
    assert "ROLLUP" in (e.value.hint or "")


def test_parameters_bind_per_execution(exact: Engine, sales_dsn: str) -> None:
    sql = "SELECT cat, COUNT(*) FROM sales WHERE amt > $1 GROUP BY ROLLUP (cat)"
    p = exact.prepare(sql)
    for bound in (20, 70):
        got = exact.execute(p, session(), (bound,))
        want, _ = postgres(sales_dsn, sql.replace("$1", str(bound)))
        assert same_rows(got.rows, want)


def test_quantiles_and_min_per_set(exact: Engine) -> None:
    sql = (
        "SELECT cat, percentile_cont(0.5) WITHIN GROUP (ORDER BY amt) AS med, MIN(qty) "
        "FROM sales GROUP BY ROLLUP (cat)"
    )
    # epsilon 10: each set's 200 (600) rows are past the median's no-clear-estimate threshold
    r = ask(exact, sql, epsilon=Fraction(10))
    assert sorted(row[0] or "" for row in r.rows) == ["", "a", "b", "c"]
    assert all(0 <= row[1] <= 100 and 0 <= row[2] <= 10 for row in r.rows)


def test_through_the_wire(sales_dsn: str, make_db: Callable[[str], str]) -> None:
    from dpsql.server.run import ServerThread
    from dpsql.wire.server import ServerConfig

    pol = build_policy(base=BASE, analysts={"analyst": {**ANALYST, "credential": CRED}})
    ledger = Ledger.open(make_db("gs_ledger"), pol)
    engine = Engine(pol, sales_dsn, ledger=ledger, pool_size=2)
    try:
        with ServerThread(engine, pol, ServerConfig(port=0, shutdown_grace_s=2)) as srv:
            dsn = f"host=127.0.0.1 port={srv.port} user=analyst password=analyst dbname=x"
            with psycopg.connect(dsn, autocommit=True) as conn:
                sql = (
                    "SELECT cat, reg, COUNT(*) AS n, GROUPING(cat, reg) AS g FROM sales "
                    "WHERE qty >= %s GROUP BY ROLLUP (cat, reg) ORDER BY g, cat, reg"
                )
                cur = conn.execute(sql, (0,))
                rows = cur.fetchall()
                assert [d.name for d in cur.description or ()] == ["cat", "reg", "n", "g"]
                assert [r[3] for r in rows] == [0] * 6 + [1] * 3 + [3]
                assert rows[-1][:2] == (None, None) and 400 < rows[-1][2] < 800
        history = [h for h in ledger.history("analyst") if not h.cached]
        assert [float(h.epsilon) for h in history] == [1.0]
    finally:
        engine.close()
        ledger.close()


# password "analyst" (the demo analyst's verifier, dpsql/demo/policy.yaml)
CRED = (
    "SCRAM-SHA-256$4096:DD7OmvV3KDoYyszGw20m9ES0DhXUYhNCYoEaAHzF/pg=$5nydOFfTPE9vpChBNkaGHq6IUg1Ix9X8"
    "bwLT2Ly4b5k=:0Eh3qo4k8stA99FVbIAR49q8NEK3GnZCmDP6LH8HL1A="
)


# -- BI subtotals ----------------------------------------------------------------------------------
# Metabase's pivot tables ask for subtotals as one query per level, tagged with a constant
# "pivot-grouping" column (metabase/metabase src/metabase/query_processor/pivot: ABS(<bitmask>) AS
# "pivot-grouping" inside a "source" subquery, grouped by it), adapted to the demo tables. The
# same subtotals are one ROLLUP statement with GROUPING() in place of the constant.
METABASE_PIVOT = [
    'SELECT "source"."category" AS "category", "source"."region" AS "region", '
    '"source"."pivot-grouping" AS "pivot-grouping", count(*) AS "count" FROM (SELECT '
    '"public"."purchases"."category" AS "category", "public"."purchases"."region" AS "region", '
    'ABS(0) AS "pivot-grouping" FROM "public"."purchases") AS "source" GROUP BY '
    '"source"."category", "source"."region", "source"."pivot-grouping" ORDER BY '
    '"source"."category" ASC, "source"."region" ASC, "source"."pivot-grouping" ASC',
    'SELECT "source"."category" AS "category", "source"."pivot-grouping" AS "pivot-grouping", '
    'count(*) AS "count" FROM (SELECT "public"."purchases"."category" AS "category", ABS(1) AS '
    '"pivot-grouping" FROM "public"."purchases") AS "source" GROUP BY "source"."category", '
    '"source"."pivot-grouping" ORDER BY "source"."category" ASC, "source"."pivot-grouping" ASC',
    'SELECT "source"."pivot-grouping" AS "pivot-grouping", count(*) AS "count" FROM (SELECT '
    'ABS(3) AS "pivot-grouping" FROM "public"."purchases") AS "source" GROUP BY '
    '"source"."pivot-grouping" ORDER BY "source"."pivot-grouping" ASC',
]
ROLLUP_PIVOT = (
    'SELECT "source"."category" AS "category", "source"."region" AS "region", '
    'GROUPING("source"."category", "source"."region") AS "pivot-grouping", count(*) AS "count" '
    'FROM (SELECT "public"."purchases"."category" AS "category", "public"."purchases"."region" '
    'AS "region" FROM "public"."purchases") AS "source" '
    'GROUP BY ROLLUP ("source"."category", "source"."region") '
    'ORDER BY 3, "source"."category" ASC, "source"."region" ASC'
)


PLAIN_TOTAL = "SELECT count(*) AS count FROM purchases"


def test_bi_subtotals_metabase_pivot_and_rollup(engine: Engine, exact_engine: Engine) -> None:
    """The ROLLUP answers Metabase's three pivot queries in one statement: the same groups, and
    the same grand total. Without noise the totals are equal; noisy each is within its own noise's
    half-width at 1 - 5e-7 of that total (read from the plans), so the two differ by more than
    the sum with probability <= 1e-6. (The pivot's total groups by a constant, ABS(3): one
    public group, no partition selection, G = 1: sensitivity 25 at epsilon 1/3, Laplace scale
    75, as ``SELECT count(*)``; the ROLLUP's total: 25 at 3/10, scale 83. Before, the constant
    went through partition selection with G = 5: sensitivity 125 at 3/20, scale 833.)"""
    levels = [ask(engine, sql, epsilon=Fraction(1, 3)) for sql in METABASE_PIVOT]
    assert [len(r.rows) for r in levels] == [25, 5, 1]  # declared / keys_from keys
    rollup = ask(engine, ROLLUP_PIVOT)  # the same three levels, one statement, epsilon 1
    assert rollup.epsilon_spent == 1
    assert [c.name for c in rollup.columns] == ["category", "region", "pivot-grouping", "count"]
    assert [r[2] for r in rollup.rows] == [0] * 25 + [1] * 5 + [3]
    assert [r[:2] for r in rollup.rows[:25]] == [r[:2] for r in levels[0].rows]
    assert [r[0] for r in rollup.rows[25:30]] == [r[0] for r in levels[1].rows]
    total = rollup.rows[-1]
    pivot_plan = engine.plan(engine.prepare(METABASE_PIVOT[2]), session(epsilon=Fraction(1, 3)))
    rollup_plan = engine.plan(engine.prepare(ROLLUP_PIVOT), session())
    assert isinstance(rollup_plan, SetsPlan) and not isinstance(pivot_plan, SetsPlan)
    grand = next(sp.plan for sp in rollup_plan.sets if not sp.keys)
    plain = engine.plan(engine.prepare(PLAIN_TOTAL), session(epsilon=Fraction(1, 3)))
    assert not isinstance(plain, SetsPlan) and pivot_plan.selection is None
    assert pivot_plan.delta == 0 and pivot_plan.analysis.max_groups == 1
    assert [mp.sensitivity for mp in pivot_plan.measures] == [
        mp.sensitivity for mp in plain.measures
    ]
    w = sum(
        float(p.measures[0].mechanism.half_width(1 - 5e-7)) for p in (pivot_plan, grand)
    )  # about 1,100 + 1,200
    assert total[:2] == (None, None) and abs(total[3] - levels[2].rows[0][1]) <= w, (total, w)
    quiet = exact_engine
    exact = ask(quiet, METABASE_PIVOT[2]).rows[0][1]
    assert ask(quiet, ROLLUP_PIVOT).rows[-1][3] == exact > 100_000


def test_repeats_never_merge_different_rollups() -> None:
    from dpsql.sql.canonical import canonical

    def fingerprint(sql: str) -> str:  # the identity repeats are keyed by
        return canonical(sql).digest

    same = [
        "SELECT cat, COUNT(*) FROM sales GROUP BY GROUPING SETS ((cat), (reg))",
        "select cat, count(*) from sales group by grouping sets (cat, reg) -- same sets",
    ]
    assert fingerprint(same[0]) == fingerprint(same[1])
    different = [
        "SELECT cat AS c, reg AS d, COUNT(*) FROM sales GROUP BY ROLLUP (c, d)",
        "SELECT cat AS d, reg AS c, COUNT(*) FROM sales GROUP BY ROLLUP (c, d)",  # ROLLUP (reg, cat)
        "SELECT cat, reg, COUNT(*) FROM sales GROUP BY CUBE (cat, reg)",
        "SELECT cat, reg, COUNT(*) FROM sales GROUP BY ROLLUP (cat, reg)",
        "SELECT cat, reg, COUNT(*) FROM sales GROUP BY ROLLUP (reg, cat)",
        "SELECT cat, reg, COUNT(*) FROM sales GROUP BY DISTINCT ROLLUP (cat), ROLLUP (cat, reg)",
        "SELECT cat, reg, COUNT(*) FROM sales GROUP BY ROLLUP (cat), ROLLUP (cat, reg)",
    ]
    assert len({fingerprint(s) for s in different}) == len(different)


def test_doctests() -> None:
    import doctest

    from dpsql.sql import grouping_sets

    assert doctest.testmod(grouping_sets).failed == 0


CONSTANT_KEYS = [
    ("SELECT ABS(3) AS k, count(*) AS n FROM purchases GROUP BY ABS(3)", 3),
    ("SELECT 'all' AS k, count(*) AS n FROM purchases GROUP BY 1", "all"),
    ("SELECT CAST('2025-01-01' AS date) AS k, count(*) AS n FROM purchases GROUP BY 1", None),
    ("SELECT NULL::int AS k, count(*) AS n FROM purchases GROUP BY 1", None),
    ("SELECT s.k, count(*) AS n FROM (SELECT 1 + 2 AS k FROM purchases) AS s GROUP BY s.k", 3),
]


@pytest.mark.parametrize(("sql", "key"), CONSTANT_KEYS)
def test_a_constant_group_key_is_one_public_group(
    engine: Engine, exact_engine: Engine, sql: str, key: Any
) -> None:
    """A GROUP BY key that reads no column is one group whatever the data: no partition
    selection, no delta, G = 1, the sensitivity of the plain ``SELECT count(*)``; EXPLAIN says
    so; the answer is one row within its noise's half-width at 1 - 1e-6 of the true count."""
    from dpsql.explain.report import explain

    plan = engine.plan(engine.prepare(sql), session())
    plain = engine.plan(engine.prepare(PLAIN_TOTAL), session())
    assert plan.selection is None and plan.delta == 0 and plan.analysis.max_groups == 1
    assert [mp.sensitivity for mp in plan.measures] == [mp.sensitivity for mp in plain.measures]
    report = explain(engine.policy, sql, session())
    assert (
        report.selection is None
        and report.cost == explain(engine.policy, PLAIN_TOTAL, session()).cost
    )
    r = ask(engine, sql)
    truth = ask(exact_engine, sql).rows
    assert len(r.rows) == len(truth) == 1
    assert r.rows[0][0] == truth[0][0] and (key is None or r.rows[0][0] == key)
    half = float(plan.measures[0].mechanism.half_width(1 - 1e-6))
    assert abs(r.rows[0][1] - truth[0][1]) <= half, (r.rows, truth, half)
