"""What an ``auto`` bound is: an item to choose, a chosen bound, a statement's set of them.

:mod:`dpsql.sql.auto_bounds` decides which bounds a statement needs chosen (:class:`AutoItem`,
each with its public grid) and which are set without the data (:class:`ChosenBound` with a
``rule``: the words below); the execution side (:mod:`dpsql.execute.auto_bounds`) releases each
choice and gathers them in :class:`AutoBounds`, which the rewrite, the plan and the notice read.
This module holds those types, their ledger keys and their words (:meth:`AutoBounds.describe`,
:func:`total_label`), nothing that chooses.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import sqlglot
from sqlglot import exp

from dpsql.dp.bounds import CEILING_PRIOR
from dpsql.sql.analysis import Measure
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.wording import plain_sql

ItemKind = Literal["rows", "groups", "value_hi", "value_lo", "total"]

# why a bound was set without the data (ChosenBound.rule: the notice names it; nothing spent)
DECLARED_TOTAL = "from the policy's max_rows_per_unit_total"
DECLARED = "from the declared keys"
ONE_ROW = (
    "one row per unit (a unique key on the privacy unit, read from the catalog, or a per-unit "
    "table): 1 row and 1 group per unit keep every row"
)
RATIO_ROWS = (
    "for per-group averages, spreads and quantiles: 1 row per unit per group gives the least noise"
)
TOTAL_ROWS = "per-group counts and sums: what a unit adds over all its groups is capped instead"


@dataclass(frozen=True)
class AutoItem:
    """One bound to choose: its kind, the column (value items), and its public grid.

    ``grid`` holds the candidate bounds in increasing distance from ``anchor`` (R and G: from
    0); ``thresholds`` the per-unit numbers' bucket edges as PostgreSQL's ``width_bucket``
    counts them (edges <= the number); ``slice`` identifies the rows measured (tables, filter
    and, for R and G, the grouping), so the choice is reused for the same slice only.
    """

    kind: ItemKind
    grid: tuple[Fraction, ...]
    slice: str
    column: str = ""  # the argument's SQL (value items)
    arg: exp.Expr | None = None
    anchor: Fraction = Fraction(0)
    integer: bool = True
    per_group: bool = True  # rows: per (unit, group); False: per unit over all its rows
    median: bool = False  # aim at the median unit (R when every statistic is a ratio: AVG, VAR)
    measure: Measure | None = None  # total: the COUNT or SUM whose L1 cap over groups this is
    # a clamp of per-group ratios at R = 1 (ratio_rows): from each unit's largest (smallest)
    # per-group mean, not its largest value: a unit's partial is the mean of its rows in the
    # group, which the clamp moves by the share of those rows above it
    group_mean: bool = False

    @property
    def thresholds(self) -> tuple[Fraction, ...]:
        """Edges of buckets 1 .. B-1, as distances from the anchor: an integer number d is in
        bucket j when grid[j-1] < d <= grid[j] (edges grid + 1), a fractional one when
        grid[j-1] <= d < grid[j] (a value exactly on a candidate goes one bucket up)."""
        step = 1 if self.integer else 0
        return tuple(abs(v - self.anchor) + step for v in self.grid[:-1])

    @property
    def prior(self) -> int:
        """The selection's public prior (``TopRank.step_nats``): R, G and an L1 cap have grids up
        to a policy ceiling far above most data, where a rare miss would land anywhere
        (:mod:`dpsql.dp.bounds`, "Far above the data"); a clamp's grid ends at the declared bound."""
        return 0 if self.kind.startswith("value") else CEILING_PRIOR

    @property
    def label(self) -> str:
        return {
            "rows": "rows per unit",
            "groups": "groups per unit",
            "value_hi": f"upper clamp of {_display(self.column)}",
            "value_lo": f"lower clamp of {_display(self.column)}",
            "total": f"{total_label(self.column)} per unit over all its groups",
        }[self.kind]

    def key(self, digest: str) -> str:
        """The ledger key of this choice (policy digest, kind, column, slice and target)."""
        body = f"{self.kind}|{self.column}|{self.slice}|{'median' if self.median else 'top'}"
        if self.group_mean:
            body += "|group-mean"
        return f"auto-bound:v1:{digest}:{hashlib.sha256(body.encode()).hexdigest()[:32]}"


@dataclass(frozen=True)
class ChosenBound:
    """A bound chosen from the data (a DP release, stored in the ledger).

    ``epsilon`` is what choosing it cost when it was measured, ``rank`` the number of units the
    choice aimed to leave above the bound and ``buckets`` the grid's size: with probability
    ``confidence`` at most ``rank + TopRank.rank_error(buckets, confidence)`` units have more than
    ``value`` (the utility guarantee of the selection), the handle for a bias estimate.
    ``reused``: taken free from the ledger (measured by an earlier statement).
    """

    kind: ItemKind
    column: str
    value: Fraction
    epsilon: Fraction
    rank: int
    buckets: int
    reused: bool = False
    fallback: bool = False  # too few units to choose (dpsql.dp.bounds' guard): the default
    # (a fallback) the table's rows per unit over all its rows instead of the default
    # (:func:`whole_table_rows`): reused, not chosen for this slice
    wider: bool = False
    rule: str = ""  # set without the data, why (policy_choices): not chosen, nothing spent


@dataclass(frozen=True)
class AutoBounds:
    """The bounds a statement runs with: chosen ones, the epsilon spent choosing them now."""

    chosen: tuple[ChosenBound, ...] = ()
    epsilon_spent: Fraction = Fraction(0)
    fallback: str = ""  # why some auto bound kept today's default (mixed joins, tiny epsilon)

    def get(self, kind: ItemKind, column: str = "") -> ChosenBound | None:
        for c in self.chosen:
            if c.kind == kind and c.column == column:
                return c
        return None

    def describe(self, per_group: bool | None = None) -> str:
        """The chosen bounds in words (the notice and EXPLAIN); ``per_group``: whether R is per
        group (default: when a G is among them; EXPLAIN describes a part of a statement's
        bounds, whose G may be in another part)."""
        parts = []
        rows, groups = self.get("rows"), self.get("groups")
        totals = any(c.kind == "total" for c in self.chosen)
        if (
            rows is not None
            and rows.rule != TOTAL_ROWS
            and not (totals and rows.rule == DECLARED_TOTAL)
        ):
            r = _num(rows.value)
            per = " per group" if (groups is not None if per_group is None else per_group) else ""
            parts.append(f"{r} row{'' if r == '1' else 's'} per unit{per}")
        for c in self.chosen:
            if c.kind == "total":
                what = total_label(c.column)
                if what.endswith(" summed"):
                    text = f"{what} to at most {_num(c.value)}"
                else:
                    one = _num(c.value) == "1" and what == "rows"
                    text = f"at most {_num(c.value)} {'row' if one else what}"
                parts.append(f"{text} per unit over all groups")
        if groups is not None:
            g = _num(groups.value)
            parts.append(f"{g} group{'' if g == '1' else 's'} per unit")
        cols: dict[str, list[ChosenBound]] = {}
        for c in self.chosen:
            if c.kind.startswith("value"):
                cols.setdefault(c.column, []).append(c)
        for col, cs in cols.items():
            lo = next((c for c in cs if c.kind == "value_lo"), None)
            hi = next((c for c in cs if c.kind == "value_hi"), None)
            if lo is not None and hi is not None:
                ends = f"into [{_num(lo.value)}, {_num(hi.value)}]"
            else:
                ends = f"to at most {_num(hi.value)}" if hi else f"to at least {_num(lo.value)}"  # type: ignore[union-attr]
            parts.append(f"{_display(col)} clamped {ends}")
        return ", ".join(parts)


def total_label(column: str) -> str:
    """The quantity an L1 cap bounds, in words: rows, values of x, or the sum of x; rows with
    a condition for a conditional count (``COUNT(*) FILTER (WHERE cost > 500)``, ``SUM(CASE
    WHEN d = 'chemo' THEN 1 ELSE 0 END)``: "rows with cost > 500", newcomer22 #18).

    >>> total_label('count_values(CASE WHEN "v"."cost" > 500 THEN 1 END)')
    'rows with cost > 500'
    >>> total_label('sum(CASE WHEN "v"."d" > 3 THEN 1 ELSE 0 END)')
    'rows with d > 3'
    >>> total_label('sum("t"."amount")'), total_label('count_values("t"."email")')
    ('amount summed', 'values of email')
    """
    kind, _, raw = column.partition("(")
    raw = raw[:-1] if raw.endswith(")") else raw
    arg = _display(raw)
    if kind.startswith("sum") and _one(arg):  # SUM(1), SUM(CAST(1 AS BIGINT)): rows
        return "rows"
    cond = _counted_condition(raw) if kind.startswith(("sum", "count_values")) else None
    if cond is not None:
        return f"rows with {cond}"
    return {"count_rows": "rows", "count_values": f"values of {arg}"}.get(kind, f"{arg} summed")


def _counted_condition(sql: str) -> str | None:
    """The condition of ``CASE WHEN cond THEN 1 [ELSE 0 | ELSE NULL] END`` (a conditional count,
    as FILTER and BI tools write one), in the user's terms; None for anything else."""
    try:
        node = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError:
        return None
    if not isinstance(node, exp.Case) or node.this is not None or len(node.args["ifs"]) != 1:
        return None
    when = node.args["ifs"][0]
    default = node.args.get("default")
    one = _one(when.args["true"].sql(POSTGRES))
    zero = default is None or isinstance(default, exp.Null) or default.sql(POSTGRES) == "0"
    return plain_sql(when.this) if one and zero else None


_CAST = re.compile(r"^CAST\((.*) AS [A-Z0-9_ ]+\)$|^(.*)::[A-Z0-9_ ]+$", re.IGNORECASE)


def _one(arg: str) -> bool:
    """Whether a summed argument's SQL is the constant 1 (through casts and parentheses)."""
    t = arg.strip()
    while True:
        m = _CAST.match(t)
        if m is not None:
            t = (m.group(1) or m.group(2) or "").strip()
        elif t.startswith("(") and t.endswith(")"):
            t = t[1:-1].strip()
        else:
            break
    try:
        return float(t) == 1
    except ValueError:
        return False


def _display(column_sql: str) -> str:
    """A column as the user wrote it: ``"t"."amount"`` -> amount; an expression in the user's
    terms (``CASE WHEN "v"."cost" > 500 ...`` -> ``CASE WHEN cost > 500 ...``: was cut at its
    last dot, ``cost" > 500 THEN 1 END``, newcomer22 #18)."""
    try:
        node = sqlglot.parse_one(column_sql, read="postgres")
    except sqlglot.errors.ParseError:
        return column_sql
    return node.name if isinstance(node, exp.Column) else plain_sql(node)


def _num(v: Fraction) -> str:
    """A bound as the accuracy notice writes numbers (1,910, not 1910)."""
    return f"{v.numerator:,}" if v.denominator == 1 else f"{float(v):,.6g}"
