"""Dates and times made total (a part of :mod:`dpsql.sql.rewrite.make_total`).

A date column reaches 5874897 AD, a timestamp 294276 AD: a date read where PostgreSQL converts
it to a timestamp (a cast to ``timestamp``/``timestamptz``, ``date_trunc``, ``to_char``,
``date_part``, or a CASE / COALESCE / GREATEST / LEAST that brings it to a timestamp's type)
failed only when a row held such a date. Such a read goes through :func:`within_timestamps`
first: later than 294276-12-29 reads as ``'infinity'``, earlier than 4713-11-26 BC as
``'-infinity'``, which those functions take.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql.sensitivity import Columns, lookup
from dpsql.sql.temporal import temporal_type

# The dates and times every date, timestamp and timestamptz conversion takes in any time zone
# (a timestamp reaches 294276-12-31 and 4714-11-24 BC, a date 5874897 AD; a zone moves them by
# under a day)
_LATEST = "294276-12-29"


_EARLIEST = "4713-11-26 BC"


_TO_TIMESTAMP = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ)


def within_timestamps(x: exp.Expr) -> exp.Expr:
    """``x`` (a date, timestamp or timestamptz read from a row) as a value every timestamp
    conversion takes: ``CASE WHEN x > '294276-12-29' THEN 'infinity' WHEN x < '4713-11-26 BC'
    THEN '-infinity' ELSE x END`` (the literals take ``x``'s type; infinities convert, and
    ``date_trunc``/``to_char`` give infinity/NULL for them). Values in range are unchanged.

    >>> import sqlglot
    >>> within_timestamps(sqlglot.parse_one("d")).sql("postgres")
    "CASE WHEN d > '294276-12-29' THEN 'infinity' WHEN d < '4713-11-26 BC' THEN '-infinity' ELSE d END"
    """
    return exp.Case(
        ifs=[
            exp.If(
                this=exp.GT(this=x.copy(), expression=exp.Literal.string(_LATEST)),
                true=exp.Literal.string("infinity"),
            ),
            exp.If(
                this=exp.LT(this=x.copy(), expression=exp.Literal.string(_EARLIEST)),
                true=exp.Literal.string("-infinity"),
            ),
        ],
        default=x.copy(),
    )


_COMMON_TYPE = (exp.Coalesce, exp.Greatest, exp.Least, exp.Case)


class _Untyped:
    """What :func:`dpsql.sql.temporal.temporal_type` reads of a column the policy doesn't know."""

    family = None
    type = ""


def _chosen_values(n: exp.Expr) -> list[exp.Expr]:
    """The values ``n`` (CASE, COALESCE, GREATEST, LEAST) brings to one type."""
    if isinstance(n, exp.Case):
        out = [i.args["true"] for i in n.args.get("ifs") or []]
        return out + ([n.args["default"]] if n.args.get("default") is not None else [])
    return [n.this, *n.expressions]


def _time_of(x: exp.Expr, columns: Columns | None) -> str | None:
    """'date', 'timestamp' (or timestamptz), 'null' (NULL or a string literal: it takes the
    others' type), or None (unknown or not a date/time) for a value of a common-type choice."""
    while isinstance(x, exp.Paren):
        x = x.this
    if isinstance(x, exp.Null) or (isinstance(x, exp.Literal) and x.is_string):
        return "null"
    if isinstance(x, _COMMON_TYPE):
        kinds = {_time_of(v, columns) for v in _chosen_values(x)}
        return next((k for k in ("timestamp", None, "date") if k in kinds), "null")
    if isinstance(x, exp.Nullif):
        return _time_of(x.this, columns)

    def column(c: exp.Column) -> object:
        found = lookup(columns, c) if columns is not None else None
        return found if found is not None else _Untyped()

    t = temporal_type(x, column)  # type: ignore[arg-type]
    return "timestamp" if t in ("timestamp", "timestamptz") else t


def dates_within_timestamps(n: exp.Expr, columns: Columns | None) -> exp.Expr:
    """``n`` (in place): a date read from a row that CASE, COALESCE, GREATEST or LEAST may
    convert to a timestamp (another value is one, or of a type not known here) is read through
    :func:`within_timestamps`. ``COALESCE(d, ts)`` converted a date after 294276 AD to a
    timestamp and failed for that row only. The dates are wrapped where they are read (a
    column, a cast), once each: a choice among choices wraps nothing twice, so nested ones
    don't multiply the SQL (within_timestamps reads its value three times)."""
    if not isinstance(n, _COMMON_TYPE):
        return n
    values = _chosen_values(n)
    kinds = [_time_of(v, columns) for v in values]
    if "date" not in kinds or all(k in ("date", "null") for k in kinds):
        return n
    for v, k in zip(values, kinds, strict=True):
        if k == "date":
            for leaf in _date_leaves(v, columns):
                wrapped = within_timestamps(leaf)
                wrapped.meta["dpsql_within"] = True
                leaf.replace(wrapped)
    return n


def _date_leaves(v: exp.Expr, columns: Columns | None) -> list[exp.Expr]:
    """Where the dates of value ``v`` are read from a row: through parentheses and the values
    (not the conditions) of CASE, COALESCE, GREATEST, LEAST and NULLIF, the date-typed parts
    that read a column and are not wrapped already."""
    out: list[exp.Expr] = []
    todo = [v]
    while todo:
        x = todo.pop()
        if x.meta.get("dpsql_within") or not x.find(exp.Column):
            continue
        if isinstance(x, exp.Paren):
            todo.append(x.this)
        elif isinstance(x, _COMMON_TYPE):
            todo += _chosen_values(x)
        elif isinstance(x, exp.Nullif):
            todo.append(x.this)
        elif _time_of(x, columns) == "date":
            out.append(x)
    return out


def timestamp_input(n: exp.Expr) -> bool:
    """``n`` converts what it reads of a row to a timestamp: a cast to ``timestamp`` or
    ``timestamptz``, ``date_trunc``, ``to_char``."""
    if isinstance(n, exp.Cast):
        return n.to.this in _TO_TIMESTAMP
    return isinstance(n, (exp.DateTrunc, exp.TimestampTrunc, exp.TimeToStr))


def is_date_part(n: exp.Expr) -> bool:
    """``n`` is ``date_part(field, x)`` as written (:mod:`dpsql.sql.faithful` marks the EXTRACT
    node sqlglot reads it into, and writes it back as date_part)."""
    return isinstance(n, exp.Extract) and n.meta.get("dpsql_called") == "date_part"


def own_date_part(n: exp.Expr) -> bool:
    """``n`` is a ``date_part(field, x)`` call dpsql wrote (a function node of that name)."""
    return (
        isinstance(n, exp.Anonymous)
        and str(n.name).lower() == "date_part"
        and len(n.expressions) == 2
    )
