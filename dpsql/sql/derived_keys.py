"""Key domains that follow from the policy through the expressions BI tools group by.

A column with declared ``keys:``, a bounded integer, date or timestamp column, or a boolean
column takes only values the policy names. Expressions BI tools wrap around such a column keep
a domain that can be computed from the policy and the statement's text alone, so the groups are
released from that domain (each with noise, no partition selection, no delta, no group silently
missing) instead of being selected from the data:

* Metabase's ``CAST(DATE_TRUNC('month', d) AS date)``, ``DATE_TRUNC('month', CAST(d AS
  timestamp))``, ``CAST(EXTRACT(dow FROM d) AS integer) + 1``; Tableau's ``EXTRACT(YEAR FROM d)``,
  ``CAST(category AS TEXT)`` / ``VARCHAR``; ``date_part('month', d)``, ``to_char(d, 'YYYY-MM')``;
* ``FLOOR``/``CEIL``/``ROUND``/``TRUNC`` of a bounded integer (``quantity``, bounds [1, 10]:
  the 10 whole numbers) or numeric column (also with decimals: ``ROUND(amount, -2)``), and a
  whole-number key plus, minus or times a whole number;
* a comparison over the row (``amount > 100``), a boolean column inside one: ``false``,
  ``true``;
* ``COALESCE(category, 'unknown')``, ``UPPER``/``LOWER`` of ASCII keys, casts to text, and
  ``CASE`` whose results are constants or keyed expressions (``CASE WHEN category IN ('books',
  'travel') THEN category ELSE 'other' END``): the union of the results' domains, with NULL when
  there is no ``ELSE`` (or a ``NULL`` result).

A bare column is left as before (its declared keys, or partition selection). A NULL of the
column itself is not a key, as for a plain column with declared keys (its rows are
left out upstream); NULL is a key only where the expression makes it (a CASE without ELSE).

Limits: at most :data:`MAX_KEYS` keys (a longer domain, such as the days of a decade or the
whole numbers of [0, 1000000], is left to partition selection, and the notice says why: the
:class:`TooMany` reason); dates enumerated over at most :data:`MAX_DAYS` days; ``to_char`` with the
date patterns only (``YYYY``, ``MM``, ``DD``, ``Q``, ``Month``, ``Mon``, ``Day``, ``Dy``, ``D``,
``ID``, ``IW``, ``IYYY``, ``WW``, ``DDD``, ``YY``, ``FM``, quoted text, separators); ``EXTRACT``
of the whole-number fields (not ``epoch``, ``second``, sub-seconds, ``julian``, time zones).

Time zones: every computation is in the session's time zone ``zone`` (what PostgreSQL uses for a
``timestamptz``, and for a ``date`` turned into one): a timestamptz column's declared bounds (UTC
instants) are read as that zone's wall-clock times, ``date_trunc`` of a date or timestamptz is
printed with that zone's offset (``2025-01-01 00:00:00-05``). This module is the one place that
generates such keys: :func:`derived_domain`.

Soundness is :mod:`dpsql.sql.key_domain`'s: the domain is applied upstream as a filter
(``CAST(key AS text) IN (...)``), so a key text computed wrongly could only leave rows out,
never release a private value or raise the sensitivity; the tests compare with PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Literal
from zoneinfo import ZoneInfo

from sqlglot import exp

from dpsql.policy.tables import Column, TypeFamily
from dpsql.sql.constants import as_point
from dpsql.sql.date_domain import MAX_KEYS, trunc, unit_end, where_bounds
from dpsql.sql.key_domain import KeyFilter
from dpsql.sql.key_literals import literal_text
from dpsql.upstream.zone import key_texts, tzinfo_of

MAX_DAYS = 40_000  # about 110 years of days enumerated for EXTRACT / to_char

Kind = Literal["int", "text", "bool", "date", "ts", "tstz", "num"]
_FAMILY: dict[str, TypeFamily] = {"int": "integer", "text": "text", "bool": "boolean",
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
    """A bounded numeric column's range (``floating``: it may be a double precision column)."""

    lo: Fraction
    hi: Fraction
    floating: bool
    name: str


_Got = Domain | Span | NumRange | None


@dataclass(frozen=True)
class Derived:
    """A key's public domain: the texts PostgreSQL prints for it, NULL, the type family."""

    keys: tuple[str, ...]
    null: bool
    family: TypeFamily


def derived_domain(
    expr: exp.Expr,
    column: Callable[[exp.Column], Column | None],
    where: exp.Expr | None,
    zone: str = "UTC",
) -> Derived | None:
    """The public domain of GROUP BY key ``expr`` (qualified) from the policy's declarations
    (``column``: a private column's declaration, None for a public table's) and the statement's
    top-level range on a date column in ``where``, in time zone ``zone``; None when it has none.

    Raises:
        TooMany: the domain exists but is longer than :data:`MAX_KEYS` (its words say why).
    """
    while isinstance(expr, exp.Paren):
        expr = expr.this
    if isinstance(expr, exp.Column):
        return None  # a bare column keeps its declared keys or partition selection, as before
    d = _Deriver(column, where, zone)
    got = d.derive(expr)
    if isinstance(got, Span):
        got = d.days(got) if got.kind == "date" else None
    if not isinstance(got, Domain):
        return None
    texts: list[str] = []
    for v in got.values:
        if got.kind == "tstz":  # one text, or two for a time the clock turns back over
            assert isinstance(v, datetime)
            zoned = key_texts(v, zone)
            if zoned is None:  # a zone Python can't read: from the data, never a wrong key
                return None
            texts += zoned
        else:
            texts.append(d.text(got, v))
    if len(set(texts)) > MAX_KEYS:
        raise TooMany(f"they are {len(set(texts)):,}, above the limit of {MAX_KEYS:,}")
    return Derived(tuple(dict.fromkeys(texts)), got.null, _FAMILY[got.kind])


def date_trunc_domain(
    expr: exp.Expr, column: Callable[[exp.Column], Column], where: exp.Expr | None
) -> tuple[str, ...] | None:
    """The generated keys of ``date_trunc(unit, d)`` (qualified) in UTC, or None when unbounded
    or longer than :data:`MAX_KEYS` (:func:`derived_domain`, which the analysis calls with the
    session's zone)."""
    if not isinstance(expr, (exp.TimestampTrunc, exp.DateTrunc)):
        return None
    try:
        got = derived_domain(expr, column, where)
    except TooMany:
        return None
    return None if got is None else got.keys


COUNT_KEYS_MAX = 32
"""COUNT(DISTINCT x) of a bounded column is counted per key (``count_keys``) when its bounds allow
at most this many values: there one noisy count of distinct values (noise G·R/epsilon, ±150 on
the demo) can't tell 0 from 10 (``COUNT(DISTINCT quantity)`` answered 0, truth 10), while each
value's rows pass the per-key threshold. With more values (365 days, ages 0-100) a key needs
about G·R·ln(n)/epsilon rows to be seen, and the single count, capped at the number of values
(:func:`dpsql.sql.analyze_aggregates` ``_domain_size``), is usually closer."""


def bounded_keys(col: Column) -> tuple[str, ...] | None:
    """The values a bounded integer or date column may take by its declared bounds, as
    PostgreSQL prints them (``CAST(x AS text)``), when there are at most :data:`COUNT_KEYS_MAX`:
    the public candidates of ``COUNT(DISTINCT x)``'s per-key method (``count_keys``); None
    without bounds or with more."""
    if col.bounds is None or col.identifier or col.keys is not None or col.keys_from:
        return None
    if col.family == "integer":
        lo, hi = _ceil(col.lo), _floor(col.hi)
        if hi - lo + 1 > COUNT_KEYS_MAX:
            return None
        return tuple(str(v) for v in range(lo, hi + 1))
    if col.family == "date":
        first, last = col.bounds
        if not isinstance(first, date) or not isinstance(last, date):
            return None
        n = (last - first).days + 1
        if n > COUNT_KEYS_MAX:
            return None
        return tuple((first + timedelta(days=i)).isoformat() for i in range(max(n, 0)))
    return None


_INTS = {exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT}
_FLOATS = {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT}
_TEXTS = {exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR}
_FLOAT_TYPES = {"real", "float", "float4", "float8", "double", "double precision"}
_BOOLEAN_NODES = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ, exp.Is, exp.Like, exp.ILike,
                  exp.Between, exp.Not, exp.And, exp.Or, exp.NullSafeEQ, exp.NullSafeNEQ)  # fmt: skip

# EXTRACT fields with whole-number values (PostgreSQL prints them without a fraction)
_YEARLY = {"year", "isoyear", "decade", "century", "millennium"}
_CYCLIC = {"month": range(1, 13), "quarter": range(1, 5), "day": range(1, 32),
           "dow": range(0, 7), "isodow": range(1, 8), "doy": range(1, 367),
           "week": range(1, 54)}  # fmt: skip


class _Deriver:
    def __init__(
        self,
        column: Callable[[exp.Column], Column | None],
        where: exp.Expr | None,
        zone: str,
    ) -> None:
        self.column = column
        self.where = where
        self.zone = tzinfo_of(zone)  # None: a zone Python can't read

    # -- printing -------------------------------------------------------------------------
    def text(self, d: Domain, v: object) -> str:
        """``v`` as PostgreSQL prints a value of ``d``'s kind (DateStyle ISO, this zone)."""
        if d.kind == "bool":
            return "true" if v else "false"
        if d.kind == "date":
            assert isinstance(v, date)
            return v.isoformat()
        if d.kind == "ts":
            assert isinstance(v, datetime)
            return v.isoformat(sep=" ")
        if d.kind == "tstz":  # (derived_domain prints these: dpsql.upstream.zone.key_texts)
            assert isinstance(v, datetime)
            return v.isoformat(sep=" ") + _offset(v.replace(tzinfo=self.zone).utcoffset())
        if d.kind == "num":
            assert isinstance(v, Fraction)
            q = Decimal(v.numerator) / Decimal(v.denominator)
            return format(q.quantize(Decimal(1).scaleb(-d.scale)), "f")
        return str(v)

    # -- the expressions ------------------------------------------------------------------
    def derive(self, node: exp.Expr) -> _Got:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            if node.args.get("format"):
                return None
            return self._cast(self.derive(node.this), node.to)
        if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
            return self._trunc(node)
        if isinstance(node, exp.Extract):
            return self._extract(node)
        if isinstance(node, exp.TimeToStr):
            return self._to_char(node)
        if isinstance(node, (exp.Floor, exp.Ceil, exp.Round, exp.Trunc)):
            return self._rounding(node)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            return self._arith(node)
        if isinstance(node, (exp.Upper, exp.Lower)):
            return self._case_fold(node)
        if isinstance(node, exp.Coalesce):
            return self._coalesce(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, _BOOLEAN_NODES) or (
            isinstance(node, exp.In) and not node.args.get("query")
        ):
            # a comparison over the row is true or false (NULL only from a NULL column:
            # like a column's own NULLs, not a key)
            if any(True for _ in node.find_all(exp.Column)) and not any(
                True for _ in node.find_all(exp.Query)
            ):
                return Domain("bool", (False, True))
            return None
        return self._literal(node)

    def _literal(self, node: exp.Expr) -> Domain | None:
        got = literal_text(node)
        if got is None:
            return None
        kind, text = got
        if text is None:
            return Domain("text", (), null=True)
        if kind == "text":
            return Domain("text", (text,))
        if kind == "boolean":
            return Domain("bool", (text == "true",))
        value = Fraction(Decimal(text))
        if "." in text:
            return Domain("num", (value,), scale=len(text.split(".")[1]))
        return Domain("int", (int(value),))

    def _column(self, node: exp.Column) -> _Got:
        col = self.column(node)
        if col is None or col.identifier or col.keys_from is not None:
            return None
        family = col.family
        if col.keys is not None:
            texts = col.key_texts or ()
            if family == "text":
                return Domain("text", tuple(texts))
            if family == "boolean":
                return Domain("bool", tuple(t == "true" for t in texts))
            if family == "integer":
                try:
                    return Domain("int", tuple(int(t) for t in texts))
                except ValueError:
                    return None
            if family == "date":
                try:
                    return Domain("date", tuple(date.fromisoformat(t) for t in texts))
                except ValueError:
                    return None
            return None
        if family == "boolean":
            return Domain("bool", (False, True))
        if family in ("date", "timestamp"):  # the policy's bounds or the statement's range
            return self._span(node, col)
        if col.bounds is None:
            return None
        if family == "integer":
            lo, hi = _ceil(col.lo), _floor(col.hi)
            if hi - lo + 1 > MAX_KEYS:
                raise TooMany(
                    f"the bounds of {node.name} allow {hi - lo + 1:,} whole numbers, above the "
                    f"limit of {MAX_KEYS:,}"
                )
            return Domain("int", tuple(range(lo, hi + 1)))
        if family == "numeric":
            return NumRange(col.lo, col.hi, col.type in _FLOAT_TYPES, node.name)
        return None

    def _span(self, node: exp.Column, col: Column) -> Span | None:
        declared = col.bounds if col.bounds is not None else (None, None)
        lo, hi = as_point(declared[0]), as_point(declared[1])
        kind: Literal["date", "ts", "tstz"]
        if col.family == "date":
            kind = "date"
        elif col.type == "timestamp":
            kind = "ts"
        else:  # timestamptz bounds are instants (naive: UTC): as this zone's wall clock
            kind = "tstz"
            utc = ZoneInfo("UTC")
            if self.zone is None:
                return None
            if lo is not None:
                lo = lo.replace(tzinfo=utc).astimezone(self.zone).replace(tzinfo=None)
            if hi is not None:
                hi = hi.replace(tzinfo=utc).astimezone(self.zone).replace(tzinfo=None)
        wlo, whi = where_bounds(self.where, node.sql("postgres"))
        if wlo is not None and lo is None:
            lo = wlo[0]
        if whi is not None and hi is None:
            hi = whi[0]
        if lo is None or hi is None:
            return None
        if kind == "date":  # whole days (a constant compared with a date may be cast to one)
            lo, hi = _midnight(lo), _midnight(hi)
            if wlo is not None:
                w = _midnight(wlo[0]) + (timedelta(days=1) if wlo[1] else timedelta())
                lo = max(lo, w)
            if whi is not None:
                at_midnight = whi[0] == _midnight(whi[0])
                w = _midnight(whi[0]) - (
                    timedelta(days=1) if whi[1] and at_midnight else timedelta()
                )
                hi = min(hi, w)
        else:
            if wlo is not None:
                lo = max(lo, wlo[0])
            if whi is not None:
                hi = min(hi, whi[0] - (timedelta(microseconds=1) if whi[1] else timedelta()))
        return Span(kind, lo, hi, node.name)

    def days(self, s: Span) -> Domain:
        n = (s.hi - s.lo).days + 1
        if n > MAX_KEYS:
            raise TooMany(f"{s.name} spans {n:,} days, above the limit of {MAX_KEYS:,}")
        return Domain("date", tuple((s.lo + timedelta(days=i)).date() for i in range(max(n, 0))))

    def _cast(self, got: _Got, to: exp.DataType) -> _Got:
        t = to.this
        params = to.expressions
        if isinstance(got, Span):
            if params:
                return None
            if t == exp.DataType.Type.DATE:
                return Span("date", _midnight(got.lo), _midnight(got.hi), got.name)
            if t == exp.DataType.Type.TIMESTAMP:
                return Span("ts", got.lo, got.hi, got.name)
            if t == exp.DataType.Type.TIMESTAMPTZ:
                return Span("tstz", got.lo, got.hi, got.name)
            if t in _TEXTS and got.kind == "date":
                return self._cast(self.days(got), to)
            return None
        if not isinstance(got, Domain):
            return None
        if t in _TEXTS:
            texts = tuple(self.text(got, v) for v in got.values)
            if params:  # varchar(n) truncates
                n = _int_literal(params[0].this if isinstance(params[0], exp.DataTypeParam)
                                 else params[0])  # fmt: skip
                if n is None or n < 1 or t != exp.DataType.Type.VARCHAR:
                    return None
                texts = tuple(x[:n] for x in texts)
            return Domain("text", tuple(dict.fromkeys(texts)), got.null)
        if params:
            return None
        if t in _INTS or t == exp.DataType.Type.DECIMAL or t in _FLOATS:
            if got.kind == "bool" and t in _INTS:
                return Domain("int", tuple(int(bool(v)) for v in got.values), got.null)
            if got.kind == "int" and (t not in _FLOATS or _small(got.values)):
                return got
            return None
        if t == exp.DataType.Type.BOOLEAN and got.kind == "bool":
            return got
        if got.kind in ("date", "ts", "tstz"):
            vals = [_as_dt(v) for v in got.values]
            if t == exp.DataType.Type.DATE:
                return Domain("date", _sorted({v.date() for v in vals}), got.null)
            if t == exp.DataType.Type.TIMESTAMP:
                return Domain("ts", _sorted(set(vals)), got.null)
            if t == exp.DataType.Type.TIMESTAMPTZ:
                return Domain("tstz", _sorted(set(vals)), got.null)
        return None

    def _trunc(self, node: exp.TimestampTrunc | exp.DateTrunc) -> Domain | None:
        if node.args.get("zone"):
            return None
        unit_node = node.args.get("unit")
        unit = str(unit_node.this).lower() if isinstance(unit_node, (exp.Var, exp.Literal)) else ""
        if unit not in _UNITS:
            return None
        got = self.derive(node.this)
        if isinstance(got, Span):
            kind: Kind = "ts" if got.kind == "ts" else "tstz"
            keys: list[datetime] = []
            t = trunc(got.lo, unit)
            while t <= got.hi:
                if len(keys) >= MAX_KEYS:
                    raise TooMany(
                        f"the bounds of {got.name} hold more than {MAX_KEYS:,} {unit}s, the limit"
                    )
                keys.append(t)
                t = unit_end(t, unit)
            return Domain(kind, tuple(keys))
        if isinstance(got, Domain) and got.kind in ("date", "ts", "tstz"):
            out = _sorted({trunc(_as_dt(v), unit) for v in got.values})
            return Domain("ts" if got.kind == "ts" else "tstz", out, got.null)
        return None

    def _extract(self, node: exp.Extract) -> Domain | None:
        field = str(node.this.this if isinstance(node.this, exp.Var) else node.this.name).lower()
        got = self.derive(node.expression)
        if isinstance(got, Domain) and got.kind in ("date", "ts", "tstz"):
            if field not in _YEARLY and field not in _CYCLIC:
                return None
            return Domain("int", _sorted({_field(_as_dt(v), field) for v in got.values}), got.null)
        if not isinstance(got, Span):
            return None
        if field in _YEARLY:
            return Domain("int", tuple(range(_field(got.lo, field), _field(got.hi, field) + 1)))
        if field in ("hour", "minute"):
            if got.kind == "date":
                return None  # PostgreSQL: unit not supported for type date
            return self._clock(got, field)
        if field not in _CYCLIC:
            return None
        ndays = (got.hi.date() - got.lo.date()).days + 1
        if ndays > MAX_DAYS:  # every value of the cycle
            return Domain("int", tuple(_CYCLIC[field]))
        seen = {_field(datetime.combine(d, datetime.min.time()), field)
                for d in _dates(got.lo.date(), ndays)}  # fmt: skip
        return Domain("int", _sorted(seen))

    def _clock(self, s: Span, field: str) -> Domain:
        whole = range(24) if field == "hour" else range(60)
        step = timedelta(hours=1) if field == "hour" else timedelta(minutes=1)
        if s.hi - s.lo >= timedelta(days=1) or (field == "minute" and s.hi - s.lo >= step * 60):
            return Domain("int", tuple(whole))
        seen: set[int] = set()
        t = (
            s.lo.replace(minute=0, second=0, microsecond=0)
            if field == "hour"
            else s.lo.replace(second=0, microsecond=0)
        )
        while t <= s.hi:
            seen.add(t.hour if field == "hour" else t.minute)
            t += step
        return Domain("int", _sorted(seen))

    def _to_char(self, node: exp.TimeToStr) -> Domain | None:
        fmt = _pg_format(node)
        if fmt is None:
            return None
        pattern = _to_char_pattern(fmt)
        if pattern is None:
            return None
        got = self.derive(node.this)
        if isinstance(got, Span):
            ndays = (got.hi.date() - got.lo.date()).days + 1
            if ndays > MAX_DAYS:
                raise TooMany(f"{got.name} spans {ndays:,} days, above the {MAX_DAYS:,} that "
                              "to_char's keys are computed over")  # fmt: skip
            days: Iterable[date] = _dates(got.lo.date(), ndays)
            null = False
        elif isinstance(got, Domain) and got.kind in ("date", "ts", "tstz"):
            days = (_as_dt(v).date() for v in got.values)
            null = got.null
        else:
            return None
        out: dict[str, None] = {}
        for d in days:
            out[_render(pattern, d)] = None
            if len(out) > MAX_KEYS:
                raise TooMany(f"they are more than {MAX_KEYS:,}, the limit")
        return Domain("text", tuple(out), null)

    def _rounding(self, node: exp.Floor | exp.Ceil | exp.Round | exp.Trunc) -> Domain | None:
        dec = node.args.get("decimals")
        n = 0 if dec is None else _int_literal(dec)
        if n is None or not -15 <= n <= 15 or isinstance(node, (exp.Floor, exp.Ceil)) and dec:
            return None
        got = self.derive(node.this)
        step = Fraction(10) ** -n
        if isinstance(got, Domain) and got.kind == "int":
            if n >= 0 and dec is None:
                return got
            vals = {_round_to(Fraction(int(v)), step, node) for v in got.values}  # type: ignore[call-overload]
            return Domain("num" if n > 0 else "int", _sorted(_as_int(vals, n)), got.null,
                          scale=max(n, 0))  # fmt: skip
        if not isinstance(got, NumRange):
            return None
        lo, hi = _round_to(got.lo, step, node, low=True), _round_to(got.hi, step, node)
        if got.floating and lo < 0 < hi + step and not isinstance(node, exp.Floor):
            return None  # double precision prints -0 for a zero rounded from below
        count = int((hi - lo) / step) + 1
        if count > MAX_KEYS:
            raise TooMany(
                f"the bounds of {got.name} give {count:,} of them, above the limit of {MAX_KEYS:,}"
            )
        vals = {lo + i * step for i in range(max(count, 0))}
        return Domain("num" if n > 0 else "int", _sorted(_as_int(vals, n)), scale=max(n, 0))

    def _arith(self, node: exp.Add | exp.Sub | exp.Mul) -> Domain | None:
        """A whole-number key plus, minus or times a whole-number literal (Metabase's day of
        week: ``CAST(EXTRACT(dow FROM d) AS integer) + 1``)."""
        c = _int_literal(node.expression)
        on_left = c is not None
        if c is None:
            c = _int_literal(node.this)
        got = self.derive(node.this if on_left else node.expression) if c is not None else None
        if c is None or not isinstance(got, Domain) or got.kind != "int":
            return None
        vals = [int(v) for v in got.values]  # type: ignore[call-overload]
        if isinstance(node, exp.Add):
            out = {v + c for v in vals}
        elif isinstance(node, exp.Mul):
            out = {v * c for v in vals}
        else:
            out = {v - c for v in vals} if on_left else {c - v for v in vals}
        return Domain("int", _sorted(out), got.null)

    def _case_fold(self, node: exp.Upper | exp.Lower) -> Domain | None:
        got = self.derive(node.this)
        if not isinstance(got, Domain) or got.kind != "text":
            return None
        texts = [str(v) for v in got.values]
        if not all(t.isascii() for t in texts):
            return None  # beyond ASCII, case mapping depends on the database's locale
        f = str.upper if isinstance(node, exp.Upper) else str.lower
        return Domain("text", tuple(dict.fromkeys(f(t) for t in texts)), got.null)

    def _coalesce(self, node: exp.Coalesce) -> Domain | None:
        parts = [node.this, *node.expressions]
        out: Domain | None = None
        for i, p in enumerate(parts):
            got = self.derive(p)
            if not isinstance(got, Domain):
                return None
            if i < len(parts) - 1:  # NULL here goes on to the next argument
                got = Domain(got.kind, got.values, False, got.scale)
            out = got if out is None else _union(out, got)
            if out is None:
                return None
        return out

    def _case(self, node: exp.Case) -> Domain | None:
        """The union of the results' domains; a searched CASE's keyed result only with the
        values its own condition admits (``WHEN category IN ('books', 'travel') THEN category``:
        those two), as a WHERE clause narrows a key (:class:`KeyFilter`)."""
        default = node.args.get("default")
        out: Domain | None = None if default is not None else Domain("text", (), null=True)
        branches = [(i.this, i.args.get("true")) for i in node.args.get("ifs") or []]
        for cond, r in [*branches, *([(None, default)] if default is not None else [])]:
            got = self.derive(r) if r is not None else None
            if not isinstance(got, Domain):
                return None
            if cond is not None and node.this is None and literal_text(r) is None and got.values:
                texts = [self.text(got, v) for v in got.values]
                kept = set(KeyFilter(r, cond, _FAMILY[got.kind]).narrow(texts))
                vals = tuple(v for v, t in zip(got.values, texts, strict=True) if t in kept)
                got = Domain(got.kind, vals, got.null, got.scale)
            out = got if out is None else _union(out, got)
            if out is None:
                return None
        return out


_UNITS = {"second", "minute", "hour", "day", "week", "month", "quarter", "year", "decade",
          "century", "millennium"}  # fmt: skip


def _union(a: Domain, b: Domain) -> Domain | None:
    """Two results' domains together (a text NULL-only domain takes the other's kind)."""
    if not a.values and a.kind == "text":
        return Domain(b.kind, b.values, a.null or b.null, b.scale)
    if not b.values and b.kind == "text":
        return Domain(a.kind, a.values, a.null or b.null, a.scale)
    if a.kind != b.kind or a.scale != b.scale:
        return None  # PostgreSQL's common type would print some of them differently
    vals = tuple(dict.fromkeys([*a.values, *b.values]))
    return Domain(a.kind, vals, a.null or b.null, a.scale)


def _offset(off: timedelta | None) -> str:
    """A UTC offset as PostgreSQL prints it: +00, -05, +05:30, +00:19:32."""
    secs = int((off or timedelta()).total_seconds())
    sign = "-" if secs < 0 else "+"
    h, rest = divmod(abs(secs), 3600)
    m, s = divmod(rest, 60)
    return f"{sign}{h:02d}" + (f":{m:02d}" if m or s else "") + (f":{s:02d}" if s else "")


def _midnight(t: datetime) -> datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


def _as_dt(v: object) -> datetime:
    if isinstance(v, datetime):
        return v
    assert isinstance(v, date)
    return datetime(v.year, v.month, v.day)


def _dates(first: date, n: int) -> Iterable[date]:
    return (first + timedelta(days=i) for i in range(max(n, 0)))


def _sorted(values: Iterable[object]) -> tuple[object, ...]:
    return tuple(sorted(values))  # type: ignore[type-var]


def _floor(x: Fraction) -> int:
    return x.numerator // x.denominator


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _small(values: tuple[object, ...]) -> bool:
    """Whole numbers double precision prints without an exponent."""
    return all(abs(int(v)) < 10**15 for v in values)  # type: ignore[call-overload]


def _int_literal(node: exp.Expr | None) -> int | None:
    neg = isinstance(node, exp.Neg)
    lit = node.this if isinstance(node, exp.Neg) else node
    if isinstance(lit, exp.Paren):
        return _int_literal(lit.this) if not neg else None
    if isinstance(lit, exp.Literal) and not lit.is_string and str(lit.this).isdigit():
        return -int(lit.this) if neg else int(lit.this)
    return None


def _round_to(x: Fraction, step: Fraction, node: exp.Expr, low: bool = False) -> Fraction:
    """``x`` rounded to a multiple of ``step`` as ``node`` (FLOOR, CEIL, ROUND, TRUNC) does;
    ROUND's halves: away from zero (numeric) or to even (double precision): at a bound that is
    exactly a half, the wider of the two."""
    q = x / step
    if isinstance(node, exp.Floor):
        r = _floor(q)
    elif isinstance(node, exp.Ceil):
        r = _ceil(q)
    elif isinstance(node, exp.Trunc):
        r = _floor(q) if q >= 0 else _ceil(q)
    else:
        down, up = _floor(q), _ceil(q)
        if q - down < Fraction(1, 2):
            r = down
        elif q - down > Fraction(1, 2):
            r = up
        else:
            r = down if low else up
    return r * step


def _as_int(values: Iterable[Fraction], n: int) -> set[object]:
    return {int(v) for v in values} if n <= 0 else set(values)


def _field(t: datetime, field: str) -> int:
    """PostgreSQL's EXTRACT(field FROM t) for the whole-number fields (years >= 1)."""
    iso = t.isocalendar()
    return {
        "year": lambda: t.year,
        "isoyear": lambda: iso.year,
        "decade": lambda: t.year // 10,
        "century": lambda: (t.year + 99) // 100,
        "millennium": lambda: (t.year + 999) // 1000,
        "month": lambda: t.month,
        "quarter": lambda: (t.month - 1) // 3 + 1,
        "day": lambda: t.day,
        "dow": lambda: iso.weekday % 7,
        "isodow": lambda: iso.weekday,
        "doy": lambda: t.timetuple().tm_yday,
        "week": lambda: iso.week,
    }[field]()


def _pg_format(node: exp.TimeToStr) -> str | None:
    """The format string of ``to_char`` as dpsql sends it upstream (sqlglot's PostgreSQL
    rendering of the parsed format)."""
    sql = node.sql("postgres")
    m = re.fullmatch(r"TO_CHAR\(.*, '((?:[^']|'')*)'\)", sql, re.S)
    return m.group(1).replace("''", "'") if m else None


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]  # fmt: skip
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# to_char's date patterns, longest first (PostgreSQL matches the longest keyword)
_PATTERNS = ["MONTH", "Month", "month", "IYYY", "YYYY", "yyyy", "iyyy", "DAY", "Day", "day",
             "DDD", "ddd", "MON", "Mon", "mon", "YYY", "yyy", "DY", "Dy", "dy", "YY", "yy", "MM",
             "mm", "DD", "dd", "IW", "iw", "WW", "ww", "ID", "id", "D", "d", "Q", "q"]  # fmt: skip
_SEPARATORS = set(" -/.,:_")


def _to_char_pattern(fmt: str) -> list[tuple[str, bool]] | None:
    """``fmt`` as (pattern or literal text, fill mode) parts; None for a pattern outside the
    date patterns above (a time of day, a suffix such as TH, an unknown letter)."""
    out: list[tuple[str, bool]] = []
    i = 0
    fill = False
    while i < len(fmt):
        if fmt.startswith("FM", i) or fmt.startswith("fm", i):
            fill = True
            i += 2
            continue
        for p in _PATTERNS:
            if fmt.startswith(p, i):
                if fmt.startswith(("TH", "th"), i + len(p)):
                    return None
                out.append(("%" + p, fill))
                i += len(p)
                fill = False
                break
        else:
            ch = fmt[i]
            if ch == '"':
                end = fmt.find('"', i + 1)
                if end < 0 or "\\" in fmt[i:end]:
                    return None
                out.append((fmt[i + 1 : end], False))
                i = end + 1
            elif ch in _SEPARATORS:
                out.append((ch, False))
                i += 1
            else:
                return None
            fill = False
    return out


def _name(text: str, pattern: str, fill: bool) -> str:
    if pattern.isupper():
        text = text.upper()
    elif pattern.islower():
        text = text.lower()
    return text if fill else text.ljust(9)


def _render(parts: list[tuple[str, bool]], d: date) -> str:
    """PostgreSQL's to_char of date ``d`` (at midnight) for :func:`_to_char_pattern`'s parts."""
    iso = d.isocalendar()
    doy = d.timetuple().tm_yday
    out: list[str] = []
    for part, fill in parts:
        if not part.startswith("%"):
            out.append(part)
            continue
        p = part[1:]
        up = p.upper()

        def num(v: int, width: int, fill: bool = fill) -> str:
            return str(v) if fill else str(v).zfill(width)

        if up == "YYYY":
            out.append(num(d.year, 4))
        elif up == "IYYY":
            out.append(num(iso.year, 4))
        elif up == "YYY":
            out.append(num(d.year % 1000, 3))
        elif up == "YY":
            out.append(num(d.year % 100, 2))
        elif up == "MONTH":
            out.append(_name(_MONTHS[d.month - 1], p, fill))
        elif up == "MON":
            out.append(_name(_MONTHS[d.month - 1][:3], p, True))
        elif up == "MM":
            out.append(num(d.month, 2))
        elif up == "DAY":
            out.append(_name(_DAYS[d.weekday()], p, fill))
        elif up == "DY":
            out.append(_name(_DAYS[d.weekday()][:3], p, True))
        elif up == "DDD":
            out.append(num(doy, 3))
        elif up == "DD":
            out.append(num(d.day, 2))
        elif up == "D":
            out.append(str(iso.weekday % 7 + 1))
        elif up == "ID":
            out.append(str(iso.weekday))
        elif up == "IW":
            out.append(num(iso.week, 2))
        elif up == "WW":
            out.append(num((doy - 1) // 7 + 1, 2))
        elif up == "Q":
            out.append(str((d.month - 1) // 3 + 1))
    return "".join(out)
