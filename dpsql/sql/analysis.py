"""The analysis of a private query: what it measures, grouped how, and what it outputs.

Produced by :mod:`dpsql.sql.analyze`, read by the rewrite passes and the planner. Never holds
policy YAML, only resolved facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Literal

from sqlglot import exp

from dpsql.policy.tables import Column, PrivateTable, TypeFamily
from dpsql.sql.key_domain import KeyFilter
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.wording import plain_sql

MeasureKind = Literal[
    "count_rows",  # COUNT(*)
    "count_values",  # COUNT(x): non-null values
    "count_units",  # COUNT(DISTINCT privacy_unit)
    "count_distinct",  # COUNT(DISTINCT x)
    "sum",  # SUM(clamp(x))
    "sum_centered",  # SUM(clamp(x) - mid)
    "sum_sq_centered",  # SUM((clamp(x) - mid)^2)
    "quantile",  # bucket counts of clamp(x) -> exponential mechanism (dpsql.dp.quantiles)
    "mode",  # counts per public candidate value -> report-noisy-max
    "count_keys",  # COUNT(DISTINCT x), x with declared keys: noisy rows per key over a threshold
]


def _q(x: Fraction | None) -> str:
    """``str(x)``, or hexadecimal when its digits are too many for Python's decimal conversion
    (a bound from a constant near NUMERIC's limit, 10^131069: str() raises ValueError past 4300
    digits)."""
    if x is None or max(x.numerator.bit_length(), x.denominator.bit_length()) < 10_000:
        return str(x)
    return f"0x{x.numerator:x}/0x{x.denominator:x}"


@dataclass(frozen=True)
class Measure:
    """A primitive aggregate computed per group upstream and released with noise.

    ``lo``/``hi`` are the range of the (clamped) argument; ``integral`` is true when every
    per-group value is an integer (counts, sums of integers), so no output grid is needed.
    """

    kind: MeasureKind
    arg: exp.Expr | None = None
    lo: Fraction = Fraction(0)
    hi: Fraction = Fraction(0)
    integral: bool = True
    # quantile: the target q and the number of buckets of [lo, hi) (see analyze_quantiles);
    # mode: the public candidate values (text), or the public column listing them.
    quantile: Fraction | None = None
    buckets: int = 0
    grid_hi: Fraction | None = None  # quantile buckets cover [lo, grid_hi) (>= hi)
    candidates: tuple[str, ...] | None = None
    candidates_from: str | None = None
    # COUNT and SUM over groups: one unit's partials summed over all its groups are scaled into
    # this L1 cap (auto bounds, :mod:`dpsql.sql.auto_bounds`); None: the G·R·c of the bounds
    total: Fraction | None = None

    @cached_property
    def arg_sql(self) -> str:
        """The argument as dpsql writes it (``arg.sql(POSTGRES)``; "" for none), written once: a
        frozen measure's argument is never edited in place (:func:`dataclasses.replace` makes
        a new measure), and a statement's steps ask for it at every execution."""
        return self.arg.sql(POSTGRES) if self.arg is not None else ""

    @cached_property
    def key(self) -> str:
        """The measure's identity (computed once, as :attr:`arg_sql`)."""
        return self._text(self.arg_sql)

    @property
    def shown(self) -> str:
        """The measure for EXPLAIN: its key with the argument as the user would write it
        (``sum_centered(amount)[0,500]``, not ``sum_centered("purchases"."amount")[0,500]``)."""
        return self._text(plain_sql(self.arg) if self.arg is not None else "")

    def _text(self, a: str) -> str:
        base = f"{self.kind}({a})[{_q(self.lo)},{_q(self.hi)}]"
        if self.total is not None:
            base += f"L1={_q(self.total)}"
        if self.kind == "quantile":
            return f"{base}q={self.quantile},B={self.buckets}"
        if self.kind in ("mode", "count_keys"):
            return f"{base}{self.candidates or self.candidates_from}"
        return base

    @property
    def selected(self) -> bool:
        """True for measures released by selection (exponential mechanism), not additive noise."""
        return self.kind in ("quantile", "mode", "count_keys")

    @property
    def mid(self) -> Fraction:
        return (self.lo + self.hi) / 2

    def per_row(self) -> Fraction:
        """How much one row (or, for count_units, one unit) can move this measure in one group."""
        if self.kind in ("count_rows", "count_values", "count_units", "count_distinct"):
            return Fraction(1)
        if self.selected:
            return Fraction(1)  # a row moves a bucket/candidate count by one
        if self.kind == "sum":
            return max(abs(self.lo), abs(self.hi))
        half = (self.hi - self.lo) / 2
        return half if self.kind == "sum_centered" else half * half


StatisticFunc = Literal[
    "count", "count_distinct", "sum", "avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp",
    "quantile", "mode",
]  # fmt: skip


@dataclass(frozen=True)
class Statistic:
    """One aggregate call of the query (e.g. AVG(income)), derived from measures."""

    func: StatisticFunc
    measures: tuple[str, ...]  # Measure.key values, in the order the derivation expects
    lo: Fraction
    hi: Fraction
    pg_type: str  # the PostgreSQL type of the output (int8, numeric, float8)
    sql: str  # the aggregate as written, for plans and messages
    # COUNT(DISTINCT col): the size of col's declared domain (its keys, or the whole numbers
    # of an integer column's bounds), at most that many distinct values: value and interval
    # are clamped to it (post-processing)
    at_most: int | None = None
    # the type the column is released as when PostgreSQL's is narrower than ``pg_type`` (the
    # kind the value is computed and rounded as): int2 / int4 for MIN, MAX and percentile_disc
    # of a smallint / integer, float4 for SUM, MIN, MAX of a real; "" when ``pg_type`` is it
    out_type: str = ""

    @property
    def column_type(self) -> str:
        """The PostgreSQL type of the released column (RowDescription's)."""
        return self.out_type or self.pg_type


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY expression and its public key domain (:mod:`dpsql.sql.key_domain`).

    ``keys``: its public values (as text), from the policy's ``keys:``, a CASE's literal results,
    the query's own ``k = c`` / ``k IN (...)`` filter or ``date_trunc`` of a bounded column, all
    narrowed by the WHERE clause; ``keys_from``: a public column listing them, read at run time
    and narrowed by ``narrow``. ``null_key``: NULL is one of the keys too (a CASE without ELSE).
    ``constant``: a public constant expression (``ABS(3)``, ``'total'``, ``DATE '2025-01-01'``:
    :func:`dpsql.sql.constants.is_public_constant`): every row is in the same one group whatever
    the data, so its domain is that one value (read from PostgreSQL at run time, from no table).
    """

    expr: exp.Expr
    name: str
    keys: tuple[str, ...] | None
    keys_from: str | None = None
    family: TypeFamily | None = None  # the key's type family, when dpsql knows it
    null_key: bool = False
    narrow: KeyFilter | None = None
    constant: bool = False
    why: str | None = None  # why a domain the policy implies was not used (too many keys)

    @property
    def declared(self) -> bool:
        return self.keys is not None or self.keys_from is not None or self.constant

    @property
    def domain_size(self) -> int | None:
        """How many keys the domain holds (None: read from a public table at run time)."""
        if self.constant:
            return 1
        if self.keys is None:
            return None
        return len(set(self.keys)) + (1 if self.null_key else 0)

    def domain(self, resolved: tuple[str, ...] | None = None) -> tuple[str | None, ...]:
        """The released keys: ``keys``, or the ``keys_from`` values ``resolved`` (narrowed); a
        constant's one value is read at run time (:func:`dpsql.execute.group_keys.constant_key`)."""
        keys = self.keys if self.keys is not None else resolved or ()
        if self.keys is None and self.narrow is not None:
            keys = self.narrow.narrow(keys)
        keys = tuple(dict.fromkeys(keys))  # a key twice would be two releases of one group
        return (*keys, None) if self.null_key else keys


@dataclass(frozen=True)
class Analysis:
    table: str  # schema.table
    alias: str
    private: PrivateTable
    where: exp.Expr | None
    group_keys: tuple[GroupKey, ...]
    measures: tuple[Measure, ...]
    statistics: tuple[Statistic, ...]
    outer: exp.Select  # post-processing query over _dp(_dp_g0.., _dp_s0..)
    grouped: bool
    # Joined tables (dpsql.sql.sources): (alias, schema.table, policy or None when public), and
    # the checked JOIN clauses (ON qualified by alias). Empty for a single-table query.
    sources: tuple[tuple[str, str, PrivateTable | None], ...] = ()
    joins: tuple[exp.Join, ...] = ()
    # A join of private tables that all leave max_rows_per_unit to ``auto``: each keeps at most
    # this many rows per unit before the join (dpsql.sql.join_cap: public, from the number of
    # private tables alone), and R (chosen) bounds the joined rows per unit and group after it.
    # 0: each keeps R before the join, as with fixed bounds.
    pre_join_rows: int = 0
    # The contribution bounds among R ("rows"), G ("groups") and a unit's total over groups
    # ("total") that came from ``auto`` and may leave rows out (chosen from the data now, stored
    # by an earlier statement, or a default; not G from the declared keys nor one row per unit,
    # which leave nothing out): set by dpsql.sql.apply_bounds, never by the analyzer. The
    # interval's far end then rests on no number the data owner declared
    # (dpsql.execute.accuracy_few.chosen).
    auto_bounded: tuple[str, ...] = ()
    # Among those, the ones kept at their fixed default (1 row, 1 group, one row's worth over
    # all groups) because too few units chose them at this epsilon (the guard of
    # dpsql.dp.bounds; not the table's own rows per unit, ChosenBound.wider): the plan then
    # spends FALLBACK_SHARE of epsilon on what they left out, and a COUNT's or one-signed
    # SUM's column adds that estimate (dpsql.sql.bias). Set by dpsql.sql.apply_bounds only.
    fell_back: tuple[str, ...] = ()
    # GROUP BY ROLLUP / CUBE / GROUPING SETS (dpsql.sql.grouping_sets): the sets in PostgreSQL's
    # order, each as indexes into group_keys (which then hold every key of any set). Empty for a
    # plain GROUP BY. The post-processing query reads the row's set number as _dp_g<len(keys)>.
    grouping_sets: tuple[tuple[int, ...], ...] = ()
    # The WHERE clause leaves no declared key of a GROUP BY column: the notice of the free, empty
    # answer (dpsql.sql.group_domain.no_key_left; a keys_from key's: empty_domain_notice)
    no_keys: str | None = None
    # The catalog proves one row per privacy unit (dpsql.execute.unique_units): set by the engine
    # when it plans the statement (read again before the private query runs), never by the
    # analyzer. The rewrite then skips bounding; the plan estimates clamped mass only.
    unique_unit: bool = False
    # What proved it when the statement was planned (dpsql.execute.unique_units.UNIQUE_UNIT_SQL):
    # the oids of the table and of its unique index, and the xmin of their catalog rows and of
    # the unit column's (its NOT NULL). Read again just before and after the private query:
    # another identity (the index dropped and created again, NOT NULL dropped and set again)
    # means rows may have come in while the proof was gone; the statement is refused.
    unique_proof_id: str = ""
    # The columns of ``table`` whose values the catalog proves lie within their declared bounds
    # (validated CHECK constraints: dpsql.sql.check_bounds), set by the engine when it plans the
    # statement and read again just before the private query runs (a proof gone since is dropped
    # from here: those columns are clamped again) and once more after it (dpsql.execute.
    # unique_units.still_proven). The rewrite emits such a column's value without its clamp when
    # the clamp is into exactly the declared bounds (dpsql.sql.rewrite.clamp_values).
    proven_bounds: tuple[str, ...] = ()
    # What proved them when the statement was planned: the oids of the relations and of their
    # validated CHECK constraints (dpsql.execute.checked_bounds.proof_id). Read again just before
    # and after the private query: other oids (a constraint dropped and added again) mean rows
    # may have come in while it was gone, and the proof no longer holds.
    proof_id: str = ""
    # The group keys (indexes into group_keys) whose PostgreSQL type is an integer type (int2,
    # int4, int8), from the engine's zero-row type probe (dpsql.execute.group_keys.group_types),
    # set just before the private query runs. Their declared keys are then compared as integers
    # (``k IN (0, 1)``) instead of as text (``CAST(k AS TEXT) IN ('0', '1')``), which selects the
    # same rows when every key is an integer written canonically and spares a text conversion
    # per row (dpsql.sql.rewrite.bound_contributions._key_filter).
    integer_keys: tuple[int, ...] = ()
    # The quantile arguments (their SQL text) whose PostgreSQL type is an integer type, from the
    # same kind of zero-row probe (dpsql.execute.group_keys.value_types), set just before the
    # private query runs: with integer bounds they are clamped and bucketed in integers (the same
    # values and buckets as in NUMERIC, without a NUMERIC conversion per row).
    integer_values: tuple[str, ...] = ()
    # The group keys (indexes into group_keys) whose PostgreSQL type (the same probe) is one of
    # dpsql.sql.rewrite.keyed_hash.HASHED_TYPES: the keyed hash that ranks a unit's groups hashes
    # them as values, so that equal keys printed differently (1.0, 1.00) are one group to it.
    hashed_keys: tuple[int, ...] = ()
    # The PostgreSQL types of hashed_keys (the same probe), in the same order: one hashed key of
    # a type with its own extended hash function is hashed by that function
    # (dpsql.sql.rewrite.keyed_hash.group_hash: the number its record hash gives, cheaper).
    hashed_key_types: tuple[str, ...] = ()
    # The privacy unit's PostgreSQL type (the same kind of probe, dpsql.execute.group_keys.
    # unit_type; "" before it is known): of a type in dpsql.sql.rewrite.keyed_hash.HASHED_TYPES,
    # the keyed hashes that choose a unit's rows and groups hash it as a value instead of as text.
    unit_type: str = ""
    # The arguments (their SQL text) of the ROW_VALUE_KINDS measures of a statement whose rows
    # are ranked (not decomposable), with their PostgreSQL types (the same zero-row probe,
    # dpsql.execute.group_keys.value_types), set just before the private query runs: rows whose
    # columns besides the unit and keys are such arguments of a type of
    # dpsql.sql.rewrite.keyed_hash.ROW_ORDER_TYPES are ranked by a hash of those values, not of
    # the row's text (dpsql.sql.rewrite.rank_rows.typed_values).
    row_value_types: tuple[tuple[str, str], ...] = ()
    # Known when planning: the rows are one per unit (a per-unit derived table, dpsql.sql.per_unit,
    # whose leaf reads nothing else). Bounding then removes nothing (one row, one group per unit,
    # R >= 1, G >= 1), so the plan spends no epsilon estimating what it removed (dpsql.sql.bias).
    one_row_per_unit: bool = False
    # Of a per-unit derived table (one_row_per_unit): its columns whose per-unit value is capped
    # (a COUNT at R, a SUM at R times the bound, dpsql.sql.per_unit): nothing is dropped, but the
    # cap can lower (raise) a unit's value, which no estimate measures; the notice says so.
    capped_columns: tuple[str, ...] = ()

    def column(self, node: exp.Column) -> Column | None:
        """The policy column behind a qualified reference (None for public tables' columns)."""
        if node.table and node.table != self.alias:
            for alias, _, private in self.sources:
                if alias == node.table:
                    return private.columns.get(node.name) if private is not None else None
            return None
        return self.private.columns.get(node.name)

    @property
    def needs_selection(self) -> bool:
        """True when some GROUP BY key is not public: DP partition selection decides what shows."""
        return any(not g.declared for g in self.group_keys)

    @property
    def _privates(self) -> list[PrivateTable]:
        return [p for _, _, p in self.sources if p is not None] or [self.private]

    @property
    def max_groups(self) -> int:
        """G: groups one unit may touch: the smallest bound of the joined private tables, and
        never more than the key combinations of a public domain known from the policy and the
        query text (rows outside it are filtered out upstream, so a unit can't reach more)."""
        if not self.grouped:
            return 1
        g = min(p.groups_bound for p in self._privates)
        combinations = 1
        for k in self.group_keys:
            size = k.domain_size
            if size is None:
                return g
            combinations *= size
        return max(1, min(g, combinations))

    @property
    def max_rows(self) -> int:
        """R: rows one unit keeps per group (the smallest bound of the joined private tables)."""
        return min(p.rows_bound for p in self._privates)

    def key_text(self, i: int) -> str:
        """GROUP BY key ``i`` as the statement names it, for notices: a column by its name; an
        expression by the alias the select list gives it (``DATE_TRUNC('MONTH', t) AS month``
        is ``month``), else by its SQL text, never by the function name PostgreSQL gives its
        output column (newcomer30 W1: "date_trunc has 12 declared keys", "(one case each)")."""
        k = self.group_keys[i]
        if not isinstance(k.expr, exp.Column):
            for item in self.outer.expressions:
                body = item.this if isinstance(item, exp.Alias) else None
                if (
                    isinstance(body, exp.Column)
                    and body.name == f"_dp_g{i}"
                    and item.alias != k.name
                ):
                    return str(item.alias)
        return plain_sql(k.expr)

    def measure(self, key: str) -> Measure:
        for m in self.measures:
            if m.key == key:
                return m
        raise KeyError(key)


DECOMPOSABLE = frozenset(
    {"count_rows", "count_values", "count_units", "sum", "sum_centered", "sum_sq_centered"}
)


ROW_VALUE_KINDS = frozenset({"count_keys", "count_distinct", "mode", "count_values"})
"""Measure kinds that read their argument as it is (no clamp) on the rows kept per unit: the
bounded SQL's type probe reads their arguments' types when the rows are ranked
(:attr:`Analysis.row_value_types`)."""


def decomposable(a: Analysis) -> bool:
    """True when every measure adds up over rows (no COUNT(DISTINCT x), quantile or mode)."""
    return all(m.kind in DECOMPOSABLE for m in a.measures)


def needs_group_rank(a: Analysis) -> bool:
    """False when no unit can touch more than G groups anyway, so choosing groups is a no-op.

    That is the case without GROUP BY, and when every key has a declared ``keys:`` list whose
    combinations number at most G: rows whose keys (as text) are not declared, or NULL, are
    filtered out, and the release is indexed by the declared keys (one SQL group per declared
    combination, :func:`dpsql.execute.noise.release`), so a unit reaches at most G released
    groups even if two values printed the same text.
    """
    if not a.group_keys:
        return False
    combinations = 1
    for g in a.group_keys:
        size = g.domain_size
        if size is None:
            return True  # keys_from (resolved at run time) or partition selection
        combinations *= size
    return combinations > a.max_groups
