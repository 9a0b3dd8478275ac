"""Per-unit derived tables: an inner ``GROUP BY`` on the privacy unit, aggregated again outside.

``SELECT AVG(n) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t`` and the
"how many users bought N times" histogram (``... GROUP BY n``) read a table of ONE ROW PER UNIT.
Its rows are raw (one person each), so they are never released; but a unit is one row of it, so
an aggregate over it is a DP leaf whose privacy unit is that row, once each per-unit value is
bounded from the policy (:func:`lift_units`):

* ``COUNT(*)`` / ``COUNT(x)`` per unit: at most R = ``max_rows_per_unit`` (:data:`AUTO_CAP` when
  it is ``auto``; the count is capped at R: a unit with more rows counts as R, the "R or more"
  bucket); its key domain is 1..R (0..R for ``COUNT(x)``), public, so the histogram releases
  every bucket with noise, no thresholding;
* ``SUM(x)`` per unit: the sum of clamped x, capped to [R·min(lo, 0), R·max(hi, 0)];
* ``AVG(x)`` / ``MIN(x)`` / ``MAX(x)`` per unit: of clamped x, so within [lo, hi].

The derived table is replaced by a synthetic private table (``_dpsql_units_i``: privacy unit =
the unit column, one row per unit, R = G = 1, the per-unit columns with those bounds and keys)
that the outer block is analyzed against as usual; in the bounded SQL the synthetic table is the
per-unit SELECT (:class:`UnitSource`), whose WHERE and arguments passed the row-level checks of a
flat private query. Neighbouring databases differ by one unit = one row of it: the outer leaf's
sensitivity (R = G = 1, the per-unit bounds) holds.
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
from dpsql.sql.postprocess import stat_outputs
from dpsql.sql.rewrite.make_total import make_total
from dpsql.sql.tables import cte_body
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


def lift_units(
    tree: exp.Expr, policy: Policy, analyze: Callable[..., Analysis]
) -> tuple[exp.Expr, tuple[UnitSource, ...]]:
    """Replace each per-unit derived table (or CTE) read in FROM by an aggregate block by a
    synthetic table; the sources to analyze and run them with. Unchanged when there is none."""
    units: list[UnitSource] = []
    for s in list(tree.find_all(exp.Select)):
        src = s.args.get("from_")
        view = not _aggregates(s) and _row_view(s)  # a row-level view of it, aggregated above
        if src is None or s.args.get("joins") or not (_aggregates(s) or view):
            continue
        ref = src.this
        body = ref.this if isinstance(ref, exp.Subquery) else None
        if isinstance(ref, exp.Table):
            cte = cte_body(ref)
            body = cte if isinstance(cte, exp.Select) else None
        if body is None:
            continue
        unit = unit_source(body, policy, analyze, len(units))
        if unit is None:
            continue
        units.append(unit)
        alias = ref.alias_or_name
        table = exp.to_table(unit.name)
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        ref.replace(table)
        exact_filters(s, alias, unit, view)
        if unit.having is not None:
            s.where(unit.having.copy(), copy=False)
    return tree, tuple(units)


EXACT_PREFIX = "_dpsql_exact_"


def _row_view(s: exp.Select) -> bool:
    """``s`` only filters and computes columns of its FROM (a Superset virtual dataset
    ``SELECT CASE WHEN t < 1000 THEN 'small' ELSE 'big' END AS band FROM (per-user totals) u``
    that a chart then groups by ``band``): no grouping, aggregate, window, DISTINCT or LIMIT
    of its own."""
    keys = ("group", "having", "distinct", "limit", "offset", "windows", "joins")
    if any(s.args.get(k) for k in keys) or not isinstance(s.parent, (exp.Subquery, exp.CTE)):
        return False
    own = [*s.expressions, *([s.args["where"]] if s.args.get("where") else [])]
    return not any(fn.is_aggregate(n) or isinstance(n, exp.Window) for e in own for n in e.walk())


def exact_filters(s: exp.Select, alias: str, unit: UnitSource, view: bool = False) -> None:
    """Make the outer block ``s``'s conditions on per-unit values read their exact values.

    A condition (WHERE, a CASE's WHEN, a comparison in a grouping key) sends each unit, one row
    of the synthetic table, into one outer row or group, whatever the value it compares: the
    outer sensitivity (R = G = 1) holds for any value, so no cap or clamp is needed there, and
    none is applied: ``WHERE t > 100000`` counts the units whose total is above 100,000, as
    PostgreSQL does (capped at 50,000 it was a structural 0). The value an aggregate sums or a
    key takes as its value (``GROUP BY n``, ``AVG(t)``) stays capped, its bounds are the
    policy's. A COUNT column compared only with numbers below its cap R keeps the capped
    column (the same rows pass: a count is exact below R) so that ``WHERE n > 5 GROUP BY n``
    still narrows the declared keys 1..R. In a row-level ``view`` of the per-unit table every
    select item's conditions read exact values (its items are what the block above groups by
    or aggregates)."""
    exact, caps = dict(unit.exact), dict(unit.caps)
    if not exact:
        return

    def ours(c: exp.Column) -> bool:
        return c.name in exact and (not c.table or c.table == alias)

    # (root, whole): in WHERE and in a grouping key every condition reads the exact value; in
    # any other select item or ORDER BY item (computed from the keys after grouping) only the
    # conditions inside an aggregate's argument do: the rest must read the key as grouped
    roots: list[tuple[exp.Expr, bool]] = []
    where = s.args.get("where")
    if where is not None:
        roots.append((where, True))
    group = s.args.get("group")
    keys = list(group.expressions) if group is not None else []
    texts = {g.sql() for g in keys}
    named: set[str] = set()
    for g in keys:
        if isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit():
            i = int(g.this) - 1
            if 0 <= i < len(s.expressions):
                named.add(s.expressions[i].alias_or_name)
        elif isinstance(g, exp.Column) and not g.table:
            named.add(g.name)
    for e in s.expressions:
        body = e.this if isinstance(e, exp.Alias) else e
        key = view or body.sql() in texts or (isinstance(e, exp.Alias) and e.alias in named)
        roots.append((e, key))  # (a row view's items are the keys and values read above)
    roots += [(g, True) for g in keys]
    order = s.args.get("order")
    for o in order.expressions if order is not None else []:
        roots.append((o, o.this.sql() in texts))
    for root, whole in roots:
        for c in list(root.find_all(exp.Column)):
            if not ours(c) or _in_subquery(c, root):
                continue
            if not whole and not _in_aggregate(c, root):
                continue
            pred = _predicate(c, root, filtering=root is where)
            if pred is None:
                continue
            cap = caps.get(c.name)
            if cap is not None and isinstance(pred, exp.Predicate) and _below(pred, c, cap):
                continue
            new = exp.column(exact[c.name], c.table or None, quoted=True)
            c.replace(new)


def _in_aggregate(c: exp.Expr, root: exp.Expr) -> bool:
    n = c.parent
    while n is not None and n is not root.parent:
        if fn.is_aggregate(n):
            return True
        n = n.parent
    return False


def _in_subquery(c: exp.Expr, root: exp.Expr) -> bool:
    n = c.parent
    while n is not None and n is not root:
        if isinstance(n, (exp.Select, exp.Subquery)):
            return True
        n = n.parent
    return False


def _predicate(c: exp.Expr, root: exp.Expr, filtering: bool) -> exp.Expr | None:
    """The nearest condition above ``c`` that only passes on a truth value (a comparison,
    IN, BETWEEN, IS, a CASE's WHEN), or the WHERE itself; None when ``c``'s value is taken
    as a value (an aggregate's argument, a key of its own, a CASE's result)."""
    n: exp.Expr = c
    while n is not root:
        p = n.parent
        if p is None or fn.is_aggregate(p) or isinstance(p, exp.Window):
            return None
        if isinstance(p, exp.Predicate) and not isinstance(p, (exp.And, exp.Or)):
            return p
        if isinstance(p, exp.If) and n is p.this:  # CASE WHEN <n> THEN ...
            return p
        if isinstance(p, exp.Case) and n is p.this:  # CASE <n> WHEN v THEN ...
            return p
        n = p
    return root if filtering else None


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def _below(pred: exp.Predicate, c: exp.Column, cap: float) -> bool:
    """``pred`` passes the same units on ``c`` capped at ``cap`` as on its exact value: it
    compares ``c`` with numbers below the cap only (a count is exact below it), or is
    ``c >= cap`` / ``c < cap`` (a count at the cap is at least the cap)."""
    if isinstance(pred, (exp.In, exp.Between)):
        if pred.this is not c:
            return False
        others = (
            list(pred.expressions)
            if isinstance(pred, exp.In)
            else [pred.args.get("low"), pred.args.get("high")]
        )
        return bool(others) and all(_number(o) is not None and _number(o) < cap for o in others)  # type: ignore[operator]
    if not isinstance(pred, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return False
    other = pred.expression if pred.this is c else pred.this
    x = _number(other)
    if x is None or (pred.this is not c and pred.expression is not c):
        return False
    if x < cap:
        return True
    op = type(pred) if pred.this is c else _FLIP.get(type(pred), type(pred))
    return x == cap and op in (exp.GTE, exp.LT)


def _number(e: exp.Expr | None) -> float | None:
    if isinstance(e, exp.Literal) and not e.is_string:
        try:
            return float(e.this)
        except ValueError:
            return None
    return None


def _aggregates(s: exp.Select) -> bool:
    return bool(s.args.get("group")) or any(
        fn.is_aggregate(n) for e in s.expressions for n in e.walk()
    )


def with_units(policy: Policy, units: tuple[UnitSource, ...]) -> Policy:
    """``policy`` with the synthetic tables of ``units`` declared private."""
    if not units:
        return policy
    tables = {**policy.tables, **{u.name: u.table for u in units}}
    return policy.model_copy(update={"tables": tables})


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

    digest = hashlib.sha256(select.sql("postgres").encode()).hexdigest()[:16]
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


def substitute(q: exp.Expr, units: tuple[tuple[str, exp.Select], ...]) -> exp.Expr:
    """The bounded SQL ``q`` with each synthetic table replaced by its per-unit SELECT."""
    if not units:
        return q
    by_name = dict(units)

    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Table) and n.name.startswith(UNIT_PREFIX):
            key = f"{n.db or 'public'}.{n.name}"
            if key in by_name:
                alias = n.alias_or_name
                return exp.Subquery(
                    this=by_name[key].copy(),
                    alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
                )
        return n

    return q.transform(fix)
