"""A withheld value stays withheld through a tree's post-processing (null30).

A statement of several DP leaves (:mod:`dpsql.sql.tree`) runs its post-processing in PostgreSQL
over the leaves' released rows. A leaf's output that reads an aggregate (``AVG(income) AS a``)
is NULL where dpsql withheld it (no clear answer at this epsilon), and there it is unknown, not
missing. Over it, the constructs that read NULL as "no value" (:data:`NON_STRICT`: COALESCE,
CASE, IS NULL, NULLIF, GREATEST/LEAST, CONCAT), the aggregates that skip NULLs (``COUNT(a)``,
``SUM(a)``, ``MAX(a)``, ``string_agg``) and the windows that do (``SUM(a) OVER ()``) would put a
confident value in its place. :func:`hold_post` rewrites each post-processing block so they are
NULL wherever one of their inputs is withheld:

* a non-strict construct: ``CASE WHEN NOT (<input> IS NULL [AND <its row is there>]) ... THEN
  <it> END``;
* an aggregate: ``CASE WHEN COUNT(*) FILTER (WHERE <an input withheld>) = 0 THEN <it> END``
  (NULL for a group with a withheld input; an empty group keeps its SQL answer);
* a window: the same count over the window's partition.

Which inputs may be withheld is traced by column, block by block from the leaves up (a CTE over a
CTE, a subquery, UNION branches): a block's output that reads one may be withheld in turn.

"No rows" stays SQL's: on the nullable side of a LEFT JOIN (``regions r LEFT JOIN (...) s ON
s.region = r.region``) a NULL is withheld only where the row is there, told by a column of ``s``
the ON clause equates (NULL only for a row the join did not find), so
``COALESCE(s.total, 0)`` is 0 for a region with no released row, as SQL says. Where no such
column is there (a RIGHT or FULL join, an ON without an equality on it), every NULL of a
withholdable column is read as withheld: more NULLs, never a default for an unknown value.
Pure function of the post-processing tree and the leaves' output names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.sql import functions as fn
from dpsql.sql.post_guards import GUARD, HELD
from dpsql.sql.select_outer import item_name
from dpsql.sql.tables import cte_body
from dpsql.sql.withheld import NON_STRICT

_COND = (
    "dpsql_withheld_cond"  # meta on a held aggregate or window: its condition (no input withheld)
)


_Outputs = Callable[[exp.Expr], frozenset[str]]
_Test = Callable[[exp.Column], exp.Expr | None]  # a column's "withheld here" test, or None


@dataclass(frozen=True)
class _Source:
    names: frozenset[str]  # its columns that may be withheld
    present: exp.Expr | None  # TRUE where its row is there (None: always, as far as known)


def hold_post(
    post: exp.Expr, leaves: Sequence[frozenset[str]], leaf_of: Callable[[exp.Select], int | None]
) -> exp.Expr:
    """``post`` (modified in place) with every block's reads of withheld values held (module
    doc). ``leaves[i]``: leaf ``i``'s outputs that read an aggregate; ``leaf_of(select)``: the
    leaf number a placeholder SELECT stands for, or None."""
    memo: dict[int, frozenset[str]] = {}

    def outputs(q: exp.Expr) -> frozenset[str]:
        if isinstance(q, exp.Subquery):
            q = q.this
        if id(q) in memo:
            return memo[id(q)]
        memo[id(q)] = frozenset()  # (a recursive CTE reading itself: nothing known yet)
        got: frozenset[str] = frozenset()
        if isinstance(q, exp.Select):
            n = leaf_of(q)
            got = leaves[n] if n is not None else _block(q, outputs)
        elif isinstance(q, exp.SetOperation):
            left, right = outputs(q.this), outputs(q.expression)
            ln, rn = _names(q.this), _names(q.expression)
            got = frozenset(
                n for i, n in enumerate(ln) if n in left or (i < len(rn) and rn[i] in right)
            )
        memo[id(q)] = got
        return got

    outputs(post)
    for s in list(post.find_all(exp.Select)):  # scalar and IN subqueries, CTEs not read
        outputs(s)
    return post


def withholdable(leaf: exp.Select) -> frozenset[str]:
    """A leaf's outputs that read an aggregate (NULL where it is withheld)."""
    return frozenset(
        item_name(e).lower() for e in leaf.expressions if any(fn.is_aggregate(n) for n in e.walk())
    )


def _names(q: exp.Expr) -> list[str]:
    while isinstance(q, exp.Subquery):
        q = q.this
    if isinstance(q, exp.SetOperation):
        return _names(q.this)
    if isinstance(q, exp.Select):
        return [item_name(e).lower() for e in q.expressions]
    return []


def _block(b: exp.Select, outputs: _Outputs) -> frozenset[str]:
    sources: dict[str, _Source] = {}
    src = b.args.get("from_")
    if src is not None:
        _add(sources, src.this, None, outputs)
    for j in b.args.get("joins") or []:
        present: exp.Expr | None = None
        alias = j.this.alias_or_name.lower()
        if j.args.get("side", "").upper() == "LEFT":
            present = _presence(j, alias)
        _add(sources, j.this, present, outputs)
    if not any(s.names for s in sources.values()):
        return frozenset()

    def withheld(c: exp.Column) -> exp.Expr | None:
        s = sources.get(c.table.lower()) if c.table else None
        if s is None and not c.table:
            s = next((x for x in sources.values() if c.name.lower() in x.names), None)
        if s is None or c.name.lower() not in s.names:
            return None
        null: exp.Expr = exp.Is(this=c.copy(), expression=exp.Null())
        return null if s.present is None else exp.paren(exp.and_(null, s.present.copy()))

    names = [item_name(e.this if isinstance(e, exp.Window) else e) for e in b.expressions]
    items = []
    for i, name in enumerate(names):  # PostgreSQL's name for each, kept
        _hold_aggregates(b.expressions[i], b, withheld)
        e = b.expressions[i]  # (replaced where it was an aggregate held itself)
        new = e.transform(lambda x: _hold_construct(x, b, withheld), copy=False)
        items.append(_alias(new, name) if new.meta.get(HELD) else new)
    b.set("expressions", items)
    for k in ("where", "having", "order", "qualify"):  # (roots are clauses: held inside)
        n = b.args.get(k)
        if isinstance(n, exp.Expr):
            _hold_aggregates(n, b, withheld)
            n.transform(lambda x: _hold_construct(x, b, withheld), copy=False)
    star = any(isinstance(e, exp.Star) for e in b.expressions)
    out = {n for s in sources.values() for n in s.names} if star else set()
    for e in b.expressions:
        if _reads(e, b, withheld):
            out.add(item_name(e).lower())
    return frozenset(out)


def _alias(e: exp.Expr, name: str) -> exp.Expr:
    return exp.alias_(e, name, quoted=True, copy=False)


def _add(
    sources: dict[str, _Source], node: exp.Expr, present: exp.Expr | None, outputs: _Outputs
) -> None:
    alias = node.alias_or_name.lower()
    names: frozenset[str] = frozenset()
    if isinstance(node, exp.Subquery):
        names = outputs(node.this)
    elif isinstance(node, exp.Table):
        body = cte_body(node)
        names = outputs(body) if body is not None else frozenset()
    sources[alias] = _Source(names, present)


def _presence(j: exp.Join, alias: str) -> exp.Expr | None:
    """A column of the joined source the ON clause equates (non-NULL where its row is there)."""
    using = j.args.get("using")
    if using:
        name = using[0].name if isinstance(using[0], exp.Expr) else str(using[0])
        return exp.Not(this=exp.Is(this=exp.column(name, alias), expression=exp.Null()))
    on = j.args.get("on")
    conj = list(on.flatten()) if isinstance(on, exp.And) else [on]
    for c in conj:
        if isinstance(c, exp.EQ):
            for side in (c.this, c.expression):
                if isinstance(side, exp.Column) and side.table.lower() == alias:
                    return exp.Not(this=exp.Is(this=side.copy(), expression=exp.Null()))
    return None


def _own(n: exp.Expr, b: exp.Select) -> bool:
    """Whether ``n`` belongs to block ``b``'s own scope (not a subquery's inside it)."""
    p = n.parent
    while p is not None and p is not b:
        if isinstance(p, exp.Select):
            return False
        p = p.parent
    return p is b


def _bare(n: exp.Expr, b: exp.Select, withheld: _Test) -> list[exp.Expr]:
    """The withheld-tests of the columns ``n`` reads outside a held aggregate or window."""
    out: list[exp.Expr] = []
    for c in n.find_all(exp.Column):
        if not _own(c, b) or any(a.meta.get(_COND) is not None for a in _up_to(c, n)):
            continue
        w = withheld(c)
        if w is not None:
            out.append(w)
    return out


def _up_to(c: exp.Expr, top: exp.Expr) -> list[exp.Expr]:
    out, p = [], c.parent
    while p is not None:
        out.append(p)
        if p is top:
            break
        p = p.parent
    return out


def _held_inside(n: exp.Expr) -> list[exp.Expr]:
    return [x for x in n.walk() if x is not n and x.meta.get(_COND) is not None]


def _reads(n: exp.Expr, b: exp.Select, withheld: _Test) -> bool:
    return bool(_bare(n, b, withheld) or _held_inside(n) or n.meta.get(_COND) is not None)


def _none_withheld(tests: list[exp.Expr]) -> exp.Expr:
    return exp.EQ(
        this=exp.Filter(
            this=exp.Count(this=exp.Star()),
            expression=exp.Where(this=exp.or_(*tests) if len(tests) > 1 else tests[0]),
        ),
        expression=exp.Literal.number(0),
    )


def _hold_aggregates(node: exp.Expr, b: exp.Select, withheld: _Test) -> None:
    """Each aggregate and window of ``b`` in ``node`` reading a withholdable column, held."""
    found = [
        n
        for n in node.find_all(exp.Window, exp.AggFunc)
        if _own(n, b) and not (isinstance(n, exp.AggFunc) and isinstance(n.parent, exp.Window))
        and not (isinstance(n, exp.AggFunc) and isinstance(n.parent, exp.Filter)
                 and isinstance(n.parent.parent, exp.Window))
    ]  # fmt: skip
    for n in sorted(found, key=_depth, reverse=True):  # innermost first
        tests = _bare(n, b, withheld)
        if not tests:
            continue
        cond = _none_withheld(tests)
        if isinstance(n, exp.Window):
            part = [p.copy() for p in n.args.get("partition_by") or []]
            cond = exp.EQ(
                this=exp.Window(this=cond.this, partition_by=part or None),
                expression=exp.Literal.number(0),
            )
        target = n.parent if isinstance(n.parent, exp.Filter) else n
        case = exp.Case(ifs=[exp.If(this=cond, true=target.copy())])
        case.meta[GUARD] = case.meta[HELD] = True
        case.meta[_COND] = cond
        target.replace(case)


def _depth(n: exp.Expr) -> int:
    d, p = 0, n.parent
    while p is not None:
        d, p = d + 1, p.parent
    return d


def _hold_construct(x: exp.Expr, b: exp.Select, withheld: _Test) -> exp.Expr:
    if not isinstance(x, NON_STRICT) or x.meta.get(GUARD) or not _own(x, b):
        return x
    if any(p.meta.get(HELD) for p in _up_to(x, b)):
        return x  # inside a held aggregate or construct: held with it
    conds = [exp.Not(this=t) for t in _bare(x, b, withheld)]
    conds += [h.meta[_COND].copy() for h in _held_inside(x)]
    if not conds:
        return x
    case = exp.Case(ifs=[exp.If(this=exp.and_(*conds), true=x)])
    case.meta[GUARD] = case.meta[HELD] = True
    return case
