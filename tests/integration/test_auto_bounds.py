"""``auto`` contribution bounds through the engine: chosen, shown, stored and charged once."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext


def test_smoke(engine: Engine) -> None:
    s = SessionContext(analyst="analyst", epsilon=1.0)
    for q in [
        "SELECT COUNT(*) FROM purchases",
        "SELECT category, SUM(amount) FROM purchases GROUP BY category",
        "SELECT region, COUNT(DISTINCT user_id) FROM purchases GROUP BY region",
        "SELECT sex, COUNT(*) FROM pums GROUP BY sex",
        "SELECT AVG(income) FROM pums",
    ]:
        r = engine.execute(engine.prepare(q, "analyst"), s)
        print(q, r.rows, r.notices, r.epsilon_spent)
