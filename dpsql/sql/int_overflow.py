"""An integer expression whose declared bounds can leave its type's range: said before running.

PostgreSQL computes ``quantity * 100000000`` of an ``integer`` column in ``integer`` and raises
22003 "integer out of range" on the first row where the product passes 2^31 - 1. Run as
written, such a statement fails mid-run on some data and not on other (whether a row reaches
the range is a fact of the private rows: dpsql never lets a row decide an error), and computed
any other way (clamped, or in ``numeric``) it answers what PostgreSQL refuses. So where the
declared bounds allow a value outside the type's range for any part of an aggregate's
argument, the statement is refused before anything runs or is charged, with PostgreSQL's
SQLSTATE, the user's expression and the way out (a cast to ``bigint``, or ``numeric`` past
bigint's range). So is a GROUP BY key's (its released values are of its type: a declared domain's
key past the range failed in the post-processing's cast after the rows were read and charged).
Elsewhere in a row (WHERE, JOIN ... ON, COUNT(...)) dpsql computes integer arithmetic exactly
in bigint (:mod:`dpsql.sql.rewrite.make_total`: no row can make it fail), so only a part that can
pass bigint's range is refused there (clamped into it, it would be another value).

>>> import sqlglot
>>> from dpsql.policy.tables import Column
>>> cols = {"q": Column(type="integer", bounds=[0, 100])}
>>> node = sqlglot.parse_one("SUM(q * 100000000)", read="postgres").this
>>> refuse_int_overflow(node, cols, "SUM")
Traceback (most recent call last):
dpsql.errors.NumericValueOutOfRange: SUM(q * 100000000): q * 100000000 reaches 10000000000 over the declared bounds of q (0 to 100), beyond the range of integer (-2147483648 to 2147483647)
>>> refuse_int_overflow(sqlglot.parse_one("q::bigint * 100000000", read="postgres"), cols, "SUM")
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.errors import NumericValueOutOfRange
from dpsql.sql.pg_types import Columns, integer_bits, lookup
from dpsql.sql.sensitivity import value_range
from dpsql.sql.wording import plain_sql

_NAMES = {16: "smallint", 32: "integer", 64: "bigint"}
_BIGINT = 2**63


def refuse_int_overflow(
    arg: exp.Expr,
    columns: Columns,
    agg: str,
    *,
    past_bigint: bool = False,
    written: Callable[[str], str] | None = None,
) -> None:
    """Refuse (22003) ``agg(arg)`` when an integer part of ``arg`` can leave its type's range over
    the declared bounds (:mod:`dpsql.sql.sensitivity`): an aggregate's argument, a GROUP BY key
    (its values are of its type). ``past_bigint``: only where it can leave bigint's range too
    (WHERE, JOIN ... ON, COUNT(...): dpsql computes a row-level smallint or integer part exactly
    in bigint, dpsql.sql.rewrite.make_total, so that no row can make it fail; only past bigint's
    range would it come out clamped, another value). ``written`` puts an expression's text in
    the user's words where ``arg`` is not an aggregate's argument (``GROUP BY x``; default
    ``agg(x)``)."""
    wrap = written or (lambda sql: f"{agg}({sql})")
    for node in arg.walk(bfs=False):
        if not isinstance(node, (exp.Mul, exp.Add, exp.Sub, exp.Neg, exp.Abs)):
            continue  # (a column, a literal or a cast holds its own type's values)
        bits = integer_bits(node, columns)
        if bits not in _NAMES:
            continue
        r = value_range(node, columns)
        top = _BIGINT if past_bigint else 2 ** (bits - 1)
        if r is None or (-top <= r.lo and r.hi <= top - 1):
            continue
        own = 2 ** (bits - 1)
        reach = r.hi if r.hi > own - 1 else r.lo
        bounds = "; ".join(
            f"{c.name} ({float(col.lo):g} to {float(col.hi):g})"
            for c in dict.fromkeys(node.find_all(exp.Column))
            if (col := lookup(columns, c)) is not None and col.bounds is not None
        )
        name = _NAMES[bits]
        wider = "bigint" if -_BIGINT <= r.lo and r.hi <= _BIGINT - 1 else "numeric"
        raise NumericValueOutOfRange(
            f"{wrap(plain_sql(arg))}: {plain_sql(node)} reaches {reach} over the declared "
            f"bounds of {bounds}, beyond the range of {name} ({-own} to {own - 1})",
            detail=f"PostgreSQL computes it in {name} and raises 22003 ({name} out of range) "
            "on any row that reaches past it; whether one does is the private data's, so "
            "dpsql refuses it before running",
            hint=f"cast to {wider} before the arithmetic: "
            f"{wrap(plain_sql(_widened(arg, node, wider)))}",
        )


def _widened(arg: exp.Expr, node: exp.Expr, to: str) -> exp.Expr:
    """``arg`` with the first column ``node`` computes with (its leftmost: the one PostgreSQL
    multiplies first) cast to ``to`` (in place of the casts around it): the hint's example."""
    first = next(node.find_all(exp.Column, bfs=False), None)
    if first is None:
        return arg
    out = arg.copy()
    for old, new in zip(arg.walk(bfs=False), out.walk(bfs=False), strict=True):
        if old is first:
            while isinstance(new.parent, (exp.Cast, exp.Paren)) and new.parent is not out:
                new = new.parent
            new.replace(exp.cast(first.copy(), to))
            break
    return out


__all__ = ["refuse_int_overflow"]
