"""Key domains written in the statement: the values a WHERE clause lists, a CASE's literals.

``WHERE k = 'a'`` or ``k IN ('a', 'b')`` bounds the values of ``k`` on the rows kept, so those
literals are a public domain even when the policy declares none; ``CASE ... THEN 'small' ELSE
'large' END`` takes only its literal results. The texts are the ones PostgreSQL prints for
values of the key's type (the key filter upstream compares ``CAST(key AS text)``). The
privacy argument is :mod:`dpsql.sql.key_domain`'s: the statement's text is public.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.tables import TypeFamily
from dpsql.sql.constants import NULL, Const, _Null, constant, parse_date
from dpsql.sql.key_truth import coerce, strip_parens
from dpsql.sql.nodes import POSTGRES


def _text_of(c: Const, family: TypeFamily) -> str | None:
    """How PostgreSQL prints a value of the key's type equal to constant ``c`` (None: unsure)."""
    if family == "text":
        return c if isinstance(c, str) else None
    if family == "integer":
        v = coerce(Fraction(0), c)
        return str(int(v)) if isinstance(v, Fraction) and v.denominator == 1 else None
    if family == "boolean":
        v = coerce(True, c)
        return ("true" if v else "false") if isinstance(v, bool) else None
    if family == "date":
        if isinstance(c, str):
            d = parse_date(c)
            return d.isoformat() if d is not None else None
        if isinstance(c, date) and not isinstance(c, datetime):
            return c.isoformat()
    return None  # numeric prints its scale (1.0 vs 1), timestamps their zone: not derived


def _listed(node: exp.Expr, key: str, family: TypeFamily) -> set[str] | None:
    """The values ``node`` being true allows for the key (None: any value)."""
    node = strip_parens(node)
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
    consts: list[exp.Expr] = []
    if isinstance(node, exp.EQ):
        if strip_parens(node.this).sql(POSTGRES) == key:
            consts = [node.expression]
        elif strip_parens(node.expression).sql(POSTGRES) == key:
            consts = [node.this]
    elif (
        isinstance(node, exp.In)
        and not node.args.get("query")
        and not node.args.get("unnest")
        and not node.args.get("field")
        and strip_parens(node.this).sql(POSTGRES) == key
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


def listed_domain(where: exp.Expr, key: exp.Expr, family: TypeFamily) -> tuple[str, ...] | None:
    """The key values the WHERE clause lists (``k = c``, ``k IN (...)``), sorted; or None."""
    got = _listed(where, key.sql(POSTGRES), family)
    return None if got is None else tuple(sorted(got))


def literal_text(node: exp.Expr | None) -> tuple[str, str | None] | None:
    """A CASE result as (kind, text PostgreSQL prints; None for NULL), or None if not a literal."""
    r = strip_parens(node) if node is not None else None
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


def case_domain(node: exp.Expr) -> tuple[tuple[str, ...], bool, TypeFamily] | None:
    """A CASE whose results are all literals: (their texts, whether NULL is possible, family).

    ``CASE WHEN amount < 100 THEN 'small' ELSE 'large' END`` takes only 'small' and 'large',
    whatever the data; without ELSE it may also be NULL. Mixed kinds (text and numbers) are left
    to PostgreSQL's type resolution: None.
    """
    node = strip_parens(node)
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


def _plain_number(node: exp.Expr | None) -> bool:
    lit = node.this if isinstance(node, exp.Neg) else node
    return (
        isinstance(lit, exp.Literal)
        and not lit.is_string
        and all(ch.isdigit() or ch == "." for ch in str(lit.this))
        and str(lit.this).count(".") <= 1
    )


def _number_text(node: exp.Expr | None) -> str:
    neg = isinstance(node, exp.Neg)
    lit = node.this if isinstance(node, exp.Neg) else node
    assert isinstance(lit, exp.Literal)
    d = Decimal(str(lit.this))
    text = format(d, "f")
    if "." not in text:
        text = str(int(d))
    return ("-" + text) if neg and d != 0 else text
