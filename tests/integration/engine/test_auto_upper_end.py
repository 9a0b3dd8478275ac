"""Under ``auto`` bounds a COUNT's or one-signed SUM's upper end is an assumption: NULL, and the
notice says so in that row (issue 16, newcomer21 #1, 4, 7, 23, 31; dpsql.execute.accuracy_few).

A unit beyond the cap C can hide any number of rows, and a few such units are invisible to every
DP release (group privacy). Wherever the releases cannot rule out one such unit (k >= 1) and no
number in the policy states the cap, the interval gives its low end only: ``_high`` NULL, the
notice names the rows ("The released values cannot check it here", "In 3 of 3 groups ...").

Table ``p`` (``auto`` R and G), the demo's shape: 3,000 ordinary units with 1-3 rows (category
a/b/t by row, amount < 300) and 5 "whales" with 400 rows each of category t, amount 400: the
whales hold half of t's rows (2,000 of 4,000) and most of ``amount >= 250``'s. Before, t's
interval was about [2,000, 2,400] against a truth of 4,000, ``_high`` shown, no sentence.
Table ``o``: the same ordinary units without whales, ``auto``: ordinary data. Table ``od``:
``o`` with R and G declared in the policy: the assumption is the data owner's, ``_high`` stays.

Deterministic checks: ``k`` is at least min(the over-cap count's reach, the removed-mass
estimate's reach / C) whatever the noise (released values enter clipped at 0): a public width of
the plan, over 1 at epsilon 1, so every such row is flagged (or the over-cap alarm fires, which
NULLs ``_high`` too). Statistical (false failure <= 1e-6): the low end that IS kept holds the
truth in at least binom_min_successes(60, 0.95, 1e-6) of 60 releases of t's COUNT (the truth is
the bounded answer plus all the removed mass; the low end adds that mass only up to C a unit:
docs/accuracy.md). Broken twin, today's rule before this change (``open_rows`` finding nothing,
the old A <= k K check alone): its full interval, ``_high`` kept, holds the truth in fewer
(about 2,400 against 4,000: in none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.dp.noise_source import CSPRNG
from dpsql.engine import Engine
from dpsql.execute import accuracy_avg, accuracy_text
from dpsql.execute.noise import release
from dpsql.execute.planning import plan as make_plan
from dpsql.session import SessionContext
from dpsql.sql.apply_bounds import apply_bounds
from dpsql.sql.auto_bound_types import AutoBounds
from dpsql.sql.auto_bounds import policy_choices
from dpsql.sql.plan import Plan
from tests.helpers import (
    binom_min_successes,
    interval_columns,
    ledgered_engine,
    line_of,
    with_intervals,
)
from tests.policies import build_policy


def _table(rows: int | str, groups: int | str, total: int | None = None) -> dict[str, Any]:
    return {
        "privacy_unit": "uid",
        "max_rows_per_unit": rows,
        "max_groups_per_unit": groups,
        "max_rows_per_unit_total": total,
        "columns": {
            "uid": {"type": "integer", "identifier": True},
            "cat": {"type": "text", "keys": ["a", "b", "t"]},
            "amount": {"type": "numeric", "bounds": [0, 500]},
        },
    }


POLICY = build_policy(
    base={},
    version=1,
    dataset="upper",
    defaults={"epsilon": 1.0, "max_epsilon": 10000.0, "delta": 1e-6},
    tables={"public.p": _table("auto", "auto"), "public.o": _table("auto", "auto")}
    | {"public.od": _table(3, 3), "public.ot": _table("auto", "auto", 3)},
    analysts={"analyst": {"budget": {"epsilon": 100000, "delta": 0.1}}},
)
ORDINARY = (
    "SELECT u, (ARRAY['a', 'b', 't'])[1 + (u + r) % 3], (u * 7 + r * 13) % 300 "
    "FROM generate_series(6, 3005) u, generate_series(0, u % 3) r"
)
T_TRUTH = 4000  # t's rows in p: 2,000 ordinary, 2,000 the whales'
SAYS = ("cannot check it", "does NOT cover the truth")


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("upper")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in ("p", "o", "od", "ot"):
            conn.execute(f"CREATE TABLE {t} (uid integer NOT NULL, cat text, amount numeric)")
            conn.execute(f"INSERT INTO {t} {ORDINARY}")
        conn.execute(
            "INSERT INTO p SELECT u, 't', 400 FROM generate_series(1, 5) u, generate_series(1, 400)"
        )
    return dsn


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    with ledgered_engine(POLICY, dsn, "dpsql_upper") as e:
        yield e


_run = with_intervals  # (tests.helpers)


def test_the_data(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM p WHERE cat = 't'").fetchone() == (T_TRUTH,)


# the demo's shapes (newcomer21 #23, #1, #4, #7): statement, {column: statistic}
SHAPES = [
    ("SELECT COUNT(*) AS n FROM p WHERE cat = 't'", {"n": "COUNT(*)"}),
    (
        "SELECT COUNT(*) AS n, SUM(amount) AS s FROM p WHERE amount >= 250",
        {"n": "COUNT(*)", "s": "SUM(amount)"},
    ),
    (
        "SELECT cat, COUNT(*) AS n, SUM(amount) AS s FROM p GROUP BY cat",
        {"n": "COUNT(*)", "s": "SUM(amount)"},
    ),
    (
        "SELECT CASE WHEN amount >= 250 THEN 'high' ELSE 'low' END AS b, COUNT(*) AS n "
        "FROM p GROUP BY 1",
        {"n": "COUNT(*)"},
    ),
    (
        "SELECT COUNT(*) AS n FROM p x JOIN p y ON x.uid = y.uid WHERE x.cat = 't'",
        {"n": "COUNT(*)"},
    ),
]


@pytest.mark.parametrize(("sql", "stats"), SHAPES, ids=range(len(SHAPES)))
def test_the_demo_shapes_give_no_upper_end(engine: Engine, sql: str, stats: dict[str, str]) -> None:
    r = _run(engine, sql)
    got = interval_columns(r, stats)  # NULL exactly where the line says, and which end
    names = [c.name for c in r.columns]
    assert r.rows
    for col, stat in stats.items():
        line = line_of(r.notices, stat)
        assert any(w in line for w in SAYS), line
        assert all(g == (False, True) for g in got[col]), (got, line)  # _low kept, _high NULL
        for row in r.rows:  # the low end is a number at or below the answer's reach
            assert row[names.index(f"{col}_low")] is not None, row
        if "cannot check it" in line:
            assert "could have lost more than that, each by any" in line, line
            assert "declare max_rows_per_unit" in line, line
            if "JOIN" in sql:
                assert "before the join, and what that left out is not estimated" in line, line
            else:
                assert "the bounds were chosen from the data (auto), not declared" in line, line
    if "GROUP BY" in sql:  # the line names the rows: all of them here
        assert any(f"In {len(r.rows)} of {len(r.rows)} groups" in n for n in r.notices), r.notices


def test_ordinary_data_under_auto(engine: Engine) -> None:
    """Without whales nothing in the releases differs from ``p``'s ordinary rows, so the rule is
    the same: no upper end at epsilon 1 (k >= 1 is a public width there), said in that row."""
    r = _run(engine, "SELECT cat, COUNT(*) AS n FROM o GROUP BY cat")
    got = interval_columns(r, {"n": "COUNT(*)"})
    assert got["n"] == [(False, True)] * 3 or any(SAYS[1] in n for n in r.notices), r.notices


def test_the_releases_can_rule_units_out(engine: Engine) -> None:
    """At an epsilon where the over-cap count's noise reaches less than one unit, ordinary data
    shows no unit beyond the cap: the upper end stays, stated as the assumption it is."""
    r = _run(engine, "SELECT COUNT(*) AS n FROM o", Fraction(3000))
    got = interval_columns(r, {"n": "COUNT(*)"})
    line = line_of(r.notices, "COUNT(*)")
    assert got["n"] == [(False, False)], line
    assert "It assumes no uid lost more than" in line and "cannot check" not in line, line


def test_declared_bounds_keep_the_upper_end_as_the_policys_assumption(engine: Engine) -> None:
    r = _run(engine, "SELECT cat, COUNT(*) AS n FROM od GROUP BY cat")
    got = interval_columns(r, {"n": "COUNT(*)"})
    line = line_of(r.notices, "COUNT(*)")
    if SAYS[1] not in line:  # (the over-cap alarm's false firing: at most 1e-3)
        assert got["n"] == [(False, False)] * 3, line
        assert "It assumes no uid lost more than" in line, line
        assert "could have lost more than that without the estimates showing it" in line, line


DRAWS = 60


def _held(engine: Engine) -> int:
    """In how many of DRAWS releases of t's COUNT (fresh noise each, the bounded SQL run once)
    the interval its columns show holds the truth."""
    prepared = engine.prepare("SELECT COUNT(*) FROM p WHERE cat = 't' AND amount >= 0", "analyst")
    session = SessionContext("analyst", Fraction(1), show_intervals=True)
    plan = make_plan(engine, prepared, session)
    assert isinstance(plan, Plan) and plan.bias and plan.bias[0].target.sign > 0
    rows = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows
    held = 0
    for _ in range(DRAWS):
        rel = release(plan, [tuple(r) for r in rows], [], None, 0.95, CSPRNG)
        (iv,) = [row[0] for row in rel.intervals]
        assert iv is not None, rel.notes
        held += iv[0] <= T_TRUTH <= iv[1]
    return held


def test_the_kept_low_end_holds_and_todays_rule_is_caught(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    need = binom_min_successes(DRAWS, 0.95, 1e-6)
    assert _held(engine) >= need
    monkeypatch.setattr(accuracy_text, "open_rows", lambda *a, **k: [])
    assert _held(engine) < need


# An average (newcomer30 F1): the units the releases cannot see may have lost any number of
# rows, each anywhere in the declared range, so they can pull the average anywhere in it, up or
# down: where the COUNT rule opens, neither end of AVG's interval holds (before: p's t average,
# about 150 [140, 160] against a truth of about 275, the whales' 400s left out).
AVG_SHAPES = [
    "SELECT AVG(amount) AS m FROM p WHERE cat = 't'",
    "SELECT cat, AVG(amount) AS m FROM p GROUP BY cat",
]


@pytest.mark.parametrize("sql", AVG_SHAPES, ids=range(len(AVG_SHAPES)))
def test_an_average_over_unseen_units_gives_neither_end(engine: Engine, sql: str) -> None:
    r = _run(engine, sql)
    got = interval_columns(r, {"m": "AVG(amount)"})
    line = line_of(r.notices, "AVG(amount)")
    assert r.rows and any(w in line for w in SAYS), line
    assert all(g == (True, True) for g in got["m"]), (got, line)
    if "cannot check it" in line:
        assert "the bounds were chosen from the data (auto), not declared" in line, line
        assert (
            "pull the average anywhere in amount's declared range 0 to 500, so the truth" in line
        ), line
        # what gives them back: R as a number (a declared total leaves an average's R chosen
        # for its noise: test_a_declared_total_gives_a_quantile_its_ends_not_an_average)
        assert "declare max_rows_per_unit in the policy as a number" in line, line


def test_declared_bounds_keep_an_averages_ends(engine: Engine) -> None:
    r = _run(engine, "SELECT cat, AVG(amount) AS m FROM od GROUP BY cat")
    got = interval_columns(r, {"m": "AVG(amount)"})
    line = line_of(r.notices, "AVG(amount)")
    if SAYS[1] not in line:  # (the over-cap alarm's false firing: at most 1e-3)
        assert got["m"] == [(False, False)] * 3, line
        assert "It assumes no uid lost more than" in line and "cannot check" not in line, line


def _avg_held(engine: Engine, truth: float) -> int:
    """In how many of DRAWS releases of t's AVG(amount) the interval its columns show holds
    the truth (an interval not shown holds nothing false)."""
    prepared = engine.prepare("SELECT AVG(amount) FROM p WHERE cat = 't'", "analyst")
    session = SessionContext("analyst", Fraction(1), show_intervals=True)
    plan = make_plan(engine, prepared, session)
    assert isinstance(plan, Plan)
    rows = engine.backend.run(engine.private_sql(prepared, plan.analysis), private=True).rows
    held = 0
    for _ in range(DRAWS):
        rel = release(plan, [tuple(r) for r in rows], [], None, 0.95, CSPRNG)
        (iv,) = [row[0] for row in rel.intervals]
        held += iv is None or iv[0] <= truth <= iv[1]
    return held


def test_an_averages_shown_interval_holds_and_the_old_rule_is_caught(
    engine: Engine, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Property: the AVG interval the columns show holds the truth in at least
    binom_min_successes(60, 0.95, 1e-6) of 60 releases (false failure <= 1e-6). Broken twin:
    the rule before newcomer30 F1 (no row opened for an average) shows about [140, 160]
    against about 275, holding it in none."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT avg(amount)::float8 FROM p WHERE cat = 't'").fetchone()
    assert row is not None
    truth = float(row[0])
    need = binom_min_successes(DRAWS, 0.95, 1e-6)
    assert _avg_held(engine, truth) >= need
    monkeypatch.setattr(accuracy_avg, "open_rows", lambda *a, **k: [])
    assert _avg_held(engine, truth) < need


def test_a_quantile_over_unseen_units_gives_neither_end(engine: Engine, dsn: str) -> None:
    """As an average (newcomer30 F1b): the whales' rows, left out beyond the count's cap, can
    pull a median anywhere in the declared range. Truth: t's median is above 300 (half its rows
    are the whales' 400); before, the interval sat near the ordinary rows' median."""
    r = _run(engine, "SELECT MEDIAN(amount) AS m FROM p WHERE cat = 't'")
    got = interval_columns(r, {"m": "MEDIAN(amount)"})
    assert got["m"] == [(True, True)], r.notices
    line = " ".join(n for n in r.notices if n.startswith("MEDIAN(amount):"))
    assert any(w in line for w in SAYS), r.notices
    if "cannot check it" in line:
        assert "pull MEDIAN(amount) anywhere in amount's declared range 0 to 500" in line, line
        assert "declare max_rows_per_unit_total in the policy" in line, line


def test_a_declared_total_gives_a_quantile_its_ends_not_an_average(engine: Engine) -> None:
    """What each notice advises gives the ends back (quant31: an AVG's advised the per-unit
    total, and with it declared advised max_rows_per_unit). Table ``ot``: ``o`` (at most 3 rows
    a uid) with max_rows_per_unit_total 3 and ``auto`` R and G. A MEDIAN's R is then the
    total's (the policy's assumption): both ends shown. An AVG's R is still chosen for its
    noise (at the median unit), so its ends stay NULL and it advises R as a number, which keeps
    them on ``od`` (test_declared_bounds_keep_an_averages_ends)."""
    r = _run(engine, "SELECT MEDIAN(amount) AS m FROM ot")
    got = interval_columns(r, {"m": "MEDIAN(amount)"})
    if not any(SAYS[1] in n for n in r.notices):  # (the over-cap alarm's false firing)
        assert got["m"] == [(False, False)], r.notices
    r = _run(engine, "SELECT AVG(amount) AS m FROM ot")
    got = interval_columns(r, {"m": "AVG(amount)"})
    line = line_of(r.notices, "AVG(amount)")
    if SAYS[1] not in line:  # (the over-cap alarm's false firing: at most 1e-3)
        assert got["m"] == [(True, True)], line
        assert "declare max_rows_per_unit in the policy as a number" in line, line


# A quantile's coverage (newcomer30 F1b): most of t's rows at or above 100 are the whales' 400s
# (2,000 of about 3,330), so its median is 400 whatever the definition (nearest rank or
# interpolated); the bounds keep a few of the whales' rows, and the interval sits near the
# ordinary rows' median (about 200), its ends moved past the left-out rows only up to the
# count's cap a unit. At epsilon 10 that interval is narrow (about [160, 240]); at epsilon 1 its
# upper end is the declared bound 500 (its selection aims past more rows than lie above it), which
# holds 400 by luck. Epsilon 10 still leaves k >= 1 (the over-cap count's noise reaches past one
# unit), so the rule opens every row.
Q_TRUTH = 400.0
Q_SHAPES = [
    "SELECT MEDIAN(amount) FROM p WHERE cat = 't' AND amount >= 100",
    "SELECT cat, MEDIAN(amount) FROM p WHERE amount >= 100 GROUP BY cat",
]


def _quantile_held(engine: Engine, sql: str) -> int:
    """In how many of DRAWS releases of ``sql``'s MEDIAN (fresh noise each, the bounded SQL run
    once, the bounds ``auto`` fixes without the data: R 1, G 3 from the declared keys; epsilon
    10) the interval its columns show in t's row holds the truth (an interval not shown holds
    nothing false)."""
    prepared = engine.prepare(sql, "analyst")
    session = SessionContext("analyst", Fraction(10), show_intervals=True)
    a = make_plan(engine, prepared, session).analysis
    resolved = apply_bounds(a, AutoBounds(policy_choices(a)))
    plan = make_plan(engine, prepared, session, analysis=resolved)
    # the premise: its left-out rows are counted up to a cap (quantile_targets), not disowned
    # whatever the releases say (quantile_disown)
    assert isinstance(plan, Plan) and plan.bias and plan.bias[0].target.key == a.measures[0].key
    rows = engine.backend.run(engine.private_sql(prepared, resolved), private=True).rows
    types, declared = engine.group_types(prepared, resolved), engine.declared_keys(resolved)
    held = 0
    for _ in range(DRAWS):
        rel = release(plan, [tuple(r) for r in rows], types, declared, 0.95, CSPRNG)
        (iv,) = [ivs[0] for key, ivs in zip(rel.groups, rel.intervals, strict=True)
                 if key in ([], ["t"])]  # fmt: skip
        held += iv is None or iv[0] <= Q_TRUTH <= iv[1]
    return held


@pytest.mark.parametrize("sql", Q_SHAPES, ids=["all rows", "by cat"])
def test_a_quantiles_shown_interval_holds_and_the_old_rule_is_caught(
    engine: Engine, dsn: str, sql: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Property: the MEDIAN interval the columns show (t's row) holds the truth in at least
    binom_min_successes(60, 0.95, 1e-6) = 46 of 60 releases (its stated level is 95% or more:
    false failure <= 1e-6). Broken twin: the rule before newcomer30 F1b (no row opened for a
    quantile, accuracy_few.quantile_open finding none) shows about [175, 230] (all rows) or
    [160, 240] (t's group) against 400, holding it in none."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY amount)::float8, "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY amount)::float8 "
            "FROM p WHERE cat = 't' AND amount >= 100"
        ).fetchone()
    assert row == (Q_TRUTH, Q_TRUTH)
    need = binom_min_successes(DRAWS, 0.95, 1e-6)
    assert _quantile_held(engine, sql) >= need
    monkeypatch.setattr(accuracy_text, "quantile_open", lambda *a, **k: None)
    assert _quantile_held(engine, sql) < need
