"""Value ranges of row-level expressions from declared bounds (interval arithmetic, exact).

The range of an aggregate's argument gives its sensitivity: one row changes a SUM by at most
max(|lo|, |hi|). Ranges come from the policy's declared bounds and the query's literals only,
never from the data. An expression whose range can't be bounded returns None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.model import Column

Columns = Mapping[str, Column] | Callable[[exp.Column], Column | None]


def lookup(columns: Columns, node: exp.Column) -> Column | None:
    """The policy column of a reference: by name in a mapping, or through a resolver (joins)."""
    if callable(columns):
        return columns(node)
    return columns.get(node.name)


@dataclass(frozen=True)
class Interval:
    lo: Fraction
    hi: Fraction

    def __or__(self, other: Interval) -> Interval:
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    @property
    def magnitude(self) -> Fraction:
        return max(abs(self.lo), abs(self.hi))

    @property
    def mid(self) -> Fraction:
        return (self.lo + self.hi) / 2

    @property
    def half_width(self) -> Fraction:
        return (self.hi - self.lo) / 2


def literal_value(node: exp.Expression) -> Fraction | None:
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Neg):
        v = literal_value(node.this)
        return -v if v is not None else None
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return Fraction(Decimal(node.this))
        except (InvalidOperation, ValueError):
            return None
    return None


def value_range(node: exp.Expression, columns: Columns) -> Interval | None:
    """The range of ``node`` over all rows, given the (clamped) columns' declared bounds."""
    v = literal_value(node)
    if v is not None:
        return Interval(v, v)
    if isinstance(node, exp.Paren):
        return value_range(node.this, columns)
    if isinstance(node, exp.Column):
        col = lookup(columns, node)
        if col is None or col.bounds is None:
            return None
        return Interval(col.lo, col.hi)
    if isinstance(node, exp.Boolean):
        return Interval(Fraction(int(node.this)), Fraction(int(node.this)))
    if isinstance(node, exp.Neg):
        r = value_range(node.this, columns)
        return Interval(-r.hi, -r.lo) if r else None
    if isinstance(node, exp.Cast):
        return value_range(node.this, columns)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        a = value_range(node.this, columns)
        b = value_range(node.expression, columns)
        if a is None or b is None:
            return None
        if isinstance(node, exp.Add):
            return Interval(a.lo + b.lo, a.hi + b.hi)
        if isinstance(node, exp.Sub):
            return Interval(a.lo - b.hi, a.hi - b.lo)
        prods = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
        return Interval(min(prods), max(prods))
    if isinstance(node, (exp.Div, exp.IntDiv)):
        a = value_range(node.this, columns)
        d = literal_value(node.expression)
        if a is None or d is None or d == 0:
            return None  # division by a column is unbounded; the rewrite guards zero
        q = [a.lo / d, a.hi / d]
        # integer division truncates toward zero: still inside [min(q), max(q)] widened to ints
        return Interval(min(q) - (1 if isinstance(node, exp.IntDiv) else 0), max(q))
    if isinstance(node, exp.Abs):
        r = value_range(node.this, columns)
        if r is None:
            return None
        lo = Fraction(0) if r.lo <= 0 <= r.hi else min(abs(r.lo), abs(r.hi))
        return Interval(lo, r.magnitude)
    if isinstance(node, (exp.Round, exp.Floor, exp.Ceil)):
        r = value_range(node.this, columns)
        return Interval(r.lo - 1, r.hi + 1) if r else None
    if isinstance(node, (exp.Greatest, exp.Least, exp.Coalesce)):
        parts = [node.this, *node.expressions]
        rs = [value_range(p, columns) for p in parts]
        if any(r is None for r in rs):
            return None
        out = rs[0]
        for r in rs[1:]:
            out = out | r  # type: ignore[operator]
        return out
    if isinstance(node, exp.Nullif):
        return value_range(node.this, columns)
    if isinstance(node, (exp.Case, exp.If)):
        branches = [i.args.get("true") for i in node.args.get("ifs") or []]
        default = node.args.get("default")
        if isinstance(node, exp.If):
            branches = [node.args.get("true")]
            default = node.args.get("false")
        out: Interval | None = None
        for b in [*branches, default]:
            if b is None:
                continue  # missing ELSE gives NULL, ignored by aggregates
            r = value_range(b, columns)
            if r is None:
                return None
            out = r if out is None else out | r
        return out
    if isinstance(node, (exp.Predicate, exp.Not, exp.And, exp.Or, exp.Is, exp.In, exp.Between)):
        return Interval(Fraction(0), Fraction(1))  # booleans sum as 0/1 after a cast
    return None
