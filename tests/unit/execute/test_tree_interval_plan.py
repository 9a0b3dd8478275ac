"""The pure part of a tree statement's interval columns (dpsql/sql/tree_intervals.py): which
output carries an interval, over which leaf values (the union bound's k), and why the others
have none. No database: the demo policy, the statement split into its leaves, each leaf's shape
from its analysis as the engine makes it (declared keys counted from the policy)."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dpsql.demo import POLICY as POLICY_PATH
from dpsql.execute.tree_intervals import leaf_shape, row_bound
from dpsql.execute.tree_levels import leaf_levels
from dpsql.policy.load import load_policy
from dpsql.sql.analyze import analyze
from dpsql.sql.interval_sql import HIDDEN, Held, No
from dpsql.sql.tree import split
from dpsql.sql.tree_intervals import IvPlan, plan_intervals

POLICY = load_policy(POLICY_PATH)
REGIONS = 5  # the demo's public.regions (keys_from): counted as 5 here, no database


def _plan(sql: str) -> tuple[IvPlan, list[int | None]]:
    sp = split(sqlglot.parse_one(sql, read="postgres"), POLICY, analyze)
    assert sp is not None
    shapes, bounds = [], []
    for leaf, label in zip(sp.leaves, sp.labels, strict=True):
        a = analyze(leaf, POLICY)
        declared = []
        for g in a.group_keys:
            keys = g.keys or ()
            declared.append(list(keys) if keys else ["k"] * REGIONS if g.keys_from else None)
        known = None if a.needs_selection or any(d is None for d in declared) else declared
        bounds.append(row_bound(a, known))
        shapes.append(leaf_shape(a, label, bounds[-1]))
    return plan_intervals(sp.post, shapes), bounds


def _outputs(p: IvPlan) -> dict[str, Held | No]:
    return {o.name: o.info for o in p.outputs}


CASES = {
    # re-aggregation of SUM over (category, region): 25 leaf values
    "SELECT category, SUM(revenue) AS r FROM (SELECT category, region, SUM(amount) AS revenue "
    "FROM purchases GROUP BY 1, 2) AS v GROUP BY category": {"r": 25},
    # BI tools' COALESCE(SUM(...), 0): the ends where the value is not NULL
    "SELECT category, COALESCE(SUM(revenue), 0) AS r FROM (SELECT category, region, SUM(amount) "
    "AS revenue FROM purchases GROUP BY 1, 2) AS v GROUP BY category": {"r": 25},
    # a window share: the row's own value and the 5 rows' sum
    "SELECT category, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS share FROM purchases "
    "GROUP BY category": {"share": 6},
    # a running total by a public order
    "SELECT category, SUM(COUNT(*)) OVER (ORDER BY category) AS running FROM purchases "
    "GROUP BY category": {"running": 5},
    # a ratio of two leaves
    "SELECT a.n * 1.0 / b.n AS ratio FROM (SELECT COUNT(*) AS n FROM purchases WHERE amount > 100)"
    " AS a, (SELECT COUNT(*) AS n FROM purchases) AS b": {"ratio": 2},
    # UNION ALL of two leaves: row by row
    "SELECT 'books' AS c, COUNT(*) AS n FROM purchases WHERE category = 'books' UNION ALL "
    "SELECT 'travel', COUNT(*) FROM purchases WHERE category = 'travel'": {"n": 2},
    # three parts, one exact (a public constant): row by row
    "SELECT 'books' AS c, COUNT(*) AS n FROM purchases WHERE category = 'books' UNION ALL "
    "SELECT 'travel', COUNT(*) FROM purchases WHERE category = 'travel' UNION ALL "
    "SELECT 'none', 0": {"n": 2},
    # no interval, and why
    "SELECT category, RANK() OVER (ORDER BY COUNT(*) DESC) AS r FROM purchases GROUP BY 1": {
        "r": "orders rows by their noisy values"
    },
    "SELECT category, LAG(COUNT(*)) OVER (ORDER BY category) AS prev FROM purchases GROUP BY 1": {
        "prev": "reads another row"
    },
    "SELECT AVG(n) AS a FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) AS t": {
        "a": "every declared key combination"
    },
    "SELECT SUM(n) AS s FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1 "
    "ORDER BY n DESC LIMIT 2) AS t": {"s": "ORDER BY ... LIMIT"},
    "SELECT SUM(n) AS s FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) AS t "
    "WHERE n > 100": {"s": "WHERE on them"},
    "SELECT SUM(n) AS s FROM (SELECT amount * 2 AS q, COUNT(*) AS n FROM purchases "
    "GROUP BY 1) AS t": {"s": "partition selection"},
    "SELECT DISTINCT n FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) AS t": {
        "n": "DISTINCT"
    },
    "SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1 UNION SELECT 'all', COUNT(*) "
    "FROM purchases": {"n": "UNION (without ALL)"},
    "SELECT CASE WHEN a.n > b.n THEN 1 END AS more FROM (SELECT COUNT(*) AS n FROM purchases "
    "WHERE amount > 100) AS a, (SELECT COUNT(*) AS n FROM purchases) AS b": {"more": "monotone"},
    "SELECT a.n / NULLIF(b.n - 100, 0) AS r FROM (SELECT COUNT(*) AS n FROM purchases) AS a, "
    "(SELECT COUNT(*) AS n FROM pums) AS b": {"r": 2},
}


@pytest.mark.parametrize("sql", list(CASES))
def test_each_output_carries_an_interval_or_a_reason(sql: str) -> None:
    p, bounds = _plan(sql)
    got = _outputs(p)
    for name, want in CASES[sql].items():
        info = got[name]
        if isinstance(want, int):  # an interval over `want` leaf values
            assert isinstance(info, Held), (name, info)
            k = sum((bounds[leaf] or 0) if every else 1 for leaf, every in info.events)
            assert k == want, (name, info.events, bounds)
        else:
            assert isinstance(info, No) and want in info.reason, (name, info)


def test_levels_split_alpha_by_the_union_bound() -> None:
    p, bounds = _plan(next(iter(CASES)))  # the SUM of 25 leaf values
    (level,) = leaf_levels(p, bounds, 0.95)
    assert level == pytest.approx(1 - 0.05 / 25)
    assert 25 * (1 - level) <= 0.05 + 1e-12  # the k intervals together: >= 0.95


def test_hidden_columns_line_up_in_a_union() -> None:
    """Both branches of a UNION ALL carry the same hidden columns, in the same places (else
    PostgreSQL refuses it, or pairs one branch's ends with the other's values)."""
    sql = (
        "SELECT 'books' AS c, COUNT(*) AS n FROM purchases WHERE category = 'books' UNION ALL "
        "SELECT 'travel', COUNT(*) FROM purchases WHERE category = 'travel'"
    )
    p, _ = _plan(sql)
    assert isinstance(p.post, exp.Union)
    branches = [p.post.this, p.post.expression]
    names = [[e.alias_or_name for e in b.expressions] for b in branches]
    assert len(names[0]) == len(names[1])
    hidden = [[n for n in ns if HIDDEN.match(n)] for ns in names]
    assert hidden[0] == hidden[1] and len(hidden[0]) == 3, names  # low, high, miss
    p, _ = _plan(f"{sql} UNION ALL SELECT 'none', 0")
    parts = [p.post.this.this, p.post.this.expression, p.post.expression]  # type: ignore[union-attr]
    names = [[e.alias_or_name for e in b.expressions] for b in parts]
    assert len({len(ns) for ns in names}) == 1, names
    assert len({tuple(n for n in ns if HIDDEN.match(n)) for ns in names}) == 1, names


def test_without_intervals_the_statement_is_unchanged() -> None:
    """A shape the rewrite can't follow keeps the statement as it is (no hidden column) and
    every noisy output says why."""
    sql = (
        "SELECT * FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) AS a "
        "UNION SELECT * FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) AS b"
    )
    p, _ = _plan(sql)
    assert not any(HIDDEN.match(e.alias_or_name) for e in p.post.find_all(exp.Alias))
    assert isinstance(_outputs(p)["n"], No)


def test_an_unknown_shape_never_fails_the_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the rewrite meets something it does not know (here: it raises), the statement keeps
    its own post-processing and its noisy outputs say why they have no interval."""
    from dpsql.sql import tree_intervals

    def broken(self: object, *args: object) -> None:
        raise RuntimeError("an unknown node")

    monkeypatch.setattr(tree_intervals._Rewriter, "select", broken)
    sql = next(iter(CASES))
    p, _ = _plan(sql)
    assert not any(HIDDEN.match(e.alias_or_name) for e in p.post.find_all(exp.Alias))
    assert p.outputs == ()  # not even which are noisy: no interval columns, the query runs
    # typed: unexpected, with the exception, for the engine to log and tests to catch
    assert p.fallback is not None and not p.fallback.expected, p.fallback
    assert p.fallback.error == "RuntimeError: an unknown node", p.fallback


def test_a_known_shape_without_intervals_is_an_expected_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rewrite's own "can't carry hidden columns here" (_Abort) is expected: the outputs
    say why, nothing is logged as an error. The twin (an unknown exception) is the test above."""
    from dpsql.sql import tree_intervals

    p, _ = _plan(
        "SELECT * FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) AS a "
        "UNION SELECT * FROM (SELECT category, COUNT(*) AS n FROM purchases GROUP BY 1) AS b"
    )
    assert p.fallback is None or p.fallback.expected, p.fallback
    honest = tree_intervals._Rewriter.select

    def abort(self: tree_intervals._Rewriter, s: exp.Select, hidden: bool) -> object:
        if hidden:
            raise tree_intervals._Abort("a LATERAL or function source over aggregates")
        return honest(self, s, hidden)

    monkeypatch.setattr(tree_intervals._Rewriter, "select", abort)
    p, _ = _plan(next(iter(CASES)))
    assert p.fallback is not None and p.fallback.expected and not p.fallback.error, p.fallback
    assert isinstance(_outputs(p)["r"], No) and "LATERAL" in _outputs(p)["r"].reason


@pytest.mark.parametrize("sql", list(CASES))
def test_no_case_falls_back_unexpectedly(sql: str) -> None:
    p, _ = _plan(sql)
    assert p.fallback is None or p.fallback.expected, p.fallback
