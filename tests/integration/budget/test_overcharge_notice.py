"""A statement that uses more of a budget than its own epsilon says so when it is charged.

The first Gaussian release of a period moves a budget from pure summation to Renyi accounting
and pays the conversion cost once (docs/budget.md, "Units"): at dpsql.epsilon 0.5 the demo's
dataset budget lost ~30-77 epsilon and the analyst saw only the usual notices. Since the more
Renyi orders (dpsql.budget.filter.extra_orders) it uses about its own epsilon by default; a
policy's own single order still pays its order's conversion, and says so. Real engine, ledger
and PostgreSQL (demo data). Properties: a pure statement (charged exactly its epsilon) and a
later Gaussian one (the conversion already paid) say nothing; the first Gaussian one names each
budget it used more of, with the amount the ledger's SHOW dpsql.budget moved by.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from dpsql.budget.ledger import Ledger
from dpsql.engine import Engine
from dpsql.session import SessionContext

SQL = "SELECT COUNT(*) AS n FROM purchases WHERE quantity < {}"


def _said(notices: tuple[str, ...]) -> list[str]:
    return [n for n in notices if n.startswith("this statement used epsilon")]


def _first_gaussian(policy: Any, demo_dsn: str, db: str) -> tuple[Fraction, list[str]]:
    """What the first Gaussian release (epsilon 0.5, after a pure one) used of the dataset
    budget (SHOW dpsql.budget's move), and its over-charge notices; a second says nothing."""
    with Ledger.open(db, policy) as ledger:
        engine = Engine(policy, demo_dsn, ledger=ledger, pool_size=2)
        try:
            half = Fraction(1, 2)
            pure = SessionContext(analyst="analyst", epsilon=half, mechanism="laplace")
            r = engine.execute(engine.prepare(SQL.format(9)), pure)
            assert _said(r.notices) == [], r.notices

            def left() -> Fraction:
                [d] = [s for s in ledger.remaining("analyst") if s.budget == "dataset"]
                return Fraction(str(d.epsilon_remaining))

            before = left()
            gauss = SessionContext(analyst="analyst", epsilon=half, mechanism="gaussian")
            r = engine.execute(engine.prepare(SQL.format(8)), gauss)
            used, said = before - left(), _said(r.notices)
            again = engine.execute(engine.prepare(SQL.format(7)), gauss)  # conversion paid
            assert _said(again.notices) == [], again.notices
            return used, said
        finally:
            engine.close()


def test_first_gaussian_release_costs_about_its_epsilon(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> None:
    """With the default orders (dpsql.budget.filter.extra_orders) the first Gaussian release at
    epsilon 0.5 uses less than 0.5 of the demo's dataset budget (order 32: about 0.31), and
    says nothing; it used about 77 (the main order's conversion cost) before."""
    used, said = _first_gaussian(demo_policy, demo_dsn, make_db("overcharge"))
    assert 0 < used <= Fraction(1, 2) and said == [], (float(used), said)


def test_first_gaussian_release_says_its_conversion_cost(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> None:
    """A policy that fixes the dataset budget's Renyi order (one order, all of the conversion
    delta: as every period before the more orders) pays that order's conversion at the first
    Gaussian release, and the statement says so with the amount SHOW dpsql.budget moved by."""
    policy = demo_policy.model_copy(
        update={"budget": demo_policy.budget.model_copy(update={"renyi_order": 1.1})}
    )
    used, said = _first_gaussian(policy, demo_dsn, make_db("overcharge1"))
    assert any("dataset budget demo" in n and "one-time conversion" in n for n in said), said
    assert used > 5 * Fraction(1, 2)  # the conversion, far above the statement's 0.5
    [n] = [n for n in said if "dataset budget demo" in n]
    m = re.search(r"used epsilon ([0-9.,]+) of", n)
    assert m is not None and abs(Fraction(m.group(1).replace(",", "")) - used) < 0.01, (
        n,
        float(used),
    )
