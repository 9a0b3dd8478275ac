"""Per-unit derived tables: an inner ``GROUP BY`` on the privacy unit, aggregated again outside.

``SELECT AVG(n) FROM (SELECT user_id, COUNT(*) AS n FROM purchases GROUP BY user_id) t`` and the
"how many users bought N times" histogram (``... GROUP BY n``) read a table of ONE ROW PER UNIT.
Its rows are raw (one person each), so they are never released; but a unit is one row of it, so
an aggregate over it is a DP leaf whose privacy unit is that row, once each per-unit value is
bounded from the policy (:func:`lift_units`):

* ``COUNT(*)`` / ``COUNT(x)`` per unit: at most R = ``max_rows_per_unit`` (:data:`~dpsql.sql.per_unit_source.AUTO_CAP` when
  it is ``auto``; the count is capped at R: a unit with more rows counts as R, the "R or more"
  bucket); its key domain is 1..R (0..R for ``COUNT(x)``), public, so the histogram releases
  every bucket with noise, no thresholding;
* ``SUM(x)`` per unit: the sum of clamped x, capped to [R·min(lo, 0), R·max(hi, 0)];
* ``AVG(x)`` / ``MIN(x)`` / ``MAX(x)`` per unit: of clamped x, so within [lo, hi].

The derived table is replaced by a synthetic private table (``_dpsql_units_i``: privacy unit =
the unit column, one row per unit, R = G = 1, the per-unit columns with those bounds and keys)
that the outer block is analyzed against as usual; in the bounded SQL the synthetic table is the
per-unit SELECT (:class:`~dpsql.sql.per_unit_source.UnitSource`, built by
:mod:`dpsql.sql.per_unit_source`), whose WHERE and arguments passed the row-level checks of a
flat private query. Neighbouring databases differ by one unit = one row of it: the outer leaf's
sensitivity (R = G = 1, the per-unit bounds) holds. The outer block's conditions on per-unit
values read their exact values (:mod:`dpsql.sql.per_unit_filters`).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.policy.model import Policy
from dpsql.sql import functions as fn
from dpsql.sql.analysis import Analysis
from dpsql.sql.per_unit_filters import exact_filters
from dpsql.sql.per_unit_source import UNIT_PREFIX, UnitSource, unit_source
from dpsql.sql.tables import cte_body


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
            body = cte_body(ref)
        if not isinstance(body, exp.Select):  # a UNION/INTERSECT/EXCEPT is no per-unit table
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
