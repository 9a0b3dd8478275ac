"""A bound the guard refuses (too few units) falls back to the table's own rows per unit.

newcomer22 #10: under ``auto``, an ordinary filtered COUNT whose slice has too few units to
choose R at its epsilon kept R = 1 (the default): 15-70% low, explained only in the notice. A
unit has no more rows in a slice of the table (nor in a group of one) than in all of it, and
touches no more groups than it has rows: R chosen for the whole table (``SELECT COUNT(*) FROM
t``, stored in the ledger when it ran: a released value, reused as post-processing) bounds
them, so the fallback uses it when one is stored; else the default stays and the notice says
the answer counts one row per unit and what would give a bound that fits.

Data: ``t``, 3,000 units with 3 rows each, g in two declared keys. Deterministic (a zero-noise
engine: the guard on the exact unit count, the answer without noise): a slice of 200 units is
below the guard at epsilon 1 (about 107 / 0.2 units needed), the whole table is not.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.result import Result
from dpsql.session import SessionContext
from tests.helpers import EXACT
from tests.policies import build_policy, private_table

POLICY = build_policy(
    base={},
    version=1,
    dataset="wider",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    analysts={"analyst": {"budget": {"epsilon": 100, "delta": 1e-3}}},
    tables={
        "public.t": private_table(
            "uid",
            {
                "g": {"type": "text", "keys": ["x", "y"]},
                "n": {"type": "integer", "bounds": [0, 10000]},
            },
            rows=None,
            groups=None,
        )
    },
)
SESSION = SessionContext(analyst="analyst", epsilon=Fraction(1), mechanism="laplace")


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("wider")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT u AS uid, (ARRAY['x','y'])[1 + r % 2] AS g, u AS n "
            "FROM generate_series(1, 3000) u, generate_series(1, 3) r"
        )
    return dsn


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    p = POLICY
    ledger = Ledger.open(dsn, p, schema=f"dpsql_wf{uuid.uuid4().hex[:8]}")
    e = Engine(p, dsn, ledger, pool_size=1, noise=EXACT)
    yield e
    e.close()
    ledger.close()


def ask(engine: Engine, sql: str) -> Result:
    return engine.execute(engine.prepare(sql, "analyst"), SESSION)


def explain(engine: Engine, sql: str) -> dict[str, Any]:
    doc: dict[str, Any] = ask(engine, f"EXPLAIN (FORMAT JSON) {sql}").rows[0][0][0]
    return doc


def test_a_refused_choice_keeps_the_tables_own_rows_per_unit(engine: Engine) -> None:
    """Property: after the whole table's R is stored, a filtered COUNT (and a grouped one) whose
    own choice the guard refuses counts every row of its units (R >= 3: the exact answer), and
    says where its bound came from; before it, the default R = 1 counts one row a unit and the
    notice says so and how to get a bound that fits. The twin (defaults only) answers 200."""
    first = ask(engine, "SELECT COUNT(*) FROM t WHERE n <= 200")
    # R = 1: one row of each of 200 units kept, and the column adds the estimate of the other
    # 400 (fallback26: exact at zero noise)
    assert first.rows == [(600,)], first.rows
    assert "they keep at most one row (and one group) per uid" in first.notices[0], first.notices
    assert "adds a noisy estimate of what they left out" in first.notices[0], first.notices
    assert "without its filter" in first.notices[0], first.notices
    whole = ask(engine, "SELECT COUNT(*) FROM t")
    assert whole.rows == [(9000,)], whole.rows  # chosen: R >= 3
    got = ask(engine, "SELECT COUNT(*) FROM t WHERE n <= 201")
    assert got.rows == [(603,)], (got.rows, got.notices)
    assert "the table's own rows per uid over all its rows" in got.notices[0], got.notices
    # the first slice's fallback (R = 1, stored for a retry at that epsilon) gives way to it too
    again = ask(engine, "SELECT COUNT(n) FROM t WHERE n <= 200")
    assert again.rows == [(600,)], (again.rows, again.notices)
    grouped = ask(engine, "SELECT g, COUNT(*) FROM t WHERE n <= 202 GROUP BY g ORDER BY g")
    # each unit: one row in x, two in y (r = 1, 3 -> y; r = 2 -> x)
    assert grouped.rows == [("x", 202), ("y", 404)], (grouped.rows, grouped.notices)


def test_the_advice_gives_a_new_answer_to_the_same_statement(engine: Engine) -> None:
    """newcomer23 #4: the fallback's advice (run SELECT COUNT(*) over the whole table: its rows
    per unit are then reused) must work for the statement it was printed under. Property: asked
    again after the table's R is stored, the same statement is measured again with it (charged,
    the exact 603 rows, its MEDIAN's words from the bounds it was measured with: 3 rows per uid,
    not the stored answer's 1) and says so; asked once more, that new answer is a free repeat.
    A repeat with unchanged bounds stays free (the first two asks). Before: the third ask
    returned the R = 1 answer (201) free, its MEDIAN notice recomputed with R = 3."""
    sql = "SELECT COUNT(*), MEDIAN(n) FROM t WHERE n <= 201"
    first = ask(engine, sql)
    assert first.rows[0][0] == 201, first.rows  # R = 1: one row of each of 201 units
    assert ask(engine, sql).cached  # the same bounds: a free repeat
    ask(engine, "SELECT COUNT(*) FROM t")  # the advice: R >= 3 for the table, stored
    assert explain(engine, sql)["Budget"]["Free Repeat"] is False  # EXPLAIN says it too
    got = ask(engine, sql)
    assert not got.cached and got.epsilon_spent > 0, got.notices
    assert got.rows[0][0] == 603, (got.rows, got.notices)
    assert any(n.startswith("measured again:") for n in got.notices), got.notices
    median = next(n for n in got.notices if n.startswith("MEDIAN(n)"))
    assert "keep at most 1 row" not in median, median
    assert explain(engine, sql)["Budget"]["Free Repeat"] is True
    repeat = ask(engine, sql)
    assert repeat.cached and repeat.epsilon_spent == 0 and repeat.rows == got.rows
    assert not any(n.startswith("measured again:") for n in repeat.notices), repeat.notices


def test_the_notice_leads_with_what_the_fallback_left_out(engine: Engine) -> None:
    """newcomer23 #16: the R = 1 fallback's COUNT (551 for 1,097 rows) said "about 561 rows
    (102% of the answer)" only deep in its notice; truth25 then led with a "left out at least"
    line. fallback26 (option C): the column itself adds the estimate, so the first line after
    the bounds' says what the value is (the rows kept plus about 600 left out: zero noise, the
    estimate is exact) and no line calls it low; once the table's R keeps every row, no lead
    line either. Fails before (the lead line, and 300)."""
    r = ask(engine, "SELECT COUNT(*) FROM t WHERE n <= 300")
    # fallback26: the fixed defaults' column adds the estimate of what they left out (exact
    # at zero noise): it is not low, and no lead line says it is (the lead line itself:
    # test_lead_bound.py, declared R = 1); its line says what it adds
    assert r.rows == [(900,)], r.rows
    assert not any(n.startswith("left out by") for n in r.notices), r.notices
    first = next(n for n in r.notices if not n.startswith("contribution bounds:"))
    assert first.startswith(
        "COUNT(*): 95% interval: its value is what the bounds kept (at most 1 row per uid: the "
        "fixed defaults, too few uid values to choose bounds at this epsilon) plus a noisy "
        "estimate of what they left out (half of epsilon went to it): about 600 rows; "
    ), r.notices
    ask(engine, "SELECT COUNT(*) FROM t")  # R >= 3 stored: the same slice keeps every row
    r = ask(engine, "SELECT COUNT(*) FROM t WHERE n <= 301")
    assert r.rows == [(903,)], (r.rows, r.notices)
    assert not any(n.startswith("left out by") for n in r.notices), r.notices


def test_the_advice_is_what_serves_a_join(engine: Engine) -> None:
    """newcomer24 #4: the fallback's advice (SELECT COUNT(*) over the whole table: its rows per
    unit reused) serves one table's COUNT or SUM, but nothing reads a whole-table R for a join
    (whole_table_rows) nor where nothing is stored: there the notice advised it anyway, and the
    COUNT(*) changed nothing. Property: a join's fallback advises a higher epsilon or a wider
    filter, not that COUNT(*) nor a per-unit total (one table's); still R = 1 after it. Fails
    before (the COUNT(*) advice)."""
    sql = "SELECT COUNT(*) FROM t a JOIN t b ON a.uid = b.uid WHERE a.n <= 150"
    first = ask(engine, sql)
    bounds = first.notices[0]
    assert "too few uid values to choose reliably" in bounds, first.notices
    assert "raise dpsql.epsilon, or ask about more uid values (a wider filter)" in bounds, bounds
    assert "SELECT COUNT(*) over the whole table" not in bounds, bounds
    assert "max_rows_per_unit_total" not in bounds, bounds
    ask(engine, "SELECT COUNT(*) FROM t")  # stored: serves the table's own slices only
    again = ask(engine, "SELECT COUNT(*) FROM t a JOIN t b ON a.uid = b.uid WHERE a.n <= 151")
    assert "SELECT COUNT(*) over the whole table" not in again.notices[0], again.notices


def test_a_union_is_measured_again_with_the_tables_rows_per_unit(engine: Engine) -> None:
    """The same for a statement of several parts (execute/tree_leaves.py): its leaves' repeat
    key depended on their statement and epsilon only, so after the table's R was stored the
    UNION's leaves still answered 201 and 200 (R = 1) free. Property: asked again after it,
    the leaves are measured again with it (charged, the exact 603 and 600), and once more
    free with those numbers; a repeat with unchanged bounds stays free (the first two asks)."""
    sql = (
        "SELECT COUNT(*) AS c FROM t WHERE n <= 201 "
        "UNION ALL SELECT COUNT(*) AS c FROM t WHERE n > 2800"
    )
    first = ask(engine, sql)
    # R = 1 in each part, the column adding what it left out (fallback26: exact at zero noise)
    assert sorted(first.rows) == [(600,), (603,)], first.rows
    assert ask(engine, sql).epsilon_spent == 0  # the same bounds: free
    ask(engine, "SELECT COUNT(*) FROM t")  # R >= 3 for the table, stored
    got = ask(engine, sql)
    assert got.epsilon_spent > 0, got.notices
    assert sorted(got.rows) == [(600,), (603,)], (got.rows, got.notices)
    again = [n for n in got.notices if "measured again:" in n]
    assert len(again) == 2, got.notices  # one in each part's lines
    repeat = ask(engine, sql)
    assert repeat.epsilon_spent == 0 and sorted(repeat.rows) == sorted(got.rows)


def test_the_flat_key_names_the_answer_measured_again(engine: Engine) -> None:
    """fetch_stored links a statement's free-repeat key to a stored release by the flat path's
    key (repeat_keys.flat_key). After a re-measure under the table's stored R, the statement's
    answer is stored under its bounds' key: flat_key must name that one (603 rows), not the
    plain key, whose older answer (R = 1, the fallback) a link would have pointed at."""
    import json

    from dpsql.execute.noise import Release
    from dpsql.execute.prepared import PrivateQuery
    from dpsql.execute.repeat_keys import flat_key

    sql = "SELECT COUNT(*) FROM t WHERE n <= 201"
    # (the fallback's column adds what R = 1 left out, fallback26: the same 603 at zero noise;
    # the answers differ in the bounds stored with them)
    assert ask(engine, sql).rows == [(603,)]
    ask(engine, "SELECT COUNT(*) FROM t")  # R >= 3 for the table, stored
    got = ask(engine, sql)
    assert got.rows == [(603,)] and got.epsilon_spent > 0  # measured again with it
    prepared = engine.prepare(sql, "analyst")
    assert isinstance(prepared, PrivateQuery)
    assert engine.ledger is not None
    raw = engine.ledger.peek("analyst", flat_key(engine, prepared, SESSION))  # type: ignore[arg-type]
    assert raw is not None
    stored = Release.from_json(json.loads(raw))
    assert stored.stats == [[603]] and stored.bounds is not None
    assert "fallback" not in stored.bounds and "rows:=1" not in stored.bounds, stored.bounds
