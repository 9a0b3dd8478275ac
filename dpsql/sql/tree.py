"""A private query as a tree: DP leaves and the post-processing above them.

A *leaf* is a lowest aggregate block over private rows: a SELECT that aggregates (GROUP BY or an
aggregate call in its own select list) and reads private rows directly or through row-level
derived tables and CTEs, with no such aggregate block below it. Each leaf is a private query of
its own, analyzed, bounded, measured and noised exactly as a flat private statement
(:mod:`dpsql.sql.analyze`); its released rows are public data.

Everything above the leaves is *post-processing*: the statement with each leaf replaced by a
placeholder, run by PostgreSQL itself over the leaves' noisy rows (windows, joins of aggregated
results, UNION/INTERSECT/EXCEPT, HAVING, ORDER BY/LIMIT, DISTINCT, re-aggregation). By the
post-processing property of differential privacy it costs nothing more; what it may not do is
read a private table itself: a statement whose post-processing would is refused with the
analyzer's own error for that block.

Before splitting, a SELECT that computes window functions over its own aggregates
(``COUNT(*) * 100.0 / SUM(COUNT(*)) OVER ()``) is split into the aggregate block (a leaf) and a
windowing SELECT over it (:mod:`dpsql.sql.lift_windows`), which is what PostgreSQL evaluates anyway:
windows run after GROUP BY and HAVING, before DISTINCT, ORDER BY and LIMIT.

Budget: the statement's (epsilon, delta) is split over its k leaves (:func:`split_budget`):
epsilon/k each; delta in equal parts to the leaves that need it (partition selection), or to all
of them when none does or Gaussian noise is requested. The leaves compose sequentially, so the
statement costs the sum of its leaves' costs, reserved once before any leaf reads data.

Everything here is a pure function of the parsed statement and the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.errors import DpsqlError, PrivacyViolation, UnsupportedSql
from dpsql.policy.model import Policy
from dpsql.sql.analysis import Analysis
from dpsql.sql.blocks import contains, is_aggregate_block, private_tables, selects_below
from dpsql.sql.group_domain import unfiltered_keys_notice
from dpsql.sql.labels import keep_call_labels
from dpsql.sql.lift_windows import WINDOW_ALIAS, lift_windows
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.per_unit import lift_units, with_units
from dpsql.sql.per_unit_source import UNIT_PREFIX, UnitSource
from dpsql.sql.refusal_text import answer_in_expression
from dpsql.sql.sources import refuse_correlated
from dpsql.sql.tables import cte_body, referenced_tables
from dpsql.sql.withheld_post import hold_post, withholdable
from dpsql.sql.wording import spelled_sql, user_sql

MAX_LEAVES = 16  # per statement: each leaf is one more measurement sharing the epsilon
LEAF_PREFIX = "_dpsql_leaf_"


@dataclass(frozen=True)
class KeyLink:
    """A leaf whose key domain comes from an earlier leaf's released rows (a series limit):
    ``block`` (the leaf's SELECT without the join to leaf ``source``) runs with
    ``expr IN (<the values of column `column` that leaf `source` released>)``."""

    source: int
    column: str
    expr: exp.Expr
    block: exp.Select

    def instantiate(self, values: Sequence[exp.Expr]) -> exp.Select:
        """The leaf's SELECT for the released key values (NULLs never join: left out)."""
        cond: exp.Expr = (
            exp.In(this=self.expr.copy(), expressions=[v.copy() for v in values])
            if values
            else exp.false()
        )
        return self.block.copy().where(cond, copy=False)


@dataclass(frozen=True)
class Split:
    """A statement split into its leaves and the post-processing around them.

    ``post`` is the statement with leaf ``i`` replaced by ``SELECT * FROM _dpsql_leaf_i``
    (:func:`fill` puts each leaf's released rows there); ``leaves[i]`` is leaf ``i`` as a
    standalone SELECT (with the CTEs it reads), ready to be prepared as a private statement.
    ``links[i]`` is None, or how leaf ``i`` takes its keys from an earlier leaf (``leaves[i]``
    then stands for it with ``expr IS NOT NULL`` in place of the key list: it is what is
    validated and planned before any data is read).
    """

    post: exp.Expr
    leaves: tuple[exp.Select, ...]
    links: tuple[KeyLink | None, ...] = ()
    units: tuple[UnitSource, ...] = ()  # per-unit derived tables the leaves read (per_unit.py)
    labels: tuple[str, ...] = ()  # each leaf in the user's terms (:func:`leaf_label`)

    def link(self, i: int) -> KeyLink | None:
        return self.links[i] if self.links else None


def split(tree: exp.Expr, policy: Policy, analyze: Callable[..., Analysis]) -> Split | None:
    """The statement's leaves and post-processing; None when the statement is one flat leaf
    (nothing to split: the caller keeps the flat analysis's refusal).

    ``analyze(select, policy)`` is :func:`dpsql.sql.analyze.analyze`: it is called on a block of
    post-processing that still reads private rows, to refuse it with the analyzer's own words.

    Raises:
        DpsqlError: a leaf's or the post-processing's refusal; too many leaves (54001).
    """
    for ident in tree.find_all(exp.Identifier):
        if str(ident.this).lower().startswith("_dpsql_"):
            raise UnsupportedSql(
                f"names starting with _dpsql_ are reserved ({ident.this})",
                hint="rename the CTE, alias or column",
            )
    post, units = lift_units(tree.copy(), policy, analyze)
    if units:
        post = prune_ctes(post)  # a per-unit CTE read only as a synthetic table
    policy = with_units(policy, units)
    post = lift_windows(post, policy)  # (over a per-unit table too: its windows run over groups)
    leaves: list[exp.Select] = []
    links: list[KeyLink | None] = []
    labels: list[str] = []
    for _ in range(MAX_LEAVES + 1):
        found = _lowest_leaves(post, policy)
        if not found:
            break
        if not leaves and not units and any(s is post for s in found):
            return None  # the statement is one flat block: the flat analysis's refusal stands
        for s in found:
            refuse_correlated(s, policy)
            _refuse_listed_keys_in_set_operation(s, policy, analyze)
            link = series_limit(s, leaves, policy) if _reads_leaf(s) else None
            links.append(link)
            labels.append(
                leaf_label(s)
                if link is None
                else _short(f"the aggregate over the keys of {labels[link.source]}")
            )
            if link is not None:
                probe = exp.Not(this=exp.Is(this=link.expr.copy(), expression=exp.Null()))
                leaves.append(link.block.copy().where(probe, copy=False))
            else:
                leaves.append(standalone(s))
            placeholder = exp.select("*").from_(f"{LEAF_PREFIX}{len(leaves) - 1}")
            if s is post:
                post = placeholder
            else:
                s.replace(placeholder)
        if len(leaves) > MAX_LEAVES:
            from dpsql.errors import StatementTooComplex

            raise StatementTooComplex(
                f"this statement has more than {MAX_LEAVES} aggregates over private tables",
                detail="each is a separate measurement sharing the statement's epsilon",
                hint="split the statement",
            )
    if not leaves:
        return None
    post = keep_call_labels(prune_ctes(post))  # variance(n) over a leaf is "variance"
    _refuse_private_rest(post, policy, analyze)
    # a value computed from a withheld one is withheld (dpsql.sql.withheld_post)
    post = hold_post(post, [withholdable(s) for s in leaves], leaf_number)
    return Split(post, tuple(leaves), tuple(links), units, tuple(labels))


def _refuse_listed_keys_in_set_operation(
    s: exp.Select, policy: Policy, analyze: Callable[..., Analysis]
) -> None:
    """Refuse a block that only lists keys (``SELECT k ... GROUP BY k`` or ``SELECT DISTINCT
    k``, no aggregate) under INTERSECT or EXCEPT when its WHERE clause says something its keys'
    domain can't decide. Such a list is the public domain, free: every key whether or not a row
    passing that WHERE clause has it (:func:`~dpsql.sql.group_domain.unfiltered_keys_notice`);
    a flat statement says so in a notice, but under EXCEPT the list removes every key the other
    side lists (newcomer22 #21: ``... EXCEPT SELECT department ... WHERE cost > 100000 GROUP BY
    department`` answered no rows, the truth 4) and under INTERSECT it keeps them all: a
    confident wrong answer. Which keys have such rows is private: counting them is a release."""
    op = s.find_ancestor(exp.Intersect, exp.Except)
    if op is None or any(True for _ in s.find_all(exp.AggFunc)):
        return
    try:
        a = analyze(standalone(s), policy)
    except DpsqlError:
        return  # the leaf's own refusal comes when it is analysed as a leaf
    if a.measures or unfiltered_keys_notice(a.group_keys, a.where) is None:
        return
    names = ", ".join(user_sql(g.expr) for g in a.group_keys)
    word = "INTERSECT" if isinstance(op, exp.Intersect) else "EXCEPT"
    raise UnsupportedSql(
        f"{word} over a list of {names} filtered by other columns can't be answered: the list is "
        f"the keys of {names} the policy gives, whether or not a row passing the WHERE clause has "
        f"them (which keys have such rows is private), so the {word} would be wrong",
        hint=f"count each key's rows, with noise (charged): SELECT {names}, COUNT(*) ... WHERE "
        f"... GROUP BY {names}, and keep the keys whose count is large enough for you",
    )


def leaf_label(s: exp.Select) -> str:
    """A leaf in the user's terms, for notices: the derived table's alias, the CTE's name, or
    the aggregate SELECT as written (shortened)."""
    p = s.parent
    if isinstance(p, exp.Subquery) and p.alias and p.alias != WINDOW_ALIAS:
        return f"derived table {p.alias}"
    if isinstance(p, exp.CTE) and p.alias:
        return f"CTE {p.alias}"
    units = [t for t in s.find_all(exp.Table) if t.name.startswith(UNIT_PREFIX)]
    if units:  # over a per-unit derived table (dpsql.sql.per_unit): not its synthetic name
        return f"the aggregate over {units[0].alias_or_name} (one row per person)"
    if isinstance(p, exp.Subquery) and p.alias == WINDOW_ALIAS:
        aggs = [
            user_sql(e.this)
            for e in s.expressions
            if isinstance(e, exp.Alias) and e.alias.startswith("_dp_a")
        ]
        return _short(f"the statement's aggregates {', '.join(aggs)} (before its windows)")
    return _short(spelled_sql(s))


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _refuse_private_rest(post: exp.Expr, policy: Policy, analyze: Callable[..., object]) -> None:
    """Refuse post-processing that still reads private rows (raw rows: never released)."""
    blocks = [s for s in post.find_all(exp.Select) if private_tables(s, policy)]
    if not blocks:
        return
    lowest = [
        s
        for s in blocks
        if not any(t is not s and private_tables(t, policy) for t in selects_below(s))
    ]
    for s in lowest or blocks:
        if not is_aggregate_block(s):
            name = next(n for n, _ in referenced_tables(standalone(s)) if policy.private_table(n))
            raise PrivacyViolation(
                f"this query would return raw rows of private table {name}",
                hint="aggregate the private table (COUNT, SUM, AVG ...) in every part of the "
                "statement; an aggregated CTE or subquery may be joined to public tables or "
                "to other aggregates",
            )
        analyze(standalone(s), policy)  # raises the analyzer's refusal for this block
    raise PrivacyViolation(
        "part of this statement would return raw rows of a private table",
        hint="aggregate the private table (COUNT, SUM, AVG ...) in every part of the statement",
    )


def _refuse_series(why: str) -> UnsupportedSql:
    return UnsupportedSql(
        f"an aggregate over private rows joined to another aggregate's answer is supported as a "
        f"series limit only ({why})",
        hint="join the inner aggregate on its single GROUP BY key with an inner JOIN ... ON "
        "outer_column = inner_key, and read nothing else of it; or filter the outer query with "
        "the keys: WHERE category IN ('books', 'travel')",
    )


def series_limit(s: exp.Select, leaves: Sequence[exp.Select], policy: Policy) -> KeyLink:
    """A block that joins an earlier leaf on that leaf's single GROUP BY key (Superset's series
    limit: ``JOIN (SELECT k AS k__, SUM(m) ... GROUP BY k ORDER BY 2 DESC LIMIT 5) s ON k =
    k__``). The join keeps exactly the rows whose key the leaf released, once each (its keys are
    distinct), so it is the filter ``k IN (released keys)``: the leaf's answer is public, and the
    block is a leaf of its own over a key domain that is public too.

    Raises:
        UnsupportedSql: any other way of reading a leaf's answer inside a private block.
    """
    for sub in s.find_all(exp.Select):
        n = leaf_number(sub)
        if n is not None and not _in_from(sub, s):
            raise answer_in_expression(s, sub, leaves[n])
    found = []
    for j in s.args.get("joins") or []:
        body = j.this.this if isinstance(j.this, exp.Subquery) else None
        if isinstance(j.this, exp.Table):
            body = cte_body(j.this)
        if isinstance(body, exp.Select) and leaf_number(body) is not None:
            found.append((j, leaf_number(body)))
    src = s.args.get("from_")
    if len(found) != 1 or (src is not None and _reads_leaf(src)):
        raise _refuse_series("one JOIN to one aggregate, the private table in FROM")
    join, source = found[0]
    assert source is not None
    if (join.args.get("side") or join.args.get("kind") or "INNER").upper() not in ("INNER", ""):
        raise _refuse_series("an inner JOIN")
    alias = join.this.alias_or_name
    on = join.args.get("on")
    if not isinstance(on, exp.EQ):
        raise _refuse_series("ON one equality")
    column = _leaf_key_column(leaves[source])
    sides = [on.this, on.expression]
    inner = [x for x in sides if _names_leaf(x, alias, column)]
    if len(inner) != 1:
        raise _refuse_series(f"ON outer_column = {alias}.{column or 'key'}")
    expr = sides[1 - sides.index(inner[0])]
    block = s.copy()
    block.set("joins", [x.copy() for x in s.args["joins"] if x is not join] or None)
    outputs = {e.alias_or_name for e in leaves[source].expressions}
    own = _columns_of(block, policy)
    for c in block.find_all(exp.Column):
        if c.table == alias or (not c.table and c.name in outputs and c.name not in own):
            raise _refuse_series(f"nothing of {alias} read besides the join key")
    for c in expr.find_all(exp.Column):
        if c.table == alias or _identifier(c, policy, block):
            raise _refuse_series("a join on a grouping column, not an identifier")
    out = standalone(s)
    out.set("joins", [x.copy() for x in block.args.get("joins") or []] or None)
    return KeyLink(source, column or "", expr.copy(), out)


def _in_from(node: exp.Expr, block: exp.Select) -> bool:
    """``node`` is (inside) a FROM or JOIN item of ``block``, not an expression of it."""
    while node.parent is not None and node is not block:
        if isinstance(node, (exp.From, exp.Join)) and node.parent is block:
            return True
        node = node.parent
    return False


def _leaf_key_column(leaf: exp.Select) -> str | None:
    """The output name of a leaf's single GROUP BY key, or None."""
    group = leaf.args.get("group")
    if group is None or len(group.expressions) != 1:
        return None
    g = group.expressions[0]
    items = leaf.expressions
    if isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit():
        i = int(g.this) - 1
        return str(items[i].alias_or_name) if 0 <= i < len(items) else None
    for e in items:
        body = e.this if isinstance(e, exp.Alias) else e
        if body.sql(POSTGRES) == g.sql(POSTGRES) or (
            isinstance(g, exp.Column) and not g.table and e.alias_or_name == g.name
        ):
            return str(e.alias_or_name)
    return None


def _names_leaf(x: exp.Expr, alias: str, column: str | None) -> bool:
    return (
        column is not None
        and isinstance(x, exp.Column)
        and x.name == column
        and x.table in ("", alias)
    )


def _columns_of(block: exp.Select, policy: Policy) -> set[str]:
    """The column names of the tables ``block`` reads (private ones from the policy)."""
    out: set[str] = set()
    for name, _ in referenced_tables(block):
        t = policy.private_table(name)
        if t is not None:
            out |= set(t.columns)
    return out


def _identifier(c: exp.Column, policy: Policy, block: exp.Select) -> bool:
    """Whether ``c`` may name an identifier column of a private table the block reads."""
    for name, _ in referenced_tables(block):
        t = policy.private_table(name)
        col = t.columns.get(c.name) if t is not None else None
        if col is not None and col.identifier:
            return True
    return False


def prune_ctes(tree: exp.Expr) -> exp.Expr:
    """``tree`` without the CTEs nothing reads any more (those the leaves read in their place);
    PostgreSQL never evaluates an unreferenced CTE without side effects, so the rows match."""
    while True:
        used = {id(cte_body(t)) for t in tree.find_all(exp.Table)}
        dropped = False
        for w in list(tree.find_all(exp.With)):
            keep = [c for c in w.expressions if id(c.this) in used]
            if len(keep) != len(w.expressions):
                dropped = True
                if keep:
                    w.set("expressions", keep)
                else:
                    w.pop()
        if not dropped:
            return tree


# -- which blocks are leaves ---------------------------------------------------------------


def _lowest_leaves(tree: exp.Expr, policy: Policy) -> list[exp.Select]:
    cands = [
        s
        for s in tree.find_all(exp.Select)
        if not _is_placeholder(s) and is_aggregate_block(s) and private_tables(s, policy)
    ]
    ids = {id(s) for s in cands}
    return [s for s in cands if not any(id(t) in ids for t in selects_below(s))]


def _is_placeholder(s: exp.Select) -> bool:
    src = s.args.get("from_")
    return (
        src is not None
        and isinstance(src.this, exp.Table)
        and src.this.name.startswith(LEAF_PREFIX)
        and not s.args.get("where")
        and len(s.expressions) == 1
        and isinstance(s.expressions[0], exp.Star)
    )


def _reads_leaf(s: exp.Select) -> bool:
    return any(t.name.startswith(LEAF_PREFIX) for t in s.find_all(exp.Table))


def standalone(s: exp.Select) -> exp.Select:
    """``s`` as a statement of its own: a copy with the outer CTEs it names attached."""
    needed: list[exp.CTE] = []
    seen: set[int] = set()

    def collect(node: exp.Expr) -> None:
        for t in node.find_all(exp.Table):
            body = cte_body(t)
            if body is None or contains(s, body) or id(body) in seen:
                continue
            seen.add(id(body))
            collect(body)
            cte = body.parent
            if isinstance(cte, exp.CTE):
                needed.append(cte)

    collect(s)
    out = s.copy()
    if needed:
        own = out.args.get("with_")
        ctes = [c.copy() for c in needed] + (list(own.expressions) if own else [])
        out.set("with_", exp.With(expressions=ctes))
    return out


def leaf_number(s: exp.Select) -> int | None:
    """The leaf a placeholder SELECT stands for."""
    if not _is_placeholder(s):
        return None
    return int(s.args["from_"].this.name[len(LEAF_PREFIX) :])


def fill(post: exp.Expr, leaves: Sequence[exp.Expr]) -> exp.Expr:
    """``post`` with each placeholder replaced by its leaf's released rows (a query)."""
    out = post.copy()
    if isinstance(out, exp.Select) and leaf_number(out) is not None:
        return leaves[leaf_number(out) or 0].copy()
    for s in list(out.find_all(exp.Select)):
        i = leaf_number(s)
        if i is not None:
            s.replace(leaves[i].copy())
    return out


# -- the budget split -----------------------------------------------------------------------


def split_budget(
    needs_delta: Sequence[bool], epsilon: Fraction, delta: Fraction, mechanism: str
) -> list[tuple[Fraction, Fraction]]:
    """Each leaf's (epsilon, delta): epsilon/k each; delta in equal parts to the leaves that need
    it (``needs_delta``: partition selection), or to every leaf when none does or when Gaussian
    noise is requested. The parts add up to (epsilon, delta) exactly.

    >>> split_budget([False, True], Fraction(1), Fraction(1, 10**6), "auto")
    [(Fraction(1, 2), Fraction(0, 1)), (Fraction(1, 2), Fraction(1, 1000000))]
    """
    k = len(needs_delta)
    takers = {i for i, n in enumerate(needs_delta) if n}
    if not takers or mechanism == "gaussian":
        takers = set(range(k))
    return [(epsilon / k, delta / len(takers) if i in takers else Fraction(0)) for i in range(k)]


def refuse_if_not_split(error: DpsqlError, result: Split | None) -> Split:
    """The split, or the flat analysis's own refusal when there is nothing to split."""
    if result is None:
        raise error
    return result
