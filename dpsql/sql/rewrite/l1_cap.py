"""The L1 cap over groups of a per-group COUNT or SUM (``Measure.total`` = L, auto bounds or a
declared ``max_rows_per_unit_total``: :func:`dpsql.sql.auto_bounds.total_mode`), applied to the
per-unit partials :mod:`dpsql.sql.rewrite.bound_partials` builds.

An L1 cap over groups (``Measure.total`` = L, auto bounds for per-group COUNT and SUM: see
:func:`dpsql.sql.auto_bounds.total_mode`): the unit's kept partials of such a measure are scaled
by DIV(L·10^18, GREATEST(T, L))·10^-18 (exactly rounded down), T the sum of their absolute values over the unit's kept groups
(a window per unit, :func:`scaled`); integer measures (COUNT, SUM of integers) are apportioned
exactly instead: systematic rounding along the unit's group order (a running sum over the group
rank's own sort) with an offset from the unit's salted hash (:func:`apportioned`), so each share
is the floor or the ceiling of its quota, its quota in expectation, and a unit above the cap
keeps exactly FLOOR(L) (truncating each share kept 0 of 2 + 1 rows under L = 1). Either way the
kept partials add up to at most L in absolute value, and each is at most its unscaled self in
magnitude, with its sign. The factor and the apportionment are functions of the unit's own
partials and the salt: the argument below holds with min(G·R·c, L) in L1 (and L2).
"""

from __future__ import annotations

import math
from fractions import Fraction

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Measure
from dpsql.sql.nodes import cast
from dpsql.sql.rewrite.keyed_hash import unit_hash
from dpsql.sql.rewrite.literals import numeric

__all__ = ["apportioned", "capped", "fits_bigint", "offset_column", "scaled"]


def capped(m: Measure) -> bool:
    """True when measure ``m``'s partials are scaled into an L1 cap over the unit's groups."""
    return m.total is not None and m.kind in ("count_rows", "count_values", "sum")


_FACTOR_DIGITS = 18  # the L1-cap factor's decimal digits (rounded down: <= L / T exactly)


def scaled(m: Measure, partial: str, keep: exp.Expr | None) -> exp.Expr:
    """The unit's partial in the group scaled into the measure's L1 cap L over its groups, for a
    non-integer measure (SUM of NUMERIC or float values; integer measures are apportioned:
    :func:`apportioned`)::

        p * DIV(L * 10^18, GREATEST(T, L)) / 10^18,   T = SUM(|p|) OVER (PARTITION BY _dp_unit)

    over the unit's kept groups only (``keep``). The factor is rounded down (<= L / T), so the
    unit's kept scaled partials add up to at most L in absolute value; a unit within the cap
    (T <= L) keeps its partials exactly (factor 1). Like the partials, the factor is a function of
    the unit's own rows only.
    """
    assert m.total is not None
    cap = numeric(m.total)
    # DIV(L·10^18, max(T, L)) / 10^18: NUMERIC division truncated exactly (``div``), not the
    # division operator, which rounds its last digit and so could round L/T up to 1 when T
    # exceeds L by less than its precision (T = 100.0000000000000000000001 for L = 100 gave
    # TRUNC(L / T, 18) = 1: the unit kept T > L)
    scaled_cap = exp.Mul(this=cap, expression=numeric(Fraction(10**_FACTOR_DIGITS)))
    quotient = exp.Anonymous(
        this="div",
        expressions=[
            scaled_cap,
            exp.Greatest(this=_unit_total(partial, keep), expressions=[cap.copy()]),
        ],
    )
    factor = exp.Mul(this=quotient, expression=numeric(Fraction(1, 10**_FACTOR_DIGITS)))
    return exp.Mul(this=exp.column(partial), expression=factor)


def _unit_total(partial: str, keep: exp.Expr | None) -> exp.Expr:
    """``T = SUM(|p|) OVER (PARTITION BY _dp_unit)`` over the unit's kept groups (``keep``)."""
    size: exp.Expr = exp.Abs(this=exp.column(partial))
    if keep is not None:
        size = exp.Case(ifs=[exp.If(this=keep.copy(), true=size)], default=exp.Literal.number(0))
    return exp.Window(this=exp.Sum(this=size), partition_by=[exp.column("_dp_unit")])


def apportioned(
    m: Measure,
    partial: str,
    i: int,
    keep: exp.Expr | None,
    order: list[exp.Expr],
    bigint: bool = False,
) -> tuple[exp.Expr, exp.Expr, exp.Expr]:
    """An integer measure's partials apportioned into its L1 cap over the unit's groups, exactly,
    by systematic rounding along the unit's group order.

    With ``p`` the unit's partial in a group (an integer), ``L`` = FLOOR of the cap, ``T`` =
    SUM(|p|) over the unit's kept groups, ``D`` = GREATEST(T, L, 1), ``C`` the running SUM(|p|)
    over the unit's groups in ``order`` (the group rank's: the salted hash of (unit, keys), then
    the keys; every kept group comes before every dropped one) up to and including this one, and
    ``o`` = MOD(the unit's salted hash (:func:`offset_column`: ``_dp_uh``), D), an offset in [0, D)::

        kept = sign(p) * (DIV(L * C + o, D) - DIV(L * (C - |p|) + o, D))

    Each share is the floor or the ceiling of its quota |p| · L / D (a difference of floors of
    two numbers |p| · L / D apart); a unit's kept shares telescope to DIV(L · T + o, D) -
    DIV(o, D) = min(T, L) exactly (T <= L: D = L, DIV(L · T + o, L) = T; T > L: D = T,
    DIV(L · T + o, T) = L, as o < D). A unit within the cap (T <= L) keeps its partials
    (quota = |p|, an integer). Over the offset, uniform on [0, D) (up to D / 2^63: a 64-bit hash
    reduced mod D), each share is its quota in expectation (Hermite's identity: the mean of
    FLOOR((x + o) / D) over o = 0 .. D-1 is x / D for an integer x), whatever the order: no
    group is favoured (largest remainders, before, gave a 2 + 1 unit's one row under L = 1 to
    its 2 every time). The running sum is a window over the group rank's own sort (PARTITION
    BY the unit, ORDER BY the same hash and keys): no second per-unit sort.

    Privacy (the plan's bounds unchanged): T > L gives a quota |p| · L / T < |p|, so its
    ceiling is <= |p| (an integer); T <= L keeps |p|: each kept share is at most its partial in
    magnitude, with its sign (the per-group bound R·c holds); the kept shares add up to
    min(T, L) <= L in magnitude (the L1 bound). Every input (p, T, C, the group rank and order,
    the unit's and its keys' hashes with the statement's salt) is a function of the unit's own
    rows and the salt: removing a unit changes no other unit's shares, so the neighbouring
    argument of the module docstring holds as it did.

    Returns the column of C (for the SELECT of the group rank when there is one: it shares its
    sort), the column of T and the kept share over both (a window can't read a window's result
    of its own SELECT).
    """
    assert m.total is not None
    p = exp.column(partial)
    # a SUM's partial is a whole NUMERIC: in bigint (exact) where its range allows (_bigint)
    size: exp.Expr = exp.Abs(this=cast(p.copy(), "bigint") if bigint and m.kind == "sum" else p)
    unit = exp.column("_dp_unit")
    running: exp.Expr
    if order:
        frame = exp.WindowSpec(
            kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end="CURRENT ROW"
        )
        running = exp.Window(
            this=exp.Sum(this=size.copy()),
            partition_by=[unit.copy()],
            order=exp.Order(expressions=[exp.Ordered(this=t.copy()) for t in order]),
            spec=frame,
        )
    else:  # one group per unit (no GROUP BY): its running sum is its total
        running = exp.Window(this=exp.Sum(this=size.copy()), partition_by=[unit.copy()])
    total = _unit_total(partial, keep)
    floor_cap = math.floor(m.total)
    cap: exp.Expr
    if bigint:  # counts: bigint arithmetic (exact; NUMERIC div/mod was most of the windows' time)
        running, total = cast(running, "bigint"), cast(total, "bigint")  # SUM(bigint): NUMERIC
        cap = exp.Literal.number(floor_cap)
    else:
        cap = numeric(Fraction(floor_cap))
    c, t = exp.column(f"_dp_cs{i}"), exp.column(f"_dp_tot{i}")
    # (never 0: a cap below 1 keeps nothing, and a unit whose partials are all 0 has T = 0)
    floors = [cap.copy()] if floor_cap >= 1 else [cap.copy(), exp.Literal.number(1)]
    denom = exp.Greatest(this=t, expressions=floors)
    positive = exp.column("_dp_uh")  # the unit's hash, made non-negative (offset_column)
    o: exp.Expr = (
        exp.Paren(this=exp.Mod(this=positive, expression=denom.copy()))
        if bigint
        else exp.Anonymous(this="mod", expressions=[positive, denom.copy()])
    )
    before = exp.Paren(this=exp.Sub(this=c.copy(), expression=size.copy()))

    def floor_of(x: exp.Expr) -> exp.Expr:
        top = exp.Add(this=exp.Mul(this=cap.copy(), expression=x), expression=o.copy())
        if bigint:
            return exp.Div(this=exp.Paren(this=top), expression=denom.copy(), typed=True)
        return exp.Anonymous(this="div", expressions=[top, denom.copy()])

    share: exp.Expr = exp.Sub(this=floor_of(c.copy()), expression=floor_of(before))
    if m.kind == "sum" and m.lo < 0:  # a partial may be negative: the share keeps its sign
        negative = exp.LT(this=p.copy(), expression=exp.Literal.number(0))
        share = exp.Case(
            ifs=[exp.If(this=negative, true=exp.Neg(this=exp.Paren(this=share.copy())))],
            default=share,
        )
    return (
        exp.alias_(running, f"_dp_cs{i}", copy=False),
        exp.alias_(total, f"_dp_tot{i}", copy=False),
        share,
    )


_BIGINT_ROOM = 2**62  # below bigint's 2^63 - 1


def offset_column(salt: str, unit_type: str) -> exp.Expr:
    """``_dp_uh``: the unit's salted hash (:func:`~dpsql.sql.rewrite.keyed_hash.unit_hash`) made
    non-negative, the offset of :func:`apportioned`'s rounding before its reduction mod D;
    computed once per partial row, beside the running sums."""
    h = unit_hash(salt, exp.column("_dp_unit"), unit_type)
    positive = exp.BitwiseAnd(this=exp.Paren(this=h), expression=exp.Literal.number(2**63 - 1))
    return exp.alias_(positive, "_dp_uh", copy=False)


def fits_bigint(a: Analysis, m: Measure) -> bool:
    """Whether integer measure ``m``'s apportionment can run in ``bigint``: an integer cap L, a
    count or a SUM of integers (its partials are whole numbers: ``partial_sql`` rounds them)
    whose per-row bound c is whole, and every number it computes within range: a partial is
    at most R·c (``LEAST(COUNT, R)`` for a count, c = 1), C and T at most G·R·c (at most G kept
    groups; without a ranking the declared keys leave at most G), L·C + o below that."""
    if m.total is None or m.total.denominator != 1:
        return False
    if m.kind not in ("count_rows", "count_values") and not (m.kind == "sum" and m.integral):
        return False
    c = m.per_row()
    if c.denominator != 1:
        return False
    bound, g, cap = a.max_rows * int(c), max(a.max_groups, 1), int(m.total)
    # L·C + o <= L·G·R·c + max(G·R·c, L)
    return cap * g * bound + max(cap, g * bound) < _BIGINT_ROOM
