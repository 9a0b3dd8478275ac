"""Post-processing that cannot fail after the charge.

A private statement's outer expressions (``SUM(amount) / COUNT(*)``, ``SQRT(VARIANCE(x) - 1)``)
run in PostgreSQL on the noisy statistics, after the release is paid for. An error there (a
division by a noisy 0, the square root of a noisy negative, a cast out of range) would cost the
analyst the budget for no answer, and its free repeat would fail the same way forever. So every
operation over a noisy value that PostgreSQL can refuse is guarded here and gives NULL instead
(a notice says why: :func:`guard_note`):

* ``a / b``, ``a % b`` with a noisy ``b``: ``a / NULLIF(b, 0)``;
* ``SQRT(x)``: NULL for ``x < 0``; ``LN(x)``, ``LOG(x)``: NULL for ``x <= 0`` (``LOG(b, x)``:
  also for ``b <= 0`` or ``b = 1``); ``EXP(x)``: NULL outside [-708, 709] (float overflow and
  underflow); ``POWER(x, c)`` with a constant ``c``: NULL where it would overflow or be complex;
* ``CAST(x AS smallint|integer|bigint)``: NULL outside the type's range.

A literal zero divisor (``COUNT(*) / 0``) is certain to fail: :func:`check_constant_divisors`
refuses it (22012) before anything is charged. Guards are marked (``meta``) so the flat path's
interval arithmetic (:mod:`dpsql.sql.intervals`) reads through them.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import DivisionByZero
from dpsql.sql.wording import plain_sql

GUARD = "dpsql_guard"  # meta on a guard node: its value where defined is its guarded child
HELD = "dpsql_withheld"  # meta on a guard of a withheld value (dpsql.sql.withheld)
_INT_RANGE = {
    exp.DataType.Type.SMALLINT: (-32768, 32767),
    exp.DataType.Type.INT: (-2147483648, 2147483647),
    exp.DataType.Type.BIGINT: (-9223372036854775808, 9223372036854775807),
}


def noisy(node: exp.Expr) -> bool:
    return any(c.name.startswith("_dp_s") for c in node.find_all(exp.Column))


def check_constant_divisors(node: exp.Expr) -> None:
    """Refuse a division or modulo of the post-processing by a literal zero (before any charge:
    it would fail in the post-processing query whatever the noise)."""
    for n in node.find_all(exp.Div, exp.Mod, exp.IntDiv):
        if n.find_ancestor(exp.AggFunc, exp.WithinGroup) is not None:
            continue  # a row-level division: made total (NULLIF) where the rows are read
        d = n.expression
        while isinstance(d, (exp.Paren, exp.Neg, exp.Cast)):
            d = d.this
        if isinstance(d, exp.Literal) and not d.is_string and _zero(d.this):
            raise DivisionByZero(
                "division by zero",  # PostgreSQL's words; which division, in the detail
                detail=f"{plain_sql(n)} divides by 0 whatever the data",
                hint="divide by a nonzero constant, or by NULLIF(x, 0) for a value that may be 0",
            )


def _zero(text: object) -> bool:
    try:
        return float(str(text)) == 0
    except ValueError:
        return False


def guard(node: exp.Expr) -> exp.Expr:
    """``node`` with each operation over a noisy value that PostgreSQL can refuse guarded (see
    the module docstring); ``node`` is modified in place and returned."""

    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, (exp.Div, exp.Mod, exp.IntDiv)) and noisy(n.expression):
            d = n.expression
            if not (isinstance(d, exp.Nullif) and _zero_literal(d.expression)):
                n.set("expression", _mark(exp.Nullif(this=d, expression=exp.Literal.number(0))))
            return n
        if isinstance(n, exp.Sqrt) and noisy(n.this):
            return _when(exp.GTE(this=n.this.copy(), expression=_num(0)), n)
        if isinstance(n, exp.Ln) and noisy(n.this):
            return _when(exp.GT(this=n.this.copy(), expression=_num(0)), n)
        if isinstance(n, exp.Log) and noisy(n):
            conds: list[exp.Expr] = [exp.GT(this=n.this.copy(), expression=_num(0))]
            base = n.args.get("expression")
            if isinstance(base, exp.Expr):
                conds = [
                    exp.GT(this=base.copy(), expression=_num(0)),
                    exp.GT(this=n.this.copy(), expression=_num(0)),
                    exp.NEQ(this=n.this.copy(), expression=_num(1)),
                ]
            return _when(exp.and_(*conds), n)
        if isinstance(n, exp.Exp) and noisy(n.this):
            return _when(
                exp.Between(this=n.this.copy(), low=_num(-708), high=_num(709)),
                n,
            )
        if isinstance(n, exp.Pow) and noisy(n):
            return _power(n)
        if isinstance(n, exp.Cast) and noisy(n.this) and n.to.this in _INT_RANGE:
            if _boolean(n.this):
                return n  # true / false is 1 / 0: in every integer type's range
            lo, hi = _INT_RANGE[n.to.this]
            low, high = exp.Literal.number(lo), exp.Literal.number(hi)
            return _when(exp.Between(this=exp.paren(n.this.copy()), low=low, high=high), n)
        return n

    return node.transform(fix, copy=False)


def _boolean(n: exp.Expr) -> bool:
    """Whether ``n`` is a condition (a comparison, IS, IN, BETWEEN, LIKE, AND / OR / NOT, a
    boolean constant): its value is true, false or NULL, never out of an integer's range."""
    while isinstance(n, exp.Paren):
        n = n.this
    return isinstance(n, (exp.Predicate, exp.Connector, exp.Not, exp.Boolean))


def _power(n: exp.Pow) -> exp.Expr:
    """``POWER(x, c)``: NULL where it would overflow float8 (|x| ** c > 1e300), divide by 0
    (``0 ** negative``) or be complex (a negative base, a fractional exponent); a noisy
    exponent: NULL where ``|c * ln|x|| > 690``."""
    x, c = n.this, n.expression
    if isinstance(c, exp.Literal) and not c.is_string and not noisy(c):
        e = float(c.this)
        conds: list[exp.Expr] = []
        if e != int(e):
            conds.append(exp.GTE(this=x.copy(), expression=_num(0)))
        if e < 0:
            conds.append(exp.NEQ(this=x.copy(), expression=_num(0)))
        if abs(e) > 1:
            limit = 10 ** (300 / abs(e))
            conds.append(exp.LTE(this=exp.Abs(this=x.copy()), expression=_num(limit)))
            if e < 0:
                conds.append(exp.GTE(this=exp.Abs(this=x.copy()), expression=_num(1 / limit)))
        return _when(exp.and_(*conds), n) if conds else n
    # a noisy or computed exponent: a positive base and a bounded log of the result
    log = exp.Mul(
        this=exp.Paren(this=c.copy()),
        expression=exp.Ln(this=exp.Nullif(this=exp.Abs(this=x.copy()), expression=_num(0))),
    )
    return _when(
        exp.and_(
            exp.GT(this=x.copy(), expression=_num(0)),
            exp.Between(this=log, low=_num(-690), high=_num(690)),
        ),
        n,
    )


def _when(cond: exp.Expr, value: exp.Expr) -> exp.Expr:
    return _mark(exp.Case(ifs=[exp.If(this=cond, true=value)]))


def _mark(n: exp.Expr) -> exp.Expr:
    n.meta[GUARD] = True
    return n


def _num(v: float) -> exp.Expr:
    if v == int(v) and abs(v) < 1e18:
        return exp.Literal.number(int(v))
    return exp.Literal.number(repr(float(v)))


def _zero_literal(e: object) -> bool:
    return isinstance(e, exp.Literal) and not e.is_string and _zero(e.this)


def guarded_value(n: exp.Expr) -> exp.Expr | None:
    """The value a guard node stands for where it is defined (the Nullif's or the CASE's
    guarded child), or None for any other node."""
    if not n.meta.get(GUARD):
        return None
    if isinstance(n, exp.Nullif):
        this = n.this
        return this if isinstance(this, exp.Expr) else None
    if isinstance(n, exp.Case):
        ifs = n.args.get("ifs") or []
        true = ifs[0].args.get("true") if ifs else None
        return true if isinstance(true, exp.Expr) else None
    return None


def has_guard(node: exp.Expr) -> bool:
    """Whether ``node`` holds a guard of an undefined value (not only a withheld one's:
    :mod:`dpsql.sql.withheld`'s wrappers, marked :data:`HELD`, have their own notice)."""
    return any(n.meta.get(GUARD) and not n.meta.get(HELD) for n in node.walk())


def guard_note(names: list[str], nulls: int, rows: int) -> str:
    """The notice for outputs that came out NULL in some row where a guard applied."""
    where = "NULL" if rows == 1 else f"NULL in {nulls} of {rows} rows"
    return (
        f"{', '.join(names)}: {where}: computed from noisy values that came out where "
        "the expression is undefined (a divisor of 0, the square root or logarithm of a value "
        "<= 0, a value out of a cast's range); dpsql gives NULL there instead of an error, "
        "since the answer is already paid for"
    )
