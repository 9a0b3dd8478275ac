"""``floor(x / n)`` and ``ceil(x / n)`` as GROUP BY keys: time buckets of epoch seconds.

Grafana's ``$__timeGroup(column, '5m')`` for PostgreSQL sends ``floor(extract(epoch from
column)/300)*300`` (the interval's seconds printed by Go's ``%v``: ``86400``, ``0.5``, and
``2.592e+06`` for 30 days); ``$__timeGroupAlias`` adds ``AS "time"``. Its keys follow from the
column's declared bounds (or the statement's own range, Grafana's ``$__timeFilter``) as
``date_trunc``'s do:

* of a date (whole seconds: ``extract(epoch from d)`` of its midnight): each day's quotient
  (:func:`whole_quotients`);
* of a ``timestamp`` or ``timestamptz`` (seconds to the microsecond, ``numeric`` of scale 6:
  :func:`dpsql.sql.zone_bounds.epoch_range`): every whole number from the key of the range's
  low end to that of its high end (:func:`range_quotients`), each computed as PostgreSQL
  divides ``numeric`` values (:func:`div_scale`: the quotient rounded to its result scale).

Before, a timestamp's buckets were selected from the data (a bucket with few people missing
without a trace). The domain is applied upstream as a filter, as every derived key's is
(:mod:`dpsql.sql.derived_keys`): a wrong key could leave rows out, never add any.
"""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from dpsql.sql.date_domain import MAX_KEYS
from dpsql.sql.key_values import Domain, Got, NumRange, TooMany, ceil_int, floor_int, sorted_values

MAX_DIVISOR = 10**8
_NBASE = 10_000  # PostgreSQL's numeric digits: base 10000, 4 decimal digits each


def quotients(
    node: exp.Floor | exp.Ceil, keys: Got, divisor: Fraction, divisor_scale: int
) -> Domain | None:
    """``floor(x / n)`` / ``ceil(x / n)`` of ``numeric`` values ``x`` over a number literal
    ``n`` (of ``divisor_scale`` decimals): of whole-number keys (:func:`whole_quotients`) or of
    a range whose values have at most ``scale`` decimals (:func:`range_quotients`); None for
    anything else."""
    if isinstance(keys, Domain):
        return whole_quotients(node, keys, divisor)
    if isinstance(keys, NumRange):
        return range_quotients(node, keys, divisor, divisor_scale)
    return None


def whole_quotients(node: exp.Floor | exp.Ceil, d: Domain, divisor: Fraction) -> Domain | None:
    """``floor(k / n)`` / ``ceil(k / n)`` of whole-number keys ``d`` over a whole number ``n``
    (1 <= n <= :data:`MAX_DIVISOR`, ``numeric`` division: Grafana's
    ``floor(extract(epoch from d)/86400)*86400`` of a date). PostgreSQL rounds the quotient to
    its result scale (at least 8 decimals for a dividend under 10^12), and a quotient of two
    whole numbers is at least 1/n away from the next whole number unless it is one, so the
    rounding never moves it across one: ``floor`` of the rounded quotient is ``floor`` of the
    exact one."""
    if d.kind != "int" or divisor.denominator != 1 or not 1 <= divisor <= MAX_DIVISOR:
        return None
    ks = [int(v) for v in d.values]  # type: ignore[call-overload]
    if any(abs(k) >= 10**12 for k in ks):
        return None
    n = int(divisor)
    up = isinstance(node, exp.Ceil)
    return Domain("int", sorted_values({-(-k // n) if up else k // n for k in ks}), d.null)


def range_quotients(
    node: exp.Floor | exp.Ceil, r: NumRange, divisor: Fraction, divisor_scale: int
) -> Domain | None:
    """``floor(x / n)`` / ``ceil(x / n)`` over a range of values of at most ``r.scale``
    decimals, ``n > 0``: every whole number from the key of the range's low end to that of its
    high end. For positive values the key is monotone in ``x`` (a larger dividend has a result
    scale no finer, :func:`div_scale`, and rounding to a finer scale stays nearer the exact
    quotient), so these are PostgreSQL's keys exactly; a range reaching 0 or below (before
    1970) takes the ends' exact quotients widened by half a unit of the dividend's scale (a
    key more than PostgreSQL forms, counted with noise over no rows, never one less).

    >>> r = NumRange(Fraction(1583020800), Fraction(1583042399999999, 10**6), False, "ts", 6)
    >>> got = range_quotients(exp.Floor(), r, Fraction(300), 0)
    >>> got.values[0] * 300, got.values[-1] * 300, len(got.values)
    (1583020800, 1583042100, 72)

    Raises:
        TooMany: more than :data:`~dpsql.sql.date_domain.MAX_KEYS` keys (the words say so).
    """
    if r.scale is None or r.floating or divisor <= 0:
        return None
    up = isinstance(node, exp.Ceil)
    if r.lo > 0:
        lo = key(r.lo, r.scale, divisor, divisor_scale, up)
        hi = key(r.hi, r.scale, divisor, divisor_scale, up)
    else:
        half = Fraction(1, 2 * 10**r.scale)
        if up:
            lo, hi = ceil_int(r.lo / divisor - half), ceil_int(r.hi / divisor)
        else:
            lo, hi = floor_int(r.lo / divisor), floor_int(r.hi / divisor + half)
    if hi - lo + 1 > MAX_KEYS:
        raise TooMany(
            f"the range of {r.name} holds {hi - lo + 1:,} of them (one per {float(divisor):g} "
            f"seconds), above the limit of {MAX_KEYS:,}"
        )
    return Domain("int", tuple(range(lo, hi + 1)))


def key(x: Fraction, scale: int, n: Fraction, n_scale: int, up: bool) -> int:
    """``floor(x / n)`` (``ceil`` if ``up``) as PostgreSQL computes it for ``numeric`` ``x`` of
    ``scale`` decimals and ``n`` of ``n_scale``, both positive: the quotient rounded half away
    from zero to :func:`div_scale` decimals first.

    >>> key(Fraction(1583042399999999, 10**6), 6, Fraction(300), 0, False)
    5276807
    """
    unit = Fraction(1, 10 ** div_scale(x, scale, n, n_scale))
    rounded = floor_int(x / n / unit + Fraction(1, 2)) * unit
    return ceil_int(rounded) if up else floor_int(rounded)


def div_scale(x: Fraction, x_scale: int, n: Fraction, n_scale: int) -> int:
    """The result scale of PostgreSQL's ``numeric`` ``x / n`` (``select_div_scale`` in
    src/backend/utils/adt/numeric.c, both positive): 16 significant digits by an estimate of
    the quotient's weight in base-10000 digits, at least either operand's scale.

    >>> div_scale(Fraction(1583020800), 6, Fraction(300), 0)  # 15|8302|0800 over 300
    12
    >>> div_scale(Fraction(1583020800), 6, Fraction(1), 0)
    8
    """
    w1, first1 = _weight(x)
    w2, first2 = _weight(n)
    qweight = w1 - w2 - (1 if first1 <= first2 else 0)
    return min(max(16 - qweight * 4, x_scale, n_scale, 0), 1000)


def _weight(v: Fraction) -> tuple[int, int]:
    """A positive number's weight and first digit in base 10000 (PostgreSQL's NBASE)."""
    w = 0
    while v >= _NBASE:
        v /= _NBASE
        w += 1
    while v < 1:
        v *= _NBASE
        w -= 1
    return w, floor_int(v)
