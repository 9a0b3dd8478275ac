"""The synthetic private table standing for a per-unit derived table (:mod:`dpsql.sql.per_unit`).

:func:`unit_source` checks a derived table grouped by exactly the privacy unit of its one
private table (its WHERE and arguments pass the row-level checks of a flat private query) and
builds :class:`UnitSource`: one row per unit, R = G = 1, each per-unit value a column bounded
from the policy (a COUNT capped at R with keys 1..R, a SUM capped to R times its clamp, AVG /
MIN / MAX within the column's bounds), the exact values the outer filters read, and a HAVING on
the units' aggregates as columns the outer WHERE applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.policy.model import Policy
from dpsql.policy.tables import Column, PrivateTable
from dpsql.sql import functions as fn
from dpsql.sql.analysis import Analysis, Statistic
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.postprocess import stat_outputs
from dpsql.sql.rewrite.make_total import make_total
from dpsql.sql.wording import plain_sql

UNIT_PREFIX = "_dpsql_units_"


MAX_COUNT_KEYS = 1000  # a per-unit count's key domain 1..R is declared when R is at most this


AUTO_CAP = 100  # R per unit when the policy chooses R per query (max_rows_per_unit: auto)


@dataclass(frozen=True)
class UnitSource:
    """A synthetic private table standing for a per-unit derived table."""

    name: str  # schema.table of the synthetic table
    table: PrivateTable
    select: exp.Select  # the per-unit SELECT it stands for in the bounded SQL
    capped: tuple[str, ...] = ()  # its columns whose per-unit value is capped (COUNT, SUM)
    # value column -> the column holding its exact per-unit value (neither clamped nor capped),
    # which the outer block's filters read (:func:`exact_filters`)
    exact: tuple[tuple[str, str], ...] = ()
    caps: tuple[tuple[str, float], ...] = ()  # a COUNT column's cap R (exact below it)
    # the derived table's HAVING on its aggregates' exact values (columns _dpsql_having_i),
    # which the outer block's WHERE applies: a unit is a row, kept or not
    having: exp.Expr | None = None


EXACT_PREFIX = "_dpsql_exact_"


def unit_source(
    body: exp.Select, policy: Policy, analyze: Callable[..., Analysis], index: int
) -> UnitSource | None:
    """The synthetic table for a derived table grouped by exactly the privacy unit of its one
    private table, selecting that unit and aggregates (and filtering units by a HAVING on
    aggregates of their rows); None for any other shape.

    Raises:
        DpsqlError: the derived table's own refusal (a row-level check of its WHERE or of an
            aggregate's argument, an unbounded column, an aggregate dpsql can't bound per unit).
    """
    body = _distinct_units(body)
    group = body.args.get("group")
    if group is None or len(group.expressions) != 1 or body.args.get("joins"):
        return None
    if any(body.args.get(k) for k in ("order", "limit", "offset", "distinct", "with_")):
        return None
    key = group.expressions[0]
    items = list(body.expressions)
    if isinstance(key, exp.Literal) and not key.is_string and str(key.this).isdigit():
        i = int(key.this) - 1
        if not 0 <= i < len(items):
            return None
        key = items[i].this if isinstance(items[i], exp.Alias) else items[i]
    if not isinstance(key, exp.Column):
        return None
    src = body.args.get("from_")
    if src is None or not isinstance(src.this, exp.Table):
        return None
    from dpsql.sql.sources import table_name

    private = policy.private_table(table_name(src.this))
    if private is None or private.row_privacy or key.name != private.privacy_unit:
        return None
    unit_name, values = None, []
    for e in items:
        body_e = e.this if isinstance(e, exp.Alias) else e
        if isinstance(body_e, exp.Column) and body_e.name == key.name:
            unit_name = e.alias_or_name
        else:
            values.append(e)
    having = body.args.get("having")
    conditions = _having_aggregates(having.this, key.name) if having is not None else []
    check = body.copy()
    check.set("group", None)
    check.set("having", None)
    named = [
        exp.alias_(h.copy(), f"{HAVING_PREFIX}{i}", quoted=True) for i, h in enumerate(conditions)
    ]
    # the units alone (SELECT DISTINCT user_id ... WHERE ...): an aggregate for the checks only
    only = [] if values or conditions else [exp.Count(this=exp.Star())]
    check.set("expressions", [v.copy() for v in values] + named + only)
    a = analyze(check, policy)  # the row-level checks and bounds of a flat private query
    return _source(
        a,
        values,
        conditions,
        having.this if having is not None else None,
        unit_name or key.name,
        private,
        index,
    )


HAVING_PREFIX = "_dpsql_having_"


def _distinct_units(body: exp.Select) -> exp.Select:
    """``SELECT DISTINCT user_id FROM t WHERE ...`` (the units that did something: "how many
    users bought over 400" as ``SELECT COUNT(*) FROM (SELECT DISTINCT user_id ...) x``) read
    as ``... GROUP BY user_id``: the same rows; any other SELECT unchanged."""
    distinct = body.args.get("distinct")
    if distinct is None or distinct.args.get("on") or body.args.get("group"):
        return body
    if len(body.expressions) != 1:
        return body
    item = body.expressions[0]
    col = item.this if isinstance(item, exp.Alias) else item
    if not isinstance(col, exp.Column) or isinstance(col.this, exp.Star):
        return body
    out = body.copy()
    out.set("distinct", None)
    out.set("group", exp.Group(expressions=[col.copy()]))
    return out


def _having_aggregates(cond: exp.Expr, unit: str) -> list[exp.Expr]:
    """The aggregate calls of a per-unit HAVING, which decides per unit whether its row is
    kept. A column read outside an aggregate (the unit itself) is refused: HAVING compares
    what each unit did, never who it is."""
    aggs: list[exp.Expr] = []
    stack: list[exp.Expr] = [cond]
    while stack:
        n = stack.pop()
        if fn.is_aggregate(n):
            aggs.append(n)
            continue
        if isinstance(n, (exp.Select, exp.Subquery)):
            raise _refuse_having(cond, "reads a subquery")
        if isinstance(n, exp.Column):
            raise _refuse_having(cond, f"reads {n.name} outside an aggregate")
        stack.extend(n.iter_expressions())
    return aggs


def _refuse_having(cond: exp.Expr, why: str) -> DpsqlError:
    from dpsql.errors import UnsupportedSql

    return UnsupportedSql(
        f"HAVING {plain_sql(cond)} in a derived table grouped by the privacy unit {why}",
        hint="compare aggregates of each person's rows there, e.g. HAVING COUNT(*) >= 3 or "
        "HAVING SUM(amount) > 1000",
    )


def _source(
    a: Analysis,
    values: list[exp.Expr],
    conditions: list[exp.Expr],
    having: exp.Expr | None,
    unit_name: str,
    private: PrivateTable,
    index: int,
) -> UnitSource:
    fixed = private.max_rows_per_unit
    r = fixed if isinstance(fixed, int) else AUTO_CAP
    outputs = dict(stat_outputs(a))
    # each value is clamped into the range derived from the policy (clamp: bounds): an auto clamp
    # would be measured on the synthetic table, which exists only inside the bounded SQL
    columns: dict[str, Column] = {unit_name: Column(type="integer", identifier=True)}
    items: list[exp.Expr] = [
        exp.alias_(exp.column(private.privacy_unit, a.alias), unit_name, quoted=True)
    ]
    capped: list[str] = []
    exact: list[tuple[str, str]] = []
    caps: list[tuple[str, float]] = []
    exact_items: list[exp.Expr] = []
    for pos, v in enumerate([*values, *conditions]):
        name = v.alias_or_name
        if pos not in outputs:
            raise _refuse(v, "is not one aggregate")
        stat = a.statistics[outputs[pos]]
        value, column, precise = _value(a, stat, v, r, private)
        if pos >= len(values):  # a HAVING aggregate: its exact value only, for the condition
            hname = f"{HAVING_PREFIX}{pos - len(values)}"
            columns[hname] = Column(type=column.type)
            exact_items.append(exp.alias_(precise, hname, quoted=True))
            continue
        columns[name] = column
        if stat.func in ("sum", "count") or (stat.func == "count_distinct" and not _keyed(a, stat)):
            capped.append(name)  # (a count of declared keys is at most their number)
        if stat.func in ("count", "count_distinct") and column.bounds is not None:
            caps.append((name, float(column.bounds[1])))  # type: ignore[arg-type]
        items.append(exp.alias_(value, name, quoted=True))
        ename = f"{EXACT_PREFIX}{name}" if len(name) <= 40 else f"{EXACT_PREFIX}{pos}"
        exact.append((name, ename))
        columns[ename] = Column(type=column.type)
        exact_items.append(exp.alias_(precise, ename, quoted=True))
    select = (
        exp.select(*items, *exact_items)
        .from_(exp.to_table(a.table).as_(a.alias, quoted=True))
        .group_by(exp.column(private.privacy_unit, a.alias))
    )
    if a.where is not None:
        select = select.where(make_total(a.where, a.column))
    cond = None
    if having is not None:  # the outer block's WHERE on the aggregates' exact values: it passes
        by_id = {id(c): i for i, c in enumerate(conditions)}  # the checks of any WHERE there
        cond = having.copy()
        for o, c in zip(list(having.walk()), list(cond.walk()), strict=True):
            if id(o) in by_id:
                c.replace(exp.column(f"{HAVING_PREFIX}{by_id[id(o)]}", quoted=True))
    table = PrivateTable(
        privacy_unit=unit_name, max_rows_per_unit=1, max_groups_per_unit=1, columns=columns
    )
    import hashlib

    digest = hashlib.sha256(select.sql(POSTGRES).encode()).hexdigest()[:16]
    return UnitSource(
        f"public.{UNIT_PREFIX}{digest}",
        table,
        select,
        tuple(capped),
        tuple(exact),
        tuple(caps),
        cond,
    )


def _value(
    a: Analysis, stat: Statistic, v: exp.Expr, r: int, private: PrivateTable
) -> tuple[exp.Expr, Column, exp.Expr]:
    """One per-unit aggregate: its bounded value (what outer aggregates and keys read), its
    column, and its exact value (what outer conditions read: no clamp, no cap)."""
    if stat.func == "quantile":
        return _min_max(a, stat, v)
    m = a.measure(stat.measures[-1] if stat.func == "avg" else stat.measures[0])
    arg = make_total(m.arg, a.column) if m.arg is not None else None
    if stat.func == "count" and m.kind in ("count_rows", "count_values"):
        agg: exp.Expr = exp.Count(this=arg or exp.Star())
        low = 1 if m.kind == "count_rows" else 0
        keys = tuple(range(low, r + 1)) if r <= MAX_COUNT_KEYS else None
        column = Column(type="bigint", bounds=(low, r), keys=keys, clamp="bounds")
        return exp.func("LEAST", agg, exp.Literal.number(r)), column, agg.copy()
    if stat.func == "count_distinct" and m.arg is not None:
        arg = make_total(m.arg, a.column)
        agg = exp.Count(this=exp.Distinct(expressions=[arg]))
        cap = len(m.candidates) if m.candidates else r
        keys = tuple(range(0, cap + 1)) if cap <= MAX_COUNT_KEYS else None
        column = Column(type="bigint", bounds=(0, cap), keys=keys, clamp="bounds")
        return exp.func("LEAST", agg, exp.Literal.number(cap)), column, agg.copy()
    if stat.func == "sum" and arg is not None:
        lo, hi = r * min(stat.lo, Fraction(0)), r * max(stat.hi, Fraction(0))
        total = exp.func(
            "LEAST",
            exp.func("GREATEST", exp.Sum(this=_clamp(arg, stat.lo, stat.hi)), _num(lo)),
            _num(hi),
        )
        column = Column(type="numeric", bounds=(float(lo), float(hi)), clamp="bounds")
        return total, column, exp.Sum(this=arg.copy())
    if stat.func == "avg" and arg is not None:
        column = Column(type="numeric", bounds=(float(stat.lo), float(stat.hi)), clamp="bounds")
        return exp.Avg(this=_clamp(arg, stat.lo, stat.hi)), column, exp.Avg(this=arg.copy())
    raise _refuse(v, "can't be bounded per person")


def _keyed(a: Analysis, stat: Statistic) -> bool:
    return bool(a.measure(stat.measures[0]).candidates)


def _min_max(a: Analysis, stat: Statistic, v: exp.Expr) -> tuple[exp.Expr, Column, exp.Expr]:
    """MIN or MAX per unit of a bounded column (a cohort's first purchase date): its value
    moved into the column's declared bounds, typed as the column (date_trunc keys stay
    public); the exact value is PostgreSQL's MIN/MAX."""
    call = v.this if isinstance(v, exp.Alias) else v
    if not isinstance(call, (exp.Min, exp.Max)) or not isinstance(call.this, exp.Column):
        raise _refuse(v, "can't be bounded per person")
    col = a.column(call.this)
    if col is None or col.bounds is None or col.identifier:
        raise _refuse(v, "can't be bounded per person")
    lo, hi = col.bounds
    arg = exp.column(call.this.name, a.alias, quoted=True)
    kind = type(call)
    temporal = col.type in ("date", "timestamp", "timestamptz")

    def lit(x: object) -> exp.Expr:
        if temporal:
            return exp.cast(exp.Literal.string(str(x)), col.type)
        return _num(Fraction(str(x)))

    value = exp.func("LEAST", exp.func("GREATEST", kind(this=arg), lit(lo)), lit(hi))
    column = Column(type=col.type, bounds=col.bounds, clamp="bounds")
    return value, column, kind(this=arg.copy())


def _num(v: Fraction) -> exp.Expr:
    text = format(float(v), "f") if v.denominator != 1 else str(v.numerator)
    lit = exp.Literal.number(text.lstrip("-"))
    out: exp.Expr = exp.Neg(this=lit) if text.startswith("-") else lit
    return exp.cast(out, "numeric")


def _clamp(arg: exp.Expr, lo: Fraction, hi: Fraction) -> exp.Expr:
    inner = exp.func("GREATEST", exp.cast(arg, "numeric"), _num(lo))
    return exp.func("LEAST", inner, _num(hi))


def _refuse(v: exp.Expr, why: str) -> DpsqlError:
    from dpsql.errors import UnsupportedSql

    return UnsupportedSql(
        f"{plain_sql(v)} in a derived table grouped by the privacy unit {why}",
        hint="per person, use COUNT(*), COUNT(col), SUM(col) or AVG(col) of bounded columns",
    )
