"""Substitute bound parameter values ($1, $2, ...) into a tree as typed literals."""

from __future__ import annotations

import datetime as dt
import math
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from dpsql.errors import (
    IndeterminateDatatype,
    InvalidParameter,
    ProtocolViolation,
    UndefinedParameter,
)
from dpsql.sql.nodes import POSTGRES

PARAMS_HINT = (
    "bind one value per $n placeholder (the extended protocol: a driver's parameters, JDBC "
    "PreparedStatement, psql \\bind), or write the values in the statement"
)


def literal(value: Any) -> exp.Expr:
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
    if isinstance(value, (list, tuple)):  # an array parameter (psycopg's x = ANY(%s) lists)
        if not value:
            return exp.Literal.string("{}")  # ARRAY[] has no type; '{}' takes the context's
        return exp.Array(expressions=[literal(v) for v in value])
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidParameter("parameter values may not contain NUL characters")
        return exp.Literal.string(value)
    raise InvalidParameter(f"parameters of type {type(value).__name__} are not supported")


def param_count(tree: exp.Expr) -> int:
    """The highest ``$n`` in ``tree`` (0 without placeholders)."""
    return max(param_numbers(tree), default=0)


def param_numbers(tree: exp.Expr) -> set[int]:
    """The numbers ``n`` of the ``$n`` placeholders in ``tree``."""
    return {
        int(p.this.this)
        for p in tree.find_all(exp.Parameter)
        if isinstance(p.this, exp.Literal) and str(p.this.this).isdigit()
    }


UNKNOWN_OID = 705  # PostgreSQL's "unknown": a declared type that leaves the parameter untyped


def check_param_types(tree: exp.Expr | None, param_count: int, declared: Sequence[int]) -> None:
    """Refuse, as PostgreSQL's Parse does, a parameter whose type nothing determines.

    A statement has ``max(len(declared), highest $n)`` parameters; one the statement never uses
    needs a type in Parse (``declared``: the Parse message's OIDs, 0 = unspecified). ``tree``
    None: a statement without placeholders when ``param_count`` is 0, else one whose ``$1`` to
    ``$param_count`` count as used. (A used parameter whose type PostgreSQL could not infer, as
    in ``WHERE $1 IS NULL``, is typed text here.)

    >>> from sqlglot import parse_one
    >>> check_param_types(parse_one("SELECT $2", read="postgres"), 2, [23])
    >>> check_param_types(parse_one("SELECT $2", read="postgres"), 2, [])
    Traceback (most recent call last):
    dpsql.errors.IndeterminateDatatype: could not determine data type of parameter $1

    Raises:
        IndeterminateDatatype: 42P18, naming the first such parameter.
    """
    used = param_numbers(tree) if tree is not None else set(range(1, param_count + 1))
    for n in range(1, max(len(declared), max(used, default=0)) + 1):
        typed = n <= len(declared) and declared[n - 1] not in (0, UNKNOWN_OID)
        if n not in used and not typed:
            raise IndeterminateDatatype(
                f"could not determine data type of parameter ${n}",
                hint=f"use ${n} in the statement, give its type in Parse, or renumber the "
                "parameters from $1",
            )


def check_params(tree: exp.Expr | None, expected: int, given: int) -> None:
    """Refuse a wrong number of parameter values with PostgreSQL's codes.

    No values for a statement with placeholders (``$1`` in a simple query) is 42P02 "there is no
    parameter $n", naming the first placeholder in the statement as PostgreSQL does; any other
    count that differs is 08P01, as PostgreSQL answers a Bind with the wrong number of values.

    >>> from sqlglot import parse_one
    >>> check_params(parse_one("SELECT $2 + $1", read="postgres"), 2, 0)
    Traceback (most recent call last):
    dpsql.errors.UndefinedParameter: there is no parameter $2

    Raises:
        UndefinedParameter: 42P02, no values at all.
        ProtocolViolation: 08P01, some values but not as many as the placeholders.
    """
    if given == expected:
        return
    if given == 0:
        first = next(
            (int(p.this.this) for p in (tree.find_all(exp.Parameter, bfs=False) if tree else ())
             if isinstance(p.this, exp.Literal) and str(p.this.this).isdigit()),
            1,
        )  # fmt: skip
        raise UndefinedParameter(f"there is no parameter ${first}", hint=PARAMS_HINT)
    raise ProtocolViolation(
        f"{given} parameter values were supplied, but the statement requires {expected}",
        hint=PARAMS_HINT,
    )


def bind(tree: exp.Expr, params: Sequence[object]) -> exp.Expr:
    """A copy of ``tree`` with each $n replaced by the literal of params[n-1]."""

    def fix(n: exp.Expr) -> exp.Expr:
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


@dataclass(frozen=True)
class Template:
    """A statement's SQL text with a slot per ``$n``, so executing it with new values does not
    copy and re-render the tree: ``render(params) == bind(tree, params).sql(POSTGRES)``.

    ``parts`` has one more element than ``slots``; ``slots[k]`` is the 0-based parameter index
    whose literal goes between ``parts[k]`` and ``parts[k + 1]``.
    """

    parts: tuple[str, ...]
    slots: tuple[int, ...]
    param_count: int

    def render(self, params: Sequence[object]) -> str:
        """The SQL with each slot filled by its parameter's literal (rendered by sqlglot).

        Raises:
            ProtocolViolation: a slot refers to a parameter that was not bound.
            InvalidParameter: a value that has no SQL literal (as :func:`bind`).
        """
        if len(params) < self.param_count:
            raise ProtocolViolation(
                f"there is no parameter ${self.param_count}",
                hint=f"{len(params)} parameters were bound",
            )
        lits = [_literal_sql(v) for v in params]
        out = [self.parts[0]]
        for k, i in enumerate(self.slots):
            out.append(lits[i])
            out.append(self.parts[k + 1])
        return "".join(out)


def _literal_sql(value: Any) -> str:
    lit = literal(value)
    node = exp.Paren(this=lit) if isinstance(lit, exp.Neg) else lit
    return POSTGRES.generate(node, copy=False)  # a fresh node: nothing to protect


def template(tree: exp.Expr) -> Template | None:
    """The :class:`Template` of ``tree`` (postgres dialect), or None when a placeholder is not
    a plain ``$n`` or the rendered text does not split cleanly (then use :func:`bind`)."""
    token = secrets.token_hex(6)  # not noise: a marker no statement text can contain
    marks: dict[str, int] = {}
    bad = False

    def mark(n: exp.Expr) -> exp.Expr:
        nonlocal bad
        if isinstance(n, exp.Parameter):
            if not (isinstance(n.this, exp.Literal) and str(n.this.this).isdigit()):
                bad = True
                return n
            name = f"dpsql_slot_{token}_{len(marks)}"
            marks[name] = int(n.this.this) - 1
            return exp.Var(this=name)
        return n

    text = tree.copy().transform(mark, copy=False).sql(POSTGRES)
    pieces = re.split(f"(dpsql_slot_{token}_[0-9]+)", text)
    names = pieces[1::2]
    if bad or sorted(names) != sorted(marks) or any(marks[n] < 0 for n in names):
        return None
    slots = tuple(marks[n] for n in names)
    return Template(tuple(pieces[0::2]), slots, max(slots, default=-1) + 1)
