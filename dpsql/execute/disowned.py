"""Interval columns the accuracy notice disowns (issue 16).

A statistic's ``_low``/``_high`` are NULL exactly where its accuracy line says the interval does
NOT cover the truth (:mod:`dpsql.execute.accuracy_text`), and the line then says which columns
are NULL: a BI tool that reads the columns only must never see a confident interval the notice
retracts. Where the bounds can only have pulled the answer one way (a COUNT, a SUM of
non-negative values, a COUNT(DISTINCT) whose units the bounds can only leave out), the end on
the other side does not rest on the broken assumption and stays (docs/accuracy.md, "When the
interval columns are NULL").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from dpsql.execute.bias import Interval
from dpsql.sql.analysis import Analysis, Statistic, needs_group_rank
from dpsql.sql.bias import bias_targets, unranked
from dpsql.sql.per_unit_filters import capped_values

Keep = Literal["none", "low", "high"]
"""The end of a disowned interval that still holds: none, or the one on the side the bounds
can only have pulled the answer from (COUNT and a SUM of non-negative values: the low end)."""


@dataclass(frozen=True)
class Disown:
    """The rows (None: every row) whose interval the notice says does NOT hold, and the end
    that still holds there (:data:`Keep`)."""

    rows: frozenset[int] | None
    keep: Keep

    def merged(self, other: Disown) -> Disown:
        """Both disowned: every row either disowns, keeping an end only where both keep it
        (conservative: a row in one of them only loses that end too)."""
        rows = None if self.rows is None or other.rows is None else self.rows | other.rows
        return Disown(rows, self.keep if self.keep == other.keep else "none")

    def at(self, row: int) -> Keep | None:
        """The end row ``row`` keeps (None: it is not disowned)."""
        return self.keep if self.rows is None or row in self.rows else None


Disowned = dict[int, Disown]
"""By statistic index: the intervals the notice says do NOT hold."""


def owned(disowned: Disowned, row: int, si: int, iv: Interval | None) -> Interval | None:
    """Interval ``iv`` of statistic ``si`` in row ``row`` as its columns show it: None when
    the notice disowns it, the end that still holds with an infinite other end (a NULL column)
    when one does."""
    d = disowned.get(si)
    keep = d.at(row) if d is not None else None
    if iv is None or keep is None:
        return iv
    if keep == "low":
        return (iv[0], math.inf)
    if keep == "high":
        return (-math.inf, iv[1])
    return None


def disown(disowned: Disowned, si: int, d: Disown) -> None:
    disowned[si] = disowned[si].merged(d) if si in disowned else d


NULLED_WORDS = ("interval columns are NULL", "interval column is NULL")
"""The words of :func:`nulled`'s sentences (a line with one disowns its interval)."""


def nulled(a: Analysis, d: Disown) -> str:
    """The sentence that says which of a disowned interval's columns are NULL, and what the
    one that stays means (:class:`dpsql.execute.accuracy_text.Accuracy`)."""
    where = " in those groups" if d.rows is not None and a.group_keys else ""
    if d.keep == "none":
        return (
            f" So its _low/_high interval columns are NULL{where} (dpsql.show_intervals): an "
            "interval that does not hold is not shown as one."
        )
    gone, kept = ("_high", "_low") if d.keep == "low" else ("_low", "_high")
    way, side = ("lower", "at or above") if d.keep == "low" else ("raise", "at or below")
    return (
        f" So its {gone} interval column is NULL{where} (dpsql.show_intervals), and its {kept} "
        f"column still holds at the stated level: the bounds can only {way} this answer, so "
        f"the truth is {side} {kept} (that end holds however much they changed it; like any "
        "interval's end it can still miss by chance, at most as often as the level allows)."
    )


def capped_quantile(a: Analysis, s: Statistic | None) -> str | None:
    """The capped per-unit column a quantile statistic ``s`` ranks (``MAX(n)`` over
    ``(SELECT user_id, COUNT(*) AS n ... GROUP BY user_id)``), None when it ranks none (or an
    expression of it: :func:`capped_expression`)."""
    if s is None or not a.one_row_per_unit or not a.capped_columns:
        return None
    arg = a.measure(s.measures[0]).arg
    while isinstance(arg, (exp.Paren, exp.Cast)):
        arg = arg.this
    if isinstance(arg, exp.Column) and arg.name in a.capped_columns:
        return arg.name
    return None


def capped_expression(a: Analysis, s: Statistic | None) -> str | None:
    """The capped per-unit column a quantile statistic ``s`` ranks an expression of
    (``MAX(n * 2)``, ``MEDIAN(LEAST(n, 5) - 1)``), None when its argument reads none or is the
    column itself (:func:`capped_quantile`)."""
    if s is None or capped_quantile(a, s) is not None:
        return None
    names = capped_values(a, a.measure(s.measures[0]).arg)
    return names[0] if names else None


def left_out_counted(a: Analysis, s: Statistic | None) -> bool:
    """A quantile whose interval allows for the rows its bounds left out, counted
    (:func:`dpsql.sql.bias.quantile_targets`: MEDIAN or a percentile of all the rows): it holds
    the quantile of all of them, assuming no unit lost more than the count's cap (the release's
    accuracy line says where that is plainly false, and disowns it there)."""
    return s is not None and any(t.key == s.measures[0] for t in bias_targets(a))


def quantile_disown(a: Analysis, q: float, s: Statistic | None = None) -> Disown | None:
    """Where a quantile's interval (MEDIAN, a percentile, MIN at ``q`` 0, MAX at 1) does NOT
    hold the truth: None where it does, else the end that still holds.

    The interval holds the ``q``-quantile of the rows the contribution bounds keep
    (:func:`dpsql.execute.selected_measures.quantile_ends`). With each row its own unit or one row per unit
    (:func:`dpsql.sql.bias.unranked`, or a per-unit derived table) the bounds keep every row,
    so that is the quantile of all the rows (a clamp moves no rank: a quantile inside the
    declared range is unchanged, the premise the notice states). Otherwise a unit's rows past
    R in a group, or its groups past G, are left out, and the quantile of what is kept can lie
    on either side of the true one, by any number of ranks: both ends go.

    MIN and MAX keep one end. Leaving rows out can only raise the smallest value and lower the
    largest: if the kept rows K are a non-empty subset of the group's rows T, then min(T) <=
    min(K) and max(T) >= max(K) (after the same clamp, which is monotone). MIN's high end H is
    at or above min(K) except with the mechanism's miss probability of that end (at most 1 -
    the stated level), so P(H < min(T)) <= P(H < min(K)) <= 1 - level: ``_high`` still holds;
    for MAX the same with the low end. K is non-empty wherever T is when no unit can lose a
    whole group (:func:`dpsql.sql.analysis.needs_group_rank` is False: every unit keeps at
    least one of its rows, R >= 1, in each of its groups) and the private rows are capped
    after any join (several private tables are capped before joining: the kept rows of a unit
    may then join nothing while its others did). Otherwise an empty K has an interval drawn
    from no rows at all, and both ends go."""
    if capped_quantile(a, s) is not None:
        # each unit's value is capped at X (a unit with more counts as X): a quantile of the
        # capped values is at most the true one (min(v, X) is monotone), and equal to it below
        # X, so _low holds; _high does not (the true quantile may lie above X by any amount)
        return Disown(None, "low")
    if capped_expression(a, s) is not None:
        # an expression of the capped values (its argument's interval is that of the capped
        # ones): it can move the quantile either way (n * -1, a CASE), so neither end holds
        return Disown(None, "none")
    if unranked(a) or a.one_row_per_unit or left_out_counted(a, s):
        return None
    several = sum(1 for _, _, p in a.sources if p is not None) > 1
    if q in (0, 1) and not several and not needs_group_rank(a):
        return Disown(None, "high" if q == 0 else "low")
    return Disown(None, "none")
