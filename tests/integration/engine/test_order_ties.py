"""Pages of a released result agree on ties (dpsql/sql/order_ties.py).

A BI tool pages a result with ``ORDER BY <noisy column> DESC LIMIT n OFFSET k``, one statement
per page over the same release. Property: where the released values tie, the pages still cover
every group exactly once: no group on two pages, none on no page. The data make every group tie
(30 groups of 100 people, 11 declared keys with none: zero noise, so each count is exact), the
case where PostgreSQL's top-N sort picks tied rows differently for each LIMIT. Checked for a flat
statement and a statement of two DP leaves joined (the tree's own post-processing), against
PostgreSQL itself. The broken twin (no tie-break) repeats and skips groups: asserted below, so
the data keep exhibiting what the tie-break is for. Deterministic (no noise, fixed data).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlglot import exp

from dpsql.engine import Engine
from dpsql.execute import tree_intervals, tree_post
from dpsql.execute.caches import EngineCaches
from dpsql.sql import postprocess
from tests.helpers import unrounded
from tests.owner import dpsql_rows, exact_private
from tests.policies import PolicyMaker

PAGE = 4
FLAT = "SELECT k, COUNT(*) AS n FROM priv GROUP BY k ORDER BY n DESC LIMIT {n} OFFSET {k}"
TREE = (
    "SELECT a.k, a.n, b.s FROM (SELECT k, COUNT(*) AS n FROM priv GROUP BY k) a"
    " JOIN (SELECT k, SUM(q) AS s FROM priv GROUP BY k) b ON a.k = b.k"
    " ORDER BY a.n DESC LIMIT {n} OFFSET {k}"
)
GROUPS = 41  # the declared keys 0..40 (30..40 hold no one: released as 0), in both leaves


@pytest.fixture(scope="module")
def private(
    make_db: Callable[[str], str], make_policy: PolicyMaker
) -> Iterator[tuple[Engine, Any]]:
    columns = {
        "k": {"type": "integer", "bounds": [0, 40]},
        "q": {"type": "integer", "bounds": [0, 6]},
    }
    with exact_private(
        make_db,
        make_policy,
        "order_ties",
        columns,
        "CREATE TABLE priv (u int, k int, q int)",
        "INSERT INTO priv SELECT u, u % 30, u % 7 FROM generate_series(1, 3000) u",
    ) as got:
        yield got


def _paged(engine: Engine, sql: str) -> Counter[Any]:
    """How often each group appears on the pages covering the result's rows."""
    seen: Counter[Any] = Counter()
    for k in range(0, GROUPS, PAGE):
        seen.update(row[0] for row in dpsql_rows(engine, sql.format(n=PAGE, k=k)))
    return seen


@pytest.mark.parametrize("sql", [FLAT, TREE], ids=["flat", "tree"])
def test_pages_cover_every_group_once(
    private: tuple[Engine, Any], monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    unrounded(monkeypatch)
    engine, conn = private
    whole = [r[0] for r in dpsql_rows(engine, sql.format(n="ALL", k=0))]
    assert sorted(whole) == sorted(set(whole)) and len(whole) == GROUPS
    seen = _paged(engine, sql)
    assert sorted(seen) == sorted(whole) and set(seen.values()) == {1}, seen
    # the pages read in order are the whole result in its order
    paged = [
        r[0] for k in range(0, GROUPS, PAGE) for r in dpsql_rows(engine, sql.format(n=PAGE, k=k))
    ]
    assert paged == whole


@pytest.mark.parametrize("sql", [FLAT, TREE], ids=["flat", "tree"])
def test_without_the_tie_break_pages_disagree(
    private: tuple[Engine, Any], monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    """The broken twin: the statement's own ORDER BY alone; PostgreSQL's top-N sort puts tied
    rows in another order for each LIMIT, so some group is on two pages or none."""
    unrounded(monkeypatch)

    def untouched(q: exp.Expr, keys: object = ()) -> exp.Expr:
        return q

    for module in (postprocess, tree_post, tree_intervals):
        monkeypatch.setattr(module, "order_ties", untouched)
    engine, _ = private
    monkeypatch.setattr(engine, "caches", EngineCaches.sized(64))  # no SQL memoized before
    seen = _paged(engine, sql)
    assert len(seen) < GROUPS or max(seen.values()) > 1, seen


JSON_OUT = (
    "SELECT t.k, t.n, json_build_object('n', t.n) AS j FROM "
    "(SELECT k, COUNT(*) AS n FROM priv GROUP BY k) t ORDER BY t.n DESC LIMIT {n} OFFSET {k}"
)


def test_an_output_without_an_ordering_operator_is_left_out_of_the_tie_break(
    private: tuple[Engine, Any],
) -> None:
    """A json output has no ordering operator: ordering by its position failed the statement
    (42883, review30 of d6aff24) where the statement as written ran. It is left out of the
    tie-break; the other outputs still make the pages agree."""
    engine, _ = private
    rows = dpsql_rows(engine, JSON_OUT.format(n="ALL", k=0))
    assert len(rows) == GROUPS and all(r[2] is not None for r in rows)
    seen = _paged(engine, JSON_OUT)
    assert set(seen) == set(range(GROUPS)) and set(seen.values()) == {1}, seen
