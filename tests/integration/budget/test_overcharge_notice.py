"""A statement that uses more of a budget than its own epsilon says so when it is charged.

The first Gaussian release of a period moves a budget from pure summation to Renyi accounting
and pays the conversion cost once (docs/budget.md, "Units"): at dpsql.epsilon 0.5 the demo's
dataset budget lost ~30 epsilon and the analyst saw only the usual notices. Real engine, ledger
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


def test_first_gaussian_release_says_its_conversion_cost(
    demo_dsn: str, demo_policy: Any, make_db: Callable[[str], str]
) -> None:
    with Ledger.open(make_db("overcharge"), demo_policy) as ledger:
        engine = Engine(demo_policy, demo_dsn, ledger=ledger, pool_size=2)
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
            used = before - left()
            said = _said(r.notices)
            assert any("dataset budget demo" in n and "one-time conversion" in n for n in said), (
                r.notices
            )
            assert used > 5 * half  # the conversion, far above the statement's 0.5
            [n] = [n for n in said if "dataset budget demo" in n]
            m = re.search(r"used epsilon ([0-9.,]+) of", n)
            assert m is not None and abs(Fraction(m.group(1).replace(",", "")) - used) < 0.01, (
                n,
                float(used),
            )
            r = engine.execute(engine.prepare(SQL.format(7)), gauss)  # conversion paid
            assert _said(r.notices) == [], r.notices
        finally:
            engine.close()
