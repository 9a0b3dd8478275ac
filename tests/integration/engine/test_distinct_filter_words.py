"""``SELECT DISTINCT <key> ... WHERE <filter>`` lists the declared keys, free; when the filter
says something the keys can't decide, a notice says the list ignores it (newcomer21 #13).

``SELECT DISTINCT category FROM purchases WHERE amount > 100000`` listed all five categories
(truth: travel only) with no word of it. Which keys have rows under a private filter is itself a
release, so the list stays the public domain (nothing read or charged) and the notice says that
the rest of the filter is not tested, and how to count each key's rows instead.
"""

from __future__ import annotations

import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext

UNTESTED = "whether rows passing the rest of the WHERE clause have each key is private"


@pytest.mark.parametrize(
    ("sql", "keys", "told"),
    [
        ("SELECT DISTINCT category FROM purchases WHERE amount > 100000",
         ["books", "clothing", "electronics", "groceries", "travel"], True),
        ("SELECT category FROM purchases WHERE amount > 100000 GROUP BY category",
         ["books", "clothing", "electronics", "groceries", "travel"], True),
        ("SELECT DISTINCT region FROM purchases WHERE category = 'books' ORDER BY 1",
         ["C", "E", "N", "S", "W"], True),  # Superset's dependent filter
        ("SELECT DISTINCT category FROM purchases WHERE category IN ('books', 'travel')",
         ["books", "travel"], False),  # decided by the keys themselves: exact, no notice
        ("SELECT DISTINCT category FROM purchases", [
            "books", "clothing", "electronics", "groceries", "travel"], False),
    ],
)  # fmt: skip
def test_a_key_list_says_when_it_ignores_the_filter(
    engine: Engine, sql: str, keys: list[str], told: bool
) -> None:
    r = engine.execute(engine.prepare(sql), SessionContext(analyst="analyst"))
    assert sorted(str(row[0]) for row in r.rows) == keys
    assert r.epsilon_spent == 0
    assert not any(n.startswith("contribution bounds:") for n in r.notices), r.notices
    notes = [n for n in r.notices if UNTESTED in n]
    assert bool(notes) == told, r.notices
    if told:
        name = "region" if "region" in sql else "category"
        assert f"SELECT {name}, COUNT(*) ... WHERE ... GROUP BY {name}" in notes[0]
