"""What :mod:`dpsql.sql.flatten` reads of a derived table's SELECT before merging it.

Its output columns (:func:`projection`, ``*`` passing columns through), whether it is
*row-level* (no aggregate, GROUP BY, DISTINCT, LIMIT or window: it only filters rows and
derives values) or an aggregate query, and whether merging it keeps the row count PostgreSQL
computes (:func:`check_mergeable`: no set-returning function in its select list, no row lock);
and the two edits every merge makes: a select item keeps its output name (:func:`keep_name`),
the inner block's WHERE joins the outer one (:func:`and_inner_where`).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedSql
from dpsql.sql import functions as fn

# PostgreSQL's set-returning functions that can appear in a select list (one input row -> many)
SET_RETURNING = frozenset(
    """generate_series generate_subscripts unnest json_array_elements json_array_elements_text
    jsonb_array_elements jsonb_array_elements_text json_each json_each_text jsonb_each
    jsonb_each_text json_object_keys jsonb_object_keys json_populate_recordset
    jsonb_populate_recordset json_to_recordset jsonb_to_recordset jsonb_path_query
    regexp_matches regexp_split_to_table string_to_table ts_stat ts_debug ts_parse
    ts_token_type aclexplode pg_get_keywords pg_options_to_table pg_listening_channels
    pg_get_catalog_foreign_keys pg_ls_dir pg_timezone_names pg_timezone_abbrevs
    pg_cursor pg_prepared_statement pg_show_all_settings pg_expandarray""".split()
)
_SET_RETURNING_NODES = (exp.Unnest, exp.Explode, exp.GenerateSeries, exp.ExplodingGenerateSeries)


def _set_returning(q: exp.Select) -> exp.Expr | None:
    """The first set-returning function call in ``q``'s select list, if any."""
    for e in q.expressions:
        for n in e.walk():
            if isinstance(n, _SET_RETURNING_NODES):
                return n
            if isinstance(n, exp.Func) and n.sql_name().lower() in SET_RETURNING:
                return n
            if isinstance(n, exp.Anonymous) and str(n.name).lower() in SET_RETURNING:
                return n
    return None


def check_mergeable(inner: exp.Select) -> None:
    """Refuse a derived table whose merge would change the row count PostgreSQL computes.

    A set-returning function in a derived table's select list multiplies its rows (``COUNT(*)``
    over ``SELECT generate_series(1, 3) ...`` counts three rows per input row) even when the outer
    query never reads its column; merging the derived table would drop it silently. A row lock
    (``FOR UPDATE``/``FOR SHARE``) would be dropped the same way.

    Raises:
        UnsupportedSql: either shape (0A000).
    """
    if inner.args.get("locks"):
        raise UnsupportedSql(
            "row locks (FOR UPDATE, FOR SHARE) over private rows are not supported",
            hint="remove the FOR UPDATE/FOR SHARE clause: dpsql runs read-only",
        )
    srf = _set_returning(inner)
    if srf is not None:
        name = (
            srf.sql_name().lower()
            if isinstance(srf, exp.Func) and not isinstance(srf, exp.Anonymous)
            else str(srf.name)
        )
        name = {"explode": "unnest", "exploding_generate_series": "generate_series"}.get(name, name)
        raise UnsupportedSql(
            f"the set-returning function {name.lower()}() in a derived table over private rows is "
            "not supported",
            hint="aggregate the private table directly; a set-returning function would multiply "
            "each row",
        )


def is_row_level(q: exp.Select, joins: bool = False) -> bool:
    """``q`` filters and computes columns of its FROM's rows (no aggregate, GROUP BY, DISTINCT,
    LIMIT or window); ``joins``: its FROM may be a join of plain tables (INNER, LEFT, CROSS,
    with ON), else a single table or derived table."""
    if any(q.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "windows")):
        return False
    if q.args.get("with_"):
        return False
    for j in q.args.get("joins") or []:
        side = str(j.args.get("side") or "").upper()
        kind = str(j.args.get("kind") or "").upper()
        plain = isinstance(j.this, exp.Table) and not isinstance(j.this.this, exp.Func)
        if not joins or not plain or j.args.get("using") or j.args.get("method"):
            return False
        if side not in ("", "LEFT") or kind not in ("", "INNER", "CROSS", "OUTER"):
            return False
    return not any(fn.is_aggregate(n) or isinstance(n, exp.Window) for n in q.walk())


def is_aggregate_query(q: exp.Select) -> bool:
    return bool(q.args.get("group")) or any(
        fn.is_aggregate(n) for e in q.expressions for n in e.walk()
    )


def projection(q: exp.Select) -> dict[str, exp.Expr]:
    """Output name -> expression of a derived table's select list (``*`` passes columns through)."""
    out: dict[str, exp.Expr] = {}
    for e in q.expressions:
        if isinstance(e, exp.Alias):
            out[e.alias] = e.this
        elif isinstance(e, exp.Column) and not isinstance(e.this, exp.Star):
            out[e.name] = e
    return out


def is_star(e: exp.Expr) -> bool:
    return isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))


def has_star(q: exp.Select) -> bool:
    return any(is_star(e) for e in q.expressions)


def keep_name(before: exp.Expr, after: exp.Expr) -> exp.Expr:
    """A substituted select item keeps the output name it had: PostgreSQL names a column, and a
    cast of one (``CAST(rev AS bigint)``, ``rev::bigint``), by the column (``rev``), not by what
    the derived table computes it from (``sum``)."""
    if isinstance(before, exp.Alias):
        return after
    col = before
    while isinstance(col, (exp.Cast, exp.Paren)):
        col = col.this
    if not isinstance(col, exp.Column) or isinstance(col.this, exp.Star):
        return after
    if col is not before:
        return exp.alias_(after, col.name, quoted=True)
    inner = after.this if isinstance(after, exp.Paren) else after
    if isinstance(inner, exp.Column) and inner.name == before.name:
        return inner
    return exp.alias_(inner, before.name, quoted=True)


def and_inner_where(out: exp.Select, inner: exp.Select) -> exp.Select:
    """``out`` with the inner block's WHERE ANDed to its own (``out`` is changed and returned)."""
    iw = inner.args.get("where")
    if iw is not None:
        ow = out.args.get("where")
        cond = (
            iw.this.copy()
            if ow is None
            else exp.and_(exp.Paren(this=iw.this.copy()), exp.Paren(this=ow.this))
        )
        out.set("where", exp.Where(this=cond))
    return out
