"""Refusals that say plainly why and what to write instead, in the user's own SQL.

Two shapes a new user tries first and used to get a hint about something else:

* a raw column of a private table in the select list (``SELECT email FROM purchases``): why
  (its values are never returned, one row or one person at a time) and what answers the same
  question (:func:`raw_column`);
* another query's answer inside a private block (``WHERE amount > (SELECT AVG(amount) FROM
  purchases)``, ``HAVING COUNT(*) > (SELECT ...)``): why (that answer is itself a noisy release,
  and the rows a private query aggregates are chosen by constants and public tables only) and
  what to write instead, with the user's own subquery (:func:`answer_in_expression`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import PrivacyViolation, UnsupportedSql
from dpsql.policy import Column as PolicyColumn
from dpsql.policy.tables import PrivateTable
from dpsql.sql.wording import plain_sql

if TYPE_CHECKING:
    from dpsql.sql.analysis import Analysis

_SHORT = 100


def _short(text: str) -> str:
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def raw_column(
    name: str, table: str, col: PolicyColumn | None, private: bool, where: str, grouped: bool
) -> PrivacyViolation:
    """A column of ``table`` selected raw in ``where`` (not aggregated, not a GROUP BY key).

    >>> from dpsql.policy import Column
    >>> e = raw_column("email", "purchases", Column(type="text", identifier=True), True, "the select list", False)
    >>> e.message
    'column email of private table purchases is an identifier: dpsql never returns its values, only noisy aggregates'
    >>> e.hint
    'count them instead: SELECT COUNT(DISTINCT email) FROM purchases'
    """
    if col is not None and col.identifier:
        return PrivacyViolation(
            f"column {name} of private table {table} is an identifier: dpsql never returns "
            "its values, only noisy aggregates",
            hint=f"count them instead: SELECT COUNT(DISTINCT {name}) FROM {table}",
        )
    if not private:
        return PrivacyViolation(
            f"column {name} of public table {table} is not a GROUP BY key of this query: joined "
            "to private rows, selecting it raw would return them row by row",
            hint=f"GROUP BY it: SELECT {name}, COUNT(*) FROM ... GROUP BY {name}",
        )
    why = (
        f"column {name} of private table {table} can't be returned row by row: dpsql answers "
        "with noisy aggregates only"
    )
    if grouped:
        why += f", and {name} is not a GROUP BY key of this query"
    if col is not None and (col.keys or col.keys_from):
        hint = f"group by it and count: SELECT {name}, COUNT(*) FROM {table} GROUP BY {name}"
    elif col is not None and col.bounds is not None and col.family in ("integer", "numeric"):
        hint = (
            f"aggregate it: SELECT AVG({name}), SUM({name}), MEDIAN({name}) FROM {table}; or "
            f"count its values: SELECT {name}, COUNT(*) FROM {table} GROUP BY {name}"
        )
    elif col is not None and col.bounds is not None:  # dates and timestamps
        hint = (
            f"aggregate it: SELECT MIN({name}), MAX({name}) FROM {table}; or count by period: "
            f"SELECT date_trunc('month', {name}), COUNT(*) FROM {table} GROUP BY 1"
        )
    else:
        hint = (
            f"aggregate it (SELECT COUNT({name}) FROM {table}), or count its values: "
            f"SELECT {name}, COUNT(*) FROM {table} GROUP BY {name}"
        )
    if grouped:
        numeric = (
            col is not None and col.bounds is not None and col.family in ("integer", "numeric")
        )
        keyed = col is not None and bool(col.keys or col.keys_from)
        call = (
            f"AVG({name})" if numeric else f"COUNT(DISTINCT {name})" if keyed else f"COUNT({name})"
        )
        hint = f"add {name} to GROUP BY, or aggregate it, e.g. {call}"
    return PrivacyViolation(why, hint=hint)


def window_over_rows() -> PrivacyViolation:
    """A window function over a private block's rows (each would return a value per row)."""
    return PrivacyViolation(
        "window functions over private rows are not allowed: each would return a value per "
        "private row",
        hint="aggregate with GROUP BY; windows over the aggregates are answered, e.g. "
        "SELECT category, SUM(amount), SUM(SUM(amount)) OVER () FROM t GROUP BY category",
    )


def star_refusal(qualified: str, table: PrivateTable) -> PrivacyViolation:
    """``SELECT *`` over a private table: an example aggregate over its own columns, and the
    zero-row query that lists its columns.

    >>> from dpsql.demo import POLICY
    >>> from dpsql.policy import load_policy
    >>> e = star_refusal("public.pums", load_policy(POLICY).private_table("public.pums"))
    >>> e.message, e.hint
    ('SELECT * would return raw rows of private table pums', 'ask for aggregates, e.g. SELECT COUNT(*), AVG(age) FROM pums, or SELECT sex, COUNT(*) FROM pums GROUP BY sex; to see its columns: SELECT * FROM pums LIMIT 0')
    """
    name = qualified.removeprefix("public.")
    cols = table.columns
    num = next(
        (c for c, v in cols.items() if v.bounds is not None and v.family in ("integer", "numeric")),
        None,
    )
    key = next((c for c, v in cols.items() if v.keys or v.keys_from), None)
    example = f"SELECT COUNT(*){f', AVG({num})' if num else ''} FROM {name}"
    if key:
        example += f", or SELECT {key}, COUNT(*) FROM {name} GROUP BY {key}"
    return PrivacyViolation(
        f"SELECT * would return raw rows of private table {name}",
        hint=f"ask for aggregates, e.g. {example}; to see its columns: SELECT * FROM {name} LIMIT 0",
    )


def row_list_refusal(
    qualified: str, table: PrivateTable, items: list[exp.Expr], where: exp.Expr | None = None
) -> PrivacyViolation | None:
    """A select list of two or more plain columns of private table ``qualified`` with no
    aggregate and no GROUP BY (a table preview: Superset's ``SELECT id, user_id, email, ...
    LIMIT 100``, an ORM's ``SELECT t.id, t.col ... FROM t``): refused as the raw rows it asks
    for, as ``SELECT *`` is (it was refused on its first identifier, with a hint to count it),
    with an aggregate over the same columns and filter as the example; None for any other
    select list.

    >>> from dpsql.demo import POLICY
    >>> from dpsql.policy import load_policy
    >>> import sqlglot
    >>> t = load_policy(POLICY).private_table("public.purchases")
    >>> q = sqlglot.parse_one("SELECT email, category, amount FROM purchases WHERE amount > 400")
    >>> e = row_list_refusal("public.purchases", t, q.expressions, q.args["where"].this)
    >>> e.message, e.hint
    ('SELECT email, category, amount would return raw rows of private table purchases', 'ask for aggregates over them, e.g. SELECT category, COUNT(*), AVG(amount) FROM purchases WHERE amount > 400 GROUP BY category; to see its columns: SELECT * FROM purchases LIMIT 0')
    """
    cols: list[str] = []
    for e in items:
        body = e.this if isinstance(e, exp.Alias) else e
        if not isinstance(body, exp.Column) or isinstance(body.this, exp.Star):
            return None
        if body.name not in table.columns:
            return None
        cols.append(body.name)
    if len(cols) < 2:
        return None
    name = qualified.removeprefix("public.")
    shown = ", ".join(cols) if len(cols) <= 4 else ", ".join(cols[:3]) + ", ..."
    declared = [table.columns[c] for c in cols]
    keys = [c for c, v in zip(cols, declared, strict=True) if v.keys or v.keys_from][:2]
    num = next(
        (
            c
            for c, v in zip(cols, declared, strict=True)
            if v.bounds is not None and v.family in ("integer", "numeric") and not v.identifier
        ),
        None,
    )
    parts = [*keys, "COUNT(*)"] + ([f"AVG({num})"] if num else [])
    example = f"SELECT {', '.join(parts)} FROM {name}"
    if where is not None:
        example += f" WHERE {_short(plain_sql(where))}"
    if keys:
        example += f" GROUP BY {', '.join(keys)}"
    return PrivacyViolation(
        f"SELECT {shown} would return raw rows of private table {name}",
        hint=f"ask for aggregates over them, e.g. {example}; to see its columns: "
        f"SELECT * FROM {name} LIMIT 0",
    )


def answer_in_expression(block: exp.Select, sub: exp.Expr, inner: exp.Select) -> UnsupportedSql:
    """``sub`` (a placeholder of the aggregate ``inner``) is read inside an expression of the
    private ``block`` (WHERE, HAVING, the select list), not joined to it."""
    holder = sub.parent if isinstance(sub.parent, exp.Subquery) else sub
    use = holder.parent if holder.parent is not None else holder
    clause = "the select list"
    node: exp.Expr | None = holder
    while node is not None and node is not block:
        if isinstance(node, exp.Where):
            clause = "WHERE"
            break
        if isinstance(node, exp.Having):
            clause = "HAVING"
            break
        node = node.parent
    inner_sql = _short(plain_sql(inner, qualified=True))
    many = isinstance(use, exp.In)
    shown = use.copy()
    for s in list(shown.find_all(exp.Subquery, exp.Select)):
        if any(_placeholder(t) for t in s.find_all(exp.Table)):
            s.replace(exp.var(f"({inner_sql})"))
            break
    written = _short(plain_sql(shown, qualified=True)) if use is not block else f"({inner_sql})"
    if clause == "WHERE":
        constant = use.copy()
        for s in list(constant.find_all(exp.Subquery, exp.Select)):
            if any(_placeholder(t) for t in s.find_all(exp.Table)):
                s.replace(exp.var("(<its values>)" if many else "<its answer>"))
                break
        after = _short(plain_sql(constant, qualified=True)) if use is not block else "a constant"
        per_key = _per_key(inner)
        if per_key is not None and not many:
            grouped, outer_col = per_key
            return UnsupportedSql(
                f"WHERE {written} is not supported: the rows a private query aggregates are "
                "chosen by constants and public tables only, and another aggregate's answer is "
                "itself a noisy release",
                hint=f"run {_short(plain_sql(grouped, qualified=True))} on its own first (one "
                f"answer per {outer_col}), then write each answer into the filter as a "
                f"constant: WHERE {outer_col} = <a value> AND {after}",
            )
        return UnsupportedSql(
            f"WHERE {written} is not supported: the rows a private query aggregates are chosen "
            "by constants and public tables only, and another aggregate's answer is itself a "
            "noisy release",
            hint=f"run {inner_sql} on its own first, then write its answer"
            f"{'s' if many else ''} into the filter as {'constants' if many else 'a constant'}: "
            f"WHERE {after}"
            + ("; a column with declared keys is filtered by its keys at no cost" if many else ""),
        )
    outer = block.copy()
    if clause == "HAVING":
        outer.set("having", None)
    else:
        outer.set(
            "expressions",
            [
                e
                for e in outer.expressions
                if not any(_placeholder(t) for t in e.find_all(exp.Table))
            ],
        )
    b = inner.copy()
    if len(b.expressions) == 1 and not isinstance(b.expressions[0], exp.Alias):
        b.set("expressions", [exp.alias_(b.expressions[0], "v")])
    a_sql = (
        plain_sql(outer, qualified=True)
        if outer.expressions
        else "SELECT ... FROM ... GROUP BY ..."
    )
    having = clause == "HAVING"
    where = f"HAVING {written}" if having else f"a subquery in the select list, {written},"
    return UnsupportedSql(
        f"{where} is not supported: a private aggregate can't read another query's answer "
        "inside its own SELECT",
        hint=f"compute each in a CTE of its own and {'compare' if having else 'combine'} them "
        f"in the outer SELECT: WITH a AS ({_short(a_sql)}), b AS ({_short(plain_sql(b, qualified=True))}) "
        f"SELECT {'... FROM a CROSS JOIN b WHERE ...' if having else 'a.*, b.v FROM a CROSS JOIN b'}"
        " (each CTE is answered privately; the outer SELECT only reads their noisy answers)",
    )


def _per_key(inner: exp.Select) -> tuple[exp.Select, str] | None:
    """A correlated aggregate ``SELECT AVG(amount) FROM purchases c WHERE p.category =
    c.category [AND ...]`` as the grouped query that answers it for every key at once (``SELECT
    c.category, AVG(amount) FROM purchases AS c GROUP BY c.category``) and the outer column
    (``p.category``); None when it is not correlated by one equality of columns, or is grouped."""
    where = inner.args.get("where")
    if where is None or inner.args.get("group") or len(inner.expressions) != 1:
        return None
    own = {t.alias_or_name for t in inner.find_all(exp.Table)}
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]

    def outer(c: exp.Expr) -> bool:
        return isinstance(c, exp.Column) and bool(c.table) and c.table not in own

    links = [x for x in conjuncts if any(outer(c) for c in x.find_all(exp.Column))]
    if len(links) != 1 or not isinstance(links[0], exp.EQ):
        return None
    sides = [links[0].this, links[0].expression]
    ours = [x for x in sides if isinstance(x, exp.Column) and not outer(x)]
    theirs = [x for x in sides if outer(x)]
    if len(ours) != 1 or len(theirs) != 1:
        return None
    grouped = inner.copy()
    rest = [x.copy() for x in conjuncts if x is not links[0]]
    grouped.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
    grouped.set("expressions", [ours[0].copy(), *(e.copy() for e in inner.expressions)])
    grouped.set("group", exp.Group(expressions=[ours[0].copy()]))
    return grouped, plain_sql(theirs[0], qualified=True)


def _placeholder(t: exp.Table) -> bool:
    return str(t.name).startswith("_dpsql_")


def period_hint(a: Analysis) -> str:
    """For GROUP BY keys without declared values that are a date or timestamp column with
    declared bounds (``GROUP BY purchased_at``): group by its month instead, in the user's own
    column name, ``date_trunc('month', purchased_at)``, whose months the bounds make public
    (:mod:`dpsql.sql.date_domain`: every month released, none chosen by the data); '' otherwise.

    >>> from dpsql.demo import POLICY
    >>> from dpsql.policy import load_policy
    >>> from dpsql.sql.analyze import analyze
    >>> from dpsql.sql.parse import parse_statement
    >>> sql = "SELECT p.purchased_at, COUNT(*) FROM purchases p GROUP BY 1"
    >>> period_hint(analyze(parse_statement(sql).tree, load_policy(POLICY)))
    "GROUP BY date_trunc('month', p.purchased_at) instead: the policy bounds purchased_at (2025-01-01 to 2025-12-31), so its months are public keys, each released with noise"
    """
    for g in a.group_keys:
        if g.declared:
            continue
        node = g.expr
        while isinstance(node, (exp.Cast, exp.Paren)):
            node = node.this
        if not isinstance(node, exp.Column):
            continue
        col = a.column(node)
        if col is None or col.bounds is None or col.family not in ("date", "timestamp"):
            continue
        lo, hi = (str(b).split(" ")[0] if col.family == "date" else str(b) for b in col.bounds)
        # as written: qualified by the user's alias (p.purchased_at), else the bare name
        own = node.table and node.table != a.table.split(".")[-1]
        name = plain_sql(node, qualified=bool(own))
        return (
            f"GROUP BY date_trunc('month', {name}) instead: the policy bounds {node.name} "
            f"({lo} to {hi}), so its months are public keys, each released with noise"
        )
    return ""
