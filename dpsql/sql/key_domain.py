"""Which values a GROUP BY key can take on the rows a query keeps: its public key domain.

A key's domain is the list of groups dpsql releases (each with noise, whether or not it has rows),
so it must be public: it is computed from the policy (``keys:``, ``keys_from:`` tables of public
data) and the query's text only, never from private rows. This module narrows a declared domain
by the query's WHERE clause, and derives one from the query text where the policy gives none.

**Narrowing** (``WHERE category IN ('books', 'travel') GROUP BY category``): a declared key ``k``
is dropped when, for a row whose key equals ``k``, the WHERE clause can't be true whatever the
row's other columns (:func:`admits`, three-valued logic over the sets of truth values each
condition can take). No row with that key reaches the aggregate, so its group's true value is
empty and PostgreSQL would not return it: releasing it would only show a noisy phantom. Every
condition dpsql can't read exactly (another column, a parameter, ``now()``, a function) can take
any truth value, so it never removes a key.

**Domains from the query text**: ``WHERE k = 'a'`` or ``k IN ('a', 'b')`` (ANDed at the top
level, or ORed together) bounds the values of ``k`` on kept rows, so those literals are a public
domain even when the policy declares none: no partition selection (no threshold, no delta)
is needed. ``CASE`` expressions whose results are all literals take only those values.

Soundness: a domain is always applied upstream as a filter (``CAST(key AS text) IN (...)``,
:func:`dpsql.sql.rewrite.bound_contributions`), so a row whose key text is not in the domain is
dropped before contribution bounding, whatever the reasoning here says: a mistake can make an
answer too small, never release a private value or raise the sensitivity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.model import TypeFamily
from dpsql.sql.constants import (
    NULL,
    UNKNOWN,
    Const,
    Value,
    _Null,
    _Unknown,
    as_utc,
    constant,
    parse_date,
    parse_timestamp,
)

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


def _strip(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _coerce(v: Value, c: Const) -> Const:
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
        if isinstance(c, datetime):
            return as_utc(c)
        if isinstance(c, date):
            return datetime(c.year, c.month, c.day)
    return UNKNOWN


def _as_datetime(v: date | datetime) -> datetime:
    return as_utc(v) if isinstance(v, datetime) else datetime(v.year, v.month, v.day)


def _compare(op: type, v: Value, c: Const) -> Truth:
    if isinstance(v, _Null) or isinstance(c, _Null):
        return _N
    c = _coerce(v, c)
    if isinstance(c, _Unknown) or isinstance(c, _Null):
        return _ANY if isinstance(c, _Unknown) else _N
    a: object = _as_datetime(v) if isinstance(v, (date, datetime)) else v
    if op is exp.EQ:
        return _T if a == c else _F
    if op is exp.NEQ:
        return _F if a == c else _T
    if isinstance(v, (str, bool)):
        return _ANY  # text order depends on the collation; booleans are rarely ranged
    ok = {
        exp.GT: lambda x, y: x > y,
        exp.GTE: lambda x, y: x >= y,
        exp.LT: lambda x, y: x < y,
        exp.LTE: lambda x, y: x <= y,
    }[op](a, c)
    return _T if ok else _F


def _compare_range(op: type, lo: datetime, last: datetime, c: Const) -> Truth:
    """A comparison ``x op c`` for every x in [lo, last]: always, never or sometimes true."""
    c = _coerce(lo, c)
    if isinstance(c, _Null):
        return _N
    if not isinstance(c, datetime):
        return _ANY
    always, never = {
        exp.GTE: (lo >= c, last < c),
        exp.GT: (lo > c, last <= c),
        exp.LT: (last < c, lo >= c),
        exp.LTE: (last <= c, lo > c),
        exp.EQ: (lo == last == c, c < lo or c > last),
        exp.NEQ: (c < lo or c > last, lo == last == c),
    }[op]
    return _T if always else _F if never else _T | _F


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _atom(h: Hypothesis, side: exp.Expression, op: type, other: exp.Expression) -> Truth | None:
    """``side op other`` under ``h``, or None when ``side`` is neither the key nor its base."""
    sql = _strip(side).sql("postgres")
    if sql == h.key:
        return _compare(op, h.value, constant(other))
    if h.base is not None and sql == h.base and h.lo is not None and h.hi is not None:
        return _compare_range(op, h.lo, h.hi, constant(other))
    return None


def condition_key(node: exp.Expression) -> tuple[str, bool]:
    """A condition's identity for :mod:`dpsql.sql.case_keys`: (SQL, negated). Comparisons of
    the same two operands share one: ``a >= b`` is NOT ``a < b`` and ``b > a`` is ``a < b``
    (in SQL's three-valued logic, for the totally ordered types of row-level values)."""
    if not isinstance(node, _COMPARISONS):
        return node.sql("postgres"), False
    a, b = _strip(node.this), _strip(node.expression)
    op: type = type(node)
    if op in (exp.GT, exp.GTE):  # x > y is y < x
        a, b, op = b, a, exp.LT if op is exp.GT else exp.LTE
    negated = False
    if op is exp.NEQ:
        op, negated = exp.EQ, True
    sa, sb = a.sql("postgres"), b.sql("postgres")
    if op is exp.EQ:
        lo, hi = sorted((sa, sb))
        return f"{lo} = {hi}", negated
    if op is exp.LTE:  # a <= b is NOT b < a
        a, b, sa, sb, negated = b, a, sb, sa, True
    return f"{sa} < {sb}", negated


def truth(node: exp.Expression, h: Hypothesis, fixed: Mapping[str, str] | None = None) -> Truth:
    """The truth values ``node`` may take on a row satisfying ``h`` (and where each condition
    whose SQL is in ``fixed`` has that truth value: :mod:`dpsql.sql.case_keys`)."""
    node = _strip(node)
    if node.args.get("negate"):  # x IS NOT NULL, x NOT LIKE ...: sqlglot's flag, not a Not node
        plain = node.copy()
        plain.set("negate", None)
        return frozenset(_NOT[t] for t in truth(plain, h, fixed))
    if isinstance(node, exp.And):
        return _combine(_and3, (truth(x, h, fixed) for x in (node.this, node.expression)))
    if isinstance(node, exp.Or):
        return _combine(_or3, (truth(x, h, fixed) for x in (node.this, node.expression)))
    if isinstance(node, exp.Not):
        return frozenset(_NOT[t] for t in truth(node.this, h, fixed))
    if isinstance(node, exp.Boolean):
        return _T if node.this else _F
    if fixed:
        sql, negated = condition_key(node)
        got = fixed.get(sql)
        if got is not None:
            return frozenset(_NOT[got] if negated else got)
    if isinstance(node, _COMPARISONS):
        op = type(node)
        got = _atom(h, node.this, op, node.expression)
        if got is None:
            got = _atom(h, node.expression, _FLIP.get(op, op), node.this)
        return got if got is not None else _ANY
    if isinstance(node, exp.Between) and not node.args.get("symmetric"):
        low = exp.GTE(this=node.this, expression=node.args["low"])
        high = exp.LTE(this=node.this, expression=node.args["high"])
        return _combine(_and3, (truth(low, h), truth(high, h)))
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
        parts = [exp.EQ(this=node.this, expression=e) for e in node.expressions]
        if parts and not node.args.get("field"):
            return _combine(_or3, (truth(p, h) for p in parts))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        sql = _strip(node.this).sql("postgres")
        if sql == h.key:
            return _T if isinstance(h.value, _Null) else _F
        if sql == h.base:
            return _F  # date_trunc of NULL is NULL: a non-NULL key has a non-NULL base
    return _ANY


def key_value(text: str | None, family: TypeFamily) -> Value | None:
    """A key's text (as PostgreSQL prints it) as a comparable value; None if it can't be read."""
    if text is None:
        return NULL
    if family in ("integer", "numeric"):
        try:
            return Fraction(Decimal(text))
        except (InvalidOperation, ValueError):
            return None
    if family == "text":
        return text
    if family == "boolean":
        low = text.lower()
        return low in ("t", "true") if low in ("t", "true", "f", "false") else None
    if family == "date":
        return parse_date(text)
    if family == "timestamp":
        plain = text[:-3] if text.endswith("+00") else text  # timestamptz printed in UTC
        return parse_timestamp(plain)
    return None


@dataclass(frozen=True)
class KeyFilter:
    """Narrows a key's domain by a WHERE clause (for ``keys_from`` domains, read at run time)."""

    key: exp.Expression
    where: exp.Expression
    family: TypeFamily
    base: exp.Expression | None = None  # date_trunc(unit, base)
    unit: str | None = None
    base_is_date: bool = False  # a date base takes whole days only (else microseconds)

    def admits(self, text: str | None) -> bool:
        """False only when no row whose key prints as ``text`` can pass the WHERE clause."""
        v = key_value(text, self.family)
        if v is None:
            return True
        lo = hi = None
        if self.unit is not None and isinstance(v, datetime):
            from dpsql.sql.date_domain import unit_end  # (date_domain imports this module's deps)

            step = timedelta(days=1) if self.base_is_date else timedelta(microseconds=1)
            lo, hi = v, unit_end(v, self.unit) - step
        h = Hypothesis(
            self.key.sql("postgres"),
            v,
            self.base.sql("postgres") if self.base is not None else None,
            lo,
            hi,
        )
        if "t" not in truth(self.where, h):
            return False
        from dpsql.sql.case_keys import case_admits  # (it builds on this module)

        return case_admits(self.key, text, self.where, h)

    def narrow(self, keys: Sequence[str]) -> tuple[str, ...]:
        return tuple(k for k in keys if self.admits(k))


def _text_of(c: Const, family: TypeFamily) -> str | None:
    """How PostgreSQL prints a value of the key's type equal to constant ``c`` (None: unsure)."""
    if family == "text":
        return c if isinstance(c, str) else None
    if family == "integer":
        v = _coerce(Fraction(0), c)
        return str(int(v)) if isinstance(v, Fraction) and v.denominator == 1 else None
    if family == "boolean":
        v = _coerce(True, c)
        return ("true" if v else "false") if isinstance(v, bool) else None
    if family == "date":
        if isinstance(c, str):
            d = parse_date(c)
            return d.isoformat() if d is not None else None
        if isinstance(c, date) and not isinstance(c, datetime):
            return c.isoformat()
    return None  # numeric prints its scale (1.0 vs 1), timestamps their zone: not derived


def _listed(node: exp.Expression, key: str, family: TypeFamily) -> set[str] | None:
    """The values ``node`` being true allows for the key (None: any value)."""
    node = _strip(node)
    if node.args.get("negate"):
        return None
    if isinstance(node, exp.Or):
        a = _listed(node.this, key, family)
        b = _listed(node.expression, key, family)
        return None if a is None or b is None else a | b
    if isinstance(node, exp.And):
        a = _listed(node.this, key, family)
        b = _listed(node.expression, key, family)
        if a is None or b is None:
            return a if b is None else b
        return a & b
    consts: list[exp.Expression] = []
    if isinstance(node, exp.EQ):
        if _strip(node.this).sql("postgres") == key:
            consts = [node.expression]
        elif _strip(node.expression).sql("postgres") == key:
            consts = [node.this]
    elif (
        isinstance(node, exp.In)
        and not node.args.get("query")
        and not node.args.get("unnest")
        and not node.args.get("field")
        and _strip(node.this).sql("postgres") == key
    ):
        consts = list(node.expressions)
    if not consts:
        return None
    out = set()
    for c in consts:
        value = constant(c)
        if isinstance(value, _Null):
            continue  # k = NULL is never true
        text = _text_of(value, family)
        if text is None:
            return None
        out.add(text)
    return out


def listed_domain(
    where: exp.Expression, key: exp.Expression, family: TypeFamily
) -> tuple[str, ...] | None:
    """The key values the WHERE clause lists (``k = c``, ``k IN (...)``), sorted; or None."""
    got = _listed(where, key.sql("postgres"), family)
    return None if got is None else tuple(sorted(got))


def literal_text(node: exp.Expression | None) -> tuple[str, str | None] | None:
    """A CASE result as (kind, text PostgreSQL prints; None for NULL), or None if not a literal."""
    r = _strip(node) if node is not None else None
    v = constant(r) if r is not None else NULL
    if isinstance(v, _Null):
        return "null", None
    if isinstance(v, str) and isinstance(r, exp.Literal):
        return "text", v
    if isinstance(v, bool):
        return "boolean", "true" if v else "false"
    if isinstance(v, Fraction) and _plain_number(r):
        return "number", _number_text(r)
    return None


def case_domain(node: exp.Expression) -> tuple[tuple[str, ...], bool, TypeFamily] | None:
    """A CASE whose results are all literals: (their texts, whether NULL is possible, family).

    ``CASE WHEN amount < 100 THEN 'small' ELSE 'large' END`` takes only 'small' and 'large',
    whatever the data; without ELSE it may also be NULL. Mixed kinds (text and numbers) are left
    to PostgreSQL's type resolution: None.
    """
    node = _strip(node)
    if not isinstance(node, exp.Case):
        return None
    results = [i.args.get("true") for i in node.args.get("ifs") or []]
    null = False
    texts: list[str] = []
    kinds: set[str] = set()
    for r in [*results, node.args.get("default")]:
        got = literal_text(r)
        if got is None:
            return None
        kind, text = got
        if text is None:
            null = True
            continue
        kinds.add(kind)
        texts.append(text)
    if len(kinds) > 1:
        return None
    kind = kinds.pop() if kinds else "text"
    if kind == "number":
        scaled = any("." in t for t in texts)
        if scaled and any("." not in t for t in texts):
            return None  # integer results print differently once the CASE is numeric
        family: TypeFamily = "numeric" if scaled else "integer"
    else:
        family = "boolean" if kind == "boolean" else "text"
    return tuple(dict.fromkeys(texts)), null, family


def _plain_number(node: exp.Expression | None) -> bool:
    lit = node.this if isinstance(node, exp.Neg) else node
    return (
        isinstance(lit, exp.Literal)
        and not lit.is_string
        and all(ch.isdigit() or ch == "." for ch in str(lit.this))
        and str(lit.this).count(".") <= 1
    )


def _number_text(node: exp.Expression | None) -> str:
    neg = isinstance(node, exp.Neg)
    lit = node.this if isinstance(node, exp.Neg) else node
    assert isinstance(lit, exp.Literal)
    d = Decimal(str(lit.this))
    text = format(d, "f")
    if "." not in text:
        text = str(int(d))
    return ("-" + text) if neg and d != 0 else text
