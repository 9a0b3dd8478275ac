"""INTERSECT / EXCEPT over a block that only lists keys filtered by other columns is refused
(newcomer22 #21): such a list is the policy's key domain, free, whether or not a row passing its
WHERE clause has each key, so ``... EXCEPT SELECT department ... WHERE cost > 100000 GROUP BY
department`` answered no rows (truth: 4 departments) and INTERSECT kept every key, with no word.
Lists decided by their own keys, UNION of lists and set operations over counts still answer.
Deterministic: refusals before any charge, and the key lists themselves.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext

ALL = ["books", "clothing", "electronics", "groceries", "travel"]


def _run(engine: Engine, sql: str):  # type: ignore[no-untyped-def]
    return engine.execute(engine.prepare(sql), SessionContext("analyst", Fraction(1)))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT category FROM purchases GROUP BY category EXCEPT "
        "SELECT category FROM purchases WHERE amount > 100000 GROUP BY category",
        "SELECT category FROM purchases WHERE amount > 400 GROUP BY 1 INTERSECT "
        "SELECT category FROM purchases WHERE quantity = 1 GROUP BY category",
        "SELECT region FROM purchases GROUP BY region EXCEPT "
        "SELECT region FROM purchases WHERE category = 'books' GROUP BY region",
    ],
)
def test_a_filtered_key_list_under_intersect_or_except_is_refused(engine: Engine, sql: str) -> None:
    with pytest.raises(DpsqlError) as e:
        _run(engine, sql)
    assert e.value.sqlstate == "0A000", e.value
    assert "can't be answered" in e.value.message and "COUNT(*)" in (e.value.hint or "")


@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        ("SELECT category FROM purchases GROUP BY category EXCEPT SELECT category "
         "FROM purchases WHERE category IN ('books', 'travel') GROUP BY category",
         ["clothing", "electronics", "groceries"]),  # decided by the keys: exact
        ("SELECT category FROM purchases WHERE amount > 400 GROUP BY 1 UNION "
         "SELECT category FROM purchases WHERE category = 'books' GROUP BY 1", ALL),
    ],
)  # fmt: skip
def test_lists_the_keys_decide_still_answer(engine: Engine, sql: str, keys: list[str]) -> None:
    r = _run(engine, sql)
    assert sorted(str(row[0]) for row in r.rows) == keys
