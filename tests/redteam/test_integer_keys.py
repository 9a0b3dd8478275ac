"""GROUP BY a bare bounded integer column takes its keys from the policy (newcomer25 #15).

``SELECT quantity, COUNT(*) FROM purchases GROUP BY quantity`` (bounds [1, 10]) selected its groups
from the data: a quantity few people bought was silently left out by the threshold, and whether
it came back told about those people. Now every whole number of the bounds is a key, each with
noise (none held: noisy 0), as declared keys are; with more than BARE_INTEGERS_MAX (1,000) whole
numbers the groups are selected as before, and the notice says why. Checked on neighbouring
databases that differ in unit 1 only (the one person with quantity 10, or with a value outside
the bounds): the same keys on each, no error, at zero noise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.session import SessionContext
from dpsql.sql.numeric_keys import BARE_INTEGERS_MAX
from tests.helpers import EXACT
from tests.policies import PolicyMaker, private_table

UNIT_1 = {"absent": None, "holds 10": 10, "outside": 99, "null": "NULL"}


@pytest.fixture(scope="module")
def neighbours(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[dict[str, Engine]]:
    columns = {
        "q": {"type": "integer", "bounds": [1, 10]},
        "big": {"type": "integer", "bounds": [0, BARE_INTEGERS_MAX]},  # 1,001 whole numbers
    }
    pf = make_policy("intkeys", tables={"public.t": private_table("u", columns)}, public_tables=[])
    engines = {}
    for name, q in UNIT_1.items():
        dsn = make_db("intkeys")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (u integer NOT NULL, q integer, big integer)")
            conn.execute("INSERT INTO t SELECT u, 1 + u % 5, u FROM generate_series(2, 60) u")
            if q is not None:
                conn.execute(f"INSERT INTO t VALUES (1, {q}, 1)")
        engines[name] = Engine(pf.policy, dsn, pool_size=1, noise=EXACT)
    yield engines
    for e in engines.values():
        e.close()


@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        ("SELECT q, COUNT(*) FROM t GROUP BY q", list(range(1, 11))),
        ("SELECT q AS n, SUM(big) FROM t GROUP BY 1", list(range(1, 11))),
        ("SELECT q, COUNT(*) FROM t WHERE q >= 8 GROUP BY q", [8, 9, 10]),
        ("SELECT q, COUNT(*) FROM t WHERE q IN (2, 9) GROUP BY q", [2, 9]),
    ],
)
def test_a_bounded_integers_keys_come_from_the_bounds(
    neighbours: dict[str, Engine], sql: str, keys: list[int]
) -> None:
    session = SessionContext(analyst="analyst", epsilon=Fraction(1))
    got = {}
    for db, e in neighbours.items():
        p = e.prepare(sql)
        assert not p.analysis.needs_selection  # type: ignore[union-attr]
        got[db] = sorted(r[0] for r in e.execute(p, session).rows)
    assert all(k == keys for k in got.values()), got


def test_above_the_limit_the_groups_are_selected_and_the_notice_says_why(
    neighbours: dict[str, Engine],
) -> None:
    e = neighbours["absent"]
    p = e.prepare("SELECT big, COUNT(*) FROM t GROUP BY big")
    assert p.analysis.needs_selection  # type: ignore[union-attr]
    r = e.execute(p, SessionContext(analyst="analyst", epsilon=Fraction(1)))
    words = " ".join(r.notices)
    assert f"1,001 whole numbers, above the limit of {BARE_INTEGERS_MAX:,}" in words, words
