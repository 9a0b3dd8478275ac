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
* a window: the same count over the rows its frame reads (``OVER`` the same window), the one
  row a LAG/LEAD reads (``LAG(<withheld>, k) OVER`` it), and over the whole partition where it
  partitions or orders by a withheld value (every row's place rests on it).

Which inputs may be withheld is traced by column, block by block from the leaves up (a CTE over a
CTE, a subquery, UNION branches): a block's output that reads one may be withheld in turn.

"No rows" stays SQL's: on the nullable side of an outer join (``regions r LEFT JOIN (...) s ON
s.region = r.region``, the left side of a RIGHT JOIN) a NULL is withheld only where the row is
there, told by a column of ``s`` the ON clause (or USING) equates: NULL only for a row the join
did not find, so ``COALESCE(s.total, 0)`` is 0 for a region with no released row, as SQL says.
Where no such column tells it (a FULL JOIN, whose unmatched rows keep their NULL keys; an ON
without an equality on that side; a grouped block whose GROUP BY does not hold that column),
every NULL of a withholdable column is read as withheld: more NULLs, never a default for an
unknown value, and the test is marked :data:`GUESSED` so the notice says so.

A query nested in an expression (a scalar subquery, ``IN (SELECT ...)``, ``ARRAY(SELECT ...)``)
whose value column may be withheld is withheld where one of its rows has it withheld
(``EXISTS (SELECT 1 FROM (<it, with its value's own test beside it>) q(v, w) WHERE w)``): no
row found, or a ``MAX`` over none, is SQL's NULL, so ``COALESCE((SELECT a FROM s WHERE s.g =
k.g), 0)`` is 0 where there is no such row. A
LATERAL subquery is a source like any other; a function source (``unnest(ARRAY[s.a, 1]) u(x)``)
reading a withholdable column has each of its columns withholdable (NULL where it is).
An array or JSON value built from a withheld one (``ARRAY[a, 1]``, ``json_build_object('a',
a)``, ``ARRAY_AGG(a)``) is withheld whole (:data:`BUILDERS`): its elements are not traced, and
``array_to_string`` or ``jsonb_strip_nulls`` would drop a NULL element silently; ``format`` and
``quote_nullable`` turn NULL into text. Pure function of the post-processing tree and the
leaves' output names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.sql import functions as fn
from dpsql.sql.post_guards import GUARD, HELD
from dpsql.sql.select_outer import item_name
from dpsql.sql.tables import cte_body
from dpsql.sql.withheld import NON_STRICT

_COND = (
    "dpsql_withheld_cond"  # meta on a held aggregate or window: its condition (no input withheld)
)
_NAMES = "dpsql_withheld_names"  # meta on a block done: its outputs that may be withheld
CLAUSES = "dpsql_withheld_clauses"  # meta on a block done: its clauses reading such a value
GUESSED = "dpsql_withheld_guessed"  # meta on a wrapper whose test can't tell "no row" apart
_Q, _V, _W = "_dpsql_q", "_dpsql_v", "_dpsql_w"  # a nested query's rows in its withheld-test
_TEST = "dpsql_withheld_test"  # meta on a block done: where its first output is withheld

# built values that keep or drop a NULL inside (held whole: module doc)
BUILDERS: tuple[type[exp.Expr], ...] = (exp.Array, exp.Format)
_BUILDER_NAMES = frozenset(
    "json_build_object jsonb_build_object json_build_array jsonb_build_array quote_nullable".split()
)

_Outputs = Callable[[exp.Expr], frozenset[str]]


@dataclass(frozen=True)
class _Source:
    names: frozenset[str]  # its columns that may be withheld
    present: exp.Expr | None  # TRUE where its row is there (None: always, as far as known)
    guessed: bool = False  # nullable by an outer join, "no row" not told apart (module doc)


@dataclass
class _Reads:
    """The withheld-tests of one block's columns and nested queries."""

    block: exp.Select
    outputs: _Outputs
    sources: dict[str, _Source] = field(default_factory=dict)

    def column(self, c: exp.Column, grouped_here: bool = False) -> exp.Expr | None:
        """``c``'s "withheld here" test, or None. ``grouped_here``: read outside an aggregate
        of a grouped block (a presence column must be grouped there)."""
        s = self.sources.get(c.table.lower()) if c.table else None
        if s is None and not c.table:
            s = next((x for x in self.sources.values() if c.name.lower() in x.names), None)
        if s is None or c.name.lower() not in s.names:
            return None
        null: exp.Expr = exp.Is(this=c.copy(), expression=exp.Null())
        present, guessed = s.present, s.guessed
        if present is not None and grouped_here and not _grouped(self.block, present):
            present, guessed = None, True
        out = null if present is None else exp.paren(exp.and_(null, present.copy()))
        if guessed:
            out.meta[GUESSED] = True
        return out

    def query(self, q: exp.Expr) -> exp.Expr | None:
        """A nested query's test: one of its rows has its value column withheld. A block done
        knows its first output's own test (:data:`_TEST`: a MAX over no row stays SQL's NULL);
        else (a leaf's rows, a set operation) a NULL value is read as withheld."""
        names = self.outputs(q)
        first = _names(q)[:1]  # (a leaf's placeholder, SELECT *: its names are the leaf's)
        star = isinstance(q, exp.Select) and any(isinstance(e, exp.Star) for e in q.expressions)
        if not names or (first and not star and first[0] not in names):
            return None
        inner = q.copy()
        test = q.meta.get(_TEST)
        cols = [exp.to_identifier(_W)]
        if isinstance(test, exp.Expr) and isinstance(inner, exp.Select):
            inner.set("expressions", [inner.expressions[0], exp.alias_(test.copy(), _W)])
            cols = [exp.to_identifier(_V), *cols]
            where: exp.Expr = exp.column(_W, _Q)
        else:
            where = exp.Is(this=exp.column(_W, _Q), expression=exp.Null())
        rows = exp.Subquery(
            this=inner, alias=exp.TableAlias(this=exp.to_identifier(_Q), columns=cols)
        )
        return exp.Exists(this=exp.select("1").from_(rows).where(where))


def hold_post(
    post: exp.Expr, leaves: Sequence[frozenset[str]], leaf_of: Callable[[exp.Select], int | None]
) -> exp.Expr:
    """``post`` (modified in place) with every block's reads of withheld values held (module
    doc). ``leaves[i]``: leaf ``i``'s outputs that read an aggregate; ``leaf_of(select)``: the
    leaf number a placeholder SELECT stands for, or None."""
    busy: set[int] = set()

    def outputs(q: exp.Expr) -> frozenset[str]:
        if isinstance(q, exp.Subquery):
            q = q.this
        done = q.meta.get(_NAMES)
        if isinstance(done, frozenset):  # (a copy of a block done keeps its meta)
            return done
        if id(q) in busy:
            return frozenset()  # (a recursive CTE reading itself: nothing known yet)
        busy.add(id(q))
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
        q.meta[_NAMES] = got
        return got

    outputs(post)
    for s in list(post.find_all(exp.Select)):  # IN subqueries of a WHERE, CTEs not read
        outputs(s)
    return post


def withheld_names(block: exp.Expr) -> frozenset[str]:
    """A post-processing block's outputs that may be withheld (after :func:`hold_post`)."""
    got = block.meta.get(_NAMES)
    return got if isinstance(got, frozenset) else frozenset()


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


def _grouped(b: exp.Select, e: exp.Expr) -> bool:
    """Whether ``e`` (a presence test) reads only columns ``b``'s GROUP BY holds."""
    group = b.args.get("group")
    keys = {k.sql() for k in group.expressions} if group is not None else set()
    return all(c.sql() in keys for c in e.find_all(exp.Column))


def _is_grouped(b: exp.Select) -> bool:
    if b.args.get("group") is not None or b.args.get("having") is not None:
        return True
    return any(
        isinstance(n, exp.AggFunc) and _own(n, b) and not isinstance(n.parent, exp.Window)
        for e in b.expressions
        for n in e.find_all(exp.AggFunc)
    )


def _block(b: exp.Select, outputs: _Outputs) -> frozenset[str]:
    reads = _Reads(b, outputs)
    src = b.args.get("from_")
    joins = list(b.args.get("joins") or [])
    nodes = ([src.this] if src is not None else []) + [j.this for j in joins]
    for node in nodes:
        reads.sources[node.alias_or_name.lower()] = _Source(_source_names(node, reads), None)
    for alias, by in _nullable(nodes, joins).items():
        s = reads.sources[alias]
        if s.names:
            present = _presence(by, alias)
            reads.sources[alias] = _Source(s.names, present, guessed=present is None)
    if not any(s.names for s in reads.sources.values()) and not _nested(b):
        return frozenset()
    grouped = _is_grouped(b)
    items = []
    for i, name in enumerate(
        [item_name(e.this if isinstance(e, exp.Window) else e) for e in b.expressions]
    ):  # PostgreSQL's name for each, kept
        _hold_aggregates(b.expressions[i], reads)
        e = b.expressions[i]  # (replaced where it was an aggregate held itself)
        new = e.transform(lambda x: _hold_construct(x, reads, grouped), copy=False)
        items.append(_alias(new, name) if new.meta.get(HELD) else new)
    b.set("expressions", items)
    for k in ("where", "having", "order", "qualify"):  # (roots are clauses: held inside)
        n = b.args.get(k)
        if isinstance(n, exp.Expr):
            _hold_aggregates(n, reads)
            g = grouped and k != "where"
            n.transform(lambda x, g=g: _hold_construct(x, reads, g), copy=False)
    if b.expressions and not isinstance(b.expressions[0], exp.Star):  # (for a nested query)
        first = b.expressions[0].unalias()
        tests = _bare(first, reads, grouped=grouped)
        tests += [exp.Not(this=h.meta[_COND].copy()) for h in first.walk()
                  if h.meta.get(_COND) is not None and _own(h, b)]  # fmt: skip
        b.meta[_TEST] = exp.or_(*tests) if tests else None
    star = any(isinstance(e, exp.Star) for e in b.expressions)
    out = {n for s in reads.sources.values() for n in s.names} if star else set()
    for e in b.expressions:
        if _reads(e, reads):
            out.add(item_name(e).lower())
    order = b.args.get("order")  # (by an output's name too: ORDER BY p)
    by_name = order is not None and any(
        not c.table and c.name.lower() in out and _own(c, b) for c in order.find_all(exp.Column)
    )
    b.meta[CLAUSES] = frozenset(
        k
        for k in ("where", "having", "order")
        if b.args.get(k) and (_reads(b.args[k], reads) or (k == "order" and by_name))
    )
    return frozenset(out)


def _nested(b: exp.Select) -> bool:
    """Whether ``b`` has a query nested in an expression (its value may be withheld)."""
    return any(
        True for k in ("expressions", "where", "having", "order", "qualify")
        for v in ([b.args[k]] if isinstance(b.args.get(k), exp.Expr) else b.args.get(k) or [])
        for _ in v.find_all(exp.Select)
    )  # fmt: skip


def _alias(e: exp.Expr, name: str) -> exp.Expr:
    return exp.alias_(e, name, quoted=True, copy=False)


def _source_names(node: exp.Expr, reads: _Reads) -> frozenset[str]:
    """A FROM or JOIN source's columns that may be withheld (a subquery's, a CTE's, a LATERAL
    subquery's; every column of a function source reading a withholdable column)."""
    inner = node.this if isinstance(node, exp.Lateral) else node
    if isinstance(inner, exp.Subquery):
        return reads.outputs(inner.this)
    if isinstance(node, exp.Table) and not isinstance(node.this, exp.Func):
        body = cte_body(node)
        return reads.outputs(body) if body is not None else frozenset()
    if not _bare(inner, reads, node):
        return frozenset()
    alias = node.args.get("alias")
    cols = [c.name.lower() for c in alias.columns] if isinstance(alias, exp.TableAlias) else []
    return frozenset(cols or [node.alias_or_name.lower()])


def _nullable(nodes: list[exp.Expr], joins: list[exp.Join]) -> dict[str, list[exp.Join]]:
    """Each source an outer join may leave without a row, with the joins that may."""
    out: dict[str, list[exp.Join]] = {}
    for i, j in enumerate(joins):
        side = str(j.args.get("side") or "").upper()
        if side in ("LEFT", "FULL"):
            out.setdefault(j.this.alias_or_name.lower(), []).append(j)
        if side in ("RIGHT", "FULL"):
            for n in nodes[: i + 1]:
                out.setdefault(n.alias_or_name.lower(), []).append(j)
    return out


def _presence(by: list[exp.Join], alias: str) -> exp.Expr | None:
    """A column of the source the ON clauses (or USING) equate: non-NULL where its row is there
    (None under a FULL JOIN: its unmatched rows keep their NULL keys)."""
    if any(str(j.args.get("side") or "").upper() == "FULL" for j in by):
        return None
    for j in by:
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


def _own(n: exp.Expr, b: exp.Expr) -> bool:
    """Whether ``n`` belongs to block ``b``'s own scope (not a subquery's inside it)."""
    p = n.parent
    while p is not None and p is not b:
        if isinstance(p, exp.Select):
            return False
        p = p.parent
    return p is b


def _queries(n: exp.Expr, scope: exp.Expr) -> list[exp.Expr]:
    """The queries nested in expression ``n`` of ``scope`` (outermost; not an EXISTS's)."""
    out: list[exp.Expr] = []
    for q in n.find_all(exp.Select, exp.SetOperation):
        if q is n or isinstance(q.parent, exp.SetOperation):
            continue  # (a branch: its set operation is the query)
        if _own(q, scope) and not any(isinstance(p, exp.Exists) for p in _up_to(q, scope)):
            out.append(q)
    return out


def _bare(n: exp.Expr, reads: _Reads, scope: exp.Expr | None = None, grouped: bool = False
          ) -> list[exp.Expr]:  # fmt: skip
    """The withheld-tests of the columns and nested queries ``n`` reads outside a held
    aggregate or window. ``grouped``: ``n`` is read outside an aggregate of a grouped block."""
    scope = scope if scope is not None else reads.block
    out: list[exp.Expr] = []
    for c in n.find_all(exp.Column):
        if not _own(c, scope) or any(a.meta.get(_COND) is not None for a in _up_to(c, n)):
            continue
        w = reads.column(c, grouped and not _in_aggregate(c, n))
        if w is not None:
            out.append(w)
    for q in _queries(n, scope):
        if any(a.meta.get(_COND) is not None for a in _up_to(q, n)):
            continue
        w = reads.query(q)
        if w is not None:
            out.append(w)
    return out


def _in_aggregate(c: exp.Expr, top: exp.Expr) -> bool:
    return any(isinstance(p, (exp.AggFunc, exp.Window)) for p in _up_to(c, top))


def _up_to(c: exp.Expr, top: exp.Expr) -> list[exp.Expr]:
    out, p = [], c.parent
    while p is not None:
        out.append(p)
        if p is top:
            break
        p = p.parent
    return out


def _held_inside(n: exp.Expr, b: exp.Select) -> list[exp.Expr]:
    """The held aggregates and windows of block ``b`` inside ``n`` (a nested query's own are
    its test's business: their conditions read its columns)."""
    return [x for x in n.walk() if x is not n and x.meta.get(_COND) is not None and _own(x, b)]


def _reads(n: exp.Expr, reads: _Reads) -> bool:
    return bool(_bare(n, reads) or _held_inside(n, reads.block) or n.meta.get(_COND) is not None)


def _none_withheld(tests: list[exp.Expr]) -> exp.Expr:
    return exp.EQ(
        this=exp.Filter(
            this=exp.Count(this=exp.Star()),
            expression=exp.Where(this=exp.or_(*tests) if len(tests) > 1 else tests[0]),
        ),
        expression=exp.Literal.number(0),
    )


def _hold_aggregates(node: exp.Expr, reads: _Reads) -> None:
    """Each aggregate and window of the block in ``node`` reading a withholdable column, held."""
    b = reads.block
    found = [
        n
        for n in node.find_all(exp.Window, exp.AggFunc)
        if _own(n, b) and not (isinstance(n, exp.AggFunc) and isinstance(n.parent, exp.Window))
        and not (isinstance(n, exp.AggFunc) and isinstance(n.parent, exp.Filter)
                 and isinstance(n.parent.parent, exp.Window))
    ]  # fmt: skip
    for n in sorted(found, key=_depth, reverse=True):  # innermost first
        tests = _bare(n, reads)
        if not tests:
            continue
        cond = _window_cond(n, reads) if isinstance(n, exp.Window) else _none_withheld(tests)
        target = n.parent if isinstance(n.parent, exp.Filter) else n
        case = _held(cond, target.copy(), tests)
        case.meta[_COND] = cond
        target.replace(case)


def _window_cond(w: exp.Window, reads: _Reads) -> exp.Expr:
    """A window's "no input withheld" condition, row by row. Its value reads the rows of its
    frame: ``COUNT(*) FILTER (WHERE <withheld>) OVER <the same window> = 0``; LAG/LEAD reads one
    row, or its default where there is none: ``NOT COALESCE(LAG(<withheld>, k) OVER <it>,
    <its default withheld>)`` (and its offset not withheld). Where it partitions or orders by a
    withheld value, every row of that partition rests on it: the same count over the partition,
    of the key columns' tests."""
    spec = _named(w, reads.block)
    parts = [*(spec.args.get("partition_by") or []), *(w.args.get("partition_by") or [])]
    part = [p.copy() for p in parts]
    keys = [*parts, spec.args.get("order"), w.args.get("order")]
    conds: list[exp.Expr] = []
    by = [t for k in keys if isinstance(k, exp.Expr) for t in _bare(k, reads)]
    if by:
        each = exp.Window(this=_none_withheld(by).this, partition_by=part or None)
        conds.append(exp.EQ(this=each, expression=exp.Literal.number(0)))
    f = w.this
    same = w.copy()
    if isinstance(f, (exp.Lag, exp.Lead)):  # the row it reads, else its default
        k, d = f.args.get("offset"), f.args.get("default")
        read = _bare(f.this, reads)
        instead = _bare(d, reads) if isinstance(d, exp.Expr) else []
        if read or instead:
            there = exp.or_(*read) if read else exp.false()
            same.set("this", type(f)(this=there, offset=k.copy() if k else None))
            none = exp.or_(*instead) if instead else exp.false()
            conds.append(exp.Not(this=exp.Coalesce(this=same, expressions=[none])))
        conds += [exp.Not(this=t) for t in (_bare(k, reads) if isinstance(k, exp.Expr) else [])]
    elif tests := _bare(f, reads):  # its frame's rows
        same.set("this", _none_withheld(tests).this)
        conds.append(exp.EQ(this=same, expression=exp.Literal.number(0)))
    return exp.and_(*conds) if conds else exp.true()


def _named(w: exp.Window, b: exp.Select) -> exp.Expr:
    """The WINDOW clause's definition ``w`` refers to (``OVER w``), or an empty one."""
    name = w.args.get("alias")
    for d in b.args.get("windows") or []:
        if isinstance(d, exp.Window) and name is not None and d.this.name == str(name):
            return d
    return exp.Window()


def _held(cond: exp.Expr, value: exp.Expr, tests: list[exp.Expr]) -> exp.Case:
    case = exp.Case(ifs=[exp.If(this=cond, true=value)])
    case.meta[GUARD] = case.meta[HELD] = True
    if any(t.meta.get(GUESSED) for t in tests):
        case.meta[GUESSED] = True
    return case


def _depth(n: exp.Expr) -> int:
    d, p = 0, n.parent
    while p is not None:
        d, p = d + 1, p.parent
    return d


def _holds_whole(x: exp.Expr) -> bool:
    """A construct that reads NULL as "no value", or builds a value around it (module doc)."""
    if isinstance(x, (*NON_STRICT, *BUILDERS)):
        return True
    return isinstance(x, exp.Anonymous) and str(x.this).lower() in _BUILDER_NAMES


def _hold_construct(x: exp.Expr, reads: _Reads, grouped: bool) -> exp.Expr:
    b = reads.block
    if not _holds_whole(x) or x.meta.get(GUARD) or not _own(x, b):
        return x
    if any(p.meta.get(HELD) for p in _up_to(x, b)):
        return x  # inside a held aggregate or construct: held with it
    tests = _bare(x, reads, grouped=grouped)
    conds = [exp.Not(this=t) for t in tests]
    conds += [h.meta[_COND].copy() for h in _held_inside(x, b)]
    if not conds:
        return x
    return _held(exp.and_(*conds), x, tests)
