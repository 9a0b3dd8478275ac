"""Statements of several DP leaves (#15, dpsql/sql/tree.py): derived-table re-aggregation,
Superset's pagination count, aggregates of aggregates, windows over aggregated rows, CTE joins
of two aggregated results and UNION ALL, answered through the engine and through the wire.

The true answer is the statement itself run directly on PostgreSQL. To compare a noisy answer
with it, the shapes run over two tables of the demo data with ONE row per privacy unit and every
value inside its declared bounds (``people``: a row per person of pums; ``orders``: one purchase
per user with amount <= 500), declared with ``max_rows_per_unit: 1``, ``max_groups_per_unit: 1``:
contribution bounding and clamping change nothing there, so the zero-noise answer IS PostgreSQL's
(checked) and a noisy one differs only by the leaves' noise.

Property: every noisy cell a leaf releases is within ``w`` of its true value, where ``w`` is its
mechanism's half-width at level 1 - alpha/M (M: the cells a test reads, alpha = 1e-6), plus 0.5
for the rounding of counts. By the union bound a test fails falsely with probability <= 1e-6.
Each output is then checked against PostgreSQL's answer with the tolerance its post-processing
allows (a sum of k cells: k·w; a ratio: interval arithmetic). A deliberately broken engine
whose leaves add twice the noise their plan states (the same seam as the privacy audits) fails.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.execute.tree_prepare import leaf_plans
from dpsql.result import Result
from dpsql.session import SessionContext
from dpsql.sql import plan as plan_module
from tests.helpers import EXACT, analyst_dsn, served_engine, unrounded
from tests.policies import build_policy

ALPHA = 1e-6
CATEGORIES = ["books", "clothing", "electronics", "groceries", "travel"]

ONE_ROW_TABLES = {
    "public.people": {
        "privacy_unit": "pid",
        "max_rows_per_unit": 1,
        "max_groups_per_unit": 1,
        "columns": {
            "pid": {"type": "integer", "identifier": True},
            "age": {"type": "integer", "bounds": [0, 100], "clamp": "bounds"},
            "sex": {"type": "integer", "keys": [0, 1]},
            "educ": {"type": "integer", "keys": list(range(1, 17))},
            "income": {"type": "numeric", "bounds": [0, 500000], "clamp": "bounds"},
        },
    },
    "public.orders": {
        "privacy_unit": "user_id",
        "max_rows_per_unit": 1,
        "max_groups_per_unit": 1,
        "columns": {
            "user_id": {"type": "integer", "identifier": True},
            "category": {"type": "text", "keys": CATEGORIES},
            "region": {"type": "text", "keys_from": "public.regions.code"},
            "amount": {"type": "numeric", "bounds": [0, 500], "clamp": "bounds"},
            "quantity": {"type": "integer", "bounds": [1, 10], "clamp": "bounds"},
        },
    },
}

PAGINATION = (
    "SELECT COUNT(*) AS rowcount FROM (SELECT region, category, COUNT(*) AS count "
    "FROM {t} GROUP BY region, category LIMIT 50000) AS rowcount_qry"
)
REAGGREGATE = (
    "SELECT category, SUM(revenue) AS revenue FROM (SELECT category, region, SUM(amount) AS "
    "revenue FROM orders GROUP BY 1, 2) AS virtual_table GROUP BY category ORDER BY category"
)
AGG_OF_AGGS = (
    "SELECT AVG(n) AS avg_n, MAX(n) AS max_n, COUNT(*) AS groups "
    "FROM (SELECT educ, COUNT(*) AS n FROM people GROUP BY educ) AS t"
)
WINDOWS = (
    "SELECT category, COUNT(*) AS n, SUM(COUNT(*)) OVER (ORDER BY category) AS running, "
    "COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share, "
    "LAG(COUNT(*)) OVER (ORDER BY category) AS prev FROM orders GROUP BY category "
    "ORDER BY category"
)
CTE_JOIN = (
    "WITH r AS (SELECT category, SUM(amount) AS rev FROM orders GROUP BY 1), "
    "n AS (SELECT category, COUNT(*) AS c FROM orders GROUP BY 1) "
    "SELECT r.category, r.rev, n.c, r.rev - LAG(r.rev) OVER (ORDER BY r.category) AS growth "
    "FROM r JOIN n ON n.category = r.category ORDER BY 1"
)
UNION_ALL = (
    "SELECT 'books' AS category, COUNT(*) AS n FROM orders WHERE category = 'books' "
    "UNION ALL SELECT 'travel', COUNT(*) FROM orders WHERE category = 'travel'"
)
DISTINCT_KEYS = (
    "SELECT DISTINCT category FROM (SELECT category, region, COUNT(*) AS n FROM orders "
    "GROUP BY 1, 2) t ORDER BY 1"
)
HAVING_TOP = (
    "SELECT category, SUM(n) AS n FROM (SELECT category, region, COUNT(*) AS n FROM orders "
    "GROUP BY 1, 2) t GROUP BY category HAVING SUM(n) > 0 ORDER BY 2 DESC LIMIT 3"
)


TREE_POLICY = build_policy(add_tables=ONE_ROW_TABLES)


def load_tree_db(dsn: str) -> None:
    """The tree tests' tables, added to a database with the demo's (make_demo_db)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE people AS SELECT DISTINCT ON (pid) pid, age, sex, educ, income "
            "FROM pums ORDER BY pid, age"
        )
        conn.execute(
            "CREATE TABLE orders AS SELECT DISTINCT ON (user_id) user_id, category, region, "
            "amount, quantity FROM purchases WHERE amount <= 500 ORDER BY user_id, id"
        )


@pytest.fixture(scope="module")
def tree_dsn(make_demo_db: Callable[[str], str]) -> str:
    dsn = make_demo_db("tree")
    load_tree_db(dsn)
    return dsn


@pytest.fixture(scope="module")
def tree_engine(tree_dsn: str) -> Iterator[Engine]:
    e = Engine(TREE_POLICY, tree_dsn, pool_size=2)
    yield e
    e.close()


SESSION = SessionContext(analyst="analyst", epsilon=Fraction(1), mechanism="laplace")


def direct(dsn: str, sql: str) -> tuple[list[tuple[Any, ...]], list[tuple[str, int]]]:
    """PostgreSQL's own answer and (name, type oid) columns."""
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(sql)
        assert cur.description is not None
        return cur.fetchall(), [(c.name, c.type_code) for c in cur.description]


def cell_bound(engine: Engine, sql: str, cells: int) -> float:
    """w: every noisy cell of the statement's leaves is within w of its true value with
    probability >= 1 - ALPHA over ``cells`` cells (union bound); +0.5 for rounded counts."""
    prepared = engine.prepare(sql, "analyst")
    plans = leaf_plans(engine, prepared.leaves, SESSION)
    level = 1 - ALPHA / cells
    return max(mp.mechanism.half_width(level) for p in plans for mp in p.measures) + 0.5


def run(engine: Engine, sql: str) -> Result:
    prepared = engine.prepare(sql, "analyst")
    assert prepared.split is not None, "expected a tree of DP leaves"
    return engine.execute(prepared, SESSION)


def near(got: Any, want: Any, tol: float) -> bool:
    return abs(float(got) - float(want)) <= tol


def check_shape(engine: Engine, dsn: str, sql: str) -> None:
    """Check one statement's noisy answer against PostgreSQL's (module docstring)."""
    truth, cols = direct(dsn, sql)
    got = run(engine, sql)
    assert [(c.name, c.type_oid) for c in got.columns] == cols, sql
    assert got.epsilon_spent == pytest.approx(1.0)
    CHECKS[sql](got.rows, truth, engine)


def _pagination(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    assert rows == truth == [(25,)]  # every declared (region, category) pair, as PostgreSQL


def _reaggregate(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    w = cell_bound(engine, REAGGREGATE, 25)
    assert [r[0] for r in rows] == [t[0] for t in truth] == CATEGORIES
    for r, t in zip(rows, truth, strict=True):
        assert near(r[1], t[1], 5 * w), (r, t, w)  # a sum of 5 regions' noisy cells


def _agg_of_aggs(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    w = cell_bound(engine, AGG_OF_AGGS, 16)
    (avg_n, max_n, groups), (t_avg, t_max, t_groups) = rows[0], truth[0]
    assert groups == t_groups == 16
    assert near(avg_n, t_avg, w) and near(max_n, t_max, w), (rows, truth, w)


def _windows(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    w = cell_bound(engine, WINDOWS, 5)
    total = sum(t[1] for t in truth)
    for i, (r, t) in enumerate(zip(rows, truth, strict=True)):
        assert r[0] == t[0]
        assert near(r[1], t[1], w) and near(r[2], t[2], (i + 1) * w), (r, t, w)
        lo = (t[1] - w) * 100 / (total + 5 * w)
        hi = (t[1] + w) * 100 / (total - 5 * w)
        assert lo <= float(r[3]) <= hi, (r, t, w)
        assert (r[4] is None) == (t[4] is None)
        assert r[4] is None or near(r[4], t[4], w)


def _cte_join(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    w = cell_bound(engine, CTE_JOIN, 10)
    for r, t in zip(rows, truth, strict=True):
        assert r[0] == t[0] and near(r[1], t[1], w) and near(r[2], t[2], w), (r, t, w)
        assert (r[3] is None) == (t[3] is None)
        assert r[3] is None or near(r[3], t[3], 2 * w)


def _union_all(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    w = cell_bound(engine, UNION_ALL, 2)
    assert [r[0] for r in rows] == [t[0] for t in truth] == ["books", "travel"]
    for r, t in zip(rows, truth, strict=True):
        assert near(r[1], t[1], w), (r, t, w)


def _distinct_keys(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    assert rows == truth == [(c,) for c in CATEGORIES]


def _having_top(rows: list[Any], truth: list[Any], engine: Engine) -> None:
    w = cell_bound(engine, HAVING_TOP, 25)
    assert len(rows) == len(truth) == 3
    exact = dict(direct_all_categories)
    for r in rows:  # the noisy top 3 may differ where counts are within noise of each other
        assert near(r[1], exact[r[0]], 5 * w), (r, exact, w)
    assert [float(r[1]) for r in rows] == sorted((float(r[1]) for r in rows), reverse=True)


direct_all_categories: list[tuple[str, int]] = []

CHECKS: dict[str, Callable[[list[Any], list[Any], Engine], None]] = {
    PAGINATION.format(t="orders"): _pagination,
    REAGGREGATE: _reaggregate,
    AGG_OF_AGGS: _agg_of_aggs,
    WINDOWS: _windows,
    CTE_JOIN: _cte_join,
    UNION_ALL: _union_all,
    DISTINCT_KEYS: _distinct_keys,
    HAVING_TOP: _having_top,
}


@pytest.fixture(scope="module", autouse=True)
def _categories(tree_dsn: str) -> None:
    direct_all_categories[:] = direct(
        tree_dsn, "SELECT category, COUNT(*) FROM orders GROUP BY category"
    )[0]


def test_bounding_is_a_no_op_on_the_one_row_tables(
    tree_engine: Engine, tree_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The premise of the comparisons: on zero noise, every shape is PostgreSQL's answer (up to
    the output grid real-valued sums are released on: at most 5 grid steps, 5 summed cells).
    Before the presentation's rounding of derived values to their noise's resolution (about
    1/100 of their stated half-width, dpsql.execute.tree_rounding, and of the leaves' released
    values, tests.helpers.unrounded), which
    moves a value by at most 1/200 of that half-width however little noise was drawn."""
    unrounded(monkeypatch)
    quiet = Engine(tree_engine.policy, tree_dsn, pool_size=1, noise=EXACT)
    try:
        for sql in CHECKS:
            got = run(quiet, sql)
            truth, _ = direct(tree_dsn, sql)
            plans = leaf_plans(quiet, quiet.prepare(sql, "analyst").leaves, SESSION)
            tol = 5 * max(float(mp.mechanism.grid) for p in plans for mp in p.measures)
            assert len(got.rows) == len(truth), sql
            for r, t in zip(got.rows, truth, strict=True):
                for a, b in zip(r, t, strict=True):
                    if isinstance(b, (int, float, Decimal)) and not isinstance(b, bool):
                        assert near(a, b, tol), (sql, r, t)
                    else:
                        assert a == b, (sql, r, t)
    finally:
        quiet.close()


@pytest.mark.parametrize("sql", list(CHECKS), ids=list(c.__name__[1:] for c in CHECKS.values()))
def test_shape_through_the_engine(tree_engine: Engine, tree_dsn: str, sql: str) -> None:
    check_shape(tree_engine, tree_dsn, sql)


def test_pagination_on_the_demo_purchases(engine: Engine, demo_dsn: str) -> None:
    sql = PAGINATION.format(t="purchases")
    got = run(engine, sql)
    assert got.rows == direct(demo_dsn, sql)[0] == [(25,)]


def test_shapes_through_the_wire(
    tree_engine: Engine, tree_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg through a served engine: every shape, with the same columns (names, types) and
    the same bounds; each of the 11 checks at ALPHA / 11 (false failure <= 1e-6 together)."""
    monkeypatch.setattr(f"{__name__}.ALPHA", ALPHA / (len(CHECKS) + len(MORE_CHECKS)))
    with served_engine(tree_engine.policy, tree_dsn) as srv:
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            conn.execute("SET dpsql.epsilon = 1")
            conn.execute("SET dpsql.mechanism = laplace")
            for sql in CHECKS:
                cur = conn.execute(sql)
                assert cur.description is not None
                truth, cols = direct(tree_dsn, sql)
                assert [(c.name, c.type_code) for c in cur.description] == cols
                CHECKS[sql](cur.fetchall(), truth, tree_engine)
            for sql, (check, _) in MORE_CHECKS.items():
                check(conn.execute(sql).fetchall(), tree_dsn, tree_engine)
            # extended protocol: Parse/Describe/Bind/Execute of a tree with a parameter
            cur = conn.execute(
                "SELECT COUNT(*) FROM (SELECT category, COUNT(*) AS n FROM orders "
                "WHERE quantity >= %s GROUP BY category) t",
                (1,),
                prepare=True,
            )
            assert cur.fetchall() == [(5,)]
            # a parameter in the post-processing part (Describe types it from its use)
            cur = conn.execute(
                "SELECT COUNT(*) AS groups FROM (SELECT category, COUNT(*) AS n FROM orders "
                "GROUP BY category) t WHERE n > %s",
                (-1,),
                prepare=True,
            )
            assert cur.fetchall() == [(5,)]


def test_one_charge_and_free_repeats_per_leaf(tree_dsn: str) -> None:
    """The whole tree is charged once (the sum of its leaves); a repeat is free; a new
    statement sharing a leaf (same SQL, same share of epsilon) pays only for its other leaf."""
    policy = TREE_POLICY
    ledger = Ledger.open(tree_dsn, policy, schema=f"dpsql_t{uuid.uuid4().hex[:8]}")
    e = Engine(policy, tree_dsn, ledger=ledger, pool_size=2)
    try:
        first = run(e, CTE_JOIN)
        assert first.epsilon_spent == pytest.approx(1.0) and not first.cached
        again = run(e, CTE_JOIN + " ")
        assert again.cached and again.epsilon_spent == 0 and again.rows == first.rows
        # EXPLAIN of a statement whose every leaf is stored: nothing charged (was XX000)
        plan = e.execute(e.prepare("EXPLAIN " + CTE_JOIN, "analyst"), SESSION)
        text = "\n".join(row[0] for row in plan.rows)
        assert "Free repeat: yes" in text and "Charged to:" not in text
        other = (
            "WITH r AS (SELECT category, SUM(amount) AS rev FROM orders GROUP BY 1), "
            "q AS (SELECT category, AVG(quantity) AS q FROM orders GROUP BY 1) "
            "SELECT r.category, r.rev, q.q FROM r JOIN q USING (category) ORDER BY 1"
        )
        third = run(e, other)
        assert third.epsilon_spent == pytest.approx(0.5)  # leaf r was stored by CTE_JOIN
        assert [r[1] for r in third.rows] == [r[1] for r in first.rows]
        history = ledger.remaining("analyst")
        assert history  # the ledger saw the charges
    finally:
        e.close()
        ledger.close()


def test_explain_shows_the_tree(tree_engine: Engine) -> None:
    r = tree_engine.execute(tree_engine.prepare("EXPLAIN " + CTE_JOIN, "analyst"), SESSION)
    text = "\n".join(row[0] for row in r.rows)
    assert text.startswith("DP Tree  (leaves=2 epsilon=1 delta=0)")
    assert "Leaf 0 (CTE r): SELECT category, SUM(amount) AS rev FROM orders GROUP BY 1" in text
    assert "Leaf 1 (CTE n): SELECT category, COUNT(*) AS c FROM orders GROUP BY 1" in text
    assert text.count("DP Aggregate  (mechanism=laplace epsilon=0.5 delta=0)") == 2
    assert "_dpsql_leaf_0" in text and "_dpsql_leaf_1" in text
    js = tree_engine.execute(
        tree_engine.prepare("EXPLAIN (FORMAT JSON) " + CTE_JOIN, "analyst"), SESSION
    )
    doc = js.rows[0][0][0]
    assert doc["Plan"]["Node Type"] == "DP Tree"
    assert [p["Epsilon"] for p in doc["Plan"]["Plans"]] == [0.5, 0.5]


def test_describe_reads_no_data_and_matches(tree_engine: Engine, tree_dsn: str) -> None:
    for sql in (WINDOWS, UNION_ALL):
        cols = tree_engine.describe(tree_engine.prepare(sql, "analyst"), SESSION)
        assert [(c.name, c.type_oid) for c in cols] == direct(tree_dsn, sql)[1]


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("SELECT user_id FROM orders UNION ALL SELECT COUNT(*) FROM orders", "42501"),
        ("SELECT n FROM (SELECT user_id, COUNT(*) AS n FROM orders GROUP BY user_id) t", "42501"),
        (
            "WITH m AS (SELECT category, COUNT(*) AS c FROM orders GROUP BY 1) "
            "SELECT o.amount, m.c FROM m JOIN orders o ON o.category = m.category",
            "42501",
        ),
        (
            "SELECT SUM(n), pg_sleep(0) FROM (SELECT category, COUNT(*) AS n FROM orders "
            "GROUP BY 1) t",
            "42501",
        ),
    ],
)
def test_post_processing_never_reads_private_rows(
    tree_engine: Engine, sql: str, sqlstate: str
) -> None:
    from dpsql.errors import DpsqlError

    with pytest.raises(DpsqlError) as e:
        tree_engine.execute(tree_engine.prepare(sql, "analyst"), SESSION)
    assert e.value.sqlstate == sqlstate and e.value.hint


def forty_times_the_noise(*args: Any) -> plan_module.Plan:
    """A broken planner: each measure's noise is 40 times what its plan states."""
    p = plan_module.make_plan(*args)
    return dataclasses.replace(
        p,
        measures=tuple(
            dataclasses.replace(
                mp,
                mechanism=dataclasses.replace(
                    mp.mechanism, sensitivity=mp.mechanism.sensitivity * 40
                ),
            )
            for mp in p.measures
        ),
    )


def test_the_bounds_catch_a_noisier_engine(tree_dsn: str) -> None:
    """The comparison can fail: leaves noised 40 times more than planned leave the stated
    bounds (computed from the honest plan). Here w is about 16 counts and the broken Laplace
    scale 40, so a cell stays within w with probability 1 - e^-0.4 = 0.33: all 15 cells of
    three runs stay within with probability 0.33^15 < 1e-7."""
    honest = Engine(TREE_POLICY, tree_dsn, pool_size=1)
    broken = Engine(TREE_POLICY, tree_dsn, pool_size=1, planner=forty_times_the_noise)
    try:
        truth, _ = direct(tree_dsn, WINDOWS)
        w = cell_bound(honest, WINDOWS, 5)
        misses = 0
        for _ in range(3):
            rows = run(broken, WINDOWS).rows
            misses += sum(not near(r[1], t[1], w) for r, t in zip(rows, truth, strict=True))
        assert misses > 0
    finally:
        honest.close()
        broken.close()


SERIES_LIMIT = (
    "SELECT category, region, COUNT(*) AS n FROM orders JOIN (SELECT category AS c__, "
    "COUNT(*) AS m FROM orders GROUP BY 1 ORDER BY m DESC LIMIT 2) AS series_limit "
    "ON category = c__ GROUP BY 1, 2 ORDER BY 1, 2"
)


def test_series_limit(tree_engine: Engine, tree_dsn: str) -> None:
    """Superset's series limit: the top-2 categories of one leaf restrict the next leaf's key
    domain. Checked: the chosen categories are a top-2 of the true counts up to the noise
    (every chosen one's true count >= every other's - 2w), every (category, region) of them is
    released (declared keys) within w of PostgreSQL's count, and the charge is one epsilon."""
    got = run(tree_engine, SERIES_LIMIT)
    assert got.epsilon_spent == pytest.approx(1.0)
    assert [c.name for c in got.columns] == ["category", "region", "n"]
    _series_limit(got.rows, tree_dsn, tree_engine)


def _series_limit(rows: list[Any], dsn: str, engine: Engine) -> None:
    truth = dict(direct_all_categories)
    by_cell = {
        (c, r): n
        for c, r, n in direct(dsn, "SELECT category, region, COUNT(*) FROM orders GROUP BY 1, 2")[0]
    }
    w = cell_bound(engine, SERIES_LIMIT, 5 + 10)
    chosen = sorted({r[0] for r in rows})
    assert len(chosen) == 2 and len(rows) == 10
    for c in chosen:
        assert all(truth[c] >= truth[o] - 2 * w for o in CATEGORIES if o not in chosen)
    for c, region, n in rows:
        assert near(n, by_cell[(c, region)], w), (c, region, n, w)


def test_series_limit_without_noise_is_postgresql(tree_dsn: str) -> None:
    quiet = Engine(TREE_POLICY, tree_dsn, pool_size=1, noise=EXACT)
    try:
        assert run(quiet, SERIES_LIMIT).rows == direct(tree_dsn, SERIES_LIMIT)[0]
    finally:
        quiet.close()


def test_series_limit_repeat_is_free(tree_dsn: str) -> None:
    """A refreshed series-limit chart pays nothing: both leaves are stored (the second under
    the key list the first released)."""
    policy = TREE_POLICY
    ledger = Ledger.open(tree_dsn, policy, schema=f"dpsql_t{uuid.uuid4().hex[:8]}")
    e = Engine(policy, tree_dsn, ledger=ledger, pool_size=2)
    try:
        first = run(e, SERIES_LIMIT)
        again = run(e, SERIES_LIMIT)
        assert first.epsilon_spent == pytest.approx(1.0)
        assert again.cached and again.epsilon_spent == 0 and again.rows == first.rows
        explain = e.execute(e.prepare("EXPLAIN " + SERIES_LIMIT, "analyst"), SESSION)
        text = "\n".join(r[0] for r in explain.rows)
        assert "Keys from leaf 0: category IN (the c__ values leaf 0 releases)" in text
    finally:
        e.close()
        ledger.close()


@pytest.mark.parametrize(
    "sql",
    [
        # reads the inner aggregate's value, not only its key
        "SELECT category, SUM(amount), MAX(m) FROM orders JOIN (SELECT category AS c__, "
        "COUNT(*) AS m FROM orders GROUP BY 1) s ON category = c__ GROUP BY 1",
        # a LEFT JOIN keeps the rows the filter would drop
        "SELECT category, SUM(amount) FROM orders LEFT JOIN (SELECT category AS c__, "
        "COUNT(*) AS m FROM orders GROUP BY 1) s ON category = c__ GROUP BY 1",
        # joined on an aggregate, not the inner key
        "SELECT category, SUM(amount) FROM orders JOIN (SELECT category AS c__, "
        "COUNT(*) AS m FROM orders GROUP BY 1) s ON quantity = m GROUP BY 1",
    ],
)
def test_other_joins_to_an_aggregate_are_refused(tree_engine: Engine, sql: str) -> None:
    from dpsql.errors import UnsupportedSql

    with pytest.raises(UnsupportedSql) as e:
        tree_engine.prepare(sql, "analyst")
    assert e.value.hint and "series limit" in e.value.message


PER_UNIT = "(SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) AS t"
PER_UNIT_STATS = f"SELECT COUNT(*) AS users, SUM(n) AS total, AVG(n) AS mean FROM {PER_UNIT}"
PER_UNIT_HISTOGRAM = f"SELECT n, COUNT(*) AS users FROM {PER_UNIT} GROUP BY n ORDER BY n"
CAP = 100  # dpsql.sql.per_unit_source.AUTO_CAP: the demo's purchases choose R per query (auto)


def test_per_unit_statistics(tree_engine: Engine, tree_dsn: str) -> None:
    """Per-user two-level aggregation: one row per user, the count capped at R (100 here), the
    outer aggregates a DP leaf over users. Truth: PostgreSQL's answer with the cap written out."""
    got = run(tree_engine, PER_UNIT_STATS)
    assert got.epsilon_spent == pytest.approx(1.0)
    _per_unit_stats(got.rows, tree_dsn, tree_engine)


def _per_unit_stats(rows: list[Any], dsn: str, engine: Engine) -> None:
    capped = PER_UNIT_STATS.replace("SUM(n)", f"SUM(LEAST(n, {CAP}))").replace(
        "AVG(n)", f"AVG(LEAST(n, {CAP}))"
    )
    ((users, total, mean),) = direct(dsn, capped)[0]
    w = cell_bound(engine, PER_UNIT_STATS, 5)
    ((g_users, g_total, g_mean),) = rows
    assert near(g_users, users, w) and near(g_total, total, w), (rows, users, total, w)
    mid = (1 + CAP) / 2
    assert near(g_mean, mean, w * (1 + abs(float(mean) - mid)) / (users - w)), (g_mean, mean)


def test_per_unit_histogram(tree_engine: Engine, tree_dsn: str) -> None:
    """'How many users bought N times': every bucket 1..R is released (a public domain), each
    within w of PostgreSQL's count (buckets no user has: 0; R holds everyone with R or more)."""
    got = run(tree_engine, PER_UNIT_HISTOGRAM)
    assert [c.name for c in got.columns] == ["n", "users"]
    _per_unit_histogram(got.rows, tree_dsn, tree_engine)


def _per_unit_histogram(rows: list[Any], dsn: str, engine: Engine) -> None:
    truth = dict(direct(dsn, f"SELECT LEAST(n, {CAP}), COUNT(*) FROM {PER_UNIT} GROUP BY 1")[0])
    w = cell_bound(engine, PER_UNIT_HISTOGRAM, CAP)
    assert [r[0] for r in rows] == list(range(1, CAP + 1))
    for n, users in rows:
        assert near(users, truth.get(n, 0), w), (n, users, truth.get(n, 0), w)


def test_per_unit_leaves_spend_nothing_on_a_removed_mass_estimate(tree_engine: Engine) -> None:
    """One row per user: row and group bounding remove nothing, so no share of epsilon goes to
    estimating what they removed (it would always be 0): each leaf's plan has no bias release,
    its measures get the whole epsilon, EXPLAIN's cost is what is charged, and the notice says
    why no estimate is needed. (Deterministic: plan properties, no noisy value.)"""
    from dpsql.sql.plan import Plan

    for sql in (PER_UNIT_STATS, PER_UNIT_HISTOGRAM):
        prepared = tree_engine.prepare(sql, "analyst")
        (plan,) = leaf_plans(tree_engine, prepared.leaves, SESSION)
        assert isinstance(plan, Plan) and plan.bias == () and plan.epsilon == 1, sql
        assert sum(mp.mechanism.cost.epsilon for mp in plan.measures) == 1, sql
        ex = tree_engine.execute(tree_engine.prepare("EXPLAIN " + sql, "analyst"), SESSION)
        assert "epsilon=1 " in "\n".join(r[0] for r in ex.rows), sql
        got = run(tree_engine, sql)
        assert got.epsilon_spent == pytest.approx(1.0)
        assert any("one row per user_id: the bounds remove nothing" in n for n in got.notices), (
            got.notices
        )


def test_per_unit_notice_says_what_the_cap_of_a_count_changes(tree_engine: Engine) -> None:
    """Each user's n = COUNT(*) is capped at R before the outer aggregate (a user with more
    rows counts as R): nothing is dropped, but SUM(n) and AVG(n) can be below the truth by
    what the cap removed, which is not estimated. Their notice says so plainly (it used to say
    "the bounds remove nothing", and on the demo AVG(n) missed its truth 10.16 with an interval
    of 9.94-10.05); COUNT(*) over the users (nothing capped) keeps saying nothing is removed;
    the histogram says its top bucket holds everyone at R or more. Deterministic (wording)."""
    got = run(tree_engine, PER_UNIT_STATS)
    by = {n.split(": ")[1]: n for n in got.notices if ": " in n}
    assert "one row per user_id: the bounds remove nothing" in by["COUNT(*)"], got.notices
    for stat in ("SUM(n)", "AVG(n)"):
        line = by[stat]
        assert "the bounds remove nothing" not in line, line
        assert f"each user_id's n is capped at {CAP}" in line and "NOT" in line, line
    hist = run(tree_engine, PER_UNIT_HISTOGRAM)
    line = next(n for n in hist.notices if "COUNT(*)" in n)
    assert f"the group n = {CAP} holds every user_id with {CAP} or more" in line, line


# the shapes whose truth is not the statement itself: (check, each column's type as psql text)
MORE_CHECKS: dict[str, tuple[Callable[[list[Any], str, Engine], None], tuple[type, ...]]] = {
    SERIES_LIMIT: (_series_limit, (str, str, int)),
    PER_UNIT_STATS: (_per_unit_stats, (int, Decimal, Decimal)),
    PER_UNIT_HISTOGRAM: (_per_unit_histogram, (int, int)),
}


def test_per_unit_rows_stay_private(tree_engine: Engine) -> None:
    from dpsql.errors import DpsqlError

    for sql in (
        f"SELECT n FROM {PER_UNIT}",
        "SELECT AVG(n) FROM (SELECT user_id, COUNT(*) AS n FROM purchases "
        "WHERE email LIKE 'a%' GROUP BY user_id) t",
        f"SELECT t.user_id, COUNT(*) FROM {PER_UNIT} GROUP BY 1",
    ):
        with pytest.raises(DpsqlError) as e:
            tree_engine.prepare(sql, "analyst")
        assert e.value.sqlstate == "42501", sql


def _psql_rows(port: int, sql: str) -> tuple[list[str], list[list[str]]]:
    """psql's CSV output of ``sql`` through dpsql: header and rows (text, as psql prints them)."""
    import csv
    import io
    import os
    import shutil
    import subprocess

    if shutil.which("psql") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("psql is not installed")
        pytest.skip("psql is not installed")
    res = subprocess.run(
        ["psql", "-X", "-q", "--csv", "-v", "ON_ERROR_STOP=1", analyst_dsn(port),
         "-c", "SET dpsql.epsilon = 1", "-c", "SET dpsql.mechanism = laplace", "-c", sql],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = list(csv.reader(io.StringIO(res.stdout)))
    return out[0], out[1:]


def test_shapes_through_psql(
    tree_engine: Engine, tree_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psql (simple protocol, text output): every shape answered, with PostgreSQL's column
    names and the same bounds as through the engine (each check at ALPHA / 11)."""
    monkeypatch.setattr(f"{__name__}.ALPHA", ALPHA / (len(CHECKS) + len(MORE_CHECKS)))

    def typed(row: list[str], like: tuple[Any, ...]) -> tuple[Any, ...]:
        out: list[Any] = []
        for text, t in zip(row, like, strict=True):
            if text == "" and t is None:
                out.append(None)
            elif isinstance(t, (int, float, Decimal)) and not isinstance(t, bool):
                out.append(Decimal(text))
            else:
                out.append(text)
        return tuple(out)

    with served_engine(tree_engine.policy, tree_dsn) as srv:
        for sql, check in CHECKS.items():
            truth, cols = direct(tree_dsn, sql)
            header, rows = _psql_rows(srv.port, sql)
            assert header == [c for c, _ in cols], sql
            check([typed(r, t) for r, t in zip(rows, truth, strict=False)], truth, tree_engine)
        for sql, (check, types) in MORE_CHECKS.items():
            header, rows = _psql_rows(srv.port, sql)
            assert len(header) == len(types), (sql, header)
            check(
                [tuple(t(v) for t, v in zip(types, r, strict=True)) for r in rows],
                tree_dsn,
                tree_engine,
            )
