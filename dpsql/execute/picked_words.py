"""Rows picked by noisy values, in words (newcomer25 #17, #2, #13): an ``ORDER BY`` of a released
statistic with ``LIMIT`` (or ``OFFSET``) and a ``HAVING`` threshold on one choose groups by their
noisy answers. Where the rows on either side of the cut are within the noise of each other (of
the threshold), the data may pick other groups; and the groups picked by a noisy value read high
(low, for an ascending order or a ``<`` threshold): the noise that lifted them past the cut is
in their answers, the winner's curse. Said once each, with what makes the cut sharper.

Decided from the released values and each value's noise interval alone (:attr:`Release.noise`:
its measures' noise at the stated level, no removed-mass reach): post-processing, nothing here
reads a private row. Two values are within each other's noise when their noise intervals
overlap (each holds its value's truth at the stated level, so the data may order them either
way); a value is within the noise of a threshold when its noise interval contains it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.execute.accuracy_words import level_text
from dpsql.execute.bounds_text import fmt
from dpsql.execute.noise import Release
from dpsql.execute.picked_keys import Key, key_of, reads_stats
from dpsql.sql.analysis import Analysis
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.wording import plain_sql, plural

Noise = tuple[float, float] | None
_OPS: dict[type[exp.Expr], str] = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


@dataclass(frozen=True)
class Picked:
    """What the words read: the statement's rows as shown (their release row ids, in order),
    every row its WHERE / HAVING keeps in its ORDER BY's order before LIMIT / OFFSET cut them,
    the stated level and, per statistic, its noise's half-width where one number says it (a
    COUNT's or SUM's; None: an AVG's interval is not symmetric)."""

    shown: Sequence[int]
    ranked: Sequence[int]
    confidence: float
    widths: Sequence[float | None]
    keyed: bool  # the groups' noise is sized for every declared key (auto_bounds_text.keyed_groups)


def ordered_term(a: Analysis) -> exp.Ordered | None:
    """The statement's first ORDER BY term when it reads released statistics (one, or an
    expression of them) and a LIMIT or OFFSET then cuts by it; None otherwise (an order by a
    key, no cut)."""
    order = a.outer.args.get("order")
    if order is None or not order.expressions or not cuts(a):
        return None
    term = order.expressions[0]
    return term if isinstance(term, exp.Ordered) and reads_stats(a, term.this) else None


def cuts(a: Analysis) -> bool:
    """Does the statement's LIMIT or OFFSET (not LIMIT ALL) cut its rows?"""
    limit = a.outer.args.get("limit")
    if isinstance(limit, exp.Limit) and isinstance(limit.expression, exp.Var):
        limit = None  # LIMIT ALL
    return limit is not None or a.outer.args.get("offset") is not None


def picked_notices(a: Analysis, rel: Release, p: Picked) -> tuple[str, ...]:
    """The words for the rows a LIMIT / OFFSET and a HAVING threshold picked by noisy values,
    the winner's curse said once; () where every cut is clear of the noise."""
    if not rel.noise or len(rel.noise) != len(rel.groups):
        return ()  # a release stored before its noise was kept, or none to read
    out: list[str] = []
    cursed = False
    for text, curse in _having(a, rel, p):
        out.append(text + ("" if cursed else curse) + _advice(a, p))
        cursed = True
    top = _top(a, rel, p, cursed)
    return (*out, top) if top else tuple(out)


def _overlap(x: Noise, y: Noise) -> bool:
    return x is not None and y is not None and x[0] <= y[1] and y[0] <= x[1]


def noise_text(
    confidence: float, key: Key, pairs: bool = True, ivs: tuple[Noise, Noise] | None = None
) -> str:
    """A cut's noise in words: 'each ±48.5 at 95%', or, where no one number says it (an AVG's,
    a fallback column's: :func:`dpsql.execute.picked_run.widths`), the two noise intervals
    compared, ``ivs``, as they are: 'their noise intervals at 95%, [785, 1,320] and [783,
    1,318], overlap'; or its intervals' level."""
    w = key.width
    level = level_text(confidence)
    if not pairs:
        return f"±{fmt(w)} at {level}" if w is not None else f"their noise intervals at {level}"
    if w is None:
        shown = [iv for iv in ivs or () if iv is not None and all(map(math.isfinite, iv))]
        if len(shown) == 2:  # (one that reaches a NULL, as a CASE's can, is not shown)
            a, b = (f"[{value_text(iv[0])}, {value_text(iv[1])}]" for iv in shown)
            return f"their noise intervals at {level}, {a} and {b}, overlap"
        return f"their noise intervals at {level} overlap"
    return f"each ±{fmt(w)} at {level}, so their noise intervals overlap"


def value_text(v: object) -> str:
    """A released value as its row shows it (not fmt's 3 digits: 75.05 and 75.22 read apart);
    NULL where there is none (an AVG whose noisy count came out below 1)."""
    if v is None:
        return "NULL"
    x = float(v)  # type: ignore[arg-type]
    if not math.isfinite(x):
        return str(x)
    return f"{x:,.0f}" if x == int(x) else f"{x:,.6g}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _advice(a: Analysis, p: Picked) -> str:
    """What makes a cut by noisy values sharper, as the project offers it."""
    keys = " and ".join(plain_sql(g.expr) for g in a.group_keys)
    fewer = (
        f", ask about fewer groups (a WHERE on {keys}: each group's noise here is sized for "
        "every declared key, the contribution bounds notice says why), or ask the data owner "
        "to declare max_groups_per_unit"
        if p.keyed and keys
        else f", or ask the data owner to declare the keys of {keys} (keys: in the policy: then "
        "no share of epsilon goes to choosing which groups to show)"
        if a.needs_selection and keys
        else ""
    )
    return f" For a sharper cut: raise dpsql.epsilon (the noise shrinks as it grows){fewer}."


def curse(high: bool, what: str) -> str:
    way, up = ("high", "up") if high else ("low", "down")
    return (
        f" The {what} read {way}: a group whose noise pushed it {up} past the cut is "
        "picked, one whose noise pushed it the other way is not, so their answers lean "
        f"{way} (the winner's curse), most of all near the cut."
    )


def _top(a: Analysis, rel: Release, p: Picked, cursed: bool) -> str:
    """ORDER BY a noisy value with LIMIT / OFFSET: which rows at the cut the noise may have
    swapped with rows not shown."""
    term = ordered_term(a)
    if term is None or not p.shown:
        return ""
    desc = bool(term.args.get("desc"))
    nulls_first = term.args.get("nulls_first")
    null_high = desc if nulls_first is None else bool(nulls_first) == desc
    key = key_of(a, rel, term.this, p.widths, null_high)
    if key is None:
        return ""
    place = {rid: i for i, rid in enumerate(p.ranked)}
    if any(r not in place for r in p.shown):
        return ""
    # tied values may come in another order in the ranked run (a full sort, not the LIMIT's
    # top-N): the cut is at the OFFSET written, else where the rows shown start in it
    off = offset_of(a.outer)
    start = min(off, len(p.ranked)) if off is not None else min(place[r] for r in p.shown)
    cut = [a.outer.args.get("limit"), a.outer.args.get("offset")]
    return cut_words(key, p.shown, p.ranked, start, term, cut, p.confidence, cursed, _advice(a, p))


def cut_words(
    key: Key,
    shown_rows: Sequence[int],
    ranked: Sequence[int],
    start: int,
    term: exp.Ordered,
    cut: Sequence[exp.Expr | None],
    confidence: float,
    cursed: bool,
    advice: str,
    lead: str | None = None,
) -> str:
    """The words for rows ``shown_rows`` (ids into ``key``) of ``ranked`` (every row in the
    order's order, before LIMIT / OFFSET: ``cut``), shown from position ``start``; "" where the
    cut is clear of the noise. ``lead``: what picks them (default ``ORDER BY ... LIMIT n``)."""
    shown = set(shown_rows)
    first, final = shown_rows[0], shown_rows[-1]
    end = start + len(shown_rows)
    desc = bool(term.args.get("desc"))
    nulls_first = term.args.get("nulls_first")

    def iv(rid: int) -> Noise:
        return key.noise[rid]

    after = [r for r in ranked[start:] if r not in shown and _overlap(iv(final), iv(r))]
    before = [r for r in ranked[:start] if r not in shown and _overlap(iv(first), iv(r))]
    n_after = sum(1 for r in ranked[start:] if r not in shown)
    nxt = next((r for r in ranked[start:] if r not in shown), None)
    nulls = (
        ""
        if nulls_first is None or bool(nulls_first) == desc
        else " NULLS " + ("FIRST" if nulls_first else "LAST")
    )  # (as written where it is not PostgreSQL's default)
    clause = " ".join(["DESC" if desc else "ASC", *(c.sql(POSTGRES) for c in cut if c)])
    clause = clause.replace(" ", nulls + " ", 1) if nulls else clause

    def val(rid: int) -> str:
        return value_text(key.values[rid])

    def some(k: int, n: int) -> str:
        if k == n:
            return {1: "the row", 2: "both rows"}.get(n, f"all {n:,} rows")  # not "all 2 rows"
        return f"{k:,} of the {n:,} rows"

    edge = {first, final, nxt, ranked[start - 1] if start else None}
    if not after and not before and edge & key.unbounded:
        return (
            f"{lead or f'ORDER BY {key.text} {clause}'} picks rows by noisy values through an "
            "expression whose noise dpsql cannot bound, so it cannot tell whether the cut is "
            "within the noise: other groups may belong among the rows shown (ORDER BY the statistic "
            "itself, or an arithmetic expression of statistics, gets words on its cut)."
            + ("" if cursed else curse(desc, "rows it picks"))
            + advice
        )
    if not after and not before:
        return ""
    last = (
        f"the {_ordinal(end)} row's" if not start else f"the last row's ({_ordinal(end)} in order)"
    )

    parts: list[tuple[str, tuple[Noise, Noise]]] = []
    if after:
        other = nxt if nxt is not None else after[0]
        parts.append(
            (
                f"{last}, {val(final)}, is within the noise of "
                f"{some(len(after), n_after)} it left out after it (the next: {val(other)}",
                (iv(final), iv(other if other in after else after[0])),
            )
        )
    if before:
        parts.append(
            (
                f"the first row's, {val(first)}, is within the noise of "
                f"{some(len(before), start)} its OFFSET skipped before it (the last: "
                f"{val(ranked[start - 1])}",
                (iv(first), iv(ranked[start - 1] if ranked[start - 1] in before else before[-1])),
            )
        )
    n = len(shown_rows)
    inside = any(_overlap(iv(shown_rows[k]), iv(shown_rows[k + 1])) for k in range(n - 1))
    order = f" The order of the {n} rows shown is within the noise too." if inside else ""
    return (
        f"{lead or f'ORDER BY {key.text} {clause}'} picks rows by a noisy value: "
        + "; and ".join(f"{x}; {noise_text(confidence, key, ivs=pair)})" for x, pair in parts)
        + f": other groups may belong among the rows shown.{order}"
        + ("" if cursed else curse(desc, "rows it picks"))
        + advice
    )


def offset_of(q: exp.Expr) -> int | None:
    """A query's OFFSET as a number (0 without one; None: not a constant)."""
    off = q.args.get("offset")
    if off is None:
        return 0
    n = off.expression
    if isinstance(n, exp.Literal) and not n.is_string and str(n.this).isdigit():
        return int(n.this)
    return None


def _threshold(node: exp.Expr) -> float | None:
    """A HAVING comparison's constant side as a number (``1800000``, ``-5``, ``1.5e3``)."""
    neg = isinstance(node, exp.Neg)
    lit = node.this if neg else node
    if not isinstance(lit, exp.Literal) or lit.is_string:
        return None
    try:
        v = float(str(lit.this))
    except ValueError:
        return None
    return -v if neg else v


def _comparisons(a: Analysis) -> list[tuple[exp.Expr, str, float]]:
    """The outer WHERE's (the statement's HAVING) comparisons of a statistic (or an expression
    of statistics) with a constant, ANDed: (its side, operator with it on its left, constant)."""
    where = a.outer.args.get("where")
    if where is None:
        return []
    out = []
    for c in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
        op = _OPS.get(type(c))
        if op is None:
            continue
        side, t = c.this, _threshold(c.expression)
        if not reads_stats(a, side) or t is None:
            side, t, op = c.expression, _threshold(c.this), _FLIP[op]
        if reads_stats(a, side) and t is not None:
            out.append((side, op, t))
    return out


def _having(a: Analysis, rel: Release, p: Picked) -> list[tuple[str, str]]:
    """HAVING stat > c: the groups within the noise of c, kept and left out (left out only
    where that comparison is the whole HAVING, so it alone left them out)."""
    comps = _comparisons(a)
    out = []
    kept = set(p.ranked)
    for side, op, t in comps:
        key = key_of(a, rel, side, p.widths)
        if key is None:
            continue
        near = [r for r in range(len(rel.groups)) if _contains(key.noise[r], t)]
        if not near:
            continue
        k = [r for r in near if r in kept]
        dropped = len(near) - len(k) if len(comps) == 1 and _single(a) else 0
        sides = [
            f"{plural(len(k), 'group')} kept ({_named(rel, k, key, len(a.group_keys))})"
            if k
            else ""
        ]
        sides.append(f"{plural(dropped, 'group')} left out" if dropped else "")
        which = " and ".join(x for x in sides if x)
        if not which:
            continue
        one = len(k) + dropped == 1
        out.append(
            (
                f"HAVING {key.text} {op} {fmt(t)} picks groups by a noisy value: {which} "
                f"{'lies' if one else 'lie'} within the noise of {fmt(t)} "
                f"({noise_text(p.confidence, key, False)}): in the data {'it' if one else 'each'} may be on "
                "the other side of it.",
                curse(op.startswith(">"), "groups it keeps"),
            )
        )
    return out


def _single(a: Analysis) -> bool:
    where = a.outer.args.get("where")
    return where is not None and not isinstance(where.this, exp.And)


def _contains(iv: Noise, t: float) -> bool:
    return iv is not None and iv[0] <= t <= iv[1]


def _named(rel: Release, rids: Sequence[int], key: Key, n: int) -> str:
    """Up to three groups by their ``n`` keys and answers: 'W: 1,800,860'."""

    def group(r: int) -> str:  # (grouping sets: the keys without the set's number)
        ks = ["NULL" if k is None else str(k) for k in rel.groups[r][:n]]
        return ", ".join(ks) if ks else "the one row"

    shown = [f"{group(r)}: {value_text(key.values[r])}" for r in rids[:3]]
    more = f" and {len(rids) - 3} more" if len(rids) > 3 else ""
    return "; ".join(shown) + more
