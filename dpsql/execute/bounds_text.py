"""The words of accuracy notices about contribution bounds: numbers as a notice prints them,
what the bounds keep (rows per unit, a clamp narrower than the declared range), and why an
interval has no estimate of what the bounds removed (:func:`unestimated`). Used by
:mod:`dpsql.execute.accuracy_text`, which builds the notice lines."""

from __future__ import annotations

import math
from dataclasses import replace

from sqlglot import exp

from dpsql.execute.bias import one_row
from dpsql.sql.analysis import Analysis, Measure, Statistic, needs_group_rank
from dpsql.sql.names import WRITTEN
from dpsql.sql.per_unit_filters import capped_values
from dpsql.sql.wording import plain_sql, plural


def fmt(x: float) -> str:
    """A number as the notice prints it: thousands separated, about 3 significant digits."""
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1000 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:.3g}"


def col_name(m: Measure) -> str:
    if isinstance(m.arg, exp.Column):
        return m.arg.name
    if m.arg is not None and isinstance(m.arg.meta.get(WRITTEN), str):
        return str(m.arg.meta[WRITTEN])  # as the user wrote it (CAST(amount AS integer))
    return plain_sql(m.arg) if m.arg is not None else "the value"


def rows_text(x: float) -> str:
    return plural(float(fmt(x).replace(",", "")), "row") if math.isfinite(x) else f"{x} rows"


def sums_ones(m: Measure) -> bool:
    """A SUM of the constant 1 (``SUM(1)``, ``SUM(CAST(1 AS BIGINT))``: Tableau's record count),
    which counts rows: its amounts are worded in rows, as COUNT(*)'s."""
    arg = m.arg
    while isinstance(arg, (exp.Cast, exp.Paren)):
        arg = arg.this
    if not (m.kind == "sum" and isinstance(arg, exp.Literal) and not arg.is_string):
        return False
    try:
        return float(arg.this) == 1
    except ValueError:
        return False


def qty_text(a: Analysis, m: Measure, x: float, base: float = 0.0) -> str:
    """An amount of the removed mass with its unit: '1 row', '18 rows', '1,528 of amount';
    an AVG's mass above its base (:attr:`dpsql.sql.bias.BiasTarget.base`): '410 of birth_year
    above 1,920'."""
    if m.kind in ("count_rows", "count_values", "quantile") or sums_ones(m):
        return rows_text(x)
    if m.kind == "count_units":
        return f"{fmt(x)} {a.private.privacy_unit}"
    return f"{fmt(x)} of {col_name(m)}" + (f" above {fmt(base)}" if base else "")


def rows_kept(a: Analysis) -> str:
    unit = a.private.privacy_unit
    r = a.max_rows
    text = f"at most {plural(r, 'row')} per {unit}" + (" in a group" if a.group_keys else "")
    if a.group_keys and needs_group_rank(a):
        text += f", in at most {plural(a.max_groups, 'group')}"
    return text


def clamp_text(m: Measure, raw_lo: float, raw_hi: float) -> str:
    """The clamp in words when it is narrower than the declared range, else ''."""
    col, parts_ = col_name(m), []
    lo, hi = float(m.lo), float(m.hi)
    if hi < raw_hi:
        parts_.append(f"values of {col} above {fmt(hi)} count as {fmt(hi)}")
    if lo > raw_lo:
        parts_.append(f"values of {col} below {fmt(lo)} count as {fmt(lo)}")
    return ", ".join(parts_)


NOISE_ONLY = "covers the noise only"
"""In :func:`unestimated`'s words: the interval does not include what the bounds changed (its
columns are NULL: dpsql.execute.accuracy_text.Accuracy)."""
LOWER_ONLY = "they can only lower the answer"
"""In :func:`unestimated`'s words: what the bounds changed is on one side (its low end holds)."""


def unestimated(a: Analysis, s: Statistic) -> str:
    """Why a statistic's interval has no removed-mass term, and what that means."""
    unit = a.private.privacy_unit
    if a.private.row_privacy:
        return "no contribution bounds apply (row-level privacy)"
    capped = capped_text(a, s)
    if capped:
        return capped
    if one_row(a) and not clamped_narrower(a, s):
        return f"one row per {unit}: the bounds remove nothing (no estimate is needed)" + (
            capped_key(a) + exact_text(a)
        )
    if s.func == "count_distinct" and counts_units(a, s) and not needs_group_rank(a):
        return f"the bounds remove no {unit} from a group here"
    kept = [rows_kept(a)] if not one_row(a) else []
    for key in s.measures:
        m = a.measure(key)
        if m.kind in ("sum", "sum_centered", "sum_sq_centered") and m.arg is not None:
            from dpsql.sql.bias import declared_range

            c = clamp_text(replace(m, kind="sum"), *map(float, declared_range(a, m)))
            if c and c not in kept:
                kept.append(c)
    what = f" (they keep {'; '.join(kept)})" if kept else ""
    counts = all(a.measure(k).kind in ("count_rows", "count_values") for k in s.measures)
    if s.func == "count_distinct" or counts:  # the bounds only drop rows (or units)
        return (
            f"it {NOISE_ONLY}, NOT what the bounds left out{what}: {LOWER_ONLY}, so the "
            "truth may be above the interval"
        )
    return (
        f"it {NOISE_ONLY}, NOT what the bounds changed{what}: they can move the "
        "answer either way, by an amount not estimated, so the truth may lie outside it"
    )


def capped_text(a: Analysis, s: Statistic) -> str:
    """Over a per-unit derived table: what capping each unit's value of a column ``s``
    aggregates (a COUNT at R rows, a SUM at R rows' worth, dpsql.sql.per_unit) can change, not
    estimated; '' when ``s`` reads no capped column."""
    unit, out, either, premise = a.private.privacy_unit, [], False, ""
    for key in s.measures:
        m = a.measure(key)
        arg = m.arg
        while isinstance(arg, (exp.Paren, exp.Cast)):  # (a cast keeps the order of values)
            arg = arg.this
        # an expression of a capped column (n * 2, -n, a CASE's THEN): the cap moves its value
        # too, and not always down (-n), so the answer can move either way
        names = capped_values(a, m.arg)
        either = either or bool(names) and not isinstance(arg, exp.Column)
        for name in names:
            col = a.private.columns.get(name)
            if col is None or col.bounds is None:
                continue
            lo, hi = (float(b) for b in col.bounds)  # type: ignore[arg-type]
            # a capped column is a per-unit COUNT (typed bigint) or SUM (numeric, its rows'
            # values clamped too): per_unit_source._value
            if col.type != "bigint":
                premise = (
                    f" (if every value summed into each {unit}'s {name} lies in its declared "
                    "range: one below it counts as its low end)"
                )
            if lo < 0:
                either = True
                out.append(f"each {unit}'s {name} is kept within {fmt(lo)} to {fmt(hi)}")
            else:
                out.append(
                    f"each {unit}'s {name} is capped at {fmt(hi)} (a {unit} with more counts "
                    f"as {fmt(hi)})"
                )
    if not out:
        return ""
    if s.func in ("sum", "count") and not either:  # a cap at or above 0 only lowers a unit's
        return (  # value, and each unit adds its value (never less than 0) to this answer
            f"one row per {unit}, but {'; '.join(dict.fromkeys(out))} before this aggregate: "
            f"it {NOISE_ONLY}, NOT what that cap changed (not estimated): {LOWER_ONLY}{premise}, "
            "so the truth may be above the interval" + exact_text(a)
        )
    return (
        f"one row per {unit}, but {'; '.join(dict.fromkeys(out))} before this aggregate: it "
        f"{NOISE_ONLY}, NOT what that cap changed (not estimated), so the truth may "
        "lie outside it" + exact_text(a)
    )


def exact_text(a: Analysis) -> str:
    """Over a per-unit derived table: its values the statement's conditions compare (WHERE, a
    CASE's WHEN, a comparison in a key) are each unit's exact values, not the capped ones
    (dpsql.sql.per_unit_filters.exact_filters); '' when it compares none."""
    from dpsql.sql.per_unit_source import EXACT_PREFIX

    nodes: list[exp.Expr] = [a.where] if a.where is not None else []
    nodes += [g.expr for g in a.group_keys]
    names = {
        c.name[len(EXACT_PREFIX) :]
        for n in nodes
        for c in n.find_all(exp.Column)
        if c.name.startswith(EXACT_PREFIX)
    }
    if not names:
        return ""
    unit = a.private.privacy_unit
    parts = []
    for name in sorted(names):
        col = a.private.columns.get(name)
        bounds = col.bounds if col is not None and name in a.capped_columns else None
        parts.append(
            f"{name} (not capped at {fmt(float(bounds[1]))})"  # type: ignore[arg-type]
            if bounds is not None
            else name
        )
    return (
        f"; its conditions (WHERE, CASE WHEN) compare each {unit}'s exact {', '.join(parts)}, "
        f"as PostgreSQL computes it, so each {unit} is filtered and bucketed by its true value"
    )


def capped_key(a: Analysis) -> str:
    """Over a per-unit derived table grouped by a capped column: its top group holds every
    unit at the cap or above."""
    out = []
    for g in a.group_keys:
        for c in g.expr.find_all(exp.Column):
            if c.name not in a.capped_columns:
                continue
            col = a.column(c)
            if col is None or col.bounds is None:
                continue
            hi = fmt(float(col.bounds[1]))  # type: ignore[arg-type]
            unit = a.private.privacy_unit
            out.append(
                f"; the group {c.name} = {hi} holds every {unit} with {hi} or more"
                if c is g.expr
                else f"; the group of {c.name} = {hi} holds every {unit} with {hi} or more "
                f"({c.name} is capped at {hi} before {plain_sql(g.expr)})"
            )
    return "".join(dict.fromkeys(out))


def clamped_narrower(a: Analysis, s: Statistic) -> bool:
    """Some value of ``s`` is clamped into a range narrower than its declared one (``clamp:
    auto``): clamping moves it even with one row per unit."""
    from dpsql.sql.bias import declared_range

    for key in s.measures:
        m = a.measure(key)
        if m.kind in ("sum", "sum_centered", "sum_sq_centered") and m.arg is not None:
            if declared_range(a, m) != (m.lo, m.hi):
                return True
    return False


def counts_units(a: Analysis, s: Statistic) -> bool:
    return any(m.key == s.measures[0] and m.kind == "count_units" for m in a.measures)
