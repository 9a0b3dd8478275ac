"""The words of rows picked by a noisy value as psql and psycopg users get them (newcomer25
#17): a NoticeResponse beside the rows of ``ORDER BY COUNT(*) DESC LIMIT 2`` over counts within
each other's noise, and the same words on its free repeat (read from the stored release: its
noise intervals are stored with it). Zero-noise source: the released counts are the demo's
(electronics 24,247, books 24,216, then 24,040, 23,950, 23,672; noise ±416 at 95%).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from dpsql.budget.ledger import Ledger
from dpsql.server.run import ServerThread
from tests.helpers import EXACT, analyst_dsn, served_engine


@pytest.fixture(scope="module")
def served(
    make_db: Callable[[str], str], demo_dsn: str, demo_policy: Any
) -> Iterator[ServerThread]:
    ledger = Ledger.open(make_db("picked_ledger"), demo_policy)
    try:
        with served_engine(demo_policy, demo_dsn, ledger=ledger, noise=EXACT) as srv:
            yield srv
    finally:
        ledger.close()


def test_a_top_n_of_noise_says_so_over_the_wire_and_on_its_repeat(served: ServerThread) -> None:
    """Property: the notice reaches a psycopg client with the rows, and a free repeat (charged
    nothing) says it again. Fails before (no such notice)."""
    sql = "SELECT category, COUNT(*) AS n FROM purchases GROUP BY category ORDER BY n DESC LIMIT 2"
    said = (
        "ORDER BY COUNT(*) DESC LIMIT 2 picks rows by a noisy value: the 2nd row's, 24,216, is "
        "within the noise of all 3 rows it left out after it (the next: 24,040; each ±416 at "
        "95%, so their noise intervals overlap): other groups may belong among the rows shown."
    )
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        for run in range(2):
            notices.clear()
            rows = conn.execute(sql).fetchall()
            assert rows == [("electronics", 24247), ("books", 24216)]
            picked = [n for n in notices if n.startswith("ORDER BY COUNT(*) DESC LIMIT 2")]
            assert len(picked) == 1 and picked[0].startswith(said), (run, notices)
        assert any("free repeat" in n for n in notices), notices


@pytest.mark.parametrize(
    ("sql", "lead"),
    [
        (  # a UNION of two leaves: the tree path, its leaves stored one by one
            "SELECT category, COUNT(*) AS n FROM purchases GROUP BY category UNION ALL "
            "SELECT region, COUNT(*) FROM purchases GROUP BY region ORDER BY n DESC LIMIT 3",
            "ORDER BY n DESC LIMIT 3 picks rows by a noisy value: the 3rd row's, 24,216, is "
            "within the noise of all 7 rows it left out after it (the next: 24,200; each ±832",
        ),
        (  # Superset's series limit: the source leaf's own cut
            "SELECT category, SUM(amount) FROM purchases p JOIN (SELECT category AS c FROM "
            "purchases GROUP BY category ORDER BY SUM(amount) DESC LIMIT 2) s ON p.category = s.c "
            "GROUP BY category",
            "derived table s: ORDER BY SUM(amount) DESC LIMIT 2 picks rows by a noisy value",
        ),
        (  # a ROLLUP: grouping sets' releases keep their noise intervals (stored)
            "SELECT category, COUNT(*) FROM purchases GROUP BY ROLLUP (category) "
            "ORDER BY 2 DESC LIMIT 2 OFFSET 1",
            "ORDER BY COUNT(*) DESC LIMIT 2 OFFSET 1 picks rows by a noisy value: the last row's "
            "(3rd in order), 24,216",
        ),
    ],
)
def test_other_shapes_say_so_over_the_wire_and_on_their_repeat(
    served: ServerThread, sql: str, lead: str
) -> None:
    """Property (cut27): a UNION's top-N, a series limit's leaf and a ROLLUP's top-N reach a
    psycopg client with their words, and the free repeat (its releases read back from the
    ledger) says the same words. Fails before (no such notice)."""
    with psycopg.connect(analyst_dsn(served.port), autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        said = []
        for _ in range(2):
            notices.clear()
            conn.execute(sql).fetchall()
            said.append([n for n in notices if " picks rows by " in n])
        assert len(said[0]) == 1 and said[0][0].startswith(lead), said
        assert said[1] == said[0], said
        assert any("free repeat" in n for n in notices), notices
