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
from dpsql.sql.analysis import Analysis
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


def ordered_stat(a: Analysis) -> tuple[int, bool] | None:
    """The statistic the statement's first ORDER BY term is (its index, descending), when a
    LIMIT or OFFSET then cuts by it; None otherwise (an order by a key, an expression)."""
    order = a.outer.args.get("order")
    if order is None or not order.expressions or not cuts(a):
        return None
    term = order.expressions[0]
    si = stat_of(a, term.this)
    return None if si is None else (si, bool(term.args.get("desc")))


def cuts(a: Analysis) -> bool:
    """Does the statement's LIMIT or OFFSET (not LIMIT ALL) cut its rows?"""
    limit = a.outer.args.get("limit")
    if isinstance(limit, exp.Limit) and isinstance(limit.expression, exp.Var):
        limit = None  # LIMIT ALL
    return limit is not None or a.outer.args.get("offset") is not None


def stat_of(a: Analysis, node: exp.Expr) -> int | None:
    """The statistic index ``node`` (an ORDER BY or HAVING operand of the outer query) reads
    as a whole: ``_dp._dp_s0``, an output's alias, or its position; None for anything else."""
    outs = a.outer.expressions
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        k = int(node.this)
        node = outs[k - 1] if 1 <= k <= len(outs) else node
    elif isinstance(node, exp.Column) and not node.table:
        node = next((o for o in outs if o.alias_or_name == node.name), node)
    body = node.this if isinstance(node, exp.Alias) else node
    if isinstance(body, exp.Column) and body.name.startswith("_dp_s") and body.name[5:].isdigit():
        si = int(body.name[5:])
        return si if si < len(a.statistics) else None
    return None


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


def _noise_text(p: Picked, si: int, pairs: bool = True) -> str:
    """A statistic's noise in words: 'each ±48.5 at 95%', or its intervals' level."""
    w = p.widths[si] if si < len(p.widths) else None
    level = level_text(p.confidence)
    if not pairs:
        return f"±{fmt(w)} at {level}" if w is not None else f"their noise intervals at {level}"
    if w is None:
        return f"their noise intervals at {level} overlap"
    return f"each ±{fmt(w)} at {level}, so their noise intervals overlap"


def _value(v: object) -> str:
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


def _curse(high: bool, what: str) -> str:
    way, up = ("high", "up") if high else ("low", "down")
    return (
        f" The {what} read {way}: a group whose noise pushed it {up} past the cut is "
        "picked, one whose noise pushed it the other way is not, so their answers lean "
        f"{way} (the winner's curse), most of all near the cut."
    )


def _top(a: Analysis, rel: Release, p: Picked, cursed: bool) -> str:
    """ORDER BY a noisy value with LIMIT / OFFSET: which rows at the cut the noise may have
    swapped with rows not shown."""
    got = ordered_stat(a)
    if got is None or not p.shown:
        return ""
    si, desc = got
    place = {rid: i for i, rid in enumerate(p.ranked)}
    if any(r not in place for r in p.shown):
        return ""
    # tied values may come in another order in the ranked run (a full sort, not the LIMIT's
    # top-N): the cut is at the OFFSET written, else where the rows shown start in it
    off = _offset(a)
    start = min(off, len(p.ranked)) if off is not None else min(place[r] for r in p.shown)
    end = start + len(p.shown)
    shown = set(p.shown)

    def iv(rid: int) -> Noise:
        return rel.noise[rid][si]

    after = [r for r in p.ranked[start:] if r not in shown and _overlap(iv(p.shown[-1]), iv(r))]
    before = [r for r in p.ranked[:start] if r not in shown and _overlap(iv(p.shown[0]), iv(r))]
    n_after = sum(1 for r in p.ranked[start:] if r not in shown)
    nxt = next((r for r in p.ranked[start:] if r not in shown), None)
    if not after and not before:
        return ""
    s = a.statistics[si]
    cut = [a.outer.args.get("limit"), a.outer.args.get("offset")]
    clause = " ".join(["DESC" if desc else "ASC", *(c.sql("postgres") for c in cut if c)])

    def val(rid: int) -> str:
        return _value(rel.stats[rid][si])

    def some(k: int, n: int) -> str:
        if k == n:
            return "the row" if n == 1 else f"all {n:,} rows"
        return f"{k:,} of the {n:,} rows"

    last = (
        f"the {_ordinal(end)} row's" if not start else f"the last row's ({_ordinal(end)} in order)"
    )

    parts = []
    if after:
        parts.append(
            f"{last}, {val(p.shown[-1])}, is within the noise of "
            f"{some(len(after), n_after)} it left out after it (the next: "
            f"{val(nxt if nxt is not None else after[0])}"
        )
    if before:
        parts.append(
            f"the first row's, {val(p.shown[0])}, is within the noise of "
            f"{some(len(before), start)} its OFFSET skipped before it (the last: "
            f"{val(p.ranked[start - 1])}"
        )
    inside = any(_overlap(iv(p.shown[k]), iv(p.shown[k + 1])) for k in range(len(p.shown) - 1))
    order = (
        f" The order of the {len(p.shown)} rows shown is within the noise too." if inside else ""
    )
    return (
        f"ORDER BY {s.sql} {clause} picks rows by a noisy value: "
        + "; and ".join(f"{x}; {_noise_text(p, si)})" for x in parts)
        + f": other groups may belong among the rows shown.{order}"
        + ("" if cursed else _curse(desc, "rows it picks"))
        + _advice(a, p)
    )


def _offset(a: Analysis) -> int | None:
    """The statement's OFFSET as a number (0 without one; None: not a constant)."""
    off = a.outer.args.get("offset")
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


def _comparisons(a: Analysis) -> list[tuple[int, str, float]]:
    """The outer WHERE's (the statement's HAVING) comparisons of one statistic with a constant,
    ANDed: (statistic, operator with the statistic on its left, constant)."""
    where = a.outer.args.get("where")
    if where is None:
        return []
    out = []
    for c in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
        op = _OPS.get(type(c))
        if op is None:
            continue
        si, t = stat_of(a, c.this), _threshold(c.expression)
        if si is None or t is None:
            si, t, op = stat_of(a, c.expression), _threshold(c.this), _FLIP[op]
        if si is not None and t is not None:
            out.append((si, op, t))
    return out


def _having(a: Analysis, rel: Release, p: Picked) -> list[tuple[str, str]]:
    """HAVING stat > c: the groups within the noise of c, kept and left out (left out only
    where that comparison is the whole HAVING, so it alone left them out)."""
    comps = _comparisons(a)
    out = []
    kept = set(p.ranked)
    for si, op, t in comps:
        near = [r for r in range(len(rel.groups)) if _contains(rel.noise[r][si], t)]
        if not near:
            continue
        s = a.statistics[si]
        k = [r for r in near if r in kept]
        dropped = len(near) - len(k) if len(comps) == 1 and _single(a) else 0
        sides = [f"{plural(len(k), 'group')} kept ({_named(rel, k, si)})" if k else ""]
        sides.append(f"{plural(dropped, 'group')} left out" if dropped else "")
        which = " and ".join(x for x in sides if x)
        if not which:
            continue
        one = len(k) + dropped == 1
        out.append(
            (
                f"HAVING {s.sql} {op} {fmt(t)} picks groups by a noisy value: {which} "
                f"{'lies' if one else 'lie'} within the noise of {fmt(t)} "
                f"({_noise_text(p, si, False)}): in the data {'it' if one else 'each'} may be on "
                "the other side of it.",
                _curse(op.startswith(">"), "groups it keeps"),
            )
        )
    return out


def _single(a: Analysis) -> bool:
    where = a.outer.args.get("where")
    return where is not None and not isinstance(where.this, exp.And)


def _contains(iv: Noise, t: float) -> bool:
    return iv is not None and iv[0] <= t <= iv[1]


def _named(rel: Release, rids: Sequence[int], si: int) -> str:
    """Up to three groups by their keys and answers: 'W: 1,800,860'."""

    def key(r: int) -> str:
        ks = [str(k) for k in rel.groups[r]]
        return ", ".join(ks) if ks else "the one row"

    shown = [f"{key(r)}: {_value(rel.stats[r][si])}" for r in rids[:3]]
    more = f" and {len(rids) - 3} more" if len(rids) > 3 else ""
    return "; ".join(shown) + more
