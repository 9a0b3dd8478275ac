"""Data-gated errors: whether a private query fails must not depend on one row's value.

The attack (found on the demo): a constant *expression* folds to a huge number (a balanced product
of 131 copies of ``1e1000`` and one ``1e69`` is 10^131069, NUMERIC's limit is 10^131072), and
``CASE WHEN amount > T THEN (amount + 1000) * C ELSE 0 END > 0`` overflows only when the row's
amount is above T: answered or "the private query failed", a noiseless bit per statement, and a
binary search reads one person's value. The rewrite (dpsql.sql.rewrite.make_total) now clamps every
operand of arithmetic over a column, constants included, so no row can make it overflow.

Each probe runs on two neighbouring databases (one row's value differs, on either side of the
probe's threshold); the outcome class (answered, or the SQLSTATE of the refusal/failure) must be
the same on both. Deterministic: no noise is involved in the outcome class (the engines draw from
the zero-noise source, whose answers are never compared here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError, UpstreamError
from dpsql.session import SessionContext
from tests.helpers import EXACT, ledgered_engine
from tests.policies import PolicyMaker, private_table


def balanced(factors: list[str]) -> str:
    """``f1 * f2 * ...`` as a balanced tree of products (about log2(n) levels deep)."""
    if len(factors) == 1:
        return factors[0]
    m = len(factors) // 2
    return f"({balanced(factors[:m])} * {balanced(factors[m:])})"


HUGE = balanced(["1e1000"] * 131 + ["1e69"])  # folds to 1e131069, just below NUMERIC's limit
HUGE_TEXT = "'1e131069'"  # a string constant PostgreSQL reads as a number

# The target row (u = 1) has x = LOW in one database and HIGH in its neighbour; every probe gates
# on x > 50 (or on the row's other columns, which differ the same way).
LOW, HIGH = 10, 90
PROBES = {
    "huge constant product": (
        f"SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN (x + 1000) * {HUGE} ELSE 0 END > 0"
    ),
    "huge constant product, parenthesised on the left": (
        f"SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN {HUGE} * (x + 1000) ELSE 0 END > 0"
    ),
    "huge constant quotient": (
        f"SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN x / (1 / {HUGE}) ELSE 0 END > 0"
    ),
    "huge constant in SUM": (
        f"SELECT SUM(x) FROM t WHERE (CASE WHEN x > 50 THEN (x + 1000) * {HUGE} ELSE 0 END) > 0"
    ),
    "huge constant in a group key": (
        f"SELECT COUNT(*) FROM t GROUP BY CASE WHEN x > 50 THEN (x + 1000) * {HUGE} ELSE 0 END > 0"
    ),
    "huge string constant": (
        f"SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN (x + 1000) * {HUGE_TEXT} "
        "ELSE 0 END > 0"
    ),
    "huge constant not folded (now())": (
        "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN (x + 1000) * (extract(epoch FROM "
        f"now()) * {balanced(['1e1000'] * 131 + ['1e60'])}) ELSE 0 END > 0"
    ),
    "integer overflow of a constant product": (
        "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN q * (2147483647 * 1) ELSE 0 END > 0"
    ),
}
GATE = "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN {} ELSE NULL END IS NOT NULL"
# now() and current_date are stable: evaluated for each row that reaches them, not folded
TIME_PROBES = {
    "interval times a number": "now() + INTERVAL '100 years' * 3000",
    "a sum of intervals times a number": (
        "now() + (INTERVAL '100 years' + INTERVAL '100 years') * 1500"
    ),
    "interval divided by a small number": "now() + INTERVAL '100 years' / 0.0003",
    "days added to current_date": "current_date + 2147483647",
    "days added to a cast of now()": "CAST(now() AS date) + 2147483647",
    "days subtracted from current_date": "current_date - 2000000000",
    "computed days": "current_date + CAST(extract(epoch FROM now()) * 1e300 AS int)",
    "to_char of an overflowing now()": "to_char(now() + INTERVAL '100 years' * 3000, 'YYYY')",
    "date_trunc of an overflowing now()": (
        "date_trunc('month', now() + INTERVAL '100 years' * 3000)"
    ),
    "extract of an overflowing now()": "extract(epoch FROM now() + INTERVAL '100 years' * 3000)",
    "a string interval": "now() - '300000 years'",
    "many small intervals": "now() + " + " + ".join(["INTERVAL '100 years'"] * 25),
    "many small day counts": "current_date + " + " + ".join(["36525"] * 25),
}
PROBES.update({f"time: {k}": GATE.format(v) for k, v in TIME_PROBES.items()})
# a date after 294276 AD in the data (the high database's unit 1): converting it to a timestamp
# failed for that row only
PROBES.update(
    {
        "far date: cast to timestamp": (
            "SELECT COUNT(*) FROM t WHERE CAST(d AS timestamp) > TIMESTAMP '2020-01-01'"
        ),
        "far date: cast to timestamptz": GATE.format("CAST(d AS timestamptz)"),
        "far date: date_trunc": "SELECT COUNT(*) FROM t GROUP BY date_trunc('month', d)",
        "far date: date_trunc gated": GATE.format("date_trunc('year', (d))"),
        "far date: to_char": "SELECT COUNT(*) FROM t GROUP BY to_char(d, 'YYYY')",
        "far date: extract": "SELECT COUNT(*) FROM t GROUP BY extract(epoch FROM d)",
        "far date: date_part": "SELECT COUNT(*) FROM t GROUP BY date_part('year', d)",
        "far date: date_part gated": GATE.format("date_part('epoch', d)"),
        # a date quantile reads its epoch (date_part, a timestamp) of a column with bounds
        "far date: MIN": "SELECT MIN(db) FROM t",
        "far date: MEDIAN": "SELECT MEDIAN(db) FROM t",
        "far date: comparison with now()": "SELECT COUNT(*) FROM t WHERE d > now()",
        # CASE, COALESCE, GREATEST and LEAST give a date beside a timestamp the timestamp type:
        # the date was converted, and failed for that row only (review21)
        "far date: COALESCE with a timestamp column": (
            "SELECT COUNT(*) FROM t WHERE COALESCE(d, ts) > now()"
        ),
        "far date: GREATEST with a timestamp constant": (
            "SELECT COUNT(*) FROM t WHERE GREATEST(d, TIMESTAMP '2000-01-01') > now()"
        ),
        "far date: LEAST with now()": "SELECT COUNT(*) FROM t WHERE LEAST(d, now()) > now()",
        "far date: CASE with a timestamp": (
            "SELECT COUNT(*) FROM t WHERE CASE WHEN q > 50 THEN d ELSE ts END > now()"
        ),
        "far date: nested in COALESCE": (
            "SELECT COUNT(*) FROM t WHERE COALESCE(CASE WHEN q > 50 THEN d END, ts) > now()"
        ),
        "far date: COALESCE in a group key": (
            "SELECT COUNT(*) FROM t GROUP BY COALESCE(d, localtimestamp) > now()"
        ),
        "far date: GREATEST in SUM": (
            "SELECT SUM(x) FROM t WHERE GREATEST(d, ts) > TIMESTAMP '2000-01-01'"
        ),
        # a timestamp of 4714 BC truncated to its month (or year...) falls before the first one
        "far past: date_trunc month": "SELECT COUNT(*) FROM t GROUP BY date_trunc('month', ts)",
        "far past: date_trunc millennium gated": GATE.format("date_trunc('millennium', ts)"),
        "far past: to_char": GATE.format("to_char(ts, 'YYYY-MM')"),
    }
)
# a NUMERIC meeting a float is converted to it (dpsql.sql.rewrite.float_safe): a value beyond
# the float's range (or below its smallest) failed for that row only, and a constant factor moved
# the threshold anywhere (x * 1e307 overflows double precision for x > 18)
PROBES.update(
    {
        "float overflow: a product compared with a double": (
            "SELECT COUNT(*) FROM t WHERE x * 1e307 > 1.5::float8"
        ),
        "float overflow: a double compared with a product": (
            "SELECT COUNT(*) FROM t WHERE CAST(q AS double precision) < x * 1e307"
        ),
        "float overflow: BETWEEN doubles": (
            "SELECT COUNT(*) FROM t WHERE x * 1e307 BETWEEN 1.5::float8 AND 2"
        ),
        "float overflow: IN a list of doubles": (
            "SELECT COUNT(*) FROM t WHERE x * 1e307 IN (1.5::float8, 2.5::float8)"
        ),
        "float overflow: IS DISTINCT FROM a double": (
            "SELECT COUNT(*) FROM t WHERE x * 1e307 IS DISTINCT FROM 1.5::float8"
        ),
        "float overflow: NULLIF with a double": (
            "SELECT COUNT(*) FROM t WHERE NULLIF(x * 1e307, 1.5::float8) IS NULL"
        ),
        "float overflow: COALESCE with a double": (
            "SELECT COUNT(*) FROM t WHERE COALESCE(x * 1e307, 1.5::float8) > 1"
        ),
        "float overflow: GREATEST with a real": (
            "SELECT COUNT(*) FROM t WHERE GREATEST(x * 1e37, 1.5::real) > 1"
        ),
        "float overflow: CASE with a real": (
            "SELECT COUNT(*) FROM t WHERE CASE WHEN q > 0 THEN x * 1e37 ELSE 1.5::real END > 1"
        ),
        "float overflow: in a group key": (
            "SELECT COUNT(*) FROM t GROUP BY x * 1e307 > 1.5::float8"
        ),
        "float overflow: a row of values compared with doubles": (
            "SELECT COUNT(*) FROM t WHERE (x * 1e307, q) = (1.5::float8, 90)"
        ),
        "float overflow: a row of values IN rows of doubles": (
            "SELECT COUNT(*) FROM t WHERE (x * 1e307, q) IN ((1.5::float8, 1), (2.5::float8, 2))"
        ),
        # review21: a simple CASE compares its operand with each WHEN value; sign() of a
        # double is a double
        "float overflow: simple CASE of a product, WHEN a double": (
            "SELECT COUNT(*) FROM t WHERE CASE x * 1e307 WHEN 1.5::float8 THEN 1 ELSE 0 END = 1"
        ),
        "float overflow: simple CASE of a double, WHEN a product": (
            "SELECT COUNT(*) FROM t WHERE CASE CAST(q AS double precision) WHEN x * 1e307 "
            "THEN 1 ELSE 0 END = 1"
        ),
        "float overflow: simple CASE in a group key": (
            "SELECT COUNT(*) FROM t GROUP BY CASE x * 1e307 WHEN 1.5::float8 THEN 1 END"
        ),
        "float overflow: simple CASE in SUM": (
            "SELECT SUM(CASE x * 1e307 WHEN 1.5::float8 THEN 1 ELSE 0 END) FROM t"
        ),
        "float overflow: a product compared with sign() of a double": (
            "SELECT COUNT(*) FROM t WHERE x * 1e307 > sign(CAST(q AS double precision))"
        ),
        "float underflow: a tiny product compared with a double": (
            "SELECT COUNT(*) FROM t WHERE (CASE WHEN x > 50 THEN x ELSE 0 END) * 1e-330 "
            "> 1.5::float8"
        ),
    }
)
# constructs that must stay answered (the refusals above must not catch them)
ANSWERED = [
    "SELECT COUNT(*) FROM t WHERE d >= current_date - 30",
    "SELECT COUNT(*) FROM t WHERE ts > now() - INTERVAL '3 months' - INTERVAL '1 day'",
    "SELECT COUNT(*) FROM t WHERE d > now() + INTERVAL '-12 month'",
    "SELECT COUNT(*) FROM t WHERE d < DATE '2025-01-01' + 36525",
    "SELECT COUNT(*) FROM t WHERE x * (extract(epoch FROM now()) * 1e1000) > 0",
    "SELECT COUNT(*) FROM t GROUP BY date_trunc('month', d)",
]


def _load(dsn: str, target: int) -> None:
    """40 units, one row each; unit 1 holds ``target`` (and, in the high database, a date past
    the timestamp range: date columns reach 5874897 AD, timestamps only 294276 AD)."""
    far = "2020-01-01" if target == LOW else "300000-01-01"
    past = "2020-01-01 10:00" if target == LOW else "4714-11-25 10:00 BC"  # the first timestamps
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (u integer NOT NULL, x numeric, q integer, d date, ts timestamp, "
            "s text, db date)"
        )
        conn.execute(
            "INSERT INTO t SELECT u, CASE WHEN u = 1 THEN %s ELSE 5 END, "
            "CASE WHEN u = 1 THEN %s ELSE 5 END, "
            "CASE WHEN u = 1 THEN %s::date ELSE DATE '2020-01-01' END, "
            "CASE WHEN u = 1 THEN %s::timestamp ELSE TIMESTAMP '2020-01-01 10:00' END, 'abc', "
            "CASE WHEN u = 1 THEN %s::date ELSE DATE '2020-01-01' END "
            "FROM generate_series(1, 40) u",
            (target, target, far, past, far),
        )


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Engine]]:
    columns = {
        "x": {"type": "numeric", "bounds": [0, 100]},
        "q": {"type": "integer", "bounds": [0, 100]},
        "d": {"type": "date"},
        "ts": {"type": "timestamp"},
        "s": {"type": "text"},
        "db": {"type": "date", "bounds": ["2019-01-01", "2021-12-31"]},  # d, with bounds
    }
    pf = make_policy("gated", tables={"public.t": private_table("u", columns)}, public_tables=[])
    engines = []
    for target in (LOW, HIGH):
        dsn = make_db("gated")
        _load(dsn, target)
        engines.append(Engine(pf.policy, dsn, pool_size=1, noise=EXACT))
    yield engines[0], engines[1]
    for e in engines:
        e.close()


def outcome(engine: Engine, sql: str, params: tuple[Any, ...] = ()) -> str:
    """'answered', or the SQLSTATE of the refusal or failure."""
    try:
        p = engine.prepare(sql)
        engine.execute(p, SessionContext(analyst="analyst"), params)
    except DpsqlError as e:
        return e.sqlstate
    return "answered"


@pytest.mark.parametrize("name", sorted(PROBES))
def test_outcome_does_not_depend_on_one_row(neighbours: tuple[Engine, Engine], name: str) -> None:
    low, high = neighbours
    sql = PROBES[name]
    assert outcome(low, sql) == outcome(high, sql)


@pytest.mark.parametrize("name", sorted(TIME_PROBES))
def test_unbounded_date_arithmetic_is_refused(neighbours: tuple[Engine, Engine], name: str) -> None:
    """Refused when prepared (before anything is charged), the same on both databases: the
    analyzer's 0A000, or PostgreSQL's own class-22 error for the overflowing constant, from a
    probe that reads no table (dpsql.execute.constant_probe), never an error of the query."""
    low, high = neighbours
    sql = PROBES[f"time: {name}"]
    got = outcome(low, sql)
    assert got == outcome(high, sql) and (got == "0A000" or got.startswith("22")), got
    with pytest.raises(DpsqlError) as e:
        low.prepare(sql)
    assert not isinstance(e.value, UpstreamError), e.value
    assert "sqlglot" not in e.value.message and (e.value.hint or e.value.detail)


@pytest.mark.parametrize("sql", ANSWERED)
def test_bounded_date_arithmetic_is_answered(neighbours: tuple[Engine, Engine], sql: str) -> None:
    low, high = neighbours
    assert outcome(low, sql) == outcome(high, sql) == "answered"


@pytest.mark.parametrize("name", ["huge constant product", "huge string constant"])
def test_huge_constants_are_answered(neighbours: tuple[Engine, Engine], name: str) -> None:
    """Not refused either: the operand is clamped into [-1e1000, 1e1000] like any other."""
    low, high = neighbours
    assert outcome(low, PROBES[name]) == outcome(high, PROBES[name]) == "answered"


def test_a_constant_that_overflows_by_itself_fails_whatever_the_data(
    neighbours: tuple[Engine, Engine],
) -> None:
    """132 copies of 1e1000 overflow while PostgreSQL folds the constant, before any row."""
    low, high = neighbours
    sql = (
        "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN x * "
        f"{balanced(['1e1000'] * 132)} ELSE 0 END > 0"
    )
    assert outcome(low, sql) == outcome(high, sql) != "answered"


def test_bound_parameters_are_clamped_too(neighbours: tuple[Engine, Engine]) -> None:
    """$1 is replaced by its literal (checked again: at most 200 characters); a product with a
    parameter is a constant expression, clamped like one."""
    low, high = neighbours
    sql = (
        "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 50 THEN (x + 1000) * "
        f"{balanced(['1e1000'] * 131 + ['$1'])} ELSE 0 END > 0"
    )
    params = (Decimal("1e69"),)
    assert outcome(low, sql, params) == outcome(high, sql, params) == "answered"


# --- the ledger: a failure that may depend on the data is charged in full, and logged ----------


@pytest.fixture(scope="module")
def failing_view(make_db: Callable[[str], str]) -> str:
    """A database whose private table is a view that divides by zero on one row (u = 1): a
    data-dependent failure dpsql can't rewrite away (it happens inside the view)."""
    dsn = make_db("gatedview")
    _load(dsn, LOW)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE VIEW v AS SELECT u, x, 100 / (x - {LOW}) AS y FROM t")
        # a program limit (54000) reached on one row only: a text of 1 GB or more (as `||` of a
        # huge stored value; repeat() refuses the length before allocating anything)
        conn.execute(
            "CREATE VIEW v54 AS SELECT u, x, length(repeat('x', CASE WHEN x = "
            f"{LOW} THEN 1073741824 ELSE 1 END))::numeric AS y FROM t"
        )
    return dsn


@pytest.mark.parametrize("bounds", ["fixed", "auto"])
@pytest.mark.parametrize(("view", "state"), [("v", "22000"), ("v54", "54000")])
def test_a_data_dependent_failure_is_not_refunded(
    failing_view: str,
    make_policy: PolicyMaker,
    caplog: pytest.LogCaptureFixture,
    bounds: str,
    view: str,
    state: str,
) -> None:
    """Before, with ``auto`` bounds, the answer's reservation (0.8 of the statement's epsilon) was
    refunded when the bound-choice query failed: probing cost 0.2 of the price. Now every
    reservation of the statement stays charged, and the failure is logged at ERROR with the
    statement's fingerprint."""
    rows = 1 if bounds == "fixed" else "auto"
    columns = {
        "x": {"type": "numeric", "bounds": [0, 100]},
        "y": {"type": "numeric", "bounds": [-100, 100]},
    }
    pf = make_policy(
        f"gated{view}{bounds}",
        tables={f"public.{view}": private_table("u", columns, rows=rows, groups=1)},
        public_tables=[],
    )
    s = SessionContext(analyst="analyst")
    with ledgered_engine(pf.policy, failing_view, "dpsql_gated") as engine:
        p = engine.prepare(f"SELECT SUM(y) FROM {view}")
        with caplog.at_level(logging.ERROR, logger="dpsql.budget.ledger"):
            with pytest.raises(DpsqlError) as e:
                engine.execute(p, s)
        assert e.value.sqlstate == state
        assert "stays spent" in (e.value.detail or "")  # and the analyst is told so
        history = engine.execute(engine.prepare("SELECT * FROM dpsql.history"), s).rows
        states = [r[8] for r in history]
        assert states and set(states) == {"committed"}, history
        assert sum(Fraction(r[4]) for r in history) >= 1  # the statement's whole epsilon
        logged = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert logged and all(p.fingerprint in r.getMessage() for r in logged)
        assert state in logged[0].getMessage()
