"""Intervals for the output columns of a statement answered as a tree (docs/sql.md, the tree model).

A tree's output is computed by PostgreSQL from its leaves' released rows. An output column that
is a leaf's released value passed through (a CTE's COUNT paged with ORDER BY ... LIMIT), or a
monotone expression of released values (a SUM of leaf values, ``x * 100.0 / SUM(x) OVER ()``, a
ratio of two leaves' values), gets an interval by interval arithmetic over the leaves' intervals:
the post-processing is rewritten to carry, beside each such value, a low and a high end
(``_dpsql_iv<n>_low`` / ``_high`` hidden columns, computed by PostgreSQL in the same query). The
true value lies between them whenever every leaf interval it is built from holds; with k of them,
that is at least 1 - k x (1 - leaf level) (union bound). A third hidden column (``_miss``,
:mod:`dpsql.sql.interval_sql`) sums, per output row, the misses of exactly the leaf intervals
that row reads (a re-aggregation's group, a window's frame): the engine counts them on the
leaves' public key rows before any release, asks each leaf for 1 - alpha/k with k the most any
output row reads of it (:mod:`dpsql.execute.tree_intervals`), and reports a row's interval only
when its miss is at most alpha.

No interval (the columns are NULL, the notice says why) where none is honest:

* an expression dpsql can't bound (CASE, COALESCE, non-monotone functions), a rank or any
  window that orders, partitions or frames rows by noisy values;
* an aggregate over rows chosen by noisy values (a WHERE, HAVING, JOIN ON or ORDER BY ... LIMIT
  on them, or groups kept by partition selection: the true answer may sum other rows);
* over declared keys every key combination is a released row, empty or not (noise around 0):
  a SUM of COUNT/SUM values is unchanged by them, but COUNT(*), AVG, MIN, MAX over the rows are
  not PostgreSQL's own answer;
* DISTINCT and UNION/INTERSECT/EXCEPT over noisy values (UNION ALL keeps its intervals).

Everything here is a pure function of the post-processing tree and the leaves' shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.result import IntervalFallback
from dpsql.sql.interval_sql import (
    ENDS,
    HIDDEN,
    IV_LEAF,
    TIME_ENDS,
    Exprs,
    Held,
    Info,
    Iv,
    No,
    Rel,
    Scope,
)
from dpsql.sql.names import output_name
from dpsql.sql.tables import cte_body
from dpsql.sql.tree import LEAF_PREFIX, leaf_number


@dataclass(frozen=True)
class LeafCol:
    """One output column of a leaf's released rows."""

    name: str
    noisy: bool
    label: str | None = None  # its interval's label in the leaf's release (None: no interval)
    reason: str = ""  # noisy without an interval: why
    additive: bool = False  # a COUNT or SUM: a group the data lacks adds 0 to a SUM over rows
    integral: bool = False  # the interval ends are whole numbers
    end: str = "float8"  # the type of its interval's ends


@dataclass(frozen=True)
class LeafShape:
    """A leaf's released rows: its columns and which rows it has (``rows``: "one" without GROUP
    BY, "declared" every declared key combination, "selected" the groups partition selection
    kept, "chosen" rows kept by noisy values: HAVING, ORDER BY ... LIMIT)."""

    label: str
    columns: tuple[LeafCol, ...]
    rows: str
    why: str = ""  # "chosen": which clause keeps its rows


@dataclass(frozen=True)
class OutCol:
    """A noisy output column of the statement (in output order)."""

    name: str
    info: Held | No


@dataclass(frozen=True)
class IvPlan:
    """The post-processing with hidden interval columns, and what each noisy output carries.

    ``leaf_ivs[i]``: leaf i's interval columns ((label in its release, hid)) when a placeholder
    ``_dpsql_ivleaf_i`` reads them."""

    post: exp.Expr
    outputs: tuple[OutCol, ...]
    leaf_ivs: tuple[tuple[tuple[str, int], ...], ...]
    chosen: str = ""  # the output's rows are chosen by noisy values: why (each row's own
    # interval still holds its group's truth; which groups are shown is the noisy part)
    limit: int | None = None  # ``chosen`` only by the statement's own ORDER BY ... LIMIT n (no
    # OFFSET): fewer than n rows shown are every row there was, so none was chosen (newcomer30 W3)
    fallback: IntervalFallback | None = None  # the rewrite fell back to the plain plan: why


class _Abort(Exception):
    """A shape the rewrite can't carry hidden columns through: the plain plan is used."""


def plan_intervals(post: exp.Expr, leaves: Sequence[LeafShape]) -> IvPlan:
    """The hidden-column rewrite of ``post`` (with ``_dpsql_leaf_i`` placeholders); when a part of
    the statement can't carry them (:class:`_Abort`: expected), every noisy output gets No with
    the reason. Any other exception is a bug in the rewrite: the statement still runs (its
    intervals NULL, or no interval columns when not even which outputs are noisy is known),
    and ``fallback`` says so, unexpected, for the engine to log and tests to catch."""
    none = tuple(() for _ in leaves)
    try:
        return _Rewriter(leaves, hidden=True).plan(post.copy())
    except _Abort as why:
        fallback = IntervalFallback(str(why), expected=True)
    except Exception as e:  # never fail the statement: typed, logged, tested
        fallback = _unexpected(e)
    try:
        out = _Rewriter(leaves, hidden=False, why=fallback.reason).plan(post.copy())
    except Exception as e:  # not even which outputs are noisy: no columns
        return IvPlan(post, (), none, fallback=_unexpected(e))
    return IvPlan(post, out.outputs, none, out.chosen, out.limit, fallback)


def _unexpected(e: Exception) -> IntervalFallback:
    return IntervalFallback(
        "dpsql does not follow this statement's shape",
        expected=False,
        error=f"{type(e).__name__}: {e}",
    )


class _Rewriter:
    def __init__(self, leaves: Sequence[LeafShape], hidden: bool, why: str = "") -> None:
        self.leaves, self.hidden, self.why = leaves, hidden, why
        self.next = 0
        self.ctes: dict[int, Rel] = {}
        self.leaf_hids: list[dict[str, int]] = [{} for _ in leaves]
        self.top: exp.Expr | None = None  # the statement's outermost query
        self.top_limit: int | None = None  # its LIMIT n, where only that chose its rows

    def plan(self, post: exp.Expr) -> IvPlan:
        self.top = post
        while isinstance(self.top, exp.Subquery):
            self.top = self.top.this
        rel = self.rel(post, self.hidden)
        outputs = tuple(OutCol(n, i) for n, i in rel.cols if i is not None)
        ivs = tuple(
            tuple((c.label, h[c.name]) for c in leaf.columns if c.label is not None and c.name in h)
            for leaf, h in zip(self.leaves, self.leaf_hids, strict=True)
        )
        limit = self.top_limit if "chosen" in rel.flags else None
        return IvPlan(post, outputs, ivs, rel.flags.get("chosen", ""), limit)

    def hid(self) -> int:
        self.next += 1
        return self.next

    # -- relations ---------------------------------------------------------------------------

    def rel(self, node: exp.Expr, hidden: bool) -> Rel:
        if isinstance(node, exp.Subquery):
            return self.rel(node.this, hidden)
        if isinstance(node, exp.Select):
            i = leaf_number(node)
            if i is not None:
                return self.leaf(node, i, hidden)
            return self.select(node, hidden)
        if isinstance(node, exp.SetOperation):
            return self.setop(node, hidden)
        raise _Abort("a part of the statement dpsql does not follow")

    def leaf(self, node: exp.Select, i: int, hidden: bool) -> Rel:
        shape = self.leaves[i]
        if hidden:
            node.args["from_"].this.set("this", exp.to_identifier(f"{IV_LEAF}{i}"))
        cols: list[tuple[str, Info]] = []
        for c in shape.columns:
            if not c.noisy:
                cols.append((c.name, None))
            elif c.label is None:
                cols.append((c.name, No(c.reason)))
            elif not hidden:
                cols.append(
                    (c.name, No(self.why or "it is read through DISTINCT or a set operation"))
                )
            else:
                h = self.leaf_hids[i].setdefault(c.name, self.hid())
                cols.append((c.name, Held(h, ((i, False),), c.additive, c.integral, True, c.end)))
        flags = {}
        if shape.rows == "declared":
            flags["declared"] = (
                f"{shape.label} has a row for every declared key combination, empty or not"
            )
        elif shape.rows == "selected":
            flags["selected"] = (
                f"{shape.label} keeps only the groups partition selection let through: "
                "the true answer also counts the others"
            )
        elif shape.rows == "chosen":
            flags["chosen"] = f"{shape.label} {shape.why or 'keeps rows by their noisy values'}"
        return Rel(cols, flags, hidden=hidden)

    def cte(self, body: exp.Expr, hidden: bool) -> Rel:
        key = id(body)
        if key not in self.ctes:
            self.ctes[key] = self.rel(body, self.hidden)
        rel = self.ctes[key]
        if hidden or not self.hidden:
            return rel
        # a plain reader of a CTE with hidden columns: it sees No for them
        why = self.why or "it is read through DISTINCT or a set operation"
        return Rel([(n, _plain(i, why)) for n, i in rel.cols], rel.flags, rel.unknown, True)

    def setop(self, node: exp.SetOperation, hidden: bool) -> Rel:
        all_ = isinstance(node, exp.Union) and not node.args.get("distinct")
        slots = (
            _branches(node)
            if isinstance(node, exp.Union) and all_
            else [(node, "this"), (node, "expression")]
        )
        keep = hidden and all_
        if keep:  # a leaf as a branch: its columns by name, so its intervals can line up
            for holder, side in slots:
                b = holder.args.get(side)
                i = leaf_number(b) if isinstance(b, exp.Select) else None
                names = [c.name for c in self.leaves[i].columns] if i is not None else []
                if b is not None and i is not None and all(names) and len(set(names)) == len(names):
                    named = [exp.column(n, quoted=True) for n in names]
                    holder.set(side, exp.select(*named).from_(b.subquery("_dpsql_u")))
        parts = [holder.args[side] for holder, side in slots]
        keep = keep and all(_explicit(b) for b in parts)
        rels = [self.rel(b, keep) for b in parts]
        width = {len(r.cols) for r in rels}
        if len(width) != 1 and not any(r.unknown for r in rels):
            raise _Abort("a UNION whose branches dpsql can't line up")
        flags = {k: v for r in rels for k, v in r.flags.items()}
        what = type(node).__name__.upper()
        cols: list[tuple[str, Info]] = []
        if keep:
            sels = [b for b in parts if isinstance(b, exp.Select)]
            exts = [_strip_hidden(b) for b in sels]
            for p, name in enumerate(n for n, _ in rels[0].cols):
                infos = [r.cols[p][1] for r in rels]
                bad = next((x for x in infos if isinstance(x, No)), None)
                if bad is not None or all(x is None for x in infos):
                    cols.append((name, bad))
                    continue
                h = self.hid()
                for sel, ext, x in zip(sels, exts, infos, strict=True):
                    for end in ENDS:
                        val: exp.Expr
                        if x is None and end == "miss":  # an exact value never misses
                            val = exp.Literal.number(0)
                        elif x is None:  # an exact value: its own interval
                            item = sel.expressions[p]
                            val = (item.this if isinstance(item, exp.Alias) else item).copy()
                        else:
                            assert isinstance(x, Held)
                            val = ext[f"_dpsql_iv{x.hid}_{end}"].copy()
                        sel.append("expressions", exp.alias_(val, f"_dpsql_iv{h}_{end}"))
                held = [x for x in infos if isinstance(x, Held)]
                ends = {x.end for x in held if x.passthrough}
                same = len(ends) == 1 and all(x.passthrough for x in held)
                if not same and any(x.end in TIME_ENDS for x in held):
                    cols.append((name, No("a UNION ALL of dates or times with other values")))
                    continue
                cols.append((name, Held(
                    h, tuple(e for x in held for e in x.events),
                    len(held) == len(infos) and all(x.additive for x in held),
                    all(x.integral for x in held) and all(
                        x is not None or _int_item(sel.expressions[p])
                        for x, sel in zip(infos, sels, strict=True)
                    ),
                    same, ends.pop() if same else "",
                )))  # fmt: skip
        else:
            reason = (
                f"{what} compares rows by their noisy values"
                if isinstance(node, (exp.Intersect, exp.Except))
                else "UNION (without ALL) removes rows whose noisy values coincide"
            )
            if all_:
                reason = self.why or (
                    "dpsql lines up the intervals of a UNION ALL of SELECTs that name their "
                    "columns, not of SELECT *"
                )
            for p, (name, _) in enumerate(rels[0].cols):
                noisy = any(p < len(r.cols) and r.cols[p][1] is not None for r in rels)
                cols.append((name, No(reason) if noisy else None))
            if isinstance(node, (exp.Intersect, exp.Except)) and any(i for _, i in cols):
                flags["chosen"] = f"{what} keeps rows by their noisy values"
        rel = Rel(cols, flags, any(r.unknown for r in rels), keep)
        self.order_limit(node, rel, dict(cols))
        return rel

    def select(self, s: exp.Select, hidden: bool) -> Rel:
        scope: dict[str, Rel | None] = {}
        order: list[str] = []
        sources = []
        src = s.args.get("from_")
        if src is not None:
            sources.append(src.this)
        sources += [j.this for j in s.args.get("joins") or []]
        flags: dict[str, str] = {}
        for node in sources:
            alias = node.alias_or_name
            rel: Rel | None = None
            if isinstance(node, exp.Subquery):
                rel = self.rel(node.this, hidden)
            elif isinstance(node, exp.Table):
                body = cte_body(node)
                if body is not None:
                    rel = self.cte(body, hidden)
                elif node.name.startswith((LEAF_PREFIX, IV_LEAF)):
                    raise _Abort("a leaf read in an unexpected place")
            elif any(True for _ in node.find_all(exp.Select)):
                raise _Abort("a LATERAL or function source over aggregates")
            scope[alias] = rel
            order.append(alias)
            if rel is not None:
                flags.update(rel.flags)
        ctx = Scope(scope, order)
        conds = [("WHERE", s.args.get("where"))]
        conds += [("JOIN ... ON", j.args.get("on")) for j in s.args.get("joins") or []]
        before = next((k for k, c in conds if c is not None and ctx.noisy(c)), None)
        if before is not None:
            flags["chosen"] = f"its rows are chosen by noisy values ({before} on them)"
        group = s.args.get("group")
        grouped = group is not None or any(is_agg(e) for e in s.expressions)
        distinct = s.args.get("distinct") is not None
        add = hidden and not distinct
        plain_why = self.why or (
            "DISTINCT merges rows whose noisy values coincide"
            if distinct
            else "it is read through DISTINCT or a set operation"
        )
        cols: list[tuple[str, Info]] = []
        extra: list[exp.Expr] = []
        for item in s.expressions:
            if isinstance(item, exp.Star) or (
                isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
            ):
                names = [item.table] if isinstance(item, exp.Column) and item.table else order
                for n in names:
                    r = scope.get(n)
                    if r is None:
                        continue
                    if not add and r.hidden:
                        raise _Abort(
                            "SELECT * over released values where they can't carry intervals"
                        )
                    cols += r.cols
                continue
            body = item.this if isinstance(item, exp.Alias) else item
            ev = Exprs(ctx, flags, grouped).ev(body, inside_agg=False)
            if isinstance(ev, Iv):
                if not add:
                    cols.append((output_name(item), No(plain_why)))
                    continue
                h = self.hid()
                extra += [
                    exp.alias_(ev.lo, f"_dpsql_iv{h}_low"),
                    exp.alias_(ev.hi, f"_dpsql_iv{h}_high"),
                    exp.alias_(ev.miss, f"_dpsql_iv{h}_miss"),
                ]
                end = ev.end if ev.passthrough else ""
                held = Held(h, ev.events, ev.additive, ev.integral, ev.passthrough, end)
                cols.append((output_name(item), held))
            else:
                cols.append((output_name(item), ev))
        for e in extra:
            s.append("expressions", e)
        out = dict(flags)
        after = [("HAVING", s.args.get("having")), ("QUALIFY", s.args.get("qualify"))]
        late = next((k for k, c in after if c is not None and _noisy_after(ctx, c, cols)), None)
        if late is not None:
            out["chosen"] = f"its rows are chosen by noisy values ({late} on them)"
        if group is not None and ctx.noisy(group):
            out["chosen"] = "it groups rows by their noisy values"
        if distinct and any(i for _, i in cols):
            out["chosen"] = "DISTINCT merges rows whose noisy values coincide"
        unknown = any(scope[n] is None for n in order)
        rel = Rel(cols, out, unknown, add and (bool(extra) or any(
            r is not None and r.hidden for r in scope.values()
        )))  # fmt: skip
        self.order_limit(s, rel, dict(cols), ctx)
        return rel

    def order_limit(
        self, node: exp.Expr, rel: Rel, items: dict[str, Info], ctx: Scope | None = None
    ) -> None:
        """ORDER BY on noisy values with LIMIT/OFFSET: the rows kept are chosen by them."""
        if node.args.get("limit") is None and node.args.get("offset") is None:
            return
        o = node.args.get("order")
        if o is None:
            return
        names = list(items)
        for ordered in o.expressions:
            e = ordered.this
            if isinstance(e, exp.Literal) and not e.is_string and str(e.this).isdigit():
                k = int(e.this) - 1
                hit = items.get(names[k]) if 0 <= k < len(names) else None
            elif isinstance(e, exp.Column) and not e.table and e.name in items:
                hit = items[e.name]
            else:
                hit = No("") if ctx is not None and ctx.noisy(e) else None
            if hit is not None:
                if node is self.top and "chosen" not in rel.flags:
                    self.top_limit = _literal_limit(node)
                rel.flags["chosen"] = "ORDER BY ... LIMIT keeps rows by their noisy values"
                return


def _literal_limit(node: exp.Expr) -> int | None:
    """``node``'s LIMIT n as a number, where it has no OFFSET (an OFFSET leaves rows out
    whatever the LIMIT)."""
    limit = node.args.get("limit")
    n = limit.expression if isinstance(limit, exp.Limit) else None
    if node.args.get("offset") is not None or not isinstance(n, exp.Literal) or not n.is_int:
        return None
    return int(n.this)


def _noisy_after(ctx: Scope, cond: exp.Expr, cols: list[tuple[str, Info]]) -> bool:
    """A HAVING or QUALIFY on noisy values: its sources' columns or aggregates of them."""
    if ctx.noisy(cond):
        return True
    names = {n for n, i in cols if i is not None}
    return any(isinstance(c, exp.Column) and not c.table and c.name in names for c in cond.walk())


def _plain(i: Info, why: str) -> Info:
    return (
        No(why or "a part of the statement reads it without its interval")
        if isinstance(i, Held)
        else i
    )


def _branches(u: exp.Union) -> list[tuple[exp.Expr, str]]:
    """The parts of a chain of UNION ALL (``a UNION ALL b UNION ALL c`` nests to the left), as
    (holder, side) so a part can be replaced; a nested one with its own ORDER BY or LIMIT is
    one part."""
    left = u.this
    plain = not any(left.args.get(k) for k in ("order", "limit", "offset"))
    if isinstance(left, exp.Union) and not left.args.get("distinct") and plain:
        return [*_branches(left), (u, "expression")]
    return [(u, "this"), (u, "expression")]


def _int_item(item: exp.Expr) -> bool:
    body = item.this if isinstance(item, exp.Alias) else item
    return isinstance(body, exp.Literal) and body.is_int


def _explicit(node: exp.Expr) -> bool:
    return isinstance(node, exp.Select) and not any(
        isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
        for e in node.expressions
    )


def _strip_hidden(s: exp.Select) -> dict[str, exp.Expr]:
    """Remove a branch's hidden columns, returning their expressions by name (re-added in the
    UNION's order)."""
    out: dict[str, exp.Expr] = {}
    keep = []
    for e in s.expressions:
        if isinstance(e, exp.Alias) and HIDDEN.match(e.alias):
            out[e.alias] = e.this
        else:
            keep.append(e)
    s.set("expressions", keep)
    return out


def is_agg(e: exp.Expr) -> bool:
    for n in e.find_all(exp.AggFunc):
        if not isinstance(n.parent, exp.Window) and n.find_ancestor(exp.Window) is None:
            return True
    return False


__all__ = ["IvPlan", "LeafCol", "LeafShape", "OutCol", "plan_intervals"]
