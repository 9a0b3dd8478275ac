"""An aggregate over a joined PUBLIC table's column is refused with words about that column
(review23): ``SELECT g, SUM(w) FROM t JOIN pub USING (g)`` said "column public.t.w has no declared
bounds ... declare `bounds: [lo, hi]` for w in the policy": w is pub's, and the policy can't
declare bounds for a public table's columns, so the advice could not be followed. Now the refusal
names public.pub and gives a statement that answers (the private rows counted per value of w).

Property (deterministic): for each form (USING, ON, qualified or not, SUM/AVG/MEDIAN/MAX/mode,
arithmetic), the refusal is 42501 (0A000 for arithmetic), names the public table, never names
the private table as the column's owner, and its hint's statement answers PostgreSQL's counts on
the zero-noise source. Each wording check failed before (public.t.w, "declare `bounds`", "the
text column w").
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from dpsql.session import SessionContext
from tests.policies import private_table

SESSION = SessionContext(analyst="analyst", epsilon=Fraction(1))
DATA = """
CREATE TABLE t (u integer, g text, x integer);
INSERT INTO t SELECT i, (ARRAY['a', 'b'])[1 + i % 2], i % 10 FROM generate_series(1, 200) i;
CREATE TABLE pub (g text PRIMARY KEY, w integer);
INSERT INTO pub VALUES ('a', 3), ('b', 5);
"""
T = {"g": {"type": "text", "keys": ["a", "b"]}, "x": {"type": "integer", "bounds": [0, 9]}}


@pytest.fixture(scope="module")
def exact(make_db: Any, make_policy: Any, exact_noise: Any) -> Iterator[tuple[str, Engine]]:
    dsn = make_db("usingpub")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DATA)  # type: ignore[arg-type]
    policy = make_policy(
        "usingpub", tables={"public.t": private_table("u", T)}, public_tables=["public.pub"]
    ).policy
    e = Engine(policy, dsn, pool_size=1, noise=exact_noise)
    yield dsn, e
    e.close()


def refusal(engine: Engine, sql: str) -> DpsqlError:
    with pytest.raises(DpsqlError) as got:
        engine.execute(engine.prepare(sql, "analyst"), SESSION)
    return got.value


@pytest.mark.parametrize(
    ("sql", "agg", "ref"),
    [
        ("SELECT g, SUM(w) FROM t JOIN pub USING (g) GROUP BY g", "SUM", "w"),
        ("SELECT SUM(w) FROM t JOIN pub USING (g)", "SUM", "w"),
        ("SELECT t.g, SUM(pub.w) FROM t JOIN pub ON t.g = pub.g GROUP BY t.g", "SUM", "pub.w"),
        ("SELECT g, AVG(w) FROM t JOIN pub USING (g) GROUP BY g", "AVG", "w"),
        ("SELECT g, MEDIAN(w) FROM t JOIN pub USING (g) GROUP BY g", "MEDIAN", "w"),
        ("SELECT MAX(p.w), STDDEV(x) FROM t JOIN pub p ON p.g = t.g", "MAX", "p.w"),
        (
            "SELECT mode() WITHIN GROUP (ORDER BY p.w) FROM t JOIN pub p ON p.g = t.g",
            "mode()",
            "p.w",
        ),
    ],
)
def test_names_the_public_table(exact: tuple[str, Engine], sql: str, agg: str, ref: str) -> None:
    err = refusal(exact[1], sql)
    assert err.sqlstate == "42501"
    assert "public.t.w" not in str(err) and "public.pub" in str(err), str(err)
    assert f"so {agg} over it" in str(err)
    assert "declare" not in (err.hint or "")
    assert f"SELECT {ref}, COUNT(*) ... GROUP BY {ref}" in (err.hint or "")


def test_arithmetic_names_the_public_column(exact: tuple[str, Engine]) -> None:
    err = refusal(exact[1], "SELECT g, SUM(x * w) FROM t JOIN pub USING (g) GROUP BY g")
    assert err.sqlstate == "0A000"
    assert "text column" not in str(err) and "a column of a public table" in str(err)


def test_the_hint_answers(exact: tuple[str, Engine]) -> None:
    """The hint's statement answers: the private rows per value of the public column, and its
    sum is the total of value x count (exact on the zero-noise source)."""
    dsn, engine = exact
    sql = "SELECT w, COUNT(*) FROM t JOIN pub USING (g) GROUP BY w"
    got = sorted(engine.execute(engine.prepare(sql, "analyst"), SESSION).rows)
    with psycopg.connect(dsn) as conn:
        want = sorted(conn.execute(sql).fetchall())  # type: ignore[arg-type]
        total = conn.execute("SELECT SUM(w) FROM t JOIN pub USING (g)").fetchone()
    assert [tuple(r) for r in got] == want
    assert total is not None and sum(w * n for w, n in got) == total[0]
