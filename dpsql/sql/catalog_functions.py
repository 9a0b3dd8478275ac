"""Functions and casts in catalog queries: the allow list check, blanking of data-measuring
functions, the set_config/current_setting special cases, and the guards that make object-id
arguments NULL unless the object is visible (see :mod:`dpsql.sql.catalog`)."""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import PrivacyViolation, UnsupportedSql
from dpsql.sql import catalog_rules as rules
from dpsql.sql.catalog_sql import att_visible, cast_target, cast_to, visible

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")

# sqlglot's typed nodes for SQL constructs and plain functions that read nothing.
SAFE_NODES: frozenset[str] = frozenset(
    """
    And Or Not Xor Case If Cast Collate Coalesce Nullif Greatest Least Exists Any All
    Array ArrayAgg ArrayPosition ArraySize ArrayToString ArrayContains ArrayContainsAll
    ArrayOverlaps ArrayConcat ArrayAppend ArrayPrepend ArrayRemove ArrayFilter Unnest Explode
    ExplodingGenerateSeries GenerateSeries StringToArray Split SplitPart GroupConcat
    CurrentDatabase CurrentSchema CurrentSchemas CurrentUser SessionUser CurrentDate
    CurrentTime CurrentTimestamp Format Concat ConcatWs Substring Trim Upper Lower Length
    Replace Left Right Pad RegexpLike RegexpILike RegexpReplace RegexpExtract RegexpSplit
    StartsWith Count Min Max Sum Avg LogicalAnd LogicalOr RowNumber Rank DenseRank Abs Round
    Floor Ceil ToChar JSONObject JSONArray JSONArrayAgg JSONObjectAgg JSONBObjectAgg
    ParseJSON Extract Length Lag Lead First Last Distinct CurrentVersion
    """.split()
)

_OBJ_DESCRIPTION_KINDS = {
    "pg_class": "rel",
    "pg_namespace": "nsp",
    "pg_type": "type",
    "pg_proc": "proc",
    "pg_constraint": "con",
    "pg_trigger": "trigger",
    "pg_rewrite": "rule",
}
_OBJ_DESCRIPTION_FREE = frozenset(
    {"pg_database", "pg_tablespace", "pg_am", "pg_extension", "pg_language", "pg_collation"}
)


def _qualifier(node: exp.Expr) -> str | None:
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return (
            parent.this.sql("postgres").lower()
            if not isinstance(parent.this, exp.Identifier)
            else parent.this.name.lower()
        )
    if isinstance(parent, exp.Table) and parent.this is node:
        return parent.db.lower() or None
    return None


def check_function(node: exp.Func) -> None:
    """Refuse unlisted functions; blank the data-measuring ones; emulate set_config."""
    qual = _qualifier(node)
    if qual is not None and qual not in SYSTEM_SCHEMAS:
        raise PrivacyViolation(
            f"function {qual}.{_display_name(node)} is not allowed in a catalog query",
            hint="catalog queries may call PostgreSQL's built-in catalog functions only",
        )
    if isinstance(node, exp.Cast):
        target = cast_target(node)
        kind = node.to.args.get("kind") if isinstance(node.to, exp.DataType) else None
        if isinstance(kind, exp.Dot) and ident_name(kind.this) != "pg_catalog":
            raise PrivacyViolation(
                f"casts to {kind.sql('postgres')} are not allowed in a catalog query",
                hint="cast to built-in types only",
            )
        if (
            target.startswith("reg")
            and target not in set(rules.GUARDED_CASTS) | rules.ALLOWED_CASTS
        ):
            raise PrivacyViolation(
                f"casts to {target} are not allowed in a catalog query",
                hint="use regclass, regtype, regnamespace, regproc or regrole",
            )
        return
    if not isinstance(node, exp.Anonymous):
        if type(node).__name__ not in SAFE_NODES:
            raise UnsupportedSql(
                f"function {_display_name(node)} is not allowed in a catalog query",
                hint="catalog queries may call the catalog and string/array functions "
                "that clients use (format_type, pg_get_expr, obj_description, ...)",
            )
        return
    name = node.name.lower()
    if name in rules.BLANKED_FUNCTIONS or name.startswith(rules.BLANKED_PREFIXES):
        _replace_call(node, cast_to(exp.null(), rules.BLANKED_FUNCTIONS.get(name, "BIGINT")))
    elif name == "set_config":
        _emulate_set_config(node)
    elif name == "current_setting":
        _check_current_setting(node)
    elif name == "obj_description":
        _obj_description_kind(node)
    elif name not in rules.ALLOWED_FUNCTIONS and name not in rules.GUARDED_FUNCTIONS:
        raise PrivacyViolation(
            f"function {name} is not allowed in a catalog query",
            hint="catalog queries may call the catalog and string/array functions that "
            "clients use (format_type, pg_get_expr, obj_description, has_table_privilege, ...)",
        )


def _call_with_qualifier(node: exp.Func) -> exp.Expr:
    """The call with its ``pg_catalog.`` qualifier (the Dot node) when it has one."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return parent
    return node


def _replace_call(node: exp.Func, new: exp.Expr) -> None:
    """Replace a function call, with its ``pg_catalog.`` qualifier if it has one."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        parent.replace(new)
    else:
        node.replace(new)


def _display_name(node: exp.Func) -> str:
    return node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()


def _literal_text(node: exp.Expr | None) -> str | None:
    """The text of a string literal, also under casts (``'jit'::text``, a bound ``$1::VARCHAR``)."""
    while isinstance(node, exp.Cast):
        node = node.this
    return node.name if isinstance(node, exp.Literal) and node.is_string else None


def _emulate_set_config(node: exp.Anonymous) -> None:
    args = node.expressions
    name = _literal_text(args[0]) if args else None
    if len(args) != 3 or name is None or name.lower() not in rules.EMULATED_SET_CONFIG:
        raise PrivacyViolation(
            "set_config() is not allowed in a catalog query",
            hint="change settings with SET; dpsql accepts SET for session settings",
        )
    _replace_call(node, cast_to(args[1], "TEXT"))


def _check_current_setting(node: exp.Anonymous) -> None:
    """Literal names are checked here; a bound name is checked upstream (NULL when denied)."""
    args = node.expressions
    if args and isinstance(args[0], (exp.Placeholder, exp.Parameter, exp.Cast)):
        inner = args[0].this if isinstance(args[0], exp.Cast) else args[0]
        if isinstance(inner, (exp.Placeholder, exp.Parameter)):
            lowered = exp.Lower(this=cast_to(args[0].copy(), "TEXT"))
            denied = exp.or_(
                *(
                    exp.Like(this=lowered.copy(), expression=exp.Literal.string(f"%{w}%"))
                    for w in rules.DENIED_SETTING_WORDS
                )
            )
            call = _call_with_qualifier(node).copy()
            _replace_call(node, exp.Case(ifs=[exp.If(this=exp.not_(exp.paren(denied)), true=call)]))
            return
    inner = args[0] if args else None
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, exp.Null):
        return  # a parameter described before it is bound: current_setting(NULL) is NULL
    name = _literal_text(args[0]) if args else None
    if name is None or any(w in name.lower() for w in rules.DENIED_SETTING_WORDS):
        raise PrivacyViolation(
            f"current_setting({args[0].sql('postgres') if args else ''}) is not allowed",
            hint="read ordinary settings by their literal name, e.g. current_setting('TimeZone')",
        )


def _obj_description_kind(node: exp.Anonymous) -> str | None:
    args = node.expressions
    if len(args) == 1:
        return "rel"
    inner = args[1]
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, (exp.Placeholder, exp.Parameter, exp.Null)):
        return "any"  # the catalog is bound later: the object must be a visible one of any kind
    catalog = (_literal_text(args[1]) or "").lower().removeprefix("pg_catalog.")
    if catalog in _OBJ_DESCRIPTION_KINDS:
        return _OBJ_DESCRIPTION_KINDS[catalog]
    if catalog in _OBJ_DESCRIPTION_FREE:
        return None
    raise PrivacyViolation(
        "obj_description() needs a literal catalog name such as 'pg_class'",
        hint="call obj_description(oid, 'pg_class')",
    )


def guard(node: exp.Func) -> bool:
    """Make object-id arguments NULL unless the object is visible; True when a guard was added."""
    if isinstance(node, exp.Cast):
        target = cast_target(node)
        kind = rules.GUARDED_CASTS.get(target)
        if kind is None:
            return False
        value: exp.Expr = node.copy()
        if target in _LOOKUP_BY_NAME and _literal_text(node.this) is not None:
            # 'name'::regclass raises for a missing name but not for a hidden one: look it up
            # with to_regclass (NULL when missing) so both answer NULL alike
            value = exp.Anonymous(
                this=_LOOKUP_BY_NAME[target], expressions=[cast_to(node.this.copy(), "TEXT")]
            )
        guarded = exp.Case(ifs=[exp.If(this=visible(kind, value.copy()), true=value)])
        node.replace(guarded)
        return True
    if not isinstance(node, exp.Anonymous):
        return False
    name = node.name.lower()
    if name in rules.GUARDED_RESULTS:
        kind = rules.GUARDED_RESULTS[name]
        call = _call_with_qualifier(node)
        guarded = exp.Case(ifs=[exp.If(this=visible(kind, call.copy()), true=call.copy())])
        call.replace(guarded)
        return True
    if name in _PRIVILEGE_BY_TABLE and _guard_table_name(node, name):
        return True
    if name == "obj_description":
        kind = _obj_description_kind(node)
        index = 0
    elif name in rules.GUARDED_FUNCTIONS:
        index, kind = rules.GUARDED_FUNCTIONS[name]
    else:
        return False
    args = node.expressions
    if kind is None or index >= len(args):
        return False
    arg = args[index]
    cond = visible(kind, arg.copy())
    if name == "col_description" and len(args) > 1:
        cond = exp.and_(cond, att_visible(arg.copy(), args[1].copy()))
    then = cast_to(arg.copy(), rules.KIND_TYPE[kind])
    arg.replace(exp.Case(ifs=[exp.If(this=cond, true=then)]))
    return True


_LOOKUP_BY_NAME = {
    "regclass": "to_regclass",
    "regtype": "to_regtype",
    "regnamespace": "to_regnamespace",
    "regproc": "to_regproc",
    "regprocedure": "to_regprocedure",
    "regrole": "to_regrole",
}

# has_*_privilege functions whose table may be given by name: argument count -> table position.
_PRIVILEGE_BY_TABLE: dict[str, dict[int, int]] = {
    "has_table_privilege": {2: 0, 3: 1},
    "has_any_column_privilege": {2: 0, 3: 1},
    "has_column_privilege": {3: 0, 4: 1},
}


def _guard_table_name(node: exp.Anonymous, name: str) -> bool:
    """A table given by name: looked up with to_regclass (NULL, not an error, when missing) and
    NULL unless visible, so hidden and missing tables answer alike (no existence oracle)."""
    args = node.expressions
    pos = _PRIVILEGE_BY_TABLE[name].get(len(args))
    if pos is None or _literal_text(args[pos]) is None:
        return False  # an oid expression: the generic guard below applies
    oid = exp.Anonymous(this="to_regclass", expressions=[cast_to(args[pos].copy(), "TEXT")])
    args[pos].replace(exp.Case(ifs=[exp.If(this=visible("rel", oid.copy()), true=oid)]))
    return True


def ident_name(node: exp.Expr | None) -> str:
    if node is None:
        return ""
    if isinstance(node, exp.Identifier):
        text = str(node.this)
        return text if node.quoted else text.lower()
    return str(node.name).lower()
