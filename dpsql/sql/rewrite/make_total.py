"""Make row-level expressions total: they must never raise depending on the data.

An error that happens for some rows and not others is a one-bit channel around the noise
(``CASE WHEN secret THEN 1/0 END``), and so is an error that happens for every row but only when
some row is evaluated (a data-gated error). This pass makes every row-level operation the analyzer
allows total for every input value:

* arithmetic runs in NUMERIC on *safe* operands: each operand of ``+ - * / % div`` over a column
  is clamped (NULL staying NULL: ``clamp_strict``) into [-10^1000, 10^1000] (NaN and ±Infinity
  are clamped too), **constant operands included**: only a plain number literal is left as it
  is, and it is at most 10^1000 (:func:`dpsql.sql.totality.check_literal`, checked again once
  bound parameters are replaced by literals). A constant *expression* is not bounded by its
  literals: a balanced product of 131 copies of ``1e1000`` folds to 10^131000, and ``CASE WHEN
  amount > T THEN (amount + 1000) * C END`` then overflowed only when a row's amount was above T
  (a binary search on one person's value). Clamped, the constant is folded before any row is
  read (its own overflow fails whatever the data), then bounded like a column. So every operand
  is a number of magnitude at most 10^1000, or 0, or at least 10^-16383 (NUMERIC's smallest, its
  scale at most 16,383): every product is at most 10^2000 (PostgreSQL rounds a product's scale
  to 16,383, no error), every quotient below 10^1000 / 10^-16383 = 10^17383, a sum of two such
  terms below 10^17384, and each result is re-clamped before it enters the next operation.
  Nothing comes near NUMERIC's 10^131072, whatever the data. The clamp returns its input
  itself, so the operation is PostgreSQL's own on the same values: the same digits and the
  same scale (``n + 1`` keeps ``n``'s scale, ``n / 3`` PostgreSQL's quotient scale) wherever no
  value passes 10^1000;
* constant arithmetic that PostgreSQL does not fold (it reads ``now()``, ``extract(... FROM
  now())``...: stable functions are evaluated per row) is made total the same way; constant
  arithmetic of literals is folded by the planner before any row is read: if it fails, it
  fails whatever the data, and it is left as written so that it fails as in PostgreSQL
  (``amount > 1/0``, ``'1e400'::float8``, ``1e30::int``: 22012, 22003 with its words);
* division and modulo divide by ``NULLIF(divisor, 0)`` (division by zero gives NULL, which
  aggregates ignore); a constant divisor that may be 0 (``amount % 0``) is first checked while
  the statement is planned (:func:`checked_divisor`): PostgreSQL's 22012 whatever the data;
* ``/`` between two integer-typed operands keeps PostgreSQL's integer semantics (truncation toward
  zero) as ``div(a, b)`` in NUMERIC (exact), so ``INT_MIN / -1`` can't overflow; integer
  arithmetic goes back to ``bigint`` (clamped into its range);
* date and time arithmetic is never mixed with a column (:mod:`dpsql.sql.totality` refuses date
  columns in arithmetic, and a cast of one to a number fails while the statement is planned);
  its constants are bounded there (:mod:`dpsql.sql.temporal`);
* a date or time read where PostgreSQL converts it to a timestamp (a cast to ``timestamp`` or
  ``timestamptz``; ``date_trunc``, ``to_char`` and ``date_part``, which take a timestamp) is
  first moved into the range both types share, with a day's margin for the time zone
  (:func:`~dpsql.sql.rewrite.total_dates.within_timestamps`:
  later than 294276-12-29 reads as ``'infinity'``, earlier than 4713-11-26 BC as
  ``'-infinity'``, which those functions take). A date column reaches 5874897 AD, a timestamp
  294276 AD: ``CAST(d AS timestamp)`` failed only when a row held such a date;
* casts to integer types clamp their (rounded) input into the type's range, casts to
  ``real``/``double precision`` into the finite range, rounded so they can't underflow, and casts to
  ``numeric(p, s)`` into the largest value of that precision;
* a NUMERIC that PostgreSQL converts to a float beside one (``amount * 1e303 > 1.5::float8``,
  ``GREATEST(x, r)`` of a ``real``) is first clamped into the float's range and rounded as such
  a cast is (:mod:`dpsql.sql.rewrite.float_safe`).

The analyzer (:mod:`dpsql.sql.analyze`) refuses what can't be made total here (casts from text,
regular expressions, LIKE patterns from data, unknown date units...).

>>> import sqlglot
>>> make_total(sqlglot.parse_one("a % 2", read="postgres")).sql("postgres")
'NUMERIC_SMALLER(NUMERIC_LARGER(CAST(a AS DECIMAL), -1e1000), 1e1000) % NULLIF(2, 0)'
>>> make_total(sqlglot.parse_one("7 % 0", read="postgres")).sql("postgres")
'7 % 0'
>>> make_total(sqlglot.parse_one("a * 2", read="postgres")).sql("postgres")
'NUMERIC_SMALLER(NUMERIC_LARGER(CAST(a AS DECIMAL), -1e1000), 1e1000) * 2'
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql import functions as fn
from dpsql.sql.nodes import cast
from dpsql.sql.pg_types import is_integer
from dpsql.sql.rewrite.float_safe import float_safe
from dpsql.sql.rewrite.literals import clamp_strict, number
from dpsql.sql.rewrite.total_dates import (
    dates_within_timestamps,
    is_date_part,
    own_date_part,
    timestamp_input,
    within_timestamps,
)
from dpsql.sql.rewrite.total_float import float_operation, is_float8
from dpsql.sql.sensitivity import Columns, lookup
from dpsql.sql.temporal import value_kind as kind
from dpsql.sql.time_shift import guard, is_shift

SAFE_EXP = 1000  # operands are clamped into [-10^SAFE_EXP, 10^SAFE_EXP]
FLOAT_LIMITS = {
    exp.DataType.Type.DOUBLE: (300, 300),  # |x| <= 1e300, rounded to 300 decimals (> DBL_MIN)
    exp.DataType.Type.FLOAT: (38, 37),  # real: |x| <= 1e38, rounded to 37 decimals (> FLT_MIN)
}


def _guard(divisor: exp.Expr) -> exp.Expr:
    return exp.Nullif(this=divisor, expression=exp.Literal.number(0))


def checked_divisor(d: exp.Expr) -> exp.Expr:
    """Divisor ``d`` (made total) of an operation over a row: when it is a constant the planner
    folds and not a plain nonzero number, ``CASE WHEN d = 0 THEN 1 / 0 ELSE d END``.

    PostgreSQL divides ``amount % 0`` row by row and fails on the first row it reaches: an error
    a row decides (whether the WHERE keeps one), never sent as such. The CASE is folded while
    the statement is planned, before any row is read: to ``d`` itself, or to PostgreSQL's own
    22012 ``division by zero`` whatever the data (``CASE WHEN false THEN amount % 0 END``: the
    arm is dropped unread, as PostgreSQL drops it). Any other divisor is returned as it is.

    >>> import sqlglot
    >>> checked_divisor(sqlglot.parse_one("1 - 1")).sql("postgres")
    'CASE WHEN (1 - 1) = 0 THEN 1 / 0 ELSE 1 - 1 END'
    >>> checked_divisor(sqlglot.parse_one("2")).sql("postgres")
    '2'
    """
    if d.find(exp.Column) or not folded(d):
        return d
    if _plain_number(d) and not _zero_number(d):
        return d
    tested = d.copy() if isinstance(d, (exp.Paren, exp.Literal)) else exp.Paren(this=d.copy())
    zero = exp.EQ(this=tested, expression=exp.Literal.number(0))
    fail = exp.Div(this=exp.Literal.number(1), expression=exp.Literal.number(0), typed=True)
    return exp.Case(ifs=[exp.If(this=zero, true=fail)], default=d)


def _zero_number(d: exp.Expr) -> bool:
    while isinstance(d, (exp.Neg, exp.Paren)):
        d = d.this
    try:
        return float(str(d.this)) == 0
    except ValueError:
        return True  # not read here: checked by PostgreSQL


def _pow10(e: int) -> exp.Expr:
    return exp.Literal.number(f"1e{e}")


def _clamp(node: exp.Expr, lo: exp.Expr, hi: exp.Expr) -> exp.Expr:
    return clamp_strict(node, lo, hi)  # NULL stays NULL


_NUMERIC = exp.DataType.build("numeric")


def _round(node: exp.Expr, decimals: int) -> exp.Round:
    """``ROUND(node, decimals)`` of a NUMERIC ``node``, typed so that the generator does not
    annotate its whole subtree to check for ``double precision`` (quadratic in nested rounds)."""
    r = exp.Round(this=node, decimals=exp.Literal.number(decimals))
    r.type = _NUMERIC.copy()
    return r


def _is_clamp(node: exp.Expr) -> bool:
    """``node`` is :func:`clamp_strict`'s outer call (NUMERIC)."""
    return isinstance(node, exp.Anonymous) and str(node.name).lower() == "numeric_smaller"


def _num(node: exp.Expr) -> exp.Expr:
    """``node`` typed NUMERIC (no cast added when it already is). Takes ``node`` (no copy)."""
    if (
        (isinstance(node, exp.Literal) and not node.is_string)
        or isinstance(node, exp.Round)
        or _is_clamp(node)
        or (isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.DECIMAL)
    ):
        return node
    return cast(node, "numeric")


def _safe(node: exp.Expr) -> exp.Expr:
    """A NUMERIC operand that can't make arithmetic overflow: clamped (its value and scale kept).

    Every operand is clamped, constants included, except a plain number literal (at most 10^1000
    by :func:`dpsql.sql.totality.check_literal`, checked again once parameters are bound): a
    constant *expression* folds to any value up to NUMERIC's limit (a balanced product of 131
    copies of ``1e1000`` is 10^131000), and ``(amount + 1000) * C`` would then overflow only for
    the rows that reach it. A constant that can't be folded (its own overflow) fails while the
    statement is planned, whatever the data.
    """
    if _plain_number(node):
        return node
    big = _pow10(SAFE_EXP)
    clamped = _clamp(_num(node), exp.Neg(this=big), big.copy())
    clamped.type = _NUMERIC.copy()
    return clamped


# Nodes PostgreSQL's planner folds when their arguments are constants (immutable), as dpsql
# writes them: a constant tree of only these is evaluated once, before any row is read.
_FOLDED = (
    exp.Literal, exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv,
    exp.Nullif, exp.Abs, exp.Null, exp.Round,
)  # fmt: skip
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)
_OWN_FUNCTIONS = frozenset({"div", "trunc", "numeric_larger", "numeric_smaller"})


def folded(node: exp.Expr) -> bool:
    """Is ``node`` (no column) folded by the planner before any row is read? Only arithmetic,
    number literals and casts to number types (immutable) are; ``now()``, ``extract`` and
    friends are stable, evaluated per row."""

    def immutable(x: exp.Expr) -> bool:
        if isinstance(x, exp.Literal) and x.is_string:
            return isinstance(x.parent, exp.Cast)
        if isinstance(x, exp.Cast):
            return x.to.this in fn.NUMERIC_TYPES or x.to.this in fn.INTEGER_TYPES
        if isinstance(x, (exp.DataType, exp.DataTypeParam)):
            return True
        return isinstance(x, _FOLDED) or (
            isinstance(x, exp.Anonymous) and str(x.name).lower() in _OWN_FUNCTIONS
        )

    return all(immutable(x) for x in node.walk())


def _plain_number(node: exp.Expr) -> bool:
    while isinstance(node, (exp.Neg, exp.Paren)):
        node = node.this
    return isinstance(node, exp.Literal) and not node.is_string


_BOOLEAN = (exp.Predicate, exp.Not, exp.And, exp.Or, exp.Boolean, exp.Is, exp.In, exp.Between)


def _boolean(n: exp.Expr, columns: Columns | None) -> bool:
    """``n`` is a boolean: a condition, ``true``/``false`` or a boolean column."""
    n = n.unnest()
    if isinstance(n, exp.Column):
        col = lookup(columns, n) if columns is not None else None
        return col is not None and col.family == "boolean"
    return isinstance(n, _BOOLEAN)


def _outermost_integer(n: exp.Expr, columns: Columns | None) -> bool:
    """``n`` is integer arithmetic (``i % 3``, ``(i + 1) * 2``, ``i / 2``) whose value is not
    itself an operand of integer arithmetic: where its NUMERIC result (made total) goes back to
    PostgreSQL's integer type, so ``(i % 3)::text`` is '0', not '0.000...' with 100 decimals."""
    if not isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
        return False
    if not is_integer(n, columns):
        return False
    up = n.parent
    while isinstance(up, exp.Paren):
        up = up.parent
    return not (isinstance(up, _ARITHMETIC) and is_integer(up, columns))


_BIGINT = fn.INTEGER_RANGE[exp.DataType.Type.BIGINT]


def _as_bigint(n: exp.Expr) -> exp.Expr:
    """An integral NUMERIC value as ``bigint``, clamped into its range first (where PostgreSQL's
    integer arithmetic would overflow, an error that depends on the data)."""
    return exp.Cast(
        this=_clamp(n, number(_BIGINT[0]), number(_BIGINT[1])), to=exp.DataType.build("bigint")
    )


def _cast_total(n: exp.Cast) -> exp.Expr:
    to = n.to.this
    if to in fn.INTEGER_TYPES:
        lo, hi = fn.INTEGER_RANGE[to]
        inner = _clamp(_num(n.this), number(lo), number(hi))
        return exp.Cast(this=exp.Round(this=inner), to=n.to)
    if _plain_number(n.this):
        return n
    if to in FLOAT_LIMITS:
        e, scale = FLOAT_LIMITS[to]
        inner = _clamp(_num(n.this), exp.Neg(this=_pow10(e)), _pow10(e))
        return exp.Cast(this=_round(inner, scale), to=n.to)
    params = n.to.expressions
    if to == exp.DataType.Type.DECIMAL and params:
        p = int(params[0].this.this)
        s = int(params[1].this.this) if len(params) > 1 else 0
        top = _largest_numeric(p, s)
        inner = _clamp(_num(n.this), exp.Neg(this=top), top.copy())
        return exp.Cast(this=_round(inner, s), to=n.to)
    return n


def _largest_numeric(p: int, s: int) -> exp.Expr:
    """The largest value of ``numeric(p, s)``, 10^(p-s) - 10^-s, as an exact literal.

    All p digits are nines: ``number()`` rounds to 80 significant digits, which turned
    ``numeric(1000, 999)``'s bound into 10 itself, a value the cast refuses ("numeric field
    overflow" for every row clamped to it: a data-dependent error).

    >>> _largest_numeric(3, 1).sql(), _largest_numeric(3, 5).sql(), _largest_numeric(2, 0).sql()
    ('99.9', '0.00999', '99')
    """
    digits = "9" * p
    if s <= 0:
        return exp.Literal.number(digits + "0" * -s)
    if s >= p:
        return exp.Literal.number("0." + "0" * (s - p) + digits)
    return exp.Literal.number(f"{digits[: p - s]}.{digits[p - s :]}")


_FloatFlags = tuple[tuple[bool, bool, bool], tuple[bool, bool, bool]]


def _float_flags(n: exp.Expr, columns: Columns | None) -> _FloatFlags | None:
    """For ``+ - * /`` over a column that PostgreSQL computes in float8: (float8, integer,
    float8 column) of each operand as written; else None."""
    if not isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Div)) or not n.find(exp.Column):
        return None
    if not is_float8(n, columns):
        return None

    def flags(x: exp.Expr) -> tuple[bool, bool, bool]:
        inner = x
        while isinstance(inner, (exp.Paren, exp.Neg, exp.Abs)):
            inner = inner.this
        leaf = isinstance(inner, exp.Column) and is_float8(inner, columns)
        return is_float8(x, columns), is_integer(x, columns), leaf

    return flags(n.this), flags(n.expression)


def make_total(node: exp.Expr, columns: Columns | None = None) -> exp.Expr:
    """A copy of ``node`` in which no operation can raise for any row (see the module docstring).

    ``columns`` (the private table's columns) tells integer columns apart, so integer division
    keeps its truncating semantics; without it, ``/`` divides exactly.
    """

    def fix(n: exp.Expr, both_int: bool, floats: _FloatFlags | None, float_unary: bool) -> exp.Expr:
        if not n.find(exp.Column) and not isinstance(n, exp.Cast):
            if (
                isinstance(n, _ARITHMETIC)
                and not folded(n)
                and kind(n) == "number"
                and "time" not in (kind(n.this), kind(n.expression))
            ):
                # Constant but evaluated per row (now(), extract(... FROM now()) are not
                # folded): as total as arithmetic over a column
                return fix_numeric(n, both_int)
            # Constant: folded by the planner before any row is read, so it fails (or not)
            # whatever the data: left as written, PostgreSQL's own error (1 / 0: 22012)
            if isinstance(n, exp.IntDiv):
                return exp.Anonymous(this="div", expressions=[n.this, n.expression])
            return n
        if columns is not None and is_shift(n, lambda c: lookup(columns, c)):
            # a bounded date moved by a constant (a GROUP BY key the analysis let through):
            # evaluated only inside the declared bounds (dpsql.sql.time_shift)
            return guard(n, lambda c: lookup(columns, c)) or n
        if isinstance(n, exp.WidthBucket) and not is_integer(n.this, columns):
            # a NaN operand raises (dpsql.sql.width_bucket): clamped, it reads as 10^1000
            n.set("this", _safe(n.this))
            return n
        if floats is not None:  # PostgreSQL's float8 arithmetic (dpsql.sql.rewrite.total_float)
            if isinstance(n, exp.Div):
                n.set("expression", checked_divisor(n.expression))
            return float_operation(n, floats)
        if isinstance(n, (exp.Div, exp.Mod, exp.IntDiv, exp.Add, exp.Sub, exp.Mul)):
            return fix_numeric(n, both_int)
        if isinstance(n, (exp.Neg, exp.Abs)) and not _plain_number(n.this) and not float_unary:
            n.set("this", _num(n.this))
            return n
        if timestamp_input(n) and isinstance(n.this, exp.Expr) and n.this.find(exp.Column):
            n.set("this", within_timestamps(n.this))
            return n
        value = n.args.get("expression")
        if is_date_part(n) and isinstance(value, exp.Expr) and value.find(exp.Column):
            # date_part(text, date) is date_part(text, timestamp) of the date converted: a date
            # after 294276 AD failed for that row only (EXTRACT reads the date itself)
            n.set("expression", within_timestamps(value))
            return n
        if own_date_part(n) and n.expressions[1].find(exp.Column):
            # dpsql's own (a date quantile's epoch: dpsql.sql.analyze_quantiles.epoch_value)
            n.set("expressions", [n.expressions[0], within_timestamps(n.expressions[1])])
            return n
        if isinstance(n, exp.Cast):
            if not n.find(exp.Column) and folded(n):
                # a constant cast ('1e400'::float8, 1e30::int) is folded while the statement is
                # planned: it fails (PostgreSQL's 22003) or not whatever the data
                return n
            if _boolean(n.this, columns):
                # (amount > 100)::int is 1, 0 or NULL: PostgreSQL's own cast never raises (and
                # a boolean has no cast to NUMERIC to clamp through: 42846)
                return n
            return _cast_total(n)
        return n

    def fix_numeric(n: exp.Expr, both_int: bool) -> exp.Expr:
        if isinstance(n, (exp.Div, exp.Mod, exp.IntDiv)):
            divisor = _guard(_safe(checked_divisor(n.expression)))
        if isinstance(n, exp.Div):
            if both_int:  # PostgreSQL's integer quotient: div() truncates exactly (a rounded
                # NUMERIC quotient, 2^63 - 1 over 2^62 = 1.99...98 kept to 16 decimals, is 2.0)
                return exp.Anonymous(this="div", expressions=[_num(_safe(n.this)), divisor])
            n.set("this", _safe(n.this))
            n.set("expression", divisor)
            return n
        if isinstance(n, exp.Mod):
            n.set("this", _safe(n.this))
            n.set("expression", divisor)
            return n
        if isinstance(n, exp.IntDiv):
            return exp.Anonymous(this="div", expressions=[_num(_safe(n.this)), divisor])
        n.set("this", _num(_safe(n.this)))
        n.set("expression", _safe(n.expression))
        return n

    def visit(n: exp.Expr) -> exp.Expr:  # bottom-up: children are made total first
        # PostgreSQL's type of a division, read before its operands are rewritten (a rewritten
        # operand is NUMERIC: (quantity - 5) would no longer look like an integer)
        # (``q / '2'``: the quoted constant is typed as q, an integer: dpsql.sql.pg_types)
        both_int = isinstance(n, exp.Div) and is_integer(n, columns)
        whole_int = _outermost_integer(n, columns)
        floats = _float_flags(n, columns)
        # -x and abs(x) of a double precision never raise: kept in float8
        float_unary = isinstance(n, (exp.Neg, exp.Abs)) and is_float8(n.this, columns)
        for child in list(n.iter_expressions()):
            key, index = child.arg_key, child.index
            new = visit(child)
            if new is not child and key is not None:
                n.set(key, new, index)
        out = float_safe(fix(n, both_int, floats, float_unary), columns)  # NUMERIC meets float
        out = dates_within_timestamps(out, columns)  # a date meets a timestamp
        if whole_int and any(_is_clamp(x) for x in out.walk()):
            return _as_bigint(out)
        return out

    return visit(node.copy())
