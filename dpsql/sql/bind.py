"""Substitute bound parameter values ($1, $2, ...) into a tree as typed literals."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from sqlglot import exp

from dpsql.errors import InvalidParameter, ProtocolViolation


def literal(value: Any) -> exp.Expression:
    """A SQL literal for a Python value (strings are quoted by sqlglot, never formatted by hand)."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))
    if isinstance(value, (float, Decimal)):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidParameter(f"parameter value {value} is not a finite number")
        if isinstance(value, Decimal) and not value.is_finite():
            raise InvalidParameter(f"parameter value {value} is not a finite number")
        text = format(value, "f") if isinstance(value, Decimal) else repr(value)
        lit = exp.Literal.number(text.lstrip("-"))
        return exp.Neg(this=lit) if text.startswith("-") else lit
    if isinstance(value, dt.datetime):
        return exp.cast(
            exp.Literal.string(value.isoformat()), "timestamptz" if value.tzinfo else "timestamp"
        )
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "date")
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidParameter("parameter values may not contain NUL characters")
        return exp.Literal.string(value)
    raise InvalidParameter(f"parameters of type {type(value).__name__} are not supported")


def param_count(tree: exp.Expression) -> int:
    n = 0
    for p in tree.find_all(exp.Parameter):
        if isinstance(p.this, exp.Literal) and str(p.this.this).isdigit():
            n = max(n, int(p.this.this))
    return n


def bind(tree: exp.Expression, params: Sequence[Any]) -> exp.Expression:
    """A copy of ``tree`` with each $n replaced by the literal of params[n-1]."""

    def fix(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Parameter) and isinstance(n.this, exp.Literal):
            i = int(n.this.this)
            if not 1 <= i <= len(params):
                raise ProtocolViolation(
                    f"there is no parameter ${i}", hint=f"{len(params)} parameters were bound"
                )
            lit = literal(params[i - 1])
            return exp.Paren(this=lit) if isinstance(lit, exp.Neg) else lit
        return n

    return tree.copy().transform(fix, copy=False)
