"""Neighbouring databases, exactly: removing one unit moves each bounded measure by at most its
stated sensitivity (before noise), for the constructs last changed: integer division and
numeric(p, s) casts in sums, integral SUM rounding, AVG's centered sums, joins capped at R rows
per unit (self-joins, private-private, with public tables, GROUP BY a joined column).

The plan calibrates noise to: each group's measure moves by at most R * c (c = Measure.per_row(),
1 for COUNT(DISTINCT unit)), and the groups together by at most G * R * c (L1). Checked here on
the demo data by running the bounded SQL on D and on D minus one unit (its rows deleted from every
private table in a rolled-back transaction), for the five heavy units (400 rows each, clamped and
capped) and ordinary ones. Rows and groups are chosen by keyed hashes of the unit's own rows
(dpsql.sql.rewrite.keyed_hash), one salt per execution: both databases are queried with the same
salt, as the salt is drawn independently of the data.

The keyed-hash selection is checked directly too (docs/mechanisms.md, "Choosing rows and
groups"): for every other unit, the rows (or partials) it keeps are exactly the same on D and on
D minus one unit, for every shape of the rewrite; and a broken twin whose salt depends on the data
(the table's row count) is caught. Both checks are exact (no randomness: no false failures).

D is the demo data thinned (in the rolled-back transaction) to every 8th ordinary unit plus the
units removed: about 1,500 units of every row count. Both properties are about each unit's own
rows, so the thinning keeps every kind of unit the checks remove and still compares ~1,500
bystanders; the self-joins (a unit's rows times its rows) keep ~10^5 rows instead of ~10^6, whose
six runs were the suite's longest test. The broken twin is caught on both (it changes ~1,300 of the
thinned D's units, ~10,500 of the whole data's).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import psycopg
import pytest
import sqlglot
from sqlglot import exp

from dpsql.engine import Engine
from dpsql.execute.private_sql import SALT_MARKER, salt_of, salted
from dpsql.sql.analysis import Analysis, Measure

QUERIES = [
    "SELECT category, SUM(div(quantity, 3)) FROM purchases GROUP BY category",
    "SELECT SUM(CAST(amount AS numeric(5,1))) FROM purchases",
    "SELECT SUM(quantity * 2 - 3), COUNT(*) FROM purchases",
    "SELECT AVG(amount / 7), VAR_POP(quantity) FROM purchases",
    "SELECT COUNT(DISTINCT user_id), SUM(ROUND(amount, 1)) FROM purchases",
    "SELECT a.category, SUM(b.amount) FROM purchases a JOIN purchases b ON a.user_id = b.user_id "
    "GROUP BY a.category",
    "SELECT SUM(p.amount), COUNT(*) FROM purchases p JOIN pums u ON p.user_id = u.pid",
    "SELECT r.name, COUNT(*), SUM(p.quantity) FROM purchases p JOIN regions r ON r.code = p.region "
    "GROUP BY r.name",
    "SELECT u.sex, SUM(p.quantity / 2) FROM purchases p JOIN pums u ON p.user_id = u.pid "
    "GROUP BY u.sex",
    # the row path: rows ranked per (unit, group) and groups per unit by keyed hashes
    "SELECT category, COUNT(DISTINCT region), COUNT(*) FROM purchases GROUP BY category",
    "SELECT purchased_at, COUNT(DISTINCT quantity) FROM purchases GROUP BY purchased_at",
    "SELECT COUNT(DISTINCT b.amount) FROM purchases a JOIN purchases b ON a.user_id = b.user_id",
    # a unit count over ranked rows (each unit's first row in the group: first_rows), beside
    # partition selection's; bucketed measures' cells summed into the groups, with a unit count
    # and a COUNT(DISTINCT x) of a column without keys (x a key of the cells)
    "SELECT purchased_at, COUNT(DISTINCT user_id), COUNT(DISTINCT quantity) FROM purchases "
    "GROUP BY purchased_at",
    "SELECT category, COUNT(DISTINCT user_id), COUNT(DISTINCT quantity), MAX(amount) "
    "FROM purchases GROUP BY category",
    "SELECT purchased_at, MIN(amount), percentile_cont(0.5) WITHIN GROUP (ORDER BY quantity) "
    "FROM purchases GROUP BY purchased_at",
]
UNITS_TWIN = QUERIES[-2]
"""The unit-count twin: counting every kept row (``_dp_rn >= 1``) instead of a unit's first."""
# every shape of the rewrite, for the selection check: partials with and without group ranking,
# rows with and without group ranking, quantile buckets (grouping sets), capped joins, and
# partition selection (purchased_at has no declared keys)
SHAPES = [
    "SELECT COUNT(*), SUM(amount) FROM purchases",
    "SELECT category, SUM(quantity) FROM purchases GROUP BY category",
    "SELECT purchased_at, COUNT(*) FROM purchases GROUP BY purchased_at",
    "SELECT COUNT(DISTINCT region) FROM purchases",
    "SELECT category, COUNT(DISTINCT region) FROM purchases GROUP BY category",
    "SELECT category, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases "
    "GROUP BY category",
    "SELECT a.category, COUNT(DISTINCT b.amount) FROM purchases a "
    "JOIN purchases b ON a.user_id = b.user_id GROUP BY a.category",
    # quantiles' rows ordered by a hash of their values (keyed_hash.value_order), without and
    # with group ranking (partition selection)
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM purchases",
    "SELECT purchased_at, percentile_cont(0.9) WITHIN GROUP (ORDER BY quantity) FROM purchases "
    "GROUP BY purchased_at",
]
TWIN = "SELECT SUM(quantity * 2 - 3), COUNT(*) FROM purchases"
HEAVY = (100001, 100002, 100003, 100004, 100005)


def thin(conn: psycopg.Connection[Any], keep: tuple[int, ...]) -> None:
    """D: every 8th ordinary unit's rows and all of ``keep``'s (the heavy units and the ones the
    check removes), in the caller's transaction."""
    conn.execute(
        "DELETE FROM purchases WHERE user_id %% 8 <> 0 AND user_id <> ALL(%s)",
        (list(HEAVY + keep),),
    )


def _measures(a: Analysis) -> tuple[Measure, ...]:
    """The measures of the bounded SQL, as dpsql.execute.private_sql.bounded_sql writes them."""
    if a.needs_selection:
        return a.measures + (Measure("count_rows" if a.private.row_privacy else "count_units"),)
    return a.measures


def _bound(a: Analysis, m: Measure) -> Fraction:
    return Fraction(1) if m.kind == "count_units" else a.max_rows * m.per_row()


def _released(
    conn: psycopg.Connection[Any], sql: str, keys: int, n: int
) -> dict[tuple[Any, ...], list]:
    """Each group's ``n`` measures (not the removed-mass columns that follow: _dp_b*, _dp_k*;
    with bucketed measures, the rows of the groups' own grouping set, not the buckets')."""
    cur = conn.execute(sql)
    rows = cur.fetchall()
    names = [d.name for d in cur.description or []]
    if "_dp_set" in names:
        i = names.index("_dp_set")
        full = max((r[i] for r in rows), default=0)
        rows = [r for r in rows if r[i] == full]
    return {tuple(r[:keys]): [Fraction(str(v)) for v in r[keys : keys + n]] for r in rows}


@pytest.fixture(scope="module")
def units(demo_dsn: str) -> tuple[int, ...]:
    return audit_units(demo_dsn)


def audit_units(dsn: str) -> tuple[int, ...]:
    """Two heavy units, the ordinary unit with the most rows, one that is in pums too."""
    with psycopg.connect(dsn) as conn:
        top = conn.execute(
            "SELECT user_id FROM purchases GROUP BY user_id HAVING count(*) < 400 "
            "ORDER BY count(*) DESC, user_id LIMIT 1"
        ).fetchall()
        both = conn.execute(
            "SELECT min(pid) FROM pums WHERE pid IN (SELECT user_id FROM purchases)"
        ).fetchone()
    return HEAVY[:2] + tuple(u for (u,) in top) + ((both[0],) if both and both[0] else ())


def worst_ratio(
    engine: Engine,
    dsn: str,
    sql: str,
    units: tuple[int, ...],
    rows_bound: int | None = None,
    broken: Callable[[str], str] | None = None,
) -> Fraction:
    """The largest (change when one of ``units`` is removed) / (its bound), over groups (Linf)
    and over the sum of groups (L1 against G times the bound); ``rows_bound`` replaces R (to
    check that a wrong bound is caught); ``broken`` rewrites the SQL (a broken twin)."""
    prepared = engine.prepare(sql)
    a = prepared.analysis
    assert a is not None
    text = salted(engine.private_sql(prepared, a))  # one salt, for D and its neighbours
    if broken is not None:
        twin = broken(text)
        assert twin != text
        text = twin
    assert "random" not in text.lower() and "ctid" not in text.lower()
    measures = _measures(a)
    bounds = [_bound(a, m) * (rows_bound or a.max_rows) / a.max_rows for m in measures]
    keys = len(a.group_keys)
    worst = Fraction(0)
    zero = [Fraction(0)] * len(measures)
    with psycopg.connect(dsn) as conn:
        thin(conn, units)
        full = _released(conn, text, keys, len(measures))
        for u in units:
            conn.execute("SAVEPOINT one_unit")
            conn.execute("DELETE FROM purchases WHERE user_id = %s", (u,))
            conn.execute("DELETE FROM pums WHERE pid = %s", (u,))
            less = _released(conn, text, keys, len(measures))
            conn.execute("ROLLBACK TO SAVEPOINT one_unit")
            l1 = [Fraction(0)] * len(measures)
            for g in set(full) | set(less):
                diffs = [
                    abs(x - y) for x, y in zip(full.get(g, zero), less.get(g, zero), strict=True)
                ]
                for i, d in enumerate(diffs):
                    worst = max(worst, d / bounds[i])
                    l1[i] += d
            worst = max([worst, *(x / (a.max_groups * b) for x, b in zip(l1, bounds, strict=True))])
        conn.rollback()
    return worst


@pytest.mark.parametrize("sql", QUERIES)
def test_one_unit_moves_each_measure_by_at_most_its_sensitivity(
    engine: Engine, demo_dsn: str, units: tuple[int, ...], sql: str
) -> None:
    assert worst_ratio(engine, demo_dsn, sql, units) <= 1


def test_a_wrong_bound_is_caught(engine: Engine, demo_dsn: str) -> None:
    """The check can fail: claiming R = 1 for a heavy unit's 25 kept rows exceeds the bound."""
    assert worst_ratio(engine, demo_dsn, TWIN, HEAVY[:1], rows_bound=1) > 1


def count_every_row(text: str) -> str:
    """The unit-count twin's SQL: every kept row counted as a unit."""
    return text.replace("_dp_rn = 1 AND", "_dp_rn >= 1 AND")


def test_a_unit_count_of_rows_is_caught(engine: Engine, demo_dsn: str) -> None:
    """The check can fail on a unit count: counting a heavy unit's kept rows of its category
    (R = 25 of its 400 rows, alike in category) instead of the unit once moves the count by 25."""
    assert worst_ratio(engine, demo_dsn, UNITS_TWIN, HEAVY[:1], broken=count_every_row) > 1


def kept_sql(private_sql: str) -> str:
    """What the final aggregate of ``private_sql`` reads, row by row, with its unit: the rows or
    partials that bounding kept (the private SQL's own FROM and WHERE, without GROUP BY)."""
    q = sqlglot.parse_one(private_sql, read="postgres")
    assert isinstance(q, exp.Select)
    ctes = q.args["with_"].copy()
    source = q.args["from_"].this
    if isinstance(source, exp.Subquery) and source.alias == "_dp_cells":
        q = source.this  # bucketed measures: the cells' GROUP BY reads the kept rows
        assert isinstance(q, exp.Select)
    kept = exp.select(exp.Star()).from_(q.args["from_"].this.copy())
    if q.args.get("where") is not None:
        kept = kept.where(q.args["where"].this.copy())
    kept.set("with_", ctes)
    return kept.sql("postgres")


def changed_units(dsn: str, text: str, units: tuple[int, ...], thinned: bool = True) -> set[Any]:
    """The units other than the removed one whose kept rows differ between D (thinned, or the
    whole demo data) and D minus one of ``units`` (should be none). PostgreSQL compares the two
    multisets of kept rows (EXCEPT ALL both ways, NULLs equal as in a multiset of tuples): a
    self-join keeps ~10^5 rows, too many to bring into Python once per removed unit."""
    sql = kept_sql(text)
    changed: set[Any] = set()
    with psycopg.connect(dsn) as conn:
        if thinned:
            thin(conn, units)
        conn.execute(f"CREATE TEMP TABLE _dp_full ON COMMIT DROP AS {sql}")
        diff = (
            "SELECT DISTINCT _dp_unit FROM ((TABLE _dp_full EXCEPT ALL TABLE _dp_less) "
            "UNION ALL (TABLE _dp_less EXCEPT ALL TABLE _dp_full)) AS d"
        )
        for u in units:
            conn.execute("SAVEPOINT one_unit")
            conn.execute("DELETE FROM purchases WHERE user_id = %s", (u,))
            conn.execute(f"CREATE TEMP TABLE _dp_less AS {sql}")
            changed |= {r[0] for r in conn.execute(diff).fetchall()} - {u}
            conn.execute("ROLLBACK TO SAVEPOINT one_unit")  # the unit's rows and _dp_less
        conn.rollback()
    return changed


@pytest.mark.parametrize("sql", SHAPES)
def test_keyed_hash_selection_is_each_units_own(
    engine: Engine, demo_dsn: str, units: tuple[int, ...], sql: str
) -> None:
    """Removing one unit leaves every other unit's kept rows exactly as they were."""
    prepared = engine.prepare(sql)
    assert prepared.analysis is not None
    text = salted(engine.private_sql(prepared, prepared.analysis))
    assert changed_units(demo_dsn, text, HEAVY[2:3] + units) == set()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT category, COUNT(DISTINCT region) FROM purchases GROUP BY category",
        # a quantile's rows (values hashed, buckets carried through the sort), groups ranked
        "SELECT purchased_at, percentile_cont(0.9) WITHIN GROUP (ORDER BY quantity) "
        "FROM purchases GROUP BY purchased_at",
    ],
)
def test_a_data_dependent_salt_is_caught(engine: Engine, demo_dsn: str, sql: str) -> None:
    """The broken twin: a salt read from the data (the row count) re-draws every unit's choice
    when one unit is removed: the units with more groups than G (5) or more rows in a group than
    R (25) keep other ones (the heavy units don't: their 400 rows are alike in category and
    region, so any 25 of them are the same rows)."""
    prepared = engine.prepare(sql)
    assert prepared.analysis is not None
    text = engine.private_sql(prepared, prepared.analysis)
    assert f"'{SALT_MARKER}'" in text
    text = salted(text)
    salt = salt_of(text)
    broken = text.replace(f"'{salt}'", "CAST((SELECT COUNT(*) FROM purchases) AS TEXT)")
    assert changed_units(demo_dsn, text, HEAVY[:1], thinned=False) == set()  # the honest salt
    assert len(changed_units(demo_dsn, broken, HEAVY[:1], thinned=False)) > 100
    assert len(changed_units(demo_dsn, broken, HEAVY[:1])) > 100  # the thinned D's check too


# -- L1 caps over a unit's groups (auto bounds for per-group COUNT and SUM) ----------------------
CAPPED = [
    # declared keys (5 categories <= G): no group ranking, the cap reads all of a unit's partials
    "SELECT category, COUNT(*), SUM(amount) FROM purchases GROUP BY category",
    # private keys: groups ranked per unit, partition selection's unit count beside
    "SELECT purchased_at, COUNT(*), SUM(quantity) FROM purchases GROUP BY purchased_at",
]
CAPS = {"count_rows": Fraction(7), "sum": Fraction(300)}  # well below G·R·c for heavy units


def _capped(engine: Engine, sql: str, capped: bool = True) -> tuple[Analysis, Analysis]:
    """(the analysis with every COUNT(*) / SUM capped at CAPS over a unit's groups, the one whose
    SQL runs: the same, or -- the broken twin -- without the caps)."""
    from dpsql.sql.apply_bounds import apply_bounds
    from dpsql.sql.auto_bound_types import AutoBounds, ChosenBound
    from dpsql.sql.auto_bounds import total_column

    a = engine.prepare(sql).analysis
    assert a is not None
    chosen = tuple(
        ChosenBound("total", total_column(m), CAPS[m.kind], Fraction(0), 0, 0)
        for m in a.measures
        if m.kind in CAPS
    )
    capped_a = apply_bounds(a, AutoBounds(chosen))
    return capped_a, (capped_a if capped else a)


def l1_ratio(engine: Engine, dsn: str, sql: str, units: tuple[int, ...], capped: bool) -> Fraction:
    """The largest change, when one of ``units`` is removed, of a capped measure over all groups
    (L1) or in one group, divided by the cap L (the sensitivity the plan states: it is
    min(G·R·c, L), asserted below)."""
    from dpsql.sql.plan import make_plan

    claimed, run = _capped(engine, sql, capped)
    plan = make_plan(claimed, Fraction(1), Fraction(1, 10**6), "laplace")
    caps = {i: m.total for i, m in enumerate(claimed.measures) if m.total is not None}
    assert sorted(caps.values()) == sorted(CAPS.values())
    for i, cap in caps.items():
        assert plan.measures[i].sensitivity == cap  # below G·R·c: the cap is what noise sees
    text = salted(engine.private_sql(engine.prepare(sql), run))
    return _cap_ratio(dsn, [(text, len(claimed.group_keys))], len(_measures(claimed)), caps, units)


def _cap_ratio(
    dsn: str,
    texts: list[tuple[str, int]],
    n: int,
    caps: dict[int, Fraction],
    units: tuple[int, ...],
) -> Fraction:
    """:func:`l1_ratio`'s check over bounded SQL texts (each with its number of group keys: one
    text, or one per grouping set)."""
    worst = Fraction(0)
    zero = [Fraction(0)] * n
    with psycopg.connect(dsn) as conn:
        thin(conn, units)
        for text, keys in texts:
            full = _released(conn, text, keys, n)
            for u in units:
                conn.execute("SAVEPOINT one_unit")
                conn.execute("DELETE FROM purchases WHERE user_id = %s", (u,))
                less = _released(conn, text, keys, n)
                conn.execute("ROLLBACK TO SAVEPOINT one_unit")
                for i, cap in caps.items():
                    groups = {*full, *less}
                    diffs = [abs(full.get(g, zero)[i] - less.get(g, zero)[i]) for g in groups]
                    worst = max(worst, sum(diffs, Fraction(0)) / cap, max(diffs) / cap)
        conn.rollback()
    return worst


@pytest.mark.parametrize("sql", CAPPED)
def test_an_l1_cap_bounds_what_one_unit_moves_over_all_groups(
    engine: Engine, demo_dsn: str, units: tuple[int, ...], sql: str
) -> None:
    """Exact (no randomness): each unit's partials scaled into the cap L over its kept groups
    (dpsql.sql.rewrite.bound_partials._scaled) move the vector of groups by at most L in L1
    when the unit is removed, for the heavy units (400 rows) and ordinary ones."""
    assert l1_ratio(engine, demo_dsn, sql, HEAVY[2:3] + units, capped=True) <= 1


def test_an_l1_cap_that_is_not_applied_is_caught(engine: Engine, demo_dsn: str) -> None:
    """The broken twin: the plan claims the caps but the SQL does not scale the partials; a
    heavy unit (25 rows in each of its groups) moves the COUNT by far more than 7."""
    assert l1_ratio(engine, demo_dsn, CAPPED[0], HEAVY[:1], capped=False) > 1


ROLLUP_CAPPED = (
    "SELECT category, region, COUNT(*), SUM(amount) FROM purchases "
    "GROUP BY ROLLUP (category, region)"
)


def rollup_ratio(engine: Engine, dsn: str, units: tuple[int, ...], capped: bool) -> Fraction:
    """:func:`l1_ratio` for each grouping set of :data:`ROLLUP_CAPPED`: each set's partials are
    scaled into the one cap L over that set's groups, each set's plan states L."""
    from dpsql.execute.grouping_sets import set_sql
    from dpsql.sql.grouping_sets import make_sets_plan

    claimed, run = _capped(engine, ROLLUP_CAPPED, capped)
    plan = make_sets_plan(claimed, Fraction(1), Fraction(1, 10**6), "laplace")
    caps = {i: m.total for i, m in enumerate(claimed.measures) if m.total is not None}
    assert sorted(caps.values()) == sorted(CAPS.values())
    for sp in plan.sets:
        for i, cap in caps.items():
            assert sp.plan.measures[i].sensitivity == cap
    prepared = engine.prepare(ROLLUP_CAPPED)
    texts = [(salted(set_sql(engine, prepared, run, sp.keys)), len(sp.keys)) for sp in plan.sets]
    return _cap_ratio(dsn, texts, len(claimed.measures), caps, units)


def test_an_l1_cap_bounds_what_one_unit_moves_in_each_grouping_set(
    engine: Engine, demo_dsn: str, units: tuple[int, ...]
) -> None:
    """Exact: under ROLLUP each set (category, region), (category), () moves by at most L when
    one unit goes (the plain GROUP BY's check, per set); its twin without the scaling is caught."""
    assert rollup_ratio(engine, demo_dsn, HEAVY[2:3] + units, capped=True) <= 1
    assert rollup_ratio(engine, demo_dsn, HEAVY[:1], capped=False) > 1
