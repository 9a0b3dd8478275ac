"""Parameters inside an aggregate's argument (``SUM(quantity / $1)``, ``AVG(amount * $1)``).

The range of ``quantity / $1`` depends on the value of ``$1``, so such a statement is analyzed
when its values are bound (:func:`dpsql.execute.prepare.bound_limit`), with each value written
as a literal of the parameter's type: PostgreSQL types ``quantity / $1`` by the type of ``$1``
(declared in Parse, else inferred from the other operand), and so does the bound statement
(``quantity / CAST(2.5 AS DOUBLE PRECISION)`` is double precision, as PostgreSQL's answer with a
float8 parameter). This module finds those parameters, infers an undeclared one's type as
PostgreSQL does (an operand of an arithmetic operator: the other operand's type) and writes the
typed literals.

>>> import sqlglot
>>> from dpsql.policy.tables import Column
>>> tree = sqlglot.parse_one("SELECT SUM(q / $1) FROM t WHERE q > $2", read="postgres")
>>> sorted(aggregate_params(tree))
[1]
>>> cols = {"q": Column(type="integer", bounds=[1, 10]), "a": Column(type="numeric")}
>>> operand_oids(tree, aggregate_params(tree), lambda c: cols.get(c.name), 2)
(23, 0)
>>> typed_values(tree, {1: 2}, {1: 701}).sql("postgres")
'SELECT SUM(q / CAST(2 AS DOUBLE PRECISION)) FROM t WHERE q > $2'
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from decimal import Decimal

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.policy.tables import Column
from dpsql.sql.bind import literal
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.pg_types import float_bits, integer_bits

# the number types a parameter's value is written as (type OID -> SQL type name)
NUMBER_TYPES = {21: "smallint", 23: "int", 20: "bigint", 700: "real", 701: "double precision",
                1700: "numeric"}  # fmt: skip
_INTEGER_OIDS = {16: 21, 32: 23, 64: 20}
_FLOAT_OIDS = {32: 700, 64: 701}
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)


def _number(p: exp.Expr) -> int | None:
    if isinstance(p, exp.Parameter) and isinstance(p.this, exp.Literal):
        text = str(p.this.this)
        return int(text) if text.isdigit() else None
    return None


def aggregate_params(tree: exp.Expr) -> frozenset[int]:
    """The numbers ``n`` of the ``$n`` inside an aggregate function's argument."""
    return frozenset(
        n
        for p in tree.find_all(exp.Parameter)
        if (n := _number(p)) is not None and p.find_ancestor(exp.AggFunc) is not None
    )


def _operand_oid(node: exp.Expr, column: Callable[[exp.Column], Column | None]) -> int:
    """The type OID PostgreSQL gives ``node`` when it is a number, else 0."""
    bits = integer_bits(node, column)
    if bits is not None:
        return _INTEGER_OIDS[bits]
    width = float_bits(node, column)
    if width is not None:
        return _FLOAT_OIDS[width]
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        return 1700  # a number with a point or exponent
    if isinstance(node, exp.Column):
        col = column(node)
        return 1700 if col is not None and col.family == "numeric" else 0
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DECIMAL):
        return 1700
    if isinstance(node, exp.Neg | exp.Abs):
        return _operand_oid(node.this, column)
    if isinstance(node, _ARITHMETIC):  # no float, not all integers: numeric if a part is
        parts = (node.this, node.expression)
        return 1700 if any(_operand_oid(p, column) == 1700 for p in parts) else 0
    return 0


def operand_oids(
    tree: exp.Expr,
    numbers: frozenset[int],
    column: Callable[[exp.Column], Column | None],
    count: int,
) -> tuple[int, ...]:
    """The type OIDs of ``$1 .. $count`` as PostgreSQL infers an untyped parameter that is an
    operand of ``+ - * / %``: the other operand's type (``quantity / $1``: quantity's integer);
    0 for a parameter not in ``numbers`` or not read here (a function's argument, a CASE's)."""
    out = [0] * count
    for p in tree.find_all(exp.Parameter):
        n = _number(p)
        if n is None or n not in numbers or not 1 <= n <= count or out[n - 1]:
            continue
        node: exp.Expr = p
        while isinstance(node.parent, exp.Paren):
            node = node.parent
        parent = node.parent
        if isinstance(parent, _ARITHMETIC):
            other = parent.expression if parent.this is node else parent.this
            if _number(other) is None:
                out[n - 1] = _operand_oid(other, column)
    return tuple(out)


def typed_literal(value: object, oid: int) -> exp.Expr:
    """The literal of ``value`` (:func:`dpsql.sql.bind.literal`), cast to the number type
    ``oid`` when it is one and ``value`` a number (or a string that is one)."""
    name = NUMBER_TYPES.get(oid)
    if isinstance(value, str) and name is not None:
        text = value.strip()
        if text.lstrip("+-").isdigit():
            value = int(text)
    if name is None or isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return literal(value)
    return exp.cast(literal(value), exp.DataType.build(name, dialect="postgres"))


def typed_values(tree: exp.Expr, values: Mapping[int, object], oids: Mapping[int, int]) -> exp.Expr:
    """A copy of ``tree`` with each ``$n`` of ``values`` (numbered from 1) written as the
    literal of its value, typed by ``oids`` (:func:`typed_literal`); other ``$n`` left."""

    def fix(node: exp.Expr) -> exp.Expr:
        n = _number(node)
        if n is None or n not in values:
            return node
        lit = typed_literal(values[n], oids.get(n, 0))
        return exp.Paren(this=lit) if isinstance(lit, exp.Neg) else lit

    return tree.copy().transform(fix, copy=False)


def with_values(
    refused: DpsqlError, values: Mapping[int, object], oids: Mapping[int, int]
) -> DpsqlError:
    """``refused`` (the bound statement's refusal) in the statement's own words: each typed
    literal written for ``$n`` said as ``$n`` again, the values in the detail (``$1 = 0``); no
    position (it was the bound text's)."""
    message = refused.message
    for n, value in values.items():
        lit = typed_literal(value, oids.get(n, 0))
        if isinstance(lit, exp.Cast):  # (a bare number may be any constant of the statement)
            text = re.escape(POSTGRES.generate(lit, copy=False))  # (as written: any case)
            message = re.sub(text, f"${n}", message, flags=re.IGNORECASE)
    shown = ", ".join(f"${n} = {_shown(values[n])}" for n in sorted(values))
    out = copy.copy(refused)
    out.args, out.message, out.position = (message,), message, None
    out.detail = f"with {shown}" + (f"; {refused.detail}" if refused.detail else "")
    return out


def _shown(value: object) -> str:
    return "NULL" if value is None else repr(value) if isinstance(value, str) else str(value)
