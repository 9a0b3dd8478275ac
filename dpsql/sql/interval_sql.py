"""Interval arithmetic in SQL for the tree's post-processing (:mod:`dpsql.sql.tree_intervals`).

An expression over released values gets a low and a high end written as SQL over its sources'
hidden columns: sums add ends, a difference subtracts the opposite ones, a product or a quotient
takes the least and greatest of its four corners (a divisor whose interval may hold 0 gives
none), monotone functions (ROUND, FLOOR, CEIL, TRUNC, numeric casts, GREATEST, LEAST) apply to
both ends, SUM/AVG/MIN/MAX over rows (also as windows) aggregate the ends, NULL when a row has
none. The true value is between the ends whenever each value it reads is inside its own
interval (the inclusion property of interval arithmetic: conservative, never optimistic).
A NULL end is no bound on that side (a leaf interval of which one end holds: dpsql.execute.
disowned): sums, differences, scaling by a constant, monotone functions and aggregates carry it
(NULL in, NULL out), and where an operation would skip it (LEAST, GREATEST, a product's or a
quotient's corners) the end it could move is NULL too.
Anything else that reads a noisy value has no interval (:class:`No`, with the reason).

Beside the ends travels a third hidden column, ``_dpsql_iv<n>_miss``: the sum, over the leaf
intervals this row's value reads, of each one's miss probability (a leaf row carries its
leaf's 1 - level, a numeric). Sums and products add their parts' misses, an aggregate or a
window sums them over exactly the rows (or the frame) it reads: by the union bound the row's
interval holds with probability at least 1 - miss. With every leaf's miss set to 1 the same
column counts the leaf values a row reads (how the engine chooses the leaves' levels).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlglot import exp

from dpsql.sql.names import function_name, type_sql
from dpsql.sql.post_guards import HELD
from dpsql.sql.tree import LEAF_PREFIX

# operators sqlglot names by its own node keys, as the user writes them (reasons a NULL interval)
_OPERATORS = {
    "dpipe": "the operator ||",
    "mod": "the operator %",
    "pow": "the operator ^",
    "bitwiseand": "the operator &",
    "bitwiseor": "the operator |",
    "bitwisexor": "the operator #",
    "like": "LIKE",
    "ilike": "ILIKE",
    "is": "IS",
    "in": "IN",
    "between": "BETWEEN",
}

IV_LEAF = "_dpsql_ivleaf_"  # a placeholder whose leaf's rows carry their interval columns
HIDDEN = re.compile(r"^_dpsql_iv(\d+)_(low|high|miss)$")
ENDS = ("low", "high", "miss")  # the hidden columns of one interval

Event = tuple[int, bool]  # (leaf, over all its rows): one leaf interval, or one per row


@dataclass(frozen=True)
class Held:
    """A column whose interval travels beside it in hidden columns ``_dpsql_iv<hid>_*``."""

    hid: int
    events: tuple[Event, ...]
    additive: bool
    integral: bool
    passthrough: bool  # a leaf's own interval, unchanged (its ends keep the leaf's types)
    end: str = ""  # then: the type of its ends (int8, float8, date, timestamp, timestamptz)


@dataclass(frozen=True)
class No:
    reason: str


Info = Held | No | None  # None: exact (a key, a public column, a constant)


@dataclass(frozen=True)
class Iv:
    lo: exp.Expr
    hi: exp.Expr
    events: tuple[Event, ...]
    additive: bool
    integral: bool
    passthrough: bool = False
    hid: int | None = None
    end: str = ""
    miss: exp.Expr = field(default_factory=lambda: exp.Literal.number(0))  # module doc


Ev = Iv | No | None


@dataclass
class Rel:
    cols: list[tuple[str, Info]]
    flags: dict[str, str] = field(default_factory=dict)  # "declared"/"selected"/"chosen": why
    unknown: bool = False  # reads a public table: its columns are not listed
    hidden: bool = False  # its rows carry hidden interval columns (SELECT * passes them on)


TIME_ENDS = ("date", "timestamp", "timestamptz")
_MONO = (exp.Round, exp.Floor, exp.Ceil, exp.Trunc)
_NUM_TYPES = {
    "INT", "BIGINT", "SMALLINT", "DECIMAL", "DOUBLE", "FLOAT", "NUMERIC", "BIGDECIMAL",
    "TINYINT", "MONEY",
}  # fmt: skip
_INT_TYPES = {"INT", "BIGINT", "SMALLINT", "TINYINT"}


class Scope:
    """The sources a SELECT reads, by alias, and how its expressions carry intervals."""

    def __init__(self, scope: dict[str, Rel | None], order: list[str]) -> None:
        self.scope, self.order = scope, order

    def resolve(self, c: exp.Column) -> tuple[str, Info]:
        if c.table:
            r = self.scope.get(c.table)
            if r is None:
                return c.table, None
            return c.table, _lookup(r, c.name)
        for n in self.order:
            r = self.scope[n]
            if r is not None and any(name.lower() == c.name.lower() for name, _ in r.cols):
                return n, _lookup(r, c.name)
        return "", None

    def noisy(self, node: exp.Expr) -> bool:
        for n in node.walk():
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                if self.resolve(n)[1] is not None:
                    return True
            if isinstance(n, exp.Select) and _reads_leaf(n):
                return True
        return False


def _lookup(r: Rel, name: str) -> Info:
    for n, i in r.cols:
        if n == name:
            return i
    for n, i in r.cols:
        if n.lower() == name.lower():
            return i
    return None


def _reads_leaf(n: exp.Expr) -> bool:
    return any(t.name.startswith((LEAF_PREFIX, IV_LEAF)) for t in n.find_all(exp.Table))


def _hcol(name: str, table: str) -> exp.Column:
    return exp.column(name, table or None, quoted=True)


class Exprs:
    """The interval of a select item's expression as SQL over its sources' hidden columns, or
    why it has none (No), or None (exact)."""

    def __init__(self, scope: Scope, rows: dict[str, str], grouped: bool) -> None:
        self.scope, self.rows, self.grouped = scope, rows, grouped

    def ev(self, n: exp.Expr, inside_agg: bool) -> Ev:
        out = self._ev(n, inside_agg)
        if isinstance(out, Iv) and not out.passthrough and self._timed(n):
            return No("dpsql computes no interval for an expression over dates or times")
        return out

    def _timed(self, n: exp.Expr) -> bool:
        """Whether ``n`` reads a released date or timestamp (its interval ends are such)."""
        for c in n.find_all(exp.Column):
            info = self.scope.resolve(c)[1] if not isinstance(c.this, exp.Star) else None
            if isinstance(info, Held) and info.end in TIME_ENDS:
                return True
        return False

    def _ev(self, n: exp.Expr, inside_agg: bool) -> Ev:
        if n.meta.get(HELD) and isinstance(n, exp.Case):  # NULL where an input is withheld
            cond, value = n.args["ifs"][0].this, n.args["ifs"][0].args["true"]  # (withheld_post)
            held = self.ev(value, inside_agg)
            return _map(held, lambda x: exp.Case(ifs=[exp.If(this=cond.copy(), true=x)]))
        if isinstance(n, exp.Column):
            if isinstance(n.this, exp.Star):
                return None
            table, info = self.scope.resolve(n)
            if info is None or isinstance(info, No):
                return info
            if self.grouped and not inside_agg:
                return No("it is grouped by its noisy value")
            return Iv(
                _hcol(f"_dpsql_iv{info.hid}_low", table),
                _hcol(f"_dpsql_iv{info.hid}_high", table),
                info.events,
                info.additive,
                info.integral,
                info.passthrough,
                info.hid,
                info.end,
                _hcol(f"_dpsql_iv{info.hid}_miss", table),
            )
        if isinstance(n, (exp.Literal, exp.Null, exp.Boolean, exp.Star)):
            return None
        if isinstance(n, exp.Paren):
            return _map(self.ev(n.this, inside_agg), lambda x: exp.Paren(this=x))
        if isinstance(n, exp.Neg):
            a = self.ev(n.this, inside_agg)
            if not isinstance(a, Iv):
                return a
            return replace(
                a, lo=exp.Neg(this=exp.Paren(this=a.hi)), hi=exp.Neg(this=exp.Paren(this=a.lo)),
                additive=False, passthrough=False,
            )  # fmt: skip
        if isinstance(n, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            return self.arith(n, inside_agg)
        if isinstance(n, exp.Cast):
            a = self.ev(n.this, inside_agg)
            if not isinstance(a, Iv):
                return a
            t = n.to.this.name if n.to.this is not None else ""
            if t not in _NUM_TYPES:
                return No(f"a cast of a noisy value to {type_sql(n.to)}")
            to = n.to
            return replace(
                a,
                lo=exp.Cast(this=a.lo, to=to.copy()),
                hi=exp.Cast(this=a.hi, to=to.copy()),
                integral=a.integral or t in _INT_TYPES,
                passthrough=False,
            )
        if isinstance(n, _MONO):
            a = self.ev(n.this, inside_agg)
            if not isinstance(a, Iv):
                return a

            def wrap(x: exp.Expr) -> exp.Expr:
                c = n.copy()
                c.set("this", x)
                return c

            return replace(a, lo=wrap(a.lo), hi=wrap(a.hi), additive=False, passthrough=False)
        if isinstance(n, (exp.Greatest, exp.Least)):
            args = [n.this, *n.expressions]
            evs = [self.ev(x, inside_agg) for x in args]
            bad = next((x for x in evs if isinstance(x, No)), None)
            if bad is not None or all(x is None for x in evs):
                return bad
            ivs = [x for x in evs if isinstance(x, Iv)]
            los = [x.lo if isinstance(x, Iv) else a.copy() for x, a in zip(evs, args, strict=True)]
            his = [x.hi if isinstance(x, Iv) else a.copy() for x, a in zip(evs, args, strict=True)]
            k = type(n)
            lo_: exp.Expr = k(this=los[0], expressions=los[1:])
            hi_: exp.Expr = k(this=his[0], expressions=his[1:])
            # a NULL end is no bound on that side (module doc), which GREATEST and LEAST skip:
            # GREATEST's high end (LEAST's low end) is unbounded when any argument's is
            if k is exp.Greatest:
                hi_ = _strict(hi_, his)
            else:
                lo_ = _strict(lo_, los)
            return Iv(
                lo_,
                hi_,
                tuple(e for x in ivs for e in x.events),
                False,
                all(x.integral for x in ivs),
                miss=_add_misses([x.miss for x in ivs]),
            )
        if isinstance(n, exp.Coalesce) and len(n.expressions) == 1:
            # COALESCE(SUM(x), 0): where the value is NULL the fallback is exact, else its ends
            a, fallback = self.ev(n.this, inside_agg), n.expressions[0]
            if not isinstance(a, Iv) or self.scope.noisy(fallback):
                return a if not isinstance(a, Iv) else No("COALESCE with a noisy fallback")
            is_null = exp.Is(this=n.this.copy(), expression=exp.Null())

            def pick(end: exp.Expr) -> exp.Expr:
                return exp.Case(
                    ifs=[exp.If(this=is_null.copy(), true=fallback.copy())], default=end
                )

            zero = _int_literal(fallback)
            # the fallback is exact (it never misses) only where the NULL is the truth's too:
            # not where rows are missing because partition selection or noisy values dropped
            # them (a LEFT JOIN to such a leaf: the true statement has a row, 0 is no bound)
            public = not any(k in self.rows for k in ("selected", "chosen"))
            miss = (
                exp.Case(
                    ifs=[exp.If(this=is_null.copy(), true=exp.Literal.number(0))], default=a.miss
                )
                if public
                else a.miss
            )
            return replace(
                a, lo=pick(a.lo), hi=pick(a.hi), passthrough=False, miss=miss,
                additive=a.additive and zero and int(fallback.this) == 0,
                integral=a.integral and zero,
            )  # fmt: skip
        if isinstance(n, exp.Nullif):
            if self.scope.noisy(n.expression):
                return No("NULLIF compares with a noisy value")
            return _map(self.ev(n.this, inside_agg), lambda x: x, passthrough=False)
        if isinstance(n, exp.Window):
            return self.window(n)
        if isinstance(n, exp.AggFunc):
            return self.agg(n, None)
        if self.scope.noisy(n):
            what = (
                function_name(n).upper()
                if isinstance(n, exp.Func)
                else _OPERATORS.get(n.key, n.key.upper())
            )
            if isinstance(n, (exp.Subquery, exp.Select)):
                what = "a scalar subquery"
            return No(f"{what} of a noisy value is not monotone: dpsql can't bound it")
        return None

    def arith(self, n: exp.Expr, inside_agg: bool) -> Ev:
        a, b = self.ev(n.this, inside_agg), self.ev(n.expression, inside_agg)
        if isinstance(a, No) or isinstance(b, No):
            return a if isinstance(a, No) else b
        if a is None and b is None:
            return None
        x = a if isinstance(a, Iv) else _exact(n.this)
        y = b if isinstance(b, Iv) else _exact(n.expression)
        events = x.events + y.events
        integral = x.integral and y.integral
        miss = _add_misses([v.miss for v in (a, b) if isinstance(v, Iv)])
        if isinstance(n, exp.Add):
            return Iv(exp.Add(this=x.lo, expression=y.lo), exp.Add(this=x.hi, expression=y.hi),
                       events, x.additive and y.additive, integral, miss=miss)  # fmt: skip
        if isinstance(n, exp.Sub):
            return Iv(exp.Sub(this=x.lo, expression=y.hi), exp.Sub(this=x.hi, expression=y.lo),
                       events, False, integral, miss=miss)  # fmt: skip
        mul = isinstance(n, exp.Mul)
        if _positive_literal(n.expression) is not None and b is None:
            # x * 2, x / 100: the order of the ends is known
            return Iv(_op(n, x.lo, y.lo), _op(n, x.hi, y.hi), events,
                       x.additive and mul, integral and mul, miss=miss)  # fmt: skip
        divisor = isinstance(n, exp.Div) and isinstance(b, Iv)
        corners = [
            _op(n, p, _nonzero(q) if divisor else q) for p in (x.lo, x.hi) for q in (y.lo, y.hi)
        ]
        lo: exp.Expr = exp.Least(this=corners[0], expressions=corners[1:])
        hi: exp.Expr = exp.Greatest(
            this=corners[0].copy(), expressions=[c.copy() for c in corners[1:]]
        )
        # an operand's NULL end is no bound on that side: the corners then bound nothing
        # (LEAST and GREATEST would skip the NULL corner)
        ends = [x.lo, x.hi, y.lo, y.hi]
        lo, hi = _strict(lo, ends), _strict(hi, ends)
        if divisor:  # no interval when the divisor's may hold 0
            ok = exp.or_(
                exp.GT(this=y.lo.copy(), expression=exp.Literal.number(0)),
                exp.LT(this=y.hi.copy(), expression=exp.Literal.number(0)),
            )
            lo = exp.Case(ifs=[exp.If(this=ok, true=lo)])
            hi = exp.Case(ifs=[exp.If(this=ok.copy(), true=hi)])
        return Iv(lo, hi, events, False, integral and mul, miss=miss)

    def agg(self, n: exp.AggFunc, window: exp.Window | None) -> Ev:
        arg = n.this
        a = self.ev(arg, inside_agg=True) if arg is not None else None
        rows = self.rows
        if isinstance(n, exp.Count):
            if rows:
                first = next(rows[k] for k in ("declared", "selected", "chosen") if k in rows)
                return No(f"it counts released rows ({first})")
            return a if isinstance(a, No) else None
        if isinstance(a, No):
            return a
        if a is None:
            return None
        if isinstance(arg, exp.Distinct) or n.args.get("distinct"):
            return No("DISTINCT inside an aggregate merges equal noisy values")
        blocking = [rows[k] for k in ("chosen", "selected") if k in rows]
        if blocking:
            return No(f"it aggregates rows where {blocking[0]}")
        if isinstance(n, exp.Sum):
            if "declared" in rows and not a.additive:
                return No(f"it sums values that are not 0 for an empty group ({rows['declared']})")
        elif isinstance(n, (exp.Avg, exp.Min, exp.Max)):
            if "declared" in rows:
                return No(f"{function_name(n).upper()} over the rows: {rows['declared']}")
        else:
            return No(f"{function_name(n).upper()} of noisy values: dpsql can't bound it")

        def over(f: exp.Expr) -> exp.Expr:
            if window is None:
                return f
            w = window.copy()
            w.set("this", f)
            return w

        def guarded(end: exp.Expr) -> exp.Expr:
            f = type(n)(this=end)
            full = exp.EQ(
                this=over(exp.Count(this=exp.Star())),
                expression=over(exp.Count(this=end.copy())),
            )
            return exp.Case(ifs=[exp.If(this=full, true=over(f))])

        return Iv(
            guarded(a.lo),
            guarded(a.hi),
            tuple((leaf, True) for leaf, _ in a.events),
            a.additive and isinstance(n, exp.Sum),
            a.integral and not isinstance(n, exp.Avg),
            miss=over(exp.Sum(this=a.miss.copy())),  # the misses of exactly the rows it reads
        )

    def window(self, w: exp.Window) -> Ev:
        f = w.this
        parts = [*(w.args.get("partition_by") or [])]
        o = w.args.get("order")
        ordered = any(self.scope.noisy(p) for p in parts) or (o is not None and self.scope.noisy(o))
        reads = self.scope.noisy(f)
        if not reads and not ordered:
            return None
        if ordered:
            return No("a window that partitions or orders rows by their noisy values")
        if not isinstance(f, (exp.Sum, exp.Avg, exp.Min, exp.Max)):
            return No(f"{function_name(f).upper()} reads another row's noisy value")
        spec = w.args.get("spec")
        if spec is not None and "declared" in self.rows:
            return No(f"a window frame counted in rows: {self.rows['declared']}")
        return self.agg(f, w)


def _map(ev: Ev, f: Callable[[exp.Expr], exp.Expr], passthrough: bool | None = None) -> Ev:
    if not isinstance(ev, Iv):
        return ev
    keep = ev.passthrough if passthrough is None else passthrough
    return replace(ev, lo=f(ev.lo), hi=f(ev.hi), passthrough=keep)


def _strict(f: exp.Expr, ends: list[exp.Expr]) -> exp.Expr:
    """``f``, or NULL (no bound) when any of ``ends`` is NULL (an unbounded end)."""
    known = [exp.Not(this=exp.Is(this=e.copy(), expression=exp.Null())) for e in ends]
    cond: exp.Expr = known[0]
    for k in known[1:]:
        cond = exp.and_(cond, k)
    return exp.Case(ifs=[exp.If(this=cond, true=f)])


def _exact(e: exp.Expr) -> Iv:
    return Iv(e.copy(), e.copy(), (), False, _int_literal(e))


def _add_misses(misses: list[exp.Expr]) -> exp.Expr:
    """The union bound over the parts' leaf intervals: their misses added."""
    out: exp.Expr | None = None
    for m in misses:
        out = m.copy() if out is None else exp.Add(this=out, expression=m.copy())
    return out if out is not None else exp.Literal.number(0)


def _int_literal(e: exp.Expr) -> bool:
    return isinstance(e, exp.Literal) and not e.is_string and str(e.this).isdigit()


def _positive_literal(e: exp.Expr) -> float | None:
    if isinstance(e, exp.Literal) and not e.is_string:
        try:
            v = float(e.this)
        except ValueError:
            return None
        return v if v > 0 else None
    return None


def _op(n: exp.Expr, a: exp.Expr, b: exp.Expr) -> exp.Expr:
    """``n``'s operator (with its flags: PostgreSQL's integer division) over ``a`` and ``b``."""
    out = n.copy()
    out.set("this", a.copy())
    out.set("expression", b.copy())
    return out


def _nonzero(e: exp.Expr) -> exp.Expr:
    return exp.Nullif(this=e.copy(), expression=exp.Literal.number(0))


__all__ = ["ENDS", "HIDDEN", "IV_LEAF", "Exprs", "Held", "Iv", "No", "Rel", "Scope"]
