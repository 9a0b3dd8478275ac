"""Three-valued logic of a WHERE clause on a hypothesised key value: which truth values (true,
false, NULL) each condition, and so the clause, can take for a row whose GROUP BY key has a given
value. :mod:`dpsql.sql.key_domain` narrows key domains with it, :mod:`dpsql.sql.case_keys` and
:mod:`dpsql.sql.key_literals` build on it. Reads the statement's text only, never data.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.sql.constants import (
    UNKNOWN,
    Const,
    Value,
    _Null,
    _Unknown,
    as_datetime,
    as_point,
    constant,
    parse_timestamp,
)
from dpsql.sql.like_keys import like_match
from dpsql.sql.nodes import POSTGRES
from dpsql.upstream.zone import ZONE, is_utc

Truth = frozenset[str]  # subsets of {"t", "f", "n"}: the truth values a condition may take
_T, _F, _N = frozenset("t"), frozenset("f"), frozenset("n")
_ANY: Truth = frozenset("tfn")


def _and3(a: str, b: str) -> str:
    if "f" in (a, b):
        return "f"
    return "n" if "n" in (a, b) else "t"


def _or3(a: str, b: str) -> str:
    if "t" in (a, b):
        return "t"
    return "n" if "n" in (a, b) else "f"


_NOT = {"t": "f", "f": "t", "n": "n"}


def _combine(op: Callable[[str, str], str], parts: Iterable[Truth]) -> Truth:
    out: Truth | None = None
    for p in parts:
        out = p if out is None else frozenset(op(a, b) for a in out for b in p)
    return out if out is not None else _T


@dataclass(frozen=True)
class Hypothesis:
    """ "The row's key ``key`` equals ``value``" (and, for ``date_trunc(unit, col)`` keys, the
    base column lies in ``[lo, hi)``)."""

    key: str  # the key expression's SQL
    value: Value
    base: str | None = None
    lo: datetime | None = None
    hi: datetime | None = None


def strip_parens(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def coerce(v: Value, c: Const) -> Const:
    """``c`` as a value comparable with ``v`` (PostgreSQL coerces an untyped literal to the
    column's type); UNKNOWN when the comparison is not one dpsql models exactly."""
    if isinstance(c, (_Null, _Unknown)):
        return c
    if isinstance(v, bool):
        if isinstance(c, bool):
            return c
        if isinstance(c, str) and c.strip().lower() in ("t", "true", "f", "false"):
            return c.strip().lower().startswith("t")
        return UNKNOWN
    if isinstance(v, Fraction):
        if isinstance(c, Fraction):
            return c
        if isinstance(c, str):
            try:
                return Fraction(Decimal(c.strip()))
            except (InvalidOperation, ValueError):
                return UNKNOWN
        return UNKNOWN
    if isinstance(v, str):
        return c if isinstance(c, str) else UNKNOWN
    if isinstance(v, (date, datetime)):
        if isinstance(c, str):
            c = parse_timestamp(c) or UNKNOWN
        point = as_point(c)
        return UNKNOWN if point is None else point
    return UNKNOWN


_ORDER: dict[type[exp.Expr], Callable[[Any, Any], bool]] = {
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
}


def _compare(op: type[exp.Expr], v: Value, c: Const) -> Truth:
    if isinstance(v, _Null) or isinstance(c, _Null):
        return _N
    c = coerce(v, c)
    if isinstance(c, _Unknown) or isinstance(c, _Null):
        return _ANY if isinstance(c, _Unknown) else _N
    a: object = as_datetime(v) if isinstance(v, (date, datetime)) else v
    if op is exp.EQ:
        return _T if a == c else _F
    if op is exp.NEQ:
        return _F if a == c else _T
    if isinstance(v, (str, bool)):
        return _ANY  # text order depends on the collation; booleans are rarely ranged
    ok = _ORDER[op](a, c)
    return _T if ok else _F


def _compare_range(op: type[exp.Expr], lo: datetime, last: datetime, c: Const) -> Truth:
    """A comparison ``x op c`` for every x in [lo, last]: always, never or sometimes true."""
    c = coerce(lo, c)
    if isinstance(c, _Null):
        return _N
    if not isinstance(c, datetime):
        return _ANY
    table: dict[type[exp.Expr], tuple[bool, bool]] = {
        exp.GTE: (lo >= c, last < c),
        exp.GT: (lo > c, last <= c),
        exp.LT: (last < c, lo >= c),
        exp.LTE: (last <= c, lo > c),
        exp.EQ: (lo == last == c, c < lo or c > last),
        exp.NEQ: (c < lo or c > last, lo == last == c),
    }
    always, never = table[op]
    return _T if always else _F if never else _T | _F


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


# Per narrowing: the SQL text and constant value of each operand, by node identity (the WHERE
# tree is not changed while a domain is narrowed, and every node stays alive meanwhile).
_MEMO: ContextVar[dict[tuple[str, int], Any] | None] = ContextVar("key_domain_memo", default=None)


def _sql(node: exp.Expr) -> str:
    memo = _MEMO.get()
    if memo is None:
        return strip_parens(node).sql(POSTGRES)
    key = ("s", id(node))
    if key not in memo:
        memo[key] = strip_parens(node).sql(POSTGRES)
    return str(memo[key])


def _constant(node: exp.Expr) -> Const:
    memo = _MEMO.get()
    if memo is None:
        return _zoned_constant(node)
    key = ("c", id(node))
    if key not in memo:
        memo[key] = _zoned_constant(node)
    value: Const = memo[key]
    return value


def _zoned_constant(node: exp.Expr) -> Const:
    """:func:`constant`, except an instant (``to_timestamp(seconds)``, naive UTC) in a session
    of another zone: UNKNOWN (a key's value is the zone's wall clock there; compared as UTC,
    Grafana's ``$__timeFilter`` in Kolkata ruled out the range's last day, rows and all:
    :mod:`dpsql.sql.zone_bounds` reads it for the key's domain)."""
    if not is_utc(ZONE.get()) and node.find(exp.UnixToTime) is not None:
        return UNKNOWN
    return constant(node)


def _plain_sql(node: exp.Expr) -> str:
    """The SQL of ``node`` without sqlglot's ``negate`` flag (x IS NOT NULL -> x IS NULL)."""
    memo = _MEMO.get()
    key = ("p", id(node))
    if memo is not None and key in memo:
        return str(memo[key])
    plain = node.copy()
    plain.set("negate", None)
    text = plain.sql(POSTGRES)
    if memo is not None:
        memo[key] = text
    return text


@contextmanager
def memoized() -> Iterator[None]:
    """Memoize operands' SQL and constants while one WHERE clause is evaluated many times."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def _atom(h: Hypothesis, side: exp.Expr, op: type[exp.Expr], other: exp.Expr) -> Truth | None:
    """``side op other`` under ``h``, or None when ``side`` is neither the key nor its base."""
    sql = _sql(side)
    if sql == h.key:
        return _compare(op, h.value, _constant(other))
    if h.base is not None and sql == h.base and h.lo is not None and h.hi is not None:
        return _compare_range(op, h.lo, h.hi, _constant(other))
    return None


def condition_key(node: exp.Expr) -> tuple[str, bool]:
    """A condition's identity for :mod:`dpsql.sql.case_keys`: (SQL, negated). Comparisons of
    the same two operands share one: ``a >= b`` is NOT ``a < b`` and ``b > a`` is ``a < b``
    (in SQL's three-valued logic, for the totally ordered types of row-level values)."""
    if not isinstance(node, _COMPARISONS):
        if node.args.get("negate"):  # the condition without its NOT (the caller negates)
            return _plain_sql(node), False
        return _sql(node), False
    a, b = strip_parens(node.this), strip_parens(node.expression)
    op: type = type(node)
    if op in (exp.GT, exp.GTE):  # x > y is y < x
        a, b, op = b, a, exp.LT if op is exp.GT else exp.LTE
    negated = False
    if op is exp.NEQ:
        op, negated = exp.EQ, True
    sa, sb = _sql(a), _sql(b)
    if op is exp.EQ:
        lo, hi = sorted((sa, sb))
        return f"{lo} = {hi}", negated
    if op is exp.LTE:  # a <= b is NOT b < a
        a, b, sa, sb, negated = b, a, sb, sa, True
    return f"{sa} < {sb}", negated


def truth(node: exp.Expr, h: Hypothesis, fixed: Mapping[str, str] | None = None) -> Truth:
    """The truth values ``node`` may take on a row satisfying ``h`` (and where each condition
    whose SQL is in ``fixed`` has that truth value: :mod:`dpsql.sql.case_keys`)."""
    node = strip_parens(node)
    if isinstance(node, exp.And):
        return _combine(_and3, (truth(x, h, fixed) for x in (node.this, node.expression)))
    if isinstance(node, exp.Or):
        return _combine(_or3, (truth(x, h, fixed) for x in (node.this, node.expression)))
    if isinstance(node, exp.Not):
        return frozenset(_NOT[t] for t in truth(node.this, h, fixed))
    if isinstance(node, exp.Boolean):
        return _T if node.this else _F
    if isinstance(node, exp.Escape) and isinstance(node.this, (exp.Like, exp.ILike)):
        esc = _constant(node.expression)  # [NOT] [I]LIKE ... ESCAPE 'c'
        like = node.this
        got = like_truth(like, h.key, h.value, esc) if isinstance(esc, str) else _ANY
        return frozenset(_NOT[t] for t in got) if like.args.get("negate") else got
    got = _leaf(node, h, fixed)
    if node.args.get("negate"):  # x IS NOT NULL, x NOT LIKE ...: sqlglot's flag, not a Not node
        return frozenset(_NOT[t] for t in got)
    return got


def _distinct(v: Value, c: Const, not_distinct: bool) -> Truth:
    """``v IS NOT DISTINCT FROM c`` (``not_distinct``) or ``IS DISTINCT FROM``: never NULL."""
    if isinstance(c, _Unknown):
        return _ANY
    if isinstance(v, _Null) or isinstance(c, _Null):
        same = isinstance(v, _Null) and isinstance(c, _Null)
    else:
        eq = _compare(exp.EQ, v, c)
        if eq not in (_T, _F):
            return _ANY
        same = eq == _T
    return _T if same == not_distinct else _F


def _leaf(node: exp.Expr, h: Hypothesis, fixed: Mapping[str, str] | None) -> Truth:
    """A condition's truth values, ignoring its ``negate`` flag (applied by the caller)."""
    if fixed:
        sql, negated = condition_key(node)
        value = fixed.get(sql)
        if value is not None:
            return frozenset(_NOT[value] if negated else value)
    if isinstance(node, _COMPARISONS):
        op = type(node)
        got = _atom(h, node.this, op, node.expression)
        if got is None:
            got = _atom(h, node.expression, _FLIP.get(op, op), node.this)
        return got if got is not None else _ANY
    if isinstance(node, exp.Between) and not node.args.get("symmetric"):
        low = _atom(h, node.this, exp.GTE, node.args["low"])
        high = _atom(h, node.this, exp.LTE, node.args["high"])
        return _combine(_and3, (low or _ANY, high or _ANY))
    if (
        isinstance(node, exp.In)
        and node.expressions
        and not any(node.args.get(k) for k in ("query", "unnest", "field"))
    ):
        parts = [_atom(h, node.this, exp.EQ, e) for e in node.expressions]
        return _combine(_or3, (p or _ANY for p in parts))
    if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)):  # IS [NOT] DISTINCT FROM
        for side, other in ((node.this, node.expression), (node.expression, node.this)):
            if _sql(side) == h.key:
                return _distinct(h.value, _constant(other), isinstance(node, exp.NullSafeEQ))
    if isinstance(node, (exp.Like, exp.ILike)):
        return like_truth(node, h.key, h.value)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        sql = _sql(node.this)
        if sql == h.key:
            return _T if isinstance(h.value, _Null) else _F
        if sql == h.base:
            return _F  # date_trunc of NULL is NULL: a non-NULL key has a non-NULL base
    return _ANY


def like_truth(node: exp.Like | exp.ILike, key: str, value: Value, escape: str = "\\") -> Truth:
    """``key [I]LIKE pattern [ESCAPE escape]`` (its ``negate`` flag applied by the caller) for
    a row whose key prints as ``value``: decided where :func:`dpsql.sql.like_keys.like_match`
    decides it exactly, else any truth value."""
    if _sql(node.this) != key:
        return _ANY
    if isinstance(value, _Null):
        return _N
    pattern = _constant(node.expression)
    if isinstance(pattern, _Null):
        return _N
    if not isinstance(value, str) or not isinstance(pattern, str):
        return _ANY
    got = like_match(value, pattern, escape, fold=isinstance(node, exp.ILike))
    return _ANY if got is None else _T if got else _F
