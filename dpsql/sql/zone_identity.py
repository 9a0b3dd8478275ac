"""Whether a statement's answer can depend on the session's time zone (``SET TIME ZONE``).

A free repeat returns a stored answer only to a statement that would get the same answer
(:func:`dpsql.execute.repeat_keys.repeat_key`): a month bucket of a date is a different instant in New
York than in UTC, ``purchased_at >= '2025-06-01'`` on a timestamptz another row set, ``now()::date``
another day. The zone joins a statement's identity when :func:`zone_matters`: it reads a date or
timestamp column of the policy, a column the policy doesn't describe (a public table's), or calls
a function or cast (a timestamp's text, ``EXTRACT``, ``now()``). Counting rows of text and number
columns does not, so those are still repeats across zones. Erring towards "matters" costs a
charge, never a wrong answer.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.policy.model import Policy

# functions whose result never depends on the time zone given arguments that don't
_PLAIN = (exp.AggFunc, exp.Coalesce, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Trunc,
          exp.WidthBucket, exp.Greatest, exp.Least, exp.Lower, exp.Upper, exp.Length, exp.Nullif, exp.Case, exp.If,
          exp.Sqrt, exp.Ln, exp.Exp, exp.Pow)  # fmt: skip


def zone_matters(tree: exp.Expr, policy: Policy) -> bool:
    """Whether ``tree``'s answer may change with the session's time zone (see the module)."""
    plain: set[str] = set()
    temporal: set[str] = set()
    for pt in policy.tables.values():
        for name, col in pt.columns.items():
            (temporal if col.temporal else plain).add(name)
    for node in tree.walk():
        if isinstance(node, exp.Column):
            if node.name in temporal or node.name not in plain:
                return True
        elif isinstance(node, exp.Func) and not isinstance(node, _PLAIN):
            return True
        elif isinstance(node, exp.DataType) and node.is_type(*exp.DataType.TEMPORAL_TYPES):
            return True
    return False
