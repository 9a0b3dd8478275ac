"""Validate a private SELECT against the policy and describe it as an :class:`Analysis`.

Everything not explicitly understood is refused: a query reaches PostgreSQL only after every node
of it was checked here. The steps: the statement's size (:mod:`dpsql.sql.analyze_complexity`),
flattening (:mod:`dpsql.sql.flatten`), then the SELECT (:mod:`dpsql.sql.analyze_select`) and its
aggregates (:mod:`dpsql.sql.analyze_aggregates`).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.model import Policy
from dpsql.sql.analysis import Analysis
from dpsql.sql.analyze_complexity import check_complexity, check_time_nesting
from dpsql.sql.analyze_select import analyze_select
from dpsql.sql.any_lists import any_as_in
from dpsql.sql.filters_to_case import filters_to_case
from dpsql.sql.flatten import flatten
from dpsql.sql.join_using import using_as_on


def analyze(tree: exp.Expr, policy: Policy) -> Analysis:
    """Check a SELECT over one private table and describe it. Raises a DpsqlError if refused."""
    check_complexity(tree)
    tree = any_as_in(filters_to_case(flatten(using_as_on(tree, policy))))
    # again on the flat statement: a derived table's column is its expression there, copied
    # once per reference (a chain of ``a + a AS a`` doubles it per level)
    check_complexity(tree)
    check_time_nesting(tree)
    if not isinstance(tree, exp.Select):
        raise UnsupportedSql(
            f"{type(tree).__name__.upper()} over private tables is not supported",
            hint="write a single SELECT with aggregates",
        )
    return analyze_select(tree, policy)
