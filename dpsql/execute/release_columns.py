"""The release's columns as shown besides the noisy values (post-processing of released values
only): the intervals of the outputs that are expressions over statistics (none over a statistic
the accuracy notice disowns, one end where only one holds) and their words, a COUNT(DISTINCT)
clamped to its declared domain's size and what that assumes (called by
:func:`dpsql.execute.noise.release`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from dpsql.execute.bias import round_outwards
from dpsql.execute.disowned import Disowned
from dpsql.sql.analysis import Analysis
from dpsql.sql.intervals import derived_intervals, derived_outputs
from dpsql.sql.wording import plain_sql


def one_end_notes(a: Analysis, derived: Ivs) -> tuple[str, ...]:
    """Which expressions over a statistic whose notice keeps one end only kept that end (in
    which rows): their other interval column is NULL, and the words say why."""
    out = []
    for k, (pos, _, sis) in enumerate(derived_outputs(a)):
        ends = [iv for row in derived if k < len(row) and (iv := row[k]) is not None]
        for gone, kept, side, end in (
            ("_high", "_low", "at or above", 1),
            ("_low", "_high", "at or below", 0),
        ):
            n = sum(1 for iv in ends if math.isinf(iv[end]))
            if not n:
                continue
            where = f" in {n:,} of {len(derived):,} rows" if a.group_keys else ""
            reads = ", ".join(dict.fromkeys(a.statistics[si].sql for si in sis))
            name = a.outer.expressions[pos].alias_or_name
            out.append(
                f"interval columns: {name}{gone} is NULL{where}: {name} is computed from "
                f"{reads}, whose accuracy notice (above) keeps one end only, so nothing bounds "
                f"it on that side; {name}{kept} still holds at the stated level (the truth is "
                f"{side} it)"
            )
    return tuple(out)


Ivs = list[list[tuple[float, float] | None]]


def cap_note(a: Analysis, si: int) -> str:
    """What clamping a COUNT(DISTINCT) to its declared domain's size assumes. Its keys: nothing
    (only declared keys are counted). The whole numbers within an integer column's bounds: that
    no value lies outside them, unless the database's CHECK constraint proves it
    (``a.proven_bounds``); PostgreSQL's COUNT(DISTINCT) counts the values outside them too."""
    s = a.statistics[si]
    head = f"{s.sql}: value and interval clamped to at most {s.at_most}, the number of "
    m = next((m for m in a.measures if m.key == s.measures[0]), None)
    col = m.arg if m is not None and isinstance(m.arg, exp.Column) else None
    if m is None or m.kind == "count_keys":
        return (
            head + "keys the policy declares for the column (only those are counted): that "
            f"upper end holds whatever the bounds left out, so _high shows {s.at_most}, not NULL"
        )
    declared = a.column(col) if col is not None else None
    where = (
        f" {declared.bounds[0]} to {declared.bounds[1]}"
        if declared is not None and declared.bounds is not None
        else ""
    )
    unit = "days" if declared is not None and declared.family == "date" else "whole numbers"
    head += f"{unit} within the declared range{where} of {plain_sql(col) if col else 'it'}"
    if col is not None and not a.joins and col.name in a.proven_bounds:
        return (
            head + " (a CHECK constraint of the table enforces it): that upper end holds "
            f"whatever the bounds left out, so _high shows {s.at_most}, not NULL"
        )
    return (
        head + ". It assumes every value lies in that range: the database does not enforce "
        "it, and COUNT(DISTINCT) counts the values outside it too, so the truth can exceed "
        f"{s.at_most} if some do"
    )


def capped(a: Analysis, si: int, iv: tuple[float, float] | None) -> tuple[float, float] | None:
    """A COUNT(DISTINCT) interval's end within its declared domain's size, also the end a
    disowned interval leaves open (the truth is at most that many values whatever the bounds
    dropped)."""
    cap = a.statistics[si].at_most
    if iv is None or cap is None:
        return iv
    return (min(iv[0], float(cap)), min(iv[1], float(cap)))


def derived_columns(
    a: Analysis,
    rows: int,
    confidence: float,
    interval: Callable[[int, int, float], tuple[float, float] | None],
    held: Callable[[int, int, float], tuple[float, float] | None],
    disowned: Disowned,
) -> tuple[Ivs, list[list[float | None]]]:
    """The expressions' intervals (none over a statistic the notice disowns), rounded outwards
    like a statistic's, and their half-widths over every statistic's interval (presentation
    rounding: :attr:`Release.derived_half_widths`; empty when nothing is disowned)."""

    def rounded(ivs: Ivs) -> Ivs:
        return [[iv if iv is None else round_outwards(iv, half(iv)) for iv in row] for row in ivs]

    derived = rounded(derived_intervals(a, rows, confidence, held))
    if not disowned or not derived or not any(derived):
        return derived, []
    every = rounded(derived_intervals(a, rows, confidence, interval))
    halves = [[None if iv is None else half(iv) for iv in row] for row in every]
    # a one-ended interval's end rounds outwards at the step of the interval it would have
    derived = [
        [_one_end_rounded(iv, hw) for iv, hw in zip(row, hrow, strict=True)]
        for row, hrow in zip(derived, halves, strict=True)
    ]
    return derived, halves


def _one_end_rounded(iv: tuple[float, float] | None, hw: float | None) -> Any:
    if iv is None or hw is None or all(map(math.isfinite, iv)):
        return iv
    lo, hi = round_outwards((iv[0] if math.isfinite(iv[0]) else iv[1],) * 2, hw)
    return (lo, iv[1]) if math.isfinite(iv[0]) else (iv[0], hi)


def half(iv: tuple[float, float]) -> float:
    return (iv[1] - iv[0]) / 2
