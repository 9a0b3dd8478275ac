"""The aggregates of a private SELECT: each call checked (row-level expressions, identifiers,
value ranges) and described as a :class:`~dpsql.sql.analysis.Statistic` and its measures.

Part of the analysis (:func:`dpsql.sql.analyze.analyze`, :mod:`dpsql.sql.analyze_select`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import date
from fractions import Fraction
from typing import NoReturn

from sqlglot import exp

from dpsql.errors import PrivacyViolation, UndefinedFunction, UnsupportedSql, WrongObjectType
from dpsql.sql import functions as fn
from dpsql.sql.analysis import Measure, Statistic
from dpsql.sql.derived_keys import bounded_keys
from dpsql.sql.int_overflow import refuse_int_overflow
from dpsql.sql.names import describe
from dpsql.sql.per_unit_refusal import per_unit_alone, per_unit_and_more
from dpsql.sql.pg_types import float_bits, integer_bits, is_integer
from dpsql.sql.public_subquery import check_public_subquery, subquery_of
from dpsql.sql.refusal_text import window_over_rows
from dpsql.sql.sensitivity import Interval, value_range
from dpsql.sql.sources import Ctx, outer_columns
from dpsql.sql.totality import MAX_INTERVALS, check_cast, check_total, time_constants
from dpsql.sql.wording import plain_sql, user_sql

__all__ = ["check_row_level", "statistic_for"]

_CLAUSES_REFUSED = {
    "laterals": "LATERAL",
    "locks": "FOR UPDATE/SHARE",
    "into": "SELECT INTO",
    "windows": "WINDOW",
    "qualify": "QUALIFY",
    "connect": "CONNECT BY",
}


MAX_MAGNITUDE = 10**15  # largest |value| one row may add to a SUM/AVG/VAR
_Ctx = Ctx  # the column resolver of dpsql.sql.sources (one or more joined tables)


def _refuse_identifiers(ctx: _Ctx, node: exp.Expr, where: str, use: str = "be used in") -> None:
    """Refuse (42501) an identifier column in ``node``: it "can't {use} {where}"."""
    for c in node.find_all(exp.Column):
        col = ctx.column(c)
        if col.identifier:
            table = ctx.table.removeprefix("public.")
            hint = f"identifiers may only be counted: SELECT COUNT(DISTINCT {c.name}) FROM {table}"
            message = (
                f"column {c.name} of private table {table} is an identifier and can't {use} {where}"
            )
            unit = ctx.private.privacy_unit
            if where == "GROUP BY" and c.name == unit:
                more = per_unit_and_more(ctx, c, unit, table) or per_unit_alone(c, unit, table)
                message, hint = more or (
                    message,
                    f"count people with COUNT(DISTINCT {unit}); to group them by what each did, "
                    f"aggregate per {unit} in a derived table and filter or group outside it: "
                    f"SELECT n, COUNT(*) FROM (SELECT {unit}, COUNT(*) AS n FROM {table} GROUP "
                    f"BY {unit}) t WHERE n > 5 GROUP BY n",
                )
            raise PrivacyViolation(message, hint=hint)


def _as_value(c: exp.Expr, top: exp.Expr) -> bool:
    """True when ``c`` only flows to ``top`` as a value (CASE results, parentheses), untested."""
    node = c
    while node is not top:
        p = node.parent
        if isinstance(p, exp.Paren) or (isinstance(p, exp.If) and node.arg_key == "true"):
            pass
        elif isinstance(p, exp.Case) and node.arg_key in ("ifs", "default"):
            pass
        else:
            return False
        node = p
    return True


def _refuse_computed_identifiers(ctx: _Ctx, arg: exp.Expr, agg: str) -> None:
    """Identifiers may be counted (``COUNT(DISTINCT CASE WHEN c THEN user_id END)``), not tested."""
    for c in outer_columns(arg):
        if ctx.column(c).identifier and not _as_value(c, arg):
            raise PrivacyViolation(
                f"column {ctx.source(c).table}.{c.name} is an identifier and can't be compared "
                f"or computed on inside {agg}",
                hint=f"identifiers may only be counted, e.g. COUNT(DISTINCT {c.name})",
            )


def check_row_level(ctx: _Ctx, node: exp.Expr, where: str) -> None:
    """Allow only total, side-effect-free row-level SQL (see dpsql.sql.functions).

    IN/EXISTS subqueries over public tables are checked by dpsql.sql.public_subquery.
    """
    stack = [node]
    while stack:
        n = stack.pop()
        sub = subquery_of(n)
        policy = ctx.policy if sub is not None else None
        if sub is not None and policy is not None:
            check_public_subquery(sub, ctx, policy, isinstance(n, exp.Exists), check_row_level)
            if isinstance(n, exp.In):
                stack.append(n.this)
                check_total(n, ctx.column)  # x IN (SELECT r.c ...): r.c converted to x's type
            continue
        stack.extend(n.iter_expressions())
        if isinstance(n, (exp.Select, exp.Subquery, exp.Exists)):
            raise UnsupportedSql(
                f"subqueries are not supported in {where}",
                hint="filter with literal values, e.g. col IN (1, 2, 3), or col IN (SELECT t.c "
                "FROM public_table t)",
            )
        if fn.is_aggregate(n):
            raise UnsupportedSql(f"aggregate functions are not allowed in {where}")
        if isinstance(n, exp.Window):
            raise window_over_rows()
        if not isinstance(n, fn.ROW_LEVEL_NODES):
            raise UnsupportedSql(
                f"{describe(n)} is not supported in {where} of a private query",
                hint="use comparisons, AND/OR/NOT, IN lists, BETWEEN, LIKE, CASE, arithmetic, "
                "COALESCE, numeric casts, and for dates and times x::date (or CAST(x AS date), "
                "date(x)), date_trunc('month', x), EXTRACT(MONTH FROM x)",
            )
        if isinstance(n, exp.Cast):
            check_cast(n, ctx.column)
        check_total(n, ctx.column)
    if time_constants(node) > MAX_INTERVALS:
        raise UnsupportedSql(
            f"at most {MAX_INTERVALS} INTERVAL constants (or numbers of days added to dates) per "
            "expression",
            hint="write each offset as one constant, e.g. INTERVAL '2 years 3 months'",
        )
    past_bigint = where != "GROUP BY"  # a key's values are of its type
    refuse_int_overflow(
        node, ctx.column, where, past_bigint=past_bigint, written=_clause_words(where)
    )


def _clause_words(where: str) -> Callable[[str], str]:
    """An expression's text as written where ``where`` says it is: ``WHERE x``, ``COUNT(x)``,
    ``x in a subquery's WHERE``."""
    if where in ("WHERE", "GROUP BY", "JOIN ... ON"):
        return lambda sql: f"{where} {sql}"
    if "..." in where:
        return lambda sql: where.replace("...", sql)
    return lambda sql: f"{sql} in {where}"


def _refuse_temporal_arithmetic(ctx: _Ctx, arg: exp.Expr, written: str) -> None:
    """SUM / AVG / VARIANCE / STDDEV of a date or timestamp: PostgreSQL has none (42883), so say
    that, and what to ask instead, rather than "its range can't be bounded"."""
    node = arg
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Column):
        return
    family = ctx.column(node).family
    if family not in ("date", "timestamp"):
        return
    func = written.split("(", 1)[0]
    raise UndefinedFunction(
        f"{written}: PostgreSQL has no {func} of a {family}",
        hint=f"for dates use MIN({node.name}), MAX({node.name}), MEDIAN({node.name}) or "
        f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {node.name}); or count by period: "
        f"SELECT date_trunc('month', {node.name}) AS month, COUNT(*) FROM {ctx.table.split('.')[-1]} "
        "GROUP BY 1",
    )


def _arg_interval(ctx: _Ctx, arg: exp.Expr, agg: str) -> Interval:
    _refuse_identifiers(ctx, arg, agg, use="be aggregated with")
    r = value_range(arg, ctx.column)
    if r is None:
        for c in arg.find_all(exp.Column):
            if ctx.column(c).bounds is None and value_range(c, ctx.column) is None:
                in_condition = any(
                    isinstance(p, (exp.Predicate, exp.Is, exp.In, exp.Between))
                    for p in _parents(c, arg)
                )
                if not in_condition:
                    gives = (
                        "the sum is the total of each value times its count"
                        if agg in ("SUM", "AVG")
                        else "the counts give its distribution"
                    )
                    public = ctx.public_refusal(c, agg, gives)
                    if public is not None:
                        raise public
                    raise PrivacyViolation(
                        f"column {ctx.column_name(c)} has no declared bounds, so {agg} over it "
                        "is unbounded",
                        hint=f"declare `bounds: [lo, hi]` for {c.name} in the policy",
                    )
        raise PrivacyViolation(
            f"the range of {plain_sql(arg)} can't be bounded from the declared bounds",
            hint="use +, -, *, division by a constant, CASE and COALESCE over bounded columns",
        )
    refuse_int_overflow(arg, ctx.column, agg)
    reach = r.magnitude
    if agg.startswith(("VAR", "STDDEV")):
        reach = max(reach, r.half_width * r.half_width)  # sums of squared deviations
    if reach > MAX_MAGNITUDE:
        raise PrivacyViolation(
            f"one row could move {agg}({plain_sql(arg)}) by more than {MAX_MAGNITUDE:.0e}, "
            "far too much to hide with noise",
            hint="aggregate smaller values (scale them down, or clamp with LEAST/GREATEST)",
        )
    return r


def _parents(node: exp.Expr, top: exp.Expr) -> list[exp.Expr]:
    out = []
    p = node.parent
    while p is not None and p is not top:
        out.append(p)
        p = p.parent
    return out


def _integral(ctx: _Ctx, arg: exp.Expr, r: Interval) -> bool:
    """Whether PostgreSQL computes ``arg`` as an integer (:func:`dpsql.sql.pg_types.is_integer`:
    quantity / 3, COALESCE(quantity, 0) / 2, width_bucket(...), a CASE of integer results,
    amount::int) over a range of integers: its SUM is a whole number, its quantiles too."""
    if r.lo.denominator != 1 or r.hi.denominator != 1:
        return False
    return is_integer(arg, ctx.column)


def _result_type(ctx: _Ctx, arg: exp.Expr, func: str, integral: bool) -> tuple[str, str]:
    """The PostgreSQL type of the aggregate's result, and the narrower type it is released as
    ("" if none: :attr:`Statistic.out_type`): SUM of a smallint or integer expression is
    bigint, of a bigint numeric (words28: SUM(quantity / 3) was numeric, SUM(quantity::int8)
    bigint); AVG of integers numeric; of a double (a cast to one too: SUM(age::float8) was
    numeric), double precision; SUM of a real is real, its AVG and spreads double precision."""
    if func in ("count", "count_distinct"):
        return "int8", ""
    if func == "sum" and integral:
        bits = integer_bits(arg, ctx.column)
        return ("int8" if bits is not None and bits <= 32 else "numeric"), ""
    width = float_bits(arg, ctx.column)
    if width is None and not is_integer(arg, ctx.column):  # a float column in a form not read
        floats = ("real", "float", "float4", "float8", "double", "double precision")
        width = 64 if any(ctx.column(c).type in floats for c in arg.find_all(exp.Column)) else None
    if width is not None:
        return "float8", ("float4" if width == 32 and func == "sum" else "")
    return "numeric", ""


def statistic_for(ctx: _Ctx, node: exp.Expr) -> tuple[Statistic, list[Measure]]:
    """Map one aggregate call to its statistic and the measures it needs."""
    from dpsql.sql import analyze_quantiles as aq

    if aq.is_selection_aggregate(node):
        return aq.selection_statistic(ctx, node, check_row_level, _arg_interval, _integral)
    sql = user_sql(node)
    name = fn.aggregate_name(node)
    if name is None:
        _refuse_aggregate(ctx, node)
    arg = node.this
    if isinstance(node, exp.Count):
        if isinstance(arg, exp.Star) or arg is None:
            m = Measure("count_rows")
            return Statistic("count", (m.key,), Fraction(0), Fraction(0), "int8", sql), [m]
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                cols = ", ".join(plain_sql(e) for e in arg.expressions)
                raise UnsupportedSql(
                    f"{user_sql(node)}: COUNT(DISTINCT ...) of several columns is not supported",
                    hint=f"count one: COUNT(DISTINCT {plain_sql(arg.expressions[0])}); or count "
                    f"the rows of each combination: SELECT {cols}, COUNT(*) ... GROUP BY {cols}",
                )
            inner = arg.expressions[0]
            check_row_level(ctx, inner, "COUNT(DISTINCT ...)")
            _refuse_computed_identifiers(ctx, inner, "COUNT(DISTINCT ...)")
            unit = ctx.private.privacy_unit
            if isinstance(inner, exp.Column) and inner.name == unit and not ctx.private.row_privacy:
                ctx.column(inner)
                m = Measure("count_units")
            else:
                m = _count_distinct(ctx, inner)
            cap = _domain_size(ctx, inner) if m.kind in ("count_distinct", "count_keys") else None
            st = Statistic("count_distinct", (m.key,), Fraction(0), Fraction(0), "int8", sql, cap)
            return st, [m]
        check_row_level(ctx, arg, "COUNT(...)")
        _refuse_computed_identifiers(ctx, arg, "COUNT(...)")
        if isinstance(arg, exp.Literal) and not arg.is_string:
            m = Measure("count_rows")
        else:
            m = Measure("count_values", ctx.qualify(arg))
        return Statistic("count", (m.key,), Fraction(0), Fraction(0), "int8", sql), [m]
    if isinstance(arg, exp.Distinct):
        raise UnsupportedSql(
            f"{name.upper()}(DISTINCT ...) is not supported",
            hint=f"use {name.upper()}(...) without DISTINCT",
        )
    check_row_level(ctx, arg, f"{name.upper()}(...)")
    _refuse_temporal_arithmetic(ctx, arg, sql)
    r = _arg_interval(ctx, arg, name.upper())
    q = ctx.qualify(arg)
    integral = _integral(ctx, arg, r)
    ptype, out = _result_type(ctx, arg, "sum" if name == "sum" else "avg", integral)
    if name == "sum":
        m = Measure("sum", q, r.lo, r.hi, integral)
        return Statistic("sum", (m.key,), r.lo, r.hi, ptype, sql, out_type=out), [m]
    cnt = Measure("count_values", q)
    s1 = Measure("sum_centered", q, r.lo, r.hi, False)
    if name == "avg":
        return Statistic("avg", (s1.key, cnt.key), r.lo, r.hi, ptype, sql), [s1, cnt]
    s2 = Measure("sum_sq_centered", q, r.lo, r.hi, False)
    func = {"var_pop": "var_pop", "var_samp": "var_samp", "stddev": "stddev_samp"}.get(name, name)
    stat = Statistic(func, (s2.key, s1.key, cnt.key), r.lo, r.hi, ptype, sql)  # type: ignore[arg-type]
    return stat, [s2, s1, cnt]


def _refuse_aggregate(ctx: _Ctx, node: exp.Expr) -> NoReturn:
    sql = user_sql(node)
    first = node.this.this if isinstance(node.this, exp.Distinct) else node.this
    arg = plain_sql(first) if isinstance(first, exp.Expr) else "col"
    ordered: dict[type[exp.Expr], str] = {
        exp.PercentileCont: "percentile_cont",
        exp.PercentileDisc: "percentile_disc",
    }
    if type(node) in ordered or isinstance(node, exp.Mode):
        name = ordered.get(type(node), "mode")
        call = f"{name}({plain_sql(first) if isinstance(first, exp.Expr) else ''})"
        raise WrongObjectType(
            f"WITHIN GROUP is required for ordered-set aggregate {name}",
            hint=f"write {call} WITHIN GROUP (ORDER BY col), with the column to take it of",
        )
    if isinstance(node, fn.RAW_VALUE_AGGREGATES) and _whole_row(ctx, first):
        table = ctx.table.split(".")[-1] + (
            "" if ctx.alias == ctx.table.split(".")[-1] else f" {ctx.alias}"
        )
        keyed = [n for n, c in ctx.cols.items() if c.keys or c.keys_from]
        by = (
            f", or a column's values: SELECT {keyed[0]}, COUNT(*) FROM {table} GROUP BY {keyed[0]}"
            if keyed
            else ""
        )
        raise PrivacyViolation(
            f"{sql} would return raw private rows",
            hint=f"count the rows instead: SELECT COUNT(*) FROM {table}{by}; "
            f"or summarise a column: {_SUPPORTED}",
        )
    if isinstance(node, fn.RAW_VALUE_AGGREGATES):
        raise PrivacyViolation(
            f"{sql} would return raw private values",
            hint=f"count the values instead: SELECT {arg}, COUNT(*) FROM ... GROUP BY {arg}; "
            f"or summarise them: {_SUPPORTED}",
        )
    raise UnsupportedSql(
        f"the aggregate {sql} is not supported in private queries",
        hint=f"use {_SUPPORTED}",
    )


def _whole_row(ctx: _Ctx, arg: object) -> bool:
    """Whether ``arg`` names a whole row (``p`` or ``p.*`` for a table or alias p), not a column."""
    if isinstance(arg, exp.Star):
        return True
    if isinstance(arg, exp.Column) and isinstance(arg.this, exp.Star):
        return True
    names = {s.alias for s in ctx.sources} | {s.table.split(".")[-1] for s in ctx.sources}
    return (
        isinstance(arg, exp.Column)
        and not arg.table
        and arg.name in names
        and not any(s.private is not None and arg.name in s.private.columns for s in ctx.sources)
    )


_SUPPORTED = (
    "COUNT, COUNT(DISTINCT ...), SUM, AVG, VARIANCE/VAR_POP, STDDEV/STDDEV_POP, MEDIAN, "
    "PERCENTILE_CONT/PERCENTILE_DISC, MIN, MAX or mode()"
)


def _domain_size(ctx: _Ctx, inner: exp.Expr) -> int | None:
    """How many distinct non-null values ``inner`` (a column) may hold by the policy: its keys,
    or the whole numbers within an integer column's bounds; None when not declared."""
    if not isinstance(inner, exp.Column):
        return None
    col = ctx.column(inner)
    if col is None or col.identifier:
        return None
    if col.keys and not col.keys_from:
        return len(set(col.key_texts or ()))
    if col.family == "integer" and col.bounds is not None:
        lo, hi = col.bounds
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            return max(0, math.floor(hi) - math.ceil(lo) + 1)
    if col.family == "date" and col.bounds is not None:  # the days within its bounds
        first, last = col.bounds
        if isinstance(first, date) and isinstance(last, date):
            return max(0, (last - first).days + 1)
    return None


def _count_distinct(ctx: _Ctx, inner: exp.Expr) -> Measure:
    """COUNT(DISTINCT x): over a column with declared keys, or with bounds that allow at most
    :data:`~dpsql.sql.derived_keys.COUNT_KEYS_MAX` values (whole numbers, days), the keys whose
    noisy row count passes a threshold (``count_keys``, see dpsql.execute.selected_measures);
    else distinct values counted."""
    if isinstance(inner, exp.Column):
        col = ctx.column(inner)
        if col is not None and not col.identifier and (col.keys or col.keys_from):
            return Measure(
                "count_keys",
                ctx.qualify(inner),
                candidates=col.key_texts,
                candidates_from=col.keys_from,
            )
        keys = bounded_keys(col) if col is not None else None
        if keys is not None:
            return Measure("count_keys", ctx.qualify(inner), candidates=keys)
    return Measure("count_distinct", ctx.qualify(inner))
