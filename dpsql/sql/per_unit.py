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
from dpsql.sql.analysis import Analysis
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


def lift_units(
    tree: exp.Expr, policy: Policy, analyze: Callable[..., Analysis]
) -> tuple[exp.Expr, tuple[UnitSource, ...]]:
    """Replace each per-unit derived table (or CTE) read in FROM by an aggregate block by a
    synthetic table; the sources to analyze and run them with. Unchanged when there is none."""
    units: list[UnitSource] = []
    for s in list(tree.find_all(exp.Select)):
        src = s.args.get("from_")
        if src is None or s.args.get("joins") or not _aggregates(s):
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
        table = exp.to_table(unit.name)
        table.set("alias", exp.TableAlias(this=exp.to_identifier(ref.alias_or_name)))
        ref.replace(table)
    return tree, tuple(units)


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
    private table, selecting that unit and aggregates; None for any other shape.

    Raises:
        DpsqlError: the derived table's own refusal (a row-level check of its WHERE or of an
            aggregate's argument, an unbounded column, an aggregate dpsql can't bound per unit).
    """
    group = body.args.get("group")
    if group is None or len(group.expressions) != 1 or body.args.get("joins"):
        return None
    if any(body.args.get(k) for k in ("having", "order", "limit", "offset", "distinct", "with_")):
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
    if not values:
        return None
    check = body.copy()
    check.set("group", None)
    check.set("expressions", [v.copy() for v in values])
    a = analyze(check, policy)  # the row-level checks and bounds of a flat private query
    return _source(a, values, unit_name or key.name, private, index)


def _source(
    a: Analysis,
    values: list[exp.Expr],
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
    for pos, v in enumerate(values):
        name = v.alias_or_name
        if pos not in outputs:
            raise _refuse(v, "is not one aggregate")
        stat = a.statistics[outputs[pos]]
        m = a.measure(stat.measures[-1] if stat.func == "avg" else stat.measures[0])
        arg = make_total(m.arg, a.column) if m.arg is not None else None
        clamped = _clamp(arg, stat.lo, stat.hi) if arg is not None else None
        if stat.func == "count" and m.kind in ("count_rows", "count_values"):
            agg: exp.Expr = exp.Count(this=arg or exp.Star())
            low = 1 if m.kind == "count_rows" else 0
            keys = tuple(range(low, r + 1)) if r <= MAX_COUNT_KEYS else None
            columns[name] = Column(type="bigint", bounds=(low, r), keys=keys, clamp="bounds")
            capped.append(name)
            items.append(
                exp.alias_(exp.func("LEAST", agg, exp.Literal.number(r)), name, quoted=True)
            )
        elif stat.func == "sum":
            lo, hi = r * min(stat.lo, Fraction(0)), r * max(stat.hi, Fraction(0))
            total = exp.func(
                "LEAST", exp.func("GREATEST", exp.Sum(this=clamped), _num(lo)), _num(hi)
            )
            columns[name] = Column(type="numeric", bounds=(float(lo), float(hi)), clamp="bounds")
            capped.append(name)
            items.append(exp.alias_(total, name, quoted=True))
        elif stat.func == "avg":
            columns[name] = Column(
                type="numeric", bounds=(float(stat.lo), float(stat.hi)), clamp="bounds"
            )
            items.append(exp.alias_(exp.Avg(this=clamped), name, quoted=True))
        else:
            raise _refuse(v, "can't be bounded per person")
    select = (
        exp.select(*items)
        .from_(exp.to_table(a.table).as_(a.alias, quoted=True))
        .group_by(exp.column(private.privacy_unit, a.alias))
    )
    if a.where is not None:
        select = select.where(make_total(a.where, a.column))
    table = PrivateTable(
        privacy_unit=unit_name, max_rows_per_unit=1, max_groups_per_unit=1, columns=columns
    )
    import hashlib

    digest = hashlib.sha256(select.sql("postgres").encode()).hexdigest()[:16]
    return UnitSource(f"public.{UNIT_PREFIX}{digest}", table, select, tuple(capped))


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
