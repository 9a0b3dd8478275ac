"""The values of a derived key's domain (:mod:`dpsql.sql.derived_keys`): a list of values of
one kind (:class:`Domain`), a date or time column's range (:class:`Span`), a bounded numeric
column's range (:class:`NumRange`), and the whole-number and rounding arithmetic on them done as
PostgreSQL does it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from fractions import Fraction
from typing import Literal

from sqlglot import exp

from dpsql.policy.tables import TypeFamily

Kind = Literal["int", "text", "bool", "date", "ts", "tstz", "num"]
FAMILY: dict[str, TypeFamily] = {"int": "integer", "text": "text", "bool": "boolean",
                                 "date": "date", "ts": "timestamp", "tstz": "timestamp",
                                 "num": "numeric"}  # fmt: skip


class TooMany(Exception):
    """A domain that can be computed but is longer than the limits: ``why`` says so."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class Domain:
    """The values a key can take: Python values of one kind, NULL too when ``null``."""

    kind: Kind
    values: tuple[object, ...]
    null: bool = False
    scale: int = 0  # "num": digits after the point PostgreSQL prints


@dataclass(frozen=True)
class Span:
    """A date or timestamp column's public range, as wall-clock times in the session's zone."""

    kind: Literal["date", "ts", "tstz"]
    lo: datetime
    hi: datetime
    name: str


@dataclass(frozen=True)
class NumRange:
    """A bounded numeric column's range (``floating``: it may be a double precision column);
    ``scale``: every value has at most that many decimals (a timestamp's epoch seconds: 6,
    :func:`dpsql.sql.zone_bounds.epoch_range`, the one range that sets it), None: not known."""

    lo: Fraction
    hi: Fraction
    floating: bool
    name: str
    scale: int | None = None


Got = Domain | Span | NumRange | None


def union(a: Domain, b: Domain) -> Domain | None:
    """Two results' domains together (a text NULL-only domain takes the other's kind)."""
    if not a.values and a.kind == "text":
        return Domain(b.kind, b.values, a.null or b.null, b.scale)
    if not b.values and b.kind == "text":
        return Domain(a.kind, a.values, a.null or b.null, a.scale)
    if a.kind != b.kind or a.scale != b.scale:
        return None  # PostgreSQL's common type would print some of them differently
    vals = tuple(dict.fromkeys([*a.values, *b.values]))
    return Domain(a.kind, vals, a.null or b.null, a.scale)


def midnight(t: datetime) -> datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


def as_datetime(v: object) -> datetime:
    if isinstance(v, datetime):
        return v
    assert isinstance(v, date)
    return datetime(v.year, v.month, v.day)


def sorted_values(values: Iterable[object]) -> tuple[object, ...]:
    return tuple(sorted(values))  # type: ignore[type-var]


def floor_int(x: Fraction) -> int:
    return x.numerator // x.denominator


def ceil_int(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def small_ints(values: tuple[object, ...]) -> bool:
    """Whole numbers double precision prints without an exponent."""
    return all(abs(int(v)) < 10**15 for v in values)  # type: ignore[call-overload]


def int_literal(node: exp.Expr | None) -> int | None:
    neg = isinstance(node, exp.Neg)
    lit = node.this if isinstance(node, exp.Neg) else node
    if isinstance(lit, exp.Paren):
        return int_literal(lit.this) if not neg else None
    if isinstance(lit, exp.Literal) and not lit.is_string and str(lit.this).isdigit():
        return -int(lit.this) if neg else int(lit.this)
    return None


def round_to(x: Fraction, step: Fraction, node: exp.Expr, low: bool = False) -> Fraction:
    """``x`` rounded to a multiple of ``step`` as ``node`` (FLOOR, CEIL, ROUND, TRUNC) does;
    ROUND's halves: away from zero (numeric) or to even (double precision): at a bound that is
    exactly a half, the wider of the two."""
    q = x / step
    if isinstance(node, exp.Floor):
        r = floor_int(q)
    elif isinstance(node, exp.Ceil):
        r = ceil_int(q)
    elif isinstance(node, exp.Trunc):
        r = floor_int(q) if q >= 0 else ceil_int(q)
    else:
        down, up = floor_int(q), ceil_int(q)
        if q - down < Fraction(1, 2):
            r = down
        elif q - down > Fraction(1, 2):
            r = up
        else:
            r = down if low else up
    return r * step


def as_ints(values: Iterable[Fraction], n: int) -> set[object]:
    return {int(v) for v in values} if n <= 0 else set(values)
