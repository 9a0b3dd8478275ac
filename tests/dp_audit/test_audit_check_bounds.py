"""Privacy audit: a NOT VALID CHECK constraint proves nothing, so the released SUM's sensitivity
stays the declared one.

The rewrite reads a column unclamped only when validated CHECK constraints prove its values lie
in the declared bounds (dpsql.sql.check_bounds). The release's Laplace noise is calibrated to the
declared L1 sensitivity (one row per unit here: max(|lo|, |hi|) = 500, plus the output grid's slack), so its privacy rests on
one property of the SQL: removing one unit moves the SUM by at most 500.

Checked exactly (deterministic, no noise: false failure 0): D has 40 units, ``uid`` the PRIMARY
KEY, ``amount`` declared [0, 500]; two "whales" hold 100,000 and 5,000, loaded before ``CHECK
(amount >= 0 AND amount <= 500) NOT VALID`` was added (PostgreSQL checks new rows only). For
every unit, the private SQL (planned on D) runs on D and on D without it (a DELETE rolled back);
the SUM's change must stay within the plan's sensitivity, and a unit at 500 reaches it (tight).

Broken twin: the same engine reading NOT VALID constraints as proofs (the catalog read without
``convalidated``, the text's ``NOT VALID`` ignored): its SQL reads the whale's 100,000
unclamped, moves the SUM by 100,000 = 200 times the sensitivity, and is caught. The same twin on
the validated constraint of a table without the whales passes (the check is not vacuous).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.execute import checked_bounds, unique_units
from dpsql.execute.prepared import PrivateQuery
from dpsql.execute.private_sql import salted
from dpsql.session import SessionContext
from dpsql.sql import check_bounds
from dpsql.sql.plan import Plan
from tests.policies import build_policy

COLUMNS = {
    "uid": {"type": "integer", "identifier": True},
    "amount": {"type": "numeric", "bounds": [0, 500], "clamp": "bounds"},
}
POLICY = build_policy(
    base={},
    version=1,
    dataset="audit_checks",
    defaults={"epsilon": 1.0, "max_epsilon": 10.0, "delta": 1e-6},
    tables={
        f"public.{t}": {
            "privacy_unit": "uid",
            "max_rows_per_unit": 1,
            "max_groups_per_unit": 1,
            "columns": COLUMNS,
        }
        for t in ("acc", "clean")
    },
)
UNITS = 40
WHALES = {0: 100_000, 13: 5_000}
BOTH = "CHECK (amount >= 0 AND amount <= 500)"


def _value(u: int) -> int:
    return WHALES.get(u, 500 if u % 7 == 1 else u % 300)


@pytest.fixture(scope="module")
def dsn(make_db: Callable[[str], str]) -> str:
    dsn = make_db("audit_checks")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in ("acc", "clean"):
            conn.execute(f"CREATE TABLE {t} (uid integer PRIMARY KEY, amount numeric)")
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {t} VALUES (%s, %s)",
                    [(u, _value(u) if t == "acc" else u % 300) for u in range(UNITS)],
                )
        conn.execute(f"ALTER TABLE acc ADD CONSTRAINT acc_c {BOTH} NOT VALID")
        conn.execute(f"ALTER TABLE clean ADD CONSTRAINT clean_c {BOTH}")
    return dsn


def _clear() -> None:
    unique_units._state_sql.cache_clear()
    unique_units._recheck_sql.cache_clear()
    check_bounds._bounds.cache_clear()


@pytest.fixture
def twin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The broken twin: NOT VALID constraints taken as proofs."""
    trusting = checked_bounds.CHECKS_SQL.as_string(None).replace(" AND k.convalidated", "")
    assert trusting != checked_bounds.CHECKS_SQL.as_string(None)
    monkeypatch.setattr(checked_bounds, "CHECKS_SQL", psycopg.sql.SQL(trusting))  # type: ignore[arg-type]
    monkeypatch.setattr(
        check_bounds,
        "_CHECK",
        re.compile(r"^CHECK \((?P<expr>.*)\)(?P<noinherit> NO INHERIT)?( NOT VALID)?$", re.DOTALL),
    )
    _clear()
    yield
    monkeypatch.undo()
    _clear()


def _max_change(dsn: str, table: str) -> tuple[Fraction, Fraction, tuple[str, ...]]:
    """The largest change of the released SUM's measure over removing one unit, the plan's L1
    sensitivity of it, and the columns the plan read unclamped."""
    engine = Engine(POLICY, dsn, pool_size=1)
    try:
        prepared = engine.prepare(f"SELECT SUM(amount) FROM {table}")
        assert isinstance(prepared, PrivateQuery)
        plan = engine.plan(prepared, SessionContext(analyst=None, epsilon=Fraction(1)))
        assert isinstance(plan, Plan)
        text = salted(engine.private_sql(prepared, plan.analysis))
        sensitivity = Fraction(plan.measures[0].mechanism.sensitivity)
        proven = plan.analysis.proven_bounds
    finally:
        engine.close()
    with psycopg.connect(dsn) as conn:
        full = Fraction(str(conn.execute(text).fetchone()[0]))  # type: ignore[index]
        worst = Fraction(0)
        for u in range(UNITS):
            conn.execute(f"DELETE FROM {table} WHERE uid = %s", (u,))
            less = Fraction(str(conn.execute(text).fetchone()[0]))  # type: ignore[index]
            conn.rollback()
            worst = max(worst, abs(full - less))
    return worst, sensitivity, proven


def test_not_valid_constraint_keeps_the_declared_sensitivity(dsn: str) -> None:
    worst, sensitivity, proven = _max_change(dsn, "acc")
    assert proven == ()
    assert 500 <= sensitivity < 501  # the declared 500 (and the output grid's rounding slack)
    assert worst == 500  # a unit at 500 (or a clamped whale) reaches the declared bound


def test_the_twin_trusting_not_valid_constraints_is_caught(dsn: str, twin: None) -> None:
    worst, sensitivity, proven = _max_change(dsn, "acc")
    assert proven == ("amount",)
    assert worst == 100_000 and worst > sensitivity


def test_the_twin_on_a_validated_constraint_stays_within(dsn: str, twin: None) -> None:
    """Not vacuous: where the constraint holds, reading values unclamped is within the bound."""
    worst, sensitivity, proven = _max_change(dsn, "clean")
    assert proven == ("amount",)
    assert worst <= sensitivity
