"""The blocks of a statement that matter to the planner: which SELECTs aggregate, which read
private rows (directly or through the CTEs they name), and which lie below a block.

Pure functions of the parsed statement and the policy, shared by the split into DP leaves
(:mod:`dpsql.sql.tree`) and the lifting of windows over aggregates
(:mod:`dpsql.sql.lift_windows`).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.model import Policy
from dpsql.sql import functions as fn
from dpsql.sql.tables import cte_body, referenced_tables


def private_tables(s: exp.Expr, policy: Policy, depth: int = 0) -> bool:
    """Whether ``s`` reads a private table, directly or through the CTEs it names."""
    if depth > 32:
        raise UnsupportedSql("CTEs are nested too deeply")
    for name, _ in referenced_tables(s):
        if policy.private_table(name) is not None:
            return True
    for t in s.find_all(exp.Table):
        body = cte_body(t)
        if body is not None and not contains(s, body) and private_tables(body, policy, depth + 1):
            return True
    return False


def contains(outer: exp.Expr, node: exp.Expr) -> bool:
    p: exp.Expr | None = node
    while p is not None:
        if p is outer:
            return True
        p = p.parent
    return False


def own_nodes(s: exp.Select) -> list[exp.Expr]:
    """The nodes of ``s``'s select list, HAVING and ORDER BY outside nested queries."""
    out: list[exp.Expr] = []
    parts = [*s.expressions, s.args.get("having"), s.args.get("order")]
    stack = [p for p in parts if p is not None]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(
            c for c in n.iter_expressions() if not isinstance(c, (exp.Select, exp.Subquery))
        )
    return out


def is_aggregate_block(s: exp.Select) -> bool:
    """GROUP BY, or an aggregate call (not inside a window) in its own select list/HAVING."""
    if s.args.get("group"):
        return True
    for n in own_nodes(s):
        if fn.is_aggregate(n) and not isinstance(n.parent, exp.Window):
            return True
    return False


def selects_below(s: exp.Expr) -> list[exp.Select]:
    """Every SELECT inside ``s`` and inside the bodies of the CTEs it names from outside."""
    out = [t for t in s.find_all(exp.Select) if t is not s]
    for t in s.find_all(exp.Table):
        body = cte_body(t)
        if body is not None and not contains(s, body):
            out += [body] if isinstance(body, exp.Select) else []
            out += [x for x in body.find_all(exp.Select) if x is not body]
    return out
