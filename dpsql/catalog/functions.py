"""Functions and casts in catalog queries: the allow list check, blanking of data-measuring
functions, the set_config/current_setting special cases, and the guards that make object-id
arguments NULL unless the object is visible (see :mod:`dpsql.catalog.check`)."""

from __future__ import annotations

from sqlglot import exp

from dpsql.catalog import function_rules, missing, rules
from dpsql.catalog.build import (
    LOOKUP,
    as_object,
    att_visible,
    cast_target,
    cast_to,
    column_visible,
    fill,
    qualified_call,
    replace_call,
    template,
    visible,
)
from dpsql.catalog.objects import OBJECT_FILTERS, describe_guard
from dpsql.errors import PrivacyViolation, UndefinedFunction, UnsupportedSql
from dpsql.sql.names import function_name
from dpsql.sql.nodes import POSTGRES

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
    "pg_statistic_ext": "stx",
    **{c: c for c in OBJECT_FILTERS if c not in ("pg_database", "pg_tablespace")},
}
# Shared catalogs: obj_description reads pg_description, which holds no comment on them.
_OBJ_DESCRIPTION_FREE = frozenset({"pg_database", "pg_tablespace"})


def _qualifier(node: exp.Expr) -> str | None:
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return (
            parent.this.sql(POSTGRES).lower()
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
            f"function {qual}.{_display_name(node)}() is not allowed through dpsql",
            hint="a statement that reads no private table may call PostgreSQL's built-in "
            "functions only",
        )
    if isinstance(node, exp.Cast):
        target = cast_target(node)
        kind = node.to.args.get("kind") if isinstance(node.to, exp.DataType) else None
        if isinstance(kind, exp.Dot) and ident_name(kind.this) != "pg_catalog":
            raise PrivacyViolation(
                f"casts to {kind.sql('postgres')} are not allowed in a catalog query",
                hint="cast to built-in types only",
            )
        if target.lstrip("_").split("[")[0] == "aclitem":
            # 'ann=r/bob'::aclitem reads role names: "role does not exist" is an oracle
            raise PrivacyViolation(
                "casts to aclitem are not allowed in a catalog query",
                hint="access-control lists read as NULL through dpsql; use has_table_privilege()",
            )
        element = reg_element(target)
        if element is not None and (
            element in function_rules.GUARDED_CASTS or element == "regrole"
        ):
            # '{16398}'::regclass[] would print the names of hidden relations (and raise only
            # for missing names): arrays of guarded object ids are refused outright
            raise PrivacyViolation(
                f"casts to arrays of {element} are not allowed in a catalog query",
                hint=f"cast each element instead: SELECT x::{element} FROM unnest(...) AS x",
            )
        if (
            target.startswith("reg")
            and target not in set(function_rules.GUARDED_CASTS) | function_rules.ALLOWED_CASTS
        ):
            raise PrivacyViolation(
                f"casts to {target} are not allowed in a catalog query",
                hint="use regclass, regtype, regnamespace, regproc or regrole",
            )
        return
    if not isinstance(node, exp.Anonymous):
        if type(node).__name__ not in SAFE_NODES:
            raise UnsupportedSql(
                f"function {_display_name(node)}() is not allowed through dpsql",
                hint="a statement that reads no private table may call the catalog and "
                "string/array functions that clients use (format_type, pg_get_expr, "
                "obj_description, ...)",
            )
        return
    name = node.name.lower()
    if name in function_rules.STAT_RECORDS:
        hint = "the pg_stat_* views read as empty and pg_stat_get_* counters as NULL"
        if name == "pg_stat_get_activity":
            hint = f"SELECT * FROM pg_stat_activity lists your own sessions on this server; {hint}"
        raise UnsupportedSql(
            f"function {name}() is not available through dpsql: it returns rows of the "
            "server's activity and statistics, which dpsql does not show",
            hint=hint,
        )
    if name in function_rules.BLANKED_FUNCTIONS or name.startswith(function_rules.BLANKED_PREFIXES):
        t = function_rules.BLANKED_FUNCTIONS.get(name) or function_rules.BLANKED_TYPES.get(name)
        null: exp.Expr = cast_to(exp.null(), t or "BIGINT")
        call = qualified_call(node)  # PostgreSQL names its column after the function
        if isinstance(call.parent, exp.Select) and call.arg_key == "expressions":
            null = exp.alias_(null, name, quoted=True)
        elif isinstance(call.parent, exp.Table) and not call.parent.args.get("alias"):
            call.parent.set("alias", exp.TableAlias(this=exp.to_identifier(name, quoted=True)))
        replace_call(node, null)
    elif name == "set_config":
        _emulate_set_config(node)
    elif name == "current_setting":
        _check_current_setting(node)
    elif name == "obj_description":
        _obj_description_kind(node)
    elif name in function_rules.REFUSED_FUNCTIONS:
        raise PrivacyViolation(
            f"function {name} is not available through dpsql",
            hint=function_rules.REFUSED_FUNCTIONS[name],
        )
    elif (
        name not in function_rules.ALLOWED_FUNCTIONS
        and name not in function_rules.GUARDED_FUNCTIONS
    ):
        raise PrivacyViolation(
            f"function {name}() is not allowed through dpsql",
            hint="a statement that reads no private table may call the catalog and "
            "string/array functions that clients use (format_type, pg_get_expr, "
            "obj_description, has_table_privilege, ...)",
        )


def reg_element(target: str) -> str | None:
    """``_regclass`` / ``regclass[]`` (an array of object ids) -> ``regclass``; else None."""
    base = target.lstrip("_").split("[")[0]
    return base if base != target and base.startswith("reg") else None


def _display_name(node: exp.Func) -> str:
    return function_name(node)


def _literal_text(node: exp.Expr | None) -> str | None:
    """The text of a string literal, also under casts (``'jit'::text``, a bound ``$1::VARCHAR``)."""
    while isinstance(node, exp.Cast):
        node = node.this
    return node.name if isinstance(node, exp.Literal) and node.is_string else None


def _emulate_set_config(node: exp.Anonymous) -> None:
    args = node.expressions
    name = _literal_text(args[0]) if args else None
    if len(args) != 3 or name is None or name.lower() not in function_rules.EMULATED_SET_CONFIG:
        raise PrivacyViolation(
            "set_config() is not allowed in a catalog query",
            hint="change settings with SET; dpsql accepts SET for session settings",
        )
    replace_call(node, cast_to(args[1], "TEXT"))


def _check_current_setting(node: exp.Anonymous) -> None:
    """Literal names are checked here; a bound or computed name (psql ``\\dconfig`` reads
    ``current_setting(s.name)``) is checked upstream (NULL when denied)."""
    args = node.expressions
    if args and len(args) <= 2:
        inner = args[0]
        while isinstance(inner, exp.Cast):
            inner = inner.this
        if not isinstance(inner, (exp.Literal, exp.Null)):
            lowered = exp.Lower(this=cast_to(args[0].copy(), "TEXT"))
            denied = exp.or_(
                *(
                    exp.Like(this=lowered.copy(), expression=exp.Literal.string(f"%{w}%"))
                    for w in function_rules.DENIED_SETTING_WORDS
                )
            )
            allowed = exp.In(
                this=lowered.copy(),
                expressions=[
                    exp.Literal.string(n) for n in sorted(function_rules.ALLOWED_SETTINGS)
                ],
            )
            denied = exp.or_(
                denied,
                exp.In(
                    this=lowered.copy(),
                    expressions=[
                        exp.Literal.string(n) for n in sorted(function_rules.DENIED_SETTINGS)
                    ],
                ),
            )
            ok = exp.or_(allowed, exp.not_(exp.paren(denied)))
            call = qualified_call(node).copy()
            replace_call(node, exp.Case(ifs=[exp.If(this=ok, true=call)]))
            return
    inner = args[0] if args else None
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, exp.Null):
        return  # a parameter described before it is bound: current_setting(NULL) is NULL
    name = _literal_text(args[0]) if args else None
    if name is None or (
        name.lower() not in function_rules.ALLOWED_SETTINGS
        and (
            any(w in name.lower() for w in function_rules.DENIED_SETTING_WORDS)
            or name.lower() in function_rules.DENIED_SETTINGS
        )
    ):
        raise PrivacyViolation(
            f"current_setting({args[0].sql('postgres') if args else ''}) is not allowed",
            hint="read ordinary settings by their literal name, e.g. current_setting('TimeZone')",
        )


def _obj_description_kind(node: exp.Anonymous) -> str | None:
    args = node.expressions
    if not args or len(args) > 2:
        n = len(args)
        raise UndefinedFunction(
            f"function obj_description with {n} argument{'' if n == 1 else 's'} does not exist",
            hint="call obj_description(oid, 'pg_class')",
        )
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
    if _literal_text(args[1]) is not None:
        return "none"  # a catalog whose objects the analyst never sees: no comment, as if none
    raise PrivacyViolation(
        "obj_description() needs a literal catalog name such as 'pg_class'",
        hint="call obj_description(oid, 'pg_class')",
    )


def guard(node: exp.Func) -> bool:
    """Make object-id arguments NULL unless the object is visible; True when a guard was added.

    Names are looked up without errors (:func:`~dpsql.catalog.build.as_object`), so a hidden
    object and a missing one answer alike: NULL, never "does not exist" for one of them only.
    """
    if isinstance(node, exp.Cast):
        target = cast_target(node)
        kind = function_rules.GUARDED_CASTS.get(target)
        if kind is None:
            return False
        value = as_object(node.this.copy(), target.upper())
        guarded = exp.Case(
            ifs=[exp.If(this=visible(kind, value.copy()), true=value)],
            default=missing.missing_name(node.this, target.upper()),  # 'x'::regclass: 42P01
        )
        guarded.meta.update(value.meta)  # already a safe object id for an enclosing guard
        node.replace(guarded)
        return True
    if not isinstance(node, exp.Anonymous):
        return False
    name = node.name.lower()
    if name in function_rules.GUARDED_RESULTS:
        kind = function_rules.GUARDED_RESULTS[name]
        call = qualified_call(node)
        guarded = exp.Case(ifs=[exp.If(this=visible(kind, call.copy()), true=call.copy())])
        call.replace(guarded)
        return True
    if name in function_rules.PRIVILEGE_ARGS:
        return _guard_privilege(node, name)
    if name == "pg_get_serial_sequence":
        return _guard_serial_sequence(node)
    if name == "has_database_privilege":
        return _guard_database(node)
    if name == "pg_describe_object":
        return _guard_describe(node)
    if name == "obj_description":
        kind = _obj_description_kind(node)
        index = 0
    elif name in function_rules.GUARDED_FUNCTIONS:
        index, kind = function_rules.GUARDED_FUNCTIONS[name]
    else:
        return False
    args = node.expressions
    if kind is None or index >= len(args):
        return False
    arg = args[index]
    type_name = rules.KIND_TYPE[kind]
    then = (as_object if type_name in LOOKUP else cast_to)(arg.copy(), type_name)
    cond = visible(kind, then.copy())
    if name == "col_description" and len(args) > 1:
        cond = exp.and_(cond, att_visible(then.copy(), args[1].copy()))
    # pg_get_viewdef('v') reads a name (its text form): PostgreSQL's 42P01 when missing
    named = None
    if name == "pg_get_viewdef" and (gone := missing.missing_name(arg, type_name)) is not None:
        # a listed view whose definition is withheld keeps NULL; one not listed is missing
        named = exp.Case(ifs=[exp.If(this=visible("rel", then.copy()), true=exp.null())],
                         default=gone)  # fmt: skip
    if name == "format_type":  # no such type (hidden or missing): PostgreSQL's '???'
        named = exp.Case(
            ifs=[exp.If(this=exp.not_(exp.Is(this=arg.copy(), expression=exp.null())),
                        true=cast_to(cast_to(exp.Literal.number(1), "OID"), type_name))]
        )  # fmt: skip
    arg.replace(exp.Case(ifs=[exp.If(this=cond, true=then.copy())], default=named))
    return True


def _guard_privilege(node: exp.Anonymous, name: str) -> bool:
    """has_*_privilege: the object (name or id) NULL unless visible, and for a column function
    the column too, so hidden and missing objects and columns all answer NULL."""
    kind, type_name, positions, with_column = function_rules.PRIVILEGE_ARGS[name]
    args = node.expressions
    pos = positions.get(len(args))
    if pos is None:
        return False
    obj = as_object(args[pos].copy(), type_name)
    cond = visible(kind, obj.copy())
    # a name written as a literal, missing or hidden: PostgreSQL's error for a missing one
    otherwise = missing.missing_name(args[pos], type_name)
    if with_column:
        cond = exp.and_(cond, column_visible(obj.copy(), args[pos + 1].copy()))
        otherwise = _column_missing(obj, args[pos], args[pos + 1], otherwise, type_name)
    args[pos].replace(exp.Case(ifs=[exp.If(this=cond, true=obj)], default=otherwise))
    return True


def _column_missing(
    obj: exp.Expr, table: exp.Expr, column: exp.Expr, otherwise: exp.Expr | None, type_name: str
) -> exp.Expr | None:
    """Where a table and its column are not both visible: the table's own failure (or NULL)
    when the table is not visible, else 42703 for a column named as a literal (NULL for one
    given by number, as PostgreSQL answers for a missing one)."""
    col = missing.missing_column(table, column, type_name)
    if col is None and otherwise is None:
        return None
    col = col if col is not None else exp.null()
    return exp.Case(ifs=[exp.If(this=visible("rel", obj.copy()), true=col)], default=otherwise)


def _guard_serial_sequence(node: exp.Anonymous) -> bool:
    """pg_get_serial_sequence('table', 'column'): NULL unless both are visible; a table or
    column named as a literal that is missing or hidden fails as a missing one does in
    PostgreSQL (42P01, 42703: :mod:`dpsql.catalog.missing`): hidden and missing stay alike."""
    args = node.expressions
    if len(args) != 2:
        return False
    rel = as_object(args[0].copy(), "REGCLASS")
    cond = exp.and_(visible("rel", rel.copy()), column_visible(rel.copy(), args[1].copy()))
    otherwise = _column_missing(
        rel, args[0], args[1], missing.missing_name(args[0], "REGCLASS", "TEXT"), "TEXT"
    )
    args[0].replace(
        exp.Case(ifs=[exp.If(this=cond, true=cast_to(args[0].copy(), "TEXT"))], default=otherwise)
    )
    return True


def _guard_describe(node: exp.Anonymous) -> bool:
    """pg_describe_object(classid, objid, subid): NULL unless the object (and for a column, the
    column) is visible, as PostgreSQL answers NULL for a missing object (psql ``\\dx+``)."""
    args = node.expressions
    if len(args) != 3:
        return False
    obj = cast_to(args[1].copy(), "OID")
    cond = fill(template(describe_guard()), {"__1__": args[0].copy(), "__2__": obj})
    cond = exp.and_(cond, att_visible(args[1].copy(), args[2].copy()))
    call = qualified_call(node)
    call.replace(exp.Case(ifs=[exp.If(this=cond, true=call.copy())]))
    return True


def _guard_database(node: exp.Anonymous) -> bool:
    """has_database_privilege: only the current database is visible (as in pg_database)."""
    args = node.expressions
    pos = {2: 0, 3: 1}.get(len(args))
    if pos is None:
        return False
    text = cast_to(args[pos].copy(), "TEXT")
    cond = template(
        "__x__ IN (current_database(), CAST((SELECT d.oid FROM pg_catalog.pg_database AS d "
        "WHERE d.datname = current_database()) AS TEXT))"
    )
    cond = fill(cond, {"__x__": text})
    otherwise = missing.missing_database(args[pos])  # 3D000, hidden or missing alike
    args[pos].replace(exp.Case(ifs=[exp.If(this=cond, true=args[pos].copy())], default=otherwise))
    return True


def ident_name(node: exp.Expr | None) -> str:
    if node is None:
        return ""
    if isinstance(node, exp.Identifier):
        text = str(node.this)
        return text if node.quoted else text.lower()
    return str(node.name).lower()
