"""The tree planner's pure parts (dpsql/sql/tree.py, dpsql/sql/per_unit.py): which blocks are
DP leaves, what post-processing remains, the budget split, windows lifted over aggregates,
series limits and per-unit derived tables. No database."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.demo import POLICY
from dpsql.errors import DpsqlError
from dpsql.explain.report import explain_leaves
from dpsql.policy import load_policy
from dpsql.session import SessionContext
from dpsql.sql.analyze import analyze
from dpsql.sql.parse import parse_statement
from dpsql.sql.tree import Split, split, split_budget

POL = load_policy(POLICY)


def _split(sql: str) -> Split | None:
    tree = parse_statement(sql).tree
    assert tree is not None
    return split(tree, POL, analyze)


@pytest.mark.parametrize(
    ("sql", "post", "leaves"),
    [
        (
            "SELECT COUNT(*) AS rowcount FROM (SELECT region, category, COUNT(*) AS count "
            "FROM purchases GROUP BY region, category LIMIT 50000) AS q",
            "SELECT COUNT(*) AS rowcount FROM (SELECT * FROM _dpsql_leaf_0) AS q",
            [
                "SELECT region, category, COUNT(*) AS count FROM purchases "
                "GROUP BY region, category LIMIT 50000"
            ],
        ),
        (
            "SELECT 'b', COUNT(*) FROM purchases WHERE category = 'books' UNION ALL "
            "SELECT 't', COUNT(*) FROM purchases WHERE category = 'travel'",
            "SELECT * FROM _dpsql_leaf_0 UNION ALL SELECT * FROM _dpsql_leaf_1",
            [
                "SELECT 'b', COUNT(*) FROM purchases WHERE category = 'books'",
                "SELECT 't', COUNT(*) FROM purchases WHERE category = 'travel'",
            ],
        ),
        (
            "WITH p AS (SELECT * FROM purchases WHERE amount > 10), "
            "m AS (SELECT category, SUM(amount) AS rev FROM p GROUP BY 1) "
            "SELECT category, rev - LAG(rev) OVER (ORDER BY category) FROM m",
            "WITH m AS (SELECT * FROM _dpsql_leaf_0) "
            "SELECT category, rev - CASE WHEN NOT COALESCE(LAG(rev IS NULL) OVER (ORDER BY "
            "category), FALSE) THEN LAG(rev) OVER (ORDER BY category) END FROM m",  # held where
            # the row it reads has it withheld (dpsql.sql.withheld_post)
            [
                "WITH p AS (SELECT * FROM purchases WHERE amount > 10) "
                "SELECT category, SUM(amount) AS rev FROM p GROUP BY 1"
            ],
        ),
        (
            "SELECT category, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share "
            "FROM purchases GROUP BY category HAVING COUNT(*) > 0 ORDER BY 2 DESC LIMIT 3",
            'SELECT _dp_w._dp_k0 AS "category", _dp_w._dp_a0 * 100.0 / CASE WHEN COUNT(*) FILTER(WHERE _dp_w._dp_a0 IS NULL) '
            "OVER () = 0 THEN SUM(_dp_w._dp_a0) "
            'OVER () END AS "share" FROM (SELECT * FROM _dpsql_leaf_0) AS _dp_w '
            "ORDER BY 2 DESC LIMIT 3",
            [
                "SELECT category AS _dp_k0, COUNT(*) AS _dp_a0 FROM purchases "
                "GROUP BY category HAVING COUNT(*) > 0"
            ],
        ),
    ],
)
def test_split(sql: str, post: str, leaves: list[str]) -> None:
    sp = _split(sql)
    assert sp is not None
    assert sp.post.sql("postgres") == post
    assert [leaf.sql("postgres") for leaf in sp.leaves] == leaves


def test_a_flat_block_is_not_split() -> None:
    assert _split("SELECT category, COUNT(*) FROM purchases GROUP BY 1") is None
    assert _split("SELECT user_id FROM purchases") is None


def test_series_limit_link() -> None:
    sp = _split(
        "SELECT category, SUM(amount) FROM purchases JOIN (SELECT category AS c__, "
        "SUM(amount) AS m FROM purchases GROUP BY 1 ORDER BY m DESC LIMIT 5) s "
        "ON category = c__ GROUP BY 1"
    )
    assert sp is not None and sp.links[0] is None
    link = sp.links[1]
    assert link is not None and link.source == 0 and link.column == "c__"
    assert sp.leaves[1].sql("postgres") == (
        "SELECT category, SUM(amount) FROM purchases WHERE NOT category IS NULL GROUP BY 1"
    )
    from sqlglot import exp

    got = link.instantiate([exp.Literal.string("books")]).sql("postgres")
    assert (
        got == "SELECT category, SUM(amount) FROM purchases WHERE category IN ('books') GROUP BY 1"
    )


def test_per_unit_source() -> None:
    sp = _split(
        "SELECT n, COUNT(*) FROM (SELECT user_id, COUNT(*) AS n FROM purchases "
        "WHERE quantity > 1 GROUP BY user_id) t GROUP BY n"
    )
    assert sp is not None and len(sp.units) == 1
    unit = sp.units[0]
    col = unit.table.columns["n"]
    assert col.bounds == (1, 100) and col.keys == tuple(range(1, 101))  # R auto: capped at 100
    text = unit.select.sql("postgres")
    assert "LEAST(COUNT(*), 100)" in text and "GROUP BY" in text and "quantity" in text


def test_reserved_names() -> None:
    with pytest.raises(DpsqlError):
        _split(
            "WITH _dpsql_leaf_0 AS (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) "
            "SELECT SUM(n) FROM _dpsql_leaf_0"
        )


def test_split_budget_adds_up() -> None:
    eps, delta = Fraction(1), Fraction(1, 10**6)
    for needs in ([False], [False, False, False], [True, False], [True, True, False]):
        for mech in ("auto", "laplace", "gaussian"):
            shares = split_budget(needs, eps, delta, mech)
            assert sum(e for e, _ in shares) == eps
            assert sum(d for _, d in shares) == delta
            if mech == "gaussian":
                assert all(d > 0 for _, d in shares)
            elif any(needs):
                assert all((d > 0) == n for (_, d), n in zip(shares, needs, strict=True))


def test_cli_explain_of_a_tree() -> None:
    session = SessionContext(analyst="analyst", epsilon=Fraction(1))
    leaves = explain_leaves(
        POL,
        "WITH r AS (SELECT category, SUM(amount) AS rev FROM purchases GROUP BY 1), "
        "n AS (SELECT category, COUNT(*) AS c FROM purchases GROUP BY 1) "
        "SELECT r.category, rev, c FROM r JOIN n USING (category)",
        session,
    )
    assert [sql for sql, _ in leaves] == [
        "SELECT category, SUM(amount) AS rev FROM purchases GROUP BY 1",
        "SELECT category, COUNT(*) AS c FROM purchases GROUP BY 1",
    ]
    assert [rep.epsilon for _, rep in leaves] == [Fraction(1, 2), Fraction(1, 2)]
    flat = explain_leaves(POL, "SELECT COUNT(*) FROM purchases", session)
    assert len(flat) == 1 and flat[0][1].epsilon == 1


@pytest.mark.parametrize(
    ("sql", "labels"),
    [
        (
            "SELECT category, SUM(r) FROM (SELECT category, region, SUM(amount) AS r "
            "FROM purchases GROUP BY 1, 2) AS v GROUP BY 1",
            ["derived table v"],
        ),
        (
            "WITH m AS (SELECT category, SUM(amount) AS rev FROM purchases GROUP BY 1) "
            "SELECT category, rev - LAG(rev) OVER (ORDER BY category) FROM m",
            ["CTE m"],
        ),
        (
            "SELECT 'books', COUNT(*) FROM purchases WHERE category = 'books' "
            "UNION ALL SELECT 'travel', COUNT(*) FROM purchases WHERE category = 'travel'",
            [
                "SELECT 'books', COUNT(*) FROM purchases WHERE category = 'books'",
                "SELECT 'travel', COUNT(*) FROM purchases WHERE category = 'travel'",
            ],
        ),
        (
            "SELECT category, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () FROM purchases GROUP BY 1",
            ["the statement's aggregates COUNT(*) (before its windows)"],
        ),
        (
            "SELECT AVG(n) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t",
            ["the aggregate over t (one row per person)"],
        ),
        (
            "SELECT region, SUM(amount) FROM purchases JOIN (SELECT category AS c__, "
            "SUM(amount) AS m FROM purchases GROUP BY 1 ORDER BY m DESC LIMIT 5) AS s "
            "ON category = c__ GROUP BY region",
            ["derived table s", "the aggregate over the keys of derived table s"],
        ),
    ],
)
def test_each_leaf_is_named_in_the_users_terms(sql: str, labels: list[str]) -> None:
    """Notices start with the leaf's name (dpsql.execute.tree.leaf_notices): never a synthetic
    table or placeholder name of dpsql's own."""
    sp = _split(sql)
    assert sp is not None and list(sp.labels) == labels
    assert not any("_dpsql" in x or "_dp_" in x for x in sp.labels)
