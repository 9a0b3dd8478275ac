"""Rows picked by noisy values in a statement of several DP leaves (:mod:`dpsql.execute.tree`):
the words of :mod:`dpsql.execute.picked_words` for

* a leaf's own cut: a series limit's source (Superset's ``... JOIN (SELECT category ... ORDER BY
  SUM(x) DESC LIMIT 5)``), a UNION leaf's HAVING or LIMIT: the leaf's release, its ranked run
  (:mod:`dpsql.execute.picked_run`), said with the leaf's label;
* the statement's own ORDER BY ... LIMIT / OFFSET over a UNION of leaves (``... UNION ALL ...
  ORDER BY n DESC LIMIT 3``, or a SELECT over it): the rows are ranked by the post-processing
  query without its LIMIT / OFFSET, each row's noise interval is that of the leaf value it
  passes through (read by value from the leaves' released values of that column: where several
  released values are equal, the hull of their intervals; where none is, no interval).

Post-processing of the released values and their stored noise intervals only: nothing here
reads a private row or is charged.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.execute import picked_run
from dpsql.execute.backend import Rows
from dpsql.execute.noise import Release
from dpsql.execute.picked_keys import Key, number, stat_of
from dpsql.execute.picked_words import curse, cut_words, noise_text, offset_of, value_text
from dpsql.execute.tree_budget import LeafPlan
from dpsql.execute.tree_post import post_sql
from dpsql.sql.post_guards import HELD
from dpsql.sql.tree import Split, leaf_number

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext

ADVICE = " For a sharper cut: raise dpsql.epsilon (the noise shrinks as it grows)."


def tree_picked(
    engine: EngineContext,
    sp: Split,
    plans: Sequence[LeafPlan],
    releases: Sequence[Release],
    shown: int,
    conf: float,
) -> tuple[str, ...]:
    """The words for every cut by noisy values in the statement (module docstring); ``shown``:
    how many rows it answered."""
    out: list[str] = []
    for i, (lp, rel) in enumerate(zip(plans, releases, strict=True)):
        a = lp.analysis
        label = sp.labels[i] if i < len(sp.labels) else f"leaf {i}"
        text = functools.partial(picked_run.ranked_sql, a, rel)
        # (the level its stored noise intervals are at: a leaf's share of the statement's)
        words = picked_run.picked(engine, a, rel, None, lp, rel.confidence or conf, False, text)
        out += [f"{label}: {w}" for w in words]
    # the rows compared are the leaves' own, each noise interval at its leaf's level (a share of
    # the statement's, 98.33% for 3 leaves at 95%): stated at the lowest, where each holds
    conf = min((rel.confidence or conf for rel in releases), default=conf)
    leaves = _Leaves(engine, sp, plans, releases, conf)
    top = _top(leaves, shown, cursed=bool(out)) or _ranked_window(leaves, cursed=bool(out))
    return (*out, top) if top else tuple(out)


@dataclasses.dataclass(frozen=True)
class _Leaves:
    """A statement's leaves as its own cuts read them: their plans and releases, and the level
    their noise intervals are stated at (the lowest leaf's)."""

    engine: EngineContext
    sp: Split
    plans: Sequence[LeafPlan]
    releases: Sequence[Release]
    conf: float

    def run(self, post: exp.Expr) -> Rows | None:
        """The rows of ``post`` (a query over the statement's leaves in place of its own) over
        the released rows; None where PostgreSQL refuses it (the words only: the answer
        stands)."""
        analyses = [p.analysis for p in self.plans]
        text, params = post_sql(dataclasses.replace(self.sp, post=post), analyses, self.releases)
        try:
            return self.engine.backend.run(text, params, private=False)
        except DpsqlError:
            return None


def _top(leaves: _Leaves, shown: int, cursed: bool) -> str:
    post = leaves.sp.post
    order = post.args.get("order")
    cut = [post.args.get("limit"), post.args.get("offset")]
    if order is None or not order.expressions or not any(cut) or not shown:
        return ""
    term = order.expressions[0]
    start = offset_of(post)
    if not isinstance(term, exp.Ordered) or start is None:
        return ""
    if not isinstance(term.this, (exp.Column, exp.Literal)):
        return ""  # an expression: not a released value passed through
    # the ranked run: the statement without its LIMIT / OFFSET over the same released rows
    got = leaves.run(_uncut(post))
    if got is None:
        return ""  # (the words only: the answer stands)
    rows = got.rows
    pos = _position(term.this, [c.name for c in got.columns])
    feeding = _feeding(post, pos, leaves.plans) if pos is not None else []
    if pos is None or not feeding:
        return ""  # not a released statistic passed through (a key, an expression)
    name = got.columns[pos].name  # (ORDER BY 2: the column it names)
    key = _key(name, [r[pos] for r in rows], feeding, leaves)
    n = min(shown, len(rows) - min(start, len(rows)))
    if n <= 0:
        return ""
    ids = list(range(len(rows)))
    return cut_words(
        key, ids[start : start + n], ids, start, term, cut, leaves.conf, cursed, ADVICE
    )


_RANKS: dict[type[exp.Expr], str] = {exp.Rank: "rank", exp.DenseRank: "dense_rank", exp.RowNumber: "row_number"}  # fmt: skip


def _ranked_window(leaves: _Leaves, cursed: bool) -> str:
    """A rank of released values kept up to k: ``SELECT * FROM (SELECT ..., rank() OVER (ORDER
    BY n DESC) AS r FROM ...) t WHERE r <= 3``, or ``... ORDER BY r LIMIT 3`` (no PARTITION BY):
    the rows are the window's input ranked by its ORDER BY (a released statistic passed
    through), the cut where the ranks pass k."""
    for w in leaves.sp.post.find_all(exp.Window):
        func, order = w.this, w.args.get("order")
        item = w.parent
        while isinstance(item, exp.If) or (item is not None and item.meta.get(HELD)):
            item = item.parent  # (NULL where an input is withheld: dpsql.sql.withheld_post)
        sel = item.parent if isinstance(item, exp.Alias) else None
        parts = w.args.get("partition_by") or []
        if type(func) not in _RANKS or order is None:
            continue
        if not isinstance(sel, exp.Select) or len(order.expressions) != 1:
            continue
        term = order.expressions[0]
        k = _kept_ranks(leaves.sp.post, sel, item.alias_or_name)  # type: ignore[union-attr]
        source = sel.args.get("from_") or sel.args.get("from")
        if k is None or source is None or not isinstance(source.this, exp.Subquery):
            continue
        if not isinstance(term, exp.Ordered) or not isinstance(term.this, exp.Column):
            continue
        names = _names(source.this.this, leaves.plans)
        col = term.this.name
        if names is None or col not in names:
            continue
        feeding = _feeding(source.this, names.index(col), leaves.plans)
        cols = [p.name for p in parts if isinstance(p, exp.Column)]
        if not feeding or len(cols) < len(parts) or not set(cols) <= set(names):
            continue
        if parts and sel is leaves.sp.post:
            continue  # ORDER BY a partitioned rank LIMIT k: not k per partition
        by = term.copy()
        by.this.set("table", None)
        ranking = (
            exp.select(*(exp.column(c) for c in [*cols, col]))
            .from_(source.this.copy())
            .order_by(*(exp.column(c) for c in cols), by)
        )
        got = leaves.run(ranking)
        if got is None:
            return ""
        rows = got.rows
        sqls = {leaves.plans[i].analysis.statistics[si].sql for i, si in feeding}
        stat = next(iter(sqls)) if len(sqls) == 1 else col
        key = _key(stat, [r[-1] for r in rows], feeding, leaves)
        way = " DESC" if term.args.get("desc") else ""
        if parts:
            shown = {
                e.this.name: e.alias
                for e in sel.expressions
                if isinstance(e, exp.Alias) and isinstance(e.this, exp.Column)
            }  # (the lifted window's keys, _dp_k0, by the names the statement gives them)
            by_names = ", ".join(shown.get(c, c) for c in cols)
            over = f"PARTITION BY {by_names} ORDER BY {stat}{way}"
            lead = f"{_RANKS[type(func)]}() OVER ({over}) <= {k}"
            return _partitions(
                key, [r[: len(cols)] for r in rows], type(func), k, lead, term, leaves.conf, cursed
            )
        m = _within(type(func), key.values, k)
        if not 0 < m < len(rows):
            return ""  # every row kept, or none: no cut
        lead = f"{_RANKS[type(func)]}() OVER (ORDER BY {stat}{way}) <= {k}"
        ids = list(range(len(rows)))
        return cut_words(key, ids[:m], ids, 0, term, [], leaves.conf, cursed, ADVICE, lead)
    return ""


def _partitions(
    key: Key,
    parts: Sequence[Sequence[Any]],
    func: type[exp.Expr],
    k: int,
    lead: str,
    term: exp.Ordered,
    conf: float,
    cursed: bool,
) -> str:
    """A rank kept up to k in each partition (``parts``: each ranked row's partition, rows of a
    partition together in rank order): the partitions whose last row kept is within the noise
    of a row left out after it."""
    near: list[tuple[str, int, int]] = []  # (partition, its last row kept, the next row)
    total = 0
    i = 0
    while i < len(parts):
        j = i
        while j < len(parts) and parts[j] == parts[i]:
            j += 1
        total += 1
        m = _within(func, key.values[i:j], k)
        last = i + m - 1
        if 0 < m < j - i and any(_overlap(key.noise[last], key.noise[r]) for r in range(i + m, j)):
            near.append((", ".join("NULL" if v is None else str(v) for v in parts[i]), last, i + m))
        i = j
    if not near:
        return ""
    named = ", ".join(name for name, _, _ in near[:3]) + (
        f" and {len(near) - 3:,} more" if len(near) > 3 else ""
    )
    name, last, nxt = near[0]
    return (
        f"{lead} picks rows by a noisy value in each partition: in {len(near):,} of {total:,} "
        f"({named}) the last row kept is within the noise of a row it left out after it "
        f"({name}: {value_text(key.values[last])}, the next: {value_text(key.values[nxt])}; "
        f"{noise_text(conf, key, ivs=(key.noise[last], key.noise[nxt]))}): other groups may "
        "belong among the rows shown."
        + ("" if cursed else curse(bool(term.args.get("desc")), "rows it picks"))
        + ADVICE
    )


def _overlap(x: tuple[float, float] | None, y: tuple[float, float] | None) -> bool:
    return x is not None and y is not None and x[0] <= y[1] and y[0] <= x[1]


def _kept_ranks(post: exp.Expr, sel: exp.Select, alias: str) -> int | None:
    """k where the rows of ``sel`` are kept up to rank k: a SELECT over it WHERE alias <= k
    (< k + 1), or ``sel`` itself the statement with ORDER BY alias LIMIT k."""
    if sel is post:
        order, limit = sel.args.get("order"), sel.args.get("limit")
        if order is None or limit is None or sel.args.get("offset") is not None:
            return None
        first = order.expressions[0]
        n = limit.expression
        named = isinstance(first.this, exp.Column) and first.this.name == alias
        if named and not first.args.get("desc") and _digits(n):
            return int(str(n.this))
        return None
    sub = sel.parent
    outer = sub.parent.parent if isinstance(sub, exp.Subquery) and sub.parent else None
    where = outer.args.get("where") if isinstance(outer, exp.Select) else None
    if where is None:
        return None
    c = where.this
    ops = {exp.LTE: 0, exp.LT: -1, exp.GTE: 0, exp.GT: -1}
    if type(c) not in ops:
        return None
    left, right = (
        (c.this, c.expression) if isinstance(c, (exp.LTE, exp.LT)) else (c.expression, c.this)
    )
    if isinstance(left, exp.Column) and left.name == alias and _digits(right):
        return int(str(right.this)) + ops[type(c)]
    return None


def _digits(n: object) -> bool:
    return isinstance(n, exp.Literal) and not n.is_string and str(n.this).isdigit()


def _within(func: type[exp.Expr], values: Sequence[float | None], k: int) -> int:
    """How many of the ranked ``values`` have a rank <= k (rank: ties share the first one's
    place; dense_rank: ties share one; row_number: each its own)."""
    if func is exp.RowNumber:
        return min(k, len(values))
    kept, dense, first = 0, 0, 0
    for i, v in enumerate(values):
        if i == 0 or v != values[i - 1]:
            dense, first = dense + 1, i + 1  # a new value: its place, its dense place
        if (first if func is exp.Rank else dense) > k:
            break
        kept = i + 1
    return kept


def _uncut(post: exp.Expr) -> exp.Expr:
    q = post.copy()
    q.set("limit", None)
    q.set("offset", None)
    return q


def _position(node: exp.Expr, names: Sequence[str]) -> int | None:
    """The output column an ORDER BY term names (by position or name), None otherwise."""
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        k = int(node.this)
        return k - 1 if 1 <= k <= len(names) else None
    if isinstance(node, exp.Column) and not node.table and node.name in names:
        return list(names).index(node.name)
    return None


def _feeding(node: exp.Expr, pos: int, plans: Sequence[LeafPlan]) -> list[tuple[int, int]]:
    """The (leaf, statistic) pairs whose released values column ``pos`` of ``node`` passes
    through unchanged ([] where any of its rows may come from anything else)."""
    if isinstance(node, exp.Subquery):
        return _feeding(node.this, pos, plans)
    if isinstance(node, exp.Union):
        x, y = _feeding(node.this, pos, plans), _feeding(node.expression, pos, plans)
        return x + y if x and y else []
    if not isinstance(node, exp.Select):
        return []
    i = leaf_number(node)
    if i is not None:
        a = plans[i].analysis
        outs = a.outer.expressions
        si = stat_of(a, outs[pos]) if pos < len(outs) else None
        return [(i, si)] if si is not None else []
    if any(node.args.get(k) for k in ("group", "having", "distinct", "joins", "windows")):
        return []
    source = node.args.get("from_") or node.args.get("from")
    if source is None or not isinstance(source.this, exp.Subquery):
        return []
    items = node.expressions
    if len(items) == 1 and isinstance(items[0], exp.Star):
        return _feeding(source.this, pos, plans)
    if pos >= len(items):
        return []
    item = items[pos].unalias() if isinstance(items[pos], exp.Alias) else items[pos]
    inner = _names(source.this.this, plans)
    if isinstance(item, exp.Column) and inner is not None and item.name in inner:
        return _feeding(source.this, inner.index(item.name), plans)
    return []


def _names(node: exp.Expr, plans: Sequence[LeafPlan]) -> list[str] | None:
    """A query's output names where they are its first leaf's (a UNION of leaves)."""
    if isinstance(node, exp.Union):
        return _names(node.this, plans)
    if isinstance(node, exp.Select):
        i = leaf_number(node)
        if i is not None:
            return [e.alias_or_name for e in plans[i].analysis.outer.expressions]
    return None


def _key(
    text: str, values: Sequence[Any], feeding: Sequence[tuple[int, int]], leaves: _Leaves
) -> Key:
    """The ranked rows' values and noise intervals, read by value from the leaves' released
    values of that column (module docstring)."""
    plans, releases = leaves.plans, leaves.releases
    by_value: dict[float, tuple[float, float] | None] = {}
    ws: set[float | None] = set()
    for i, si in feeding:
        rel = releases[i]
        ws.add(picked_run.widths(plans[i].analysis, rel, plans[i])[si])
        for r, row in enumerate(rel.stats):
            v = number(row[si])
            if v is None:
                continue
            iv = rel.noise[r][si] if rel.noise else None
            if v in by_value:
                old = by_value[v]
                iv = None if old is None or iv is None else (min(old[0], iv[0]), max(old[1], iv[1]))
            by_value[v] = iv
    vals = [number(v) for v in values]
    noise = [by_value.get(v) if v is not None else None for v in vals]
    unbounded = frozenset(r for r, v in enumerate(vals) if v is not None and noise[r] is None)
    # (the widest leaf's: the leaves' columns differ by their rounding, a fallback's estimate)
    width = None if None in ws or not ws else max(w for w in ws if w is not None)
    return Key(text, vals, noise, width, unbounded)
