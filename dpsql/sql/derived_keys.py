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

A bare column is left as before (its declared keys, or partition selection), but for a date
column with declared bounds: its days, as ``CAST(ts AS date)``'s (Metabase's day); and a bounded
integer's whole numbers, at most :data:`~dpsql.sql.numeric_keys.BARE_INTEGERS_MAX`. A NULL of the
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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from sqlglot import exp

from dpsql.policy.tables import Column, TypeFamily
from dpsql.sql.date_domain import MAX_KEYS
from dpsql.sql.key_domain import KeyFilter
from dpsql.sql.key_literals import literal_text
from dpsql.sql.key_values import (
    FAMILY,
    Domain,
    Got,
    NumRange,
    Span,
    TooMany,
    as_datetime,
    as_ints,
    ceil_int,
    floor_int,
    int_literal,
    midnight,
    round_to,
    small_ints,
    sorted_values,
    union,
)
from dpsql.sql.numeric_keys import (
    bare_integers,
    bounded_range,
    domain_arith,
    num_type,
    number_literal,
    range_arith,
)
from dpsql.sql.quotient_keys import quotients
from dpsql.sql.time_keys import TimeKeys
from dpsql.sql.time_shift import is_shift
from dpsql.sql.width_bucket import bucket_args, bucket_domain
from dpsql.upstream.zone import key_texts, offset_text, tzinfo_of

__all__ = ["COUNT_KEYS_MAX", "Derived", "TooMany", "bounded_keys", "date_trunc_domain",
           "derived_domain"]  # fmt: skip


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
    if isinstance(expr, exp.Column) and not _from_bounds(column(expr), expr.name):
        return None  # a bare column keeps its declared keys or partition selection, as before
    d = _Deriver(column, where, zone)
    got = d.shifted(expr) if any(is_shift(n, column) for n in expr.walk()) else d.derive(expr)
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
    return Derived(tuple(dict.fromkeys(texts)), got.null, FAMILY[got.kind])


def _from_bounds(col: Column | None, name: str) -> bool:  # (Metabase's CAST(d AS date) reads d)
    if col is None or col.keys is not None or col.keys_from or col.identifier:
        return False
    return (col.family == "date" and col.bounds is not None) or bare_integers(col, name)


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
        lo, hi = ceil_int(col.lo), floor_int(col.hi)
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
_BOOLEAN_NODES = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ, exp.Is, exp.Like, exp.ILike, exp.Escape,
                  exp.Between, exp.Not, exp.And, exp.Or, exp.NullSafeEQ, exp.NullSafeNEQ)  # fmt: skip

# the expressions _Deriver.derive reads with a method of its own (the first kind that matches)
_READERS: tuple[tuple[type[exp.Expr] | tuple[type[exp.Expr], ...], str], ...] = (
    ((exp.TimestampTrunc, exp.DateTrunc), "_trunc"), (exp.Extract, "_extract"),
    (exp.TimeToStr, "_to_char"), ((exp.Floor, exp.Ceil, exp.Round, exp.Trunc), "_rounding"),
    (exp.WidthBucket, "_bucket"), ((exp.Add, exp.Sub, exp.Mul, exp.Div), "_arith"),
    ((exp.Upper, exp.Lower), "_case_fold"), (exp.Coalesce, "_coalesce"), (exp.Case, "_case"),
)  # fmt: skip


class _Deriver(TimeKeys):
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
            return v.isoformat(sep=" ") + offset_text(v.replace(tzinfo=self.zone).utcoffset())
        if d.kind == "num":
            assert isinstance(v, Fraction)
            q = Decimal(v.numerator) / Decimal(v.denominator)
            return format(q.quantize(Decimal(1).scaleb(-d.scale)), "f")
        return str(v)

    # -- the expressions ------------------------------------------------------------------
    def derive(self, node: exp.Expr) -> Got:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Column):
            return self.point or self._column(node)
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            if node.args.get("format"):
                return None
            return self._cast(self.derive(node.this), node.to)
        for kinds, name in _READERS:
            if isinstance(node, kinds):
                read: Callable[[exp.Expr], Got] = getattr(self, name)
                return read(node)
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

    def _bucket(self, node: exp.WidthBucket) -> Got:  # every bucket the bounds allow
        b = bucket_args(node, self.column)
        got = self.derive(node.this) if b is not None else None
        if b is None or not isinstance(got, (Domain, NumRange)):
            return None
        return bucket_domain(b, got)

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

    def _column(self, node: exp.Column) -> Got:
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
            lo, hi = ceil_int(col.lo), floor_int(col.hi)
            if hi - lo + 1 > MAX_KEYS:
                raise TooMany(
                    f"the bounds of {node.name} allow {hi - lo + 1:,} whole numbers, above the "
                    f"limit of {MAX_KEYS:,}"
                )
            return Domain("int", tuple(range(lo, hi + 1)))
        if family == "numeric":
            return NumRange(col.lo, col.hi, col.type in _FLOAT_TYPES, node.name)
        return None

    def _cast(self, got: Got, to: exp.DataType) -> Got:
        t = to.this
        params = to.expressions
        if isinstance(got, Span):
            if params:
                return None
            if t == exp.DataType.Type.DATE:
                return Span("date", midnight(got.lo), midnight(got.hi), got.name)
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
                n = int_literal(params[0].this if isinstance(params[0], exp.DataTypeParam)
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
            if got.kind == "int" and (t not in _FLOATS or small_ints(got.values)):
                return got
            return None
        if t == exp.DataType.Type.BOOLEAN and got.kind == "bool":
            return got
        if got.kind in ("date", "ts", "tstz"):
            vals = [as_datetime(v) for v in got.values]
            if t == exp.DataType.Type.DATE:
                return Domain("date", sorted_values({v.date() for v in vals}), got.null)
            if t == exp.DataType.Type.TIMESTAMP:
                return Domain("ts", sorted_values(set(vals)), got.null)
            if t == exp.DataType.Type.TIMESTAMPTZ:
                return Domain("tstz", sorted_values(set(vals)), got.null)
        return None

    def _rounding(self, node: exp.Floor | exp.Ceil | exp.Round | exp.Trunc) -> Domain | None:
        dec = node.args.get("decimals")
        n = 0 if dec is None else int_literal(dec)
        if n is None or not -15 <= n <= 15 or isinstance(node, (exp.Floor, exp.Ceil)) and dec:
            return None
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Div) and isinstance(node, (exp.Floor, exp.Ceil)):
            lit = number_literal(inner.expression)
            if lit is not None and num_type(inner, self.column) == "numeric":
                got_q = quotients(node, self.derive(inner.this), lit[0], lit[1])
                if got_q is not None:
                    return got_q
        got = self.derive(node.this)
        step = Fraction(10) ** -n
        if isinstance(got, Domain) and got.kind == "int":
            if n >= 0 and dec is None:
                return got
            vals = {round_to(Fraction(int(v)), step, node) for v in got.values}  # type: ignore[call-overload]
            return Domain("num" if n > 0 else "int", sorted_values(as_ints(vals, n)), got.null,
                          scale=max(n, 0))  # fmt: skip
        if not isinstance(got, NumRange):
            return None
        lo, hi = round_to(got.lo, step, node, low=True), round_to(got.hi, step, node)
        if got.floating and lo < 0 < hi + step and not isinstance(node, exp.Floor):
            return None  # double precision prints -0 for a zero rounded from below
        count = int((hi - lo) / step) + 1
        if count > MAX_KEYS:
            raise TooMany(
                f"the bounds of {got.name} give {count:,} of them, above the limit of {MAX_KEYS:,}"
            )
        vals = {lo + i * step for i in range(max(count, 0))}
        return Domain("num" if n > 0 else "int", sorted_values(as_ints(vals, n)), scale=max(n, 0))

    def _arith(self, node: exp.Add | exp.Sub | exp.Mul | exp.Div) -> Got:
        """A whole-number key plus, minus or times a whole-number literal (Metabase's day of
        week: ``CAST(EXTRACT(dow FROM d) AS integer) + 1``); numeric bins of a bounded column
        (:mod:`dpsql.sql.numeric_keys`)."""
        if not isinstance(node, (exp.Mul, exp.Div)) and is_shift(node, self.column):
            return self._shift(node)
        got_numeric = self._numeric(node)
        if got_numeric is not None or isinstance(node, exp.Div):
            return got_numeric
        c = int_literal(node.expression)
        on_left = c is not None
        if c is None:
            c = int_literal(node.this)
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
        return Domain("int", sorted_values(out), got.null)

    def _numeric(self, node: exp.Add | exp.Sub | exp.Mul | exp.Div) -> Domain | NumRange | None:
        """``node`` of a ``numeric`` result: a bounded range, or a whole-number key's values."""
        lit = number_literal(node.expression)
        on_left = lit is not None
        if lit is None and not isinstance(node, exp.Div):
            lit = number_literal(node.this)
        if lit is None or num_type(node, self.column) != "numeric":
            return None  # an integer result: the whole-number keys above
        other = node.this if on_left else node.expression
        got = bounded_range(other, self.column) or self.derive(other)
        if isinstance(got, NumRange) and not got.floating:
            return range_arith(type(node), got, lit[0], on_left)
        if isinstance(got, Domain) and (on_left or not isinstance(node, exp.Sub)):
            return domain_arith(type(node), got, lit[0], lit[1])
        return None

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
            out = got if out is None else union(out, got)
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
                kept = set(KeyFilter(r, cond, FAMILY[got.kind]).narrow(texts))
                vals = tuple(v for v, t in zip(got.values, texts, strict=True) if t in kept)
                got = Domain(got.kind, vals, got.null, got.scale)
            out = got if out is None else union(out, got)
            if out is None:
                return None
        return out
