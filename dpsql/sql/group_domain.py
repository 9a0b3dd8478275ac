"""A GROUP BY key with its public domain: declared, from the query text, narrowed by WHERE.

The reasoning (and the privacy argument: domains come from the policy and the query text only)
is in :mod:`dpsql.sql.key_domain` and :mod:`dpsql.sql.date_domain`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from sqlglot import exp

from dpsql.errors import DpsqlError
from dpsql.policy.tables import Column
from dpsql.sql.analysis import GroupKey
from dpsql.sql.constants import NULL, is_public_constant
from dpsql.sql.derived_keys import TooMany
from dpsql.sql.derived_memo import derived_domain
from dpsql.sql.key_domain import KeyFilter, key_value
from dpsql.sql.key_literals import case_domain, listed_domain
from dpsql.sql.key_truth import Hypothesis, truth
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.sources import PUBLIC_COLUMN, Ctx
from dpsql.sql.wording import plain_sql


def group_key(ctx: Ctx, expr: exp.Expr, name: str) -> GroupKey:
    """The key ``expr`` (checked by the caller) with the domain the policy or its form gives."""
    qualified = ctx.qualify(expr)
    if isinstance(expr, exp.Column):
        col = ctx.column(expr)
        source = ctx.source(expr)
        if source.private is None:  # a public table's column: its values are public keys
            return GroupKey(qualified, name, None, f"{source.table}.{expr.name}")
        return GroupKey(qualified, name, col.key_texts, col.keys_from, col.family)
    case = case_domain(expr)
    if case is not None:
        texts, null, family = case
        return GroupKey(qualified, name, texts, None, family, null_key=null)
    if is_public_constant(expr):  # one group, whatever the rows: no partition selection
        return GroupKey(qualified, name, None, constant=True)
    return GroupKey(qualified, name, None)


def _trunc_parts(expr: exp.Expr) -> tuple[exp.Expr | None, str | None]:
    """(base column, unit) of a ``date_trunc(unit, column)`` key, else (None, None)."""
    if isinstance(expr, (exp.TimestampTrunc, exp.DateTrunc)) and isinstance(expr.this, exp.Column):
        unit = expr.args.get("unit")
        if isinstance(unit, (exp.Var, exp.Literal)):
            return expr.this, str(unit.this).lower()
    return None, None


def narrow_by_where(
    g: GroupKey,
    where: exp.Expr | None,
    column: Callable[[exp.Column], Column],
    zone: str = "UTC",
) -> GroupKey:
    """``g`` with its domain narrowed by the (qualified) WHERE clause, or given one by it, or by
    the policy through the key's expression (:mod:`dpsql.sql.derived_keys`: ``date_trunc`` of a
    bounded date, ``EXTRACT``, casts, booleans, ... in time zone ``zone``)."""
    base, unit = _trunc_parts(g.expr)
    if g.keys is None and g.keys_from is None and not g.constant:

        def private(c: exp.Column) -> Column | None:
            col = column(c)
            return None if col is PUBLIC_COLUMN else col

        try:
            got = derived_domain(g.expr, private, where, zone)
        except TooMany as e:
            got = None
            g = replace(g, why=e.why)
        if got is not None:
            g = replace(g, keys=got.keys, family=got.family, null_key=got.null)
    if where is None or g.family is None:
        return g
    is_date = isinstance(base, exp.Column) and column(base).family == "date"
    f = KeyFilter(g.expr, where, g.family, base, unit, is_date)
    null = g.null_key and f.admits(None)
    if g.keys is not None:
        return replace(g, keys=f.narrow(g.keys), null_key=null)
    if g.keys_from is not None:
        return replace(g, narrow=f)
    listed = listed_domain(where, g.expr, g.family)
    if listed is not None:
        return replace(g, keys=f.narrow(listed))
    return g


def no_key_left(
    before: GroupKey, after: GroupKey, where: exp.Expr | None, *, grouped: bool = True
) -> str | None:
    """The notice for a GROUP BY key whose declared keys the WHERE clause rules out one and all
    (``WHERE category = 'Books'`` when the keys are lower-case), None when some key is left: the
    answer has no rows whatever the data, as PostgreSQL's would, and is given free (the engine:
    nothing read, nothing charged; a ``keys_from`` key or a date range left empty alike). The
    notice names the keys (they are public: the policy's) and the likely typo."""
    if not before.keys or after.keys or after.null_key:
        return None
    name = before.expr.name if isinstance(before.expr, exp.Column) else before.name
    shown = ", ".join(before.keys[:20]) + (", ..." if len(before.keys) > 20 else "")
    lower = {k.lower(): k for k in before.keys}
    near = [
        lower[lit.this.lower()]
        for lit in (where.find_all(exp.Literal) if where is not None else ())
        if lit.is_string and lit.this not in before.keys and lit.this.lower() in lower
    ]
    hint = (
        f"keys are compared exactly: write '{near[0]}'"
        if near
        else f"filter on declared keys of {name}, e.g. WHERE {name} = '{before.keys[0]}'"
    )
    result = (
        "the answer has no rows whatever the data"
        if grouped
        else "no row can pass it whatever the data: the aggregates are those of no rows, as "
        "PostgreSQL gives them (COUNT 0; SUM, AVG, MIN and the others NULL)"
    )
    return (
        f"the WHERE clause leaves no declared key of {name} (the declared keys: {shown}), so "
        f"{result} (nothing was read or charged); {hint}"
    )


def no_row_left(ctx: Ctx, where: exp.Expr | None) -> str | None:
    """For a statement without GROUP BY: :func:`no_key_left`'s notice when the (qualified) WHERE
    clause leaves no declared key of a private column with ``keys:`` (the policy's list of the
    values the column may take: its whole domain, docs/policy.md) and can't be true where that
    column is NULL either (``diagnosis = 'Flu'`` when the keys are lower-case): no row can pass
    it whatever the data, and the answer is that of no rows, free (newcomer22 #9; the GROUP BY
    form's since 25de59e). A ``keys_from`` column is not one: its public table lists the keys
    GROUP BY releases, not every value a row may hold. A function of the statement and the policy
    only. None otherwise."""
    if where is None:
        return None
    for c, col in private_where_columns(ctx, where):
        if col.keys is None:
            continue
        before = group_key(ctx, c, c.name)
        after = narrow_by_where(before, where, ctx.column)
        if not before.keys or after.keys:
            continue
        if "t" in truth(where, Hypothesis(after.expr.sql(POSTGRES), NULL)):
            continue  # a row whose value is NULL may pass
        return no_key_left(before, after, where, grouped=False)
    return None


def private_where_columns(ctx: Ctx, where: exp.Expr) -> Iterator[tuple[exp.Column, Column]]:
    """Each column of a private table ``where`` names in its own scope (not in a subquery),
    once per text, with the policy's column; columns it can't resolve are left out."""
    seen: set[str] = set()
    for c in where.find_all(exp.Column):
        if in_subquery(c, where):
            continue  # another scope's column
        text = c.sql(POSTGRES)
        if text in seen:
            continue
        seen.add(text)
        try:
            source, col = ctx.source(c), ctx.column(c)
        except DpsqlError:
            continue
        if source.private is not None and col is not PUBLIC_COLUMN:
            yield c, col


def in_subquery(node: exp.Expr, top: exp.Expr) -> bool:
    """Whether ``node`` sits in a subquery of ``top`` (another scope)."""
    up = node.parent
    while up is not None and node is not top:
        if isinstance(up, (exp.Subquery, exp.Select, exp.Exists)):
            return True
        node, up = up, up.parent
    return False


def empty_domain_notice(keys: tuple[GroupKey, ...], note: str | None) -> str | None:
    """``note`` (:func:`no_key_left`'s), or a general one, when some key's public domain is
    empty after the WHERE clause (a ``keys_from`` value or a date range no key is in): the
    answer has no rows whatever the data; None when every key has some value left."""
    for g in keys:
        if g.keys == () and not g.null_key and not g.constant:
            if note is not None:
                return note
            name = g.expr.name if isinstance(g.expr, exp.Column) else plain_sql(g.expr)
            source = f" (the values of {g.keys_from})" if g.keys_from else ""
            return (
                f"the WHERE clause leaves none of the keys of {name} the policy gives{source}, "
                "so the answer has no rows whatever the data (nothing was read or charged)"
            )
    return None


def unfiltered_keys_notice(keys: tuple[GroupKey, ...], where: exp.Expr | None) -> str | None:
    """The notice of a statement that lists keys and measures nothing (``SELECT DISTINCT
    category FROM purchases WHERE amount > 100000``, or a GROUP BY without aggregates) when its
    WHERE clause says something the keys' domains can't decide: it is answered from the public
    domain (free, nothing read or released), so a key is listed whether or not any row passing
    that WHERE clause has it; None when the WHERE clause is decided for every listed key (only
    conditions on the one key column, each exactly true or false for each key: ``WHERE
    category IN ('books', 'travel')``). Which keys have such rows is private: finding out is a
    release, so the notice says how to ask for it (counted, with noise)."""
    if where is None or not keys:
        return None
    g = keys[0]
    if len(keys) == 1 and g.keys is not None and g.family is not None:
        key_sql, family = g.expr.sql(POSTGRES), g.family
        cols = {c.sql(POSTGRES) for c in where.find_all(exp.Column)}
        values = [key_value(k, family) for k in g.keys]
        if cols <= {key_sql} and all(
            v is not None and truth(where, Hypothesis(key_sql, v)) == frozenset("t") for v in values
        ):
            return None
    names = ", ".join(plain_sql(g.expr) for g in keys)
    return (
        f"the rows list the keys of {names} the policy gives (narrowed by what the WHERE clause "
        f"says of {names} itself), free, nothing read: whether rows passing the rest of the "
        "WHERE clause have each key is private and is not tested, so a key is listed even when "
        f"no such row has it. To count each key's rows, with noise (charged): SELECT {names}, "
        f"COUNT(*) ... WHERE ... GROUP BY {names}"
    )


def _uncast(expr: exp.Expr) -> str:
    """``expr``'s SQL with every cast taken off (``date_trunc('month', d::timestamptz)`` and
    ``date_trunc('month', d::timestamp)`` both read ``date_trunc('month', d)``)."""
    bare = expr.copy()
    for c in list(bare.find_all(exp.Cast)):
        if c is bare:
            bare = c.this
        else:
            c.replace(c.this)
    return bare.sql(POSTGRES)


def uncrossed(before: list[GroupKey], after: list[GroupKey]) -> list[GroupKey]:
    """``after`` (the keys with their domains) without a domain derived from the statement
    (``before`` had none) for a key that is another key with a domain but for casts:
    ``date_trunc('month', d::timestamptz), date_trunc('month', d::timestamp)`` are one value
    pair per row (one instant, two types), but their domains' product released every pair, each
    with noise: (January, February) and the like, pairs no row can have, ahead of PostgreSQL's
    own (test_fidelity). Such a key is left to partition selection, which releases only the
    pairs rows have, as before 2e40899. Keys of different fields of one column (``EXTRACT(year
    FROM d), EXTRACT(quarter FROM d)``) keep their product: most pairs can occur, and those the
    bounds rule out come back as empty groups (0 with noise), as declared keys' do."""
    out = list(after)
    bare = [_uncast(g.expr) for g in after]
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if b.keys is not None or a.keys is None:
            continue
        if any(
            j != i and bare[j] == bare[i] and (out[j].keys is not None or out[j].keys_from)
            for j in range(len(out))
        ):
            out[i] = b
    return out
