"""The SQL that :mod:`dpsql.catalog.check` adds: filtered catalog relations, object-id guards and
the visibility CTEs, built from the constant templates of :mod:`dpsql.catalog.rules` with
the policy's names as literals (sqlglot builders, never string formatting of input)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import sqlglot
from sqlglot import exp

from dpsql.catalog import function_rules, rules, visibility
from dpsql.policy.model import Policy
from dpsql.sql.nodes import POSTGRES


def cast_target(node: exp.Cast) -> str:
    to = node.to
    if isinstance(to, exp.ObjectIdentifier):
        return to.name.lower()
    if isinstance(to, exp.DataType) and to.this == exp.DataType.Type.USERDEFINED:
        kind = to.args.get("kind")
        if isinstance(kind, exp.Dot):
            return str(kind.expression.name).lower()
        if kind is not None:
            return kind.name.lower() if isinstance(kind, exp.Identifier) else str(kind).lower()
    return to.sql(POSTGRES).lower()


def qualified_call(node: exp.Func) -> exp.Expr:
    """The call with its ``pg_catalog.`` qualifier (the Dot node) when it has one."""
    parent = node.parent
    return parent if isinstance(parent, exp.Dot) and parent.expression is node else node


def replace_call(node: exp.Func, new: exp.Expr) -> None:
    """Replace a function call, with its ``pg_catalog.`` qualifier if it has one (in FROM, the
    qualifier is the source's schema: ``pg_catalog.CAST(...)`` would not parse)."""
    call = qualified_call(node)
    if isinstance(call.parent, exp.Table):
        call.parent.set("db", None)
    call.replace(new)


@lru_cache(maxsize=16)
def _type_node(name: str) -> exp.Expr:
    cast = sqlglot.parse_one(f"CAST(NULL AS {name})", read="postgres")
    assert isinstance(cast, exp.Cast)
    return cast.to


def cast_to(x: exp.Expr, type_name: str) -> exp.Cast:
    return exp.Cast(this=x, to=_type_node(type_name).copy())


# Object-identifier types whose names can be looked up without an error, and the function.
LOOKUP: dict[str, str] = {
    "REGCLASS": "to_regclass",
    "REGTYPE": "to_regtype",
    "REGNAMESPACE": "to_regnamespace",
    "REGPROC": "to_regproc",
    "REGPROCEDURE": "to_regprocedure",
    "REGOPER": "to_regoper",
    "REGOPERATOR": "to_regoperator",
    "REGCOLLATION": "to_regcollation",
    # no to_reg* function in PostgreSQL: looked up by dpsql (_NAME_LOOKUP)
    "REGCONFIG": "pg_ts_config",
    "REGDICTIONARY": "pg_ts_dict",
}
# A text search configuration or dictionary by name, as their input functions read it (schema-
# qualified, or in pg_catalog then public: dpsql pins search_path), NULL when missing.
_NAME_LOOKUP = (
    "(SELECT o.oid FROM pg_catalog.{c} AS o JOIN pg_catalog.pg_namespace AS n ON n.oid = o.{ns} "
    "WHERE o.{name} = (parse_ident(__t__))[cardinality(parse_ident(__t__))] "
    "AND CASE WHEN cardinality(parse_ident(__t__)) = 2 THEN n.nspname = (parse_ident(__t__))[1] "
    "WHEN cardinality(parse_ident(__t__)) = 1 THEN n.nspname IN ('pg_catalog', 'public') END "
    "ORDER BY n.nspname = 'pg_catalog' DESC LIMIT 1)"
)
_NAME_COLUMNS = {
    "pg_ts_config": ("cfgnamespace", "cfgname"),
    "pg_ts_dict": ("dictnamespace", "dictname"),
}


def _lookup(type_name: str, text: exp.Expr) -> exp.Expr:
    """``type_name``'s object named ``text`` (a TEXT expression), NULL when missing, never an
    error for a missing name."""
    catalog = LOOKUP[type_name]
    if catalog not in _NAME_COLUMNS:
        return exp.Anonymous(this=catalog, expressions=[text])
    ns, name = _NAME_COLUMNS[catalog]
    sql = _NAME_LOOKUP.format(c=catalog, ns=ns, name=name)
    return cast_to(fill(template(sql), {"__t__": cast_to(text, "TEXT")}), type_name)


_SAFE = "dpsql_object"  # meta key marking an expression as_object() built


def _strip_casts(x: exp.Expr) -> exp.Expr:
    while isinstance(x, exp.Cast):
        x = x.this
    return x


def _reg_valued(x: exp.Expr) -> bool:
    """``x`` is a catalog column of an object-identifier type (its text is a name)."""
    return isinstance(x, exp.Column) and x.name.lower() in function_rules.REG_COLUMNS


def as_object(x: exp.Expr, type_name: str) -> exp.Expr:
    """``x`` (an object id or a name) as a ``type_name`` value that never raises for a name.

    ``CAST('t' AS REGCLASS)`` raises "relation does not exist" for a missing table but answers for
    a hidden one: an existence oracle. So a name is looked up with ``to_regclass`` (NULL when
    missing), an id (digits, as PostgreSQL's own input function reads them) is cast, and an
    expression whose type is only known upstream is told apart there by its text:
    ``CASE WHEN CAST(x AS TEXT) ~ '^[0-9]+$' THEN CAST(CAST(CAST(x AS TEXT) AS OID) AS T)
    ELSE to_regX(CAST(x AS TEXT)) END``. A bound parameter still being described keeps the
    plain cast (nothing runs; PostgreSQL infers its type from it).

    >>> as_object(exp.Literal.string("people"), "REGCLASS").sql("postgres")
    "TO_REGCLASS('people')"
    """
    if x.meta.get(_SAFE) == type_name:
        return x
    inner = _strip_casts(x)
    out: exp.Expr
    if x.meta.get(_SAFE) or _object_id_cast(x):
        # already an object id of another kind ('purchases'::regclass given to format_type):
        # its number, not its printed name (which would name the table's row type)
        out = cast_to(cast_to(x, "OID"), type_name)
    elif isinstance(inner, (exp.Placeholder, exp.Parameter, exp.Null)) or (
        isinstance(x, exp.Literal) and (not x.is_string or x.name.strip().isdigit())
    ):
        out = cast_to(x, type_name)  # an id: the cast reads no name, it can't raise "missing"
    elif isinstance(x, exp.Literal):
        out = _lookup(type_name, x)
    elif _reg_valued(inner):
        # a regproc column (pg_amproc.amproc ...) prints a name, not digits: it is an id
        out = cast_to(cast_to(x, "OID"), type_name)
    else:
        text = cast_to(x, "TEXT")
        digits = exp.RegexpLike(this=text.copy(), expression=exp.Literal.string("^[0-9]+$"))
        by_id = cast_to(cast_to(text.copy(), "OID"), type_name)
        out = exp.Case(
            ifs=[exp.If(this=digits, true=by_id)],
            default=_lookup(type_name, text),
        )
    out.meta[_SAFE] = type_name
    return out


def _object_id_cast(x: exp.Expr) -> bool:
    """``x`` is a cast to ``oid`` or to an object-identifier type (its value is a number)."""
    return isinstance(x, exp.Cast) and (
        cast_target(x) == "oid" or cast_target(x) in function_rules.GUARDED_CASTS
    )


def visible(kind: str, x: exp.Expr) -> exp.Expr:
    type_name = rules.KIND_TYPE[kind]
    if type_name in LOOKUP:
        typed = as_object(x, type_name)
    else:
        already = isinstance(x, exp.Cast) and cast_target(x) == type_name.lower()
        typed = x if already else cast_to(x, type_name)
    return fill(template(rules.VISIBLE[kind]), {"__x__": typed})


def att_visible(rel: exp.Expr, num: exp.Expr) -> exp.Expr:
    sql = "NOT EXISTS (SELECT 1 FROM dpsql_hidden_att AS h WHERE h.attrelid = __r__ AND h.attnum = __n__)"
    return fill(template(sql), {"__r__": cast_to(rel, "OID"), "__n__": num})


def column_visible(rel: exp.Expr, column: exp.Expr) -> exp.Expr:
    """The column (by name or number) exists in ``rel`` and is not hidden: a hidden column and a
    missing one are then alike (the caller answers NULL for both)."""
    sql = (
        "EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS va WHERE va.attrelid = __r__ "
        "AND NOT va.attisdropped AND (va.attname = __c__ OR CAST(va.attnum AS TEXT) = __c__) "
        "AND NOT EXISTS (SELECT 1 FROM dpsql_hidden_att AS h WHERE h.attrelid = va.attrelid "
        "AND h.attnum = va.attnum))"
    )
    return fill(template(sql), {"__r__": cast_to(rel, "OID"), "__c__": cast_to(column, "TEXT")})


def filtered_relation(schema: str, name: str) -> exp.Select:
    """The allowed catalog relation ``schema.name`` as a client may see it (a fresh copy)."""
    return _filtered_relation(schema, name).copy()


@lru_cache(maxsize=256)
def _filtered_relation(schema: str, name: str) -> exp.Select:
    """:func:`filtered_relation`, built once per relation (a function of the constant rules
    alone); never handed out."""
    source = exp.table_(name, db=schema, alias="t")
    if schema == "pg_catalog" and name == "pg_class":
        cols: list[exp.Expr] = [
            exp.alias_(_parsed(rules.PG_CLASS_BLANKED[c]).copy(), c)
            if c in rules.PG_CLASS_BLANKED
            else exp.column(c, table="t")
            for c in rules.PG_CLASS_COLUMNS
        ]
        where = template("t.oid IN (SELECT oid FROM dpsql_vis_rel)")
        return exp.select(*cols).from_(source).where(where)
    if schema == "pg_catalog" and (
        name in rules.EMPTY_RELATIONS
        or name.startswith(rules.EMPTY_PREFIXES)
        or rules.CATALOG_FILTERS.get(name) == "FALSE"
    ):
        return empty_relation(schema, name)
    return exp.select("*").from_(source).where(relation_filter(schema, name))


def empty_relation(schema: str, name: str) -> exp.Select:
    """The relation's columns (of its row type) and no row, read without any privilege on it
    (``pg_statistic`` and ``pg_user_mapping`` are readable by superusers only)."""
    row = exp.Anonymous(
        this="jsonb_populate_record",
        expressions=[
            cast_to(exp.null(), f"{schema}.{name}"),
            cast_to(exp.Literal.string("{}"), "JSONB"),
        ],
    )
    source = exp.Table(this=row, alias=exp.TableAlias(this=exp.to_identifier("r")))
    return exp.select("r.*").from_(source).where(exp.false())


def relation_filter(schema: str, name: str) -> exp.Expr:
    """The row filter of an allowed catalog relation (over its alias ``t``)."""
    filters = rules.CATALOG_FILTERS if schema == "pg_catalog" else rules.INFORMATION_SCHEMA_FILTERS
    return template(filters[name])


# -- visibility CTEs and templates ------------------------------------------------------------


# the parser's source positions (for error carets): a template's are of dpsql's own text, never
# shown, and copying their dicts was most of a copy's cost (copy.deepcopy of each node's meta)
_POSITIONS = ("line", "col", "start", "end")


@lru_cache(maxsize=256)
def _parsed(sql: str) -> exp.Expr:
    """``sql`` parsed once, without source positions; never handed out (copy it)."""
    tree = sqlglot.parse_one(sql, read="postgres")
    for node in tree.walk():
        meta = node._meta
        if meta is not None:
            for key in _POSITIONS:
                meta.pop(key, None)
            if not meta:
                node._meta = None
    return tree


def template(sql: str) -> exp.Expr:
    """A fresh copy of a constant SQL fragment, with dpsql's named predicates expanded."""
    return _expanded(sql).copy()


@lru_cache(maxsize=512)
def _expanded(sql: str) -> exp.Expr:
    """``sql`` parsed, its named predicates and filtered relations expanded, once (a function
    of the constant text alone); never handed out: :func:`template` copies it."""
    tree = _parsed(sql).copy()
    for node in list(tree.find_all(exp.Anonymous)):
        if node.name.lower().startswith("dpsql_named_"):
            body = rules.NAMED_PREDICATES[node.name.lower().removeprefix("dpsql_")]
            values = {f"__{i}__": a for i, a in enumerate(node.expressions, 1)}
            expanded = fill(template(body), values)
            if node is tree:
                return expanded
            node.replace(expanded)
    for table in list(tree.find_all(exp.Table)):
        if table.name in _FILTERED:
            sub = exp.Subquery(
                this=filtered_relation("pg_catalog", table.name.strip("_")),
                alias=table.args.get("alias"),
            )
            table.replace(sub)
    return tree


# Placeholders in templates for a catalog relation filtered as a client would see it.
_FILTERED = frozenset(
    f"__{n}__"
    for n in (
        "pg_constraint",
        "pg_statistic_ext",
        "pg_trigger",
        "pg_rewrite",
        "pg_policy",
        "pg_attrdef",
    )
)


def fill(tree: exp.Expr, values: Mapping[str, exp.Expr]) -> exp.Expr:
    for col in list(tree.find_all(exp.Column)):
        if not col.table and col.name in values:
            col.replace(values[col.name].copy())
    return tree


def _regclass_of(qualified: str) -> exp.Expr:
    schema, _, name = qualified.partition(".")
    quoted = ".".join('"' + p.replace('"', '""') + '"' for p in (schema, name))
    return exp.Anonymous(this="to_regclass", expressions=[exp.Literal.string(quoted)])


def attach_visibility(query: exp.Expr, policy: Policy) -> None:
    """Prepend the visibility CTEs (:data:`.visibility.VISIBILITY_CTES`, over the policy's
    tables and columns) to ``query``'s WITH."""
    shown = tuple((q, tuple(t.columns)) for q, t in policy.tables.items())
    ctes = [cte.copy() for cte in _visibility_ctes(shown, tuple(policy.public_tables))]
    existing = query.args.get("with_")
    if existing is not None:
        existing.set("expressions", ctes + list(existing.expressions))
    else:
        query.set("with_", exp.With(expressions=ctes))


@lru_cache(maxsize=64)
def _visibility_ctes(
    tables: tuple[tuple[str, tuple[str, ...]], ...], public: tuple[str, ...]
) -> tuple[exp.CTE, ...]:
    """The visibility CTEs for the private ``tables`` (with their columns) and ``public``
    tables, built once per such policy; never handed out (:func:`attach_visibility` copies)."""
    oid = exp.column("oid", table="c")
    names = [q for q, _ in tables] + list(public)
    visible: exp.Expr = (
        exp.In(this=oid, expressions=[_regclass_of(q) for q in names]) if names else exp.false()
    )
    hidden: list[exp.Expr] = []
    for qualified, columns in tables:
        cols = [exp.Literal.string(c) for c in columns]
        cond = exp.and_(
            exp.EQ(this=exp.column("attrelid", table="a"), expression=_regclass_of(qualified)),
            exp.GT(this=exp.column("attnum", table="a"), expression=exp.Literal.number(0)),
        )
        if cols:
            cond = exp.and_(
                cond, exp.not_(exp.In(this=exp.column("attname", table="a"), expressions=cols))
            )
        hidden.append(exp.paren(cond))
    values = {
        "__visible_tables__": visible,
        "__hidden_columns__": exp.or_(*hidden) if hidden else exp.false(),
    }
    return tuple(
        exp.CTE(this=fill(template(body), values), alias=exp.TableAlias(this=exp.to_identifier(n)))
        for n, body in visibility.VISIBILITY_CTES
    )
