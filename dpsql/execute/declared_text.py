"""The premise of a value interval that the policy, not the data, makes: a column's declared
``bounds`` hold its values. A value outside them counts as the nearest end (clamping), and what
that changes is not measured, so the accuracy notice says so in the analyst's words (issue 16):
"It assumes every amount lies in its declared range 0 to 500 (larger values count as 500,
smaller ones as 0)." Appended to each notice line of a statistic that clamps a column: SUM,
AVG, VARIANCE, STDDEV and quantiles (MEDIAN, MIN, MAX); never to a COUNT. When a private count
of the units with a value outside the declared range (a SUM's or AVG's ``outside`` release,
:mod:`dpsql.sql.bias`) is clearly above 0, the line says instead that the premise is false for
about that many units and that the interval does not cover what their clamp changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.tables import Column
from dpsql.sql.analysis import Analysis, Statistic
from dpsql.sql.bias import unranked

# the measures whose argument is clamped into its declared range before it is aggregated
CLAMPED = ("sum", "sum_centered", "sum_sq_centered", "quantile")


def _end(v: object) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        x = float(v)
        if not math.isfinite(x) or abs(x) >= 1000 or x == int(x):
            return f"{x:,.0f}" if math.isfinite(x) else str(x)
        return f"{x:.6g}"
    return str(v)


def declared_columns(a: Analysis, s: Statistic) -> dict[str, Column]:
    """The private columns whose values statistic ``s`` clamps into their declared bounds, by
    name, in the order the statistic reads them (a per-unit derived table's capped columns are
    said elsewhere: :func:`dpsql.execute.bounds_text.capped_text`)."""
    out: dict[str, Column] = {}
    for key in s.measures:
        m = a.measure(key)
        if m.kind not in CLAMPED or m.arg is None:
            continue
        for c in m.arg.find_all(exp.Column):
            col = a.column(c)
            if col is None or col.bounds is None or c.name in a.capped_columns:
                continue
            out.setdefault(c.name, col)
    return out


def declared_premise(a: Analysis, s: Statistic, also: bool = False) -> str:
    """One sentence: every value ``s`` clamps lies in its column's declared range (larger values
    count as the upper end, smaller ones as the lower); '' when ``s`` clamps nothing."""
    parts = []
    narrower = _clamped_inside(a, s)
    for name, col in declared_columns(a, s).items():
        assert col.bounds is not None
        lo, hi = (_end(b) for b in col.bounds)
        dated = isinstance(col.bounds[0], date)
        big, small = ("later", "earlier") if dated else ("larger", "smaller")
        if name in narrower:  # "larger values count as 500" would contradict the clamp at 354
            clo, chi = (_end(float(x)) for x in narrower[name])
            parts.append(
                f"every {name} lies in its declared range {lo} to {hi} (a value outside it "
                f"counts as {chi} or {clo}, the clamp's ends)"
            )
            continue
        parts.append(
            f"every {name} lies in its declared range {lo} to {hi} ({big} values count as "
            f"{hi}, {small} ones as {lo})"
        )
    if not parts:
        return ""
    return f"It {'also ' if also else ''}assumes {'; and '.join(parts)}."


def _clamped_inside(a: Analysis, s: Statistic) -> dict[str, tuple[Fraction, Fraction]]:
    """The columns ``s`` reads as themselves with a clamp narrower than their declared range
    (``clamp: auto``), and that clamp: a value beyond the declared range counts as its ends."""
    out: dict[str, tuple[Fraction, Fraction]] = {}
    for key in s.measures:
        m = a.measure(key)
        if m.kind == "quantile" or m.kind not in CLAMPED or not isinstance(m.arg, exp.Column):
            continue  # a quantile's notice names no clamp of its own
        col = a.column(m.arg)
        if col is None or col.bounds is None or isinstance(col.bounds[0], date):
            continue
        lo, hi = (float(b) for b in col.bounds)
        if float(m.lo) > lo or float(m.hi) < hi:
            out[m.arg.name] = (m.lo, m.hi)
    return out


def outside_warning(a: Analysis, s: Statistic, units: float, split: int = 1) -> str:
    """The premise plainly false: about ``units`` units have a value ``s`` clamps outside its
    column's declared range (a private count, :mod:`dpsql.sql.bias`), so the interval does not
    cover what that clamp changed, and what to do. ``split`` > 1: counted in each group."""
    ranges = [
        f"{name} outside its declared range {lo} to {hi} (counted as {hi} or {lo})"
        for name, col in declared_columns(a, s).items()
        if col.bounds is not None
        for lo, hi in [(_end(col.bounds[0]), _end(col.bounds[1]))]
    ]
    if not ranges:
        return ""
    each = " (counted in each group where they have one)" if split > 1 else ""
    # privacy_unit: row: each row is a unit (its values counted one by one)
    who = "rows" if a.private.row_privacy else a.private.privacy_unit
    if s.func == "quantile":
        # counted by their first kept row (dpsql.sql.alarms.quantile_alarms): a lower bound; the
        # clamp keeps the order, so a quantile inside the range is right, one beyond it is not.
        # Nothing ranked (each row its own unit, or one row per unit): every row outside is
        # counted, so the count is not a lower bound: no 'or more'
        more = "" if unranked(a) else " or more"
        return (
            f"{OUTSIDE_LEAD}{units:,.0f}{more} {_one(who, units, more)}{each} {_have(units, more)} values of "
            f"{', or of '.join(ranges)}: the answer and its interval count them so, and do NOT "
            "cover a value beyond that range (where the true value lies among them, it is "
            "outside the interval). See them with `dpsql check POLICY --upstream DSN`, and "
            "declare bounds that hold the data (or filter to them)."
        )
    return (
        f"{OUTSIDE_LEAD}{units:,.0f} {_one(who, units, '')}{each} {_have(units, '')} values of "
        f"{', or of '.join(ranges)}: the interval does NOT cover what that clamp changed (a "
        "value beyond its declared range is unbounded, so no interval can). See them with "
        "`dpsql check POLICY --upstream DSN`, and declare bounds that hold the data (or filter "
        "to them)."
    )


OUTSIDE_LEAD = "But about "
"""How :func:`outside_warning` begins: a quantile's notice line (dpsql.execute.notices) drops its
premise when the release's notes hold this warning for it (:func:`warned`)."""


def warned(s: Statistic, notes: Sequence[str]) -> bool:
    """The release's notes hold the outside warning for ``s`` (a line of its own; with grouping
    sets, a set's line, ``grouping set (k): <line>``: the sets read the same rows, so one set's
    count says the premise is false for the statement)."""
    line = f"{s.sql}: {OUTSIDE_LEAD}"
    return any(
        n.startswith(line) or (n.startswith(GROUPING_SET) and f"): {line}" in n) for n in notes
    )


GROUPING_SET = "grouping set ("
"""How a grouping set's note begins (:func:`dpsql.execute.grouping_sets.release_sets`)."""


def with_declared_premises(
    a: Analysis, lines: Sequence[str], outside: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The accuracy notice's lines (each begins with its statistic's SQL and a colon), each with
    its statistic's declared-range premise appended, or, where ``outside`` (by statistic SQL)
    holds the warning that the premise is plainly false, that warning instead."""
    out = []
    for line in lines:
        s = next((s for s in a.statistics if line.startswith(f"{s.sql}: ")), None)
        premise = declared_premise(a, s, "It assumes" in line) if s is not None else ""
        if s is not None and (outside or {}).get(s.sql):
            premise = (outside or {})[s.sql]
        out.append(f"{line.rstrip()} {premise}" if premise else line)
    return tuple(out)


def _have(units: float, more: str) -> str:
    """The verb after "about N <unit>": "has" for exactly one (not "1 pid have")."""
    return "has" if f"{units:,.0f}" == "1" and not more else "have"


def _one(who: str, units: float, more: str) -> str:
    """``who`` after "about N": "row" for exactly one of them ("rows" otherwise; a unit's name,
    as the policy spells it, unchanged)."""
    return "row" if who == "rows" and _have(units, more) == "has" else who
