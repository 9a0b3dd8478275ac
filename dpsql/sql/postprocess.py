"""Statistics from noisy measures, their intervals, and the post-processing query.

Everything here works on noisy values only (post-processing keeps the guarantee):

* COUNT: rounded, never negative. SUM: never outside the sign of its bounds.
* AVG = mid + S/N from the noisy centered sum S and noisy count N, clamped to [lo, hi]
  (the "normalized sum": the centered sum has half the sensitivity of a plain sum).
* VAR_POP = S2/N - (S/N)², clamped to [0, ((hi-lo)/2)²]; VAR_SAMP = VAR_POP·N/(N-1); STDDEV = sqrt.

Intervals: each measure's noise interval at level 1 - alpha/k (Bonferroni over the k measures a
statistic uses), then the statistic's range over that box: conservative, never optimistic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

from sqlglot import exp

from dpsql.sql.analysis import Analysis, Statistic
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.order_ties import order_ties
from dpsql.sql.pg_types import integer_bits

Interval = tuple[float, float]


def _avg(mid: float, lo: float, hi: float, s: float, n: float) -> float:
    return min(hi, max(lo, mid + s / n))


def _var(s2: float, s: float, n: float, half: float, sample: bool) -> float | None:
    if sample and n <= 1:
        return None
    m1 = s / n
    v = min(half * half, max(0.0, s2 / n - m1 * m1))
    if sample:
        v = v * n / (n - 1)
    return v


def _to_resolution(v: float, span: float) -> float:
    """A quantile of a numeric column to the decimal digit of a 10,240th of its declared range
    (370.85, not the bucket midpoint 370.849609375): its buckets are 1,024 over the range (or
    over a narrower chosen clamp), so no digit kept is finer than a tenth of a bucket."""
    if not (math.isfinite(v) and span > 0):
        return v
    digits = -math.floor(math.log10(span / 10240))
    return round(v, digits) if digits > 0 else float(round(v, digits))


def derive(
    stat: Statistic, values: Sequence[float], widths: Sequence[float]
) -> tuple[Any, Interval | None]:
    """One statistic's value and interval in one group from its measures' noisy values."""
    f = stat.func
    if f in ("quantile", "mode"):
        # Selection mechanisms: the guarantee is on rank (quantile) or count (mode), not a value
        # interval (see dpsql.sql.analyze_quantiles); None, and a notice says so.
        v = values[0]
        if f == "quantile" and stat.pg_type in ("int8", "date") and v is not None:
            v = round(v)
        elif f == "quantile" and stat.pg_type in ("numeric", "float8") and v is not None:
            v = _to_resolution(v, float(stat.hi - stat.lo))
        return v, None
    if f in ("count", "count_distinct"):
        # the truth t >= 0: if |v - t| <= w, t lies in [max(0, v - w), max(0, v) + w] (for v < 0:
        # t <= v + w < w). Clipping the upper end at 0 instead ([0, 0] for v < -w) claimed a
        # certainty the noise does not give
        v, w = values[0], widths[0]
        return max(0, round(v)), (max(0.0, v - w), max(0.0, v) + w)
    lo, hi = float(stat.lo), float(stat.hi)  # (a count needs neither: per row, 2 conversions)
    if f == "sum":
        v, w = values[0], widths[0]
        a, b = v - w, v + w
        if lo >= 0:  # the truth is >= 0: as a count's
            v, a, b = max(0.0, v), max(0.0, a), max(0.0, v) + w
        if hi <= 0:
            v, a, b = min(0.0, v), min(0.0, v) - w, min(0.0, b)
        return (round(v) if stat.pg_type == "int8" else v), (a, b)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    if f == "avg":
        s, n = values
        ws, wn = widths
        if n < 1:
            return None, None
        corners = [
            _avg(mid, lo, hi, s_, n_)
            for s_ in (s - ws, s + ws)
            for n_ in (max(1.0, n - wn), n + wn)
        ]
        return _avg(mid, lo, hi, s, n), (min(corners), max(corners))
    s2, s, n = values
    w2, ws, wn = widths
    sample = f in ("var_samp", "stddev_samp")
    if n < 1:
        return None, None
    var = _var(s2, s, n, half, sample)
    box = _var_box(s2, s, n, w2, ws, wn, half, sample)
    if f.startswith("stddev"):
        return (None if var is None else math.sqrt(var)), (
            (math.sqrt(box[0]), math.sqrt(box[1])) if box else None
        )
    return var, box


def _var_box(
    s2: float, s: float, n: float, w2: float, ws: float, wn: float, half: float, sample: bool
) -> Interval | None:
    n_lo = max(1.0 + (1.0 if sample else 0.0), n - wn)
    n_hi = max(n_lo, n + wn)
    m1 = [x / y for x in (s - ws, s + ws) for y in (n_lo, n_hi)]
    m1_sq_max = max(m * m for m in m1)
    m1_sq_min = 0.0 if min(m1) <= 0 <= max(m1) else min(m * m for m in m1)
    m2 = [x / y for x in (s2 - w2, s2 + w2) for y in (n_lo, n_hi)]
    lo_v = max(0.0, min(m2) - m1_sq_max)
    hi_v = min(half * half, max(0.0, max(m2) - m1_sq_min))
    if sample:
        hi_v = hi_v * n_lo / (n_lo - 1)
        lo_v = lo_v * n_hi / (n_hi - 1) if n_hi > 1 else lo_v
    return lo_v, max(lo_v, hi_v)


def stat_outputs(a: Analysis) -> list[tuple[int, int]]:
    """(output position, statistic index) of select items that are exactly one statistic."""
    out = []
    for pos, item in enumerate(a.outer.expressions):
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(body, exp.Column) and body.name.startswith("_dp_s"):
            out.append((pos, int(body.name[5:])))
    return out


def interval_base(names: Sequence[str], pos: int) -> str:
    """The name an output column's ``_low`` / ``_high`` columns start with: the column's own
    name; for the k-th output of a name another output has too (``AVG(bmi), AVG(systolic)``,
    both ``avg`` as PostgreSQL names them), the name and k from the second on (``avg``,
    ``avg_2``), as BI tools tell such columns apart (Metabase's ``avg_2``; was the position:
    ``avg_3_low`` for the 3rd column, newcomer22 #31); when that is an output's name already
    (``COUNT(*), 1 AS count_low``), the name and its 1-based position, so no two result columns
    share a name because of dpsql (:func:`repeated_names_notice` says which is which).

    >>> interval_base(["region", "count", "count"], 2), interval_base(["region", "n"], 1)
    ('count_2', 'n')
    >>> interval_base(["region", "count", "count"], 1), interval_base(["count", "count_low"], 0)
    ('count', 'count_1')
    """
    name = names[pos]
    taken = set(names)
    k = list(names[:pos]).count(name) + 1
    base = name if k == 1 else f"{name}_{k}"
    if not {f"{base}_low", f"{base}_high"} & taken and (k == 1 or base not in taken):
        return base
    base, n = f"{name}_{pos + 1}", 1
    while {f"{base}_low", f"{base}_high"} & taken:  # ``count_1_low`` was an output's name too
        n += 1
        base = f"{name}_{pos + 1}_{n}"
    return base


def repeated_names_notice(
    names: Sequence[str], bases: Sequence[tuple[int, str]], written: Callable[[], Sequence[str]]
) -> str | None:
    """The notice naming each interval's column where outputs share a name (``bases``: each
    output position with intervals and its :func:`interval_base`; ``written()``: every output's
    SQL, written only for the notice), None where no name repeats."""
    repeated = [(p, b) for p, b in bases if names.count(names[p]) > 1 or b != names[p]]
    if not repeated:
        return None
    texts = written()
    each = "; ".join(
        f"{b}_low/{b}_high: column {p + 1} ({names[p]}: {texts[p]})" for p, b in repeated
    )
    return f"interval columns of outputs that share a name: {each}"


def outer_query(
    a: Analysis,
    key_types: Sequence[str],
    *,
    with_rid: bool = False,
    interval_columns: Sequence[tuple[int | str, str]] = (),
) -> tuple[exp.Select, list[str]]:
    """The analysis's post-processing SELECT with its FROM replaced by unnest() of arrays.

    Arrays, in order: group keys (text), statistics, then (optionally) a row id and the low/high
    bounds of the statistics in ``interval_columns`` ((statistic index, output name) pairs), which
    are appended as ``<name>_low`` / ``<name>_high`` columns. Returns the query (placeholders
    ``%(_dpsql_arrN)s``) and the array element types in order.
    """
    names: list[str] = []
    arrays: list[exp.Expr] = []
    casts: list[exp.Expr] = []
    types: list[str] = []

    def array(t: str) -> exp.Expr:
        ph = exp.Placeholder(this=f"_dpsql_arr{len(arrays)}")
        return exp.cast(ph, _type(t + "[]"), copy=False)

    for i, t in enumerate(released_key_types(a, key_types)):
        names.append(f"g{i}")
        arrays.append(array("text"))
        casts.append(
            exp.alias_(
                exp.cast(exp.column(f"g{i}", "u"), _type(_released_type(t)), copy=False),
                f"_dp_g{i}",
                copy=False,
            )
        )
        types.append("text")
    for i, s in enumerate(a.statistics):
        names.append(f"s{i}")
        arr = "text" if s.func == "mode" else "int8" if s.pg_type in ("int8", "date") else "float8"
        arrays.append(array(arr))
        cast = from_epoch(exp.column(f"s{i}", "u"), s.column_type)
        casts.append(exp.alias_(cast, f"_dp_s{i}", copy=False))
        types.append(arr)
    extra: list[exp.Expr] = []
    # numbered by their place in interval_columns, not by statistic: one statistic can be
    # listed twice (``SUM(amount) AS s, SUM(amount) AS s2`` share a statistic)
    for j, (si, name) in enumerate(interval_columns):
        end_type = "int8" if interval_is_integer(a, si) else "float8"
        when = interval_time_type(a, si)  # a date's (timestamp's) ends: days (seconds) since 1970
        for end in ("low", "high"):
            names.append(f"{end}{j}")
            arrays.append(array(end_type))
            col = exp.column(f"{end}{j}", "u")
            value = from_epoch(col, when) if when else col
            casts.append(exp.alias_(value, f"_dp_{end}{j}", copy=False))
            types.append(end_type)
            extra.append(
                exp.alias_(
                    exp.column(f"_dp_{end}{j}", "_dp"), f"{name}_{end}", quoted=True, copy=False
                )
            )
    if with_rid or not names:
        names.append("rid")
        arrays.append(array("int8"))
        casts.append(exp.alias_(exp.column("rid", "u"), "_dp_rid", copy=False))
        types.append("int8")
        if with_rid:
            extra.append(exp.alias_(exp.column("_dp_rid", "_dp"), "_dp_rid", copy=False))
    unnest = exp.Unnest(
        expressions=arrays,
        alias=exp.TableAlias(
            this=exp.to_identifier("u"), columns=[exp.to_identifier(n) for n in names]
        ),
    )
    # every node above is this function's own: built in place, not copied
    inner = exp.select(*(casts or [exp.Literal.number(1)]), copy=False).from_(unnest, copy=False)
    q = a.outer.copy()
    q.set("from_", exp.From(this=inner.subquery("_dp", copy=False)))
    order_ties(q, [exp.column(f"_dp_g{i}", "_dp") for i in range(len(key_types))])
    if extra:
        q.set("expressions", [*q.expressions, *extra])
    return q, types


def interval_is_integer(a: Analysis, si: int | str) -> bool:
    """True when statistic ``si``'s interval ends are integers (a count, or another statistic
    typed bigint: its truth is a whole number and the ends are rounded outwards to one,
    :func:`dpsql.execute.bias.round_interval`), so its ``_low``/``_high`` columns are bigint.
    Derived outputs (``si`` a label such as ``"d0"``) keep float8."""
    if isinstance(si, str):
        if not si.isdigit():
            return False
        si = int(si)
    s = a.statistics[si]
    return s.pg_type == "int8" and s.func != "mode"


def interval_time_type(a: Analysis, si: int | str) -> str | None:
    """The date or timestamp type of statistic ``si`` (MIN/MAX/a quantile over one), whose
    interval ends are released as days or seconds since 1970-01-01 and typed back like its value;
    None for other statistics and derived outputs."""
    if isinstance(si, str):
        if not si.isdigit():
            return None
        si = int(si)
    t = a.statistics[si].pg_type
    return t if t in ("date", "timestamp", "timestamptz") else None


def from_epoch(value: exp.Expr, pg_type: str) -> exp.Expr:
    """A released value as its statistic's type; dates and timestamps come back from days and
    seconds since 1970-01-01 (UTC), see dpsql.sql.analyze_quantiles.epoch_value. ``value``
    becomes part of the result (not copied)."""
    if pg_type == "date":
        days = exp.cast(value, "int")  # date + integer (there is no date + bigint)
        return exp.Add(this=exp.cast(exp.Literal.string("1970-01-01"), "date"), expression=days)
    if pg_type in ("timestamp", "timestamptz"):
        ts: exp.Expr = exp.Anonymous(this="to_timestamp", expressions=[value])
        if pg_type == "timestamp":
            ts = exp.AtTimeZone(this=ts, zone=exp.Literal.string("UTC"))
        return exp.cast(ts, _type(pg_type))
    return exp.cast(value, _type(pg_type), copy=False)  # (the caller's own node, in place)


def released_key_types(a: Analysis, key_types: Sequence[str]) -> tuple[str, ...]:
    """The types the group keys are released as: each key's own (``key_types``, PostgreSQL's
    type of the key as dpsql computes it), but integer for a derived key PostgreSQL computes as
    an integer type that dpsql computes as a wider one (bigint or numeric: ``quantity / 2``, ``-s``, ``COALESCE(age,
    0) / 10 * 10``: never raising, :func:`dpsql.sql.rewrite.make_total.make_total`), as
    PostgreSQL's RowDescription types it. A released key past the narrower type's range is one
    only a row PostgreSQL refuses (22003 integer out of range) computes: casting it raises
    PostgreSQL's 22003 from the released keys alone (post-processing, nothing more learnt)."""
    out = list(key_types)
    for i, g in enumerate(a.group_keys[: len(out)]):
        if out[i] in ("int8", "numeric") and not isinstance(g.expr, exp.Column):
            bits = integer_bits(g.expr, a.column)  # -s: numeric in dpsql's total form
            out[i] = {16: "int2", 32: "int4", 64: "int8"}.get(bits or 0, out[i])
    return tuple(out)


def _released_type(key_type: str) -> str:
    """The type a group key is released as: its own, or ``text`` for a type PostgreSQL's
    catalog names but dpsql does not (``other``: an enum, a domain, an extension's type)."""
    return "text" if key_type == "other" else key_type


@lru_cache(maxsize=64)
def _built_type(name: str) -> exp.DataType:
    return exp.DataType.build(name, dialect="postgres")


def _type(name: str) -> exp.DataType:
    """PostgreSQL's type ``name`` as a node (a copy of the one parsed for it once)."""
    return _built_type(name).copy()


def shift_arrays(q: exp.Expr, offset: int) -> exp.Expr:
    """``q`` (a copy) with its array placeholders numbered from ``offset``: ``%(_dpsql_arrN)s``
    becomes ``%(_dpsql_arr<offset + N>)s``, so several queries' arrays can be one statement's
    parameters.

    >>> shift_arrays(exp.Placeholder(this="_dpsql_arr1"), 3).this
    '_dpsql_arr4'
    """

    def renumber(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Placeholder) and str(n.this).startswith("_dpsql_arr"):
            return exp.Placeholder(this=f"_dpsql_arr{offset + int(str(n.this)[10:])}")
        return n

    return q.transform(renumber)


def outer_sql(q: exp.Select, *, copy: bool = True) -> str:
    """SQL text for psycopg: literal '%' escaped, our %(_dpsql_arrN)s placeholders kept;
    ``copy=False``: ``q`` is the caller's own, generated in place (the generator may change it)."""
    import re

    text = q.sql(POSTGRES, copy=copy).replace("%", "%%")
    return re.sub(r"%%\((_dpsql_arr\d+)\)s", r"%(\1)s", text)


def to_float(v: Any) -> float:
    return float(Fraction(v)) if v is not None else 0.0
