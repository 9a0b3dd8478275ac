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

from dpsql.execute.bias import Interval
from dpsql.sql.analysis import Analysis

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
        f"the truth is {side} {kept} (that end holds however much they changed it)."
    )
