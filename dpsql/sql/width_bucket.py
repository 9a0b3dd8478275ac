"""``width_bucket(x, lo, hi, n)`` over private rows: when it may run, and the buckets it can give.

PostgreSQL raises for a NaN operand ("operand, lower bound, and upper bound cannot be NaN"): a
``numeric`` column may hold NaN, so ``width_bucket(amount, 0, 500, 10)`` failed only on a
database where some row held one (and reached it past the WHERE clause): a data-dependent error.
The rewrite (:mod:`dpsql.sql.rewrite.make_total`) clamps a ``numeric`` operand into
[-10^1000, 10^1000] first, as every numeric operand there (NaN reads as 10^1000: the bucket
above ``hi``, n + 1, where an infinity goes too), so no row can make it raise; every other
value's bucket is PostgreSQL's own. The other errors depend on the arguments only and are
refused here before anything runs: the bounds must be finite number constants that differ, the
count a whole-number constant in 1 .. 2^31 - 2 (n + 1 must fit an integer); a ``double
precision`` operand is refused (a NaN there is not clamped), and so is the array form.

As a GROUP BY key over a bounded column its domain is every bucket the bounds allow (the
function is monotone in ``x``): released from the policy, each bucket with noise, no partition
selection. Values outside the bounds fall in buckets outside the domain and are left out
upstream, as for any derived key (:mod:`dpsql.sql.derived_keys`). Which overload PostgreSQL
picks matters at the buckets' edges: ``numeric`` (exact) unless the operand is an integer and
both bounds integer constants, then ``double precision`` (``floor(n * ((x - lo) / (hi - lo)))``
in floats), computed here the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.policy.tables import Column
from dpsql.sql.date_domain import MAX_KEYS
from dpsql.sql.key_values import Domain, NumRange, TooMany, sorted_values
from dpsql.sql.numeric_keys import num_type, number_literal
from dpsql.sql.wording import plain_sql

MAX_COUNT = 2**31 - 2
_HINT = "e.g. width_bucket(amount, 0, 500, 10): finite number bounds that differ, a whole count"


@dataclass(frozen=True)
class Buckets:
    """``width_bucket``'s constant arguments; ``floats``: PostgreSQL's double precision
    overload (an integer operand with integer bounds)."""

    lo: Fraction
    hi: Fraction
    count: int
    floats: bool

    def bucket(self, x: Fraction) -> int:
        """PostgreSQL's bucket of ``x`` (width_bucket_numeric / width_bucket_float8)."""
        lo, hi, n = self.lo, self.hi, self.count
        if lo < hi:
            if x < lo:
                return 0
            if x >= hi:
                return n + 1
            num, den = x - lo, hi - lo
        else:
            if x > lo:
                return 0
            if x <= hi:
                return n + 1
            num, den = lo - x, lo - hi
        if self.floats:
            b = int(n * (float(num) / float(den)))  # C's truncation of a non-negative double
            return min(b, n - 1) + 1
        return int(num * n // den) + 1

    def keys(self, lo: Fraction, hi: Fraction) -> tuple[int, ...]:
        """Every bucket of a value in [lo, hi] (monotone: those between the ends' buckets); more
        than :data:`~dpsql.sql.date_domain.MAX_KEYS` is :class:`TooMany`, counted before any is
        made (review24: ``width_bucket(x, 0, 100, 2147483646)`` built a tuple of two billion
        keys while the statement was prepared: the proxy's process grew past 17 GB and the
        kernel killed it)."""
        a, b = self.bucket(lo), self.bucket(hi)
        first, last = min(a, b), max(a, b)
        if last - first + 1 > MAX_KEYS:
            raise TooMany(
                f"width_bucket gives {last - first + 1:,} buckets over the bounds, above the "
                f"limit of {MAX_KEYS:,}"
            )
        return tuple(range(first, last + 1))


def bucket_args(
    node: exp.WidthBucket, column: Callable[[exp.Column], Column | None]
) -> Buckets | None:
    """The constant arguments of ``node``, None unless all are as :func:`check_width_bucket`
    wants them (bounds finite number constants that differ, count 1 .. 2^31 - 2, an integer or
    ``numeric`` operand)."""
    if node.args.get("threshold") is not None:
        return None
    lo, hi = _bound(node, "min_value"), _bound(node, "max_value")
    num = _strip(node.args.get("num_buckets"))
    count = number_literal(num) if num is not None else None
    if lo is None or hi is None or count is None or count[2] != "int":
        return None
    n = int(count[0])
    operand = num_type(node.this, column)
    if lo[0] == hi[0] or not 1 <= n <= MAX_COUNT or operand is None:
        return None
    floats = operand == "int" and lo[1] == hi[1] == "int"
    return Buckets(lo[0], hi[0], n, floats)


def _strip(node: exp.Expr | None) -> exp.Expr | None:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _bound(node: exp.WidthBucket, key: str) -> tuple[Fraction, str] | None:
    """A bound: a number literal, maybe negated (its value and type)."""
    x = _strip(node.args.get(key))
    neg = False
    while isinstance(x, exp.Neg):
        neg, x = not neg, _strip(x.this)
    got = number_literal(x) if x is not None else None
    if got is None:
        return None
    return (-got[0] if neg else got[0]), got[2]


def check_width_bucket(node: exp.WidthBucket, column: Callable[[exp.Column], Column]) -> None:
    """Refuse a ``width_bucket`` call that could raise depending on the data or its arguments."""
    if bucket_args(node, column) is None:
        raise UnsupportedSql(
            f"{plain_sql(node)} is not supported in private queries",
            detail="width_bucket is supported over an integer or numeric value with number "
            "constants as its bounds (finite, not equal) and a whole-number count from 1 to "
            f"{MAX_COUNT:,} (not double precision, where a NaN would raise; not the array form)",
            hint=_HINT,
        )


def bucket_domain(b: Buckets, got: Domain | NumRange | None) -> Domain | None:
    """The buckets of the values ``got`` (a bounded range, or keys) can take."""
    if isinstance(got, NumRange) and not got.floating:
        return Domain("int", b.keys(got.lo, got.hi))
    if isinstance(got, Domain) and got.kind in ("int", "num"):
        vals = [v if isinstance(v, Fraction) else Fraction(int(v)) for v in got.values]  # type: ignore[call-overload]
        return Domain("int", sorted_values({b.bucket(v) for v in vals}), got.null)
    return None
